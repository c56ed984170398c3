"""gmts/tools/memory.py: the planner counts parameters exactly from a config, adds components the
way train.py holds them, and its CLI takes train.py's flags. (Its accuracy against measured peaks:
bench/memory_check.py, bench/README.md.)"""
import dataclasses
import json

import pytest

from gmts.tools import memory
from gmts.run.config import parse_config

from conftest import tiny_qwen2


def test_shape_counts_parameters_exactly_and_lora_like_peft():
    from gmts.trainer.policy import add_lora
    for tied in (False, True):
        model = tiny_qwen2(vocab_size=64, hidden=16, layers=2)
        model.config.tie_word_embeddings = tied
        shape = memory.model_shape(model.config)
        real = type(model)(model.config)
        assert shape.params == sum(p.numel() for p in real.parameters())
        assert (shape.vocab, shape.hidden, shape.layers, shape.heads, shape.kv_heads) == (
            64, 16, 2, 2, 1)
    lora = add_lora(tiny_qwen2(vocab_size=64, hidden=16, layers=2), rank=4)
    trainable = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert (4 * memory.model_shape(tiny_qwen2(vocab_size=64, hidden=16, layers=2).config)
            .lora_per_rank == trainable)


def shape():
    return memory.Shape(name="m", params=1_000_000, vocab=1000, hidden=64, layers=4, heads=4,
                        kv_heads=2, head_dim=16, intermediate=128, tied=True,
                        lora_per_rank=4 * 7 * 128)


def plan(*flags, prompt_tokens=100):
    return memory.plan(parse_config(list(flags)), shape(), prompt_tokens=prompt_tokens,
                       device="gpu")


def test_components_follow_the_settings():
    c, phases, (peak, _phase), host = plan()
    P = 1_000_000
    # bf16 weights on a GPU, their gradients summed in float32
    assert c["weights"] == 2 * P and c["gradients"] == 4 * P
    # float32 master + m + v
    assert c["optimizer_state"] == 12 * P and c["optimizer_location"] == "gpu"
    assert c["reference_model"] == 0 and host == 0 and peak == max(phases.values())
    assert plan("--beta", "0.01")[0]["reference_model"] == 2 * P
    offload = plan("--optimizer-offload")
    assert offload[0]["optimizer_location"] == "cpu" and offload[3] == 12 * P
    # the state left the GPU
    assert offload[2][0] < peak
    lora = plan("--lora-rank", "8", "--beta", "0.01")[0]
    assert lora["gradients"] == 4 * 8 * shape().lora_per_rank and lora["reference_model"] == 0
    fp32 = memory.plan(parse_config([]), shape(), prompt_tokens=100, device="cpu")[0]
    assert fp32["weights"] == 4 * P and fp32["optimizer_state"] == 8 * P and fp32["runtime"] > 0
    on, off = plan("--gradient-checkpointing")[0], plan("--no-gradient-checkpointing")[0]
    assert on["activations"] == on["activations_checkpointing"] < off["activations"] == off[
        "activations_no_checkpointing"]
    kv1, kv4 = plan("--rollout-batch-size", "1")[0]["kv_cache"], plan("--rollout-batch-size", "4")[
        0]["kv_cache"]
    assert kv4 == 4 * kv1
    assert (plan("--micro-batch-size", "16")[0]["activations"]
            == 2 * plan("--micro-batch-size", "8")[0]["activations"])
    # a token budget replaces rows x padded width: activations scale with the budget, whatever the
    # row count
    budget = plan("--micro-batch-tokens", "40000")[0]["activations"]
    assert budget == plan("--micro-batch-tokens", "40000", "--micro-batch-size", "1")[0][
        "activations"]
    assert plan("--micro-batch-tokens", "80000")[0]["activations"] == 2 * budget


