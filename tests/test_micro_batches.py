"""Step 6's and the scoring pass's micro-batches (gmts/trainer/batches.py, micro_batches): rows
grouped by answer length, each micro-batch trimmed to its own width, optionally cut by a token
budget (--micro-batch-tokens).

What must hold: every row in exactly one micro-batch; the passes compute only the micro-batch's own
width (counted on the decoder's real inputs); and none of it changes a number: the gradient and the
scored log-probs / entropies equal those of one untrimmed pass over every row in rollout order. The
model is float64, so "equal" is to float64 rounding: the same per-row sums regrouped (another
micro-batch split, a shorter padded row), relative error ~ n · 2^-53 with n ~ 10^2 terms, ~1e-14;
1e-10 leaves room and would still catch a token counted twice (an O(1) relative change) or a weight
read from the wrong column.
"""
import itertools
import types

import pytest
import torch

from conftest import tiny_qwen2
from gmts.method.grpo import loss_weights
from gmts.trainer.batches import (Batch, MiniBatch, accumulate_gradients, completion_logprobs,
                                  micro_batches, scoring_pass)

G, T = 2, 12


def spread_batch(seed=0):
    """6 groups x 2 answers whose lengths spread from 1 to T in a shuffled order, prompts of 2-7
    tokens."""
    gen = torch.Generator().manual_seed(seed)
    n = 6 * G
    lengths = torch.tensor([1, 12, 3, 7, 12, 2, 5, 9, 4, 11, 6, 8])
    valid = torch.arange(T)[None, :] < lengths[:, None]
    completion = torch.randint(3, 64, (n, T), generator=gen).masked_fill(~valid, 0)
    prompts = [torch.randint(3, 64, (int(k),), generator=gen).tolist() for k in (2, 7, 3, 5, 4, 6)]
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 0.9, -0.9, 0.3, -0.3, 1.1, -1.1, 0.2, -0.2],
                       dtype=torch.float64)
    zeros = torch.zeros(n, T, dtype=torch.float64)
    return Batch(problems=[None] * 6, prompt_ids=prompts, completion_ids=completion,
                 valid_mask=valid, old_logp=zeros, entropy=zeros, texts=[""] * n,
                 rewards=torch.zeros(n), advantages=adv)


def cfg(micro_batch_size=4, micro_batch_tokens=0):
    return types.SimpleNamespace(group_size=G, micro_batch_size=micro_batch_size,
                                 micro_batch_tokens=micro_batch_tokens, temperature=0.7,
                                 chunk_size=5, eps_low=0.2, eps_high=0.28, beta=0.0)


