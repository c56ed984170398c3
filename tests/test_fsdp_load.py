"""--fsdp builds the model per process (gmts/trainer/distributed.py, load_sharded): on the meta
device, then each process reads only its own rows of every weight from the memory-mapped
safetensors. The result is the whole-model load + shard_model's bit for bit (weights, buffers, the
first step's update), and a process's peak private memory is about its share, not the model."""
import importlib.util
import os

import torch

from conftest import ROOT, spawn_gloo


def save_model(folder, *, vocab, hidden, intermediate, layers, tied, dtype, seed=0):
    """A random Qwen2 saved as a transformers folder (safetensors), with a generation config."""
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, tie_word_embeddings=tied)
    model = Qwen2ForCausalLM(config).to(dtype)
    model.generation_config = GenerationConfig(eos_token_id=[3, 5], pad_token_id=0)
    model.save_pretrained(folder)
    return str(folder)


def _equal_worker(rank, world, cases):
    return [_loaded_and_stepped(rank, folder, checkpointing) for folder, checkpointing in cases]


def _loaded_and_stepped(rank, folder, checkpointing):
    from gmts.trainer import distributed
    from gmts.trainer.models import enable_gradient_checkpointing, load_model
    prepare = enable_gradient_checkpointing if checkpointing else (lambda _: None)
    cpu = torch.device("cpu")
    whole = load_model(folder, dtype=torch.float32, device=cpu)      # every process, all of it
    prepare(whole)
    distributed.shard_model(whole, torch.bfloat16)
    per_rank = load_model(folder, dtype=torch.float32, device=cpu, shard=lambda path: (
        distributed.load_sharded(path, torch.bfloat16, cpu, prepare)))
    out = {"sharded": [bool(distributed.sharded_layers(m)) for m in (whole, per_rank)],
           "training": [m.training for m in (whole, per_rank)],
           "checkpointing": [m.is_gradient_checkpointing for m in (whole, per_rank)],
           "use_cache": [m.config.use_cache for m in (whole, per_rank)],
           "eos": [m.generation_config.eos_token_id for m in (whole, per_rank)],
           "names": [[n for n, _ in m.named_parameters()] for m in (whole, per_rank)],
           "loaded": [[p.to_local().clone() for p in m.parameters()] for m in (whole, per_rank)],
           "buffers": [[b.clone() for b in m.buffers()] for m in (whole, per_rank)]}
    ids = torch.tensor([[1, 7, 9, 2, 11, 4], [8, 3, 6, 10, 12, 13]])                 # (2, 6)
    for model in (whole, per_rank):
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        model(input_ids=ids[rank:rank + 1]).logits.float().logsumexp(-1).sum().backward()
        opt.step()
    out["stepped"] = [[p.to_local().clone() for p in m.parameters()] for m in (whole, per_rank)]
    # what the planner plans per process (gmts/tools/memory.py, fsdp_components)
    layers = per_rank.get_decoder().layers
    out["plan"] = {"shard": sum(p.to_local().numel() for p in per_rank.parameters()),
                   "adamw": sum(v.to_local().numel() for state in opt.state.values()
                                for k, v in state.items() if k in ("exp_avg", "exp_avg_sq")),
                   "grad": sum(p.grad.to_local().numel() for p in per_rank.parameters()),
                   "layer": sum(p.numel() for p in layers[0].parameters()),
                   "root": sum(p.numel() for p in per_rank.parameters())
                   - sum(p.numel() for layer in layers for p in layer.parameters())}
    return out


