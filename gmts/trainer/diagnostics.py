"""Per-step selection diagnostics (gmts/METHOD.md, "What the reproduction learned").

Is the change reachable (would ETS and GMTS pick the same tokens?), how do the selected tokens
spread over answers (GMTS concentrates on the answers with the largest |A|), and on which side of
the advantage do they fall, or in answers with A = 0 (groups whose rewards are all equal), whose
tokens use up selection budget but add nothing to the policy gradient (gmts/METHOD.md, "Where the
paper's text and the authors' code differ": ETS ranks them, GMTS scores them 0). All figures are
over the whole batch, across data-parallel ranks too. Also the rollout's figures and the logged
samples of a step (rollout_figures, logged_samples): everything train.py logs besides the timings.
"""
import functools

import torch

from gmts.method.grpo import clip_active, mixed_groups, token_scores
from gmts.trainer import distributed
from gmts.trainer.batches import (NON_FINITE, NOTHING, STEPPED, accumulate_gradients,
                                  batch_select, batch_sum, several_processes)
from gmts.trainer.update_stats import GradNoiseProbe, combine_steps, update_answers_effective


def batch_max(x):
    """The largest of every process's x (a number)."""
    return max(distributed.gather_objects(x))


def rollout_figures(cfg, batch, R):
    """The rollout's figures over every process: reward_mean and accuracy (the share with R >= 1)
    over every answer sampled in the step (dynamic sampling's dropped groups included), then over
    the training batch: groups, mixed_groups, response_len_mean (tokens). Or `skipped` when a
    process kept no group (batch None). R: (n,) every sampled answer's reward."""
    mixed = 0 if batch is None else int(mixed_groups(batch.rewards, cfg.group_size).sum())
    kept = [0, 0, 0] if batch is None else [len(batch.problems), int(batch.valid_mask.sum()),
                                            len(batch.valid_mask)]
    # one sum over the processes: counts, sums, and 1 per process
    sums = [R.numel(), R.sum(), (R >= 1.0).sum(), batch is not None, 1, mixed, *kept]
    n, reward_sum, correct, have_batch, processes, mixed, groups, len_sum, answers = batch_sum(
        torch.tensor(sums, dtype=torch.float64)).tolist()
    figures = {"reward_mean": reward_sum / max(n, 1), "accuracy": correct / max(n, 1)}
    if have_batch < processes:
        return dict(figures, skipped="no group with mixed rewards")
    return dict(figures, groups=int(groups), response_len_mean=len_sum / answers,
                mixed_groups=int(mixed))


def logged_samples(step, batch, selected, cfg):
    """samples.jsonl's lines for this step: the first answer of each of the first --log-samples
    groups, with its reward, advantage and how many of its tokens the update trained on (selected
    (N, T), the first pass's)."""
    G = cfg.group_size
    return [{"step": step, "problem": p.id, "completion": batch.texts[i * G],
             "answer": str(p.answer),
             "reward": float(batch.rewards[i * G]), "advantage": float(batch.advantages[i * G]),
             "selected_tokens": int(selected[i * G].sum())} for i,
            p in enumerate(batch.problems[:cfg.log_samples])]


@torch.no_grad()
def selection_diagnostics(valid, advantages, entropy, omega, selected, ratio, weight=None, *,
                          ets=None, gms=None):
    """valid, selected: (N, T) bool; advantages: (N,); entropy, omega: (N, T); weight: GMTS's w_it
    (or None). ets, gms: what ETS and GMTS would select (counterfactual_selections, with the run's
    scope, bottom and exclude settings, per optimizer batch); by default plain batch-wide top-ρ
    selections of the whole batch. Returns, over every process:

    entropy_mean, entropy_selected_mean  mean E of the valid / of the selected tokens
    valid_tokens, selected_tokens  N_valid and S
    answers_with_selected        answers with at least one selected token
    top_answer_share             the share of the selection held by the answer with the most of it
    selected_share_positive_adv  the share of the selection in answers with A > 0
    selected_share_zero_adv      ... in answers with A = 0: budget spent where the gradient is 0
    ets_share_zero_adv           the same for ETS's top-ρ, whatever --selector
    selection_overlap_ets_gmts   |ETS ∩ GMTS| / |ETS|; 1.0: the arms would train on the same tokens
    """
    adv = advantages.to(valid.device)
    per_answer = selected.sum(dim=1)
    if ets is None or gms is None:
        ets, gms = counterfactual_selections(lambda s: batch_select(s, valid, ratio), entropy,
                                             omega, weight)
    sums = batch_sum(torch.tensor([
        float(entropy[valid].sum()), float(entropy[selected].sum()), float(valid.sum()),
        float(selected.sum()), float((per_answer > 0).sum()), float(selected[adv > 0].sum()),
        float((ets & gms).sum()), float(ets.sum()), float(selected[adv == 0].sum()),
        float(ets[adv == 0].sum())], dtype=torch.float64)).tolist()
    ent_sum, ent_sel_sum, n_valid, n_sel, answers, positive, both, n_ets, zero, ets_zero = sums
    top = batch_max(int(per_answer.max()) if per_answer.numel() else 0)
    per_selected = (lambda x: x / n_sel) if n_sel else (lambda x: 0.0)
    return {"entropy_mean": ent_sum / n_valid if n_valid else 0.0,
            "entropy_selected_mean": per_selected(ent_sel_sum),
            "valid_tokens": int(n_valid), "selected_tokens": int(n_sel),
            "answers_with_selected": int(answers),
            "top_answer_share": per_selected(top),
            "selected_share_positive_adv": per_selected(positive),
            "selected_share_zero_adv": per_selected(zero),
            "ets_share_zero_adv": ets_zero / max(n_ets, 1),
            "selection_overlap_ets_gmts": both / max(n_ets, 1)}


