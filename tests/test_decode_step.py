"""What one decode step of the sampler (gmts/trainer/rollout.py, compiled_decode.py) does, counted
op by op at torch's dispatcher (every aten op a step runs, with its output) on tiny Qwen2 models on
the CPU: the closest a CPU comes to a GPU's memory traffic and kernel launches.

- K and V are never expanded to every query head (grouped-query attention reads the cache as it
  is), eager and compiled;
- the compiled step keeps its KV buffers and position (the same addresses) and its graphs across
  rollouts;
- the compiled graph holds the sampler (temperature, CDF, draw), not only the forward;
- an eager decode step runs no more aten ops than `model.generate`'s.
"""
import collections

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gmts.trainer import compiled_decode
from gmts.trainer.compiled_decode import CompiledDecode
from gmts.trainer.rollout import EagerDecode, sample
from conftest import sampler_kwargs as kwargs
from conftest import sampler_prompts as prompts
from conftest import tiny_qwen2

HEADS, KV_HEADS = 4, 1          # 4 query heads share each KV head: an expansion would be 4x


def gqa_model(layers=2, dtype=torch.float64, seed=4, kv_heads=KV_HEADS):
    """A tiny Qwen2 with grouped-query attention: 4 query heads, `kv_heads` KV heads of 8."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=layers, num_attention_heads=HEADS,
                         num_key_value_heads=kv_heads, max_position_embeddings=256,
                         tie_word_embeddings=False)
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).to(dtype).eval()


class Ops(TorchDispatchMode):
    """Every aten op dispatched while active: its name and the shape of each tensor it returns."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat = out if isinstance(out, (tuple, list)) else [out]
        self.ops.append((str(func), [tuple(x.shape) for x in flat if torch.is_tensor(x)]))
        return out


class RecordingSteps:
    """A decode class (EagerDecode or CompiledDecode) whose decode steps run under Ops when `ops`
    (the prefill does not; torch.compile runs nothing compiled under a dispatch mode); `decodes`:
    every instance, so their caches stay alive."""

    def __init__(self, base, ops=True):
        self.steps, self.decodes = [], []
        spy = self

        class Recording(base):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                spy.decodes.append(self)

            def step(self, *a, **k):
                if not ops or not self.decoding:                 # (the prefill)
                    return super().step(*a, **k)
                with Ops() as recorded:
                    out = super().step(*a, **k)
                spy.steps.append(recorded.ops)
                return out
        self.cls = Recording


