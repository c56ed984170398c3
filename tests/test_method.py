"""The method core (gmts/METHOD.md) pinned down: ω identity, Proposition 3.1, selection,
micro-batching, bad input."""
import itertools
import math

import pytest
import torch

import gmts
from conftest import tiny_qwen2

EPS_LOW, EPS_HIGH, BETA = 0.2, 0.28, 0.05


def sampled_logp(model, ids):
    """log π_θ(o_t | o_<t) for t >= 1, (N, T-1), with the graph."""
    logits = model(input_ids=ids).logits[:, :-1]
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def flat_grad(output, params):
    grads = torch.autograd.grad(output, params, retain_graph=True, allow_unused=True)
    return torch.cat(
        [(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params)])


# 1. The ω identity
#    -----------------------------------------------------------------------------------------------

def test_omega_identity_matches_autograd_on_every_branch():
    model = tiny_qwen2(dtype=torch.float64, seed=1)
    params = [p for p in model.parameters() if p.requires_grad]
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 64, (3, 9), generator=gen)
    logp = sampled_logp(model, ids)                                  # (3, 8)
    advantages = torch.tensor([1.3, -0.7, 0.0], dtype=torch.float64)
    # Target ratios r = π_θ/π_old per column: clipped high, clipped low, inside, exactly 1.
    r_target = torch.tensor([1.6, 0.5, 1.1, 0.9, 1.0, 1.35, 0.75, 1.05],
                            dtype=torch.float64).expand(3, 8)
    old_logp = logp.detach() - torch.log(r_target)
    ref_logp = logp.detach() + 0.3 * torch.randn(logp.shape, generator=gen, dtype=torch.float64)
    omega = gmts.token_omega(logp.detach(), old_logp, advantages, eps_low=EPS_LOW,
                             eps_high=EPS_HIGH, beta=BETA, ref_logp=ref_logp)
    surrogate, kl = gmts.token_objective(logp, old_logp, advantages, eps_low=EPS_LOW,
                                         eps_high=EPS_HIGH, beta=BETA, ref_logp=ref_logp)
    objective = surrogate - BETA * kl                                  # ℓ_it, (3, 8)

    branches = set()
    checked = 0
    for i in range(3):
        for t in range(8):
            a, r = advantages[i].item(), r_target[i, t].item()
            clipped = (a > 0 and r > 1 + EPS_HIGH) or (a < 0 and r < 1 - EPS_LOW)
            branches.add((math.copysign(1, a) if a else 0, "clipped" if clipped else "active"))
            g_obj = flat_grad(objective[i, t], params)
            g_logp = flat_grad(logp[i, t], params)
            expected = omega[i, t] * g_logp
            rel = (g_obj - expected).norm() / expected.norm().clamp(min=1e-300)
            # float64 model, but Qwen2's RMSNorm computes in float32 inside it: two backward passes
            # of different graphs (ℓ vs log π) round its float32 part differently, ~d u32 = 16 ·
            # 6e-8 ≈ 1e-6 relative at most
            assert rel < 1e-6, (i, t, a, r, rel.item())
            if clipped:  # the clip kills the policy part: only the KL part of ω is left
                ref_over_pi = torch.exp(ref_logp[i, t] - logp[i, t]).item()
                assert omega[i, t].item() == pytest.approx(BETA * ref_over_pi - BETA, rel=1e-12)
            checked += 1
    assert checked == 24
    assert {(1, "clipped"), (1, "active"), (-1, "clipped"), (-1, "active"),
            (0, "active")} <= branches


def test_omega_on_policy_is_the_advantage():
    logp = torch.randn(4, 6)
    adv = torch.tensor([1.0, -2.0, 0.5, 0.0])
    omega = gmts.token_omega(logp, logp.clone(), adv)
    torch.testing.assert_close(omega, adv[:, None].expand(4, 6))
    per_token = adv[:, None].expand(4, 6).clone()
    torch.testing.assert_close(gmts.token_omega(logp, logp, per_token), omega)


