"""The method: GRPO with token selection, as pure functions on tensors (gmts/METHOD.md). Only torch
is imported.

One RLVR step reads this file top to bottom:

    3. advantage  group_advantages  A_i = (R_i - mean(R_group)) / (std(R_group) + eps)
    4. score      token_omega       ω_it, the scalar in front of each token's policy gradient
                  token_scores      what the selector ranks (ETS: E, GMTS: |E·ω·w|, random, none)
    5. select     select_tokens     the exact batch-wide top-ρ mask
    6. loss       loss_weights      w_it, the normaliser computed once on the whole optimizer batch
                  policy_loss       the masked, clipped surrogate (+ k3 KL)

Names, each with one meaning: R a reward; A an advantage; r = π_θ / π_old the importance ratio; ρ
(`ratio`) the share of valid tokens selected; E an entropy. Three kinds of weight, whose keyword
names are the public interface: `weight=` (token_scores) is w_it, the token's LENGTH weight in the
aggregated loss (relative_token_weight); `weights` / `kl_weights` (policy_loss) are the per-token
LOSS weights w·m of the policy and KL terms (loss_weights); `kl_share=` (token_omega) is one scalar,
the KL part's share in ω relative to the policy part (kl_share).
"""

import math
from fractions import Fraction

import torch

from gmts.method.options import LOSS_NORMS, SCOPES, SELECTORS, STD_MODES


def _check(ok, message):
    """Bad input is one ValueError naming the bad value. message: the text, or a function making it
    when that costs (it is then made only on failure)."""
    if not ok:
        raise ValueError(message() if callable(message) else message)

# --------------------------------------------------------------------------------------------------
# 3. Advantage
# Stage 3 of the loop: group-relative advantages (gmts/METHOD.md, "One RLVR step"), and DAPO's
# length shaping of R.
#
#     A_i = (R_i - mean(R_group)) / (std(R_group) + eps)
# Every token of answer i gets the same A_i. A group whose rewards are all equal carries no signal:
# its A is exactly 0 for any reward values (tested with max == min, not left to float arithmetic),
# never NaN, whichever std option.

