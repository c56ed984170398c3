"""How far the rollout's log-probs and entropies (KV cache, one token at a time) are from a full
forward of the same answers, in float32 and in bfloat16. train.py uses the rollout's values as the
scores until θ first moves, and as log π_old afterwards (gmts/METHOD.md, "Where E and ω come from"),
so this gap is the error in those scores and in r.

The bound: log-softmax moves by at most 2·max_k |Δz_k| when the logits move by Δz. In bfloat16 (8
significant bits) rounding a logit z alone moves it by up to 2^-8·|z|, and the hidden state feeding
the head carries a few such roundings from each layer, computed in a different order by the cached
and the full forward. So we assert |Δ log π| <= 2 · 4 · 2^-8 · max|z| (and the mean four times
tighter): proportional to how confident the model is, which is what the measurements show. In
float32 the same argument gives ~1e-6 · max|z|; we assert 1e-4.
"""
import pytest
import torch

from conftest import tiny_qwen2
from gmts.trainer.batches import completion_logprobs
from gmts.trainer.rollout import sample

BF16_EPS = 2.0 ** -8


def gaps(dtype, head_scale):
    model = tiny_qwen2(vocab_size=512, hidden=64, layers=4, seed=6)
    with torch.no_grad():
        model.lm_head.weight.mul_(head_scale)            # larger logits: a more confident model
    model = model.to(dtype)
    prompts = [[3 + i for i in range(5 + 3 * q)] for q in range(4)]
    roll = sample(model, prompts, group_size=4, max_new_tokens=24, eos_token_ids=[5],
                  pad_token_id=0, temperature=1.0, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logp, ent = completion_logprobs(model, roll.prompt_ids, roll.completion_ids,
                                        roll.valid_mask, group_size=4, with_entropy=True)
        ids = torch.cat([torch.tensor(prompts[0])[None], roll.completion_ids[:1]], dim=1)
        max_logit = model(input_ids=ids).logits.float().abs().max().item()
    v = roll.valid_mask
    return (logp - roll.old_logp)[v].abs(), (ent - roll.entropy)[v].abs(), max_logit


@pytest.mark.parametrize("head_scale", [1.0, 8.0, 30.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rollout_values_against_a_full_forward(dtype, head_scale):
    torch.set_num_threads(1)
    d_logp, d_ent, max_logit = gaps(dtype, head_scale)
    print(f"\n{dtype} head x{head_scale:g} (max |z| {max_logit:.1f}): |Δ log π| max "
          f"{d_logp.max():.2e} mean {d_logp.mean():.2e}; |Δ E| max {d_ent.max():.2e} mean "
          f"{d_ent.mean():.2e}")
    if dtype == torch.float32:
        # float32: 4 layers of 64-term dot products, ~4 · 64 u ≈ 1.5e-5 relative on the hidden
        # states at worst, and logits up to |z| ≈ 30 · (a few) make that ≲ 1e-4 absolute in log π
        # and E
        assert d_logp.max() < 1e-4 and d_ent.max() < 1e-4
    else:
        bound = 2 * 4 * BF16_EPS * max_logit
        assert d_logp.max() <= bound and d_ent.max() <= bound
        assert d_logp.mean() <= bound / 4 and d_ent.mean() <= bound / 4
        # bf16 really differs: the test measures something
        assert d_logp.max() > 0