def test_an_advantage_per_answer_is_one_per_token_repeated_bit_for_bit():
    """grpo.py reads advantages (N,) as (N, 1), broadcast over each answer's tokens: the clip, ω,
    ℓ's parts, the loss and its gradient equal, bit for bit, those of the (N, T) tensor repeating
    A_i along row i (the same products, element by element, and the same sums)."""
    from gmts.method import grpo
    gen = torch.Generator().manual_seed(3)
    logp = -torch.rand(4, 6, generator=gen, dtype=torch.float64)
    old = logp + 0.4 * torch.randn(4, 6, generator=gen, dtype=torch.float64)      # some clipped
    ref = logp + 0.3 * torch.randn(4, 6, generator=gen, dtype=torch.float64)
    adv = torch.tensor([1.5, -0.5, 0.0, 2.0])
    per_token = adv[:, None].expand(4, 6).contiguous()                               # (N, T)
    kw = {"eps_low": EPS_LOW, "eps_high": EPS_HIGH, "beta": BETA, "ref_logp": ref}
    r = torch.exp(logp - old)
    clipped = grpo.clip_active(r, adv, EPS_LOW, EPS_HIGH)
    assert clipped.any() and not clipped.all()
    assert torch.equal(clipped, grpo.clip_active(r, per_token, EPS_LOW, EPS_HIGH))
    assert torch.equal(grpo.token_omega(logp, old, adv, **kw),
                       grpo.token_omega(logp, old, per_token, **kw))
    for a, b in zip(grpo.token_objective(logp, old, adv, **kw),
                    grpo.token_objective(logp, old, per_token, **kw)):
        assert torch.equal(a, b)
    valid = torch.rand(4, 6, generator=gen) > 0.2
    weights = grpo.loss_weights(valid, valid)
    losses, grads = [], []
    for advantages in (adv, per_token):
        lp = logp.clone().requires_grad_(True)
        loss = grpo.policy_loss(lp, old, advantages, weights, **kw)
        losses.append(loss.detach())
        grads.append(torch.autograd.grad(loss, lp)[0])
    assert torch.equal(losses[0], losses[1]) and torch.equal(grads[0], grads[1])


# 2. Proposition 3.1
#    -----------------------------------------------------------------------------------------------

def test_proposition_3_1_gradient_norm_of_log_prob():
    gen = torch.Generator().manual_seed(3)
    for _ in range(20):
        z = torch.randn(50, generator=gen, dtype=torch.float64).mul(3).requires_grad_()
        i = int(torch.randint(0, 50, (1,), generator=gen))
        p = torch.softmax(z, dim=0)
        (g,) = torch.autograd.grad(torch.log_softmax(z, dim=0)[i], z)
        p = p.detach()
        closed_form = torch.sqrt((1 - p[i]) ** 2 + (p.square().sum() - p[i] ** 2))
        assert g.norm().item() == pytest.approx(closed_form.item(), rel=1e-12)