def group_advantages(rewards, group_size, *, std="unbiased", eps=1e-6):
    """rewards (N,) float, answers to one prompt contiguous (N = Q * G). Returns A (N,) float32.

    std="unbiased" divides by the sample std (TRL's default, the reproduction's numbers: +2.47 /
    -0.35 in a group of eight with one correct answer); "biased" by the population std; "none" does
    not divide (Dr. GRPO).
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    _check(rewards.dim() == 1, f"rewards must be 1-D (N,), got shape {tuple(rewards.shape)}")
    _check(std in STD_MODES, f"std must be one of {STD_MODES}, got {std!r}")
    _check(isinstance(group_size, int) and group_size >= 2,     # one answer has no baseline
           f"group_size must be an int >= 2, got {group_size!r}")
    _check(rewards.numel() % group_size == 0,
           f"{rewards.numel()} rewards do not split into groups of {group_size}")
    _check(torch.isfinite(rewards).all(), lambda: f"rewards contain NaN/inf: {rewards.tolist()}")
    grouped = rewards.view(-1, group_size)                     # (Q, G)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    # All-equal groups get A = 0 EXACTLY: a float mean of eight 0.3's is not exactly 0.3
    # (gmts/METHOD.md, "Exactness notes")
    all_equal = grouped.amax(dim=1, keepdim=True) == grouped.amin(dim=1, keepdim=True)
    centred = centred.masked_fill(all_equal, 0.0)
    if std == "none":
        return centred.reshape(-1)
    spread = grouped.std(dim=1, keepdim=True, unbiased=(std == "unbiased"))
    return (centred / (spread + eps)).reshape(-1)


def mixed_groups(rewards, group_size):
    """(Q,) bool: groups whose rewards are not all equal, the only ones with a signal (max !=
    min, exactly)."""
    grouped = torch.as_tensor(rewards).view(-1, group_size)
    return grouped.amax(dim=1) != grouped.amin(dim=1)


def overlong_penalty(lengths, max_new_tokens, buffer, factor=1.0):
    """DAPO's soft overlong punishment (gmts/METHOD.md, "One RLVR step": DAPO's optional overlong
    shaping), added to R.

    lengths (N,) completion lengths in tokens. An answer no longer than max_new_tokens - buffer
    costs nothing; in the last `buffer` tokens the cost grows linearly to `factor` at the limit (so
    an answer cut at the limit pays the whole factor): penalty = -factor * max(0, length -
    (max_new_tokens - buffer)) / buffer. Returns (N,) <= 0. buffer = 0 turns it off (all zeros).
    """
    lengths = torch.as_tensor(lengths, dtype=torch.float32)
    _check(0 <= buffer <= max_new_tokens,
           f"overlong buffer must be in [0, max_new_tokens={max_new_tokens}], got {buffer}")
    _check(factor >= 0, f"overlong penalty factor must be >= 0, got {factor}")
    if buffer == 0:
        return torch.zeros_like(lengths)
    excess = (lengths - (max_new_tokens - buffer)).clamp(min=0)
    return -factor * excess / buffer


# --------------------------------------------------------------------------------------------------
# 4. Scores
# Stage 4 of the loop: the per-token scores that selection ranks (gmts/METHOD.md, "The gradient of
# one token" and "Token scores and selection"). Everything here is a score, not part of the graph:
# no gradient flows through it.
# Entropy itself is computed in gmts/method/head.py (chunked over the vocabulary, so no float32
# (tokens, V) copy is made).

@torch.no_grad()
def token_omega(logp, old_logp, advantages, *, eps_low=0.2, eps_high=0.28, beta=0.0, ref_logp=None,
                kl_share=1.0):
    """The scalar in front of each token's policy gradient (paper section 3, the gradient of eq. 2):

        ∇θ ℓ_it = ω_it · ∇θ log π_θ(o_it)
        ω_it = r_it · A_it · I(r_it, A_it) + β · π_ref(o_it)/π_θ(o_it) - β
        I(r, A) = 0 if (A > 0 and r > 1+ε2) or (A < 0 and r < 1-ε1) else 1

    logp, old_logp, ref_logp: (N, T) log-probabilities of the sampled tokens under π_θ, π_old,
    π_ref. advantages: (N,) per answer or (N, T) per token. Returns ω (N, T) in logp's dtype
    (float32 at least). kl_share: the KL part's weight relative to the policy part in the aggregated
    loss (gmts/METHOD.md, "Length weight in ω"): 1 when both share a normaliser; S / N_valid when
    the policy term is divided by the selected count S and the KL term covers all N_valid tokens
    (loss_norm "selected" with kl_coverage "all", see kl_share).
    """
    logp, old_logp = _as_float(logp), _as_float(old_logp)
    _check_same_shape(logp=logp, old_logp=old_logp)
    adv = broadcast_advantages(advantages, logp)
    r = torch.exp(logp - old_logp)                       # the importance ratio π_θ / π_old
    omega = r * adv * (~clip_active(r, adv, eps_low, eps_high))
    if beta != 0.0:
        omega = omega + kl_share * (beta * torch.exp(_reference(ref_logp, logp,
                                                                beta) - logp) - beta)
    return omega


def _reference(ref_logp, logp, beta):
    """ref_logp checked for the KL term: given, and shaped like logp."""
    _check(ref_logp is not None,
           f"beta={beta} needs ref_logp (log-probs under the reference model)")
    ref_logp = _as_float(ref_logp)
    _check_same_shape(logp=logp, ref_logp=ref_logp)
    return ref_logp


def clip_active(r, advantages, eps_low, eps_high):
    """(N, T) bool: 1 - I(r, A), the tokens whose clip is active (their policy gradient is zero);
    r = π_θ / π_old."""
    adv = broadcast_advantages(advantages, r)
    return ((adv > 0) & (r > 1 + eps_high)) | ((adv < 0) & (r < 1 - eps_low))


@torch.no_grad()
def token_scores(selector, entropy, omega=None, *, weight=None, generator=None):
    """Scores that select_tokens ranks, (N, T) float, higher = more worth training on.

    none   -> None (select_tokens then keeps every valid token)
    ets    -> E_it                       (Wang et al. 2025: entropy alone)
    gmts   -> |E_it · ω_it · w_it|        (paper §3, δ_it; w_it = the token's weight in the
                                          aggregated loss, gmts/METHOD.md, "Length weight in ω";
                                          1 under a token-level mean)
    random -> Uniform(0, 1)              (the control: does ranking matter at all?)
    """
    _check(selector in SELECTORS, f"unknown selector {selector!r}; choose one of {SELECTORS}")
    if selector == "none":
        return None
    entropy = _as_float(entropy)
    if selector == "ets":
        return entropy.clone()
    if selector == "random":
        return torch.rand(entropy.shape, generator=generator, dtype=entropy.dtype,
                          device=entropy.device)
    _check(omega is not None, "selector 'gmts' needs omega (see token_omega)")
    omega = _as_float(omega)
    _check_same_shape(entropy=entropy, omega=omega)
    score = entropy * omega
    if weight is not None:
        score = score * torch.as_tensor(weight, dtype=score.dtype,
                                        device=score.device).expand_as(score)
    return score.abs()


def broadcast_advantages(advantages, like):
    """(N,) or (N, T) advantages -> (N, T) like `like`."""
    adv = _as_float(torch.as_tensor(advantages, device=like.device))
    if adv.dim() == 1:
        _check(adv.shape[0] == like.shape[0],
               f"advantages has {adv.shape[0]} rows but the tokens have {like.shape[0]}")
        return adv[:, None].expand_as(like)
    _check_same_shape(advantages=adv, tokens=like)
    return adv


def _as_float(x):
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _check_same_shape(**tensors):
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    _check(len(set(shapes.values())) == 1, f"shape mismatch: {shapes}")


# --------------------------------------------------------------------------------------------------
# 5. Selection
# Stage 5 of the loop: keep the top-ρ tokens of the WHOLE batch (gmts/METHOD.md, "Token scores and
# selection").
# The threshold is batch-wide on purpose: a per-row top-ρ would give every answer the same number of
# slots and throw away the cross-answer comparison GMTS is about. Every selector keeps exactly k =
# ceil(ρ · n) tokens, so arms differ in which tokens, never in how many. The ranking is an exact
# stable sort (ties -> lower flat index first), not torch.quantile (interpolated threshold, more
# than k on ties, a 2^24-element limit).

def check_ratio(ratio):
    """ρ must be a number in (0, 1] (a bool is not a number here)."""
    _check(isinstance(ratio, (int, float)) and not isinstance(ratio, bool)
           and 0.0 < float(ratio) <= 1.0, f"ratio must be in (0, 1], got {ratio!r}")


def num_to_select(ratio, n):
    """k = ceil(ρ · n), computed exactly on the decimal ρ the user wrote (0.3 · 10 = 3, not
    ceil(3.0000000000000004))."""
    check_ratio(ratio)
    return math.ceil(Fraction(repr(float(ratio))) * n)


@torch.no_grad()
def select_tokens(scores, valid_mask, ratio, *, scope="batch", group_ids=None, bottom=False,
                  exclude=None):
    """Bool mask (N, T) of the selected tokens.

    scores     (N, T) float, or None (selector "none": every valid token is selected, ratio ignored)
    valid_mask (N, T) bool: real completion tokens (never prompt or padding)
    ratio      ρ in (0, 1]; k = ceil(ρ · n) with n the VALID tokens of the scope (capped at the
               eligible count)
    scope      "batch": one ranking over all tokens; "group": one ranking per group of answers
               (group_ids (N,)), as in the authors' GRPO-Zero fork (gmts/METHOD.md, "Scope of the
               ranking")
    bottom     keep the smallest scores instead (the paper's "Bottom" ablation)
    exclude    (N,) bool: answers left out of the ranking entirely (e.g. zero-advantage groups):
               never selected, but still counted in n, so the budget is every other arm's
    """
    valid_mask = torch.as_tensor(valid_mask)
    _check(valid_mask.dtype == torch.bool and valid_mask.dim() == 2,
           f"valid_mask must be a 2-D bool tensor (N, T), got {valid_mask.dtype} "
           f"{tuple(valid_mask.shape)}")
    _check(scope in SCOPES, f"scope must be one of {SCOPES}, got {scope!r}")
    check_ratio(ratio)
    if exclude is not None:
        exclude = _checked_exclude(exclude, valid_mask)
    eligible = valid_mask if exclude is None else valid_mask & ~exclude[:, None]
    if scores is None:
        return eligible.clone()
    _check_same_shape(scores=scores, valid_mask=valid_mask)
    check_scores(scores, eligible)
    if scope == "group":
        return _select_per_group(scores, valid_mask, eligible, ratio, group_ids, bottom)
    return _top_k_in(scores, valid_mask, eligible, ratio, bottom)


def _checked_exclude(exclude, valid_mask):
    exclude = torch.as_tensor(exclude, device=valid_mask.device)
    _check(exclude.dtype == torch.bool and tuple(exclude.shape) == (valid_mask.shape[0],),
           f"exclude must be bool of shape ({valid_mask.shape[0]},), got {exclude.dtype} "
           f"{tuple(exclude.shape)}")
    return exclude


def _select_per_group(scores, valid_mask, eligible, ratio, group_ids, bottom):
    """scope="group": one top-k per group of answers, k = ceil(ρ · the group's valid tokens)."""
    _check(group_ids is not None, "scope='group' needs group_ids (N,)")
    group_ids = torch.as_tensor(group_ids, device=valid_mask.device)
    _check(tuple(group_ids.shape) == (valid_mask.shape[0],),
           f"group_ids must have shape ({valid_mask.shape[0]},), got {tuple(group_ids.shape)}")
    selected = torch.zeros_like(valid_mask)
    for g in torch.unique(group_ids):
        rows = group_ids == g
        selected |= _top_k_in(scores, valid_mask & rows[:, None], eligible & rows[:, None], ratio,
                              bottom)
    return selected


def check_scores(scores, eligible):
    bad = eligible & ~torch.isfinite(scores)
    _check(not bad.any(), lambda: _non_finite_message(scores, bad))


def _non_finite_message(scores, bad):
    where = bad.nonzero()[0].tolist()
    return (f"scores contain NaN/inf at {bad.sum().item()} valid positions, first at (row, col) = "
            f"{where}: value {scores[where[0], where[1]].item()}")


def budget(ratio, n_valid, n_eligible):
    """k = ceil(ρ · N_valid), capped at the eligible count: leaving answers out of the ranking
    (exclude) changes which tokens compete, never how many are trained on (gmts/METHOD.md,
    "Exactness notes")."""
    return min(num_to_select(ratio, n_valid), n_eligible)


def _top_k_in(scores, valid, eligible, ratio, bottom):
    return top_k_mask(scores, eligible, budget(ratio, int(valid.sum()), int(eligible.sum())),
                      bottom)


def top_k_mask(scores, eligible, k, bottom=False):
    """Exact top-k (or bottom-k) over the eligible positions; ties go to the lower flat index
    (stable sort)."""
    flat_idx = eligible.reshape(-1).nonzero().squeeze(1)    # (n,) flat positions of eligible tokens
    values = scores.reshape(-1)[flat_idx]
    order = torch.sort(values, descending=not bottom, stable=True).indices[:k]
    chosen = torch.zeros(eligible.numel(), dtype=torch.bool, device=eligible.device)
    chosen[flat_idx[order]] = True
    return chosen.view_as(eligible)


# --------------------------------------------------------------------------------------------------
# 6. The loss
# Stage 6 of the loop: the masked, clipped policy loss (gmts/METHOD.md, "One RLVR step" and "The
# loss").
# ℓ_it(θ) = min(r_it A_it, clip(r_it, 1-ε1, 1+ε2) A_it) - β D_it,   D_it = π_ref/π_θ -
#     log(π_ref/π_θ) - 1 (k3) J(θ)    = Σ_i Σ_t w_it · m_it · ℓ_it(θ)
# w_it carries the normaliser, computed ONCE on the whole optimizer batch (loss_weights), so that
# summing the losses of any split of the batch into micro-batches gives exactly the full-batch loss
# and gradient.

def loss_weights(valid_mask, selected_mask, loss_norm="selected", *, reduce=None):
    """Per-token weights w_it · m_it (N, T) float64 for the WHOLE optimizer batch; slice rows for
    micro-batches.

    reduce: sums a count over data-parallel ranks (gmts.trainer.distributed.all_reduce_sum) so the
    normaliser is global.

    selected           1/S on selected tokens, S = selected tokens in the batch (the paper's
                       equation; DAPO's token mean)
    all                1/N_valid on selected tokens: the authors' code, verl, and TRL's
                       top_entropy_quantile with loss_type bnpo / dapo (non-selected tokens stay in
                       the denominator)
    sequence           1/(N_answers · |o_i|) on selected tokens, |o_i| = the answer's full length
                       (TRL's grpo with top_entropy_quantile)
    sequence-selected  1/(N_answers · S_i), S_i = the answer's selected count (TRL's grpo with the
                       selection folded into its completion mask; only meaningful without
                       selection: see check_loss_config)
    """
    _check(loss_norm in LOSS_NORMS, f"loss_norm must be one of {LOSS_NORMS}, got {loss_norm!r}")
    _check_same_shape(valid_mask=valid_mask, selected_mask=selected_mask)
    _check(not (selected_mask & ~valid_mask).any(),
           "selected_mask selects padding/prompt positions (not in valid_mask)")
    total = reduce or (lambda count: count)
    m = selected_mask.double()              # float64: 1/S exact to 1e-16 whatever the model's dtype
    if loss_norm == "selected":
        return m / total(m.sum()).clamp(min=1)
    if loss_norm == "all":
        return m / total(valid_mask.sum()).clamp(min=1).double()
    n_answers = total(torch.tensor(valid_mask.shape[0], device=valid_mask.device)).double()
    counted = valid_mask if loss_norm == "sequence" else selected_mask
    per_answer = counted.sum(dim=1, keepdim=True).clamp(min=1)
    return m / (per_answer.double() * n_answers)


def relative_token_weight(valid_mask, loss_norm):
    """w_it up to a batch-wide constant, for the GMTS score |E · ω · w| (gmts/METHOD.md, "Length
    weight in ω"). Constant (None) under token means; 1/|o_i| under per-answer normalisation."""
    if loss_norm in ("sequence", "sequence-selected"):
        return 1.0 / valid_mask.sum(dim=1, keepdim=True).clamp(min=1).float().expand_as(valid_mask)
    return None


def kl_share(loss_norm, kl_coverage, n_selected, n_valid):
    """The KL term's weight over the policy term's for a SELECTED token, w_kl / w_pol (for
    token_omega's kl_share).

    Only loss_norm "selected" with kl_coverage "all" separates them: the policy part is divided by
    the selected count S, the KL part by every valid token N_valid, so a token's true gradient
    coefficient is (r·A·I)/S + β(π_ref/π - 1)/N_valid = (1/S) · (r·A·I + (S/N_valid) · β(π_ref/π -
    1)). Every other combination divides both parts alike (1)."""
    if loss_norm == "selected" and kl_coverage == "all" and n_valid > 0:
        return n_selected / n_valid
    return 1.0


def token_objective(logp, old_logp, advantages, *, eps_low=0.2, eps_high=0.28, beta=0.0,
                    ref_logp=None):
    """Per-token parts of ℓ_it, both (N, T): the clipped surrogate and the k3 KL estimate D_it (0
    when β = 0). logp carries the gradient; old_logp and ref_logp are constants."""
    adv = broadcast_advantages(advantages, logp).to(logp.dtype)
    r = torch.exp(logp - old_logp.detach())              # the importance ratio π_θ / π_old
    surrogate = torch.minimum(r * adv, torch.clamp(r, 1 - eps_low, 1 + eps_high) * adv)
    if beta == 0.0:
        return surrogate, torch.zeros_like(surrogate)
    return surrogate, _k3(logp, ref_logp, beta)


def _k3(logp, ref_logp, beta):
    """D_it = π_ref/π_θ - log(π_ref/π_θ) - 1, the k3 estimate of KL(π_θ ‖ π_ref) at each sampled
    token (>= 0)."""
    _check(ref_logp is not None, f"beta={beta} needs ref_logp")
    log_ref_over_pi = ref_logp.detach() - logp
    return torch.exp(log_ref_over_pi) - log_ref_over_pi - 1


def policy_loss(logp, old_logp, advantages, weights, *, eps_low=0.2, eps_high=0.28, beta=0.0,
                ref_logp=None, kl_weights=None):
    """Scalar loss to MINIMISE: -J = -Σ w·m·surrogate + β Σ w_kl·D.

    weights: (N, T) from loss_weights (rows of the full-batch tensor for a micro-batch). kl_weights:
    where the KL term applies (defaults to `weights`, i.e. selected tokens only; pass weights built
    from the valid mask to apply it to every token: gmts/METHOD.md, "Normaliser", leaves the KL
    term's coverage as a stated choice).
    """
    surrogate, kl = token_objective(logp, old_logp, advantages, eps_low=eps_low, eps_high=eps_high,
                                    beta=beta, ref_logp=ref_logp)
    weights = weights.to(surrogate.dtype)
    # torch.where, not a bare product: a non-finite value at an unselected position must not leak in
    # as 0 * inf.
    loss = -torch.where(weights != 0, weights * surrogate, 0.0).sum()
    if beta != 0.0:
        kl_w = weights if kl_weights is None else kl_weights.to(kl.dtype)
        loss = loss + beta * torch.where(kl_w != 0, kl_w * kl, 0.0).sum()
    return loss
