"""Stage 5 of the loop: keep the top-ρ tokens of the WHOLE batch (gmts/METHOD.md, "Token scores and selection").

The threshold is batch-wide on purpose: a per-row top-ρ would give every answer the same number of slots and throw
away the cross-answer comparison GMTS is about. Every selector keeps exactly k = ceil(ρ · n) tokens, so arms differ in
which tokens, never in how many. The ranking is an exact stable sort (ties -> lower flat index first), not
torch.quantile (interpolated threshold, more than k on ties, a 2^24-element limit).
"""
import math
from fractions import Fraction

import torch

from .options import SCOPES, check_ratio  # noqa: F401  (re-exported)


def num_to_select(ratio, n):
    """k = ceil(ρ · n), computed exactly on the decimal ρ the user wrote (0.3 · 10 = 3, not ceil(3.0000000000000004))."""
    check_ratio(ratio)
    return math.ceil(Fraction(repr(float(ratio))) * n)


@torch.no_grad()
def select_tokens(scores, valid_mask, ratio, *, scope="batch", group_ids=None, bottom=False, exclude=None):
    """Bool mask (N, T) of the selected tokens.

    scores     (N, T) float, or None (selector "none": every valid token is selected, ratio ignored)
    valid_mask (N, T) bool: real completion tokens (never prompt or padding)
    ratio      ρ in (0, 1]; k = ceil(ρ · n) with n the VALID tokens of the scope (capped at the eligible count)
    scope      "batch": one ranking over all tokens; "group": one ranking per group of answers (group_ids (N,)),
               as in the authors' GRPO-Zero fork (gmts/METHOD.md, "Scope of the ranking")
    bottom     keep the smallest scores instead (the paper's "Bottom" ablation)
    exclude    (N,) bool: answers left out of the ranking entirely (e.g. zero-advantage groups): never selected, but
               still counted in n, so the budget is the same as every other arm's
    """
    valid_mask = torch.as_tensor(valid_mask)
    if valid_mask.dtype != torch.bool or valid_mask.dim() != 2:
        raise ValueError(f"valid_mask must be a 2-D bool tensor (N, T), got {valid_mask.dtype} {tuple(valid_mask.shape)}")
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    check_ratio(ratio)
    eligible = valid_mask.clone()
    if exclude is not None:
        exclude = torch.as_tensor(exclude, device=valid_mask.device)
        if exclude.dtype != torch.bool or tuple(exclude.shape) != (valid_mask.shape[0],):
            raise ValueError(f"exclude must be bool of shape ({valid_mask.shape[0]},), got {exclude.dtype} {tuple(exclude.shape)}")
        eligible &= ~exclude[:, None]
    if scores is None:
        return eligible
    if tuple(scores.shape) != tuple(valid_mask.shape):
        raise ValueError(f"scores shape {tuple(scores.shape)} != valid_mask shape {tuple(valid_mask.shape)}")
    check_scores(scores, eligible)

    if scope == "batch":
        return _top_k_in(scores, valid_mask, eligible, ratio, bottom)
    if group_ids is None:
        raise ValueError("scope='group' needs group_ids (N,)")
    group_ids = torch.as_tensor(group_ids, device=valid_mask.device)
    if tuple(group_ids.shape) != (valid_mask.shape[0],):
        raise ValueError(f"group_ids must have shape ({valid_mask.shape[0]},), got {tuple(group_ids.shape)}")
    selected = torch.zeros_like(valid_mask)
    for g in torch.unique(group_ids):
        rows = group_ids == g
        selected |= _top_k_in(scores, valid_mask & rows[:, None], eligible & rows[:, None], ratio, bottom)
    return selected


def check_scores(scores, eligible):
    bad = eligible & ~torch.isfinite(scores)
    if bad.any():
        where = bad.nonzero()[0].tolist()
        raise ValueError(f"scores contain NaN/inf at {bad.sum().item()} valid positions, first at (row, col) = {where}: "
                         f"value {scores[where[0], where[1]].item()}")


def budget(ratio, n_valid, n_eligible):
    """k = ceil(ρ · N_valid), capped at the eligible count: leaving answers out of the ranking (exclude) changes which
    tokens compete, never how many are trained on (gmts/METHOD.md, "Exactness notes")."""
    return min(num_to_select(ratio, n_valid), n_eligible)


def _top_k_in(scores, valid, eligible, ratio, bottom):
    return top_k_mask(scores, eligible, budget(ratio, int(valid.sum()), int(eligible.sum())), bottom)


def top_k_mask(scores, eligible, k, bottom=False):
    """Exact top-k (or bottom-k) over the eligible positions; ties go to the lower flat index (stable sort)."""
    flat_idx = eligible.reshape(-1).nonzero().squeeze(1)           # (n,) flat positions of eligible tokens
    values = scores.reshape(-1)[flat_idx]
    order = torch.sort(values, descending=not bottom, stable=True).indices[:k]
    chosen = torch.zeros(eligible.numel(), dtype=torch.bool, device=eligible.device)
    chosen[flat_idx[order]] = True
    return chosen.view_as(eligible)
