"""Data parallel (torchrun): one batch-wide threshold and one update across processes (gloo, CPU, 2
processes).

The selected token set and the parameter update after one step on 2 processes must equal those of 1
process on the same batch, for ETS and GMTS; and `torchrun --nproc-per-node 2 train.py` must run,
checkpoint and resume."""
import functools
import json
import os
import signal
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from conftest import run_python, spawn_gloo  # a command in a fork, a gloo group per process

Q, G, T, VOCAB = 4, 4, 7, 64


def make_batch(seed=0):
    """A fixed batch of Q groups x G answers with ragged lengths, rewards, entropies (the scores'
    inputs)."""
    import train
    gen = torch.Generator().manual_seed(seed)
    n = Q * G
    lengths = torch.randint(1, T + 1, (n,), generator=gen)
    valid = torch.arange(T)[None, :] < lengths[:, None]
    completion = torch.randint(3, VOCAB, (n, T), generator=gen).masked_fill(~valid, 0)
    rewards = torch.tensor([1., 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 0])
    import gmts
    adv = gmts.group_advantages(rewards, G)
    entropy = (torch.rand(n, T, generator=gen) * 3).masked_fill(~valid, 0)
    # ties across what will be different ranks
    entropy[3, 0] = entropy[9, 1] = entropy[12, 0] = 2.5
    logp = -torch.rand(n, T, generator=gen).masked_fill(~valid, 0)
    prompts = [[int(x) for x in torch.randint(3, VOCAB, (3 + q,), generator=gen)] for q in range(Q)]
    return train.Batch(problems=list(range(Q)), prompt_ids=prompts, completion_ids=completion,
                       valid_mask=valid, old_logp=logp, entropy=entropy, texts=[""] * n,
                       rewards=rewards, advantages=adv)


def shard(batch, rank, world):
    import train
    q = Q // world
    rows = slice(rank * q * G, (rank + 1) * q * G)
    return train.Batch(problems=batch.problems[rank * q:(rank + 1) * q],
                       prompt_ids=batch.prompt_ids[rank * q:(rank + 1) * q],
                       completion_ids=batch.completion_ids[rows], valid_mask=batch.valid_mask[rows],
                       old_logp=batch.old_logp[rows], entropy=batch.entropy[rows],
                       texts=batch.texts[rows], rewards=batch.rewards[rows],
                       advantages=batch.advantages[rows])


def record_gradients(model, optimizer):
    """The gradient each optimizer step is handed (summed over ranks and clipped), in float64, as a
    list per step: [{name: tensor}]. Under FSDP each rank holds a shard, gathered here (every rank
    takes part)."""
    from torch.distributed.tensor import DTensor
    steps, step = [], optimizer.step

    def recording_step(*args, **kwargs):
        steps.append({
            name: (p.grad.full_tensor() if isinstance(p.grad, DTensor)
                   else p.grad).detach().double()
            for name, p in model.named_parameters() if p.grad is not None})
        return step(*args, **kwargs)
    optimizer.step = recording_step
    return steps


def adam_directions(grads, betas=(0.9, 0.999), eps=1e-8):
    """AdamW's bias-corrected direction u_t = m̂_t / (√v̂_t + ε) of every step, from the gradients
    alone (weight decay 0, so θ_t = θ_0 - lr Σ u_s exactly, up to rounding): {name: [u_1, u_2,
    ...]}, float64."""
    out = {}
    for name in grads[0]:
        m = v = 0
        out[name] = []
        for t, step in enumerate(grads, start=1):
            g = step[name]
            m, v = betas[0] * m + (1 - betas[0]) * g, betas[1] * v + (1 - betas[1]) * g * g
            out[name].append((m / (1 - betas[0] ** t)) / ((v / (1 - betas[1] ** t)).sqrt() + eps))
    return out