def test_optimizer_step_counts_foreach_adamws_sqrt_of_v_on_a_gpu():
    """The optimizer step's phase on a GPU: base + float32 gradient copies + sqrt(v) (torch's
    foreach AdamW, its default there), the bf16 gradients freed before it (an H200 measured 11.13
    GiB where the plan without it said 10.12: bench/README.md, "GPU"); none of it on a CPU (no
    foreach there) or with the state in host memory."""
    P = 1_000_000
    c, phases, _, _ = plan("--beta", "0.01")
    base = c["weights"] + c["reference_model"] + c["optimizer_state"]
    assert c["optimizer_foreach_temp"] == 4 * P and c["optimizer_step_copies"] == 4 * P
    assert phases["optimizer_step"] == base + 8 * P
    offload = plan("--optimizer-offload")[0:2]
    assert offload[0]["optimizer_foreach_temp"] == 0
    assert offload[1]["optimizer_step"] == offload[0]["weights"] + offload[0]["gradients"]
    cpu, cpu_phases, _, _ = memory.plan(parse_config([]), shape(), prompt_tokens=100, device="cpu")
    assert cpu["optimizer_foreach_temp"] == 0 and cpu_phases["optimizer_step"] == (
        cpu["runtime"] + cpu["weights"] + cpu["optimizer_state"] + cpu["gradients"])
    fp32 = plan("--dtype", "float32")                       # plain AdamW: its gradients stay
    assert fp32[0]["optimizer_foreach_temp"] == 4 * P and fp32[1]["optimizer_step"] == (
        fp32[0]["weights"] + fp32[0]["optimizer_state"] + fp32[0]["gradients"] + 4 * P)


def test_foreach_adamw_holds_sqrt_of_v_for_every_parameter_at_once():
    """What the plan assumes of torch's foreach AdamW (the path it takes for CUDA tensors), seen on
    this CPU by asking for it: one op returns sqrt(v) for all parameters together, 4 bytes each."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        biggest = (0, "")

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            flat = out if isinstance(out, (list, tuple)) else [out]
            size = sum(t.numel() * t.element_size() for t in flat if isinstance(t, torch.Tensor))
            self.biggest = max(self.biggest, (size, str(func)))
            return out

    params = [torch.nn.Parameter(torch.randn(n)) for n in (1000, 300, 50)]
    opt = torch.optim.AdamW(params, lr=1e-3, foreach=True)
    for p in params:
        p.grad = torch.randn_like(p)
    opt.step()                                                        # the state exists
    with Largest() as seen:
        opt.step()
    assert seen.biggest[0] == 4 * 1350 and "sqrt" in seen.biggest[1], seen.biggest


def test_largest_fitting_settings():
    cfg = parse_config(["--prompts-per-step", "4", "--group-size", "4", "--micro-batch-size", "1"])
    huge = memory.largest_fitting(cfg, shape(), 10 ** 12, 100)
    assert huge == {"changes": {}, "micro_batch_size": 16, "rollout_batch_size": 4}
    # not even the weights fit
    assert memory.largest_fitting(cfg, shape(), 10 ** 6, 100) is None
    need = memory.plan(dataclasses.replace(cfg, micro_batch_size=2, rollout_batch_size=1), shape(),
                       prompt_tokens=100, device="gpu")
    tight = memory.largest_fitting(cfg, shape(), need[2][0], 100)
    assert tight["micro_batch_size"] == 2 and tight["changes"] == {}


def test_cli_reads_only_the_config(tiny_model_dir, tmp_path, capsys):
    import shutil
    folder = tmp_path / "config-only"
    folder.mkdir()
    shutil.copy(f"{tiny_model_dir}/config.json", folder / "config.json")     # no weights at all
    memory.main(
        ["--model", str(folder), "--gpu-memory", "24", "80", "--micro-batch-size", "4",
         "--lora-rank", "8"])
    text = capsys.readouterr().out
    for line in ("weights", "gradients", "optimizer state", "activations, no checkpointing",
                 "activations, checkpointing", "output head chunks", "KV cache", "LoRA:",
                 "24.0 GiB GPU", "80.0 GiB GPU", "largest that fits"):
        assert line in text, line
    memory.main(
        ["--model", str(folder), "--gpu-memory", "24", "--json", "--preset", "cpu-demo", "--model",
         str(folder)])
    report = json.loads(capsys.readouterr().out)
    assert report["peak_bytes"] == max(report["phases_bytes"].values()) and report["gpus"]["24.0"][
        "fits_as_given"]
    with pytest.raises(SystemExit):
        memory.main(["--model", str(tmp_path / "nowhere"), "--gpu-memory", "24"])
