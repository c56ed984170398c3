"""Rollout (gmts/trainer/rollout.py) and the training forward (gmts/trainer/models.py) on a tiny
random Qwen2."""
import pytest
import torch

from gmts.trainer.batches import completion_logprobs
from gmts.trainer.rollout import EagerDecode, Rollout, concat_rollouts, sample
from conftest import tiny_qwen2

EOS, PAD = [5, 7], 0


def prompts():
    return [[3, 9, 11, 4], [12, 13], [20, 21, 22, 23, 24, 25]]


def run(model, seed=0, **kw):
    args = {"group_size": 4, "max_new_tokens": 12, "eos_token_ids": EOS, "pad_token_id": PAD,
                "temperature": 1.0, "generator": torch.Generator().manual_seed(seed)}
    args.update(kw)
    return sample(model, prompts(), **args)


def test_shared_prefix_and_dropped_rows_draw_the_same_samples_as_the_plain_path():
    model = tiny_qwen2(dtype=torch.float64, seed=4)
    fast = run(model, share_prefix=True, drop_finished=True)
    plain = run(model, share_prefix=False, drop_finished=False)
    assert fast.completion_ids.shape == (12, 12)
    assert torch.equal(fast.completion_ids, plain.completion_ids)
    assert torch.equal(fast.valid_mask, plain.valid_mask)
    # float64 (u ≈ 1.1e-16): the two paths group the same attention sums differently (a shared
    # prefix, fewer rows), ~n u |z| ≈ 1e-14 apart; Qwen2's RMSNorm rounds through float32 on both
    # sides alike (the same rows, the same values), so 1e-9 leaves five orders of magnitude.
    torch.testing.assert_close(fast.old_logp, plain.old_logp, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(fast.entropy, plain.entropy, rtol=1e-9, atol=1e-9)
    # some rows stopped early: the drop path was exercised
    assert fast.finished.any() and not fast.finished.all()
    other = run(model, seed=1)
    assert not torch.equal(other.completion_ids, fast.completion_ids)


def test_greedy_matches_model_generate():
    model = tiny_qwen2(seed=5)
    roll = run(model, group_size=1, temperature=0.0)
    for row, prompt in enumerate(prompts()):
        out = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=12,
                             eos_token_id=EOS, pad_token_id=PAD,
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
        expected = out[0, len(prompt):].tolist()
        got = roll.completion_ids[row][roll.valid_mask[row]].tolist()
        assert got == expected


def test_rollout_logprobs_and_entropies_match_a_full_forward():
    """The scores use rollout-time values in place of the training forward's (gmts/METHOD.md,
    "Temperature": test how close they are)."""
    model = tiny_qwen2(seed=6)
    roll = run(model)
    logp, ent = completion_logprobs(model, roll.prompt_ids, roll.completion_ids, roll.valid_mask,
                                    group_size=4, with_entropy=True, chunk_size=7)
    # float32, KV-cached one-token steps against one padded forward: other GEMM shapes and attention
    # groupings. Per layer the hidden states carry ~d u (d = 16 terms per dot product) relative
    # error, ~1e-6 after 2 layers, and log-softmax adds ~u |z|: under 1e-5
    # (tests/test_rollout_precision.py measures bigger models).
    torch.testing.assert_close(logp, roll.old_logp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, roll.entropy, rtol=1e-5, atol=1e-5)
    assert (logp[~roll.valid_mask] == 0).all()


def test_temperature_defines_the_policy():
    model = tiny_qwen2(seed=7)
    roll = run(model, temperature=0.7)
    logp, ent = completion_logprobs(model, roll.prompt_ids, roll.completion_ids, roll.valid_mask,
                                    group_size=4, temperature=0.7, with_entropy=True)
    torch.testing.assert_close(logp, roll.old_logp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, roll.entropy, rtol=1e-5, atol=1e-5)


def test_samples_follow_the_policy_distribution():
    """Inverse-CDF sampling with one uniform per row draws from softmax(z/τ): first-token
    frequencies over many rows match the model's probabilities (total variation well under the
    sampling noise bound)."""
    model = tiny_qwen2(seed=8)
    n = 6000
    roll = sample(model, [[3, 9, 11]], group_size=n, max_new_tokens=1, eos_token_ids=EOS,
                  pad_token_id=PAD, temperature=1.3, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([[3, 9, 11]])).logits[0, -1] / 1.3, dim=-1)
    counts = torch.bincount(roll.completion_ids[:, 0], minlength=probs.numel()).double()
    expected = n * probs.double()
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    dof = probs.numel() - 1                                   # mean 63, sd ~11: 120 is > 5 sd out
    assert chi2 < dof + 5 * (2 * dof) ** 0.5, chi2


