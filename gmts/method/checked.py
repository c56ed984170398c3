"""gmts/method/grpo.py's functions with every argument checked: a bad one is one ValueError naming
it. This is the method as `import gmts` exports it (gmts.select_tokens, ...), for a caller building
its own tensors (the notebooks, another trainer, a test). grpo.py checks nothing itself: train.py
calls it with tensors it built (their shapes, dtypes and masks hold by construction), options the
command line checked once (gmts/run/validate.py) and rewards the scorer checked (rewards/). Each
function here checks (an option's name too: grpo reads an unknown one as its table's KeyError),
then returns grpo's result unchanged. What grpo takes as the trainer builds it is handed on so:
advantages as a tensor on the tokens' device, log-probs and entropies in float32 at least (a
bf16 ratio near 1 would misplace the clip; bf16 scores would tie)."""
import torch

from gmts.method import grpo
from gmts.method.options import LOSS_NORMS, SCOPES, SELECTORS, STD_MODES, check


def group_advantages(rewards, group_size, *, std="unbiased", eps=1e-6):
    """grpo.group_advantages, checked: rewards (N,) finite, N a multiple of group_size >= 2."""
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    check(rewards.dim() == 1, f"rewards must be 1-D (N,), got shape {tuple(rewards.shape)}")
    check(std in STD_MODES, f"std must be one of {STD_MODES}, got {std!r}")
    check(isinstance(group_size, int) and group_size >= 2,     # one answer has no baseline
          f"group_size must be an int >= 2, got {group_size!r}")
    check(rewards.numel() % group_size == 0,
          f"{rewards.numel()} rewards do not split into groups of {group_size}")
    check(torch.isfinite(rewards).all(), lambda: f"rewards contain NaN/inf: {rewards.tolist()}")
    return grpo.group_advantages(rewards, group_size, std=std, eps=eps)


def overlong_penalty(lengths, max_new_tokens, buffer, factor=1.0):
    """grpo.overlong_penalty, checked: 0 <= buffer <= max_new_tokens, factor >= 0."""
    check(0 <= buffer <= max_new_tokens,
          f"overlong buffer must be in [0, max_new_tokens={max_new_tokens}], got {buffer}")
    check(factor >= 0, f"overlong penalty factor must be >= 0, got {factor}")
    return grpo.overlong_penalty(lengths, max_new_tokens, buffer, factor)


def token_omega(logp, old_logp, advantages, *, eps_low=0.2, eps_high=0.28, beta=0.0,
                ref_logp=None, kl_share=1.0):
    """grpo.token_omega, checked: logp, old_logp (and ref_logp, needed when beta != 0) of one shape;
    advantages per row or per token."""
    _same_shape(logp=logp, old_logp=old_logp)
    advantages = _advantages(advantages, logp)
    _reference(beta, ref_logp, logp)
    logp = _float(logp)                                         # ω in float32 at least
    return grpo.token_omega(logp, old_logp, advantages, eps_low=eps_low, eps_high=eps_high,
                            beta=beta, ref_logp=ref_logp, kl_share=kl_share)


def clip_active(r, advantages, eps_low, eps_high):
    """grpo.clip_active, checked: advantages per row or per token of r."""
    advantages = _advantages(advantages, r)
    return grpo.clip_active(r, advantages, eps_low, eps_high)


def token_scores(selector, entropy, omega=None, weight=None, generator=None):
    """grpo.token_scores, checked: a known selector; "gmts" needs omega, shaped like entropy."""
    check(selector in SELECTORS, f"unknown selector {selector!r}; choose one of {SELECTORS}")
    if selector == "gmts":
        check(omega is not None, "selector 'gmts' needs omega (see token_omega)")
        _same_shape(entropy=entropy, omega=omega)
    entropy = _float(entropy)
    if weight is not None:                       # w_it: a number or a tensor broadcasting to (N, T)
        weight = torch.as_tensor(weight, dtype=entropy.dtype, device=entropy.device)
    return grpo.token_scores(selector, entropy, omega, weight=weight, generator=generator)


def check_ratio(ratio):
    """ρ must be a number in (0, 1] (a bool is not a number here)."""
    check(isinstance(ratio, (int, float)) and not isinstance(ratio, bool)
          and 0.0 < float(ratio) <= 1.0, f"ratio must be in (0, 1], got {ratio!r}")


def num_to_select(ratio, n):
    """grpo.num_to_select, checked: ρ in (0, 1]."""
    check_ratio(ratio)
    return grpo.num_to_select(ratio, n)


