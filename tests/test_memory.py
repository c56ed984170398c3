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
    from gmts.trainer.models import add_lora
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
    # + the float32 sums of the bf16 micro-batches' gradients, held until the step
    assert c["gradient_sums"] == 4 * P
    assert phases["optimizer_step"] == base + 8 * P + c["gradient_sums"]
    offload = plan("--optimizer-offload")[0:2]
    assert offload[0]["optimizer_foreach_temp"] == 0
    assert offload[1]["optimizer_step"] == (offload[0]["weights"] + offload[0]["gradients"]
                                            + offload[0]["gradient_sums"])
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


def test_every_phase_of_a_step_is_planned():
    """Rollout (KV cache, sampler buffers, the K/V expanded for one layer), evaluation (calls of at
    most the rollout's rows), training (+ float32 gradient sums in bf16), the optimizer step; the
    host memory of a save and of a resume; on CPU the last two are phases of the process."""
    P, H, V, heads, hd = 1_000_000, 64, 1000, 4, 16
    c, phases, _, _ = plan("--rollout-batch-size", "2", "--group-size", "4")
    assert set(phases) == {"rollout", "evaluation", "training", "optimizer_step"}
    assert set(c["host_phases"]) == {"save", "resume"}
    rows, width = 2 * 4, 100 + 256                         # prompt_tokens 100, --max-new-tokens 256
    assert c["kv_cache"] == 4 * 2 * rows * 2 * width * hd * 2
    # eager decoding: the prefill's expansion (2 prompts x 100 columns), bf16 keys and values
    assert c["kv_expansion"] == 2 * 100 * 2 * heads * hd * 2
    compiled = plan("--rollout-batch-size", "2", "--group-size", "4", "--compile")[0]
    assert compiled["kv_expansion"] == rows * width * 2 * heads * hd * 2
    for samples, eval_rows in (("1", 8), ("3", 6), ("8", 8), ("16", 8)):
        e, ph, _, _ = plan("--rollout-batch-size", "2", "--group-size", "4", "--eval-samples",
                           samples)
        assert e["eval_kv_cache"] * rows == e["kv_cache"] * eval_rows
        assert ph["evaluation"] <= ph["rollout"]
    # --eval-max-rows: calls of that many rows (whole problems), beyond the rollout's 8
    for samples, bound, eval_rows in (("2", "20", 20), ("3", "20", 18), ("32", "20", 20)):
        e = plan("--rollout-batch-size", "2", "--group-size", "4", "--eval-samples", samples,
                 "--eval-max-rows", bound)[0]
        assert e["eval_kv_cache"] * rows == e["kv_cache"] * eval_rows
        assert e["eval_sampler_buffers"] == eval_rows * V * (2 + 4 + 8)     # bf16 logits
    assert plan("--dtype", "float32")[0]["gradient_sums"] == 0
    assert plan("--lora-rank", "8")[0]["gradient_sums"] == 0        # adapters are float32
    host = plan("--optimizer-offload")[0]["host_phases"]
    # a GPU's save: the offloaded state, a host copy of every bf16 weight, one V x H float32 tensor
    assert host["save"] == 12 * P + 2 * P + V * H * 4
    # its resume: the model on the host before it moves, the offloaded state built from the file
    assert host["resume"] == 2 * P + 12 * P
    cpu_c, cpu, _, _ = memory.plan(parse_config(["--optimizer-offload"]), shape(),
                                   prompt_tokens=100, device="cpu")
    runtime = cpu_c["runtime"]
    assert cpu["save"] == runtime + 4 * P + 12 * P                     # no copy of anything
    # the state copied out of the mapped file (its pages are page cache, not counted)
    assert cpu["resume"] == runtime + 4 * P + 12 * P
    plain = memory.plan(parse_config([]), shape(), prompt_tokens=100, device="cpu")[1]
    assert plain["resume"] == plain["save"] == runtime + 4 * P + 8 * P