def test_answers_end_at_their_first_eos_even_when_pad_is_an_eos():
    """pad_token_id 5, itself an end-of-sequence id (Qwen's tokenizer pads with <|endoftext|>): the
    same ends, lengths and `finished` as with another pad id. Reading `tokens != pad` as the mask
    would drop each answer's eos; the rows that left the batch early hold pad (= eos) after it."""
    model = tiny_qwen2(dtype=torch.float64, seed=4)
    other = run(model, max_new_tokens=24)
    roll = run(model, max_new_tokens=24, pad_token_id=5)
    assert other.finished.any() and not other.finished.all()
    assert torch.equal(roll.valid_mask, other.valid_mask)
    assert torch.equal(roll.finished, other.finished)
    for row, n in enumerate(roll.lengths.tolist()):
        tokens = roll.completion_ids[row].tolist()
        assert roll.valid_mask[row, :n].all() and not roll.valid_mask[row, n:].any()
        assert tokens[n:] == [5] * (24 - n)
        ends = [t for t in tokens[:n] if t in EOS]          # one eos, the last valid token
        assert ends == ([tokens[n - 1]] if roll.finished[row] else []), (row, tokens)


def test_rows_stop_at_eos_and_padding_is_filled():
    model = tiny_qwen2(seed=4, dtype=torch.float64)
    roll = run(model)
    for row in range(roll.completion_ids.shape[0]):
        valid = roll.valid_mask[row]
        toks = roll.completion_ids[row]
        if roll.finished[row]:
            last = int(valid.sum()) - 1
            assert int(toks[last]) in EOS and not any(int(t) in EOS for t in toks[:last])
        assert (toks[~valid] == PAD).all()


def test_bad_arguments():
    model = tiny_qwen2()
    with pytest.raises(ValueError, match="at least one token"):
        sample(model, [[1], []], group_size=2, max_new_tokens=3, eos_token_ids=EOS,
               pad_token_id=PAD)


def test_chunked_rollout_equals_one_call_when_greedy():
    model = tiny_qwen2(dtype=torch.float64, seed=9)
    kw = {"group_size": 2, "max_new_tokens": 6, "eos_token_ids": EOS, "pad_token_id": PAD,
          "temperature": 0.0}
    whole = sample(model, prompts(), **kw)
    chunked = sample(model, prompts(), prompts_per_call=1, **kw)
    assert chunked.prompt_ids == whole.prompt_ids and chunked.completion_ids.shape[0] == 6
    width = whole.completion_ids.shape[1]
    assert torch.equal(chunked.completion_ids[:, :width], whole.completion_ids)
    assert torch.equal(chunked.valid_mask[:, :width], whole.valid_mask)
    # float64, other batch shapes: ~1e-14 apart, as in the shared-prefix test above
    torch.testing.assert_close(chunked.old_logp[:, :width], whole.old_logp, rtol=1e-9, atol=1e-9)


def test_concat_rollouts_pads_each_part_to_the_longest():
    model = tiny_qwen2(seed=9)
    short = run(model, max_new_tokens=3)
    long = run(model, max_new_tokens=7, seed=1)
    both = concat_rollouts([short, long], PAD)
    assert (both.completion_ids.shape == (24, 7) and both.prompt_ids == short.prompt_ids
            + long.prompt_ids)
    assert torch.equal(both.completion_ids[12:], long.completion_ids)
    assert torch.equal(both.completion_ids[:12, :3], short.completion_ids)
    assert (both.completion_ids[:12, 3:] == PAD).all() and not both.valid_mask[:12, 3:].any()
    assert (both.old_logp[:12, 3:] == 0).all() and (both.entropy[:12, 3:] == 0).all()
    assert torch.equal(both.lengths, torch.cat([short.lengths, long.lengths]))
    with pytest.raises(ValueError, match="group_size"):
        concat_rollouts([short, Rollout(**{**vars(long), "group_size": 2})], PAD)


class _KwargsOnlyWrapper(torch.nn.Module):
    """What a LoRA (peft) wrapper looks like to inspect: forward(**kwargs), naming no cache
    keyword, and the wrapped model's get_decoder handed on. Records the keywords it was called
    with."""

    def __init__(self, model):
        super().__init__()
        self.module = model
        self.seen = set()

    def forward(self, **kwargs):
        self.seen |= set(kwargs)
        return self.module(**kwargs)

    def get_decoder(self):
        return self.module.get_decoder()