def test_proposition_3_1_log_ratio_tends_to_one():
    """log G / log E -> 1 as ε = 1 - p_i -> 0 (computed from logits so that tiny ε stays
    representable)."""
    rest = torch.randn(30, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    gaps = []
    for margin in (5.0, 20.0, 60.0, 200.0):
        z = torch.cat([torch.tensor([margin], dtype=torch.float64), rest])
        logp = torch.log_softmax(z, dim=0)
        p_rest = logp[1:].exp()
        # 1 - p_i without cancellation
        eps = p_rest.sum()
        log_g = 0.5 * torch.log(eps ** 2 + p_rest.square().sum())
        entropy = -(logp[1:].exp() * logp[1:]).sum() - torch.log1p(-eps) * (1 - eps)
        gaps.append(abs(log_g / torch.log(entropy) - 1).item())
    assert all(a > b for a, b in itertools.pairwise(gaps)), gaps
    assert gaps[-1] < 0.05, gaps


# 3. Selection
#    -----------------------------------------------------------------------------------------------

def random_batch(gen, n, t):
    lengths = torch.randint(0, t + 1, (n,), generator=gen)
    valid = torch.arange(t)[None, :] < lengths[:, None]
    scores = torch.rand(n, t, generator=gen)
    return scores, valid


def test_selects_exactly_ceil_ratio_n_and_never_padding():
    gen = torch.Generator().manual_seed(5)
    for trial in range(200):
        n, t = int(torch.randint(1, 9, (1,), generator=gen)), int(
            torch.randint(1, 40, (1,), generator=gen))
        scores, valid = random_batch(gen, n, t)
        if valid.sum() == 0:
            continue
        ratio = [0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 0.123][trial % 8]
        for bottom in (False, True):
            mask = gmts.select_tokens(scores, valid, ratio, bottom=bottom)
            n_valid = int(valid.sum())
            assert int(mask.sum()) == math.ceil(round(ratio * n_valid, 9))
            assert not (mask & ~valid).any()
            chosen, rest = scores[mask], scores[valid & ~mask]
            if rest.numel():
                assert (chosen.min() >= rest.max()) if not bottom else (chosen.max() <= rest.min())


def test_ratio_decimal_is_exact():
    assert gmts.num_to_select(0.3, 10) == 3          # float 0.3 * 10 = 3.0000000000000004
    assert gmts.num_to_select(0.2, 5) == 1
    assert gmts.num_to_select(0.2, 6) == 2
    assert gmts.num_to_select(1.0, 7) == 7


def test_batch_scope_is_not_per_row():
    # Row 0 holds all the high scores: a batch-wide top-50% takes all of row 0 and none of row 1,
    # a per-row top-50% would take half of each.
    scores = torch.tensor([[9.0, 8.0, 7.0, 6.0], [1.0, 2.0, 3.0, 4.0]])
    valid = torch.ones(2, 4, dtype=torch.bool)
    mask = gmts.select_tokens(scores, valid, 0.5)
    assert mask[0].all() and not mask[1].any()
    group_mask = gmts.select_tokens(scores, valid, 0.5, scope="group",
                                    group_ids=torch.tensor([0, 1]))
    assert group_mask.sum(1).tolist() == [2, 2]
    assert group_mask[0].tolist() == [True, True, False, False]
    assert group_mask[1].tolist() == [False, False, True, True]


def test_group_scope_counts_per_group():
    gen = torch.Generator().manual_seed(6)
    scores, valid = random_batch(gen, 12, 17)
    valid[:, 0] = True
    groups = torch.arange(12) // 4
    mask = gmts.select_tokens(scores, valid, 0.2, scope="group", group_ids=groups)
    for g in range(3):
        rows = groups == g
        assert int(mask[rows].sum()) == math.ceil(round(0.2 * int(valid[rows].sum()), 9))


def test_ties_are_deterministic_lowest_index_first():
    scores = torch.zeros(3, 5)
    valid = torch.ones(3, 5, dtype=torch.bool)
    valid[0, 0] = False
    mask = gmts.select_tokens(scores, valid, 0.25)                  # k = ceil(0.25 · 14) = 4
    assert mask.reshape(-1).nonzero().squeeze(1).tolist() == [1, 2, 3, 4]
    assert torch.equal(mask, gmts.select_tokens(scores, valid, 0.25))
    bottom = gmts.select_tokens(scores, valid, 0.25, bottom=True)
    assert torch.equal(bottom, mask)


def test_none_selects_every_valid_token():
    valid = torch.tensor([[True, True, False], [True, False, False]])
    assert gmts.token_scores("none", torch.rand(2, 3)) is None
    assert torch.equal(gmts.select_tokens(None, valid, 0.2), valid)


def batch_for_loss(model, gen, n=6, t=10, beta=0.0, off_policy=True):
    ids = torch.randint(0, 64, (n, t + 1), generator=gen)
    lengths = torch.tensor([t, 3, 7, t, 1, 5][:n])
    valid = torch.arange(t)[None, :] < lengths[:, None]
    with torch.no_grad():
        logp0 = sampled_logp(model, ids)
    old = logp0 + (0.4 * torch.randn(logp0.shape, generator=gen, dtype=logp0.dtype) if off_policy
                   else 0)
    ref = logp0 + 0.3 * torch.randn(logp0.shape, generator=gen, dtype=logp0.dtype)
    adv = torch.randn(n, generator=gen, dtype=logp0.dtype)
    return ids, valid, old, ref if beta else None, adv


@pytest.mark.parametrize("selector", ["ets", "gmts", "random"])
def test_ratio_one_equals_unselected_loss_and_gradient(selector):
    model = tiny_qwen2(dtype=torch.float64, seed=2)
    gen = torch.Generator().manual_seed(7)
    ids, valid, old, ref, adv = batch_for_loss(model, gen, beta=BETA)
    params = list(model.parameters())
    logp = sampled_logp(model, ids)
    entropy = torch.rand(valid.shape, dtype=torch.float64, generator=gen)
    omega = gmts.token_omega(logp.detach(), old, adv, beta=BETA, ref_logp=ref)
    scores = gmts.token_scores(selector, entropy, omega, generator=gen)
    for norm in ("selected", "all", "sequence"):
        kw = {"beta": BETA, "ref_logp": ref}
        selected = gmts.select_tokens(scores, valid, 1.0)
        loss_sel = gmts.policy_loss(logp, old, adv, gmts.loss_weights(valid, selected, norm), **kw)
        loss_all = gmts.policy_loss(logp, old, adv, gmts.loss_weights(valid, valid, norm), **kw)
        assert torch.equal(selected, valid)
        assert loss_sel.item() == loss_all.item()
        assert torch.equal(flat_grad(loss_sel, params), flat_grad(loss_all, params))


# 4. Micro-batching
#    -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("loss_norm", ["selected", "all", "sequence"])
@pytest.mark.parametrize("kl_all", [False, True])
def test_micro_batches_sum_to_full_batch_gradient(loss_norm, kl_all):
    model = tiny_qwen2(dtype=torch.float64, seed=3)
    params = list(model.parameters())
    gen = torch.Generator().manual_seed(8)
    ids, valid, old, ref, adv = batch_for_loss(model, gen, beta=BETA)
    with torch.no_grad():
        logp = sampled_logp(model, ids)
    omega = gmts.token_omega(logp, old, adv, beta=BETA, ref_logp=ref)
    scores = gmts.token_scores("gmts", torch.rand(valid.shape, dtype=torch.float64, generator=gen),
                               omega, weight=gmts.relative_token_weight(valid, loss_norm))
    selected = gmts.select_tokens(scores, valid, 0.3)
    weights = gmts.loss_weights(valid, selected, loss_norm)          # once, on the full batch
    kl_weights = gmts.loss_weights(valid, valid, loss_norm) if kl_all else None

    def grad_of(rows):
        lp = sampled_logp(model, ids[rows])
        loss = gmts.policy_loss(lp, old[rows], adv[rows], weights[rows], beta=BETA,
                                ref_logp=ref[rows],
                                kl_weights=None if kl_weights is None else kl_weights[rows])
        return flat_grad(loss, params)

    full = grad_of(slice(0, 6))
    for split in ([0, 3, 6], [0, 1, 6], [0, 2, 3, 4, 5, 6], [0, 4, 6]):
        summed = sum(grad_of(slice(a, b)) for a, b in itertools.pairwise(split))
        # float64: the micro-batches run the same rows through the same per-row computation (the
        # float32 RMSNorm inside Qwen2 sees identical inputs), only the sum over rows is grouped
        # differently: ~n u64 |g| ≈ 1e-15
        torch.testing.assert_close(summed, full, rtol=1e-10, atol=1e-14)


def test_loss_weights_normalisers():
    valid = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    sel = torch.tensor([[1, 0, 0, 1], [0, 1, 0, 0]], dtype=torch.bool)
    assert gmts.loss_weights(valid, sel, "selected").sum().item() == pytest.approx(1.0)
    assert gmts.loss_weights(valid, sel, "selected")[0, 0].item() == pytest.approx(1 / 3)
    assert gmts.loss_weights(valid, sel, "all")[0, 0].item() == pytest.approx(1 / 6)
    seq = gmts.loss_weights(valid, sel, "sequence")
    assert seq[0, 0].item() == pytest.approx(1 / 8) and seq[1, 1].item() == pytest.approx(1 / 4)
    seq_sel = gmts.loss_weights(valid, sel, "sequence-selected")
    assert seq_sel[0, 0].item() == pytest.approx(1 / 4) and seq_sel[1, 1].item() == pytest.approx(
        1 / 2)
    assert gmts.loss_weights(valid, sel, "all")[0, 1].item() == 0.0


def test_sequence_selected_with_a_selector_is_refused():
    with pytest.raises(ValueError, match="sequence-selected"):
        gmts.check_loss_config("gmts", 0.2, "sequence-selected")
    gmts.check_loss_config("none", 0.2, "sequence-selected")
    gmts.check_loss_config("gmts", 0.2, "sequence")
    with pytest.raises(ValueError, match="loss_norm"):
        gmts.check_loss_config("gmts", 0.2, "per-token")


# 5. On-policy, β = 0
#    -----------------------------------------------------------------------------------------------

def test_on_policy_gmts_is_abs_entropy_times_advantage_and_ets_ignores_advantage():
    gen = torch.Generator().manual_seed(9)
    logp = -torch.rand(8, 12, generator=gen)
    entropy = torch.rand(8, 12, generator=gen) * 3
    valid = torch.ones(8, 12, dtype=torch.bool)
    adv = gmts.group_advantages(torch.tensor([1., 0, 0, 0, 1, 1, 0, 1]), 4)
    omega = gmts.token_omega(logp, logp.clone(), adv)
    torch.testing.assert_close(gmts.token_scores("gmts", entropy, omega),
                               (entropy * adv[:, None]).abs())
    other_adv = -3 * adv + 1
    ets_a = gmts.select_tokens(gmts.token_scores("ets", entropy, gmts.token_omega(logp, logp, adv)),
                               valid, 0.2)
    ets_b = gmts.select_tokens(
        gmts.token_scores("ets", entropy, gmts.token_omega(logp, logp, other_adv)), valid, 0.2)
    assert torch.equal(ets_a, ets_b)
    gmts_a = gmts.select_tokens(gmts.token_scores("gmts", entropy, omega), valid, 0.2)
    # The correct answer in a mostly-wrong group gets the larger |A|: GMTS favours its tokens.
    assert gmts_a.sum() == ets_a.sum() and not torch.equal(gmts_a, ets_a)


# 6. All-equal groups
#    -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("std", ["unbiased", "biased", "none"])
def test_all_equal_groups_give_zero_advantage_and_no_nan(std):
    rewards = torch.tensor([1., 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0])
    adv = gmts.group_advantages(rewards, 4, std=std)
    assert torch.isfinite(adv).all()
    assert adv[:8].abs().max().item() == 0.0
    assert adv[8] > 0 and (adv[9:] < 0).all()
    # float32: 4 terms of |A| < 2, ~4 u · 2 ≈ 5e-7
    assert adv.view(3, 4).sum(1).abs().max() < 1e-6


@pytest.mark.parametrize("std", ["unbiased", "biased", "none"])
@pytest.mark.parametrize("value", [0.3, 0.1, 1 / 3, 0.7, -2.2, 1e-8])
def test_all_equal_groups_give_exactly_zero_for_any_reward_value(std, value):
    """A float mean of eight 0.3's is not exactly 0.3: without the max == min test every answer of
    the group got |A| ~ 0.06 (e.g. --overlong-penalty 0.7 with every answer cut), and exclude / the
    zero-A skip missed it."""
    rewards = torch.tensor([value] * 8 + [1.0] + [0.0] * 7)
    adv = gmts.group_advantages(rewards, 8, std=std)
    assert adv[:8].abs().max().item() == 0.0
    assert gmts.mixed_groups(rewards, 8).tolist() == [False, True]


def test_advantage_values_match_the_reproduction():
    adv = gmts.group_advantages(torch.tensor([1., 0, 0, 0, 0, 0, 0, 0]), 8)
    assert adv[0].item() == pytest.approx(2.47, abs=0.01) and adv[1].item() == pytest.approx(
        -0.35, abs=0.01)
    assert gmts.group_advantages(torch.tensor([1., 0]), 2, std="none").tolist() == [0.5, -0.5]


def test_exclude_removes_zero_advantage_groups_from_the_ranking():
    gen = torch.Generator().manual_seed(10)
    entropy = torch.rand(8, 6, generator=gen)
    # the all-equal group has the highest entropies
    entropy[:4] += 10
    valid = torch.ones(8, 6, dtype=torch.bool)
    adv = gmts.group_advantages(torch.tensor([1., 1, 1, 1, 1, 0, 0, 0]), 4)
    exclude = adv == 0
    ets = gmts.select_tokens(gmts.token_scores("ets", entropy), valid, 0.25)
    # without exclude, ETS spends budget on A = 0 tokens
    assert ets[:4].any()
    ets_ex = gmts.select_tokens(gmts.token_scores("ets", entropy), valid, 0.25, exclude=exclude)
    # The budget is every arm's: k = ceil(ρ · N_valid) over ALL 48 valid tokens, not over the 24
    # eligible ones.
    assert not ets_ex[:4].any() and int(ets_ex.sum()) == int(ets.sum()) == math.ceil(0.25 * 48)
    # ... capped at the eligible count when ρ asks for more than the eligible answers hold.
    assert int(gmts.select_tokens(gmts.token_scores("ets", entropy), valid, 0.75,
                                  exclude=exclude).sum()) == 24
    omega = gmts.token_omega(torch.zeros(8, 6), torch.zeros(8, 6), adv)
    assert gmts.token_scores("gmts", entropy, omega)[:4].abs().max().item() == 0.0


# 7. Bad input
#    -----------------------------------------------------------------------------------------------

def test_bad_input_raises_clear_errors():
    valid = torch.ones(2, 3, dtype=torch.bool)
    scores = torch.rand(2, 3)
    for bad_ratio in (0, 0.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="ratio"):
            gmts.select_tokens(scores, valid, bad_ratio)
    with pytest.raises(ValueError, match="shape"):
        gmts.select_tokens(torch.rand(2, 4), valid, 0.2)
    with pytest.raises(ValueError, match="group_size"):
        gmts.group_advantages(torch.tensor([1.0, 0.0]), 1)
    with pytest.raises(ValueError, match="do not split"):
        gmts.group_advantages(torch.tensor([1.0, 0.0, 1.0]), 2)
    with pytest.raises(ValueError, match="unknown selector 'entropy'"):
        gmts.token_scores("entropy", scores)
    nan_scores = scores.clone()
    nan_scores[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"NaN.*\[1, 2\]"):
        gmts.select_tokens(nan_scores, valid, 0.2)
    valid_with_pad = valid.clone()
    valid_with_pad[1, 2] = False
    gmts.select_tokens(nan_scores, valid_with_pad, 0.2)        # NaN at padding is ignored
    with pytest.raises(ValueError, match="shape mismatch"):
        gmts.token_omega(torch.zeros(2, 3), torch.zeros(2, 4), torch.zeros(2))
    with pytest.raises(ValueError, match="rows"):
        gmts.token_omega(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3))
    with pytest.raises(ValueError, match="ref_logp"):
        gmts.token_omega(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2), beta=0.1)
    with pytest.raises(ValueError, match="scope"):
        gmts.select_tokens(scores, valid, 0.2, scope="row")
    with pytest.raises(ValueError, match="group_ids"):
        gmts.select_tokens(scores, valid, 0.2, scope="group")
    with pytest.raises(ValueError, match="std"):
        gmts.group_advantages(torch.tensor([1.0, 0.0]), 2, std="sample")


