"""`sample(decode=CompiledDecode)`: the decode step torch.compile'd over the static KV cache
(gmts/trainer/compiled_decode.py), against the eager sampler.

Two layers of checking, because inductor's C++ code generation costs ~20 s of CPU per graph even for
a 2-layer model (measured: the inductor test below, 20.9 s user CPU, 2 min 7 s wall on the shared
2-core machine), so the bucket logic is tested without it:
- torch.compile with a recording backend that runs the captured graph as it is (no code generation).
  This checks what is ours: dynamo captures the whole decode step over the static cache (one graph,
  no graph breaks), the static mode (writes at the layers' `position`, attention over every column,
  masked by causality) gives the eager samples, and the batch shapes are bucketed (N, then powers
  of two), so the step compiles once per bucket and never again.
- the real thing (inductor), one shape, the same comparison (skipped only without a C++ compiler,
  which inductor needs on a CPU).

Tolerances: float64 models. Eager attends over the filled columns, static over all max_len columns
with the rest masked (exp(-inf) = 0 exactly, but the reductions run over more terms in another
order): float64 rounding, ~1e-15 relative, in logits that then pick the same tokens. log-probs and
entropies are STORED in float32 (Rollout), so the stored values may differ by one float32 rounding
step: |x| x 2^-24 ~ 3e-7 at |x| ~ 5; atol 1e-6 covers it.
"""
import shutil

import pytest
import torch

from gmts.trainer.compiled_decode import CompiledDecode
from gmts.trainer.rollout import sample
from conftest import SAMPLER_PAD as PAD
from conftest import sampler_kwargs as kwargs
from conftest import sampler_prompts as prompts
from conftest import tiny_qwen2

TOL = {"rtol": 1e-6, "atol": 1e-6}


@pytest.fixture
def recording_compile(monkeypatch):
    """torch.compile with a backend that records each captured graph's (batch size, cache width):
    its (n, 1) token ids and its (n, width) attention mask; and runs the graph unchanged."""
    graphs = []
    real_compile = torch.compile

    def backend(gm, example_inputs):
        longs = [x for x in example_inputs
                 if isinstance(x, torch.Tensor) and x.dtype == torch.long and x.dim() == 2]
        rows = next(x.shape[0] for x in longs if x.shape[1] == 1)
        graphs.append((rows, max(x.shape[1] for x in longs)))
        return gm.forward

    def compile_(fn=None, **kw):
        kw.pop("mode", None), kw.pop("backend", None)
        if fn is None:
            return lambda f: real_compile(f, backend=backend, **kw)
        return real_compile(fn, backend=backend, **kw)
    torch._dynamo.reset()
    monkeypatch.setattr(torch, "compile", compile_)
    yield graphs
    torch._dynamo.reset()


def assert_same(a, b):
    assert torch.equal(a.completion_ids, b.completion_ids)
    assert torch.equal(a.valid_mask, b.valid_mask) and torch.equal(a.finished, b.finished)
    torch.testing.assert_close(a.old_logp, b.old_logp, **TOL)
    torch.testing.assert_close(a.entropy, b.entropy, **TOL)


def test_static_decode_step_gives_the_eager_samples_and_compiles_once_per_bucket(recording_compile,
                                                                                monkeypatch):
    from torch._dynamo.utils import counters
    from gmts.trainer import compiled_decode
    monkeypatch.setattr(compiled_decode, "MIN_ROWS", 1)     # every bucket, at 12 rows
    model = tiny_qwen2(dtype=torch.float64, seed=4)
    counters.clear()
    for seed in range(3):
        eager = sample(model, prompts(), **kwargs(seed, max_new_tokens=48))   # rows drop every 8
        compiled = sample(model, prompts(),
                          **kwargs(seed, max_new_tokens=48, decode=CompiledDecode))
        assert_same(compiled, eager)
    # the whole step is one graph
    assert not counters["graph_break"], dict(counters["graph_break"])
    batch_sizes = [n for n, _ in recording_compile]
    assert batch_sizes[0] == 12 and all(n & (n - 1) == 0 for n in batch_sizes[1:]), batch_sizes
    # never recompiled for a size it has seen
    assert len(batch_sizes) == len(set(batch_sizes))
    # finished rows were dropped: buckets used
    assert len(batch_sizes) >= 2


def test_static_decode_step_through_lora(recording_compile):
    pytest.importorskip("peft")
    from gmts.trainer.models import add_lora
    model = add_lora(tiny_qwen2(dtype=torch.float64, seed=4), rank=2, seed=0)
    # peft starts B at 0; non-zero adapters must be applied too
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(generator=torch.Generator().manual_seed(len(name)))
    assert_same(sample(model, prompts(), **kwargs(1, decode=CompiledDecode)),
                sample(model, prompts(), **kwargs(1)))
    assert recording_compile


