"""The method: GRPO with token selection, as pure functions on tensors (gmts/METHOD.md). Only torch
is imported.

One RLVR step reads this file top to bottom:

    3. advantage  group_advantages  A_i = (R_i - mean(R_group)) / (std(R_group) + eps)
    4. score      token_omega       ω_it, the scalar in front of each token's policy gradient
                  token_scores      what the selector ranks (ETS: E, GMTS: |E·ω·w|, random, none)
    5. select     select_tokens     the exact batch-wide top-ρ mask (budget: k; top_k_mask)
    6. loss       loss_weights      w_it, the normaliser computed once on the whole optimizer batch
                  policy_loss       the masked, clipped surrogate (+ k3 KL), from token_objective

Each option's default (selector gmts, scope batch, loss_norm selected) is written out in the
function that reads the option; its other choices are the tables SCORES, RANKINGS and NORMALISERS
beside it.

Nothing here checks its arguments: train.py calls these functions with tensors it built (shapes,
dtypes, devices and masks hold by construction), options the command line checked once
(gmts/run/validate.py; an unknown name here is a KeyError) and rewards the scorer checked
(rewards/). gmts/method/checked.py is the same functions with every argument checked, one
ValueError naming the bad one: what `import gmts` exports (gmts.select_tokens, ...), for a caller
building its own tensors.

Names, each with one meaning: R a reward; A an advantage, (N,) per answer or (N, T) per token (an
(N,) one is read as (N, 1): every token of answer i gets A_i); r = π_θ / π_old the importance
ratio; ρ (`ratio`) the share of valid tokens selected; E an entropy. Three kinds of weight, whose
keyword names are the public interface: `weight=` (token_scores) is w_it, the token's LENGTH weight
in the aggregated loss (relative_token_weight); `weights` / `kl_weights` (policy_loss) are the
per-token LOSS weights w·m of the policy and KL terms (loss_weights); `kl_share=` (token_omega) is
one scalar, the KL part's share in ω relative to the policy part (kl_share).
"""

import math
from fractions import Fraction

import torch


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
    not divide (Dr. GRPO). All-equal groups: exactly 0 (METHOD.md, "Exactness notes").
    """
    grouped = torch.as_tensor(rewards, dtype=torch.float32).view(-1, group_size)        # (Q, G)
    all_equal = grouped.amax(dim=1, keepdim=True) == grouped.amin(dim=1, keepdim=True)  # (Q, 1)
    adv = (grouped - grouped.mean(dim=1, keepdim=True)).masked_fill(all_equal, 0.0)     # (Q, G)
    if std != "none":
        adv = adv / (grouped.std(dim=1, keepdim=True, unbiased=(std == "unbiased")) + eps)
    return adv.reshape(-1)                                                              # (N,)


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
    π_ref, float32 or float64 (head.py's; gmts.token_omega upcasts lower precisions). advantages:
    (N,) per answer or (N, T) per token. Returns ω (N, T) in logp's dtype. kl_share: the KL part's
    weight relative to the policy part in the aggregated loss (gmts/METHOD.md, "Length weight in
    ω"): 1 when both share a normaliser; S / N_valid when the policy term is divided by the
    selected count S and the KL term covers all N_valid tokens (loss_norm "selected" with
    kl_coverage "all", see kl_share).
    """
    r = torch.exp(logp - old_logp)                 # (N, T) the importance ratio π_θ / π_old
    adv = advantages if advantages.dim() == 2 else advantages[:, None]        # (N, T) or (N, 1)
    omega = r * adv * ~clip_active(r, adv, eps_low, eps_high)    # (N, T); + the KL part if β != 0
    return omega if beta == 0.0 else omega + kl_share * (beta * torch.exp(ref_logp - logp) - beta)


def clip_active(r, advantages, eps_low, eps_high):
    """(N, T) bool: 1 - I(r, A), the tokens whose clip is active (their policy gradient is zero);
    r = π_θ / π_old (N, T), advantages (N,) or (N, T)."""
    adv = advantages if advantages.dim() == 2 else advantages[:, None]        # (N, T) or (N, 1)
    return ((adv > 0) & (r > 1 + eps_high)) | ((adv < 0) & (r < 1 - eps_low))


@torch.no_grad()
def token_scores(selector, entropy, omega=None, weight=None, generator=None):
    """Scores that select_tokens ranks, (N, T) float, higher = more worth training on. entropy
    (N, T) float32 or float64 (head.py's; gmts.token_scores upcasts lower precisions); weight a
    tensor broadcasting to it, or None.

    gmts   -> |E_it · ω_it · w_it|        (paper §3, δ_it; w_it = `weight`, the token's weight in
                                          the aggregated loss, gmts/METHOD.md, "Length weight in
                                          ω"; None: 1, as under a token-level mean)
    the other selectors, SCORES:
    ets    -> E_it                       (Wang et al. 2025: entropy alone)
    random -> Uniform(0, 1)              (the control: does ranking matter at all?)
    none   -> None (select_tokens then keeps every valid token)
    """
    if selector != "gmts":
        return SCORES[selector](entropy, generator)
    return (entropy * omega if weight is None else entropy * omega * weight).abs()     # (N, T)