def test_each_option_name_the_command_line_accepts_runs_in_grpo_and_no_other():
    """Every selector, scope and loss_norm of gmts/method/options.py (the names the command line
    checks each flag against before torch loads) runs in grpo.py: the default written out in the
    function that reads the option, each other name in the table beside it (SCORES, RANKINGS,
    NORMALISERS), and no other name. An unknown name is one ValueError naming the option and its
    choices (gmts.<name>); grpo itself, which checks nothing, reads it as its table's KeyError."""
    from gmts.method import grpo
    from gmts.method.options import LOSS_NORMS, SCOPES, SELECTORS
    for default, table, names in (("gmts", grpo.SCORES, SELECTORS),
                                  ("batch", grpo.RANKINGS, SCOPES),
                                  ("selected", grpo.NORMALISERS, LOSS_NORMS)):
        assert default not in table and sorted([default, *table]) == sorted(names)
    gen = torch.Generator().manual_seed(0)
    valid = torch.rand(4, 5, generator=gen) > 0.3
    entropy, omega = torch.rand(4, 5, generator=gen), torch.randn(4, 5, generator=gen)
    for selector in SELECTORS:
        scores = grpo.token_scores(selector, entropy, omega, generator=gen)
        assert (scores is None) == (selector == "none")
        assert selector == "none" or (scores.shape == valid.shape and scores.dtype == torch.float32)
    scores = grpo.token_scores("gmts", entropy, omega)
    for scope in SCOPES:
        selected = grpo.select_tokens(scores, valid, 0.5, scope=scope,
                                      group_ids=torch.tensor([0, 0, 1, 1]))
        assert 0 < int(selected.sum()) <= int(valid.sum()) and not (selected & ~valid).any()
    for loss_norm in LOSS_NORMS:
        weights = grpo.loss_weights(valid, valid, loss_norm)
        assert weights.dtype == torch.float64 and (weights[valid] > 0).all()
        assert (weights[~valid] == 0).all()
    with pytest.raises(ValueError, match=r"unknown selector 'entropy'; choose one of \('none'"):
        gmts.token_scores("entropy", entropy)
    with pytest.raises(ValueError, match=r"scope must be one of \('batch', 'group'\)"):
        gmts.select_tokens(scores, valid, 0.5, scope="row")
    with pytest.raises(ValueError, match=r"unknown loss_norm 'token'; choose one of \('selected'"):
        gmts.loss_weights(valid, valid, "token")
    for bad in (lambda: grpo.token_scores("entropy", entropy),
                lambda: grpo.select_tokens(scores, valid, 0.5, scope="row"),
                lambda: grpo.loss_weights(valid, valid, "token")):
        with pytest.raises(KeyError):
            bad()


