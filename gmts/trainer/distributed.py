"""Several processes (torchrun), one batch: the method's batch-wide quantities made global. These
are module-level collectives, each the identity on one process; the step reaches them through
gmts/trainer/batches.py (batch_sum, batch_select, accumulate_gradients, optimizer_step) and
train.py's train_step, behind `if several_processes()`: one process never enters this file.

`torchrun --nproc-per-node N train.py ...` starts N copies of train.py. Each generates and trains on
its own share of the step's prompts (whole groups, so advantages stay exact). What must be GLOBAL
for the method to be the one in gmts/METHOD.md, "Token scores and selection" (and identical to a
single process on the same batch): - the selection: the exact top-k over every rank's valid tokens,
k = ceil(ρ · total), not a per-rank top-k; - the loss normaliser: the global selected / valid /
answer count; - the gradient: the SUM over ranks of each rank's share of the global loss (the
weights already carry 1/S). Only each rank's k best candidates travel for the selection (the global
top-k is among their union), not all scores. Gradients are summed with one all-reduce per step, as
DDP does, after all micro-batches; no wrapper, so uneven micro-batch counts across ranks (rows with
nothing selected are skipped) cannot deadlock.

With --fsdp the model is sharded with PyTorch's FSDP (`fully_shard`): each decoder layer, then the
whole model once, the one root, whose own parameters are the embeddings, final norm and output
head. Every weight, gradient and AdamW state lives split over the ranks in float32 (the master
weights), gathered in the run's dtype only while its module runs (the root's around a whole pass,
shard_model's run_forward), so FSDP prefetches the next layer while one computes. Gradients are
summed over the ranks in float32 by FSDP's reduce-scatter once per optimizer step, on its last
backward pass (Passes); the passes before it add into float32 unsharded gradients (4 bytes per
parameter of the whole model on every rank while a step accumulates).
"""
import contextlib
import datetime
import faulthandler
import functools
import gc
import math
import os
import traceback
import types

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from gmts.method.checked import check_ratio, check_scores
from gmts.method.grpo import budget, select_tokens, top_k_mask


