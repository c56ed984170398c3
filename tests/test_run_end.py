"""The end of a run is as safe as its middle (issue 55, kind 3): a signal in the last step says what
is left and `--resume` does it (the LoRA export) instead of exiting 2; a run killed after a metrics
line but before its first checkpoint is taken again by its own command, its history one line per
step; a resume in place removes what interrupted writes and prunes left (.old-step-N, checkpoints
beyond --keep-checkpoints, a start-up write test, config.json.tmp) and keeps one copy of a step in
abandoned/. tests/test_crash_series.py kills a run at every write.
"""
import json
import os
import shutil
import signal

import pytest

from conftest import run_python
from gmts.run import checkpoint as ckpt
from test_bad_input import ROOT, read_jsonl, train_args
from test_run_history import ok, steps_of, train
from test_run_safety import same_metrics

LORA = ["--lora-rank", 4, "--lora-alpha", 8, "--no-gradient-checkpointing"]


def run_with(code_before, args):
    """train.main(args) in a fresh interpreter, after `code_before` (which may patch the
    checkpoint writer; `calls` counts its calls)."""
    child = f"""
import os, signal, sys
sys.path.insert(0, {ROOT!r})
import train
from gmts.run import checkpoint as ckpt
real, calls = ckpt.save_checkpoint, []
{code_before}
train.main({[str(a) for a in args]!r})
"""
    return run_python(["-c", child], timeout=600)


@pytest.fixture(scope="module")
def straight(digit_model_dir, digit_data, tmp_path_factory):
    """The uninterrupted 2-step runs, full fine-tuning and LoRA, to compare with."""
    d = tmp_path_factory.mktemp("straight")
    for result in train(train_args(digit_model_dir, digit_data, d / "full"),
                        train_args(digit_model_dir, digit_data, d / "lora", *LORA)):
        ok(result)
    return d


# --------------------------------------------------------------------------------------------------
# A signal in the last step.

@pytest.mark.parametrize("kind", ["full", "lora"])
def test_a_signal_in_the_last_step_says_what_is_left_and_resume_does_it(
        digit_model_dir, digit_data, straight, tmp_path, kind):
    out = tmp_path / "run"
    args = train_args(digit_model_dir, digit_data, out, *(LORA if kind == "lora" else []))
    signal_in_last_save = f"""
def save(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:                    # step 2 of 2: arrives while its checkpoint is written
        os.kill(os.getpid(), {int(signal.SIGTERM)})
    return real(*args, **kwargs)
ckpt.save_checkpoint = save
"""
    proc = run_with(signal_in_last_save, args)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr[-2000:]
    said = proc.stdout.strip().splitlines()[-1]
    assert said.startswith("gmts: stopped by signal 15 after step 2; ")
    assert steps_of(out) == [1, 2]
    if kind == "full":
        # nothing is left: no "resume with --resume" that would then exit 2
        assert "resume with --resume" not in said and "the run is complete" in said
    else:
        assert f"final-merged/ was not written: --resume {out} writes it" in said
        assert not (out / "final-merged").exists()
    [resumed] = train(["--resume", out])
    ok(resumed)
    assert resumed["stdout"].strip().splitlines()[-1].startswith(
        f"gmts: the run in {out} is complete at step 2")
    assert steps_of(out) == [1, 2]
    assert same_metrics(read_jsonl(out / "metrics.jsonl"),
                        read_jsonl(straight / kind / "metrics.jsonl"))
    if kind == "lora":
        merged = out / "final-merged"
        assert ckpt.manifest_problem(str(merged), required=None) is None
        assert json.loads((merged / "gmts_export.json").read_text()) == {"step": 2}
        with open(merged / "model.safetensors", "rb") as a, open(
                straight / "lora" / "final-merged" / "model.safetensors", "rb") as b:
            assert a.read() == b.read()
        assert not (out / ".tmp-final-merged").exists()
    # once complete, a resume says so and changes nothing
    before = sorted(os.listdir(out))
    ok(train(["--resume", out])[0])
    assert sorted(os.listdir(out)) == before and steps_of(out) == [1, 2]


# --------------------------------------------------------------------------------------------------
# A kill after a metrics line, before the first checkpoint.

def test_a_kill_before_the_first_checkpoint_is_taken_by_the_same_command(
        digit_model_dir, digit_data, straight, tmp_path):
    out = tmp_path / "run"
    args = train_args(digit_model_dir, digit_data, out, "--save-every", 2)
    killed_at_the_first_save = f"""
def save(*args, **kwargs):
    os.kill(os.getpid(), {int(signal.SIGKILL)})
ckpt.save_checkpoint = save
"""
    proc = run_with(killed_at_the_first_save, args)
    assert proc.returncode == -signal.SIGKILL
    assert steps_of(out) == [1, 2] and not (out / "checkpoints").exists()
    # --resume has no checkpoint to continue from: one line naming the command that does
    [resume] = train(["--resume", out])
    assert resume["rc"] == 2 and "run its first command again" in resume["stderr"]
    # another command's run is not replaced without --overwrite
    [other] = train(train_args(digit_model_dir, digit_data, out, "--save-every", 2, "--seed", 4))
    assert other["rc"] == 2 and "already holds a run" in other["stderr"]
    # the same command starts the run over: each step logged once, as in the straight run
    [again] = train(args)
    ok(again)
    assert "stopped before its first checkpoint" in again["stderr"]
    assert steps_of(out) == [1, 2]
    assert same_metrics(read_jsonl(out / "metrics.jsonl"),
                        read_jsonl(straight / "full" / "metrics.jsonl"))


# --------------------------------------------------------------------------------------------------
# Leftovers.

def test_a_resume_at_the_end_removes_every_leftover(digit_model_dir, digit_data, tmp_path):
    out = tmp_path / "run"
    ok(train(train_args(digit_model_dir, digit_data, out, "--keep-checkpoints", 5))[0])
    root = out / "checkpoints"
    # a kill in a prune, before a save's prune, in a start-up write test, in config.json's write
    shutil.copytree(root / "step-000001", root / ".old-step-000001")
    (out / ".gmts-write-test-abc123").write_text("")
    (out / "config.json.tmp").write_text("{")
    ok(train(["--resume", out, "--keep-checkpoints", 1])[0])
    assert sorted(os.listdir(root)) == ["latest", "step-000002"]
    assert sorted(os.listdir(out)) == [".lock", "checkpoints", "config.json", "metrics.jsonl",
                                       "samples.jsonl"]


def test_abandoned_keeps_one_copy_of_a_step(digit_model_dir, digit_data, tmp_path):
    out = tmp_path / "run"
    ok(train(train_args(digit_model_dir, digit_data, out, "--steps", 3, "--keep-checkpoints",
                        5))[0])
    for _ in range(3):
        # `latest` one step behind its newest checkpoint (a copy, an older gmts's kill)
        (out / "checkpoints" / "latest").write_text("step-000002\n")
        ok(train(["--resume", out])[0])
        assert steps_of(out) == [1, 2, 3]
    assert os.listdir(out / "abandoned") == ["after-step-000002"]
    assert os.listdir(out / "abandoned" / "after-step-000002" / "checkpoints") == ["step-000003"]
