"""Per-step selection diagnostics (gmts/METHOD.md, "What the reproduction learned").

Is the change reachable (would ETS and GMTS pick the same tokens?), how do the selected tokens spread over answers
(GMTS concentrates on the answers with the largest |A|), and on which side of the advantage do they fall, or in
answers with A = 0 (groups whose rewards are all equal), whose tokens use up selection budget but add nothing to the
policy gradient (gmts/METHOD.md, "Where the paper's text and the authors' code differ": ETS ranks them, GMTS scores
them 0). All figures are over the whole batch, across data-parallel ranks too. Also the rollout's figures and the
logged samples of a step (rollout_figures, logged_samples): everything train.py logs besides the timings.
"""
import functools

import torch

from gmts.method.grpo import clip_active, mixed_groups, token_scores
from gmts.trainer.step import processes, select
from gmts.trainer.update_stats import GradNoiseProbe, combine_steps, update_answers_effective


def rollout_figures(cfg, batch, R, ranks):
    """The rollout's figures over every rank: reward_mean and accuracy (the share with R >= 1) over every answer
    sampled in the step (dynamic sampling's dropped groups included), then over the training batch: groups,
    mixed_groups, response_len_mean (tokens). Or `skipped` when a rank kept no group (batch None). R: (n,) every
    sampled answer's reward."""
    mixed = 0 if batch is None else int(mixed_groups(batch.rewards, cfg.group_size).sum())
    kept = [0, 0, 0] if batch is None else [len(batch.problems), int(batch.valid.sum()), len(batch.valid)]
    n, reward_sum, correct, have_batch, mixed, groups, len_sum, answers = ranks.sum(torch.tensor(
        [R.numel(), R.sum(), (R >= 1.0).sum(), batch is not None, mixed, *kept], dtype=torch.float64)).tolist()
    figures = dict(reward_mean=reward_sum / max(n, 1), accuracy=correct / max(n, 1))
    if have_batch < ranks.world:
        return dict(figures, skipped="no group with mixed rewards")
    return dict(figures, groups=int(groups), response_len_mean=len_sum / answers, mixed_groups=int(mixed))


def logged_samples(step, batch, selected, cfg):
    """samples.jsonl's lines for this step: the first answer of each of the first --log-samples groups, with its
    reward, advantage and how many of its tokens the update trained on (selected (N, T), the first pass's)."""
    G = cfg.group_size
    return [{"step": step, "problem": p.id, "completion": batch.texts[i * G], "answer": str(p.answer),
             "reward": float(batch.rewards[i * G]), "advantage": float(batch.advantages[i * G]),
             "selected_tokens": int(selected[i * G].sum())} for i, p in enumerate(batch.problems[:cfg.log_samples])]


