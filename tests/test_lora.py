"""LoRA through peft (--lora-rank): train.py end to end on the tiny digit model (offline, CPU).

What must hold: only the adapters train (the merged export differs from the base only in the
LoRA-targeted linear weights, by exactly scale * B @ A); the adapter checkpoint and the final-merged
folder load with transformers and give the same logits; a resumed run continues exactly (2 + 2 steps
== 4 steps); and with beta > 0 the reference is the model with its adapters switched off, i.e. the
starting policy.
"""
import json
import os
import shutil

import pytest
import torch

from conftest import run_python

pytest.importorskip("peft", reason="--lora-rank needs peft (pip install peft); LoRA tests skipped")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMING = {"time_rollout_s", "time_train_s", "tokens_per_s", "peak_memory_mb", "time_score_select_s"}
RANK, ALPHA = 4, 8.0


def lora_args(model_dir, data, out, *extra):
    return ["--model", model_dir, "--data", data, "--steps", "2", "--prompts-per-step", "2",
            "--group-size", "4", "--max-new-tokens", "3", "--micro-batch-size", "4", "--device",
            "cpu", "--output-dir", str(out), "--lr", "1e-2", "--seed", "3", "--save-every", "1",
            "--keep-checkpoints", "4", "--selector", "gmts", "--lora-rank", str(RANK),
            "--lora-alpha", str(ALPHA), "--no-gradient-checkpointing", *extra]


