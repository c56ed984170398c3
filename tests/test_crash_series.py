"""SIGKILL at every write of a run, the LoRA merged export and the end of the run included, then the
recovery a user would make (the same command while the folder holds no checkpoint, else --resume
RUN): every point ends bit for bit like the uninterrupted run, with the same files and nothing else
(no .tmp-*, .old-*, extra checkpoint, abandoned/ copy or write-test file). tests/_crash_series.py
does the killing (every write event counted: open for writing, rename, replace, remove, rmtree,
makedirs, fsync, ftruncate, a log line torn in half).

The suite runs a sample of 19 points for a 2-step LoRA run with --keep-checkpoints 1 (151 s
measured on a shared, heavily loaded 2-core machine): every other event of the run's tail (the last
checkpoint's manifest, `latest`, rename and prune, the LoRA export) and every 12th before it.
GMTS_CRASH_SERIES=all runs every event of the LoRA run and of a full fine-tuning run (99 + 75
points, each run once here through tests/_crash_series.py: all ended like the straight run; 5.5 and
about 8 minutes on the same machine).
"""
import json
import os
import subprocess
import sys

import pytest

from test_bad_input import ENV, ROOT, train_args

ALL = os.environ.get("GMTS_CRASH_SERIES") == "all"
LORA = ["--lora-rank", "4", "--lora-alpha", "8", "--no-gradient-checkpointing"]


def series(command, run, points):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "_crash_series.py")],
                          input=json.dumps({"command": [str(a) for a in command], "run": str(run),
                                            "points": points}),
                          capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=1800,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def sample(events):
    """The points the suite runs: every other one of the last 26 events (for the 2-step LoRA run,
    from the last checkpoint's manifest to the end of the export), every 12th before them."""
    tail = events - 26
    return sorted(set(range(1, tail, 12)) | set(range(events, tail, -2)))


@pytest.mark.parametrize("kind", ["lora", "full"] if ALL else ["lora"])
def test_a_kill_at_every_write_ends_like_the_straight_run(digit_model_dir, digit_data, tmp_path,
                                                          kind):
    run = tmp_path / "run"
    command = train_args(digit_model_dir, digit_data, run, "--keep-checkpoints", "1",
                         *(LORA if kind == "lora" else []))
    [reference] = series(command, run, None)
    assert reference["rc"] == 0, reference["stderr"]
    events, expected = reference["events"], reference["digest"]
    assert not any(n.startswith((".tmp", ".old", "abandoned", ".gmts-write-test"))
                   or "/." in n for n in expected if n != ".lock"), sorted(expected)
    if kind == "lora":
        assert "final-merged/model.safetensors" in expected
    points = list(range(1, events + 1)) if ALL else sample(events)
    failures = []
    for record in series(command, run, points):
        tries = record["recovery"]
        if not record["killed"]:
            failures.append((record["point"], "not killed"))
        elif not tries or tries[-1]["rc"] != 0:
            failures.append((record["point"], "never completed",
                             [t["stderr"].strip().splitlines()[-1:] for t in tries]))
        elif len(tries) > 1:
            failures.append((record["point"], "needed more than one recovery",
                             [t["stderr"][-300:] for t in tries]))
        elif record["digest"] != expected:
            got = record["digest"]
            failures.append((record["point"], "differs", {
                "extra": sorted(set(got) - set(expected)),
                "missing": sorted(set(expected) - set(got)),
                "changed": sorted(k for k in expected if k in got and got[k] != expected[k])}))
    assert not failures, failures
