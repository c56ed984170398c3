"""Stage 4 of the loop: the per-token scores that selection ranks (gmts/METHOD.md, "The gradient of one token" and
"Token scores and selection"). Everything here is a score, not part of the graph: no gradient flows through it.

Entropy itself is computed in gmts/head.py (chunked over the vocabulary, so no float32 (tokens, V) copy is made).
"""
import torch

from .options import SELECTORS


@torch.no_grad()
def token_omega(logp, old_logp, advantages, *, eps_low=0.2, eps_high=0.28, beta=0.0, ref_logp=None, kl_weight=1.0):
    """The scalar in front of each token's policy gradient (paper section 3, the gradient of eq. 2):

        ∇θ ℓ_it = ω_it · ∇θ log π_θ(o_it)
        ω_it = r_it · A_it · I(r_it, A_it) + β · π_ref(o_it)/π_θ(o_it) - β
        I(r, A) = 0 if (A > 0 and r > 1+ε2) or (A < 0 and r < 1-ε1) else 1

    logp, old_logp, ref_logp: (N, T) log-probabilities of the sampled tokens under π_θ, π_old, π_ref.
    advantages: (N,) per answer or (N, T) per token. Returns ω (N, T) in logp's dtype (float32 at least).
    kl_weight: the KL part's weight relative to the policy part in the aggregated loss (gmts/METHOD.md, "Length weight
    in ω"): 1 when both share a normaliser; S / N_valid when the policy term is divided by the selected count S and
    the KL term covers all N_valid tokens (loss_norm "selected" with kl_coverage "all", see loss.kl_relative_weight).
    """
    logp, old_logp = _as_float(logp), _as_float(old_logp)
    _check_same_shape(logp=logp, old_logp=old_logp)
    adv = broadcast_advantages(advantages, logp)
    ratio = torch.exp(logp - old_logp)
    omega = ratio * adv * (~clip_active(ratio, adv, eps_low, eps_high))
    if beta != 0.0:
        if ref_logp is None:
            raise ValueError(f"beta={beta} needs ref_logp (log-probs under the reference model)")
        ref_logp = _as_float(ref_logp)
        _check_same_shape(logp=logp, ref_logp=ref_logp)
        omega = omega + kl_weight * (beta * torch.exp(ref_logp - logp) - beta)
    return omega


def clip_active(ratio, advantages, eps_low, eps_high):
    """(N, T) bool: 1 - I(r, A), the tokens whose clip is active (their policy gradient is zero)."""
    adv = broadcast_advantages(advantages, ratio)
    return ((adv > 0) & (ratio > 1 + eps_high)) | ((adv < 0) & (ratio < 1 - eps_low))


@torch.no_grad()
def token_scores(selector, entropy, omega=None, *, weight=None, generator=None):
    """Scores that select_tokens ranks, (N, T) float, higher = more worth training on.

    none   -> None (select_tokens then keeps every valid token)
    ets    -> E_it                       (Wang et al. 2025: entropy alone)
    gmts   -> |E_it · ω_it · w_it|        (paper §3, δ_it; w_it = the token's weight in the aggregated loss,
                                           gmts/METHOD.md, "Length weight in ω"; 1 under a token-level mean)
    random -> Uniform(0, 1)              (the control: does ranking matter at all?)
    """
    if selector not in SELECTORS:
        raise ValueError(f"unknown selector {selector!r}; choose one of {SELECTORS}")
    if selector == "none":
        return None
    entropy = _as_float(entropy)
    if selector == "ets":
        return entropy.clone()
    if selector == "random":
        return torch.rand(entropy.shape, generator=generator, dtype=entropy.dtype, device=entropy.device)
    if omega is None:
        raise ValueError("selector 'gmts' needs omega (see token_omega)")
    omega = _as_float(omega)
    _check_same_shape(entropy=entropy, omega=omega)
    score = entropy * omega
    if weight is not None:
        score = score * torch.as_tensor(weight, dtype=score.dtype, device=score.device).expand_as(score)
    return score.abs()


def broadcast_advantages(advantages, like):
    """(N,) or (N, T) advantages -> (N, T) like `like`."""
    adv = _as_float(torch.as_tensor(advantages, device=like.device))
    if adv.dim() == 1:
        if adv.shape[0] != like.shape[0]:
            raise ValueError(f"advantages has {adv.shape[0]} rows but the tokens have {like.shape[0]}")
        return adv[:, None].expand_as(like)
    _check_same_shape(advantages=adv, tokens=like)
    return adv


def _as_float(x):
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _check_same_shape(**tensors):
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"shape mismatch: {shapes}")
