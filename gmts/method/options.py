"""The names of the method's options and their pure checks, without torch: the command line checks
every flag with these before torch loads, so a bad flag fails in a fraction of a second
(gmts/run/validate.py)."""

def check(ok, message):
    """Bad input is one ValueError naming the bad value. message: the text, or a function making it
    when that costs (it is then made only on failure)."""
    if not ok:
        raise ValueError(message() if callable(message) else message)


SELECTORS = ("none", "ets", "gmts", "random")                  # gmts/method/grpo.py
SCOPES = ("batch", "group")                                     # gmts/method/grpo.py
LOSS_NORMS = ("selected", "all", "sequence", "sequence-selected")   # gmts/method/grpo.py
KL_COVERAGE = ("selected", "all")
# "none" = Dr. GRPO: subtract the group mean, divide by nothing
STD_MODES = ("unbiased", "biased", "none")


def check_loss_config(selector, ratio, loss_norm):
    """Refuse combinations that silently test nothing (gmts/METHOD.md, "The loss")."""
    if loss_norm not in LOSS_NORMS:
        raise ValueError(f"loss_norm must be one of {LOSS_NORMS}, got {loss_norm!r}")
    if loss_norm == "sequence-selected" and selector != "none" and ratio < 1.0:
        raise ValueError(
            f"loss_norm='sequence-selected' with selector={selector!r}: dividing each answer by "
            "its own SELECTED count cancels the effect of giving one answer more of the selected "
            "tokens, so the selector would test nothing (gmts/METHOD.md, 'The loss'). Use "
            "loss_norm 'selected', 'all' or 'sequence' (full answer length).")