def init():
    """(rank, world_size, local_rank); initialises the process group under torchrun, else (0, 1,
    0)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, 0
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        gloo = not torch.cuda.is_available() or os.environ.get("GMTS_DIST_BACKEND") == "gloo"
        backend = "gloo" if gloo else "nccl"
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        # Long timeout: rank 0 evaluates and writes checkpoints while the others wait at a barrier.
        init_group(backend, timeout=datetime.timedelta(hours=2))
    return dist.get_rank(), dist.get_world_size(), local_rank


def init_group(backend, **kwargs):
    """dist.init_process_group(backend, **kwargs), after importing the two modules that bind
    `group.WORLD` as a default argument when first imported (transformers' from_pretrained imports
    torch.distributed.nn; ZeroRedundancyOptimizer in .optim does the same): imported after the group
    exists, they would keep it, and its gloo threads, alive past destroy_process_group into the
    interpreter's teardown, which aborts a finished run now and then ("terminate called without an
    active exception"). Imported first, their defaults are None. End the group with shutdown().
    A process that crashes (a segfault) prints its Python stack first (faulthandler)."""
    faulthandler.enable(all_threads=True)
    import torch.distributed.nn as _nn  # noqa: F401
    import torch.distributed.optim as _optim  # noqa: F401
    dist.init_process_group(backend, **kwargs)


def active():
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size():
    return dist.get_world_size() if active() else 1


def rank():
    return dist.get_rank() if active() else 0


def backend_device():
    """The device the process group's collectives run on, whatever a caller's tensor is on: the CPU
    when the group serves it (gloo), else the group's accelerator, this process's current one (NCCL
    serves only `cuda`, and refuses a CPU tensor: "No backend type associated with device type
    cpu")."""
    served = [torch.device(d).type for d in dist.distributed_c10d._device_capability()]
    if "cpu" in served:
        return torch.device("cpu")
    module = getattr(torch, served[0], None)           # torch.cuda for "cuda"
    index = module.current_device() if hasattr(module, "current_device") else None
    return torch.device(served[0], index)


def all_reduce_sum(values):
    """Sum a float/int tensor over ranks (float64 / int64 on the wire); returns a new tensor on the
    input's device, in its dtype."""
    values = torch.as_tensor(values)
    if not active():
        return values.clone()
    wire = torch.float64 if values.is_floating_point() else torch.long
    buf = values.detach().to(backend_device(), wire)
    dist.all_reduce(buf)
    return buf.to(values.device, values.dtype)


BUCKET_ELEMENTS = 1 << 24       # float32 elements per gradient all-reduce (64 MiB): the transient


def all_reduce_gradients(params):
    """Sum every replicated parameter's gradient over ranks, in float32 buckets of BUCKET_ELEMENTS
    (one collective each; a larger gradient is cut into pieces), so the extra memory is one bucket,
    not a float32 copy of every gradient. Sharded (FSDP) parameters are skipped: FSDP has already
    summed theirs."""
    params = [p for p in params if not isinstance(p, DTensor)]
    if not active() or not params:
        return
    # float32 on the wire, float64 where a gradient is float64 (a float64 run stays exact)
    dtype = functools.reduce(torch.promote_types, [p.dtype for p in params], torch.float32)
    pieces, size = [], 0
    for p in params:
        if p.grad is None or not p.grad.is_contiguous():
            p.grad = torch.zeros_like(p) if p.grad is None else p.grad.contiguous()
        flat = p.grad.view(-1)
        for start in range(0, flat.numel(), BUCKET_ELEMENTS):
            piece = flat[start:start + BUCKET_ELEMENTS]
            if size + piece.numel() > BUCKET_ELEMENTS:
                _sum_pieces(pieces, size, dtype)
                pieces, size = [], 0
            pieces.append(piece)
            size += piece.numel()
    _sum_pieces(pieces, size, dtype)


def _sum_pieces(pieces, size, dtype):
    """All-reduce these gradient views (`size` elements in all) as one buffer of `dtype`, in
    place."""
    buf, offset = torch.empty(size, dtype=dtype, device=backend_device()), 0
    for piece in pieces:
        buf[offset:offset + piece.numel()].copy_(piece)
        offset += piece.numel()
    dist.all_reduce(buf)
    offset = 0
    for piece in pieces:       # back into the gradient, on its device and in its dtype
        piece.copy_(buf[offset:offset + piece.numel()].to(piece.device))
        offset += piece.numel()


def shutdown(error=None):
    """End the process group, and free it now: with FSDP, the model's DTensors and DTensor's caches
    hold the device mesh, which holds the group, so its gloo threads would live on into the
    interpreter's teardown, which aborts a run now and then ("terminate called without an active
    exception"). error: the exception the run is ending with, if any (a one-line error, a signal's
    stop): its traceback's frames hold the model; their locals are cleared (the traceback still
    prints)."""
    if dist.is_available() and dist.is_initialized():
        seen = set()
        while error is not None and id(error) not in seen:        # the error and what it chains
            seen.add(id(error))
            traceback.clear_frames(error.__traceback__)
            error = error.__cause__ or error.__context__
        dist.destroy_process_group()
        _clear_dtensor_caches()
        gc.collect()                  # the run's model (its DTensors) and the emptied caches' specs


def _clear_dtensor_caches():
    """Empty DTensor's caches of sharding rules, redistribution plans and mesh topologies (keyed
    by specs that hold the mesh): the C++ fast path's and the Python one's through torch's own
    clearing function, every functools cache of torch.distributed, the planners' dict."""
    from torch.distributed.tensor import _redistribute, debug
    getattr(debug, "_clear_sharding_prop_cache", lambda: None)()
    for cache in gc.get_objects():
        # type(), not isinstance(): isinstance reads __class__, and a deprecated object of
        # torch.distributed (reduce_op) warns when its attributes are read
        if type(cache) is functools._lru_cache_wrapper and \
                str(getattr(cache, "__module__", "")).startswith("torch.distributed"):
            cache.cache_clear()
    getattr(_redistribute, "_planner_cache", {}).clear()


def barrier():
    if active():
        dist.barrier()


def clip_grad_norm(params, max_norm, clip_replicated):
    """The global gradient norm before clipping, and clipping to max_norm (0 or inf = off), like
    torch.nn.utils.clip_grad_norm_, also when some gradients are FSDP shards (their squares are
    summed over ranks). clip_replicated(params, max_norm): the one process's clip
    (gmts/trainer/batches.py's clip_grad_norm), for gradients every rank holds whole."""
    params = [p for p in params if p.grad is not None]
    if not any(isinstance(p.grad, DTensor) for p in params):      # every rank holds the sum
        return clip_replicated(params, max_norm if max_norm > 0 else float("inf"))
    sharded = sum(p.grad.to_local().double().pow(2).sum() for p in params
                  if isinstance(p.grad, DTensor))
    replicated = sum((p.grad.double().pow(2).sum() for p in params
                      if not isinstance(p.grad, DTensor)),
                     torch.zeros((), dtype=torch.float64))
    sharded = all_reduce_sum(torch.as_tensor(sharded, dtype=torch.float64))
    total = math.sqrt(float(sharded) + float(replicated))
    if 0 < max_norm < math.inf:
        coef = min(max_norm / (total + 1e-6), 1.0)
        for p in params:
            p.grad.mul_(coef)
    return torch.tensor(total)


def shard_model(model, compute_dtype):
    """FSDP: shard every decoder layer over the ranks, then the model (the root: embeddings, final
    norm, head). float32 shards; gathered and computed in compute_dtype, gradients summed in
    float32, checkpoints written in compute_dtype (full_state_dicts). model.run_forward(fn, *args,
    **kwargs) runs fn(*args, **kwargs) as a pass of the whole model, its parameters gathered, its
    backward hooked (gmts/trainer/batches.py's micro_batch_logprobs)."""
    from torch.distributed.fsdp import (MixedPrecisionPolicy, fully_shard,
                                        register_fsdp_forward_method)
    policy = MixedPrecisionPolicy(param_dtype=compute_dtype,
                                  reduce_dtype=torch.promote_types(compute_dtype, torch.float32))
    for module in [*model.get_decoder().layers, model]:       # the layers first, the root last
        fully_shard(module, mp_policy=policy)
        # SUM over ranks: each rank's loss is its share of the total
        module.set_gradient_divide_factor(1.0)
        # plain sums on the wire (gloo has no pre-multiplied sum)
        module.set_force_sum_reduction_for_comms(True)
    model.config.dtype = compute_dtype          # what a checkpoint's config.json says it holds
    model.run_forward = types.MethodType(lambda _model, fn, *args, **kwargs: fn(*args, **kwargs),
                                         model)
    register_fsdp_forward_method(model, "run_forward")
    return model


@contextlib.contextmanager
def parameters_on_meta():
    """Inside, every parameter a module registers is moved to the meta device (no memory) as it is
    registered; buffers stay real (RoPE's inv_freq, computed at construction, is no weight)."""
    register = torch.nn.Module.register_parameter

    def on_meta(module, name, param):
        register(module, name, param)
        if param is not None and param.device.type != "meta":     # (a tied one: already there)
            made = module._parameters[name]
            module._parameters[name] = type(made)(made.to("meta"), requires_grad=made.requires_grad)
    torch.nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register


def safetensors_files(folder):
    """The *.safetensors weight files of a local model folder, or [] (a hub id, .bin weights)."""
    folder = os.path.expanduser(str(folder))
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".safetensors"))