def select_tokens(scores, valid_mask, ratio, *, scope="batch", group_ids=None, bottom=False,
                  exclude=None):
    """grpo.select_tokens, checked: valid_mask (N, T) bool, a known scope, ρ in (0, 1], exclude
    (N,) bool; with scores: scores (N, T) finite wherever they compete, group_ids (N,) for scope
    "group"."""
    valid_mask = torch.as_tensor(valid_mask)
    check(valid_mask.dtype == torch.bool and valid_mask.dim() == 2,
          f"valid_mask must be a 2-D bool tensor (N, T), got {valid_mask.dtype} "
          f"{tuple(valid_mask.shape)}")
    check(scope in SCOPES, f"scope must be one of {SCOPES}, got {scope!r}")
    check_ratio(ratio)
    n = valid_mask.shape[0]
    if exclude is not None:
        exclude = torch.as_tensor(exclude, device=valid_mask.device)
        check(exclude.dtype == torch.bool and tuple(exclude.shape) == (n,),
              f"exclude must be bool of shape ({n},), got {exclude.dtype} {tuple(exclude.shape)}")
    if scores is not None:
        _same_shape(scores=scores, valid_mask=valid_mask)
        check_scores(scores, valid_mask if exclude is None else valid_mask & ~exclude[:, None])
        if scope == "group":
            check(group_ids is not None, "scope='group' needs group_ids (N,)")
            group_ids = torch.as_tensor(group_ids, device=valid_mask.device)
            check(tuple(group_ids.shape) == (n,),
                  f"group_ids must have shape ({n},), got {tuple(group_ids.shape)}")
    return grpo.select_tokens(scores, valid_mask, ratio, scope=scope, group_ids=group_ids,
                              bottom=bottom, exclude=exclude)


def check_scores(scores, eligible):
    """Scores must be finite wherever they compete (`eligible`); the first bad one is named."""
    bad = eligible & ~torch.isfinite(scores)
    check(not bad.any(), lambda: _non_finite_message(scores, bad))


def _non_finite_message(scores, bad):
    where = bad.nonzero()[0].tolist()
    return (f"scores contain NaN/inf at {bad.sum().item()} valid positions, first at (row, col) = "
            f"{where}: value {scores[where[0], where[1]].item()}")


def loss_weights(valid_mask, selected_mask, loss_norm="selected", reduce=None):
    """grpo.loss_weights, checked: a known loss_norm, both masks of one shape, nothing selected
    outside valid_mask."""
    check(loss_norm in LOSS_NORMS, f"unknown loss_norm {loss_norm!r}; choose one of {LOSS_NORMS}")
    _same_shape(valid_mask=valid_mask, selected_mask=selected_mask)
    check(not (selected_mask & ~valid_mask).any(),
          "selected_mask selects padding/prompt positions (not in valid_mask)")
    return grpo.loss_weights(valid_mask, selected_mask, loss_norm, reduce=reduce)


def token_objective(logp, old_logp, advantages, *, eps_low=0.2, eps_high=0.28, beta=0.0,
                    ref_logp=None):
    """grpo.token_objective, checked: advantages per row or per token; ref_logp when beta != 0."""
    advantages = _advantages(advantages, logp)
    check(beta == 0.0 or ref_logp is not None, f"beta={beta} needs ref_logp")
    return grpo.token_objective(logp, old_logp, advantages, eps_low=eps_low, eps_high=eps_high,
                                beta=beta, ref_logp=ref_logp)


def policy_loss(logp, old_logp, advantages, weights, *, eps_low=0.2, eps_high=0.28, beta=0.0,
                ref_logp=None, kl_weights=None):
    """grpo.policy_loss, checked like token_objective."""
    advantages = _advantages(advantages, logp)
    check(beta == 0.0 or ref_logp is not None, f"beta={beta} needs ref_logp")
    return grpo.policy_loss(logp, old_logp, advantages, weights, eps_low=eps_low,
                            eps_high=eps_high, beta=beta, ref_logp=ref_logp, kl_weights=kl_weights)


def _float(x):
    """x in float32 at least (float64 stays)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _same_shape(**tensors):
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    check(len(set(shapes.values())) == 1, f"shape mismatch: {shapes}")


def _advantages(advantages, like):
    """advantages: (N,), one per row of `like` (N, T), or (N, T). Returns them as a tensor on
    like's device."""
    adv = torch.as_tensor(advantages, device=like.device)
    if adv.dim() == 1:
        check(adv.shape[0] == like.shape[0],
              f"advantages has {adv.shape[0]} rows but the tokens have {like.shape[0]}")
    else:
        _same_shape(advantages=adv, tokens=like)
    return adv


def _reference(beta, ref_logp, logp):
    """The KL term (beta != 0) needs ref_logp, shaped like logp."""
    if beta != 0.0:
        check(ref_logp is not None,
              f"beta={beta} needs ref_logp (log-probs under the reference model)")
        _same_shape(logp=logp, ref_logp=ref_logp)
