"""The sampler's preallocated KV cache (gmts/trainer/rollout.py, EagerDecode) against the sampler
it replaced.

`reference_sample` below is the previous sampler verbatim (transformers' DynamicCache, grown by
concatenation, every finished row dropped at once with batch_select_indices), with its own copies
of the uniform table and the end-of-sequence mask. It lives HERE, not in gmts: the package has one
sampler. The new one must draw the same samples for the same seed (the same uniforms: each prompt's
from its seed, rollout.prompt_seeds), with log-probs and entropies equal to float error, on Qwen2
and Llama (SmolLM2's architecture) and through LoRA (peft).

Tolerances: the models run in float64. The two samplers compute the same logits from the same keys
and values, in a different memory layout (a strided view of a preallocated buffer vs a freshly
concatenated tensor) and with different batch sizes at some steps (finished rows dropped at once vs
at halvings), so SDPA and the matmuls may reduce in a different order: float64 rounding, ~1e-15
relative per operation, a few hundred operations deep, then log-softmax over 64 logits. 1e-9 leaves
room for that; a wrong position, column or mask moves log-probs by O(0.1) on these random models."""
import inspect

import pytest
import torch

from gmts.trainer import rollout
from gmts.trainer.rollout import (EagerDecode, filter_logits, kv_cache_bytes, left_pad, positions,
                                  sample)
from conftest import sampler_kwargs as kwargs
from conftest import sampler_prompts as prompts
from conftest import tiny_qwen2

TOL = {"rtol": 1e-9, "atol": 1e-9}


@torch.no_grad()
def reference_sample(model, prompts, *, group_size, max_new_tokens, eos_token_ids, pad_token_id,
                     temperature=1.0, top_k=0, top_p=1.0, generator=None, share_prefix=True,
                     drop_finished=True):
    """The previous gmts sampler (main before issue #23), DynamicCache and all. Returns (tokens,
    valid, logp, entropy, finished). Its random numbers: the sampler's own table, uniform[row, t]
    (per prompt seeds)."""
    device = next(model.parameters()).device
    seeds = rollout.prompt_seeds(len(prompts), generator)
    uniform = torch.empty((len(prompts), group_size, max_new_tokens), dtype=torch.float64)
    for prompt, seed in enumerate(seeds):
        uniform[prompt].uniform_(generator=torch.Generator().manual_seed(seed))
    uniform = uniform.flatten(0, 1)
    eos = torch.tensor(sorted(set(eos_token_ids)), device=device)
    n_rows = len(prompts) * group_size
    greedy = temperature == 0
    ids, mask = left_pad(prompts if share_prefix
                         else [p for p in prompts for _ in range(group_size)],
                         pad_token_id, device)
    forward = inspect.signature(model.get_decoder().forward).parameters
    cache_kw = "cache" if "cache" in forward else "past_key_values"
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask), use_cache=True,
                logits_to_keep=1)
    cache, logits = getattr(out, cache_kw), out.logits[:, -1]
    if share_prefix and group_size > 1:
        cache.batch_repeat_interleave(group_size)
        logits = logits.repeat_interleave(group_size, dim=0)
        mask = mask.repeat_interleave(group_size, dim=0)
    tokens = torch.full((n_rows, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    logp = torch.zeros((n_rows, max_new_tokens), dtype=torch.float32, device=device)
    entropy = torch.zeros((n_rows, max_new_tokens), dtype=torch.float32, device=device)
    finished = torch.zeros(n_rows, dtype=torch.bool, device=device)
    live = torch.arange(n_rows, device=device)
    for t in range(max_new_tokens):
        scaled = logits.float() / (temperature if not greedy else 1.0)
        log_probs = torch.log_softmax(scaled, dim=-1)
        if greedy:
            next_tok = log_probs.argmax(dim=-1)
        else:
            probs = torch.softmax(filter_logits(scaled, top_k, top_p), dim=-1).double()
            cdf = probs.cumsum(dim=-1)
            u = (uniform[live, t] * cdf[:, -1]).unsqueeze(1)
            next_tok = torch.searchsorted(cdf, u, right=True).squeeze(1).clamp(
                max=probs.shape[-1] - 1)
        step_logp = log_probs.gather(1, next_tok[:, None]).squeeze(1)
        step_entropy = -(log_probs.exp() * log_probs).sum(dim=-1)
        rows_live = ~finished[live] if not drop_finished else torch.ones_like(
            live, dtype=torch.bool)
        tokens[live[rows_live], t] = next_tok[rows_live]
        logp[live[rows_live], t] = step_logp[rows_live]
        entropy[live[rows_live], t] = step_entropy[rows_live]
        finished[live] |= torch.isin(next_tok, eos) & rows_live
        if finished.all() or t == max_new_tokens - 1:
            break
        keep = ~finished[live]
        if drop_finished and not keep.all():
            idx = keep.nonzero().squeeze(1)
            cache.batch_select_indices(idx)
            live, next_tok, mask = live[idx], next_tok[idx], mask[idx]
        mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype, device=device)],
                         dim=1)
        out = model(input_ids=next_tok[:, None], attention_mask=mask,
                    position_ids=positions(mask)[:, -1:], use_cache=True, **{cache_kw: cache})
        cache, logits = getattr(out, cache_kw), out.logits[:, -1]
    is_eos = torch.isin(tokens, eos)                        # up to and including the first eos
    first_eos = torch.where(is_eos.any(dim=1), is_eos.float().argmax(dim=1), max_new_tokens)
    valid = torch.arange(max_new_tokens, device=device)[None, :] <= first_eos[:, None]
    tokens = tokens.masked_fill(~valid, pad_token_id)
    return tokens, valid, logp * valid, entropy * valid, finished