def load_sharded(folder, compute_dtype, device, prepare=lambda model: None):
    """The causal LM of the local folder `folder` (config.json, *.safetensors) sharded over the
    processes as shard_model shards it, without any process holding the whole model: built on the
    meta device, `prepare(model)` (gradient checkpointing), sharded, then each process reads its
    own rows of every weight from the memory-mapped files (safetensors' slices), one weight at a
    time. A process's host memory is its float32 shards (4 P / N bytes) plus one weight's slice.
    The values are those of load_model(folder, dtype=float32) + shard_model, bit for bit."""
    from safetensors import safe_open
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig
    config = AutoConfig.from_pretrained(folder)
    with parameters_on_meta():
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if os.path.isfile(os.path.join(folder, "generation_config.json")):
        model.generation_config = GenerationConfig.from_pretrained(folder)
    model.eval()                                            # as from_pretrained leaves it
    files = {}
    for path in safetensors_files(folder):
        with safe_open(path, framework="pt") as fh:
            files.update(dict.fromkeys(fh.keys(), path))
    names = dict(model.named_parameters())                  # a tied weight once, by its first name
    missing = sorted(set(names) - set(files))
    if missing:
        raise SystemExit(f"error: {folder}: the weight {missing[0]} is not in its *.safetensors "
                         f"files ({len(missing)} missing)")
    prepare(model)
    shard_model(model, compute_dtype)
    buffers = dict(model.named_buffers())
    model.to_empty(device=device)                           # the shards' memory, uninitialised
    with torch.no_grad():
        for name, buffer in buffers.items():      # the buffers' values (a saved one's from file)
            if name in files:
                with safe_open(files[name], framework="pt") as fh:
                    buffer = fh.get_tensor(name).to(buffer.dtype)
            module_name, _, key = name.rpartition(".")
            model.get_submodule(module_name)._buffers[key] = buffer.to(device)
        for name, param in model.named_parameters():
            local = param.to_local() if isinstance(param, DTensor) else param
            start = 0
            if isinstance(param, DTensor):
                start = compute_local_shape_and_global_offset(
                    param.shape, param.device_mesh, param.placements)[1][0]
            with safe_open(files[name], framework="pt") as fh:
                rows = fh.get_slice(name)[start:start + local.shape[0]]   # (rows, ...) only
            local.copy_(rows.reshape(local.shape))          # cast to float32 as from_pretrained
    return model