@torch.no_grad()
def counterfactual_selections(select, entropy, omega, weight):
    """What ETS and GMTS would each select here, with the run's own selection function (its ratio,
    scope, bottom and exclude settings): the two masks whose overlap says whether the arms can
    differ at all."""
    return select(token_scores("ets", entropy)), select(token_scores("gmts", entropy, omega,
                                                                     weight=weight))


def overlap(ets, gms):
    """|ETS ∩ GMTS| / |ETS| over every process (1.0: the two arms would train on the same
    tokens)."""
    both, n_ets = batch_sum(torch.tensor([float((ets & gms).sum()), float(ets.sum())],
                                         dtype=torch.float64)).tolist()
    return both / max(n_ets, 1.0)


class GradNoise:
    """--log-grad-noise (gmts/METHOD.md, "How concentrated an update is"): train.update_policy's
    accumulate and the figures of each optimizer step, through gmts/trainer/update_stats.py's
    probe."""

    def __init__(self, model):
        self.probe = GradNoiseProbe([p for p in model.parameters() if p.requires_grad])

    def accumulate(self, model, batch, mb, rows, weights, cfg, *, reduce=None, rank=None,
                   **loss):
        """accumulate_gradients in two halves of whole groups: half a's rows, a copy of the gradient
        so far (g_a), half b's rows, then g_b = g - g_a, before the gradients are summed and
        clipped; the halves' passes sum to the whole mini-batch's gradient. reduce, rank: the
        processes' (default); loss: accumulate_gradients' keywords."""
        reduce = reduce or (batch_sum if several_processes() else None)
        rank = distributed.rank() if rank is None else rank
        rows_a, _ = self.probe.split(mb.rows, cfg.group_size, reduce=reduce, rank=rank)
        in_a = torch.isin(rows, rows_a)
        loss_a, passes_a = accumulate_gradients(model, batch, mb, rows[in_a], weights, cfg, **loss)
        self.probe.snapshot()
        loss_b, passes_b = accumulate_gradients(model, batch, mb, rows[~in_a], weights, cfg, **loss)
        self.probe.finish(reduce=reduce)
        return loss_a + loss_b, passes_a + passes_b

    def figures(self, grad_norm, outcome):
        """This optimizer step's figures, taken now (the probe's buffer is reused by the next
        one)."""
        if outcome == NOTHING:
            return {}
        # one process: the probe's own float64 ‖g‖²; several: the global norm of the summed gradient
        return self.probe.metrics(grad_norm if several_processes() else None)


