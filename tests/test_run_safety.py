"""Nothing lost, nothing mixed: a run folder has one owner, every checkpoint is checked whole, and
every fault a run can meet (a preset, a resume into another run, a second process, a damaged
checkpoint, a full disk, a signal during a save, a damaged log line, Ctrl-C during start-up) ends in
one line with nothing overwritten, mixed or deleted.

The command lines run for real (tests/_cli_batch.py forks one warm process per case, as `python
train.py ARGS` would); the two-owner and kill -9 cases are real separate processes.
"""
import ast
import errno
import glob
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import inside_start_up, run_python
from test_bad_input import (ENV, ROOT, check_one_line, read_jsonl, run_batch, snapshot, tmpfs,
                            train_args)


def is_timing(key):          # wall-clock and memory figures differ between any two runs
    return key.startswith("time_") or key in ("tokens_per_s", "peak_memory_mb")


def same_metrics(a, b):
    return [{k: v for k, v in m.items() if not is_timing(k)} for m in a] == \
           [{k: v for k, v in m.items() if not is_timing(k)} for m in b]


def popen(args):
    return subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), *args], cwd=ROOT,
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stderr_lines(err):
    """stderr without the progress bar and the library's own progress lines."""
    return [x for x in err.strip().splitlines() if x.strip() and
            not x.startswith(("train:", "Writing"))]


@pytest.fixture(scope="module")
def runs(digit_model_dir, digit_data, tmp_path_factory):
    """Three finished runs, made once: `done` (2 steps), `straight` (the same run for 3 steps: what
    a resume from `done`'s step 1 or 2 must reproduce exactly) and `other` (another seed: a
    different run)."""
    d = tmp_path_factory.mktemp("safety")
    cases = [("train.py", train_args(digit_model_dir, digit_data, d / "done")),
             ("train.py", train_args(digit_model_dir, digit_data, d / "straight", "--steps", "3")),
             ("train.py", train_args(digit_model_dir, digit_data, d / "other", "--seed", "5"))]
    for result in run_batch(cases):
        assert result["rc"] == 0, result["stderr"][-2000:]
    return d


def weights(run_dir, step):
    from safetensors.torch import load_file
    return load_file(os.path.join(run_dir, "checkpoints", f"step-{step:06d}", "model.safetensors"))


# --------------------------------------------------------------------------------------------------
# Presets, resume into another folder, start-up checks: one line, nothing written.

def test_no_preset_deletes_or_continues_a_run():
    from gmts.run.presets import PRESETS
    for name, values in PRESETS.items():
        assert not {"overwrite", "resume"} & set(values), name


def test_refused_starts_are_one_line_and_touch_nothing(digit_model_dir, digit_data, runs, tmp_path):
    done, other = runs / "done", runs / "other"
    before = {p: snapshot(p) for p in (done, other)}
    standalone = tmp_path / "exported"
    shutil.copytree(done / "checkpoints" / "step-000001", standalone)
    fresh = tmp_path / "fresh"
    cases = [
        # a preset never implies --overwrite
        (
            train_args(digit_model_dir, digit_data, done, "--preset", "cpu-demo", "--model",
                       digit_model_dir),
         "already holds a run"),
        # --resume A into B, where B holds another run (with or without --steps)
        (["--resume", str(done), "--steps", "3", "--output-dir", str(other)], "holds another run"),
        (
            ["--resume", str(done / "checkpoints" / "step-000001"), "--steps", "3", "--output-dir",
             str(other)],
         "holds another run"),
        (["--resume", str(done), "--steps", "3", "--overwrite"], "--overwrite"),
        # a checkpoint outside a run folder has no run to continue in place
        (["--resume", str(standalone), "--steps", "3"], "--output-dir"),
        # the output folder: a name too long for the file system; a missing optional extra
        (train_args(digit_model_dir, digit_data, tmp_path / ("x" * 300)), "--output-dir"),
        (train_args(digit_model_dir, digit_data, os.path.join(tmp_path, *["y" * 200] * 25)),
         "--output-dir"),
    ]
    import importlib.util
    if importlib.util.find_spec("wandb") is None:
        cases.append(
            (train_args(digit_model_dir, digit_data, fresh, "--report-to", "wandb"),
             "--report-to wandb"))
    results = run_batch([("train.py", args) for args, _ in cases])
    for (args, expected), result in zip(cases, results):
        check_one_line(result, expected)
        assert result["rc"] == 2, (args, result["stderr"])
    assert {p: snapshot(p) for p in (done, other)} == before
    assert not fresh.exists() and sorted(os.listdir(tmp_path)) == ["exported"]