def sharded_layers(model):
    """The model's FSDP modules: every decoder layer, and the model itself (the root)."""
    from torch.distributed.fsdp import FSDPModule
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def layers_gathered(model):
    """Keep FSDP layers gathered across the many one-token forwards of a rollout (one all-gather per
    layer instead of one per layer per token); shard them again afterwards. A no-op without FSDP."""
    layers = sharded_layers(model)
    for layer in layers:
        layer.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for layer in layers:      # the root keeps its parameters between forward and backward
            layer.set_reshard_after_forward(layer is not model, recurse=False)
            layer.reshard()


def full_state_dicts(model, optimizer):
    """(model state dict, optimizer state dict) gathered in full on rank 0 (None elsewhere); call
    on every rank. The weights in the run's dtype (model.config.dtype, shard_model's); where that is
    narrower than the float32 shards, the optimizer state carries those as "master", as
    MasterWeightAdamW's does, so that a resume continues from them exactly."""
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_optimizer_state_dict)
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state = get_model_state_dict(model, options=options)
    optim_state = get_optimizer_state_dict(model, optimizer, options=options)
    if rank() != 0:
        return None, None
    dtype = getattr(model.config, "dtype", None) or torch.float32
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype      # config.json's spelling
    narrower = {k: v for k, v in model_state.items()
                if v.is_floating_point() and v.dtype.itemsize > dtype.itemsize}
    if narrower:
        optim_state = {**optim_state, "master": narrower}
        model_state = {k: v.to(dtype) if k in narrower else v for k, v in model_state.items()}
    return model_state, optim_state


def load_full_optimizer_state(model, optimizer, state):
    """Each rank loads the full optimizer state written by full_state_dicts and keeps its shards;
    and the float32 weights from it where the checkpoint's own are in a narrower dtype."""
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, set_model_state_dict,
                                                         set_optimizer_state_dict)
    options = StateDictOptions(full_state_dict=True, strict=False)
    state = dict(state)
    master = state.pop("master", None)
    if master is not None:
        set_model_state_dict(model, master, options=options)
    set_optimizer_state_dict(model, optimizer, optim_state_dict=state,
                             options=StateDictOptions(full_state_dict=True))


def gather_objects(obj):
    if not active():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


