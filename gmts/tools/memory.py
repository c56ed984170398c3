"""Will it fit? Peak memory of a train.py run, per component, from the model's config alone (no
weights).

    python -m gmts.tools.memory --model Qwen/Qwen2.5-1.5B-Instruct --gpu-memory 24 80 \
        [any train.py flags]
    python -m gmts.tools.memory --preset paper-math --gpu-memory 80 --json

Reads config.json (a folder, or a hub id: the config file only), builds the model on PyTorch's meta
device to count its parameters exactly, and adds up what train.py holds at each phase of a step, for
the settings the train.py flags give (--preset, --micro-batch-size, --rollout-batch-size,
--lora-rank, --optimizer-offload, --no-gradient- checkpointing, --beta, --chunk-size, --dtype,
--device ...). Sizes in GiB (2^30 bytes). b = bytes per element of the compute dtype (bf16 on GPU:
2; float32 on CPU: 4); P = parameters; T = trainable parameters; n = tokens of one micro-batch =
micro-batch-size x (prompt tokens + max-new-tokens) (every answer assumed to run to the limit).

  weights        P x b (LoRA: + the adapters in float32)
  gradients      T x b (LoRA: float32 adapters)
  optimizer      AdamW m and v (8 T); with bf16 weights or --optimizer-offload, float32 master
                 weights + m + v (12 T) and, during the step, float32 gradient copies (4 T): on the
                 GPU, or in CPU memory with --optimizer-offload (gmts/trainer/optim.py); on a GPU
                 torch's foreach AdamW also holds sqrt(v) for all parameters at once (4 T)
  reference      a frozen copy of the weights (P x b) when --beta > 0 without LoRA
  activations    saved for backward per layer and token: 7H + 4A + 4I elements, A = heads x head_dim
                 (two norms' inputs and outputs, q, the attention output and o_proj's input; SDPA's
                 scaled q, k and v after the GQA repeat; gate, up, SiLU and product), + heads x L on
                 CPU (its math path keeps the attention matrix), x layers x n x b x
                 ACTIVATION_FACTOR (measured); with gradient checkpointing only each layer's input
                 (H) plus one layer recomputed in the backward
  output head    the chunked head (gmts/method/head.py): min(chunk, n) x V logits buffers in the
                 matmul dtype (+ float32) and the float32 head-weight gradient (V x H), plus the
                 final hidden states (n x H)
  KV cache       layers x 2 x rows x (prompt + max-new-tokens) x kv_heads x head_dim x b, rows =
                 --rollout-batch-size (prompts per generation call; 0 = all of --prompts-per-step) x
                 --group-size: the sampler's preallocated cache, allocated once
                 (gmts.trainer.rollout.kv_cache_bytes)
Under torchrun the gradient all-reduce adds one float32 bucket of 64 MiB at most (gmts/trainer/
distributed.py, all_reduce_gradients), not a copy of the gradients: not counted.
The peak is the largest of the phases a step goes through: rollout (weights, optimizer state, KV
cache, the sampler's per-row vocabulary buffers, one layer's K/V expanded for attention), evaluation
(the same, for calls of at most the rollout's rows: gmts/tools/evaluate.py, rollout_rows), training
(weights, optimizer state, activations + head, the gradients and, with bf16 weights, their float32
sums: backward frees activations as it makes gradients, but neither glibc on CPU nor a caching
allocator hands the freed blocks back at once, and measured peaks on CPU hold both), and the
optimizer step (weights, gradients, optimizer state and its step-time copies). Host memory of one
process at a save and at a resume: host_phases (on CPU they are phases of the process too). On CPU
(--device cpu) every phase also counts the process itself (Python, torch, transformers, tokenizer:
CPU_RUNTIME_GIB, measured) and the optimizer state in the same memory. On a GPU the figures are what
torch's allocator holds (max_memory_allocated); the CUDA context (~0.5 GiB) and allocator
fragmentation come on top: the fit check keeps GPU_RESERVE of the card free. For each GPU size the
report says whether gradient checkpointing is needed (the settings fit only with it).

Validated on CPU against the VmHWM of real train.py runs and of a save and a resume
(bench/save_resume_memory.py): bench/README.md, "Memory planner".
"""
import json
import math
import os
import re
import sys
from dataclasses import dataclass

GIB = 2 ** 30
# the process before its weights: VmHWM after `import train` + tokenizer + data 0.37 GiB
CPU_RUNTIME_GIB = 0.45
                           # (SmolLM2), + 0.08 GiB of model code and structures at load (RSS before
                           # the mmap'd weights)