def test_measured_save_and_resume_peaks_are_within_ten_percent_of_the_plan():
    """bench/save_resume_memory.py's committed measurement (peak private memory, RssAnon, of a save
    and of a resume under 2 gloo processes, ~93M parameters, CPU) against the planner's figure now.
    (The mapped checkpoint's pages are page cache: in the resident set, not in the plan.)"""
    import os
    from transformers import Qwen2Config
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "bench", "results", "save_resume_memory.json")) as fh:
        bench = json.load(fh)
    measured_shape = memory.model_shape(Qwen2Config(**bench["shape"]))
    assert measured_shape.params == bench["params"]
    _, phases, _, _ = memory.plan(parse_config(bench["flags"]), measured_shape, device="cpu")
    assert {r["phase"] for r in bench["rows"]} == {"save", "resume"}
    assert {r["rank"] for r in bench["rows"] if r["phase"] == "resume"} == {0, 1}
    for row in bench["rows"]:
        measured = row["measured_peak_anon_gib"] * memory.GIB
        assert abs(phases[row["phase"]] - measured) <= 0.10 * measured, row


def test_the_report_says_whether_checkpointing_is_needed():
    cfg = parse_config(["--micro-batch-size", "8"])
    with_ckpt, without = (memory.plan(dataclasses.replace(cfg, gradient_checkpointing=on),
                                      shape(), prompt_tokens=100)[2][0] for on in (True, False))
    assert with_ckpt < without
    between = (with_ckpt + without) / 2 / memory.GIB / (1 - memory.GPU_RESERVE)
    r = memory.report(cfg, shape(), [1000, between, with_ckpt / memory.GIB / 2], 100)
    assert [f["checkpointing"] for f in r["gpus"].values()] == ["not needed", "needed",
                                                                 "not enough"]


def test_compiled_decode_kv_caches_are_planned_as_the_code_allocates_them(monkeypatch):
    """--compile keeps each bucket's KV cache for the run (CompiledDecode): two steps of 3 prompts
    in calls of 2 (rows 4 and 2) whose longest prompts fall in both width buckets (16 and 32
    columns) leave 4 caches; the planner's figure is their bytes, counted from the tensors. The
    decode runs eagerly (torch.compile the identity): the caches are the same, no code is made."""
    from gmts.trainer.compiled_decode import CompiledDecode
    from gmts.trainer.rollout import sample
    from conftest import sampler_kwargs
    monkeypatch.setattr("torch.compile", lambda fn=None, **_: fn if fn else (lambda f: f))
    cfg = parse_config(["--prompts-per-step", "3", "--group-size", "2", "--rollout-batch-size",
                        "2", "--max-new-tokens", "4", "--compile", "--device", "cpu",
                        "--micro-batch-size", "2"])
    model = tiny_qwen2()
    for seed, lengths in enumerate([(5, 9, 20), (30, 3, 4)]):
        prompts = [[3 + i % 50 for i in range(n)] for n in lengths]
        sample(model, prompts, prompts_per_call=cfg.rollout_batch_size,
               **sampler_kwargs(seed, group_size=2, max_new_tokens=4,
                                decode=CompiledDecode))
    buckets = model.__dict__["_gmts_decode_buckets"]
    assert sorted((rows, width) for rows, width, *_ in buckets) == [(2, 20), (2, 36), (4, 20),
                                                                    (4, 36)]
    allocated = sum(layer.keys.nbytes + layer.values.nbytes
                    for cache in buckets.values() for layer in cache.layers)
    shape_ = memory.model_shape(model.config)
    assert memory.rollout_calls(cfg) == [4, 2]
    c, phases, _, _ = memory.plan(cfg, shape_, prompt_tokens=30, device="cpu")
    assert c["compiled_kv_caches"] == allocated > 0
    eager = memory.plan(dataclasses.replace(cfg, compile=False), shape_, prompt_tokens=30,
                        device="cpu")
    assert eager[0]["compiled_kv_caches"] == 0
    # the kept caches beside the current call's, in every phase after the first rollout
    kept = allocated - c["kv_cache"]
    assert phases["training"] - eager[1]["training"] == kept


