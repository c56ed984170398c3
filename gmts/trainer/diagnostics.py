"""Per-step selection diagnostics (gmts/METHOD.md, "What the reproduction learned").

Is the change reachable (would ETS and GMTS pick the same tokens?), how do the selected tokens spread over answers
(GMTS concentrates on the answers with the largest |A|), and on which side of the advantage do they fall, or in
answers with A = 0 (groups whose rewards are all equal), whose tokens use up selection budget but add nothing to the
policy gradient (gmts/METHOD.md, "Where the paper's text and the authors' code differ": ETS ranks them, GMTS scores
them 0). All figures are over the whole batch, across data-parallel ranks too.
"""
import torch

from gmts.trainer import distributed as dist
from gmts.method.grpo import token_scores


@torch.no_grad()
def selection_diagnostics(valid, advantages, entropy, omega, selected, ratio, weight=None, *, ets=None, gms=None):
    """valid, selected: (N, T) bool; advantages: (N,); entropy, omega: (N, T); weight: GMTS's w_it (or None).
    ets, gms: what ETS and GMTS would select (counterfactual_selections, with the run's scope, bottom and exclude
    settings, per optimizer batch); by default plain batch-wide top-ρ selections of the whole batch."""
    adv = advantages.to(valid.device)
    per_answer = selected.sum(dim=1)
    if ets is None:
        ets = dist.select_tokens_global(token_scores("ets", entropy), valid, ratio)
    if gms is None:
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


@torch.no_grad()
def counterfactual_selections(select, entropy, omega, weight):
    """What ETS and GMTS would each select here, with the run's own selection function (its ratio, scope, bottom
    and exclude settings): the two masks whose overlap says whether the arms can differ at all."""
    return select(token_scores("ets", entropy)), select(token_scores("gmts", entropy, omega, weight=weight))


def overlap(ets, gms):
    """|ETS ∩ GMTS| / |ETS| over all ranks (1.0: the two arms would train on the same tokens)."""
    both, n_ets = dist.all_reduce_sum(torch.tensor([float((ets & gms).sum()), float(ets.sum())],
                                                   dtype=torch.float64)).tolist()
    return both / max(n_ets, 1.0)


class UpdateLog:
    """One rollout batch's figures over all its optimizer steps (mini-batches x epochs), as one metrics line.

    The selection diagnostics describe the first pass over the batch (every row scored and selected once, each
    within its own mini-batch); the off-policy figures (clip share, |r - 1|) count every scored token of every
    pass; overlap, loss and grad norm are per optimizer step (mean, and min / max)."""

    def __init__(self, valid, advantages):
        self.valid, self.advantages = valid, advantages
        self.entropy = self.omega = self.weight = None      # (N, T), in the scores' dtype once the first arrive
        self.selected, self.ets, self.gms = (torch.zeros_like(valid) for _ in range(3))
        self.first_pass_rows = torch.zeros(valid.shape[0], dtype=torch.bool, device=valid.device)
        self.clipped = self.ratio_dev = self.scored = 0.0
        self.overlaps, self.losses, self.grad_norms, self.outcomes = [], [], [], []

    def scored_tokens(self, rows, valid, ratio, clipped):
        """Off-policy figures of one scoring: r and the clip indicator of `rows`' valid tokens."""
        sums = dist.all_reduce_sum(torch.tensor([float(clipped[valid].sum()), float((ratio[valid] - 1).abs().sum()),
                                                 float(valid.sum())], dtype=torch.float64)).tolist()
        self.clipped += sums[0]
        self.ratio_dev += sums[1]
        self.scored += sums[2]

    def selection(self, rows, entropy, omega, weight, selected, ets, gms):
        """One optimizer batch's selection and the two counterfactual ones; the first pass over each row is kept."""
        self.overlaps.append(overlap(ets, gms))
        first = ~self.first_pass_rows[rows]
        keep = rows[first]
        if self.entropy is None:
            self.entropy = torch.zeros(self.valid.shape, dtype=entropy.dtype, device=self.valid.device)
            self.omega = torch.zeros(self.valid.shape, dtype=omega.dtype, device=self.valid.device)
        self.entropy[keep] = entropy[first].to(self.entropy.dtype)
        self.omega[keep] = omega[first].to(self.omega.dtype)
        self.selected[keep], self.ets[keep], self.gms[keep] = selected[first], ets[first], gms[first]
        if weight is not None:
            if self.weight is None:
                self.weight = torch.ones(self.valid.shape, dtype=weight.dtype, device=self.valid.device)
            self.weight[keep] = weight[first].to(self.weight.dtype)
        self.first_pass_rows[keep] = True

    def update(self, loss, grad_norm, outcome):
        self.losses.append(loss)
        self.grad_norms.append(grad_norm)
        self.outcomes.append(outcome)

    def metrics(self, ratio):
        m = selection_diagnostics(self.valid, self.advantages, self.entropy, self.omega, self.selected, ratio,
                                  self.weight, ets=self.ets, gms=self.gms)
        n = len(self.losses)
        m.update(selection_overlap_ets_gmts=sum(self.overlaps) / len(self.overlaps),
                 selection_overlap_ets_gmts_min=min(self.overlaps),
                 loss=sum(self.losses) / n, grad_norm=sum(self.grad_norms) / n, grad_norm_max=max(self.grad_norms),
                 optimizer_steps=self.outcomes.count("stepped"),
                 clip_active_share=self.clipped / max(self.scored, 1.0),
                 ratio_abs_dev_mean=self.ratio_dev / max(self.scored, 1.0))
        bad = self.outcomes.count("non-finite")
        if bad:
            m["skipped"] = f"non-finite loss/gradient in {bad} of {n} updates"
        return m