def test_per_rank_load_equals_the_whole_model_load_and_the_plan(tmp_path):
    """float32 tied weights (the start) and bf16 untied ones (a checkpoint an FSDP run writes, its
    weights in the compute dtype) with gradient checkpointing; 67 vocabulary rows over 2
    processes: 34 and 33. The same processes check the planner's shard sizes (check_plan)."""
    cases = [(save_model(tmp_path / "start", vocab=67, hidden=32, intermediate=64, layers=2,
                         tied=True, dtype=torch.float32), False),
             (save_model(tmp_path / "checkpoint", vocab=67, hidden=32, intermediate=64, layers=2,
                         tied=False, dtype=torch.bfloat16), True)]
    results = spawn_gloo(_equal_worker, tmp_path, cases)
    for parts, (folder, checkpointing) in zip(zip(*results), cases):
        check_equal(parts, checkpointing)
        check_plan(parts, folder)


def check_equal(parts, checkpointing):
    for part in parts:
        assert part["sharded"] == [True, True] and part["training"] == [False, False]
        assert part["checkpointing"] == [checkpointing] * 2
        assert part["use_cache"][0] == part["use_cache"][1]
        assert part["eos"] == [[3, 5], [3, 5]]
        assert part["names"][0] == part["names"][1]
        for key in ("loaded", "buffers", "stepped"):
            whole, per_rank = part[key]
            assert len(whole) == len(per_rank) > 0
            for a, b in zip(whole, per_rank):
                assert a.dtype == b.dtype == torch.float32 and torch.equal(a, b), key
    rows = [part["loaded"][1][0].shape[0] for part in parts]          # the embedding's shards
    assert rows == [34, 33]


def check_plan(parts, folder):
    """The planner's per-process figures against the sharded model: the first process's shards
    (the largest: ceil(rows / 2) rows of each weight), AdamW's m and v and the reduced float32
    gradients on them, one gathered layer, the root's parameters."""
    from transformers import AutoConfig
    from gmts.tools import memory
    shape = memory.model_shape(AutoConfig.from_pretrained(folder))
    first, second = (part["plan"] for part in parts)
    shard = memory.shard_elements(shape, 2)
    assert first["shard"] == shard and second["shard"] < shard
    for part in (first, second):
        assert part["adamw"] == 2 * part["shard"] and part["grad"] == part["shard"]
        assert part["layer"] == shape.layer_params
        assert part["root"] == shape.params - shape.layers * shape.layer_params


def _peak_worker(rank, world, folder):
    import gc
    from gmts.trainer import distributed
    spec = importlib.util.spec_from_file_location(
        "save_resume_memory", os.path.join(ROOT, "bench", "save_resume_memory.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # the code's first run (imports: FSDP, DTensor, the model's module) apart, on a small model
    distributed.load_sharded(folder + "-small", torch.float32, torch.device("cpu"))
    gc.collect()
    before = bench.status("RssAnon")
    watch = bench.AnonPeak()
    model = distributed.load_sharded(folder, torch.float32, torch.device("cpu"))
    peak = watch.stop()
    largest = max(p.numel() for p in model.parameters()) * 4
    return {"grown": peak - before, "largest": largest,
            "params": sum(p.numel() for p in model.parameters())}


def test_a_process_holds_its_share_not_the_model(tmp_path):
    """~54M parameters stored in bf16 (as hub models and an FSDP run's checkpoints are), loaded
    as float32 shards by 2 processes. Loading the whole model first, a process would grow by the
    whole float32 model (4 P bytes, the cast copy) at least; per rank it grows by its float32
    shards (4 P / 2) plus at most one weight's rows at a time (<= the largest weight) plus the
    model's Python structures (a few MB). The bound is the midpoint of the two, so each side is
    clear of it by (4 P - 4 P / 2 - largest) / 2, ~49 MB."""
    folder = save_model(tmp_path / "model", vocab=1024, hidden=768, intermediate=3072, layers=6,
                        tied=True, dtype=torch.bfloat16)
    save_model(tmp_path / "model-small", vocab=67, hidden=32, intermediate=64, layers=2, tied=True,
               dtype=torch.float32)
    parts = spawn_gloo(_peak_worker, tmp_path, folder)
    for part in parts:
        whole = 4 * part["params"]
        expected = whole / 2 + part["largest"]
        assert part["grown"] < (whole + expected) / 2, (part, whole)
