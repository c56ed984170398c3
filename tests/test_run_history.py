"""A run knows what it is made of, its history is one line, and every edge is one line (issue 31).

Kinds, each with the issue's cases: (1) the fingerprint (data contents, base model, tokenizer) and
config.json as a record; (2) a rewind moves the run's later history to abandoned/ so checkpoints,
`latest`, the logs and the exports agree; (3) folders that are not run folders, `~`, unique eval
outputs, paths that are not UTF-8; (4) non-finite weights and updates end in the skip-then-stop
line; (5) the edges (no flock, stdout on a full disk, WORLD_SIZE without torchrun, a non-integer
step, a 'step-N copy' folder, a full disk during the merged export, a config that is not a causal
LM, --print-config with --resume). The command lines run for real (tests/_cli_batch.py).
"""
import errno
import json
import os
import shutil
import subprocess
import sys
import types

import pytest

from conftest import run_python
from test_bad_input import ENV, ROOT, check_one_line, read_jsonl, run_batch, snapshot, train_args
from test_run_safety import same_metrics, stderr_lines


def argv(model, data, out, *extra):
    """train.py's command line with train_args; `out` may be bytes (a name that is not UTF-8)."""
    return [sys.executable, os.path.join(ROOT, "train.py"),
            *[out if a == "@OUT" else str(a) for a in train_args(model, data, "@OUT", *extra)]]


def train(*cases):
    return run_batch([("train.py", list(map(str, args))) for args in cases])


def ok(result):
    assert result["rc"] == 0, result["stderr"][-3000:]
    return result


def steps_of(run):
    return [m["step"] for m in read_jsonl(os.path.join(run, "metrics.jsonl"))]


def checkpoints(run):
    return sorted(os.listdir(os.path.join(run, "checkpoints")))


def latest(run):
    with open(os.path.join(run, "checkpoints", "latest")) as fh:
        return fh.read().strip()


@pytest.fixture(scope="module")
def base(digit_model_dir, digit_data, tmp_path_factory):
    """`three`: 3 steps, a checkpoint after each (all kept); `straight4`: the same run for 4
    steps."""
    d = tmp_path_factory.mktemp("history")
    for result in train(
        train_args(digit_model_dir, digit_data, d / "three", "--steps", 3, "--keep-checkpoints", 5),
                        train_args(digit_model_dir, digit_data, d / "straight4", "--steps", 4,
                                   "--keep-checkpoints", 5)):
        ok(result)
    return d


def copy_run(base, name, tmp_path):
    target = tmp_path / name
    shutil.copytree(base / "three", target)
    return str(target)


# --------------------------------------------------------------------------------------------------
# 1. What a run is made of.

def test_a_resume_refuses_data_whose_contents_changed(digit_model_dir, digit_data, base, tmp_path):
    data = tmp_path / "d.jsonl"
    shutil.copy(digit_data, data)
    run = tmp_path / "run"
    ok(train(train_args(digit_model_dir, data, run, "--steps", 1))[0])
    # the file grew: same path, other contents, other data order
    with open(data, "a") as fh:
        fh.write(json.dumps({"question": "What is 1 + 1?", "answer": "2"}) + "\n")
    before = snapshot(run)
    [grown] = train(["--resume", run, "--steps", 2])
    check_one_line(grown, "the training data")
    assert snapshot(run) == before


@pytest.mark.parametrize("flags", [["--lora-rank", 4], ["--beta", 0.1]])
def test_a_resume_refuses_a_replaced_base_model_where_it_is_loaded_again(
    digit_data, tmp_path, flags):
    """LoRA loads --model again as the base of the adapters; β > 0 as the frozen reference."""
    from conftest import write_tiny_model
    if flags[0] == "--lora-rank":
        pytest.importorskip("peft")
    model = write_tiny_model(tmp_path / "m", favour="12 ")
    run = tmp_path / "run"
    ok(train(train_args(model, digit_data, run, "--steps", 1, *flags))[0])
    shutil.rmtree(model)
    write_tiny_model(tmp_path / "m", seed=7, favour="12 ")       # the same path, another model
    before = snapshot(run)
    [replaced] = train(["--resume", run, "--steps", 2])
    check_one_line(replaced, "the base model")
    assert snapshot(run) == before