def test_selection_diagnostics_count_what_each_selection_spends():
    from gmts.trainer.metrics import selection_diagnostics
    # 4 answers x 5 tokens, all valid. Answers 0-1: an all-equal group (A = 0) with the HIGHEST
    # entropies, so ETS's top-20% (4 tokens) all sit there; answers 2-3 have A = +1 / -1, so GMTS
    # (|H * ω|, ω = A on-policy) picks there.
    valid = torch.ones(4, 5, dtype=torch.bool)
    adv = torch.tensor([0.0, 0.0, 1.0, -1.0])
    entropy = torch.tensor([[9.0, 8.0, 0.1, 0.1, 0.1], [7.0, 6.0, 0.1, 0.1, 0.1],
                            [1.0, 0.5, 0.4, 0.3, 0.2], [0.9, 0.6, 0.4, 0.3, 0.2]])
    omega = adv[:, None].expand(4, 5).clone()
    ets = gmts.select_tokens(gmts.token_scores("ets", entropy), valid, 0.2)
    d = selection_diagnostics(valid, adv, entropy, omega, ets, 0.2)
    assert d["selected_tokens"] == 4 and d["valid_tokens"] == 20
    assert d["selected_share_zero_adv"] == 1.0 and d["ets_share_zero_adv"] == 1.0
    assert d["selected_share_positive_adv"] == 0.0 and d["answers_with_selected"] == 2
    assert d["top_answer_share"] == 0.5 and d["selection_overlap_ets_gmts"] == 0.0
    assert d["entropy_selected_mean"] == pytest.approx((9 + 8 + 7 + 6) / 4)
    gms = gmts.select_tokens(gmts.token_scores("gmts", entropy, omega), valid, 0.2)
    # 1.0, 0.9, 0.6, 0.5: both signed answers, none with A = 0
    assert gms[2:].sum() == 4
    d = selection_diagnostics(valid, adv, entropy, omega, gms, 0.2)
    # ETS's, whatever was selected
    assert d["selected_share_zero_adv"] == 0.0 and d["ets_share_zero_adv"] == 1.0
    assert d["selected_share_positive_adv"] == 0.5 and d["top_answer_share"] == 0.5