@torch.no_grad()
def selection_diagnostics(valid, advantages, entropy, omega, selected, ratio, weight=None, *, ets=None, gms=None,
                          ranks=None):
    """valid, selected: (N, T) bool; advantages: (N,); entropy, omega: (N, T); weight: GMTS's w_it (or None).
    ets, gms: what ETS and GMTS would select (counterfactual_selections, with the run's scope, bottom and exclude
    settings, per optimizer batch); by default plain batch-wide top-ρ selections of the whole batch.
    ranks: OneProcess / Torchrun (gmts/trainer/step.py; default: processes()). Returns, over every rank:

    entropy_mean, entropy_selected_mean   mean E of the valid / of the selected tokens
    valid_tokens, selected_tokens         N_valid and S
    answers_with_selected                 answers with at least one selected token
    top_answer_share                      the share of the selection held by the answer with the most of it
    selected_share_positive_adv           the share of the selection in answers with A > 0
    selected_share_zero_adv               ... in answers with A = 0: budget spent where the gradient is 0 (β = 0)
    ets_share_zero_adv                    the same for ETS's top-ρ, whatever --selector
    selection_overlap_ets_gmts            |ETS ∩ GMTS| / |ETS|; 1.0: the two arms would train on the same tokens
    """
    ranks = ranks or processes()
    adv = advantages.to(valid.device)
    per_answer = selected.sum(dim=1)
    if ets is None or gms is None:
        ets, gms = counterfactual_selections(lambda s: ranks.select_tokens(s, valid, ratio), entropy, omega, weight)
    ent_sum, ent_sel_sum, n_valid, n_sel, answers, positive, both, n_ets, zero, ets_zero = ranks.sum(torch.tensor([
        float(entropy[valid].sum()), float(entropy[selected].sum()), float(valid.sum()), float(selected.sum()),
        float((per_answer > 0).sum()), float(selected[adv > 0].sum()), float((ets & gms).sum()), float(ets.sum()),
        float(selected[adv == 0].sum()), float(ets[adv == 0].sum())], dtype=torch.float64)).tolist()
    top = max(ranks.gather(int(per_answer.max()) if per_answer.numel() else 0))
    per_selected = (lambda x: x / n_sel) if n_sel else (lambda x: 0.0)
    return dict(entropy_mean=ent_sum / n_valid if n_valid else 0.0, entropy_selected_mean=per_selected(ent_sel_sum),
                valid_tokens=int(n_valid), selected_tokens=int(n_sel), answers_with_selected=int(answers),
                top_answer_share=per_selected(top), selected_share_positive_adv=per_selected(positive),
                selected_share_zero_adv=per_selected(zero), ets_share_zero_adv=ets_zero / max(n_ets, 1),
                selection_overlap_ets_gmts=both / max(n_ets, 1))


@torch.no_grad()
def counterfactual_selections(select, entropy, omega, weight):
    """What ETS and GMTS would each select here, with the run's own selection function (its ratio, scope, bottom
    and exclude settings): the two masks whose overlap says whether the arms can differ at all."""
    return select(token_scores("ets", entropy)), select(token_scores("gmts", entropy, omega, weight=weight))


def overlap(ets, gms, ranks=None):
    """|ETS ∩ GMTS| / |ETS| over all ranks (1.0: the two arms would train on the same tokens)."""
    both, n_ets = (ranks or processes()).sum(torch.tensor([float((ets & gms).sum()), float(ets.sum())],
                                                          dtype=torch.float64)).tolist()
    return both / max(n_ets, 1.0)