# Measured / counted activation bytes of one forward pass with grad (SmolLM2-135M, 8 x 70 tokens,
# float32, CPU: RSS grew 1.22 GiB beyond the logits where the count below gives 0.82 GiB): what
# autograd keeps beyond the tensors named (views made contiguous, masks, the allocator's rounding).
# Applied to every model; the train.py runs of bench/memory_check.py (another model too) are the
# check that it transfers.
ACTIVATION_FACTOR = 1.5
# share of the card left for the CUDA context, cuBLAS workspaces and fragmentation
GPU_RESERVE = 0.10
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass
class Shape:
    """What the estimate needs from a model config."""
    name: str
    params: int            # every parameter (tied embeddings counted once)
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    tied: bool
    # LoRA parameters per unit of rank: sum over the decoder's linear layers of (in + out)
    lora_per_rank: int
    layer_params: int = 0              # one decoder layer's (FSDP gathers one at a time)
    # (dim 0, elements) of every parameter: FSDP's shards are ceil(dim 0 / N) rows of each
    rows: tuple = ()
    largest: int = 0                   # the largest parameter's elements


def load_config(model):
    """The model's config (no weights): a folder's config.json or a hub id's; SmolLM2's offline copy
    when the hub cannot be reached (gmts/trainer/smollm2.py)."""
    from transformers import AutoConfig

    from gmts.trainer.models import hub_source
    # the hub unreachable: a cached copy or one line
    source = hub_source(model, needs="config.json")
    try:
        return AutoConfig.from_pretrained(source)
    except (OSError, ValueError) as err:
        from gmts.trainer import smollm2
        if model == smollm2.HUB_ID and smollm2.is_model_folder(smollm2.DEFAULT_OUT):
            return AutoConfig.from_pretrained(smollm2.DEFAULT_OUT)
        raise SystemExit(f"error: --model {model!r}: cannot read its config "
                         f"({' '.join(str(err).split())}); pass a folder holding "
                         "config.json") from None


def model_shape(config, name=""):
    """Count parameters exactly by building the model on the meta device (no memory, no weights)."""
    import torch
    from transformers import AutoModelForCausalLM
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    # transformers: "Unrecognized configuration class ... for AutoModelForCausalLM"
    except ValueError:
        raise SystemExit(f"error: --model {name or getattr(config, '_name_or_path', '')!r}: its "
                         f"config ({type(config).__name__}, model_type "
                         f"{getattr(config, 'model_type', '?')!r}) is not a causal language "
                         "model's; train.py trains causal LMs (AutoModelForCausalLM)") from None
    # parameters() yields a tied weight once
    params = sum(p.numel() for p in model.parameters())
    head = model.get_output_embeddings()
    lora = sum(m.in_features + m.out_features for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and m is not head)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return Shape(name=name or getattr(config, "_name_or_path", ""), params=params,
                 vocab=text.vocab_size, hidden=text.hidden_size, layers=text.num_hidden_layers,
                 heads=heads, kv_heads=getattr(text, "num_key_value_heads", None) or heads,
                 head_dim=head_dim, intermediate=text.intermediate_size,
                 tied=bool(getattr(config, "tie_word_embeddings", False)), lora_per_rank=lora,
                 layer_params=sum(p.numel() for p in model.get_decoder().layers[0].parameters()),
                 rows=tuple((p.shape[0], p.numel()) for p in model.parameters()),
                 largest=max(p.numel() for p in model.parameters()))


