"""Settings that must not change silently, data that must not train on the wrong thing, and the
machine's limits as one line (issue 55, kinds 4-6)."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from gmts import data
from gmts.run import machine
from gmts.run.validate import Rule, check, temperature_rule
from conftest import run_python
from test_bad_input import (ENV, ROOT, check_one_line, finished_run, read_jsonl,  # noqa: F401
                            run_batch, snapshot, train_args)

# --------------------------------------------------------------------------------------------------
# Kind 4: settings.


def test_one_temperature_rule_refuses_0_and_float32_subnormals_in_both_entry_points():
    """1e-300 and 1e-40 are 0 and subnormal in float32, where logits are divided by them."""
    assert float(torch.tensor(1e-300, dtype=torch.float32)) == 0.0
    cases, flags = [], []
    for value in ("1e-300", "1e-40", "0", "-1", "nan"):
        cases.append(("train.py", ["--temperature", value]))
        cases.append(("train.py", ["--eval-temperature", value]))
        cases.append(("eval.py", ["--model", "x/y", "--temperature", value]))
        flags += ["--temperature", "--eval-temperature", "--temperature"]
    results = run_batch(cases)
    for (script, args), flag, result in zip(cases, flags, results):
        greedy = args[-1] == "0" and flag != "--temperature" or (script, args[-1]) == ("eval.py",
                                                                                        "0")
        if greedy:                                   # 0 is greedy where evaluation allows it
            assert f"{flag} must be" not in result["stderr"], (args, result["stderr"])
        else:
            line = check_one_line(result, f"{flag} must be ")
            assert f"got {float(args[-1])}" in line or f"got {args[-1]}" in line, line

    class Cfg:
        temperature = 1.2e-38                        # the smallest normal float32, rounded up
    assert check(Cfg, [temperature_rule("temperature", greedy=False)])
    Cfg.temperature = 1.1e-38
    with pytest.raises(ValueError, match="subnormal in float32"):
        check(Cfg, [temperature_rule("temperature", greedy=False)])
    assert isinstance(temperature_rule("temperature", greedy=True), Rule)


def test_rank_without_world_size_is_one_line_and_notes_follow_the_trainers_rule(monkeypatch,
                                                                               tmp_path):
    proc = run_python(["train.py", "--output-dir", tmp_path / "r", "--steps", "1"],
                      env={"WORLD_SIZE": None, "RANK": "3"}, timeout=300)
    check_one_line(proc, "RANK='3' is set but WORLD_SIZE is not")
    assert proc.returncode == 2 and not (tmp_path / "r").exists()
    for world, rank, main in ((None, "3", True), ("1", "3", True), ("2", "1", False),
                              ("2", "0", True), (None, None, True)):
        for name, value in (("WORLD_SIZE", world), ("RANK", rank)):
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        assert machine.main_process() is main, (world, rank)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "5")
    for v in machine.TORCHRUN_VARS[1:]:
        monkeypatch.setenv(v, "x")
    assert "not a rank of WORLD_SIZE=2" in machine.launcher_problem()


def test_a_setting_this_version_does_not_know_is_refused_on_resume(
        finished_run, tmp_path):  # noqa: F811
    from gmts.run import checkpoint as ckpt
    in_state, in_record = tmp_path / "state", tmp_path / "record"
    for copy in (in_state, in_record):
        shutil.copytree(finished_run, copy)
    # a newer version's checkpoint: its trainer state holds a setting unknown here (manifest
    # rewritten, so the checkpoint is intact)
    folder = in_state / "checkpoints" / "step-000002"
    state = torch.load(folder / ckpt.STATE_FILE, weights_only=False)
    state["config"]["entropy_floor"] = 0.5
    torch.save(state, folder / ckpt.STATE_FILE)
    os.remove(folder / ckpt.MANIFEST)
    ckpt.write_manifest(str(folder))
    record = json.loads((in_record / "config.json").read_text())
    (in_record / "config.json").write_text(json.dumps(dict(record, entropy_floor=0.5)))
    before = {d: snapshot(d) for d in (in_state, in_record)}
    results = run_batch([("train.py", ["--resume", str(d), "--steps", "3"])
                         for d in (in_state, in_record)])
    for result in results:
        line = check_one_line(result, "sets entropy_floor = 0.5, a setting this gmts does not know")
        assert result["rc"] == 2, line
    assert {d: snapshot(d) for d in (in_state, in_record)} == before


def test_the_cpu_demo_preset_with_ones_own_data_leaves_its_arithmetic_settings_out(
        digit_model_dir, digit_data, tmp_path):
    result, = run_batch([("train.py", [
        "--preset", "cpu-demo", "--data", digit_data, "--model", digit_model_dir, "--steps", "1",
        "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "2",
        "--micro-batch-size", "4", "--device", "cpu", "--output-dir", str(tmp_path / "demo")])])
    assert result["rc"] == 0, result["stderr"][-2000:]
    assert "--task-options" in result["stderr"]            # named in the note, once, as left out
    assert result["stderr"].count("are left out") == 1
    config = json.loads((tmp_path / "demo" / "config.json").read_text())
    assert config["task_options"] == "" and config["eval_data"] == "" and not config["eval_every"]
    assert config["system_prompt"] is None and config["temperature"] == 0.5   # the rest stays


# --------------------------------------------------------------------------------------------------
# Kind 5: data.


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_an_answer_of_nan_or_infinity_is_refused_with_file_and_row(tmp_path, value):
    path = tmp_path / "d.jsonl"
    path.write_text('{"question": "a", "answer": "1"}\n'
                    + f'{{"question": "b", "answer": {value}}}\n')
    with pytest.raises(ValueError, match=rf"^{path}:2: the answer is -?(nan|inf) \(JSON's NaN"):
        data.load_problems(str(path))
    path.write_text(f'{{"question": {value}, "answer": "1"}}\n')
    with pytest.raises(ValueError, match=rf"^{path}:1: the question is -?(nan|inf) "):
        data.load_problems(str(path))


def test_an_empty_save_to_disk_data_set_is_one_line(tmp_path):
    datasets = pytest.importorskip("datasets")
    empty = datasets.Dataset.from_dict({"question": [], "answer": []})
    empty.save_to_disk(str(tmp_path / "one"))
    datasets.DatasetDict({"train": empty}).save_to_disk(str(tmp_path / "two"))
    with pytest.raises(ValueError, match=f"^{tmp_path / 'one'}: empty data set"):
        data.load_problems(str(tmp_path / "one"))
    with pytest.raises(ValueError, match=f"^{tmp_path / 'two'} split train: empty data set"):
        data.load_problems(str(tmp_path / "two"), "train")


def test_the_training_file_as_eval_data_is_not_called_held_out(digit_model_dir, digit_data,
                                                               tmp_path):
    result, = run_batch([("train.py", train_args(
        digit_model_dir, digit_data, tmp_path / "run", "--steps", "1", "--eval-data", digit_data,
        "--eval-every", "1", "--eval-limit", "4"))])
    assert result["rc"] == 0, result["stderr"][-2000:]
    n = len(data.load_problems(digit_data, limit=4))
    assert (f"{n} of {n} problems share a 13-word run with training problems"
            in result["stderr"]), result["stderr"][-2000:]
    assert "held-out accuracy" not in result["stdout"]
    assert f"(not held-out: {n} of {n} eval problems overlap the training data)" in result["stdout"]


# --------------------------------------------------------------------------------------------------
# Kind 6: limits.


def test_out_of_memory_names_the_flag_to_lower(digit_model_dir, digit_data, tmp_path):
    """A group too large for a 6 GB address space: the rollout's cache allocation fails (CPU torch
    says so in a RuntimeError); eval.py's --samples alike."""
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))"
    cases = [
        ["train.py", *train_args(digit_model_dir, digit_data, tmp_path / "run", "--steps", "1",
                                 "--group-size", "100000")],
        ["eval.py", "--model", digit_model_dir, "--data", digit_data, "--samples", "200000",
         "--temperature", "1", "--max-new-tokens", "3", "--device", "cpu", "--quiet", "--output",
         str(tmp_path / "e.json")],
    ]
    for (script, *args), flag in zip(cases, ("--group-size (100000)", "--samples (200000)")):
        child = (f"{limit}; import runpy, sys; sys.argv = {[script, *args]!r}; "
                 f"runpy.run_path({os.path.join(ROOT, script)!r}, run_name='__main__')")
        proc = run_python(["-c", child], timeout=600)
        lines = [x for x in proc.stderr.strip().splitlines() if x.startswith("error")]
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert len(lines) == 1 and lines[0].startswith("error: out of memory ") and flag in lines[0]
    assert not (tmp_path / "e.json").exists()


def test_a_small_address_space_limit_is_one_line_before_torch_loads(monkeypatch):
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))"
    for script in ("train.py", "eval.py"):
        child = (f"{limit}; import runpy, sys; sys.argv = [{script!r}, '--model', 'x/y']; "
                 f"runpy.run_path({os.path.join(ROOT, script)!r}, run_name='__main__')")
        proc = subprocess.run([sys.executable, "-c", child], env=ENV, cwd=ROOT,
                              capture_output=True, text=True, timeout=120, check=False)
        check_one_line(proc, f"{script}: error: the address-space limit (ulimit -v 1048576) is "
                             "1.00 GiB, below the 1.5 GiB")
    assert machine.out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate "
                                                         "2.00 GiB")) == \
        "OutOfMemoryError allocating 2.00 GiB"
    assert machine.out_of_memory(ValueError("out of memory")) is None