def _random_scores(entropy, generator):
    """Uniform(0, 1) per token."""
    return torch.rand(entropy.shape, generator=generator, dtype=entropy.dtype,
                      device=entropy.device)


SCORES = {"ets": lambda entropy, generator: entropy.clone(), "random": _random_scores,
          "none": lambda entropy, generator: None}


# --------------------------------------------------------------------------------------------------
# 5. Selection
# Stage 5 of the loop: keep the top-ρ tokens of the WHOLE batch (gmts/METHOD.md, "Token scores and
# selection").
# The threshold is batch-wide on purpose: a per-row top-ρ would give every answer the same number of
# slots and throw away the cross-answer comparison GMTS is about. Every selector keeps exactly k =
# ceil(ρ · n) tokens, so arms differ in which tokens, never in how many. The ranking is an exact
# stable sort (ties -> lower flat index first), not torch.quantile (interpolated threshold, more
# than k on ties, a 2^24-element limit).

def num_to_select(ratio, n):
    """k = ceil(ρ · n) (budget with every token eligible)."""
    return budget(ratio, n, n)


def select_tokens(scores, valid_mask, ratio, *, scope="batch", group_ids=None, bottom=False,
                  exclude=None):
    """Bool mask (N, T) of the selected tokens.

    scores     (N, T) float, or None (selector "none": every valid token is selected, ratio ignored)
    valid_mask (N, T) bool: real completion tokens (never prompt or padding)
    ratio      ρ in (0, 1]; k = ceil(ρ · n) with n the VALID tokens of the scope (capped at the
               eligible count)
    scope      "batch": one ranking over all tokens (top_k_mask with budget's k); "group"
               (RANKINGS): one ranking per group of answers (group_ids (N,)), as in the authors'
               GRPO-Zero fork (gmts/METHOD.md, "Scope of the ranking")
    bottom     keep the smallest scores instead (the paper's "Bottom" ablation)
    exclude    (N,) bool: answers left out of the ranking entirely (e.g. zero-advantage groups):
               never selected, but still counted in n, so the budget is every other arm's
    """
    eligible = valid_mask if exclude is None else valid_mask & ~exclude[:, None]        # (N, T)
    if scores is None:
        return eligible.clone()
    if scope != "batch":
        return RANKINGS[scope](scores, valid_mask, eligible, ratio, bottom, group_ids)
    k = budget(ratio, int(valid_mask.sum()), int(eligible.sum()))
    return top_k_mask(scores, eligible, k, bottom)


def _select_per_group(scores, valid_mask, eligible, ratio, bottom, group_ids):
    """scope="group": one top-k per group of answers (group_ids (N,)), k = ceil(ρ · the group's
    valid tokens)."""
    selected = torch.zeros_like(valid_mask)
    for g in torch.unique(group_ids):
        rows = (group_ids == g)[:, None]                                                 # (N, 1)
        k = budget(ratio, int((valid_mask & rows).sum()), int((eligible & rows).sum()))
        selected |= top_k_mask(scores, eligible & rows, k, bottom)
    return selected


RANKINGS = {"group": _select_per_group}


def budget(ratio, n_valid, n_eligible):
    """k = ceil(ρ · N_valid), computed exactly on the decimal ρ the user wrote (0.3 · 10 = 3, not
    ceil(3.0000000000000004)), capped at the eligible count: leaving answers out of the ranking
    (exclude) changes which tokens compete, never how many are trained on (gmts/METHOD.md,
    "Exactness notes")."""
    return min(math.ceil(Fraction(repr(float(ratio))) * n_valid), n_eligible)


def top_k_mask(scores, eligible, k, bottom=False):
    """Exact top-k (or bottom-k) over the eligible positions; ties go to the lower flat index
    (stable sort)."""
    flat_idx = eligible.reshape(-1).nonzero().squeeze(1)    # (n,) flat positions of eligible tokens
    order = torch.sort(scores.reshape(-1)[flat_idx], descending=not bottom, stable=True).indices
    chosen = eligible.new_zeros(eligible.numel()).index_fill_(0, flat_idx[order[:k]], True)
    return chosen.view_as(eligible)                                                  # (N, T) bool