def test_gradient_checkpointing_auto_follows_the_plan(tiny_model_dir, monkeypatch):
    """auto (the default): off on a CPU; on a GPU on only where the plan without checkpointing
    exceeds the card's usable memory; on / off (and an older run's true / false) as given; the
    flag alone is on, --no-gradient-checkpointing off; a bad value one line naming the flag."""
    import torch
    cfg = parse_config(["--model", tiny_model_dir])
    assert cfg.gradient_checkpointing == "auto"
    assert [parse_config(f).gradient_checkpointing for f in (
        ["--gradient-checkpointing"], ["--no-gradient-checkpointing"],
        ["--gradient-checkpointing", "off"], ["--preset", "cpu-demo"])] == ["on", "off", "off",
                                                                             "off"]
    on, said = memory.decide_checkpointing(cfg, tiny_model_dir, torch.device("cpu"), 100)
    assert not on and said == "gradient checkpointing off (auto: on a CPU it only costs time)"
    without = memory.plan(dataclasses.replace(cfg, gradient_checkpointing="off"),
                          memory.model_shape(memory.load_config(tiny_model_dir)),
                          prompt_tokens=100)[2][0]
    card = without / (1 - memory.GPU_RESERVE)
    for size, expected in ((card * 1.01, False), (card * 0.99, True)):
        monkeypatch.setattr(memory, "device_bytes", lambda _device, size=size: size)
        on, said = memory.decide_checkpointing(cfg, tiny_model_dir, torch.device("cuda"), 100)
        assert on == expected and said.startswith(
            f"gradient checkpointing {'on' if expected else 'off'} (auto: the memory plan")
        for value, forced in (("on", True), ("off", False), (True, True), (False, False)):
            assert memory.decide_checkpointing(dataclasses.replace(
                cfg, gradient_checkpointing=value), tiny_model_dir, torch.device("cuda"),
                100)[0] == forced
    # the plan's own activations follow the same decision for a budget
    checked = memory.plan(cfg, shape(), prompt_tokens=100, budget=1)[0]
    roomy = memory.plan(cfg, shape(), prompt_tokens=100, budget=1 << 50)[0]
    assert checked["activations"] == checked["activations_checkpointing"]
    assert roomy["activations"] == roomy["activations_no_checkpointing"]
    with pytest.raises(SystemExit):
        parse_config(["--gradient-checkpointing", "maybe"])


def test_fsdp_is_planned_per_process(tiny_model_dir, capsys):
    """--fsdp over N processes: float32 shards of ceil(rows / N) rows (the first process's),
    AdamW's m and v on them, float32 unsharded gradients while the passes accumulate, every layer
    gathered in a rollout, the root and two layers in training; the CLI needs --processes.
    (Against the sharded model on gloo: tests/test_fsdp_load.py.)"""
    cfg = memory.parse_as_processes(["--model", tiny_model_dir, "--fsdp"], 4)
    s = memory.model_shape(memory.load_config(tiny_model_dir))
    c, phases, _, _ = memory.plan(cfg, s, prompt_tokens=50, world=4)
    shard = sum(-(-rows // 4) * (n // rows) for rows, n in s.rows)
    assert shard < s.params and c["weights"] == 4 * shard and c["optimizer_state"] == 8 * shard
    assert c["gradients"] == 4 * s.params and c["gradient_sums"] == 0
    assert c["fsdp_gathered_rollout"] == 2 * s.params                   # bf16 on a GPU
    root = s.params - s.layers * s.layer_params
    assert c["fsdp_gathered_training"] == 2 * (root + 2 * s.layer_params)
    assert set(c["host_phases"]) == {"start", "save", "resume"}
    one = memory.plan(dataclasses.replace(cfg, fsdp=False), s, prompt_tokens=50)[1]
    assert phases["optimizer_step"] < one["optimizer_step"]
    memory.main(["--model", tiny_model_dir, "--fsdp", "--processes", "4", "--gpu-memory", "24"])
    assert "FSDP over 4 processes" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        memory.main(["--model", tiny_model_dir, "--fsdp", "--gpu-memory", "24"])


def test_measured_fsdp_start_save_and_resume_peaks_are_within_ten_percent_of_the_plan():
    """bench/save_resume_memory.py --fsdp's committed measurement (2 gloo processes, ~93M
    parameters stored in bf16, computing in bf16): each process's start (the model built per
    process), rank 0's save and each process's resume, peak private memory, against the planner's
    per-process host phases now."""
    import os
    from transformers import Qwen2Config
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "bench", "results", "save_resume_memory_fsdp.json")) as fh:
        bench = json.load(fh)
    measured_shape = memory.model_shape(Qwen2Config(**bench["shape"]))
    cfg = memory.parse_as_processes(bench["flags"], 2)
    host = memory.plan(cfg, measured_shape, device="cpu", world=2)[0]["host_phases"]
    assert {(r["phase"], r["rank"]) for r in bench["rows"]} == {
        ("start", 0), ("start", 1), ("save", 0), ("resume", 0), ("resume", 1)}
    for row in bench["rows"]:
        measured = row["measured_peak_anon_gib"] * memory.GIB
        assert abs(host[row["phase"]] - measured) <= 0.10 * measured, row
