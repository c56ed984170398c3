"""Per-step selection diagnostics (reference/gmts-reproduction-notes.txt, "Log, every step").

Is the change reachable (would ETS and GMTS pick the same tokens?), how do the selected tokens spread over answers
(GMTS concentrates on the answers with the largest |A|), and on which side of the advantage do they fall, or in
answers with A = 0 (groups whose rewards are all equal), whose tokens use up selection budget but add nothing to the
policy gradient (METHOD.md, "Where the paper's text and the authors' code differ": ETS ranks them, GMTS scores
them 0). All figures are over the whole batch, across data-parallel ranks too.
"""
import torch

from . import distributed as dist
from .scores import token_scores


@torch.no_grad()
def selection_diagnostics(valid, advantages, entropy, omega, selected, ratio, weight=None):
    """valid, selected: (N, T) bool; advantages: (N,); entropy, omega: (N, T); weight: GMTS's w_it (or None)."""
    adv = advantages.to(valid.device)
    per_answer = selected.sum(dim=1)
    ets = dist.select_tokens_global(token_scores("ets", entropy), valid, ratio)
    gms = dist.select_tokens_global(token_scores("gmts", entropy, omega, weight=weight), valid, ratio)
    sums = dist.all_reduce_sum(torch.tensor([
        float(entropy[valid].sum()), float(entropy[selected].sum()), float(valid.sum()), float(selected.sum()),
        float((per_answer > 0).sum()), float(selected[adv > 0].sum()), float((ets & gms).sum()), float(ets.sum()),
        float(selected[adv == 0].sum()), float(ets[adv == 0].sum())], dtype=torch.float64)).tolist()
    ent_sum, ent_sel_sum, n_valid, n_sel, answers, positive, overlap, n_ets, zero, ets_zero = sums
    top = max(dist.gather_objects(int(per_answer.max()) if per_answer.numel() else 0))
    return {
        "entropy_mean": ent_sum / n_valid if n_valid else 0.0,
        "entropy_selected_mean": ent_sel_sum / n_sel if n_sel else 0.0,
        "valid_tokens": int(n_valid),
        "selected_tokens": int(n_sel),
        "answers_with_selected": int(answers),         # answers with at least one selected token
        "top_answer_share": top / n_sel if n_sel else 0.0,   # share of the selection held by the top answer
        "selected_share_positive_adv": positive / n_sel if n_sel else 0.0,
        "selected_share_zero_adv": zero / n_sel if n_sel else 0.0,   # budget spent where the gradient is 0 (β = 0)
        "ets_share_zero_adv": ets_zero / max(n_ets, 1),              # the same for ETS's top-ρ, whatever --selector
        "selection_overlap_ets_gmts": overlap / max(n_ets, 1),   # 1.0: the two arms would train on the same tokens
    }