class UpdateLog:
    """One rollout batch's figures over all its optimizer steps (mini-batches x epochs), as one
    metrics line, from train.update_policy's records (one per optimizer step: its mini-batch `mb`,
    stage 4's logp, entropy, omega and length_weight (n, T), stage 5's selection, stage 6's
    loss_weights, what stage 7 did, and the noise probe's figures). The selection diagnostics
    describe the first pass over the batch (every row scored and selected once, each within its own
    mini-batch); the off-policy figures (clip share, |r - 1|) count every scored token of every
    pass; overlap, loss, grad norm and n_eff are per optimizer step (mean, and min / max; η:
    median)."""

    def __init__(self, cfg, batch, records):
        self.cfg, self.records = cfg, records
        self.batch = batch.to(records[0]["mb"].rows.device)
        self.valid_mask, self.advantages = self.batch.valid_mask, self.batch.advantages
        self.selected = torch.zeros_like(self.valid_mask)    # the first pass's selection (N, T)
        self.first_pass_rows = torch.zeros(self.valid_mask.shape[0], dtype=torch.bool,
                                           device=self.valid_mask.device)
        for record in records:
            mb, selected = record["mb"], record["selected"]
            new = ~self.first_pass_rows[mb.rows]                     # rows met for the first time
            self.selected[mb.rows[new]], self.first_pass_rows[mb.rows[new]] = selected[new], True
    @torch.no_grad()
    def metrics(self):
        """The metrics line's figures of every recorded optimizer step (see the module docstring and
        selection_diagnostics for their meaning). Off-policy figures from the importance ratio r =
        π_θ / π_old; what ETS and GMTS would keep at ρ, with the run's own scope, bottom and exclude
        (whatever --selector); n_eff of W_i = Σ_t |ω_it| w_it over the selection (gmts/METHOD.md,
        "How concentrated an update is")."""
        cfg = self.cfg
        entropy = torch.zeros(self.valid_mask.shape, dtype=torch.float64,
                              device=self.valid_mask.device)
        ets, gms = torch.zeros_like(self.valid_mask), torch.zeros_like(self.valid_mask)
        seen = torch.zeros_like(self.first_pass_rows)
        off_policy, steps, concentration = torch.zeros(3, dtype=torch.float64), [], []
        for step in self.records:
            mb, noise = step["mb"], step["noise"]
            valid, r = mb.valid_mask, torch.exp(step["logp"] - mb.old_logp)
            clipped = clip_active(r, mb.advantages, cfg.eps_low, cfg.eps_high)
            off_policy += batch_sum(torch.tensor([float(clipped[valid].sum()),
                                                  float((r[valid] - 1).abs().sum()),
                                                  float(valid.sum())], dtype=torch.float64))
            choose = functools.partial(batch_select, valid_mask=valid, ratio=cfg.ratio,
                                       scope=cfg.select_scope, group_ids=mb.group_ids,
                                       bottom=cfg.bottom, exclude=mb.exclude)
            step_ets, step_gms = counterfactual_selections(choose, step["entropy"], step["omega"],
                                                           step["length_weight"])
            first = ~seen[mb.rows]
            keep = mb.rows[first]
            entropy[keep], ets[keep] = step["entropy"][first].double(), step_ets[first]
            gms[keep], seen[keep] = step_gms[first], True
            steps.append((overlap(step_ets, step_gms), step["loss"], step["grad_norm"],
                          step["outcome"]))
            if step["outcome"] != NON_FINITE:     # ω or the weights may hold NaN: nothing to spread
                concentration.append(dict(update_answers_effective(
                    step["omega"], step["loss_weights"], reduce=batch_sum,
                    reduce_max=lambda top: torch.tensor(
                        batch_max(float(top)), dtype=torch.float64)), **noise))
        m = selection_diagnostics(self.valid_mask, self.advantages, entropy, None, self.selected,
                                  cfg.ratio,
                                  ets=ets, gms=gms)
        overlaps, losses, grad_norms, outcomes = zip(*steps)
        clipped, ratio_dev, scored = off_policy.tolist()
        m.update(selection_overlap_ets_gmts=sum(overlaps) / len(overlaps),
                 selection_overlap_ets_gmts_min=min(overlaps),
                 loss=sum(losses) / len(losses), grad_norm=sum(grad_norms) / len(grad_norms),
                 grad_norm_max=max(grad_norms), optimizer_steps=outcomes.count(STEPPED),
                 clip_active_share=clipped / max(scored, 1.0),
                 ratio_abs_dev_mean=ratio_dev / max(scored, 1.0))
        # n_eff, top-1 share, η, B_simple (gmts/trainer/update_stats.py)
        m.update(combine_steps(concentration))
        if NON_FINITE in outcomes:
            bad = outcomes.count(NON_FINITE)
            m["skipped"] = f"non-finite loss/gradient in {bad} of {len(outcomes)} updates"
        return m

    def samples(self, step):
        """samples.jsonl's lines for this step (logged_samples), with the first pass's selection."""
        return logged_samples(step, self.batch, self.selected, self.cfg)


def update_figures(cfg, batch, records):
    """(the metrics, the first pass's selection (N, T) bool) of train.update_policy's records."""
    log = UpdateLog(cfg, batch, records)
    return log.metrics(), log.selected