def test_kv_cache_keyword_is_the_models_own_name_even_through_a_wrapper():
    """transformers >= 5.24 names the KV cache `cache` and keeps `past_key_values` only as a
    deprecated alias (removed within the range requirements.txt allows); a wrapper whose forward
    takes **kwargs must not get the alias."""
    import inspect
    model = tiny_qwen2(dtype=torch.float64, seed=4)
    own = [k for k in ("cache", "past_key_values")
           if k in inspect.signature(model.forward).parameters]
    assert own, "the model's forward names no KV cache keyword"
    # 'cache' whenever the model takes it (transformers >= 5.24)
    assert EagerDecode(model, 1, 1, 1).keyword == own[0]
    wrapped = _KwargsOnlyWrapper(model)
    assert EagerDecode(wrapped, 1, 1, 1).keyword == own[0]
    roll = run(wrapped)
    assert own[0] in wrapped.seen and not ({"cache", "past_key_values"} - {own[0]}) & wrapped.seen
    assert torch.equal(roll.completion_ids, run(model).completion_ids)


def test_cache_layers_answer_the_capacity_query_of_every_supported_transformers():
    """transformers asks a cache layer its capacity (its columns: prompt width + max_new_tokens) as
    get_max_length (>= 5.13) or get_max_cache_shape (5.4 to 5.12, abstract there: a layer class
    without it cannot be instantiated); the eager and the compiled decode's layers answer both."""
    from gmts.trainer.compiled_decode import CompiledDecode
    model = tiny_qwen2(seed=4)
    for decode in (EagerDecode, CompiledDecode):
        assert not decode.layer.__abstractmethods__, decode.layer.__abstractmethods__
        cache = decode(model, 4, 3, 5)
        answers = {(layer.get_max_length(), layer.get_max_cache_shape()) for layer in cache.layers}
        assert len(cache.layers) == 2 and answers == {(cache.columns, cache.columns)}
    assert EagerDecode(model, 4, 3, 5).columns == 3 + 5


def test_kv_cache_keyword_through_a_lora_model():
    pytest.importorskip("peft")
    from gmts.trainer.models import add_lora
    model = tiny_qwen2(seed=4)
    lora = add_lora(model, rank=2, seed=0)
    assert EagerDecode(lora, 1, 1, 1).keyword == EagerDecode(model, 1, 1, 1).keyword


def test_answers_do_not_depend_on_how_the_prompts_split_into_generation_calls():
    """--rollout-batch-size changes how a step samples, never what: each prompt's answers draw from
    its own seed (taken from the step's generator once, for all prompts), whatever call and batch
    row they sample in."""
    model = tiny_qwen2(dtype=torch.float64, seed=4)
    many = [[3, 9, 11, 4], [12, 13], [20, 21, 22, 23, 24, 25], [30, 31, 32], [8]]
    kw = {"group_size": 4, "max_new_tokens": 12, "eos_token_ids": EOS, "pad_token_id": PAD,
          "temperature": 1.0}
    rolls = [sample(model, many, prompts_per_call=k,
                            generator=torch.Generator().manual_seed(3), **kw) for k in (0, 1, 2, 3)]
    whole = rolls[0]
    assert whole.finished.any() and not whole.finished.all()      # rows of different lengths
    for roll in rolls[1:]:
        width = whole.completion_ids.shape[1]
        assert torch.equal(roll.completion_ids[:, :width], whole.completion_ids)
        assert torch.equal(roll.valid_mask[:, :width], whole.valid_mask)
        assert not roll.valid_mask[:, width:].any()
        # float64, other batch shapes and paddings: ~1e-14 apart (as in the shared-prefix test)
        torch.testing.assert_close(roll.old_logp[:, :width], whole.old_logp, rtol=1e-9, atol=1e-9)
    other = sample(model, many, generator=torch.Generator().manual_seed(4), **kw)
    assert not torch.equal(other.completion_ids, whole.completion_ids)


def test_the_decode_loop_syncs_with_the_host_only_every_check_every_tokens():
    """A device-to-host read (a scalar read: .item(), int(), bool(); nonzero, also inside a
    boolean-mask write) serialises a GPU and breaks CUDA graphs. Counted at the dispatcher over a
    whole rollout whose rows never end (no end-of-sequence id): at most one look per CHECK_EVERY
    tokens (each a sum read as an int), plus the prefill's."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from gmts.trainer.rollout import CHECK_EVERY
    syncing = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.nonzero.default,
               torch.ops.aten.is_nonzero.default, torch.ops.aten.item.default}

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += func in syncing
            return func(*args, **(kwargs or {}))
    model = tiny_qwen2(seed=4)
    kw = {"group_size": 4, "eos_token_ids": [-1], "pad_token_id": PAD,
              "generator": torch.Generator().manual_seed(0)}
    counts = []
    for new_tokens in (2, 48):       # 2: the prefill and one decode step (t = 1: the last token)
        Count.n = 0
        with Count():
            roll = sample(model, prompts(), max_new_tokens=new_tokens, **kw)
        counts.append(Count.n)
    before_decoding = counts[0]
    Count.n = counts[1]
    assert not roll.finished.any()
    assert Count.n <= before_decoding + 48 // CHECK_EVERY, counts
