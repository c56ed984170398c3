"""Stage 6 of the loop: the masked, clipped policy loss (gmts/METHOD.md, "One RLVR step" and "The loss").

    ℓ_it(θ) = min(r_it A_it, clip(r_it, 1-ε1, 1+ε2) A_it) - β D_it,   D_it = π_ref/π_θ - log(π_ref/π_θ) - 1 (k3)
    J(θ)    = Σ_i Σ_t w_it · m_it · ℓ_it(θ)

w_it carries the normaliser, computed ONCE on the whole optimizer batch (loss_weights), so that summing the losses
of any split of the batch into micro-batches gives exactly the full-batch loss and gradient.
"""
import torch

from .scores import broadcast_advantages

from .options import KL_COVERAGE, LOSS_NORMS, check_loss_config  # noqa: F401  (re-exported)


def loss_weights(valid_mask, selected_mask, loss_norm="selected", *, reduce=None):
    """Per-token weights w_it · m_it (N, T) float64 for the WHOLE optimizer batch; slice rows for micro-batches.

    reduce: sums a count over data-parallel ranks (gmts.distributed.all_reduce_sum) so the normaliser is global.

    selected           1/S on selected tokens, S = selected tokens in the batch (the paper's equation; DAPO's token mean)
    all                1/N_valid on selected tokens: the authors' code, TRL and verl (non-selected stay in the denominator)
    sequence           1/(N_answers · |o_i|) on selected tokens, |o_i| = the answer's full length
    sequence-selected  1/(N_answers · S_i), S_i = the answer's selected count (TRL loss_type="grpo" with a mask;
                       only meaningful without selection: see check_loss_config)
    """
    if loss_norm not in LOSS_NORMS:
        raise ValueError(f"loss_norm must be one of {LOSS_NORMS}, got {loss_norm!r}")
    if valid_mask.shape != selected_mask.shape:
        raise ValueError(f"valid_mask {tuple(valid_mask.shape)} and selected_mask {tuple(selected_mask.shape)} differ")
    if (selected_mask & ~valid_mask).any():
        raise ValueError("selected_mask selects padding/prompt positions (not in valid_mask)")
    total = reduce or (lambda count: count)
    m = selected_mask.double()               # float64: 1/S exact to 1e-16 whatever the model's dtype
    if loss_norm == "selected":
        return m / total(m.sum()).clamp(min=1)
    if loss_norm == "all":
        return m / total(valid_mask.sum()).clamp(min=1).double()
    n_answers = total(torch.tensor(valid_mask.shape[0], device=valid_mask.device)).double()
    per_answer = (valid_mask if loss_norm == "sequence" else selected_mask).sum(dim=1, keepdim=True).clamp(min=1)
    return m / (per_answer.double() * n_answers)


def relative_token_weight(valid_mask, loss_norm):
    """w_it up to a batch-wide constant, for the GMTS score |E · ω · w| (gmts/METHOD.md, "Length weight in ω").
    Constant (None) under token means; 1/|o_i| under per-answer normalisation."""
    if loss_norm in ("sequence", "sequence-selected"):
        return 1.0 / valid_mask.sum(dim=1, keepdim=True).clamp(min=1).float().expand_as(valid_mask)
    return None


def kl_relative_weight(loss_norm, kl_coverage, n_selected, n_valid):
    """The KL term's weight over the policy term's for a SELECTED token, w_kl / w_pol (for token_omega's kl_weight).

    Only loss_norm "selected" with kl_coverage "all" separates them: the policy part is divided by the selected
    count S, the KL part by every valid token N_valid, so a token's true gradient coefficient is
    (r·A·I)/S + β(π_ref/π - 1)/N_valid = (1/S) · (r·A·I + (S/N_valid) · β(π_ref/π - 1)). Every other combination
    divides both parts alike (1)."""
    if loss_norm == "selected" and kl_coverage == "all" and n_valid > 0:
        return n_selected / n_valid
    return 1.0


def token_objective(logp, old_logp, advantages, *, eps_low=0.2, eps_high=0.28, beta=0.0, ref_logp=None):
    """Per-token parts of ℓ_it, both (N, T): the clipped surrogate and the k3 KL estimate D_it (0 when β = 0).
    logp carries the gradient; old_logp and ref_logp are constants."""
    adv = broadcast_advantages(advantages, logp).to(logp.dtype)
    ratio = torch.exp(logp - old_logp.detach())
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv)
    if beta == 0.0:
        return surrogate, torch.zeros_like(surrogate)
    if ref_logp is None:
        raise ValueError(f"beta={beta} needs ref_logp")
    log_ref_over_pi = ref_logp.detach() - logp
    kl = torch.exp(log_ref_over_pi) - log_ref_over_pi - 1
    return surrogate, kl


def policy_loss(logp, old_logp, advantages, weights, *, eps_low=0.2, eps_high=0.28, beta=0.0, ref_logp=None,
                kl_weights=None):
    """Scalar loss to MINIMISE: -J = -Σ w·m·surrogate + β Σ w_kl·D.

    weights: (N, T) from loss_weights (rows of the full-batch tensor for a micro-batch).
    kl_weights: where the KL term applies (defaults to `weights`, i.e. selected tokens only; pass weights built from
    the valid mask to apply it to every token: gmts/METHOD.md, "Normaliser", leaves the KL term's coverage as a stated choice).
    """
    surrogate, kl = token_objective(logp, old_logp, advantages, eps_low=eps_low, eps_high=eps_high, beta=beta,
                                    ref_logp=ref_logp)
    weights = weights.to(surrogate.dtype)
    # torch.where, not a bare product: a non-finite value at an unselected position must not leak in as 0 * inf.
    loss = -torch.where(weights != 0, weights * surrogate, 0.0).sum()
    if beta != 0.0:
        kl_w = weights if kl_weights is None else kl_weights.to(kl.dtype)
        loss = loss + beta * torch.where(kl_w != 0, kl_w * kl, 0.0).sum()
    return loss