class UpdateLog:
    """One rollout batch's figures over all its optimizer steps (mini-batches x epochs), as one metrics line.

    The step only records (record: it keeps references to what each optimizer step computed, and the first pass's
    selection, which update_policy returns); the figures are computed when metrics() is called, after the step, by
    train.py's main loop when it logs. So the story of one step carries none of this file's arithmetic, and a reader
    can skip it. The selection diagnostics describe the first pass over the batch (every row scored and selected
    once, each within its own mini-batch); the off-policy figures (clip share, |r - 1|) count every scored token of
    every pass; overlap, loss, grad norm and n_eff are per optimizer step (mean, and min / max; η: median)."""

    def __init__(self, cfg, batch, ranks, params=()):
        """batch: the rollout Batch (gmts/trainer/step.py) on the training device; params: the trainable parameters,
        for the gradient-noise probe (--log-grad-noise: one parameter-sized buffer, gmts/trainer/update_stats.py)."""
        self.cfg, self.batch, self.ranks, self.records = cfg, batch, ranks, []
        self.valid, self.advantages = batch.valid, batch.advantages
        self.selected = torch.zeros_like(self.valid)             # the first pass's selection (N, T)
        self.first_pass_rows = torch.zeros(self.valid.shape[0], dtype=torch.bool, device=self.valid.device)
        self.noise = GradNoiseProbe(params) if cfg.log_grad_noise else None

    def record(self, mb, *, selected, grad_norm, outcome, **tensors):
        """One optimizer step: its mini-batch `mb` (gmts/trainer/step.py), stage 4's logp, entropy, omega and
        length_weight (n, T), stage 5's selection, stage 6's loss_weights and what stage 7 did (loss, grad_norm,
        outcome). The noise probe's figures are taken now: its buffer is reused by the next optimizer step."""
        new = ~self.first_pass_rows[mb.rows]                     # rows met for the first time in this update
        self.selected[mb.rows[new]], self.first_pass_rows[mb.rows[new]] = selected[new], True
        noise = self.noise.metrics(grad_norm) if self.noise is not None and outcome != "nothing" else {}
        self.records.append((mb, dict(tensors, selected=selected, grad_norm=grad_norm, outcome=outcome), noise))

    @torch.no_grad()
    def metrics(self):
        """The metrics line's figures of every recorded optimizer step (see the module docstring and
        selection_diagnostics for their meaning). Off-policy figures from the importance ratio r = π_θ / π_old;
        what ETS and GMTS would keep at ρ, with the run's own scope, bottom and exclude (whatever --selector);
        n_eff of W_i = Σ_t |ω_it| w_it over the selection (gmts/METHOD.md, "How concentrated an update is")."""
        cfg, ranks = self.cfg, self.ranks
        entropy = torch.zeros(self.valid.shape, dtype=torch.float64, device=self.valid.device)
        ets, gms, seen = torch.zeros_like(self.valid), torch.zeros_like(self.valid), torch.zeros_like(self.first_pass_rows)
        off_policy, steps, concentration = torch.zeros(3, dtype=torch.float64), [], []
        for mb, step, noise in self.records:
            valid, r = mb.valid, torch.exp(step["logp"] - mb.old_logp)
            clipped = clip_active(r, mb.advantages, cfg.eps_low, cfg.eps_high)
            off_policy += ranks.sum(torch.tensor([float(clipped[valid].sum()), float((r[valid] - 1).abs().sum()),
                                                  float(valid.sum())], dtype=torch.float64))
            choose = functools.partial(select, cfg, valid=valid, group_ids=mb.group_ids, exclude=mb.exclude,
                                       ratio=cfg.ratio, ranks=ranks)
            step_ets, step_gms = counterfactual_selections(choose, step["entropy"], step["omega"],
                                                           step["length_weight"])
            first = ~seen[mb.rows]
            keep = mb.rows[first]
            entropy[keep], ets[keep], gms[keep], seen[keep] = step["entropy"][first].double(), step_ets[first], \
                step_gms[first], True
            steps.append((overlap(step_ets, step_gms, ranks), step["loss"], step["grad_norm"], step["outcome"]))
            if step["outcome"] != "non-finite":                 # ω or the weights may hold NaN: nothing to spread
                concentration.append(dict(update_answers_effective(
                    step["omega"], step["loss_weights"], reduce=ranks.sum, reduce_max=lambda top: torch.tensor(
                        max(ranks.gather(float(top))), dtype=torch.float64)), **noise))
        m = selection_diagnostics(self.valid, self.advantages, entropy, None, self.selected, cfg.ratio,
                                  ets=ets, gms=gms, ranks=ranks)
        overlaps, losses, grad_norms, outcomes = zip(*steps)
        clipped, ratio_dev, scored = off_policy.tolist()
        m.update(selection_overlap_ets_gmts=sum(overlaps) / len(overlaps), selection_overlap_ets_gmts_min=min(overlaps),
                 loss=sum(losses) / len(losses), grad_norm=sum(grad_norms) / len(grad_norms),
                 grad_norm_max=max(grad_norms), optimizer_steps=outcomes.count("stepped"),
                 clip_active_share=clipped / max(scored, 1.0), ratio_abs_dev_mean=ratio_dev / max(scored, 1.0))
        m.update(combine_steps(concentration))      # n_eff, top-1 share, η, B_simple (gmts/trainer/update_stats.py)
        if "non-finite" in outcomes:
            m["skipped"] = f"non-finite loss/gradient in {outcomes.count('non-finite')} of {len(outcomes)} updates"
        return m

    def samples(self, step):
        """samples.jsonl's lines for this step (logged_samples), with the first pass's selection."""
        return logged_samples(step, self.batch, self.selected, self.cfg)