def test_a_hand_edit_of_config_json_is_refused_or_said(base, tmp_path):
    run = copy_run(base, "edited", tmp_path)
    path = os.path.join(run, "config.json")
    with open(path) as fh:
        config = json.load(fh)
    with open(path, "w") as fh:
        json.dump(dict(config, lr=0.5), fh)
    before = snapshot(run)
    [fixed] = train(["--resume", run, "--steps", 4])
    # defines the experiment: refused
    check_one_line(fixed, "lr = 0.5")
    assert snapshot(run) == before
    with open(path, "w") as fh:
        json.dump(dict(config, save_every=7), fh)
    [said] = train(["--resume", run, "--steps", 4])
    ok(said)
    notes = [x for x in stderr_lines(said["stderr"]) if "config.json" in x]
    assert len(notes) == 1 and "save_every" in notes[0], said["stderr"]
    with open(path) as fh:
        # the checkpoint's value ran and is recorded
        assert json.load(fh)["save_every"] == config["save_every"]


# --------------------------------------------------------------------------------------------------
# 2. A run's history is one line.

@pytest.mark.parametrize("keep", [5, 1])
def test_a_rewind_moves_the_later_history_aside_and_the_run_reads_as_one(base, tmp_path, keep):
    run = copy_run(base, "rewound", tmp_path)
    old_metrics = read_jsonl(os.path.join(run, "metrics.jsonl"))
    [rewind] = train(["--resume", os.path.join(run, "checkpoints", "step-000001"), "--steps", 3,
                      "--keep-checkpoints", keep])
    ok(rewind)
    abandoned = os.path.join(run, "abandoned", "after-step-000001")
    assert sorted(os.listdir(os.path.join(abandoned, "checkpoints"))) == [
        "step-000002", "step-000003"]
    assert [m["step"] for m in read_jsonl(os.path.join(abandoned, "metrics.jsonl"))] == [2, 3]
    assert steps_of(run) == [1, 2, 3]
    # the same run, redone
    assert same_metrics(read_jsonl(os.path.join(run, "metrics.jsonl")), old_metrics)
    kept = ["step-000001", "step-000002", "step-000003"][-keep:]
    assert ([c for c in checkpoints(run) if c.startswith("step-")] == kept
            and latest(run) == "step-000003")
    # the closing line: this branch
    assert "checkpoints/step-000003" in rewind["stdout"].strip().splitlines()[-1]
    # --resume RUN follows `latest`; the log reads 1, 2, 3, 4 and equals the straight 4-step run
    ok(train(["--resume", run, "--steps", 4])[0])
    assert steps_of(run) == [1, 2, 3, 4]
    assert same_metrics(read_jsonl(os.path.join(run, "metrics.jsonl")),
                        read_jsonl(os.path.join(base, "straight4", "metrics.jsonl")))


def test_resume_of_a_run_follows_latest_not_the_newest_name(base, tmp_path):
    """A step-N after `latest` (a crash between the rename and `latest`, a copy) is not the run's
    head."""
    run = copy_run(base, "head", tmp_path)
    with open(os.path.join(run, "checkpoints", "latest"), "w") as fh:
        fh.write("step-000002\n")
    ok(train(["--resume", run, "--steps", 3])[0])
    assert os.listdir(os.path.join(run, "abandoned", "after-step-000002", "checkpoints")) == [
        "step-000003"]
    assert steps_of(run) == [1, 2, 3] and latest(run) == "step-000003"


def test_overwrite_removes_every_export_of_the_old_run(base, digit_model_dir, digit_data, tmp_path):
    run = copy_run(base, "exported", tmp_path)
    for name in ("final-merged", os.path.join("abandoned", "after-step-000001")):
        os.makedirs(os.path.join(run, name))
        open(os.path.join(run, name, "model.safetensors"), "w").close()
    ok(train(train_args(digit_model_dir, digit_data, run, "--steps", 1, "--overwrite"))[0])
    assert not os.path.exists(os.path.join(run, "final-merged")) and not os.path.exists(
        os.path.join(run, "abandoned"))
    assert steps_of(run) == [1]


# --------------------------------------------------------------------------------------------------
# 3. Folders that are not run folders.