def test_overlong_penalty_is_dapos_soft_punishment():
    lengths = torch.tensor([1, 40, 41, 44, 47, 48])
    # limit 48, buffer 8: free up to 40 tokens, then -1/8 per token, -1 at the limit (a cut answer)
    assert gmts.overlong_penalty(lengths, 48, 8).tolist() == [0, 0, -0.125, -0.5, -0.875, -1.0]
    assert gmts.overlong_penalty(lengths, 48, 8, factor=0.5).tolist() == [
        0, 0, -0.0625, -0.25, -0.4375, -0.5]
    assert gmts.overlong_penalty(lengths, 48, 0).tolist() == [0.0] * 6                 # off
    # the whole answer
    assert torch.allclose(gmts.overlong_penalty(lengths, 48, 48), -lengths / 48)
    for bad in ({"buffer": 49}, {"buffer": -1}, {"buffer": 8, "factor": -1.0}):
        with pytest.raises(ValueError, match="overlong"):
            gmts.overlong_penalty(lengths, 48, **bad)


def test_overlap_diagnostic_uses_the_runs_scope_bottom_and_exclude():
    """selection_overlap_ets_gmts compares what ETS and GMTS would select UNDER THE RUN'S SETTINGS:
    with exclude, neither counterfactual may pick the excluded group; with bottom, both pick their
    lowest scores."""
    from types import SimpleNamespace
    from gmts.trainer.metrics import counterfactual_selections, overlap
    from gmts.trainer.batches import batch_select

    def select(cfg, scores, valid, group_ids, exclude, ratio=None):    # as update_policy selects
        ratio = ratio or (cfg.ratio if cfg.selector != "none" else 1.0)
        return batch_select(scores, valid, ratio, scope=cfg.select_scope, group_ids=group_ids,
                            bottom=cfg.bottom, exclude=exclude)
    valid = torch.ones(4, 5, dtype=torch.bool)
    adv = torch.tensor([0.0, 0.0, 1.0, -1.0])
    entropy = torch.tensor([[9.0, 8.0, 0.1, 0.1, 0.1], [7.0, 6.0, 0.1, 0.1, 0.1],
                            [1.0, 0.5, 0.4, 0.3, 0.2], [0.9, 0.6, 0.4, 0.3, 0.2]])
    omega = adv[:, None].expand(4, 5).clone()
    group_ids = torch.tensor([0, 0, 1, 1])

    def choose(cfg, exclude=None):
        return lambda scores: select(cfg, scores, valid, group_ids, exclude)
    plain = SimpleNamespace(selector="gmts", ratio=0.2, select_scope="batch", bottom=False)
    ets, gms = counterfactual_selections(choose(plain), entropy, omega, None)
    assert ets[:2].all(dim=0)[:2].all() and overlap(ets, gms) == 0.0
    ets, gms = counterfactual_selections(choose(plain, exclude=adv == 0), entropy, omega, None)
    # both now pick 1.0, 0.9, 0.6, 0.5
    assert not ets[:2].any() and overlap(ets, gms) == 1.0
    bottom = SimpleNamespace(selector="gmts", ratio=0.2, select_scope="batch", bottom=True)
    ets, gms = counterfactual_selections(choose(bottom), entropy, omega, None)
    # lowest entropies; GMTS's zeros (A = 0)
    assert ets[:2, 2:].sum() == 4 and gms[:2].sum() == 4
    # a run with selector none still reports what ETS and GMTS would keep at ρ (not ρ = 1: overlap
    # 1.0)
    none = SimpleNamespace(selector="none", ratio=0.2, select_scope="batch", bottom=False)
    assert select(none, None, valid, group_ids, None).all()
    ets, gms = counterfactual_selections(
        lambda s: select(none, s, valid, group_ids, None, ratio=none.ratio),
                                         entropy, omega, None)
    assert ets.sum() == gms.sum() == 4 and overlap(ets, gms) == 0.0
    group = SimpleNamespace(selector="gmts", ratio=0.2, select_scope="group", bottom=False)
    ets, gms = counterfactual_selections(choose(group), entropy, omega, None)
    assert ets[:2].sum() == 2 and ets[2:].sum() == 2                # ceil(0.2 · 10) per group