def assert_same_update(grads, single_grads, params, single_params, lr, n_terms):
    """The tolerances of "2 processes = 1 process", from the arithmetic rather than from one CPU's
    result.

    Gradients, first step (both at θ_0): each coordinate is a float32 sum of per-token terms, which
    two processes group differently (each rank sums its own micro-batches, then the all-reduce adds
    the two). Regrouping a float32 sum of n terms moves it by at most about n · u · Σ|terms|, u =
    2^-24 (unit roundoff); with Σ|terms| of the order of the gradient's largest coordinate, atol = n
    · u · max|g| (n = the tokens and micro-batches summed).

    Weights: Adam turns that rounding into much more. Its direction u = m̂/(√v̂ + ε) is scale-free:
    a coordinate whose gradient is within rounding of 0 (|g| ~ ε = 1e-8) can move by a large share
    of lr whatever δg is (measured: |g| = 4.7e-10, δg = 1.5e-12 -> 1.4e-6 in θ at lr 1e-2; the bug
    report's 3.1e-6 on an AMD EPYC). So the weights are compared with exactly that amplification:
    |Δθ| <= lr Σ_t |u_t - u'_t| (recomputed from the two gradient sequences) + the update's own
    float32 rounding (lr · steps · 8u per coordinate, plus u · |θ|)."""
    u = 2.0 ** -24
    for name, g in single_grads[0].items():
        bound = n_terms * u * float(g.abs().max())
        torch.testing.assert_close(grads[0][name], g, rtol=0, atol=bound,
                                   msg=lambda m, name=name: f"{name} (step 1): {m}")
    ours, theirs = adam_directions(grads), adam_directions(single_grads)
    for name, value in single_params.items():
        # a buffer, or a parameter without a gradient: exactly unchanged
        if name not in ours:
            assert torch.equal(params[name], value), name
            continue
        amplified = lr * sum((a - b).abs() for a, b in zip(ours[name], theirs[name]))
        rounding = lr * len(grads) * 8 * u + u * value.double().abs()
        excess = (params[name].double() - value.double()).abs() - amplified - rounding
        assert float(excess.max()) <= 0, (name, float(excess.max()))


def one_update(selector, batch, loss_norm, fsdp=False, extra=()):
    import train
    from conftest import tiny_qwen2
    from gmts.trainer import distributed
    from gmts.trainer.metrics import update_figures
    from gmts.run.config import parse_config
    from gmts.trainer.optim import build_optimizer
    torch.set_num_threads(1)
    cfg = parse_config(
        ["--selector", selector, "--group-size", str(G), "--prompts-per-step", str(Q),
                        "--micro-batch-size", "2", "--lr", "1e-2", "--loss-norm", loss_norm,
         "--max-grad-norm", "0.5",
                        *extra])
    model = tiny_qwen2(vocab_size=VOCAB, seed=11)
    if fsdp:
        distributed.shard_model(model, torch.float32)
    optimizer = build_optimizer(model, cfg)
    grads = record_gradients(model, optimizer)
    metrics, selected = update_figures(
        cfg, batch, train.update_policy(cfg, model, None, optimizer, batch, torch.Generator(),
                                        torch.device("cpu")))
    if fsdp:
        params, _ = distributed.full_state_dicts(model, optimizer)
    else:
        params = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return selected, params, metrics, grads


def _worker(rank, world, selector, loss_norm, fsdp=False, extra=()):
    selected, params, metrics, grads = one_update(selector, shard(make_batch(), rank, world),
                                                  loss_norm, fsdp, extra)
    return {"selected": selected, "params": params, "metrics": metrics, "grads": grads}


# A token budget per micro-batch (--micro-batch-tokens): the ranks' rows split into different
# numbers of passes (checked below), so under FSDP the lighter rank runs throw-away passes to keep
# the layer gathers in step.
BUDGET = ("--micro-batch-tokens", "16")


@pytest.mark.parametrize("selector, loss_norm, fsdp, extra", [("ets", "selected", False, ()),
                                                              ("gmts", "selected", False, ()),
                                                              ("gmts", "all", False, ()),
                                                              ("gmts", "sequence", False, ()),
                                                              ("gmts", "selected", True, ()),
                                                              ("gmts", "selected", False, BUDGET),
                                                              ("ets", "selected", True, BUDGET)])