def expanded_kv(shapes_by_op, rows, columns):
    """The ops whose output has the shape of K or V copied to every query head, (rows, HEADS,
    columns, head_dim = 8)."""
    return [op for op, shapes in shapes_by_op if (rows, HEADS, columns, 8) in shapes
            or (rows, KV_HEADS, HEADS // KV_HEADS, columns, 8) in shapes]


def test_an_eager_decode_step_reads_the_kv_heads_as_they_are():
    """transformers' SDPA attention expands K and V to every query head (repeat_kv) whenever a mask
    is passed (5.17; 5.25 under torch.compile); the sampler's steps go through
    rollout.gqa_attention: no op of a step makes a tensor of K's or V's shape times the heads, and
    SDPA gets the cache's own (rows, KV heads, columns, 8) keys."""
    model = gqa_model()
    spy = RecordingSteps(EagerDecode)
    roll = sample(model, prompts(), **kwargs(0, max_new_tokens=12, eos_token_ids=[-1],
                                              decode=spy.cls))
    columns, rows = 6 + 12, 12                   # the longest prompt + max_new_tokens; 3 x G = 4
    assert len(spy.steps) == 11 and roll.valid_mask.all()
    for ops in spy.steps:
        assert expanded_kv(ops, rows, columns) == []
        attention = [shapes for op, shapes in ops if "scaled_dot_product" in op]
        assert len(attention) == 2                               # one per layer
    assert model.config._attn_implementation == "sdpa"          # put back after sampling


def test_each_query_head_attends_to_its_own_kv_head():
    """4 query heads over 2 KV heads: heads 0-1 read KV head 0 and heads 2-3 KV head 1
    (transformers' repeat_kv order). The sampled tokens' log-probs and entropies against one full
    forward over the same tokens (SDPA with K and V expanded, no cache): float64 models, the same
    sums in another grouping (~1e-15 relative), but the rollout STORES float32: one rounding,
    |x| 2^-24 ~ 3e-7 at |x| ~ 5, under 1e-6; query heads paired with the other KV head moved them
    by 2e-3 here."""
    from gmts.trainer.batches import completion_logprobs
    model = gqa_model(kv_heads=2)
    for decode in (EagerDecode, CompiledDecode):
        roll = sample(model, prompts(), **kwargs(0, decode=decode))
        assert roll.finished.any()
        logp, entropy = completion_logprobs(model, roll.prompt_ids, roll.completion_ids,
                                            roll.valid_mask, group_size=4, with_entropy=True)
        torch.testing.assert_close(roll.old_logp, logp.float(), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(roll.entropy, entropy.float(), rtol=1e-6, atol=1e-6)


def test_gqa_attention_is_transformers_sdpa_attention_however_called():
    """gqa_attention against transformers' sdpa_attention_forward on the same float64 inputs: one
    query token over 2 KV heads for 4 query heads (its own path), and a 3-token query (handed on as
    it is), the mask and transformers' keywords passed by position or by name. float64 sums of 6
    terms in another grouping: ~1e-16 relative, under 1e-12."""
    from types import SimpleNamespace
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from gmts.trainer.rollout import gqa_attention
    gen = torch.Generator().manual_seed(0)
    module = SimpleNamespace(num_key_value_groups=2, is_causal=True, training=False)
    for q in (1, 3):
        query = torch.randn(2, 4, q, 8, generator=gen, dtype=torch.float64)
        key = torch.randn(2, 2, 6, 8, generator=gen, dtype=torch.float64)
        value = torch.randn(2, 2, 6, 8, generator=gen, dtype=torch.float64)
        mask = torch.ones(2, 1, q, 6, dtype=torch.bool).tril(6 - q)
        mask[0, ..., 0] = False                                  # a left-padded row
        want, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.3)
        for got, none in (gqa_attention(module, query, key, value, mask, dropout=0.0, scaling=0.3),
                          gqa_attention(module, query, key, value, attention_mask=mask,
                                        scaling=0.3, dropout=0.0)):
            assert none is None and got.shape == want.shape == (2, q, 4, 8)
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_the_compiled_decode_step_reads_the_kv_heads_as_they_are(recording_graphs):
    """The same in the graph torch.compile captures (each node's shape as dynamo traced it)."""
    model = gqa_model()
    kw = kwargs(0, max_new_tokens=12, eos_token_ids=[-1], decode=CompiledDecode)
    roll = sample(model, prompts(), **kw)
    assert roll.valid_mask.all() and len(recording_graphs) == 1
    columns = compiled_decode.MIN_PROMPT_WIDTH + 12
    nodes = [(str(node.target), [tuple(node.meta["example_value"].shape)])
             for node in recording_graphs[0].graph.nodes
             if torch.is_tensor(node.meta.get("example_value"))]
    assert any((12, KV_HEADS, columns, 8) in shapes for _, shapes in nodes)     # the cache itself
    assert expanded_kv(nodes, 12, columns) == []
    # the same samples as the eager sampler
    eager = sample(model, prompts(), **{**kw, "decode": EagerDecode,
                                         "generator": torch.Generator().manual_seed(0)})
    assert torch.equal(roll.completion_ids, eager.completion_ids)


def test_the_compiled_graph_holds_the_sampler(recording_graphs):
    """The decode step's graph ends in the token draw: the temperature, log-softmax, the float64
    CDF and its search, the entropy: no full-vocabulary pass runs outside it."""
    model = gqa_model()
    sample(model, prompts(), **kwargs(0, max_new_tokens=4, temperature=0.7,
                                      decode=CompiledDecode))
    (graph,) = recording_graphs
    targets = " ".join(str(node.target) for node in graph.graph.nodes)
    for op in ("log_softmax", "cumsum", "searchsorted", "gather", "truediv"):
        assert op in targets, op
    outputs = next(node for node in graph.graph.nodes if node.op == "output").args[0]
    shapes = [tuple(node.meta["example_value"].shape) for node in outputs]
    assert shapes == [(12,), (12,), (12,)]          # token, log π, entropy: no (12, V) logits


def test_compiled_decode_keeps_its_buffers_and_graphs_across_rollouts(recording_graphs):
    """Each bucket's KV cache and position are allocated once for the model: every later rollout
    of that bucket writes the same buffers (CUDA graphs replay instead of recording again) and
    compiles nothing more; another prompt width is another bucket, and coming back reuses the
    first. The earlier rollouts' decodes are kept alive, so a new allocation could not take their
    addresses."""
    model = gqa_model()
    spy = RecordingSteps(CompiledDecode, ops=False)
    short, long = prompts(), [[3] * 20, [4, 5]]            # prompt widths 16 and 32
    rolls = [sample(model, batch, **kwargs(seed, max_new_tokens=8, decode=spy.cls))
             for seed, batch in enumerate([short, short, long, short, long])]
    address = [(d.layers[0].keys.data_ptr(), d.layers[-1].values.data_ptr(),
                d.position.data_ptr()) for d in spy.decodes]
    assert address[0] == address[1] == address[3] and address[2] == address[4]
    assert address[0] != address[2]
    assert len(recording_graphs) == 2                      # one per bucket, over five rollouts
    for roll, batch, seed in zip(rolls, [short, short, long, short, long], range(5)):
        eager = sample(model, batch, **kwargs(seed, max_new_tokens=8))
        assert torch.equal(roll.completion_ids, eager.completion_ids)


def test_a_reused_cache_reads_nothing_of_the_last_rollout():
    """A bucket's buffers are zeroed before each rollout: a NaN left by an earlier one (which a
    masked column would still turn into NaN) changes nothing."""
    torch._dynamo.reset()
    model = gqa_model()
    spy = RecordingSteps(CompiledDecode, ops=False)
    compiled_decode.BACKEND, backend = "eager", compiled_decode.BACKEND
    try:
        first = sample(model, prompts(), **kwargs(0, max_new_tokens=8, decode=spy.cls))
        for layer in spy.decodes[0].layers:
            layer.keys.fill_(float("nan")), layer.values.fill_(float("nan"))
        again = sample(model, prompts(), **kwargs(0, max_new_tokens=8, decode=spy.cls))
    finally:
        compiled_decode.BACKEND = backend
        torch._dynamo.reset()
    assert torch.equal(first.completion_ids, again.completion_ids)
    assert torch.equal(first.old_logp, again.old_logp) and not again.old_logp.isnan().any()


def op_counts(run, new_tokens):
    with Ops() as ops:
        run(new_tokens)
    return collections.Counter(op for op, _ in ops.ops)


@pytest.mark.parametrize("layers", [1, 4])
def test_an_eager_decode_step_runs_no_more_ops_than_generate(layers):
    """Each aten op is at least one dispatch and, on a GPU, a kernel launch: an eager decode step
    is launch-bound, so it must not run more of them than `model.generate`'s (which does less: no
    log-probs, no entropies). Per decode step = (a rollout of 24 tokens - one of 8) / 16, the same
    8 rows (2 prompts x 4) on both sides, sampling at τ = 1 without top-k / top-p, no
    end-of-sequence (every row decodes every step)."""
    from transformers import GenerationConfig
    model = tiny_qwen2(layers=layers, seed=4)
    batch = [[3, 9, 11, 4], [12, 13]]

    def ours(new_tokens):
        sample(model, batch, **kwargs(0, max_new_tokens=new_tokens, eos_token_ids=[-1]))

    def generate(new_tokens):
        ids = torch.tensor([[0, 0, 3, 9, 11, 4], [0, 0, 0, 0, 12, 13]]).repeat_interleave(4, 0)
        config = GenerationConfig(do_sample=True, top_k=0, top_p=1.0, temperature=1.0,
                                  max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                  eos_token_id=None, pad_token_id=0)
        out = model.generate(ids, attention_mask=(ids != 0).long(), generation_config=config)
        assert out.shape == (8, 6 + new_tokens)
    per_step = {}
    for name, run in (("ours", ours), ("generate", generate)):
        counts = op_counts(run, 24)
        counts.subtract(op_counts(run, 8))
        per_step[name] = sum(counts.values()) / 16
    assert per_step["ours"] <= per_step["generate"], per_step


@pytest.fixture
def recording_graphs(monkeypatch):
    """torch.compile with a backend that keeps each captured graph (dynamo's FX graph, its nodes'
    example values) and runs it as it is (no code generation)."""
    graphs = []
    real_compile = torch.compile

    def backend(gm, example_inputs):
        graphs.append(gm)
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
