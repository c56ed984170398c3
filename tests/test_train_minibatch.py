"""train.py end to end in the paper's A.3 regime: several optimizer steps per rollout batch
(--mini-batch-size), on a tiny random Qwen2; every paper preset resolves; a run resumes bit-exactly
between rollout batches."""
import json
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from test_train import is_timing, read_jsonl, run_train


def args(model_dir, data, out, *extra):
    # 4 prompts x 4 answers a rollout, mini-batches of 1 prompt: 4 optimizer steps per rollout batch
    return ["--model", model_dir, "--data", data, "--prompts-per-step", "4", "--mini-batch-size",
            "1", "--group-size", "4", "--max-new-tokens", "3", "--micro-batch-size", "4",
            "--device", "cpu", "--output-dir", str(out), "--lr", "3e-2", "--seed", "3",
            "--save-every", "1", "--selector", "gmts", "--dynamic-sampling", "on", *extra]


@pytest.mark.parametrize("extra",
                         [[], ["--ppo-epochs", "2", "--beta", "0.05", "--kl-coverage", "all"]])
def test_minibatch_run_takes_its_optimizer_steps_and_resumes_exactly(
    digit_model_dir, digit_data, tmp_path, extra):
    straight, split = tmp_path / "straight", tmp_path / "split"
    run_train(args(digit_model_dir, digit_data, straight, "--steps", "2", *extra))
    run_train(args(digit_model_dir, digit_data, split, "--steps", "1", *extra))
    run_train(["--resume", str(split), "--steps", "2"])
    a, b = read_jsonl(straight / "metrics.jsonl"), read_jsonl(split / "metrics.jsonl")
    assert [m["step"] for m in a] == [1, 2]                 # one line per rollout batch
    epochs = 2 if "--ppo-epochs" in extra else 1
    for m in a:
        # dynamic sampling keeps 4 mixed groups: 4 mini-batches of one group, each an optimizer
        # step, per epoch
        assert m["groups"] == 4 and m["optimizer_steps"] == 4 * epochs, m
        assert m["ratio_abs_dev_mean"] > 0 and 0 <= m["clip_active_share"] <= 1
        assert 0 <= m["selection_overlap_ets_gmts_min"] <= m["selection_overlap_ets_gmts"] <= 1
        assert m["grad_norm"] <= m["grad_norm_max"]
    for x, y in zip(a, b):
        assert {k: v for k, v in x.items() if not is_timing(k)} == {
            k: v for k, v in y.items() if not is_timing(k)}
    from safetensors.torch import load_file
    wa = load_file(straight / "checkpoints" / "step-000002" / "model.safetensors")
    wb = load_file(split / "checkpoints" / "step-000002" / "model.safetensors")
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


def test_default_is_one_on_policy_step(digit_model_dir, digit_data, tmp_path):
    out = tmp_path / "run"
    run_train(
        ["--model", digit_model_dir, "--data", digit_data, "--prompts-per-step", "4",
         "--group-size", "4",
               "--max-new-tokens", "3", "--micro-batch-size", "4", "--device", "cpu",
         "--output-dir", str(out),
               "--steps", "2", "--selector", "gmts", "--dynamic-sampling", "on", "--lr", "1e-3"])
    for m in read_jsonl(out / "metrics.jsonl"):
        assert m["optimizer_steps"] == 1 and m["ratio_abs_dev_mean"] == 0.0 and m[
            "clip_active_share"] == 0.0
    assert json.loads((out / "config.json").read_text())["mini_batch_size"] == 4


PAPER = {"paper-math": (64, 64, 2048, 3e-5), "paper-math-7b": (64, 64, 2048, 3e-5),
         "paper-base": (512, 32, 4096, 1e-6), "paper-base-7b": (512, 32, 4096, 1e-6),
         "paper-coder": (512, 32, 32768, 1e-6), "paper-coder-7b": (512, 32, 32768, 1e-6),
         "paper-qwen3-8b": (512, 32, 4096, 1e-6)}


@pytest.mark.parametrize("preset", sorted(PAPER))
def test_every_paper_preset_prints_its_resolved_config(preset):
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "train.py"), "--preset", preset, "--selector", "ets",
                           "--print-config"], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"), check=False)
    assert proc.returncode == 0, proc.stderr
    note, body = proc.stdout.split("\n", 1)
    assert note.startswith(f"# --preset {preset}: A.3")
    cfg = json.loads(body)
    assert (cfg["prompts_per_step"], cfg["mini_batch_size"], cfg["max_new_tokens"],
            cfg["lr"]) == PAPER[preset]
    assert (cfg["group_size"], cfg["temperature"], cfg["eps_low"], cfg["eps_high"],
            cfg["warmup_steps"]) == \
        (16, 1.0, 0.2, 0.28, 0)
    assert cfg["selector"] == "ets"                            # flags still override
    assert cfg["prompts_per_step"] % cfg["mini_batch_size"] == 0
    assert cfg["rollout_batch_size"] >= 1                      # generation is split to fit one GPU


def test_bad_mini_batch_size_names_the_flag(digit_model_dir, digit_data, tmp_path):
    proc = run_train(args(digit_model_dir, digit_data, tmp_path / "x", "--mini-batch-size", "3"),
                     check=False)
    assert (proc.returncode == 2 and "--mini-batch-size" in proc.stderr
            and "Traceback" not in proc.stderr)