@torch.no_grad()
def select_tokens_global(scores, valid_mask, ratio, *, bottom=False, exclude=None):
    """select_tokens with scope="batch" over the union of every rank's batch. Equal to select_tokens
    on the concatenation of the ranks' rows in rank order (ties: rank, then row, then column, as the
    single process would)."""
    if not active() or scores is None:
        return select_tokens(scores, valid_mask, ratio, bottom=bottom, exclude=exclude)
    check_ratio(ratio)
    eligible = select_tokens(None, valid_mask, ratio, exclude=exclude)
    check_scores(scores, eligible)
    n_local = int(eligible.sum())
    n_valid, n_eligible = all_reduce_sum(torch.tensor([int(valid_mask.sum()), n_local])).tolist()
    k = budget(ratio, int(n_valid), int(n_eligible))
    # Local candidates: this rank's best min(k, n_local) tokens. The global top-k lies in the union
    # of these.
    pos = top_k_mask(scores, eligible, min(k, n_local), bottom).reshape(-1).nonzero().squeeze(1)
    gathered = gather_objects((scores.reshape(-1)[pos].double().cpu(), pos.cpu()))
    values = torch.cat([v for v, _ in gathered])
    ranks = torch.cat([torch.full_like(p, r) for r, (_, p) in enumerate(gathered)])
    positions = torch.cat([p for _, p in gathered])
    # Order: best score first; ties by rank, then position: the row-major order of the ranks' rows
    # concatenated in rank order, i.e. exactly the single process's tie order. (Stable sorts, least
    # significant key first.)
    order = torch.argsort(positions, stable=True)
    order = order[torch.argsort(ranks[order], stable=True)]
    order = order[torch.sort(values[order], descending=not bottom, stable=True).indices][:k]
    mine = positions[order][ranks[order] == rank()].to(valid_mask.device)
    chosen = torch.zeros(valid_mask.numel(), dtype=torch.bool, device=valid_mask.device)
    chosen[mine] = True
    return chosen.view_as(valid_mask)


def my_share(n):
    """This process's slice of the step's n prompts (whole groups): every process takes the same
    ones from the stream (the data position stays the same everywhere) and keeps its slice."""
    share = n // world_size()
    return slice(rank() * share, (rank() + 1) * share)


class Passes:
    """The backward passes of one optimizer step under FSDP: passes.backward(loss) for each. The
    gradients are reduce-scattered on the step's last pass only (`total`: the busiest process's
    count, which every process runs, even_passes), the others accumulating unsharded in float32
    (FSDP's reduce dtype)."""

    def __init__(self, model, total):
        self.model, self.total, self.done = model, total, 0

    def backward(self, loss):
        self.done += 1
        self.model.set_requires_gradient_sync(self.done == self.total)
        loss.backward()


@contextlib.contextmanager
def even_passes(model, n_passes, backward=True):
    """FSDP: every forward (and backward) gathers the layers from every process, so each runs as
    many passes as the busiest one. The counts are compared before this process's n_passes passes
    (the with-block, which gets the function that runs each backward: Passes.backward, the
    gradients synced on the last); the extra ones, after it, are one-token passes of the whole
    model, loss 0."""
    if not sharded_layers(model):
        yield torch.Tensor.backward
        return
    busiest = max(gather_objects(n_passes))
    passes = Passes(model, busiest)
    yield passes.backward
    ids = torch.zeros((1, 1), dtype=torch.long, device=model.get_input_embeddings().weight.device)
    for _ in range(busiest - n_passes):
        logits = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits     # (1, 1, V)
        if backward:
            passes.backward(logits.sum() * 0.0)


def sum_and_clip_gradients(model, n_passes, max_norm, clip_replicated):
    """(the passes of every process, the global gradient norm before clipping): the gradients of
    the model's trainable parameters summed over the processes, then clipped (clip_grad_norm)."""
    passes = int(all_reduce_sum(torch.tensor(n_passes)))
    if passes == 0:
        return 0, 0.0
    params = [p for p in model.parameters() if p.requires_grad]
    all_reduce_gradients(params)
    return passes, clip_grad_norm(params, max_norm, clip_replicated)