def test_resume_compares_resolved_paths(digit_model_dir, digit_data, runs, tmp_path, monkeypatch):
    from gmts.run.folder import check_start
    folder, name = os.path.split(digit_data)
    monkeypatch.chdir(folder)
    # A fresh run stores a local --data / --model as an absolute path: a resume from anywhere reads
    # the same file.
    cfg, _, _ = check_start(train_args(os.path.relpath(digit_model_dir), name, tmp_path / "new"))
    assert cfg.data == str(digit_data) and cfg.model == str(digit_model_dir)
    for spelling in (name, "./" + name, os.path.join("..", os.path.basename(folder), name)):
        cfg, _resume_from, state = check_start(
            ["--resume", str(runs / "done"), "--steps", "3", "--data", spelling])
        assert cfg.data == str(digit_data) and state["step"] == 2
    (tmp_path / "copy.jsonl").write_text(pathlib.Path(digit_data).read_text())
    # another file, even with the same content
    with pytest.raises(SystemExit) as err:
        check_start(["--resume", str(runs / "done"), "--steps", "3",
                     "--data", str(tmp_path / "copy.jsonl")])
    assert err.value.code == 2


# --------------------------------------------------------------------------------------------------
# One owner: two real processes, and a lock that a kill -9 does not leave behind.