@pytest.mark.skipif(not any(shutil.which(c) for c in ("g++", "c++", "clang++")),
                    reason="torch.compile (inductor) needs a C++ compiler on a CPU")
def test_inductor_decode_step_gives_the_eager_samples():
    """One shape (no end-of-sequence: no row is dropped, one graph), float32 as train.py runs on
    CPU. Tolerance: inductor fuses and reorders float32 reductions (~1e-7 relative, a few hundred
    deep) in logits of O(1): 1e-4. Tokens: the same, as long as no uniform falls within that of a
    CDF boundary (a fixed seed; it does not)."""
    torch._dynamo.reset()
    model = tiny_qwen2(seed=4)
    kw = {"group_size": 2, "max_new_tokens": 6, "eos_token_ids": [-1], "pad_token_id": PAD}
    eager = sample(model, prompts()[:1], generator=torch.Generator().manual_seed(0), **kw)
    compiled = sample(model, prompts()[:1], generator=torch.Generator().manual_seed(0),
                      decode=CompiledDecode, **kw)
    assert torch.equal(compiled.completion_ids, eager.completion_ids)
    torch.testing.assert_close(compiled.old_logp, eager.old_logp, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(compiled.entropy, eager.entropy, rtol=1e-4, atol=1e-4)


def test_a_run_of_mixed_prompt_lengths_compiles_a_bounded_set_of_graphs(recording_compile,
                                                                       monkeypatch):
    """The cache width is a static shape of the compiled step: with it bucketed
    (compiled_decode.prompt_width), rollouts whose longest prompts vary compile one graph per (width
    bucket, batch bucket), not one per new length. Longest prompts of 4, 6, 5, 4, 9, 13, 17 and 30
    tokens: two width buckets (16 and 32 prompt columns)."""
    from gmts.trainer import compiled_decode
    monkeypatch.setattr(compiled_decode, "MIN_ROWS", 1)
    model = tiny_qwen2(dtype=torch.float64, seed=4)
    rollouts = [[[3] * n, [12, 13]] for n in (4, 6, 5, 4, 9, 13, 17, 30)]
    for seed, batch in enumerate(rollouts):
        eager = sample(model, batch, **kwargs(seed))
        assert_same(sample(model, batch, **kwargs(seed, decode=CompiledDecode)), eager)
    widths = {w for _, w in recording_compile}
    assert widths == {16 + 16, 32 + 16}, widths            # prompt columns + max_new_tokens
    assert len(recording_compile) == len(set(recording_compile))       # each shape compiled once
    assert len(recording_compile) <= compiled_decode.graph_bound(30, 2 * 4)
    assert compiled_decode.graph_bound(30, 8) == 2 * 4     # widths 16, 32 x batch sizes 8, 4, 2, 1


def test_rows_are_never_bucketed_below_min_rows(recording_compile, monkeypatch):
    """compiled_decode.MIN_ROWS: a call of N <= MIN_ROWS rows keeps all of them (one graph per
    width, the cache's rows never copied: the prefill writes each prompt's G rows itself), one of
    more rows stops at MIN_ROWS; the samples are the eager ones either way. Bound: rows, then
    powers of two down to MIN_ROWS."""
    from gmts.trainer import compiled_decode
    from gmts.trainer.rollout import EagerDecode
    assert compiled_decode.MIN_ROWS == 64
    assert compiled_decode.graph_bound(30, 8) == 2 and compiled_decode.graph_bound(30, 256) == 2 * 3
    copies = []
    real = EagerDecode.select_rows
    monkeypatch.setattr(EagerDecode, "select_rows", lambda self, idx: (copies.append(len(idx)),
                                                                       real(self, idx))[1])
    model = tiny_qwen2(dtype=torch.float64, seed=4)
    for seed in range(2):
        eager = sample(model, prompts(), **kwargs(seed, max_new_tokens=48))   # 12 rows, ending
        assert eager.finished.any()
        copies.clear()
        assert_same(sample(model, prompts(), **kwargs(seed, max_new_tokens=48,
                                                      decode=CompiledDecode)), eager)
        assert copies == []                     # no row bucket: the rows never move
    assert {n for n, _ in recording_compile} == {12}
    monkeypatch.setattr(compiled_decode, "MIN_ROWS", 4)          # N = 12 > MIN_ROWS: 12, 8, 4
    recording_compile.clear()
    torch._dynamo.reset()
    eager = sample(model, prompts(), **kwargs(0, max_new_tokens=48))
    copies.clear()
    assert_same(sample(model, prompts(), **kwargs(0, max_new_tokens=48, decode=CompiledDecode)),
                eager)
    assert copies and max(copies) < 12          # the smaller buckets' rows moved up, in the cache
    sizes = [n for n, _ in recording_compile]
    assert sizes[0] == 12 and set(sizes) <= {12, 8, 4} and min(sizes) == 4, sizes
    assert len(sizes) <= compiled_decode.graph_bound(6, 12) == 3
