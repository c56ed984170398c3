"""Stage 3 of the loop: group-relative advantages (gmts/METHOD.md, "One RLVR step"), and DAPO's length shaping of R.

    A_i = (R_i - mean(R_group)) / (std(R_group) + eps)

Every token of answer i gets the same A_i. A group whose rewards are all equal carries no signal: its A is exactly
0 for any reward values (tested with max == min, not left to float arithmetic), never NaN, whichever std option.
"""
import torch

from .options import STD_MODES  # "none" = Dr. GRPO: subtract the group mean, divide by nothing


def group_advantages(rewards, group_size, *, std="unbiased", eps=1e-6):
    """rewards (N,) float, answers to one prompt contiguous (N = Q * G). Returns A (N,) float32.

    std="unbiased" divides by the sample std (TRL's default, the reproduction's numbers: +2.47 / -0.35 in a group of
    eight with one correct answer); "biased" by the population std; "none" does not divide (Dr. GRPO).
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (N,), got shape {tuple(rewards.shape)}")
    if std not in STD_MODES:
        raise ValueError(f"std must be one of {STD_MODES}, got {std!r}")
    if not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"group_size must be an int >= 2 (a group of one answer has no baseline), got {group_size!r}")
    if rewards.numel() % group_size != 0:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    if not torch.isfinite(rewards).all():
        raise ValueError(f"rewards contain NaN/inf: {rewards.tolist()}")
    grouped = rewards.view(-1, group_size)                     # (Q, G)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    # All-equal groups get A = 0 EXACTLY, whatever the values (gmts/METHOD.md, "Exactness notes"): a float mean of
    # eight 0.3's is not exactly 0.3, and (0.3 - mean) / (std + eps) would give every answer |A| ~ 0.06 of noise.
    all_equal = grouped.amax(dim=1, keepdim=True) == grouped.amin(dim=1, keepdim=True)
    centred = centred.masked_fill(all_equal, 0.0)
    if std == "none":
        return centred.reshape(-1)
    spread = grouped.std(dim=1, keepdim=True, unbiased=(std == "unbiased"))
    return (centred / (spread + eps)).reshape(-1)


def mixed_groups(rewards, group_size):
    """(Q,) bool: groups whose rewards are not all equal, the only ones with a signal (max != min, exactly)."""
    grouped = torch.as_tensor(rewards).view(-1, group_size)
    return grouped.amax(dim=1) != grouped.amin(dim=1)


def overlong_penalty(lengths, max_new_tokens, buffer, factor=1.0):
    """DAPO's soft overlong punishment (gmts/METHOD.md, "One RLVR step": DAPO's optional overlong shaping), added to R.

    lengths (N,) completion lengths in tokens. An answer no longer than max_new_tokens - buffer costs nothing; in
    the last `buffer` tokens the cost grows linearly to `factor` at the limit (so an answer cut at the limit pays
    the whole factor): penalty = -factor * max(0, length - (max_new_tokens - buffer)) / buffer. Returns (N,) <= 0.
    buffer = 0 turns it off (all zeros).
    """
    lengths = torch.as_tensor(lengths, dtype=torch.float32)
    if not 0 <= buffer <= max_new_tokens:
        raise ValueError(f"overlong buffer must be in [0, max_new_tokens={max_new_tokens}], got {buffer}")
    if factor < 0:
        raise ValueError(f"overlong penalty factor must be >= 0, got {factor}")
    if buffer == 0:
        return torch.zeros_like(lengths)
    excess = (lengths - (max_new_tokens - buffer)).clamp(min=0)
    return -factor * excess / buffer