# --------------------------------------------------------------------------------------------------
# 6. The loss
# Stage 6 of the loop: the masked, clipped policy loss (gmts/METHOD.md, "One RLVR step" and "The
# loss").
# ℓ_it(θ) = min(r_it A_it, clip(r_it, 1-ε1, 1+ε2) A_it) - β D_it,   D_it = π_ref/π_θ -
#     log(π_ref/π_θ) - 1 (k3) J(θ)    = Σ_i Σ_t w_it · m_it · ℓ_it(θ)
# w_it carries the normaliser, computed ONCE on the whole optimizer batch (loss_weights), so that
# summing the losses of any split of the batch into micro-batches gives exactly the full-batch loss
# and gradient.

def loss_weights(valid_mask, selected_mask, loss_norm="selected", reduce=None):
    """Per-token weights w_it · m_it (N, T) float64 for the WHOLE optimizer batch; slice rows for
    micro-batches. m = selected_mask in float64: 1/S exact to 1e-16 whatever the model's dtype.

    reduce: sums a count over data-parallel ranks (gmts.trainer.distributed.all_reduce_sum) so the
    normaliser is global.

    selected           1/S on selected tokens, S = selected tokens in the batch (the paper's
                       equation; DAPO's token mean)
    the other normalisers, NORMALISERS:
    all                1/N_valid on selected tokens: the authors' code, verl, and TRL's
                       top_entropy_quantile with loss_type bnpo / dapo (non-selected tokens stay in
                       the denominator)
    sequence           1/(N_answers · |o_i|) on selected tokens, |o_i| = the answer's full length
                       (TRL's grpo with top_entropy_quantile)
    sequence-selected  1/(N_answers · S_i), S_i = the answer's selected count (TRL's grpo with the
                       selection folded into its completion mask; only meaningful without
                       selection: see check_loss_config)
    """
    m, total = selected_mask.double(), reduce or (lambda count: count)               # m (N, T)
    if loss_norm != "selected":
        return NORMALISERS[loss_norm](valid_mask, m, total)
    return m / total(m.sum()).clamp(min=1)


def _per_valid(valid_mask, m, total):
    """m / N_valid."""
    return m / total(valid_mask.sum()).clamp(min=1).double()


def _per_answer(counted):
    """m / (N_answers · |o_i|), |o_i| counting an answer's `counted` tokens ("valid" or
    "selected")."""
    def weights(valid_mask, m, total):
        n_answers = total(torch.tensor(valid_mask.shape[0], device=valid_mask.device)).double()
        per_answer = (valid_mask if counted == "valid" else m).sum(dim=1, keepdim=True)
        return m / (per_answer.clamp(min=1).double() * n_answers)
    return weights


NORMALISERS = {"all": _per_valid, "sequence": _per_answer("valid"),
               "sequence-selected": _per_answer("selected")}


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
    when β = 0). logp carries the gradient; old_logp and ref_logp are constants; advantages (N,)
    or (N, T), in logp's dtype."""
    adv = (advantages if advantages.dim() == 2 else advantages[:, None]).to(logp.dtype)  # (N, T|1)
    r = torch.exp(logp - old_logp.detach())              # (N, T) the importance ratio π_θ / π_old
    surrogate = torch.minimum(r * adv, torch.clamp(r, 1 - eps_low, 1 + eps_high) * adv)  # (N, T)
    return surrogate, (_k3(logp, ref_logp) if beta != 0.0 else torch.zeros_like(surrogate))


def _k3(logp, ref_logp):
    """D_it = π_ref/π_θ - log(π_ref/π_θ) - 1, the k3 estimate of KL(π_θ ‖ π_ref) at each sampled
    token (>= 0)."""
    log_ref_over_pi = ref_logp.detach() - logp
    return torch.exp(log_ref_over_pi) - log_ref_over_pi - 1


def policy_loss(logp, old_logp, advantages, weights, *, eps_low=0.2, eps_high=0.28, beta=0.0,
                ref_logp=None, kl_weights=None):
    """Scalar loss to MINIMISE: -J = -Σ w·m·surrogate + β Σ w_kl·D, over token_objective's parts.

    weights: (N, T) from loss_weights (rows of the full-batch tensor for a micro-batch). kl_weights:
    where the KL term applies (defaults to `weights`, i.e. selected tokens only; pass weights built
    from the valid mask to apply it to every token: gmts/METHOD.md, "Normaliser", leaves the KL
    term's coverage as a stated choice). A token of weight 0 adds 0, even where its surrogate or KL
    is infinite (not 0 · inf = NaN).
    """
    surrogate, kl = token_objective(logp, old_logp, advantages, eps_low=eps_low, eps_high=eps_high,
                                    beta=beta, ref_logp=ref_logp)
    loss = -torch.where(weights != 0, weights.to(surrogate.dtype) * surrogate, 0.0).sum()  # w=0: 0
    if beta != 0.0:
        kl_w = (weights if kl_weights is None else kl_weights).to(kl.dtype)
        loss = loss + beta * torch.where(kl_w != 0, kl_w * kl, 0.0).sum()
    return loss