def tiny_llama(vocab_size=64, hidden=16, layers=2, dtype=torch.float64, seed=0):
    """A tiny random LlamaForCausalLM (SmolLM2's architecture: tied embeddings, GQA) built from a
    config."""
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, tie_word_embeddings=True)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).to(dtype).eval()


def lora_qwen2(seed=4):
    """A tiny Qwen2 with LoRA adapters whose B is non-zero (peft starts B at 0: the adapters would
    change nothing)."""
    pytest.importorskip("peft")
    from gmts.trainer.models import add_lora
    model = add_lora(tiny_qwen2(dtype=torch.float64, seed=seed), rank=2, seed=0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(
                    torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name)),
                                dtype=p.dtype))
    return model.eval()


def assert_same(new, ref):
    tokens, valid, logp, entropy, finished = ref
    assert torch.equal(new.completion_ids, tokens)
    assert torch.equal(new.valid_mask, valid)
    assert torch.equal(new.finished, finished)
    torch.testing.assert_close(new.old_logp, logp, **TOL)
    torch.testing.assert_close(new.entropy, entropy, **TOL)


MODELS = {"qwen2": lambda: tiny_qwen2(dtype=torch.float64, seed=4),
          "llama": lambda: tiny_llama(seed=3), "qwen2-lora": lora_qwen2}


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("share_prefix,drop_finished",
                         [(True, True), (False, False), (False, True)])
def test_same_samples_as_the_previous_sampler(name, share_prefix, drop_finished):
    model = MODELS[name]()
    stops = []
    for seed in range(3):
        new = sample(model, prompts(),
                     **kwargs(seed, share_prefix=share_prefix, drop_finished=drop_finished))
        ref = reference_sample(model, prompts(),
                               **kwargs(seed, share_prefix=share_prefix,
                                        drop_finished=drop_finished))
        assert_same(new, ref)
        stops.append(int(new.finished.sum()))
    # some rows stopped early and some ran on: both paths exercised
    assert any(0 < s < 12 for s in stops), stops


@pytest.mark.parametrize("name", ["qwen2", "llama"])
def test_greedy_and_filtered_sampling_match_the_previous_sampler(name):
    model = MODELS[name]()
    assert_same(sample(model, prompts(), **kwargs(0, temperature=0.0)),
                reference_sample(model, prompts(), **kwargs(0, temperature=0.0)))
    for extra in ({"top_k": 5}, {"top_p": 0.8}, {"temperature": 0.7}):
        assert_same(sample(model, prompts(), **kwargs(1, **extra)),
                    reference_sample(model, prompts(), **kwargs(1, **extra)))


