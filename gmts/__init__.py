"""gmts: GRPO with token selection (ETS, GMTS) in plain PyTorch.

The method as pure functions on tensors, one module per stage of the loop (see README.md and gmts/METHOD.md):

    advantage.py  group_advantages            A_i = (R_i - mean) / (std + eps)
    head.py       token_entropy, token_logprobs_and_entropy   E_it and log π(o_it), chunked over the vocabulary
    scores.py     token_omega, token_scores   ω_it and the selector's score (ETS: E, GMTS: |E·ω·w|)
    selection.py  select_tokens               exact batch-wide top-ρ mask
    loss.py       loss_weights, policy_loss   clipped surrogate + k3 KL, normalised over the whole batch
"""
from .advantage import group_advantages, mixed_groups, overlong_penalty
from .head import token_entropy, token_logprobs_and_entropy
from .loss import (check_loss_config, kl_relative_weight, loss_weights, policy_loss, relative_token_weight,
                   token_objective)
from .scores import SELECTORS, clip_active, token_omega, token_scores
from .selection import num_to_select, select_tokens

__all__ = [
    "group_advantages", "overlong_penalty", "token_entropy", "token_logprobs_and_entropy", "token_omega", "token_scores",
    "select_tokens", "num_to_select", "loss_weights", "policy_loss", "token_objective", "check_loss_config",
    "relative_token_weight", "SELECTORS", "clip_active", "kl_relative_weight", "mixed_groups",
]