def test_tilde_is_the_home_folder_in_every_check(digit_model_dir, digit_data, base, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(base / "three", home / "run")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    line = [a for a in argv(digit_model_dir, digit_data, "@OUT") if a
            not in ("--output-dir", "@OUT")]
    tilde = run_python(line[1:] + ["--output-dir=~/run"], cwd=cwd, env={"HOME": home})
    # ~ is the home folder in every check
    check_one_line(tilde, "already holds a run")
    assert not os.path.exists(cwd / "~")


def test_a_model_folder_as_output_dir_is_refused(digit_model_dir, digit_data, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(digit_model_dir, model)
    before = snapshot(model)
    [model_dir] = train(train_args(digit_model_dir, digit_data, model))
    check_one_line(model_dir, "holds a model's config.json")
    assert snapshot(model) == before


def test_a_path_that_is_not_utf8_is_refused_up_front(digit_model_dir, digit_data, tmp_path):
    latin1 = os.fsencode(str(tmp_path)) + b"/caf\xe9"
    bad = subprocess.run(argv(digit_model_dir, digit_data, latin1), cwd=ROOT, env=ENV,
                         capture_output=True, text=True, check=False)
    check_one_line(bad, "not UTF-8")
    assert not os.path.exists(latin1)
    bad_eval = subprocess.run(
        [sys.executable, os.path.join(ROOT, "eval.py"), "--model", digit_model_dir, "--data",
                               digit_data, b"--output", latin1 + b".json"], cwd=ROOT, env=ENV,
                               capture_output=True,
                              text=True, check=False)
    check_one_line(bad_eval, "not UTF-8")


def test_eval_default_outputs_are_unique_per_checkpoint(base, tmp_path):
    sys.path.insert(0, ROOT)
    import eval as eval_py
    other = copy_run(base, "other", tmp_path)
    a = eval_py.default_output(os.path.join(base, "three", "checkpoints", "step-000001"),
                               ["math500"], 0)
    b = eval_py.default_output(os.path.join(other, "checkpoints", "step-000001"), ["math500"], 0)
    assert a != b and "three-step-000001" in a and "other-step-000001" in b
    assert eval_py.default_output("Qwen/Qwen2.5-1.5B", ["gsm8k:test"], 0) == \
        os.path.join("out", "eval", "Qwen-Qwen2.5-1.5B_gsm8k-test_s0.json")


# --------------------------------------------------------------------------------------------------
# 4. Non-finite numbers.

@pytest.fixture(scope="module")
def nan_model(tmp_path_factory):
    """The digit model with one NaN weight."""
    import torch
    from conftest import write_tiny_model
    from transformers import AutoModelForCausalLM
    path = write_tiny_model(tmp_path_factory.mktemp("nan"), favour="12 ")
    model = AutoModelForCausalLM.from_pretrained(path)
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight[0, 0] = float("nan")
    model.save_pretrained(path)
    return str(path)


def skip_then_stop(result):
    assert result["rc"] != 0 and "Traceback" not in result["stderr"], result["stderr"][-3000:]
    assert "3 steps in a row with a non-finite" in stderr_lines(result["stderr"])[-1]


def test_a_nan_weight_ends_in_the_skip_then_stop_line(nan_model, digit_data, tmp_path):
    [result] = train(train_args(nan_model, digit_data, tmp_path / "run", "--steps", 6))
    skip_then_stop(result)
    # NaN weights are never checkpointed
    assert not os.path.exists(tmp_path / "run" / "checkpoints")
    assert all(
        "non-finite" in m.get("skipped", "") for m
        in read_jsonl(tmp_path / "run" / "metrics.jsonl"))


def test_an_update_that_overflows_ends_in_the_skip_then_stop_line(
    digit_model_dir, digit_data, tmp_path):
    [result] = train(
        train_args(digit_model_dir, digit_data, tmp_path / "run", "--steps", 6, "--lr", 1e30,
                                "--max-grad-norm", 0))
    skip_then_stop(result)


def test_analyze_refuses_a_nan_model_and_writes_no_nan_json(nan_model, digit_data, tmp_path):
    out = tmp_path / "a.json"
    analyze = run_python(["-m", "gmts.tools.analyze", "--model", nan_model, "--data", digit_data,
                          "--prompts", "1", "--group-size", "4", "--max-new-tokens", "3",
                          "--no-plots", "--no-progress", "--device", "cpu", "--output", out])
    check_one_line(analyze, "NaN/inf")
    assert not out.exists()


# --------------------------------------------------------------------------------------------------
# 5. The edges.

def test_a_file_system_without_locks_is_one_line(tmp_path, monkeypatch):
    import fcntl
    from gmts.run import folder
    from gmts.run.validate import UsageError

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
    monkeypatch.setattr(fcntl, "flock", no_locks)
    cfg = types.SimpleNamespace(output_dir=str(tmp_path / "run"), resume="", overwrite=False)
    with pytest.raises(UsageError, match="does not support file locks"):
        folder.claim(cfg, 0)
    # the look of check_start, too
    with pytest.raises(UsageError, match="does not support file locks"):
        folder.owner(str(tmp_path / "run"))
    assert os.path.realpath(tmp_path / "run") not in folder._HELD


def test_stdout_on_a_full_disk_is_one_line(digit_model_dir, digit_data, tmp_path):
    args = argv(digit_model_dir, digit_data, str(tmp_path / "run"), "--steps", 1)
    with open("/dev/full", "w") as full:
        result = subprocess.run(args, cwd=ROOT, env=ENV, stdout=full, stderr=subprocess.PIPE,
                                text=True, check=False)
    lines = stderr_lines(result.stderr)
    assert (result.returncode != 0 and "Traceback" not in result.stderr
            and "Exception ignored" not in result.stderr)
    assert len(lines) == 1 and "writing to stdout failed" in lines[0], result.stderr


def test_world_size_without_torchrun_is_one_line(digit_model_dir, digit_data, tmp_path):
    args = argv(digit_model_dir, digit_data, str(tmp_path / "run"), "--steps", 1)
    for world_size in ("2", "two"):
        result = run_python(args[1:], env={"WORLD_SIZE": world_size})
        check_one_line(result, "WORLD_SIZE")
    assert not os.path.exists(tmp_path / "run" / "checkpoints")


def test_a_metrics_line_whose_step_is_not_an_integer(base, tmp_path):
    run = copy_run(base, "odd", tmp_path)
    with open(os.path.join(run, "metrics.jsonl")) as fh:
        lines = fh.readlines()
    lines[0] = json.dumps(dict(json.loads(lines[0]), step="1")) + "\n"
    with open(os.path.join(run, "metrics.jsonl"), "w") as fh:
        fh.writelines(lines)
    [result] = train(["--resume", run, "--steps", 4])
    ok(result)
    assert [x for x in stderr_lines(result["stderr"]) if "metrics.jsonl:1" in x], result["stderr"]
    # named, kept in the .bad- copy, left out
    assert steps_of(run) == [2, 3, 4]
    assert [f for f in os.listdir(run) if f.startswith("metrics.jsonl.bad-")]


def test_a_copied_checkpoint_folder_is_not_a_checkpoint(base, tmp_path):
    run = copy_run(base, "copied", tmp_path)
    for name in ("step-000003 copy", "step-000009 copy"):
        shutil.copytree(os.path.join(run, "checkpoints", "step-000003"),
                        os.path.join(run, "checkpoints", name))
    [result] = train(["--resume", run, "--steps", 4])
    ok(result)
    # resumed from step-000003, not from a copy
    assert steps_of(run) == [1, 2, 3, 4]
    # not ours: left alone
    assert os.path.isdir(os.path.join(run, "checkpoints", "step-000009 copy"))


def test_a_full_disk_during_the_merged_export_leaves_no_final_merged(base, tmp_path):
    from gmts.run.checkpoint import save_merged_lora
    run = copy_run(base, "merged", tmp_path)

    class Full:
        def merge_and_unload(self):
            return self

        def save_pretrained(self, path, **_):
            os.makedirs(path, exist_ok=True)
            open(os.path.join(path, "config.json"), "w").close()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    fake = types.SimpleNamespace(cfg=types.SimpleNamespace(output_dir=run), model=Full(),
                                 tokenizer=Full())
    with pytest.raises(SystemExit) as err:
        save_merged_lora(fake, 3)
    assert "\n" not in str(err.value) and "No space left on device" in str(err.value)
    assert "step-000003" in str(err.value)                          # the adapter checkpoint, intact
    assert not os.path.exists(os.path.join(run, "final-merged"))
    assert not os.path.exists(os.path.join(run, ".tmp-final-merged"))


def test_memory_refuses_a_config_that_is_not_a_causal_lm(tmp_path):
    from transformers import ViTConfig
    ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
              intermediate_size=64).save_pretrained(tmp_path / "vit")
    result = run_python(["-m", "gmts.tools.memory", "--model", tmp_path / "vit"])
    check_one_line(result, "not a causal language model")


def test_print_config_with_resume_prints_what_the_resume_runs(base, tmp_path):
    run = copy_run(base, "shown", tmp_path)
    before = snapshot(run)
    [shown] = train(["--resume", run, "--steps", 9, "--print-config"])
    ok(shown)
    config = json.loads(shown["stdout"][shown["stdout"].index("{"):])
    assert config["steps"] == 9 and config["lr"] == 1e-3 and config["seed"] == 3 and config[
        "output_dir"] == run
    assert snapshot(run) == before