def shard_elements(shape, world):
    """Elements of one process's FSDP shards (the first process's, the largest): ceil(dim 0 /
    world) rows of every parameter (fully_shard's torch.chunk on dim 0)."""
    return sum(-(-rows // world) * (numel // rows) for rows, numel in shape.rows)


def checkpointing(cfg, shape, *, prompt_tokens, device, budget=None, world=1):
    """Whether the run recomputes activations: --gradient-checkpointing on / off as given; auto:
    off on a CPU (it only costs time there), on a GPU on only where the plan without it exceeds
    `budget` bytes (unknown budget: on)."""
    value = {True: "on", False: "off"}.get(cfg.gradient_checkpointing, cfg.gradient_checkpointing)
    if value != "auto":
        return value == "on"
    if device == "cpu":
        return False
    if budget is None:
        return True
    import dataclasses
    without = dataclasses.replace(cfg, gradient_checkpointing="off")
    return plan(without, shape, prompt_tokens=prompt_tokens, device=device, world=world)[2][0] \
        > budget


def device_bytes(device):
    """The memory of the torch CUDA device `device`, in bytes."""
    import torch
    return torch.cuda.get_device_properties(device).total_memory


def decide_checkpointing(cfg, model, device, prompt_tokens, world=1):
    """(on, the line that says so) for a run of `model` (hub id or folder) on the torch device
    `device`: --gradient-checkpointing on / off as given; auto: off where it only costs time (a
    CPU), else on only where the plan without it (prompts of `prompt_tokens`) exceeds the usable
    part of the device's memory (GPU_RESERVE kept free)."""
    value = {True: "on", False: "off"}.get(cfg.gradient_checkpointing, cfg.gradient_checkpointing)
    if value != "auto":
        return value == "on", f"gradient checkpointing {value}"
    if device.type != "cuda":
        return False, "gradient checkpointing off (auto: on a CPU it only costs time)"
    import dataclasses
    budget = device_bytes(device) * (1 - GPU_RESERVE)
    without = plan(dataclasses.replace(cfg, gradient_checkpointing="off"),
                   model_shape(load_config(model)), prompt_tokens=prompt_tokens, world=world)[2][0]
    on = without > budget
    return on, (f"gradient checkpointing {'on' if on else 'off'} (auto: the memory plan without "
                f"it, {without / GIB:.1f} GiB, {'exceeds' if on else 'fits'} the "
                f"{budget / GIB:.1f} GiB usable of this GPU)")


def compiled_kv_cache_bytes(cfg, shape, call_rows, prompt_tokens, dtype):
    """Bytes of the KV caches --compile keeps for the run (gmts/trainer/compiled_decode.py,
    CompiledDecode: one per bucket of rows and prompt width, never freed): each call size in
    `call_rows` x every prompt width up to the longest prompt's (powers of two from
    MIN_PROMPT_WIDTH: a step of short prompts uses a narrower one), each of width +
    max_new_tokens columns."""
    from types import SimpleNamespace

    from gmts.trainer.compiled_decode import MIN_PROMPT_WIDTH, prompt_width
    from gmts.trainer.rollout import kv_cache_bytes
    config = SimpleNamespace(num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                             num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim)
    widths, width = [], MIN_PROMPT_WIDTH
    while width <= prompt_width(prompt_tokens):
        widths.append(width)
        width *= 2
    return sum(kv_cache_bytes(rows, w + cfg.max_new_tokens, config, dtype)
               for rows in call_rows for w in widths)


def rollout_calls(cfg, world=1):
    """The rows of the sampling calls of one process's rollout: --rollout-batch-size prompts x
    --group-size per call, and the rest of the process's share (gmts/trainer/rollout.py,
    sample; gmts/tools/evaluate.py, rollout_rows)."""
    share = cfg.prompts_per_step // world
    per_call = min(cfg.rollout_batch_size or share, share)
    return sorted({per_call * cfg.group_size} | ({share % per_call * cfg.group_size}
                                                  if share % per_call else set()), reverse=True)


def plan(cfg, shape, *, prompt_tokens=256, device="gpu", world=1, budget=None):
    """({component: bytes}, {phase: bytes}, (peak bytes, its phase), optimizer bytes in host memory)
    for train.py with Config `cfg` on a model of `shape`, run on `device` ("gpu" or "cpu";
    cfg.device is not read, so a GPU run can be planned on a machine without one), one process of
    `world` (torchrun; with cfg.fsdp the model sharded over them). budget: the device's usable
    bytes, which --gradient-checkpointing auto decides by (checkpointing)."""
    if device not in ("gpu", "cpu"):
        raise ValueError(f"device must be gpu or cpu, got {device!r}")
    fsdp = bool(getattr(cfg, "fsdp", False)) and world > 1
    recompute = checkpointing(cfg, shape, prompt_tokens=prompt_tokens, device=device,
                              budget=budget, world=world)
    on_cpu = device == "cpu"
    dtype = ("float32" if on_cpu else "bfloat16") if cfg.dtype == "auto" else cfg.dtype
    b = BYTES[dtype]
    P, H, V, I, Lyr = shape.params, shape.hidden, shape.vocab, shape.intermediate, shape.layers
    # attention width (q, and k / v after the GQA repeat)
    A = shape.heads * shape.head_dim
    lora = cfg.lora_rank > 0
    T = cfg.lora_rank * shape.lora_per_rank if lora else P
    # trainable parameters' bytes (peft keeps adapters float32)
    bt = 4 if lora else b
    # gmts/trainer/optim.py: MasterWeightAdamW
    master = (cfg.optimizer_offload or bt != 4) and not fsdp
    L = prompt_tokens + cfg.max_new_tokens
    # tokens in one training micro-batch (padded to the longest)
    n = cfg.micro_batch_size * L
    n_valid = cfg.micro_batch_size * cfg.max_new_tokens
    # a token budget: at most that many padded tokens, all
    if cfg.micro_batch_tokens:
        # answer tokens at worst; one row alone may exceed it
        n = n_valid = max(cfg.micro_batch_tokens, L)
    rows = rollout_calls(cfg, world)[0]              # the largest sampling call's

    c = {}
    c["weights"] = P * b + (T * 4 if lora else 0)
    # summed in float32 at least (optim.float32_gradients): the .grad AdamW reads beside the masters
    c["gradients"] = T * max(bt, 4)
    c["optimizer_state"] = (12 if master else 8) * T
    c["optimizer_step_copies"] = 4 * T if master else 0
    c["optimizer_location"] = "cpu" if cfg.optimizer_offload else ("cpu" if on_cpu else "gpu")
    # torch's AdamW on a GPU takes its foreach path: sqrt(v) for every parameter at once, beside
    # the float32 gradient copies (MasterWeightAdamW has freed the low-precision gradients by then)
    c["optimizer_foreach_temp"] = 0 if on_cpu or cfg.optimizer_offload else T * (4 if master
                                                                                    else bt)
    # float32 sums of the micro-batches' gradients when the trainable weights are narrower
    # (gmts/trainer/batches.py), held from the first backward to the optimizer step
    c["gradient_sums"] = 4 * T if bt < 4 else 0
    c["reference_model"] = P * b if cfg.beta > 0 and not lora else 0
    per_token_layer = (
        (7 * H + 4 * A + 4 * I + (shape.heads * L if on_cpu else 0)) * ACTIVATION_FACTOR)
    c["activations_no_checkpointing"] = int(Lyr * n * per_token_layer * b)
    c["activations_checkpointing"] = int(Lyr * n * H * b + n * per_token_layer * b)
    c["activations"] = c["activations_checkpointing" if recompute
                         else "activations_no_checkpointing"]
    c["checkpointing"] = recompute
    chunk = min(cfg.chunk_size, n_valid)
    # z in the matmul dtype (+ its float32 copy)
    c["head_chunks"] = chunk * V * (b + (4 if b != 4 else 0))
    # final hidden states, and the valid rows' copy
    c["head_states"] = n * H * b + n_valid * H * b
    # float32 accumulator in the head's backward
    c["head_weight_grad"] = V * H * 4 if not lora else 0
    from types import SimpleNamespace
    # the sampler's own count of its preallocated KV cache (rollout.EagerDecode)
    from gmts.trainer.rollout import kv_cache_bytes
    c["kv_cache"] = kv_cache_bytes(rows, L,
                                   SimpleNamespace(num_hidden_layers=Lyr,
                                                   num_attention_heads=shape.heads,
                                   num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim),
                                   dtype)
    # --compile: every bucket's cache kept for the run (the current call's among them)
    c["compiled_kv_caches"] = compiled_kv_cache_bytes(cfg, shape, rollout_calls(cfg, world),
                                                      prompt_tokens, dtype) if cfg.compile else 0
    # logits, z / tau in float32, float64 probabilities
    c["sampler_buffers"] = rows * V * (b + 4 + 8)
    c["kv_expansion"] = kv_expansion_bytes(cfg, shape, rows, prompt_tokens, b)
    # evaluation (--eval-every / --eval-before): calls of at most --eval-max-rows rows, else the
    # rollout's (gmts/tools/evaluate.py: run_eval, sampling_calls)
    s, bound = max(cfg.eval_samples, 1), cfg.eval_max_rows or rows     # rows per evaluation call
    eval_rows = s * max(1, bound // s) if s <= bound else bound
    c["eval_kv_cache"] = c["kv_cache"] * eval_rows // rows
    c["eval_sampler_buffers"] = eval_rows * V * (b + 4 + 8)
    # save (host memory): on a GPU, safetensors holds a host copy of every weight until the file
    # is written, and torch.save copies one optimizer tensor at a time (the largest: V x H float32);
    # on CPU both write from the tensors' own memory. MasterWeightAdamW.state_dict copies nothing.
    c["save_copies"] = 0 if on_cpu else P * b + (V * H * 4 if not lora else 0)
    c["runtime"] = int(CPU_RUNTIME_GIB * GIB) if on_cpu else 0
    c["lora_parameters"] = T if lora else 0
    c["fsdp_gathered_rollout"] = c["fsdp_gathered_training"] = 0
    if fsdp:
        fsdp_components(c, shape, world, b, on_cpu)

    # lives in host memory
    offloaded = c["optimizer_state"] if cfg.optimizer_offload and not on_cpu else 0
    state_here = c["optimizer_state"] - offloaded
    base = c["runtime"] + c["weights"] + c["reference_model"] + state_here
    # the gradients the optimizer reads: FSDP's float32 shards (the unsharded sums are freed)
    at_step = c["fsdp_shard_gradients"] if fsdp else c["gradients"]
    # --compile: the caches of the buckets used so far stay; the current call's is among them
    kept = max(c["compiled_kv_caches"] - c["kv_cache"], 0)
    phases = {
        "rollout": base + c["kv_cache"] + kept + c["sampler_buffers"] + c["kv_expansion"]
        + c["fsdp_gathered_rollout"],
        "evaluation": base + c["eval_kv_cache"] + kept + c["eval_sampler_buffers"]
        + c["kv_expansion"] * c["eval_kv_cache"] // max(c["kv_cache"], 1)
        + c["fsdp_gathered_rollout"],
        "training": base + kept
        + c["activations"] + c["head_chunks"] + c["head_states"] + c["head_weight_grad"]
                    + c["gradients"] + c["gradient_sums"] + c["fsdp_gathered_training"],
        "optimizer_step": base + kept + c["gradient_sums"]
        + (0 if offloaded else c["optimizer_step_copies"]) + max(
            at_step, c["optimizer_foreach_temp"] + (0 if master else at_step)),
    }
    host = fsdp_host_phases(c, on_cpu) if fsdp else host_phases(c, on_cpu)
    if on_cpu:                              # the device's memory is the host's: one process
        phases.update(host)
    c["host_phases"] = host
    return c, phases, (max(phases.values()), max(phases, key=phases.get)), offloaded


def fsdp_components(c, shape, world, b, on_cpu):
    """One process's share under --fsdp (gmts/trainer/distributed.py, shard_model), in `c`:
    float32 shards of every weight (shard_elements) and AdamW's m and v on them (no master copy,
    no low-precision gradients: FSDP computes in b bytes and reduces in float32); gathered in b
    bytes: the root's parameters (embeddings, final norm, head) for a whole pass, and two decoder
    layers (the running one and the prefetched next) in training; every layer during a rollout
    or an evaluation (layers_gathered). The gradients: float32 and unsharded while a step's
    backward passes accumulate (4 P), reduce-scattered into float32 shards on the last."""
    shard = shard_elements(shape, world)
    root = shape.params - shape.layers * shape.layer_params
    c.update(weights=4 * shard, gradients=4 * shape.params, gradient_sums=0,
             optimizer_state=8 * shard, optimizer_step_copies=0,
             optimizer_foreach_temp=0 if on_cpu else 4 * shard,
             fsdp_shard_gradients=4 * shard, fsdp_shard_elements=shard,
             fsdp_gathered_rollout=shape.params * b,
             fsdp_gathered_training=(root + 2 * shape.layer_params) * b,
             # rank 0 gathers the full float32 weights and optimizer state into host memory, and
             # the weights in b bytes where b < 4 (distributed.full_state_dicts)
             save_copies=4 * shape.params + 8 * shape.params
             + (shape.params * b if b < 4 else 0),
             # a save's gather and a resume's distribution of a mapped full tensor: one whole
             # float32 weight at a time beside the rest
             full_weight=4 * shape.largest)
    c["head_weight_grad"] = 0       # the head's gradient is the root's, counted in the gradients


def fsdp_host_phases(c, on_cpu):
    """Private host memory of one process under --fsdp: its start (the model built on the meta
    device, its own rows of each weight copied out of the mapped safetensors: distributed.
    load_sharded), rank 0's save (save_copies, and on CPU what the process holds) and a resume (the
    optimizer state's and the float32 masters' rows taken from the mapped trainer_state.pt: torch's
    set_optimizer_state_dict distributes the whole loaded state into shards beside the
    optimizer's own before it copies them in, a second optimizer state on the device). Save and
    resume hold one whole float32 weight at a time beside it (full_weight). On a GPU the shards
    live there. bench/save_resume_memory.py --fsdp measures all three."""
    held = c["runtime"] + (c["weights"] + c["optimizer_state"] + c["reference_model"]
                           if on_cpu else 0)
    start = c["runtime"] + (c["weights"] + c["reference_model"] if on_cpu else 0)
    return {"start": start, "save": held + c["save_copies"] + c["full_weight"],
            "resume": held + (c["optimizer_state"] if on_cpu else 0) + c["full_weight"]}


def kv_expansion_bytes(cfg, shape, rows, prompt_tokens, b):
    """The sampler's K/V expanded from kv_heads to heads for one layer's attention while it runs
    (transformers' repeat_kv; none without grouped-query attention): the prefill's (its prompts x
    the prompt) always, every decode step's (all rows x the whole cache) under --compile (the
    traced attention takes the repeat_kv path; eager decoding packs the query instead)."""
    if shape.kv_heads >= shape.heads:
        return 0
    prompts = rows // cfg.group_size
    per_column = 2 * shape.heads * shape.head_dim * b                     # keys and values
    prefill = prompts * prompt_tokens * per_column
    decode = rows * (prompt_tokens + cfg.max_new_tokens) * per_column
    return decode if cfg.compile else prefill


def host_phases(c, on_cpu):
    """Private host memory (bytes) of one process while it saves a checkpoint and while it resumes,
    for components `c` (plan's). Save: what the process holds (on a GPU: the offloaded optimizer
    state) + save_copies. Resume (train.py's build_run; trainer_state.pt memory-mapped,
    gmts/run/checkpoint.py): the optimizer state is built from the mapped file (on a GPU it moves
    there), and on a GPU the model is loaded on the host first (its weights, before they move: P x
    b). The mapped files' pages are page cache, shared by the processes of a torchrun run and freed
    under pressure: not counted. Under torchrun every process holds this. The CUDA runtime's own
    host memory is not counted (not measured)."""
    host_state = c["optimizer_state"] if on_cpu or c["optimizer_location"] == "cpu" else 0
    held = c["runtime"] + host_state + (c["weights"] + c["reference_model"] if on_cpu else 0)
    resume = c["runtime"] + c["weights"] + c["reference_model"] + host_state
    return {"save": held + c["save_copies"], "resume": resume}


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def largest_fitting(cfg, shape, budget, prompt_tokens, device="gpu", world=1):
    """The largest --micro-batch-size and --rollout-batch-size that fit `budget` bytes, trying the
    memory savers in order (checkpointing, --optimizer-offload, LoRA r=32) until something fits;
    None if nothing does."""
    import dataclasses
    ladder = [{}, {"gradient_checkpointing": "on"},
              {"gradient_checkpointing": "on", "optimizer_offload": True},
              {"gradient_checkpointing": "on", "lora_rank": cfg.lora_rank or 32,
               "optimizer_offload": False}]
    if world > 1 and cfg.fsdp:         # --fsdp takes neither --optimizer-offload nor LoRA
        ladder = ladder[:2]
    batch = (cfg.mini_batch_size * cfg.group_size if cfg.mini_batch_size else cfg.prompts_per_step
             * cfg.group_size)
    for change in ladder:
        trial = dataclasses.replace(cfg, **change)
        fit_mb = [m for m in divisors(batch) if m <= batch and
                  plan(dataclasses.replace(trial, micro_batch_size=m, rollout_batch_size=1), shape,
                       prompt_tokens=prompt_tokens, device=device, world=world,
                       budget=budget)[2][0] <= budget]
        if not fit_mb:
            continue
        mb = max(fit_mb)
        fit_rb = [r for r in range(1, cfg.prompts_per_step + 1)
                  if plan(dataclasses.replace(trial, micro_batch_size=mb, rollout_batch_size=r),
                          shape, prompt_tokens=prompt_tokens, device=device, world=world,
                          budget=budget)[2][0] <= budget]
        if fit_rb:
            return {"changes": change, "micro_batch_size": mb, "rollout_batch_size": max(fit_rb)}
    return None


def report(cfg, shape, gpu_gib, prompt_tokens, device="gpu", world=1):
    """The plan for each GPU size in `gpu_gib` (GiB): --gradient-checkpointing auto decided per
    size; the components and phases shown are the largest size's (a CPU: its own)."""
    import dataclasses
    budgets = {str(gib): gib * GIB * (1 - GPU_RESERVE) for gib in gpu_gib}
    largest = max(budgets.values()) if device != "cpu" else None
    components, phases, (peak, phase), offloaded = plan(cfg, shape, prompt_tokens=prompt_tokens,
                                                        device=device, world=world, budget=largest)
    with_ckpt, without = (plan(dataclasses.replace(cfg, gradient_checkpointing=on), shape,
                               prompt_tokens=prompt_tokens, device=device, world=world)[2][0]
                          for on in ("on", "off"))
    fits = {}
    for gib, budget in budgets.items():
        as_given = plan(cfg, shape, prompt_tokens=prompt_tokens, device=device, world=world,
                        budget=budget)[2][0]
        fits[gib] = {"budget_gib": budget / GIB, "fits_as_given": as_given <= budget,
                     # whether these settings fit only with gradient checkpointing on
                     "checkpointing": ("not needed" if without <= budget else "needed"
                                       if with_ckpt <= budget else "not enough"),
                     "largest": largest_fitting(cfg, shape, budget, prompt_tokens, device,
                                                world)}
    return {"model": shape.name, "params": shape.params, "device": device, "processes": world,
            "prompt_tokens": prompt_tokens, "components_bytes": components, "phases_bytes": phases,
            "peak_bytes": peak, "peak_phase": phase, "host_optimizer_bytes": offloaded,
            "host_phases_bytes": components["host_phases"], "gpus": fits}


def format_report(r, cfg):
    g = lambda x: f"{x / GIB:8.2f}"
    c = r["components_bytes"]
    sharded = f"FSDP over {r['processes']} processes (each): " if "fsdp_shard_elements" in c else ""
    lines = [(f"{r['model']}: {r['params'] / 1e6:.1f}M parameters; {r['device']}; micro-batch "
              f"{cfg.micro_batch_size} x ({r['prompt_tokens']} prompt + {cfg.max_new_tokens} new "
              f"tokens); rollout {cfg.rollout_batch_size or cfg.prompts_per_step} prompts x "
              f"{cfg.group_size} answers per call; checkpointing "
              f"{'on' if c['checkpointing'] else 'off'}"
              f"{' (auto: per GPU size below)' if cfg.gradient_checkpointing == 'auto' else ''}; "
              f"{sharded}"
              f"{'LoRA r=' + str(cfg.lora_rank) if cfg.lora_rank else 'full fine-tuning'}"
              f"{'; optimizer offload' if cfg.optimizer_offload else ''}"), "",
             "component                              GiB"]
    rows = [("weights", "weights"), ("gradients", "gradients"),
            (f"optimizer state (in {c['optimizer_location']} memory)", "optimizer_state"),
            ("optimizer step copies", "optimizer_step_copies"),
            ("optimizer step sqrt(v) (GPU, foreach)", "optimizer_foreach_temp"),
            ("reference model", "reference_model"),
            ("activations, no checkpointing", "activations_no_checkpointing"),
            ("activations, checkpointing", "activations_checkpointing"),
            ("output head chunks", "head_chunks"), ("output head states", "head_states"),
            ("output head weight gradient", "head_weight_grad"),
            (f"KV cache ({cfg.rollout_batch_size or cfg.prompts_per_step} prompts per call)",
             "kv_cache"), ("sampler buffers", "sampler_buffers"),
            ("K/V expanded for one layer", "kv_expansion"),
            ("--compile: KV caches kept (every bucket)", "compiled_kv_caches"),
            ("FSDP: gathered in a rollout (all)", "fsdp_gathered_rollout"),
            ("FSDP: gathered in training (root+2)", "fsdp_gathered_training"),
            ("float32 gradient sums", "gradient_sums"),
            ("evaluation KV cache", "eval_kv_cache"),
            ("evaluation sampler buffers", "eval_sampler_buffers"),
            ("save: host copies", "save_copies"), ("process (CPU only)", "runtime")]
    lines += [f"  {label:<36}{g(c[key])}" for label,
              key in rows if c[key] or key.startswith("activations")]
    if cfg.lora_rank:
        lines.append(f"  LoRA: {c['lora_parameters'] / 1e6:.2f}M trainable parameters")
    lines.append("")
    lines += [f"  peak in {name:<28}{g(v)}" + ("  <- peak" if name == r["peak_phase"] else "")
              for name, v in r["phases_bytes"].items()]
    if r["host_optimizer_bytes"]:
        lines.append(f"  + {r['host_optimizer_bytes'] / GIB:.2f} GiB of optimizer state in CPU "
                     "memory")
    if r["device"] != "cpu":
        lines.append("  host memory of one process (CUDA's own not counted): "
                     + ", ".join(f"{name} {v / GIB:.2f} GiB"
                                 for name, v in r["host_phases_bytes"].items()))
    for gib, f in r["gpus"].items():
        verdict = "fits" if f["fits_as_given"] else "does NOT fit"
        lines.append(f"\n{gib} GiB GPU ({f['budget_gib']:.1f} GiB usable): {verdict} as given; "
                     f"gradient checkpointing {f['checkpointing']}")
        best = f["largest"]
        if best is None:
            lines.append("  nothing fits, even with checkpointing, --optimizer-offload and LoRA at "
                         "micro-batch 1: use --fsdp over several GPUs or a larger card")
        else:
            flags = " ".join(("--lora-rank " + str(v) if k == "lora_rank" else
                              ("--" + k.replace("_", "-") if v else "--no-" + k.replace("_", "-")))
                             for k, v in best["changes"].items() if getattr(cfg, k) != v)
            lines.append(f"  largest that fits: {flags + ' ' if flags else ''}--micro-batch-size "
                         f"{best['micro_batch_size']} --rollout-batch-size "
                         f"{best['rollout_batch_size']}")
    return "\n".join(lines)


def parse_as_processes(argv, world):
    """train.py's Config from `argv` as one of `world` torchrun processes would parse it (its
    checks read WORLD_SIZE: --fsdp needs several)."""
    from gmts.run.config import parse_config
    saved = os.environ.get("WORLD_SIZE")
    os.environ["WORLD_SIZE"] = str(world)
    try:
        return parse_config(argv)
    finally:
        if saved is None:
            del os.environ["WORLD_SIZE"]
        else:
            os.environ["WORLD_SIZE"] = saved


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    # a bad flag is one line, not a usage block
    from gmts.run.config import Parser
    ap = Parser(prog="python -m gmts.tools.memory", description=__doc__.split("\n\n")[0],
                epilog="Every other flag is a train.py flag (python train.py --help).")
    ap.add_argument("--gpu-memory", type=float, nargs="+", default=[24.0, 40.0, 80.0],
                    help="GPU sizes in GiB to check (default: 24 40 80)")
    ap.add_argument("--prompt-tokens", type=int, default=0,
                    help="prompt length to plan for (default: --max-prompt-tokens, at most 256)")
    ap.add_argument("--processes", type=int, default=1,
                    help="processes of the torchrun run, one GPU each (--fsdp: planned per "
                         "process; default: 1)")
    ap.add_argument("--json", action="store_true", help="print the estimate as JSON")
    ap.add_argument("--device", default="auto", help="plan for a GPU (auto, cuda, cuda:N) or for "
                                                     "--device cpu")
    own, rest = ap.parse_known_args(argv)
    # The planner's own flags: a size that is not a positive number, a negative length or an unknown
    # device would give a report that looks like an answer.
    bad_sizes = [g for g in own.gpu_memory if not (math.isfinite(g) and g > 0)]
    if bad_sizes:
        ap.error(f"--gpu-memory must be GPU sizes in GiB, finite and > 0, got {bad_sizes[0]:g}")
    if own.prompt_tokens < 0:
        ap.error("--prompt-tokens must be >= 0 (0 = --max-prompt-tokens, at most 256), got "
                 f"{own.prompt_tokens}")
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", own.device):
        ap.error(f"--device must be auto, cuda, cuda:N (plan for a GPU) or cpu, got {own.device!r}")
    if own.processes < 1:
        ap.error(f"--processes must be >= 1, got {own.processes}")
    # train.py's flags, presets and checks (--device is the planner's own)
    cfg = parse_as_processes(rest, own.processes)
    if cfg.fsdp and own.processes < 2:
        ap.error("--fsdp shards the model over several processes: give their number, "
                 "--processes N (torchrun --nproc-per-node N)")
    device = "cpu" if own.device == "cpu" else "gpu"
    prompt_tokens = own.prompt_tokens or min(cfg.max_prompt_tokens, 256)
    model = cfg.model if not os.path.isdir(os.path.expanduser(cfg.model)) else os.path.expanduser(
        cfg.model)
    shape = model_shape(load_config(model), name=cfg.model)
    r = report(cfg, shape, own.gpu_memory, prompt_tokens, device, own.processes)
    print(json.dumps(r, indent=2) if own.json else format_report(r, cfg))


if __name__ == "__main__":
    from gmts.run.folder import exit_on_interrupt
    # Ctrl-C while torch and transformers load: one line, not a traceback of the import machinery
    exit_on_interrupt("gmts.tools.memory")
    main()