def test_a_run_folder_has_one_owner_and_no_stale_lock(digit_model_dir, digit_data, tmp_path):
    out = tmp_path / "shared"
    args = train_args(digit_model_dir, digit_data, out, "--steps", "100000", "--save-every", "0")
    first = popen(args)
    time.sleep(1.0)
    # one second later, into the same (still empty) folder
    second = popen(args)
    deadline = time.time() + 300
    while first.poll() is None and second.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    # Exactly one proceeds: the other ends in one line naming the owner's pid (the first, given its
    # head start, almost always; the test only needs one of each).
    loser, first = (second, first) if second.poll() is not None else (first, second)
    _, err2 = loser.communicate(timeout=60)
    assert first.poll() is None, first.communicate()[1][-2000:]        # the owner trains on
    line = check_one_line({"rc": loser.returncode, "stderr": err2}, f"pid {first.pid}")
    assert loser.returncode == 2 and "in use by another train.py" in line
    # A third, started while the first trains, is refused by the early check (before its model
    # loads).
    while not (out / "metrics.jsonl").exists() and time.time() < deadline:
        time.sleep(0.2)
    third = popen(["--resume", str(out), "--steps", "100000"])
    _, err3 = third.communicate(timeout=300)
    check_one_line({"rc": third.returncode, "stderr": err3}, f"pid {first.pid}")
    first.send_signal(signal.SIGTERM)
    _, err1 = first.communicate(timeout=300)
    assert first.returncode == 128 + signal.SIGTERM, err1[-2000:]
    steps = [m["step"] for m in read_jsonl(out / "metrics.jsonl")]
    # one run's metrics, in order
    assert steps == list(range(1, len(steps) + 1))
    # kill -9 the next owner mid-run: the kernel drops its lock, so the run resumes at once.
    killed = popen(["--resume", str(out), "--steps", "100000", "--save-every", "1"])
    n = len(steps)
    while (len(read_jsonl(out / "metrics.jsonl")) < n + 2 and killed.poll() is None
           and time.time() < deadline):
        time.sleep(0.1)
    killed.kill()
    killed.communicate(timeout=60)
    # the file stays; its lock does not
    assert (out / ".lock").exists()
    last = int((out / "checkpoints" / "latest").read_text().strip().split("-")[1])
    proc = run_python(["train.py", "--resume", out, "--steps", last + 1], timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == list(range(1, last + 2))


def test_two_claims_of_one_folder_in_one_instant(tmp_path):
    """The lock itself, without the minutes of two trainers: of two processes claiming one folder,
    exactly one owns it; the other is refused naming the owner's pid; the owner's exit frees the
    folder."""
    child = f"""
import sys, time
sys.path.insert(0, {ROOT!r})
from gmts.run.config import parse_config
from gmts.run import folder
cfg = parse_config(["--output-dir", {str(tmp_path / 'run')!r}, "--device", "cpu"])
folder.claim(cfg, 0)
print("owner", flush=True)
time.sleep(float(sys.argv[1]))
"""
    owner = subprocess.Popen([sys.executable, "-c", child, "30"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=ENV)
    assert owner.stdout.readline().strip() == "owner"
    other = run_python(["-c", child, "0"], timeout=120)
    check_one_line(other, f"pid {owner.pid}")
    from gmts.run.folder import owner as who
    assert who(str(tmp_path / "run")).startswith(f"pid {owner.pid} ")
    # kill -9: no clean-up code runs
    owner.kill()
    owner.communicate()
    assert who(str(tmp_path / "run")) is None
    again = run_python(["-c", child, "0"], timeout=120)
    assert again.returncode == 0 and again.stdout.strip() == "owner", again.stderr
    # One process may claim its own folder again (train.main twice in one process: a run, then its
    # resume).
    from gmts.run import folder
    from gmts.run.config import parse_config
    cfg = parse_config(["--output-dir", str(tmp_path / "mine"), "--device", "cpu"])
    folder.claim(cfg, 0)
    folder.claim(cfg, 0)
    # ... and does not see itself as another owner
    assert who(str(tmp_path / "mine")) is None


# --------------------------------------------------------------------------------------------------
# Damaged checkpoints: detected, kept aside, skipped; the resumed run is the uninterrupted one.

def damage(path, how):
    if how == "truncate":
        os.truncate(path, os.path.getsize(path) // 2)
    # one flipped byte, the size unchanged
    else:
        with open(path, "r+b") as fh:
            fh.seek(os.path.getsize(path) // 2)
            byte = fh.read(1)
            fh.seek(-1, os.SEEK_CUR)
            fh.write(bytes([byte[0] ^ 0xFF]))


def test_each_damaged_file_is_found_kept_aside_and_the_resume_is_exact(runs, tmp_path):
    done, straight = runs / "done", runs / "straight"
    kinds = sorted(os.listdir(done / "checkpoints" / "step-000002"))
    assert {"config.json", "generation_config.json", "model.safetensors", "trainer_state.pt",
            "manifest.json", "tokenizer.json", "tokenizer_config.json"} <= set(kinds)
    cases, dirs = [], []
    for kind, how in [(k, "truncate") for k in kinds] + [("model.safetensors", "flip")]:
        run_dir = tmp_path / f"{kind}-{how}"
        shutil.copytree(done, run_dir)
        damage(run_dir / "checkpoints" / "step-000002" / kind, how)
        dirs.append((kind, how, run_dir, snapshot(run_dir / "checkpoints" / "step-000002")))
        cases.append(("train.py", ["--resume", str(run_dir), "--steps", "3"]))
    for (kind, how, run_dir, damaged), result in zip(dirs, run_batch(cases)):
        assert result["rc"] == 0, (kind, how, result["stderr"][-2000:])
        notes = [x for x in stderr_lines(result["stderr"]) if x.startswith("gmts:")]
        skipped = [x for x in notes if "skipping damaged checkpoint" in x]
        assert len(skipped) == 1 and "step-000002" in skipped[0] and kind in skipped[0], (
            kind, notes)
        assert any("aside as damaged-step-000002" in x for x in notes), notes
        assert "step-000001 at step 1" in result["stdout"]
        # kept, exactly as it was found
        assert snapshot(run_dir / "checkpoints" / "damaged-step-000002") == damaged
        # and the run goes on exactly as the uninterrupted one from step 1
        assert same_metrics(read_jsonl(run_dir / "metrics.jsonl"),
                            read_jsonl(straight / "metrics.jsonl"))
        wa, wb = weights(run_dir, 3), weights(straight, 3)
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), kind
        from gmts.run import checkpoint as ckpt
        assert ckpt.checkpoint_problem(str(run_dir / "checkpoints" / "step-000002")) is None


def test_a_damaged_step_saved_again_never_replaces_a_kept_one(tmp_path):
    from gmts.run import checkpoint as ckpt
    from gmts.tools.toy import tiny_model
    model, tok = tiny_model()
    root = tmp_path / "checkpoints"
    for round_ in range(3):
        ckpt.save_checkpoint(str(tmp_path), 1, model, tok,
                             {"step": 1, "config": {}, "round": round_})
        if round_ < 2:
            damage(root / "step-000001" / "generation_config.json", "truncate")
    assert sorted(os.listdir(root)) == ["damaged-step-000001", "damaged-step-000001.1", "latest",
                                        "step-000001"]
    assert ckpt.load_trainer_state(str(root / "step-000001"))["round"] == 2
    for name in ("damaged-step-000001", "damaged-step-000001.1"):
        assert ckpt.manifest_problem(str(root / name)).startswith(
            "generation_config.json is truncated")


def test_a_checkpoint_without_manifest_is_checked_by_structure(runs, tmp_path):
    """Checkpoints of an older gmts (no manifest.json) still resume, said so in one line; what
    structure can show (a truncated JSON file, short weights) is still found."""
    from gmts.run import checkpoint as ckpt
    old = tmp_path / "old"
    shutil.copytree(runs / "done" / "checkpoints" / "step-000002", old)
    os.remove(old / "manifest.json")
    notes = []
    assert ckpt.checkpoint_problem(str(old), report=notes.append) is None
    assert len(notes) == 1 and "no manifest.json" in notes[0] and "cannot be verified" in notes[0]
    for name in ("generation_config.json", "config.json", "tokenizer.json"):
        shutil.copy(runs / "done" / "checkpoints" / "step-000002" / name, old / name)
        damage(old / name, "truncate")
        assert (ckpt.checkpoint_problem(str(old))
                == f"{name} is damaged (not valid JSON: truncated?)")
        shutil.copy(runs / "done" / "checkpoints" / "step-000002" / name, old / name)


# --------------------------------------------------------------------------------------------------
# A full disk during a checkpoint write: one line naming the intact checkpoint, the partial write
# removed.

def _first_checkpoint(disk):
    from gmts.run import checkpoint as ckpt
    from gmts.tools.toy import tiny_model
    model, tok = tiny_model()
    return model, tok, ckpt.save_checkpoint(str(disk), 1, model, tok, {"step": 1, "config": {}})


def _assert_clean_failure(err, disk, first):
    from gmts.run import checkpoint as ckpt
    text = str(err.value.code)
    assert ("\n" not in text and text.startswith("error: No space left on device")
            and "step-000001 is intact" in text)
    # no .tmp-step-* left
    assert sorted(os.listdir(disk / "checkpoints")) == ["latest", "step-000001"]
    assert (disk / "checkpoints" / "latest").read_text() == "step-000001\n"
    assert ckpt.checkpoint_problem(first) is None


def test_a_full_disk_injected_into_each_writer(tmp_path, monkeypatch):
    """ENOSPC injected where each writer meets it: the weights (safetensors' Rust writer, which
    reports it as SafetensorError text) and trainer_state.pt (torch.save, which by itself says only
    "unexpected pos")."""
    from safetensors import SafetensorError
    from gmts.run import checkpoint as ckpt
    model, tok, first = _first_checkpoint(tmp_path)
    real_save = model.save_pretrained

    def weights_fill_the_disk(folder, **kw):
        real_save(folder, **kw)
        os.truncate(os.path.join(folder, "model.safetensors"), 100)
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os "
                              "error 28)")
    monkeypatch.setattr(model, "save_pretrained", weights_fill_the_disk)
    with pytest.raises(SystemExit) as err:
        ckpt.save_checkpoint(str(tmp_path), 2, model, tok, {"step": 2, "config": {}})
    _assert_clean_failure(err, tmp_path, first)
    monkeypatch.undo()

    # a file that takes 1000 bytes, then ENOSPC, as a disk would
    class FullFile:
        def __init__(self, path):
            self.fh, self.room = open(path, "wb"), 1000  # noqa: SIM115 - closed by __exit__

        def write(self, data):
            if len(data) > self.room:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.room -= len(data)
            return self.fh.write(data)

        def flush(self):
            self.fh.flush()

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()
    import builtins
    def full_open(path, mode="r", *a, **k):
        if path.endswith(ckpt.STATE_FILE) and "w" in mode:
            return FullFile(path)
        return builtins.open(path, mode, *a, **k)  # the caller's `with` closes it
    monkeypatch.setattr(ckpt, "open", full_open, raising=False)
    with pytest.raises(SystemExit) as err:
        ckpt.save_checkpoint(str(tmp_path), 2, model, tok,
                             {"step": 2, "config": {}, "big": torch.zeros(10_000)})
    _assert_clean_failure(err, tmp_path, first)


def test_a_real_full_disk_for_each_writer(tmp_path):
    """On a real tmpfs (where this machine can mount one): weights that do not fit, then a
    trainer_state.pt that does not fit after the weights and tokenizer did."""
    from gmts.run import checkpoint as ckpt
    for kind in ("weights", "trainer_state"):
        with tmpfs(tmp_path / kind, "size=1m") as disk:
            if disk is None:
                pytest.skip("cannot mount a tmpfs here (test_a_full_disk_injected_into_each_writer "
                            "covers the code)")
            model, tok, first = _first_checkpoint(disk)
            # the tiny model's weights are ~110 kB
            left = 40_000 if kind == "weights" else 400_000
            fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
            while os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize > left:
                os.write(fd, b"\0" * 4096)
            os.close(fd)
            with pytest.raises(SystemExit) as err:
                ckpt.save_checkpoint(str(disk), 2, model, tok,
                                     {"step": 2, "config": {}, "big": torch.zeros(500_000)})
            _assert_clean_failure(err, disk, first)


# --------------------------------------------------------------------------------------------------
# Signals during a save, Ctrl-C during start-up, a damaged log line.

@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_a_checkpoint_write_stops_right_after_it(
    digit_model_dir, digit_data, tmp_path, sig):
    out = tmp_path / "run"
    child = f"""
import os, sys
sys.path.insert(0, {ROOT!r})
import train
from gmts.run import checkpoint as ckpt
real = ckpt.save_checkpoint
def save_with_a_signal(*args, **kwargs):
    os.kill(os.getpid(), {int(sig)})          # arrives while the checkpoint is being written
    return real(*args, **kwargs)
ckpt.save_checkpoint = save_with_a_signal
train.main({train_args(digit_model_dir, digit_data, out, "--steps", "5")!r})
"""
    proc = run_python(["-c", child], timeout=600)
    assert proc.returncode == 128 + sig, proc.stderr[-2000:]
    # no extra step after the save
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [1]
    assert (out / "checkpoints" / "latest").read_text().strip() == "step-000001"
    assert "stopped by signal" in proc.stdout and "Traceback" not in proc.stderr


def _train_as_main(args, patch):
    """train.py run as the command (its __main__ block: the start-up signal handlers), after
    `patch` (Python source) has replaced a function with one that signals the process."""
    return f"""
import os, runpy, signal, sys, time
sys.path.insert(0, {ROOT!r})
sys.argv = ["train.py", *{args!r}]
{patch}
runpy.run_path(os.path.join({ROOT!r}, "train.py"), run_name="__main__")
"""


def test_a_signal_in_the_evaluation_before_training_ends_it_at_once_and_blocks_nothing(
        digit_model_dir, digit_data, tmp_path, sig=signal.SIGINT):
    """Before the first step nothing is trained: a signal during --eval-before ends the process
    within seconds (not after the evaluation, a step and a checkpoint), with one line, and the same
    command then starts and finishes."""
    out = tmp_path / "run"
    args = train_args(digit_model_dir, digit_data, out, "--eval-data", digit_data,
                      "--eval-before", "--eval-limit", "4", "--eval-samples", "2")
    slow_eval = f"""
from gmts.tools import evaluate
real = evaluate.evaluate_model
def slow(*args, **kwargs):
    os.kill(os.getpid(), {int(sig)})
    time.sleep(120)                     # an evaluation of minutes
    return real(*args, **kwargs)
evaluate.evaluate_model = slow
"""
    t0 = time.time()
    proc = run_python(["-c", _train_as_main(args, slow_eval)], timeout=600)
    assert time.time() - t0 < 60, "waited for the evaluation"
    assert proc.returncode == 128 + sig, proc.stderr[-2000:]
    name = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
    # the training file is the eval file here: its "not held-out" note comes first
    said = [ln for ln in stderr_lines(proc.stderr) if "accuracy is not held-out" not in ln]
    line = check_one_line({"rc": proc.returncode, "stderr": "\n".join(said)},
                          f"interrupted ({name})")
    assert "nothing was trained" in line and "Traceback" not in proc.stderr
    assert not (out / "checkpoints").exists() and not (out / "metrics.jsonl").exists()
    again = run_python(["train.py", *args], timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2] and "eval_before_accuracy" in metrics[0]
    # the banner counts the tiny model's parameters as they are (it said "0.0M trainable")
    from gmts.run.build import count_text
    from gmts.trainer.models import load_model
    n = sum(p.numel() for p in load_model(digit_model_dir, dtype=torch.float32,
                                          device=torch.device("cpu")).parameters())
    assert f"({count_text(n)} of {count_text(n)} parameters trainable)" in again.stdout
    assert n < 1e6 and count_text(n) != "0" and count_text(n).endswith("k")


def test_parameter_counts_read_with_four_significant_digits():
    from gmts.run.build import count_text
    assert [count_text(n) for n in (0, 812, 1000, 30214, 134515008, 1543714304)] == [
        "0", "812", "1k", "30.21k", "134.5M", "1.544B"]


def test_a_signal_during_a_step_saves_after_it_without_starting_the_next_evaluation(
        digit_model_dir, digit_data, tmp_path):
    """During training: the step finishes, its checkpoint is written, and the evaluation due after
    it (--eval-every 1) is not started."""
    out = tmp_path / "run"
    args = train_args(digit_model_dir, digit_data, out, "--steps", "3", "--eval-data",
                      digit_data, "--eval-every", "1", "--eval-limit", "4", "--eval-samples", "2")
    child = f"""
import os, signal, sys
sys.path.insert(0, {ROOT!r})
import train
from gmts.tools import evaluate
real = train.train_step
def step_with_a_signal(run, step):
    os.kill(os.getpid(), signal.SIGINT)          # arrives during step 1
    return real(run, step)
def no_eval(*args, **kwargs):
    raise AssertionError("an evaluation started after the signal")
train.train_step, evaluate.evaluate_model = step_with_a_signal, no_eval
train.main({args!r})
"""
    proc = run_python(["-c", child], timeout=600)
    assert proc.returncode == 128 + signal.SIGINT, proc.stderr[-2000:]
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1] and "eval_accuracy" not in metrics[0]
    assert (out / "checkpoints" / "latest").read_text().strip() == "step-000001"
    assert "stopped by signal 2 after step 1" in proc.stdout


def test_ctrl_c_during_start_up_is_one_line_and_blocks_nothing(digit_model_dir, digit_data,
                                                               tmp_path):
    out = tmp_path / "run"
    args = train_args(digit_model_dir, digit_data, out)
    proc = popen(args)
    inside_start_up(proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    line = check_one_line({"rc": proc.returncode, "stderr": "\n".join(stderr_lines(err))},
                          "interrupted (Ctrl-C)")
    assert proc.returncode == 128 + signal.SIGINT and "start-up" in line
    again = run_python(["train.py", *args], timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [1, 2]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_that_a_library_catches_is_still_one_line(sig):
    """The start-up handler ends the process itself: code that catches everything (transformers'
    lazy import turns a SystemExit into a ModuleNotFoundError) cannot add a second, false error or
    carry on."""
    child = f"""
import os, sys, time
from gmts.run.folder import exit_on_interrupt
exit_on_interrupt("train.py", "during start-up")
try:
    os.kill(os.getpid(), {int(sig)})
    time.sleep(5)
except BaseException as err:
    raise ModuleNotFoundError("Could not import module 'Qwen2ForCausalLM'") from err
print("carried on")
"""
    proc = run_python(["-c", child], timeout=60)
    name = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
    assert proc.returncode == 128 + sig, proc.stderr
    assert proc.stderr.strip() == f"train.py: interrupted ({name}); during start-up", proc.stderr
    assert proc.stdout == ""


def test_a_start_that_never_completed_a_step_does_not_block_the_next(
    digit_model_dir, digit_data, runs, tmp_path):
    """What a start writes before its first step (the lock, config.json) is replaced by the next
    start. And a resume into an empty --output-dir branches the run there, leaving the original as
    it was."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text('{"from": "a start that failed at step 1"}\n')
    (out / ".lock").write_text("pid 1 on a-host-long-gone\n")
    before = snapshot(runs / "done")
    fresh, branch = run_batch([("train.py", train_args(digit_model_dir, digit_data, out)),
                               ("train.py",
                                ["--resume", str(runs / "done"), "--steps", "3", "--output-dir",
                                             str(tmp_path / "branch")])])
    assert fresh["rc"] == 0, fresh["stderr"][-2000:]
    assert ("replacing" in fresh["stderr"]
            and json.loads((out / "config.json").read_text())["seed"] == 3)
    assert branch["rc"] == 0, branch["stderr"][-2000:]
    assert [m["step"] for m in read_jsonl(tmp_path / "branch" / "metrics.jsonl")] == [3]
    assert same_metrics(read_jsonl(tmp_path / "branch" / "metrics.jsonl"),
                        # step 3, exactly
                        read_jsonl(runs / "straight" / "metrics.jsonl")[2:])
    assert snapshot(runs / "done") == before


def test_a_damaged_log_line_is_named_and_kept(runs, tmp_path):
    run_dir = tmp_path / "copy"
    shutil.copytree(runs / "done", run_dir)
    lines = (run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)
    # line 1 damaged, a torn line 3
    original = "".join(["{not json\n"] + lines[1:]) + '{"step": 3, "rew'
    (run_dir / "metrics.jsonl").write_text(original)
    result, = run_batch([("train.py", ["--resume", str(run_dir), "--steps", "3"])])
    assert result["rc"] == 0, result["stderr"][-2000:]
    notes = [x for x in stderr_lines(result["stderr"]) if "metrics.jsonl" in x]
    assert len(notes) == 2 and f"{run_dir / 'metrics.jsonl'}:1: not JSON" in notes[0], notes
    assert f"{run_dir / 'metrics.jsonl'}:3: dropped a torn line" in notes[1]
    copies = glob.glob(str(run_dir / "metrics.jsonl.bad-*"))
    # kept as it was
    assert len(copies) == 1 and pathlib.Path(copies[0]).read_text() == original
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [2, 3]


# --------------------------------------------------------------------------------------------------
# No import cycle in gmts/run.

def test_gmts_run_has_no_import_cycle():
    """Every import between gmts/run modules, at module level or inside a function (a lazy import is
    still a cycle: the modules cannot be understood apart), forms no cycle."""
    folder = os.path.join(ROOT, "gmts", "run")
    names = {f[:-3] for f in os.listdir(folder) if f.endswith(".py") and f != "__init__.py"}
    graph = {}
    for name in names:
        tree = ast.parse(pathlib.Path(folder, name + ".py").read_text())
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "gmts.run":
                deps |= {a.name for a in node.names} & names
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gmts.run."):
                deps.add(node.module.split(".")[2])
            elif isinstance(node, ast.Import):
                deps |= {a.name.split(".")[2] for a in node.names if a.name.startswith("gmts.run.")}
        graph[name] = deps - {name}
    assert graph["config"] == {"presets", "validate"} and graph["validate"] == {"machine", "paths"}
    assert not graph["machine"] and not graph["paths"] and not graph["presets"]

    def visit(node, path):
        assert node not in path, f"import cycle: {' -> '.join(path + [node])}"
        for dep in graph.get(node, ()):
            visit(dep, path + [node])
    for name in names:
        visit(name, [])


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_every_checkpoint_file_gets_the_mode_the_umask_gives(tmp_path, mask):
    """save_pretrained writes model.safetensors 0600 and the rest 0644: a checkpoint's files all
    get 0o666 less the umask, as a plain open() would give them."""
    from gmts.run import checkpoint as ckpt
    from gmts.tools.toy import tiny_model
    model, tok = tiny_model()
    old = os.umask(mask)
    try:
        final = ckpt.save_checkpoint(str(tmp_path), 1, model, tok, {"step": 1, "config": {}})
    finally:
        os.umask(old)
    modes = {name: os.stat(os.path.join(final, name)).st_mode & 0o777
             for name in os.listdir(final)}
    assert "model.safetensors" in modes and set(modes.values()) == {0o666 & ~mask}, modes
