"""gmts: GRPO with token selection (ETS, GMTS) in plain PyTorch.

The method as pure functions on tensors, one module per stage of the loop (see README.md and gmts/METHOD.md):

    advantage.py  group_advantages            A_i = (R_i - mean) / (std + eps)
    head.py       token_entropy, token_logprobs_and_entropy   E_it and log π(o_it), chunked over the vocabulary
    scores.py     token_omega, token_scores   ω_it and the selector's score (ETS: E, GMTS: |E·ω·w|)
    selection.py  select_tokens               exact batch-wide top-ρ mask
    loss.py       loss_weights, policy_loss   clipped surrogate + k3 KL, normalised over the whole batch
"""
import importlib

# Where each public name lives. Imported on first use (PEP 562), so that `import gmts.config` / `gmts.validate`
# do not load torch: the command line checks its flags before torch loads (~3 s) and a bad one fails at once.
_EXPORTS = {
    "advantage": ("group_advantages", "mixed_groups", "overlong_penalty"),
    "head": ("token_entropy", "token_logprobs_and_entropy"),
    "loss": ("check_loss_config", "kl_relative_weight", "loss_weights", "policy_loss", "relative_token_weight",
             "token_objective"),
    "scores": ("SELECTORS", "clip_active", "token_omega", "token_scores"),
    "selection": ("num_to_select", "select_tokens"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name):
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gmts' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_WHERE))
