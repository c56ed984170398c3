"""Nothing lost, nothing cryptic: every bad flag, file and fault ends in one line, before the work
starts.

The table tests run every bad value through the real command lines (train.py, eval.py; batched by
tests/_cli_batch.py, which runs each case as `python SCRIPT ARGS` would, in a fork of one warm
process) and assert: a non-zero exit, exactly one line on stderr naming the flag or file:line, no
traceback, and nothing of an existing run changed. Then the faults: a fresh run into a run's folder,
a torn log line, a damaged checkpoint, a full disk.
"""
import contextlib
import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import ENV, run_batch, run_python  # noqa: F401 (ENV: for the modules importing it)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(script, args):
    return run_python([script, *args], timeout=600)



def snapshot(folder):
    """Every file under `folder` with its size, content hash and modification time."""
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, folder)] = (os.path.getsize(path),
                                                      hashlib.sha256(fh.read()).hexdigest(),
                                                      os.stat(path).st_mtime_ns)
    return out


def read_jsonl(path):
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def train_args(model_dir, data, out, *extra):
    return ["--model", model_dir, "--data", data, "--steps", "2", "--prompts-per-step", "2",
            "--group-size", "4", "--max-new-tokens", "3", "--micro-batch-size", "4", "--device",
            "cpu", "--output-dir", str(out), "--lr", "1e-3", "--seed", "3", "--save-every", "1",
            *extra]