def test_kl_relative_weight_is_the_true_gradient_coefficient():
    """With --loss-norm selected and --kl-coverage all, the loss is
    Σ_sel ℓ^pol / S - β Σ_valid D / N: a selected token's gradient coefficient is
    (r A I)/S + β(π_ref/π - 1)/N = (1/S)·ω(kl_share = S/N). Autograd agrees."""
    torch.manual_seed(0)
    n, t = 3, 4
    logp = (-torch.rand(n, t, dtype=torch.float64)).requires_grad_()
    old = logp.detach() + 0.3 * torch.randn(n, t, dtype=torch.float64)
    ref = logp.detach() + 0.5 * torch.randn(n, t, dtype=torch.float64)
    adv = torch.tensor([1.0, -0.5, 0.7], dtype=torch.float64)
    valid = torch.ones(n, t, dtype=torch.bool)
    selected = torch.zeros(n, t, dtype=torch.bool)
    selected[0, :2] = selected[1, 1] = selected[2, 3] = True
    beta = 0.2
    loss = gmts.policy_loss(logp, old, adv, gmts.loss_weights(valid, selected, "selected"),
                            beta=beta, ref_logp=ref,
                            kl_weights=gmts.loss_weights(valid, valid, "selected"))
    # ∂J/∂log π = the coefficient in front of ∇ log π
    (grad,) = torch.autograd.grad(-loss, logp)
    S, N = int(selected.sum()), n * t
    omega = gmts.token_omega(logp.detach(), old, adv, beta=beta, ref_logp=ref,
                             kl_share=gmts.kl_share("selected", "all", S, N))
    torch.testing.assert_close(grad[selected], omega[selected] / S, rtol=1e-12, atol=1e-14)
    assert gmts.kl_share("all", "all", S, N) == gmts.kl_share("selected", "selected", S, N) == 1.0