def run_train(args):
    proc = run_python(["train.py", *args], timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"train.py failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def read_jsonl(path):
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def adapter(path):
    from safetensors.torch import load_file
    return load_file(os.path.join(path, "adapter_model.safetensors"))


def untimed(metrics):
    return [{k: v for k, v in m.items() if k not in TIMING} for m in metrics]


@pytest.fixture(scope="module")
def lora_run(digit_model_dir, digit_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("lora") / "run"
    run_train(lora_args(digit_model_dir, digit_data, out))
    return out


def test_only_adapters_train_and_both_exports_load(lora_run, digit_model_dir):
    from peft import PeftModel

    from gmts.trainer.models import peft_quiet
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    ckpt = lora_run / "checkpoints" / "step-000002"
    assert (ckpt / "adapter_config.json").exists() and not (ckpt / "model.safetensors").exists()
    weights = adapter(ckpt)
    assert weights and all("lora_A" in k or "lora_B" in k for k in weights), sorted(weights)[:5]
    # B starts at 0: it moved
    assert any(w.abs().sum() > 0 for k, w in weights.items() if "lora_B" in k)

    # The merged export: every non-LoRA tensor (embeddings, norms, head) is the base's, bit for bit;
    # every targeted linear weight is base + (alpha / r) * B @ A.
    base = load_file(os.path.join(digit_model_dir, "model.safetensors"))
    merged = load_file(lora_run / "final-merged" / "model.safetensors")
    assert merged.keys() == base.keys()
    lora_pairs = {}
    for k, w in weights.items():
        module = k.split(".lora_")[0].replace("base_model.model.", "", 1)
        lora_pairs.setdefault(module, {})["A" if "lora_A" in k else "B"] = w
    assert len(lora_pairs) == 2 * 7          # 2 layers x q, k, v, o, gate, up, down
    changed = 0
    for name, w in base.items():
        module = name[:-len(".weight")] if name.endswith(".weight") else None
        if module in lora_pairs:
            delta = (ALPHA / RANK) * lora_pairs[module]["B"] @ lora_pairs[module]["A"]
            # peft merges W + (α/r) B A in float32 as we do, in another order: <= r u Σ|B A| + u |W|
            # (r = 4, |W| ~ 0.1, |B A| ~ lr-sized): ~1e-8, under 1e-6 + 1e-5 |W|
            torch.testing.assert_close(merged[name], w + delta, rtol=1e-5, atol=1e-6)
            changed += int(not torch.equal(merged[name], w))
        else:
            assert torch.equal(merged[name], w), name
    assert changed > 0

    # Both folders load with transformers and are the same function.
    ids = torch.tensor([[3, 9, 11, 4, 40, 41]])
    plain = AutoModelForCausalLM.from_pretrained(lora_run / "final-merged").eval()
    # peft's own deprecation warning (gmts/trainer/models.py, peft_quiet)
    with peft_quiet():
        with_adapter = PeftModel.from_pretrained(
            AutoModelForCausalLM.from_pretrained(digit_model_dir), ckpt).eval()
        # transformers reads adapter_config.json
        auto_adapter = AutoModelForCausalLM.from_pretrained(ckpt).eval()
    with torch.no_grad():
        reference = plain(ids).logits
        # merged weights against W x + (α/r) B (A x): the same function rounded in two orders, ~u
        # per layer relative on logits of |z| < 1 (a tiny model): ~1e-7, under 1e-5 + 1e-4 |z|
        torch.testing.assert_close(with_adapter(ids).logits, reference, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(auto_adapter(ids).logits, reference, rtol=1e-4, atol=1e-5)
        start = AutoModelForCausalLM.from_pretrained(digit_model_dir).eval()(ids).logits
    assert not torch.allclose(start, reference)


def test_resume_with_lora_continues_exactly(lora_run, digit_model_dir, digit_data, tmp_path):
    split = tmp_path / "split"
    # the 2-step run, continued to 4 (the module's copy stays as it was)
    shutil.copytree(lora_run, split)
    run_train(["--resume", str(split), "--steps", "4"])
    straight = tmp_path / "straight"
    run_train(lora_args(digit_model_dir, digit_data, straight, "--steps", "4"))
    a, b = read_jsonl(straight / "metrics.jsonl"), read_jsonl(split / "metrics.jsonl")
    assert [m["step"] for m in b] == [1, 2, 3, 4]
    assert untimed(a) == untimed(b)
    wa, wb = adapter(straight / "checkpoints" / "step-000004"), adapter(
        split / "checkpoints" / "step-000004")
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    assert not all(
        torch.equal(wa[k], adapter(lora_run / "checkpoints" / "step-000002")[k]) for k in wa)
    from safetensors.torch import load_file
    ma = load_file(straight / "final-merged" / "model.safetensors")
    mb = load_file(split / "final-merged" / "model.safetensors")
    for k in ma:
        assert torch.equal(ma[k], mb[k]), k


def test_kl_reference_is_the_model_with_adapters_off(lora_run, digit_model_dir, digit_data,
                                                     tmp_path):
    # At step 1 LoRA's B is 0, so the policy equals the adapters-off reference: the k3 term and its
    # gradient are 0 and step 1 must match the beta = 0 run. Any other reference (or a reference
    # that moved with the adapters) breaks that, or (step 2) the KL term would never act.
    out = tmp_path / "kl"
    run_train(lora_args(digit_model_dir, digit_data, out, "--beta", "0.5", "--kl-coverage", "all"))
    kl, plain = read_jsonl(out / "metrics.jsonl"), read_jsonl(lora_run / "metrics.jsonl")
    assert all(torch.isfinite(torch.tensor([m["loss"], m["grad_norm"]])).all() for m in kl)
    # the k3 term and its gradient are exactly 0 at step 1 (π = π_ref bit for bit: B = 0 adds an
    # exact 0), and an exact 0 changes no float sum: the loss and gradient norm are the same numbers
    # as without KL, equal to the last bit by construction; rel 1e-6 is a margin, not a measured
    # spread
    assert kl[0]["loss"] == pytest.approx(plain[0]["loss"], rel=1e-6, abs=1e-9)
    assert kl[0]["grad_norm"] == pytest.approx(plain[0]["grad_norm"], rel=1e-6)
    # (The weights after step 1 agree to float rounding only: the reference forward runs in its own
    # pass.)
    w_kl, w_plain = adapter(out / "checkpoints" / "step-000001"), adapter(
        lora_run / "checkpoints" / "step-000001")
    # AdamW's first step is θ - lr g/(|g| + ε): a gradient difference δ (rounding, ~u |g|) moves a
    # coordinate by lr ε δ / g² = 1e-2 · 1e-8 · 6e-8 / |g| ≈ 6e-18 / |g|, under 1e-6 for every |g| >
    # 1e-11 (B's gradients are O(1e-3)); A's gradient is exactly 0 at B = 0, so A does not move in
    # either run.
    for k in w_plain:
        torch.testing.assert_close(w_kl[k], w_plain[k], rtol=1e-4, atol=1e-6)
    # Step 2: the policy has moved away from the reference, so the KL term now changes the loss.
    assert kl[1]["loss"] != pytest.approx(plain[1]["loss"], rel=1e-6, abs=1e-9)
    assert (out / "final-merged" / "model.safetensors").exists()


@pytest.mark.parametrize("lora", [False, True])
def test_gradient_checkpointing_gives_the_same_gradients(lora):
    """gmts.trainer.models.enable_gradient_checkpointing (non-reentrant, with no forward hook on
    the embeddings): the trainable parameters' gradients equal those without checkpointing, also
    when the embeddings are frozen (LoRA), and the embeddings carry no hook that a compiled decode
    step would have to trace."""
    from conftest import tiny_qwen2
    from gmts.trainer.models import add_lora, enable_gradient_checkpointing

    grads = []
    for checkpointing in (False, True):
        model = tiny_qwen2(dtype=torch.float64)
        if lora:
            model = add_lora(model, rank=RANK, alpha=ALPHA)
            for name, p in model.named_parameters():     # B = 0 at init: give it a gradient path
                if "lora_B" in name:
                    torch.nn.init.normal_(p, std=0.1, generator=torch.Generator().manual_seed(1))
        if checkpointing:
            enable_gradient_checkpointing(model)
            embed = model.get_input_embeddings()
            assert not embed._forward_hooks
            assert any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
        model.train()
        ids = torch.randint(0, 64, (3, 9), generator=torch.Generator().manual_seed(0))
        model(input_ids=ids).logits.double().logsumexp(-1).sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.requires_grad})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 0
    for name, g in grads[0].items():
        assert g is not None and grads[1][name] is not None, name
        assert g.abs().sum() > 0 or "lora_A" not in name, name
        torch.testing.assert_close(grads[1][name], g, rtol=1e-12, atol=1e-14, msg=name)