@contextlib.contextmanager
def tmpfs(path, options):
    """A small tmpfs at `path` where this machine allows mounting one (root in a privileged
    container), else None."""
    os.makedirs(path, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True,
            check=False).returncode != 0:
        yield None
        return
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], capture_output=True, check=False)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Bad data files, a plain file to put paths under, and a read-only folder (None where none can
    be made)."""
    d = tmp_path_factory.mktemp("inputs")
    (d / "surrogate.jsonl").write_text('{"question": "Say 1", "answer": "1"}\n{"question": '
                                       '"x\\ud800", "answer": "1"}\n')
    (d / "latin1.jsonl").write_bytes(b'{"question": "Say 1", "answer": "1"}\n{"question": '
                                     b'"caf\xe9", "answer": "1"}\n')
    (d / "a-file").write_text("not a folder\n")
    ro = d / "read-only"
    ro.mkdir()
    if os.geteuid() != 0:
        os.chmod(ro, 0o555)
        yield d, ro
        os.chmod(ro, 0o755)
        return
    with tmpfs(ro, "ro,size=64k") as mounted:
        yield d, mounted


@pytest.fixture(scope="module")
def finished_run(digit_model_dir, digit_data, tmp_path_factory):
    """A real 2-step run with a checkpoint per step: the run that no bad command may touch."""
    out = tmp_path_factory.mktemp("runs") / "done"
    proc = run("train.py", train_args(digit_model_dir, digit_data, out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def check_one_line(result, expected):
    err = result["stderr"] if isinstance(result, dict) else result.stderr
    rc = result["rc"] if isinstance(result, dict) else result.returncode
    assert rc != 0, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert expected in lines[0], (expected, lines[0])
    return lines[0]


TRAIN_FLAG_CASES = [
    (["--temperature", "nan"], "--temperature"), (["--temperature", "inf"], "--temperature"),
    (["--beta", "-1"], "--beta"), (["--beta", "nan"], "--beta"),
    (["--overlong-penalty", "nan"], "--overlong-penalty"),
    (["--weight-decay", "nan"], "--weight-decay"), (["--adam-beta1", "2"], "--adam-beta1"),
    (["--adam-beta2", "1"], "--adam-beta2"), (["--seed", "-1"], "--seed"),
    (["--seed", str(2**64)], "--seed"), (["--device", "tpu"], "--device"),
    (["--dtype", "float8"], "--dtype"), (["--lr", "inf"], "--lr"), (["--lr", "0"], "--lr"),
    (["--warmup-steps", "-5"], "--warmup-steps"), (["--eps-low", "-0.5"], "--eps-low"),
    (["--eps-high", "nan"], "--eps-high"), (["--max-grad-norm", "nan"], "--max-grad-norm"),
    (["--max-grad-norm", "-1"], "--max-grad-norm"), (["--save-every", "-1"], "--save-every"),
    (["--eval-every", "-1"], "--eval-every"), (["--eval-every", "2"], "--eval-data"),
    (["--lora-rank", "-4"], "--lora-rank"), (["--lora-alpha", "nan"], "--lora-alpha"),
    (["--max-new-tokens", "100000000"], "--max-new-tokens"),
    (["--max-new-tokens", "0"], "--max-new-tokens"),
    (["--mini-batch-size", "3"], "--mini-batch-size"),
    (["--micro-batch-size", "3"], "--micro-batch-size"), (["--ratio", "nan"], "--ratio"),
    (["--steps", "0"], "--steps"), (["--keep-checkpoints", "0"], "--keep-checkpoints"),
    (["--log-samples", "-1"], "--log-samples"),
    (["--rollout-batch-size", "-1"], "--rollout-batch-size"),
    (["--overlong-buffer", "-1"], "--overlong-buffer"),
    (["--eval-temperature", "nan"], "--eval-temperature"),
    (["--task-options", "[1]"], "--task-options"), (["--preset", "nope"], "--preset"),
    (["--max-prompt-tokens", "0"], "--max-prompt-tokens"), (["--limit", "-1"], "--limit"),
]
if not torch.cuda.is_available():
    TRAIN_FLAG_CASES.append((["--device", "cuda"], "--device"))

EVAL_FLAG_CASES = [
    (["--bootstrap", "0"], "--bootstrap"), (["--bootstrap", "-5"], "--bootstrap"),
    (["--seed", "-1"], "--seed"), (["--temperature", "nan"], "--temperature"),
    (["--temperature", "-1"], "--temperature"), (["--top-p", "0"], "--top-p"),
    (["--top-k", "-1"], "--top-k"), (["--samples", "0"], "--samples"),
    (["--repeat", "0"], "--repeat"), (["--batch-size", "0"], "--batch-size"),
    (["--limit", "-1"], "--limit"), (["--max-new-tokens", "100000000"], "--max-new-tokens"),
    (["--max-prompt-tokens", "-1"], "--max-prompt-tokens"), (["--device", "tpu"], "--device"),
    (["--dtype", "float8"], "--dtype"), (["--data-seed", "-1"], "--data-seed"),
    (["--task-options", "{"], "--task-options"),
]


def test_every_bad_flag_is_one_line_before_anything_loads(digit_model_dir, digit_data, finished_run,
                                                          files,
                                                           tmp_path):
    d, read_only = files
    before = snapshot(finished_run)
    fresh = tmp_path / "fresh"
    cases, expected = [], []
    for flags, message in TRAIN_FLAG_CASES:
        cases.append(("train.py", train_args(digit_model_dir, digit_data, fresh, *flags)))
        expected.append(message)
    for flags, message in EVAL_FLAG_CASES:
        cases.append(("eval.py", ["--model", digit_model_dir, "--data", digit_data, "--output",
                                  str(tmp_path / "eval" / "r.json"), "--quiet", "--max-new-tokens",
                                  "8", *flags]))
        expected.append(message)
    # Output paths: a file, a path under a file, a read-only folder.
    bad_outputs = [str(d / "a-file"), str(d / "a-file" / "run")] + (
        [str(read_only / "run")] if read_only else [])
    for out in bad_outputs:
        cases.append(("train.py", train_args(digit_model_dir, digit_data, out)))
        expected.append("--output-dir")
    eval_outputs = [str(tmp_path), str(d / "a-file" / "r.json")] + (
        [str(read_only / "r.json")] if read_only else [])
    for out in eval_outputs:
        cases.append(
            ("eval.py",
             ["--model", digit_model_dir, "--data", digit_data, "--output", out, "--quiet",
                                  "--max-new-tokens", "8"]))
        expected.append("--output")
    # The finished run: a fresh run into it, and resumes that cannot go on.
    run_cases = [
        (train_args(digit_model_dir, digit_data, finished_run), f"--resume {finished_run}"),
        # before its last step; at it into another folder (in place, a resume at the last step
        # finishes the run: tests/test_run_end.py)
        (["--resume", str(finished_run), "--steps", "1"], "--steps"),
        (["--resume", str(finished_run / "checkpoints" / "step-000002"), "--steps", "2",
          "--output-dir", str(tmp_path / "branch")], "--steps"),
        (["--resume", str(finished_run), "--steps", "3", "--lr", "0.5"], "--lr"),
        (["--resume", str(finished_run), "--steps", "3", "--selector", "gmts"], "--selector"),
        (["--resume", str(finished_run), "--steps", "3", "--micro-batch-size", "3"],
         "--micro-batch-size"),
        (["--resume", str(finished_run), "--steps", "3", "--temperature", "nan"], "--temperature"),
        (["--resume", str(tmp_path / "no-run")], "--resume"),
    ]
    for args, message in run_cases:
        cases.append(("train.py", args))
        expected.append(message)
    # Data that is valid JSON but no text (a lone surrogate), and a Latin-1 file: file:line in both
    # scripts.
    for name in ("surrogate.jsonl", "latin1.jsonl"):
        cases.append(("train.py", train_args(digit_model_dir, str(d / name), fresh)))
        expected.append(f"{d / name}:2")
        cases.append(("eval.py", ["--model", digit_model_dir, "--data", str(d / name), "--output",
                                  str(tmp_path / "eval" / "r.json"), "--quiet", "--max-new-tokens",
                                  "8"]))
        expected.append(f"{d / name}:2")

    results = run_batch(timeout=600, cases=cases)
    for (script, args), message, result in zip(cases, expected, results):
        line = check_one_line(result, message)
        # flags: usage errors, status 2
        if not message.startswith(str(d)):
            assert result["rc"] == 2, (script, args, line)
    assert not fresh.exists() and not (tmp_path / "eval").exists()
    assert snapshot(finished_run) == before


def test_the_batch_runner_matches_the_real_command_line(digit_model_dir, digit_data, finished_run,
                                                        tmp_path):
    cases = [
        ("train.py",
         train_args(digit_model_dir, digit_data, tmp_path / "x", "--temperature", "nan")),
             ("eval.py", ["--model", digit_model_dir, "--bootstrap", "0"])]
    for (script, args), batched in zip(cases, run_batch(timeout=600, cases=cases)):
        real = run(script, args)
        assert (real.returncode, real.stderr) == (batched["rc"], batched["stderr"])
        assert real.returncode == 2


def test_overwrite_replaces_a_run_only_when_asked(digit_model_dir, digit_data, finished_run,
                                                  tmp_path):
    run_dir = tmp_path / "copy"
    shutil.copytree(finished_run, run_dir)
    (run_dir / "notes.txt").write_text("mine\n")
    proc = run("train.py",
               train_args(digit_model_dir, digit_data, run_dir, "--steps", "1", "--save-every", "0",
                                      "--overwrite"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1]
    assert sorted(os.listdir(run_dir / "checkpoints")) == ["latest", "step-000001"]
    # only the run's own files are replaced
    assert (run_dir / "notes.txt").read_text() == "mine\n"
    assert "--overwrite: removed the previous run's" in proc.stderr


def test_resume_drops_a_torn_line_and_changes_micro_batch_size(digit_model_dir, digit_data,
                                                               finished_run, tmp_path):
    run_dir = tmp_path / "copy"
    shutil.copytree(finished_run, run_dir)
    with open(run_dir / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 3, "reward_me')                         # a write cut short by a crash
    proc = run("train.py", ["--resume", str(run_dir), "--steps", "3", "--micro-batch-size", "8"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "torn line" in proc.stderr
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3]
    assert json.loads((run_dir / "config.json").read_text())["micro_batch_size"] == 8


def test_resume_skips_a_damaged_checkpoint_and_cleans_leftovers(digit_model_dir, digit_data,
                                                                finished_run, tmp_path):
    from gmts.run import checkpoint as ckpt
    run_dir = tmp_path / "copy"
    shutil.copytree(finished_run, run_dir)
    ckpts = run_dir / "checkpoints"
    weights = ckpts / "step-000002" / "model.safetensors"
    # a truncated newest checkpoint
    os.truncate(weights, os.path.getsize(weights) // 2)
    damaged_size = os.path.getsize(weights)
    (ckpts / ".tmp-step-000003").mkdir()                               # a failed write
    (ckpts / ".old-step-000000").mkdir()                               # an interrupted prune
    proc = run("train.py", ["--resume", str(run_dir), "--steps", "3"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    skipped = [line for line in proc.stderr.splitlines() if "skipping damaged checkpoint" in line]
    assert len(skipped) == 1 and "step-000002" in skipped[0] and "truncated" in skipped[0]
    assert "resuming from" in proc.stdout and "step-000001 at step 1" in proc.stdout
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3]
    names = sorted(os.listdir(ckpts))
    assert ".tmp-step-000003" not in names and ".old-step-000000" not in names
    # The damaged checkpoint was replaced by the re-trained step 2, and kept aside, whole as it was.
    assert "damaged-step-000002" in names
    assert os.path.getsize(ckpts / "damaged-step-000002" / "model.safetensors") == damaged_size
    assert ckpt.checkpoint_problem(str(ckpts / "step-000002")) is None


def test_find_resumable_reports_every_kind_of_damage(finished_run, tmp_path):
    from gmts.run import checkpoint as ckpt
    run_dir = tmp_path / "copy"
    shutil.copytree(finished_run, run_dir)
    root = run_dir / "checkpoints"
    (root / "step-000002" / "trainer_state.pt").write_bytes(b"")
    (root / "step-000001" / "trainer_state.pt").write_bytes(b"garbage")
    notes = []
    with pytest.raises(ckpt.CheckpointError, match="no checkpoint there loads"):
        ckpt.find_resumable(str(run_dir), report=notes.append)
    # Both found by the manifest's sizes (a checkpoint without one would meet torch.load's "does not
    # load")
    assert (len(notes) == 2 and "trainer_state.pt is empty" in notes[0]
            and "trainer_state.pt is truncated" in notes[1])
    with pytest.raises(ckpt.CheckpointError, match="the checkpoint is damaged"):
        ckpt.find_resumable(str(root / "step-000002"))
    (root / "step-000001" / "model.safetensors").write_bytes(b"")
    assert ckpt.checkpoint_problem(str(root / "step-000001")) == "model.safetensors is empty"
    assert sorted(os.listdir(root)) == ["latest", "step-000001", "step-000002"]    # nothing deleted


def test_a_full_disk_mid_log_is_one_line_and_the_checkpoint_is_intact(
    digit_model_dir, digit_data, tmp_path):
    """The disk fills while the second step's metrics line is written: part of it lands, then ENOSPC
    (simulated in the child, so it runs anywhere). One line naming the file; the file keeps whole
    lines only; step 1's checkpoint loads and the run resumes from it."""
    out = tmp_path / "run"
    child = f"""
import errno, os, sys
sys.path.insert(0, {ROOT!r})
real, seen = os.write, []
def write(fd, data):
    if os.readlink(f"/proc/self/fd/{{fd}}").endswith("metrics.jsonl"):
        seen.append(fd)
        if len(seen) == 2:
            real(fd, bytes(data[:7]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return real(fd, data)
os.write = write
import train
train.main({train_args(digit_model_dir, digit_data, out, "--steps", "3")!r})
"""
    proc = run_python(["-c", child], timeout=600)
    line = check_one_line({"rc": proc.returncode, "stderr": "\n".join(
        x for x in proc.stderr.splitlines() if not x.startswith(("train:", "Writing")))},
                          str(out / "metrics.jsonl"))
    assert "No space left on device" in line and "step-000001" in line and "intact" in line
    assert (out / "metrics.jsonl").read_text().endswith("}\n")
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [1]
    from gmts.run import checkpoint as ckpt
    assert ckpt.checkpoint_problem(str(out / "checkpoints" / "step-000001")) is None
    proc = run("train.py", ["--resume", str(out), "--steps", "2"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [1, 2]


def test_a_log_line_on_a_full_disk_is_whole_or_absent(tmp_path, monkeypatch):
    from gmts.run import runlog
    path = tmp_path / "metrics.jsonl"
    runlog.append_jsonl(str(path), [{"step": 1}])
    real = os.write

    def half_then_full(fd, data):
        real(fd, bytes(data[:len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(SystemExit) as err:
        runlog.append_jsonl(str(path), [{"step": 2, "x": "y" * 100}])
    monkeypatch.undo()
    assert (str(path) in str(err.value.code) and "No space left" in str(err.value.code)
            and "\n" not in str(err.value.code))
    assert path.read_text() == '{"step": 1}\n'


def test_a_real_full_disk(tmp_path):
    """On a real (tiny) tmpfs, where this machine can mount one: the log keeps whole lines, and a
    checkpoint that does not fit is one line with the previous checkpoint intact and no temporary
    folder left."""
    from gmts.run import checkpoint as ckpt
    from gmts.run import runlog
    from gmts.tools.toy import tiny_model
    with tmpfs(tmp_path / "disk", "size=1m") as disk:
        if disk is None:
            pytest.skip("cannot mount a tmpfs here (the simulated full disk above covers the same "
                        "code)")
        model, tok = tiny_model()
        first = ckpt.save_checkpoint(str(disk), 1, model, tok, {"step": 1, "config": {}})
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
        # fill the disk to the last byte
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096):
                pass
        os.close(fd)
        path = disk / "metrics.jsonl"
        lines = 0
        with pytest.raises(SystemExit) as err:
            for lines in range(1, 100_000):
                runlog.append_jsonl(str(path), [{"step": lines, "pad": "z" * 300}])
        assert "No space left" in str(err.value.code) and str(path) in str(err.value.code)
        assert "step-000001" in str(err.value.code)
        assert [r["step"] for r in read_jsonl(path)] == list(range(1, lines))
        with pytest.raises(SystemExit) as err:
            ckpt.save_checkpoint(str(disk), 2, model, tok, {"step": 2, "config": {}})
        assert "step-000001 is intact" in str(err.value.code) and "\n" not in str(err.value.code)
        assert sorted(os.listdir(disk / "checkpoints")) == ["latest", "step-000001"]
        assert ckpt.checkpoint_problem(first) is None


def test_eval_skips_and_counts_overlong_prompts(tiny_model_dir, tmp_path):
    data = tmp_path / "long.jsonl"
    rows = [{"id": "a", "question": "Say 1", "answer": "1"},
            {"id": "b", "question": "x " * 100_000, "answer": "1"},
            {"id": "c", "question": "Say 2", "answer": "2"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "r.json"
    proc = run("eval.py",
               ["--model", tiny_model_dir, "--data", str(data), "--max-new-tokens", "3", "--output",
                           str(out), "--bootstrap", "100", "--quiet"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(out.read_text())
    assert summary["n_problems"] == 2 and summary["skipped_too_long"] == 1
    # the tiny model's context minus new tokens
    assert summary["max_prompt_tokens"] == 1024 - 3
    assert "1 skipped" in proc.stderr


def test_eval_never_saves_a_degenerate_run(tiny_model_dir, tmp_path, monkeypatch):
    sys.path.insert(0, ROOT)
    import eval as eval_cli
    from gmts.tools import evaluate
    real = evaluate.generate_records

    def silent(*args, **kwargs):               # a model that ends every answer at once
        records = real(*args, **kwargs)
        for r in records:
            for c in r["completions"]:
                c["text"] = ""
        return records
    monkeypatch.setattr(evaluate, "generate_records", silent)
    out = tmp_path / "r.json"
    with pytest.raises(SystemExit) as err:
        eval_cli.main(
            ["--model", tiny_model_dir, "--data", "arithmetic:test", "--limit", "2",
             "--max-new-tokens", "2",
                       "--output", str(out), "--quiet", "--bootstrap", "100"])
    assert "completions is empty" in str(err.value.code) and "nothing was saved" in str(
        err.value.code)
    assert not out.exists() and not (tmp_path / "r.problems.jsonl").exists()