class Spy:
    """A decode class (`cls`, for sample's `decode`) that records every cache the sampler builds,
    and per layer-0 write the batch size and the buffer's address."""

    def __init__(self):
        self.caches, self.writes = [], []
        spy = self

        class Recording(EagerDecode):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                spy.caches.append(self)
                first = self.layers[0]
                update = first.update

                def recorded(k, v, *args, **kw):
                    out = update(k, v, *args, **kw)
                    spy.writes.append(
                        (k.shape[0], k.shape[2], first.keys.data_ptr(), first.values.data_ptr()))
                    return out
                first.update = recorded
        self.cls = Recording


def test_cache_is_written_in_place_and_live_rows_compacted_at_halvings():
    spy = Spy()
    model = tiny_qwen2(dtype=torch.float64, seed=4)
    roll = sample(model, prompts(), **kwargs(0, group_size=8, max_new_tokens=24,
                                             eos_token_ids=list(range(1, 9)), decode=spy.cls))
    (cache,) = spy.caches
    # the prefill: one row per prompt, the longest prompt's width
    assert spy.writes[0][:2] == (3, 6)
    # one pair of buffers for the whole rollout: no reallocation
    assert len({w[2:] for w in spy.writes}) == 1
    # decode steps: the batch's rows at each step
    n_batch = [w[0] for w in spy.writes[1:]]
    assert n_batch[0] == 24 and n_batch == sorted(n_batch, reverse=True)
    # Rows finish at step t when their token t is an eos; the batch shrinks at most once per halving
    # of the live rows. The rule, replayed from the result: after token t the rows still answering
    # are those not finished by then (row i finishes at token lengths[i] - 1); every CHECK_EVERY
    # tokens (the host's look at the rows) the batch drops to them once they are at most half of it.
    expected, n = [], 24
    for t in range(len(n_batch)):
        answering = int((~roll.finished | (roll.lengths > t + 1)).sum())
        n = answering if answering <= n // 2 and (t + 1) % rollout.CHECK_EVERY == 0 else n
        expected.append(n)
    assert n_batch == expected
    assert len(set(n_batch)) > 2                         # it did compact, more than once
    bytes_allocated = sum(
        b.numel() * b.element_size() for layer in cache.layers for b in (layer.keys, layer.values))
    assert bytes_allocated == kv_cache_bytes(24, 6 + 24, model.config, torch.float64)


def test_kv_cache_bytes_for_a_real_config():
    """Qwen2.5-1.5B: 28 layers, 2 KV heads of 128: 28 x 2 x 2 x 128 x 2 bytes = 28,672 bytes per row
    and column."""
    import os

    from conftest import SHARED_DATA, shared_data_missing
    from transformers import AutoConfig
    folder = os.path.join(SHARED_DATA, "qwen2.5-configs", "Qwen2.5-1.5B-Instruct")
    if shared_data_missing("qwen2.5-configs", "Qwen2.5-1.5B-Instruct"):
        pytest.skip(shared_data_missing("qwen2.5-configs", "Qwen2.5-1.5B-Instruct"))
    config = AutoConfig.from_pretrained(folder)
    assert kv_cache_bytes(64, 1000, config, torch.bfloat16) == 64 * 1000 * 28_672
    assert kv_cache_bytes(1, 1, config, torch.float32) == 2 * 28_672


def test_memory_planner_counts_the_cache_the_sampler_allocates():
    """gmts.tools.memory's KV-cache line is exactly the bytes of the buffers `sample` allocates
    (prompt width = the planner's prompt tokens; rows = prompts per call x G; columns = prompt +
    max-new-tokens)."""
    from gmts.run.config import Config
    from gmts.tools.memory import model_shape, plan
    spy = Spy()
    model = tiny_qwen2(seed=4)                                  # float32, as train.py on CPU
    sample(model, prompts(), **kwargs(0, max_new_tokens=16, decode=spy.cls))
    allocated = sum(
        b.numel() * b.element_size() for layer in spy.caches[0].layers for b
        in (layer.keys, layer.values))
    cfg = Config(prompts_per_step=3, group_size=4, max_new_tokens=16, dtype="float32")
    planned = plan(cfg, model_shape(model.config), prompt_tokens=6, device="cpu")[0]["kv_cache"]
    # layers x (K, V) x rows x kv_heads x columns x head_dim x bytes
    assert planned == allocated == 2 * 2 * 12 * 1 * (6 + 16) * 8 * 4