def test_two_processes_equal_one_process(tmp_path, selector, loss_norm, fsdp, extra):
    if extra:
        from gmts.run.config import parse_config
        from gmts.trainer.batches import micro_batches
        cfg = parse_config(["--group-size", str(G), *extra])
        counts = [len(micro_batches(part, torch.arange(len(part.advantages)), cfg))
                  for part in (shard(make_batch(), r, 2) for r in range(2))]
        assert counts[0] != counts[1], counts
    parts = spawn_gloo(_worker, tmp_path, selector, loss_norm, fsdp, extra)
    single_sel, single_params, single_metrics, single_grads = one_update(
        selector, make_batch(), loss_norm, extra=extra)
    both = torch.cat([p["selected"] for p in parts])
    assert torch.equal(both, single_sel)
    # ceil(0.2 n), global
    assert int(single_sel.sum()) == -(-int(make_batch().valid_mask.sum()) * 2 // 10)
    for p in (parts[:1] if fsdp else parts):    # FSDP gathers the full weights on rank 0 only
        # n: Q·G·T tokens at most, plus the micro-batches and the two ranks (assert_same_update
        # derives it)
        assert_same_update(p["grads"], single_grads, p["params"], single_params, lr=1e-2,
                           n_terms=Q * G * T + 16)
    for key in ("selected_tokens", "valid_tokens", "answers_with_selected",
                "selection_overlap_ets_gmts"):
        # counts: exact in any order
        assert parts[0]["metrics"][key] == pytest.approx(single_metrics[key])
    # the norm of the first (and only) step's gradient, at θ_0: a float32 sum of squares regrouped,
    # so its relative error is of order n · u = 128 · 6e-8 ≈ 8e-6 at most (the coordinates' own
    # errors are relative to max|g|)
    assert parts[0]["metrics"]["grad_norm"] == pytest.approx(single_metrics["grad_norm"], rel=1e-5)


def test_per_rank_top_k_would_differ():
    """The check above can fail: a per-rank top-k (each rank selecting ceil(ρ n_r) of its own
    tokens) picks a different set on this batch."""
    import gmts
    batch = make_batch()
    halves = [shard(batch, r, 2) for r in range(2)]
    per_rank = torch.cat([gmts.select_tokens(gmts.token_scores("ets", h.entropy), h.valid_mask, 0.2)
                          for h in halves])
    global_sel = gmts.select_tokens(gmts.token_scores("ets", batch.entropy), batch.valid_mask, 0.2)
    assert not torch.equal(per_rank, global_sel)


def test_a_crashing_process_of_a_run_prints_its_python_stack(tmp_path):
    """A process of a multi-process run that segfaults prints where (faulthandler, enabled by
    init_group), so torchrun's "Signal 11 (SIGSEGV) received" comes with the Python stack."""
    crash = ("import ctypes, faulthandler\nfaulthandler.disable()\n"
             "from gmts.trainer import distributed\n"
             f"distributed.init_group('gloo', init_method='file://{tmp_path}/init', rank=0, "
             "world_size=1)\n"
             "def deep_in_a_step():\n    ctypes.string_at(0)\n\ndeep_in_a_step()\n")
    proc = subprocess.run([sys.executable, "-c", crash], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == -signal.SIGSEGV, proc.stderr[-3000:]
    assert "Fatal Python error: Segmentation fault" in proc.stderr, proc.stderr[-3000:]
    assert "in deep_in_a_step" in proc.stderr, proc.stderr[-3000:]


def failure(stderr):
    """What a failed torchrun printed: its end, and a crashed process's Python stack
    (faulthandler's, gmts/trainer/distributed.py's init_group), which torchrun's summary follows."""
    crash = stderr.find("Fatal Python error")
    return (stderr[crash:crash + 4000] + "\n...\n" if crash >= 0 else "") + stderr[-3000:]


@pytest.mark.parametrize("fsdp", [False, True])
def test_torchrun_two_processes_train_checkpoint_and_resume(digit_model_dir, digit_data, tmp_path,
                                                            fsdp):
    out = tmp_path / "ddp"
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", GMTS_DIST_BACKEND="gloo")
    base = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            os.path.join(ROOT, "train.py")]
    args = ["--model", digit_model_dir, "--data", digit_data, "--steps", "2", "--prompts-per-step",
            "2", "--group-size", "4", "--max-new-tokens", "3", "--micro-batch-size", "4",
            "--device", "cpu", "--selector", "gmts", "--output-dir", str(out), "--lr", "1e-3",
            "--save-every", "1"] + \
        (["--fsdp", "--eval-every", "2", "--eval-data", digit_data, "--eval-limit", "4"] if fsdp
         else [])
    proc = subprocess.run(base + args, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, failure(proc.stderr)
    # nothing but the progress bar: no warning at the start or at the end (an isinstance() sweep of
    # the objects in shutdown would print a FutureWarning per process)
    assert "Warning" not in proc.stderr, proc.stderr[-3000:]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert metrics[0]["groups"] == 2 and metrics[0]["selected_tokens"] == -(
        -metrics[0]["valid_tokens"] * 2 // 10)
    state = torch.load(out / "checkpoints" / "step-000002" / "trainer_state.pt", weights_only=False)
    assert state["world_size"] == 2 and len(state["rng"]) == 2
    from transformers import AutoModelForCausalLM
    saved = AutoModelForCausalLM.from_pretrained(out / "checkpoints" / "step-000002")
    start = AutoModelForCausalLM.from_pretrained(digit_model_dir)
    assert sum((a - b).abs().sum().item()
               for a, b in zip(saved.parameters(), start.parameters())) > 0
    if fsdp:
        assert "eval_accuracy" in metrics[1]
    proc = subprocess.run(base + ["--resume", str(out), "--steps", "3"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0 and "Warning" not in proc.stderr, failure(proc.stderr)
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3
    single = run_python(["train.py", "--resume", out, "--steps", "4"],
                        env={"GMTS_DIST_BACKEND": "gloo"}, timeout=600)
    assert single.returncode != 0 and "same number" in single.stderr


_SHUTDOWN_SCRIPT = """
import json, os, sys, weakref
import torch
sys.path.insert(0, {root!r})
import train  # noqa: F401  (the trainer's imports, made before the group exists, as under torchrun)
import torch.distributed as dist
from gmts.trainer import distributed
from gmts.trainer.models import load_model
rank = distributed.init()[0]
group = weakref.ref(dist.group.WORLD)


def run():                     # like train.main: the model lives in this frame
    model = load_model({model!r}, dtype=torch.float32, device="cpu")
    if {fsdp!r}:               # DTensors, and DTensor's caches, keep the mesh and with it the group
        distributed.shard_model(model, torch.float32)
        model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    distributed.all_reduce_sum(torch.ones(1))
    if {exit_code!r}:          # ends by an exception: its traceback holds this frame
        sys.exit({exit_code!r})


try:
    run()
finally:
    distributed.shutdown(sys.exc_info()[1])       # as train.py's last line; no collect after it
    sys.path.insert(0, os.path.join({root!r}, "tests"))
    from conftest import gloo_threads
    json.dump({{"freed": group() is None, "gloo_threads": gloo_threads()}},
              open(os.path.join({out!r}, f"{{rank}}.json"), "w"))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads the threads from /proc")
@pytest.mark.parametrize("fsdp, exit_code", [(False, 0), (True, 0), (True, 3)])
def test_shutdown_frees_the_process_group(digit_model_dir, tmp_path, fsdp, exit_code):
    """distributed.shutdown() after loading a model (and with FSDP, a forward and backward of its
    sharded layers) really ends the group: no gloo thread is left to the interpreter's teardown,
    where one aborted a finished run ("terminate called without an active exception"), kept alive
    by a module imported after init_process_group with `group.WORLD` as a default argument, or by
    DTensor's caches, which hold FSDP's device mesh; also when the run ends by an exception (a
    one-line error, a signal's stop: sys.exit), whose traceback holds the model."""
    script = tmp_path / "shutdown.py"
    script.write_text(_SHUTDOWN_SCRIPT.format(root=ROOT, model=digit_model_dir, out=str(tmp_path),
                                              fsdp=fsdp, exit_code=exit_code))
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", GMTS_DIST_BACKEND="gloo")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", str(script)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert (proc.returncode == 0) == (exit_code == 0), failure(proc.stderr)
    assert "terminate called" not in proc.stderr and "SIGABRT" not in proc.stderr
    for rank in range(2):
        assert json.loads((tmp_path / f"{rank}.json").read_text()) == {"freed": True,
                                                                       "gloo_threads": []}


def _nccl_like_worker(rank, world):
    """A group that, like NCCL, serves one device type and refuses a tensor on any other ("No
    backend type associated with device type cpu"). On a CPU the served type is `lazy` (torch's
    TorchScript lazy tensors: a second device that holds real data), the callers' tensors are on the
    CPU, as under NCCL; each collective checks what it is handed, then sums for real over gloo."""
    import torch._lazy.ts_backend
    import torch.distributed as dist
    torch._lazy.ts_backend.init()
    real_all_reduce, handed = dist.all_reduce, []

    def all_reduce(tensor, *args, **kwargs):
        handed.append(tensor.device.type)
        if tensor.device.type != "lazy":
            raise RuntimeError(f"No backend type associated with device type {tensor.device.type}")
        host = tensor.cpu()
        work = real_all_reduce(host, *args, **kwargs)
        tensor.copy_(host.to(tensor.device))
        return work
    dist.all_reduce = all_reduce
    dist.distributed_c10d._device_capability = lambda group=None: ["lazy"]
    dist.get_backend = lambda group=None: "nccl"
    from gmts.trainer import distributed
    from gmts.run.signals import StopRequest
    out = {"sum": distributed.all_reduce_sum(torch.tensor([rank + 1.0, 2.0])).tolist(),
           "count": int(distributed.all_reduce_sum(torch.tensor(rank + 1))),
           "stop": StopRequest().any_process()}
    layer = torch.nn.Linear(3, 2)
    for p in layer.parameters():
        p.grad = torch.full_like(p, float(rank + 1))
    distributed.all_reduce_gradients(list(layer.parameters()))
    out["grads"] = [p.grad.unique().tolist() for p in layer.parameters()]
    distributed.BUCKET_ELEMENTS = 4           # buckets of 4: the weight (6) cut in two pieces
    for p in layer.parameters():
        p.grad = torch.arange(p.numel(), dtype=torch.float32).view_as(p) * (rank + 1)
    distributed.all_reduce_gradients(list(layer.parameters()))
    out["bucketed"] = [p.grad.reshape(-1).tolist() for p in layer.parameters()]
    selected, *_ = one_update("gmts", shard(make_batch(), rank, world), "selected")
    out["selected"] = selected
    out["handed"] = sorted(set(handed))
    return out


def test_every_collective_runs_on_the_backends_device(tmp_path):
    """The step's collectives (the rollout figures, the selection counts, the gradients, the stop
    request...) are handed tensors on the device the backend serves, whatever device the caller's
    tensors are on; and they sum."""
    pytest.importorskip("torch._lazy.ts_backend")
    parts = spawn_gloo(_nccl_like_worker, tmp_path)
    for part in parts:
        assert part["handed"] == ["lazy"]
        assert part["sum"] == [3.0, 4.0] and part["count"] == 3 and part["grads"] == [[3.0], [3.0]]
        assert part["stop"] is False
        assert part["bucketed"] == [[3.0 * i for i in range(6)], [0.0, 3.0]]
    single_sel, *_ = one_update("gmts", make_batch(), "selected")
    assert torch.equal(torch.cat([p["selected"] for p in parts]), single_sel)


def test_gradient_norm_of_bf16_gradients_is_summed_in_float32():
    """Full bf16 fine-tuning: the norm (and so the clip coefficient) to float32 accuracy, not bf16's
    3 digits. Reference: float64 over the same bf16 values. Float32 sums of n = 4096 squares:
    relative error <= n u = 2.4e-4 at worst (u = 2^-24), and the square root halves it; bf16 itself
    rounds the result by up to 2^-9 = 2e-3."""
    from gmts.trainer import distributed
    from gmts.trainer.batches import clip_grad_norm
    gen = torch.Generator().manual_seed(0)
    for clip in (clip_grad_norm, functools.partial(distributed.clip_grad_norm,
                                                   clip_replicated=clip_grad_norm)):
        params = [torch.nn.Parameter(torch.zeros(64, 32, dtype=torch.bfloat16)) for _ in range(2)]
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen).to(torch.bfloat16)
        exact = float(torch.cat([p.grad.double().reshape(-1) for p in params]).norm())
        norm = clip(params, exact / 2)
        assert norm.dtype in (torch.float32, torch.float64), norm.dtype
        assert abs(float(norm) - exact) <= 4096 * 2.0 ** -24 * exact
        clipped = float(torch.cat([p.grad.double().reshape(-1) for p in params]).norm())
        assert abs(clipped - exact / 2) <= 2.0 ** -8 * exact / 2     # one bf16 rounding each


def count_reduce_scatters():
    """Wrap torch.distributed's reduce-scatter (FSDP's gradient sum; reduce_scatter_single in
    newer torch, reduce_scatter_tensor before) to count its calls: returns the list it appends
    to."""
    import torch.distributed as dist
    calls = []
    for name in ("reduce_scatter_single", "reduce_scatter_tensor"):
        real = getattr(dist, name, None)
        if real is not None:
            setattr(dist, name, lambda *a, real=real, **k: (calls.append(1), real(*a, **k))[1])
    return calls


def _fsdp_worker(rank, world, dtype, extra):
    """One update of a tiny model under FSDP (shard_model in `dtype`) on this rank's share, with
    the reduce-scatters counted per optimizer step and the head's matmul dtypes recorded."""
    import train
    from conftest import tiny_qwen2
    from gmts.run.config import parse_config
    from gmts.trainer import batches, distributed
    from gmts.trainer.optim import build_optimizer
    torch.set_num_threads(1)
    cfg = parse_config(["--selector", "gmts", "--group-size", str(G), "--prompts-per-step",
                        str(Q), "--micro-batch-size", "1", "--lr", "1e-2", *extra])
    model = distributed.shard_model(tiny_qwen2(vocab_size=VOCAB, seed=11), dtype)
    optimizer = build_optimizer(model, cfg)
    calls, per_step, head_dtypes = count_reduce_scatters(), [], []
    real_step, real_head = optimizer.step, batches.head_logprobs

    def counting_step(*args, **kwargs):
        per_step.append(len(calls) - sum(per_step))
        return real_step(*args, **kwargs)

    def recording_head(hidden, weight, *args, **kwargs):
        head_dtypes.append((hidden.dtype, weight.dtype))
        return real_head(hidden, weight, *args, **kwargs)
    optimizer.step, batches.head_logprobs = counting_step, recording_head
    batch = shard(make_batch(), rank, world)
    passes = len(batches.micro_batches(batch, torch.arange(len(batch.advantages)), cfg))
    grads = record_gradients(model, optimizer)
    records = train.update_policy(cfg, model, None, optimizer, batch, torch.Generator(),
                                  torch.device("cpu"))
    from torch.distributed.fsdp import FSDPModule
    fsdp = [m for m in model.modules() if isinstance(m, FSDPModule)]
    roots = [m for m in fsdp if m._get_fsdp_state()._is_root]
    own = {n for n, p in model.named_parameters() if not any(
        p is q for m in fsdp if m is not model for q in m.parameters())}
    model_state, optim_state = distributed.full_state_dicts(model, optimizer)
    # a resume: every rank loads the saved optimizer state; its float32 masters (if any) come back
    # exactly, whatever the weights were
    before = {k: v.full_tensor() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.to_local().mul_(0.5)
    distributed.load_full_optimizer_state(model, optimizer, distributed.gather_objects(
        optim_state)[0])
    after = {k: v.full_tensor() for k, v in model.state_dict().items()}
    return {"resumed_exactly": all(torch.equal(before[k], after[k]) for k in before),
            "per_step": per_step, "passes": passes, "steps": len(records),
            "head_dtypes": sorted(set(head_dtypes), key=str), "grads": grads,
            "roots": [r is model for r in roots],
            "layers": all(isinstance(layer, FSDPModule) for layer in model.get_decoder().layers),
            "fsdp_modules": len(fsdp), "root_params": sorted(own),
            "saved": None if model_state is None else {k: v.dtype for k, v in model_state.items()},
            "master": None if optim_state is None else {
                k: v.dtype for k, v in optim_state.get("master", {}).items()}}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fsdp_one_root_one_reduce_scatter_per_optimizer_step(tmp_path, dtype):
    """FSDP: one root (the model: embeddings, final norm, head), each decoder layer its own FSDP
    module; the gradients reduce-scattered once per FSDP module per optimizer step, on its last
    pass (no sync on the others: 3 modules, not 3 x passes); the head's matmuls in the run's
    dtype; checkpoints in the run's dtype with float32 masters beside them where it is narrower,
    which a resume loads.
    Two optimizer steps (--mini-batch-size 2 groups of Q). The gradients equal those of syncing
    every pass: test_two_processes_equal_one_process's FSDP cases (sync on the last pass, the
    default) against one process."""
    parts = spawn_gloo(_fsdp_worker, tmp_path, dtype, ("--mini-batch-size", "2"))
    layers = 2                                    # tiny_qwen2's
    for part in parts:
        assert part["roots"] == [True] and part["layers"] and part["fsdp_modules"] == layers + 1
        assert part["root_params"] == ["lm_head.weight", "model.embed_tokens.weight",
                                       "model.norm.weight"]
        assert part["steps"] == 2 and part["passes"] > 1
        assert part["per_step"] == [layers + 1] * 2, part["per_step"]
        assert part["head_dtypes"] == [(dtype, dtype)]
        assert all(g.dtype == torch.float64 for step in part["grads"] for g in step.values())
        assert part["resumed_exactly"] == (dtype != torch.float32)   # no masters: halved
    saved, master = parts[0]["saved"], parts[0]["master"]
    assert set(saved.values()) == {dtype}
    assert master == ({} if dtype == torch.float32 else {k: torch.float32 for k in saved})
    assert parts[1]["saved"] is None