def padded_tokens(batch, chunk):
    widest_answer = int(batch.valid_mask[chunk].sum(1).max())
    return len(chunk) * (max(len(batch.prompt_ids[int(i) // G]) for i in chunk) + widest_answer)


@pytest.mark.parametrize("size,tokens",
                         [(1, 0), (4, 0), (5, 0), (12, 0), (1, 1), (8, 30), (8, 60), (8, 10**6)])
def test_every_row_once_longest_first_within_the_budget(size, tokens):
    batch = spread_batch()
    # a shuffled subset, as a mini-batch may be
    rows = torch.tensor([7, 0, 3, 10, 1, 5, 11, 2, 8])
    chunks = micro_batches(batch, rows, cfg(size, tokens))
    assert sorted(torch.cat(chunks).tolist()) == sorted(rows.tolist())
    widths = [int(batch.valid_mask[i].sum()) for i in torch.cat(chunks)]
    assert widths == sorted(widths, reverse=True)    # grouped by length, longest first
    for chunk in chunks:
        if tokens:                     # the budget holds unless one row alone exceeds it
            assert len(chunk) == 1 or padded_tokens(batch, chunk) <= tokens
            # greedy: the next row would not have fit
        else:
            assert len(chunk) <= size
    if tokens:
        for a, b in itertools.pairwise(chunks):
            assert padded_tokens(batch, torch.cat([a, b[:1]])) > tokens
    if tokens == 10**6:
        assert len(chunks) == 1
    if tokens == 1:
        assert len(chunks) == len(rows)


def count_decoder_tokens(model):
    """A forward hook on the decoder that adds up rows x width of every input it receives."""
    seen = []
    hook = model.get_decoder().register_forward_hook(
        lambda module, args, kwargs, out: seen.append(kwargs["input_ids"].numel()),
        with_kwargs=True)
    return seen, hook


@pytest.mark.parametrize("size,tokens", [(1, 0), (3, 0), (12, 0), (8, 40)])
def test_scoring_pass_equals_one_untrimmed_pass_and_computes_only_real_width(size, tokens):
    model = tiny_qwen2(hidden=16, layers=2, dtype=torch.float64, seed=2).eval()
    batch = spread_batch()
    rows = torch.tensor([7, 0, 3, 10, 1, 5, 11, 2, 8])
    prompts = [batch.prompt_ids[int(i) // G] for i in rows]
    with torch.no_grad():
        want_lp, want_ent = completion_logprobs(model, prompts, batch.completion_ids[rows],
                                                batch.valid_mask[rows], temperature=0.7,
                                                chunk_size=5, with_entropy=True)
    seen, hook = count_decoder_tokens(model)
    lp, ent = scoring_pass(model, batch, rows, cfg(size, tokens))
    hook.remove()
    assert lp.shape == ent.shape == (len(rows), T) and lp.dtype == torch.float64
    # in the order of `rows`, 0 at padding
    torch.testing.assert_close(lp, want_lp, rtol=0, atol=1e-10)
    torch.testing.assert_close(ent, want_ent, rtol=0, atol=1e-10)
    assert (lp[~batch.valid_mask[rows]] == 0).all()
    chunks = micro_batches(batch, rows, cfg(size, tokens))
    # each pass at its own width, nothing else
    assert seen == [padded_tokens(batch, c) for c in chunks]
    untrimmed = sum(len(c) * (max(len(batch.prompt_ids[int(i) // G]) for i in c) + T)
                    for c in torch.split(rows, size if not tokens else len(rows)))
    if size < 12:
        assert sum(seen) < untrimmed


def gradient(model, batch, rows, config):
    """The trainer's step-6 gradient of the on-policy loss over `rows` (weights with the whole
    batch's normaliser)."""
    mb = MiniBatch(batch, rows, G)
    weights = loss_weights(mb.valid_mask, mb.valid_mask, "selected")
    model.zero_grad(set_to_none=True)
    loss, passes = accumulate_gradients(model, batch, mb, mb.rows, weights, config, on_policy=True)
    return float(loss), passes, [p.grad.clone() for p in model.parameters()]


def test_gradient_is_the_same_for_every_grouping():
    """The one-pass gradient (all 12 rows, untrimmed: every micro-batch of 12 is trimmed only to the
    batch's widest, which is T here) against row-by-row, uneven micro-batches and token budgets,
    each grouped and trimmed."""
    model = tiny_qwen2(hidden=16, layers=2, dtype=torch.float64, seed=2)
    batch = spread_batch()
    rows = torch.arange(len(batch.advantages))
    loss0, passes0, grad0 = gradient(model, batch, rows, cfg(12))
    assert passes0 == 1 and any(g.abs().max() > 1e-6 for g in grad0)
    for size, tokens in [(1, 0), (5, 0), (8, 25), (8, 70), (8, 1)]:
        loss, passes, grad = gradient(model, batch, rows, cfg(size, tokens))
        assert passes == len(micro_batches(batch, rows, cfg(size, tokens))) > 1
        assert loss == pytest.approx(loss0, rel=1e-12)
        for a, b in zip(grad, grad0):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-13)


def long_batch(rows, seed):
    """rows / G groups of G answers of 1..T tokens (random), prompts of 2-7 tokens, advantages of
    both signs."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (rows,), generator=gen)
    valid = torch.arange(T)[None, :] < lengths[:, None]
    completion = torch.randint(3, 64, (rows, T), generator=gen).masked_fill(~valid, 0)
    prompts = [torch.randint(3, 64, (int(k),), generator=gen).tolist()
               for k in torch.randint(2, 8, (rows // G,), generator=gen)]
    adv = torch.randn(rows, generator=gen, dtype=torch.float64)
    zeros = torch.zeros(rows, T, dtype=torch.float64)
    return Batch(problems=[None] * (rows // G), prompt_ids=prompts, completion_ids=completion,
                 valid_mask=valid, old_logp=zeros, entropy=zeros, texts=[""] * rows,
                 rewards=torch.zeros(rows), advantages=adv)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bf16_gradients_reach_the_optimizer_summed_in_float32(seed):
    """A bf16 model, 64 micro-batches of one row: the gradient AdamW steps with (the float32
    masters' .grad) is the float32 sum of what each micro-batch's backward delivered.

    The arithmetic. Micro-batch i's backward delivers b_i (recorded here by a hook on each
    parameter, before it is summed): the exact gradient g_i of that micro-batch rounded once,
    b_i = g_i (1 + δ_i), |δ_i| <= 2^-8 (bf16 for the layers, whose matmuls round their output once;
    float32 for the chunked head, which returns its float32 sum unrounded). Summed in float32
    (recursive summation of n terms, u = 2^-24) the optimizer's gradient A satisfies
    |A - Σ b_i| <= γ_{n-1} Σ |b_i|, γ_k = k u / (1 - k u) (Higham, Accuracy and Stability, 4.2); so
    against the one-pass gradient Σ g_i, A is off by at most 2^-8 Σ|g_i| + γ_{n-1} Σ|b_i|: one bf16
    rounding of each micro-batch's gradient, nothing more. Σ b_i is taken in float64 (exact here:
    64 terms of 8 or 24 bits within float64's 53). Summed in bf16 instead, each partial sum S_k is
    rounded (2^-9 |S_k| each), thousands of times this bound: the check fails."""
    from gmts.trainer.optim import MasterWeightAdamW, build_optimizer
    from gmts.trainer.batches import optimizer_step
    model = tiny_qwen2(hidden=16, layers=2, dtype=torch.bfloat16, seed=seed)
    batch = long_batch(64, seed)
    rows = torch.arange(64)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = build_optimizer(model, types.SimpleNamespace(
        lr=1e-3, adam_beta1=0.9, adam_beta2=0.999, weight_decay=0.0, optimizer_offload=False))
    assert isinstance(optimizer, MasterWeightAdamW)
    delivered = [[] for _ in params]          # b_i of each parameter, one per backward
    for p, seen in zip(params, delivered):
        p.register_hook(lambda g, seen=seen: seen.append(g.detach().double()))
    stepped = []
    inner_step = optimizer.inner.step
    optimizer.inner.step = lambda: (stepped.append([m.grad.double() for m in optimizer.master]),
                                    inner_step())
    mb = MiniBatch(batch, rows, G)
    weights = loss_weights(mb.valid_mask, mb.valid_mask, "selected")
    optimizer.zero_grad(set_to_none=True)
    loss, passes = accumulate_gradients(model, batch, mb, mb.rows, weights, cfg(micro_batch_size=1),
                                        on_policy=True)
    assert passes == 64
    optimizer_step(model, optimizer, loss, passes, max_grad_norm=0.0)   # no clipping
    assert len(stepped) == 1
    n, u = 64, 2.0 ** -24
    gamma = (n - 1) * u / (1 - (n - 1) * u)
    for p, seen, got in zip(params, delivered, stepped[0]):
        assert len(seen) == n
        exact = torch.stack(seen).sum(0)
        bound = gamma * torch.stack(seen).abs().sum(0)
        assert float(exact.abs().max()) > 0
        excess = (got - exact).abs() - bound
        assert float(excess.max()) <= 0, (tuple(p.shape), float(excess.max()))


def test_torch_without_grad_dtype_refuses_bf16_weights(monkeypatch):
    """torch < 2.10 (no Tensor.grad_dtype, the feature check patched) cannot sum bf16 gradients
    in float32: --dtype bfloat16 is one line at the start naming the flag and the version; float32
    weights, LoRA's float32 adapters and --fsdp's float32 shards run; the optimizer refuses too."""
    from gmts.run import build
    from gmts.run.config import parse_config
    from gmts.trainer import optim
    monkeypatch.setattr(optim, "has_grad_dtype", lambda: False)
    flags = ["--data", "arithmetic", "--device", "cpu"]
    with pytest.raises(SystemExit) as refused:
        build.start_processes(parse_config(flags + ["--dtype", "bfloat16"]), None)
    message = str(refused.value)
    assert message.startswith("error: --dtype bfloat16: torch ") and torch.__version__ in message
    assert "\n" not in message
    for dtype in ("float32", "auto"):              # auto: float32 on a CPU
        assert build.start_processes(parse_config(flags + ["--dtype", dtype]), None)[3] == \
            torch.float32
    lora = parse_config(flags + ["--dtype", "bfloat16", "--lora-rank", "4"])
    assert build.start_processes(lora, None)[3] == torch.bfloat16
    fsdp = types.SimpleNamespace(dtype="bfloat16", fsdp=True, lora_rank=0)
    optim.check_gradient_sums(fsdp, torch.bfloat16)
    with pytest.raises(RuntimeError, match="grad_dtype"):
        optim.MasterWeightAdamW([torch.nn.Parameter(torch.ones(2, dtype=torch.bfloat16))])
    monkeypatch.undo()
    build.start_processes(parse_config(flags + ["--dtype", "bfloat16"]), None)     # torch 2.10+
