"""What a training step logs, besides the timings: the rollout's figures and logged samples
(rollout_figures, logged_samples), the selection diagnostics, and how many answers an update rests
on and how noisy its gradient is. Nothing here changes the update: the functions read the batch,
ω, the selection, the loss weights and the accumulated gradients.

Selection diagnostics (gmts/METHOD.md, "What the reproduction learned"): is the change reachable
(would ETS and GMTS pick the same tokens?), how do the selected tokens spread over answers (GMTS
concentrates on the answers with the largest |A|), and on which side of the advantage do they fall,
or in answers with A = 0 (groups whose rewards are all equal), whose tokens use up selection budget
but add nothing to the policy gradient (gmts/METHOD.md, "Where the paper's text and the authors'
code differ": ETS ranks them, GMTS scores them 0). All figures are over the whole batch, across
data-parallel ranks too.

How concentrated an update is (gmts/METHOD.md, "How concentrated an update is"): the public
reproduction read GMTS's divergence at a large learning rate as "each update depends on fewer
sequences" and left it unmeasured (gmts/METHOD.md, "What the reproduction learned"). Two
measurements of ONE optimizer batch (a mini-batch of whole groups, over all its micro-batches and
data-parallel ranks):

    update_answers_effective   n_eff = (Σ_i W_i)² / Σ_i W_i²,   W_i = Σ_t |ω_it| · w_it over answer
                               i's selected tokens: how many answers carry the loss's gradient
                               coefficients. Cheap: always on.
    GradNoiseProbe             η = ‖g_a − g_b‖² / ‖g_a + g_b‖² between the gradients of two halves
                               of the batch (whole groups each), and the noise scale it implies. One
                               parameter-sized buffer: behind --log-grad-noise.
"""
import functools
import math

import torch

from gmts.method.grpo import clip_active, mixed_groups, token_scores
from gmts.trainer import distributed
from gmts.trainer.batches import (NON_FINITE, NOTHING, STEPPED, accumulate_gradients,
                                  batch_select, batch_sum, several_processes)


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
    accumulate and the figures of each optimizer step, through GradNoiseProbe (below)."""

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
        # n_eff, top-1 share, η, B_simple (combine_steps)
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


# --------------------------------------------------------------------------------------------------
# n_eff: the effective number of answers the update rests on.

@torch.no_grad()
def update_answers_effective(omega, weights, *, reduce=None, reduce_max=None):
    """The effective number of answers carrying one optimizer step (gmts/METHOD.md, "How
    concentrated an update is").

        W_i   = Σ_t |ω_it| · w_it               (w_it · m_it from loss_weights: zero off the
              selection, the batch-wide
                                                 normaliser included; ω_it from token_omega)
        n_eff = (Σ_i W_i)² / Σ_i W_i²           (Kish's effective sample size of the weights W)

    W_i is answer i's share of the loss's gradient COEFFICIENTS (the scalars in front of ∇θ log π,
    "The gradient of one token"), not of the gradient's norm: tokens' ∇θ log π differ in size and
    direction. n_eff = N when every answer carries the same W, 1 when one answer carries all of it.

    omega   (N, T) float, ω of the optimizer batch's tokens (this rank's rows)
    weights (N, T) float, the policy loss's per-token weights (loss_weights(...), the rows of this
    optimizer batch);
            positions with weight 0 (unselected, padding) never enter, even if ω there is not finite
    reduce, reduce_max: callables that sum / take the max of a tensor over data-parallel ranks
            (gmts.trainer.distributed.all_reduce_sum; a max over ranks), so the figures are the
            whole batch's. Both or neither. Micro-batches need nothing: the weights are the whole
            optimizer batch's already.

    With β > 0 and --kl-coverage all, unselected tokens still get a KL gradient; W counts the
    selected tokens only (the policy loss's tokens), as the selection is what the figure is about.

    Returns a dict (floats, None where undefined):
      update_answers_effective        n_eff; None when Σ W = 0 (nothing selected, or every selected
                                      token has ω = 0: the step has no policy gradient, there is no
                                      update to spread)
      update_answers_effective_share  n_eff / N, N = answers in the optimizer batch (A = 0 answers
                                      included); None as above
      update_weight_top1_share        max_i W_i / Σ W_i, the largest single answer's share; None as
                                      above
      update_answers_with_weight      how many answers have W_i > 0 (an upper bound of n_eff; 0 in
                                      the edge case)
    """
    if omega.shape != weights.shape or omega.dim() != 2:
        raise ValueError(f"omega {tuple(omega.shape)} and weights {tuple(weights.shape)} must be "
                         "the same (N, T)")
    if (reduce is None) != (reduce_max is None):
        raise ValueError("pass reduce and reduce_max together (a sum and a max over ranks), or "
                         "neither")
    w = weights.double()
    # torch.where, not a bare product: an unselected position's ω may be anything (padding), and 0 *
    # inf is NaN.
    per_token = torch.where(w != 0, omega.double().abs() * w,
                            torch.zeros((), dtype=torch.float64, device=w.device))
    # (N,) W_i, float64
    W = per_token.sum(dim=1)
    if not torch.isfinite(W).all():
        raise ValueError("W_i is not finite for answers "
                         f"{(~torch.isfinite(W)).nonzero().flatten().tolist()}: ω or the weights "
                         "hold NaN/inf on selected tokens")
    sums = torch.stack([W.sum(), W.pow(2).sum(), (W > 0).sum().double(),
                        torch.tensor(float(W.shape[0]), dtype=torch.float64, device=W.device)])
    top = W.max() if W.numel() else torch.zeros((), dtype=torch.float64, device=W.device)
    if reduce is not None:
        sums, top = reduce(sums), reduce_max(top)
    total, squares, with_weight, answers = (float(x) for x in sums.tolist())
    top = float(top)
    if total <= 0:
        return {"update_answers_effective": None, "update_answers_effective_share": None,
                "update_weight_top1_share": None, "update_answers_with_weight": 0}
    n_eff = total * total / squares
    return {"update_answers_effective": n_eff,
            "update_answers_effective_share": n_eff / answers,
            "update_weight_top1_share": top / total,
            "update_answers_with_weight": int(with_weight)}


def combine_steps(steps):
    """One metrics line's figures from the optimizer steps of one rollout batch (several with
    --mini-batch-size): steps is a list of dicts from update_answers_effective (and
    GradNoiseProbe.metrics, with --log-grad-noise).

    n_eff, its shares and the answers with weight: the mean over the steps where n_eff is defined (a
    step with no policy gradient says nothing about how an update spreads; all undefined -> None,
    and 0 answers with weight). η and B_simple: the median over the steps that measured them (one
    step's η is a one-sample ratio and may be inf; B_simple None, unbounded, counts as inf in the
    order), None if none did; the keys are absent when no step measured the noise."""
    out = {}
    for key in ("update_answers_effective", "update_answers_effective_share",
                "update_weight_top1_share"):
        values = [s[key] for s in steps if s.get(key) is not None]
        out[key] = sum(values) / len(values) if values else None
    defined = [s["update_answers_with_weight"] for s in steps
               if s.get("update_answers_effective") is not None]
    # the same steps as n_eff
    out["update_answers_with_weight"] = sum(defined) / len(defined) if defined else 0
    measured = [s for s in steps if "grad_noise_ratio" in s]
    if measured:
        ratios = sorted(s["grad_noise_ratio"] for s in measured if s["grad_noise_ratio"] is
                        not None)
        scales = sorted(math.inf if s["grad_noise_scale"] is None else s["grad_noise_scale"]
                        for s in measured if s["grad_noise_ratio"] is not None)
        out["grad_noise_ratio"] = _median(ratios)
        scale = _median(scales)
        out["grad_noise_scale"] = None if scale is None or scale == math.inf else scale
    return out


def _median(sorted_values):
    n = len(sorted_values)
    if not n:
        return None
    mid = sorted_values[n // 2]
    return mid if n % 2 else (sorted_values[n // 2 - 1] + mid) / 2


# --------------------------------------------------------------------------------------------------
# Gradient noise between two halves of the optimizer batch.

def noise_from_halves(diff_sq, sum_sq, groups_a, groups_b):
    """η and the simple noise scale from the two halves' gradients (gmts/METHOD.md, "How
    concentrated an update is").

        η       = n_a · n_b · ‖g_a/n_a − g_b/n_b‖² / ‖g_a + g_b‖²     (= ‖g_a − g_b‖² / ‖g_a + g_b‖²
                when n_a = n_b)
        B_simple = B · η / (1 − η),   B = n_a + n_b groups              (McCandlish et al. 2018,
        "simple noise scale")

    diff_sq = ‖g_a/n_a − g_b/n_b‖², sum_sq = ‖g_a + g_b‖² (g_a, g_b: the halves' summed gradients,
    global); groups_a, groups_b: n_a, n_b, the halves' group counts. Returns (η, B_simple in
    groups):
      η = 0 when the halves agree exactly; η = inf when the sum is 0 but the halves are not (g_a =
      -g_b); (None, None) when both are 0 (no gradient) or either is not finite;
      B_simple = None when η >= 1: the estimate of |E g|² is <= 0 (the halves are not positively
      correlated), so the noise scale is unbounded, not a number.
    """
    if groups_a < 1 or groups_b < 1:
        raise ValueError(f"each half needs at least one group, got {groups_a} and {groups_b}")
    if not (math.isfinite(diff_sq) and math.isfinite(sum_sq)):
        return None, None
    if sum_sq == 0:
        return (None, None) if diff_sq == 0 else (math.inf, None)
    eta = groups_a * groups_b * diff_sq / sum_sq
    scale = (groups_a + groups_b) * eta / (1 - eta) if eta < 1 else None
    return eta, scale


def squared_norm(x, chunk=1 << 20):
    """‖x‖² of a tensor, summed in float64 over chunks of `chunk` elements, on x's device. One
    float32 dot over a model's 10^8 entries loses about 1% of it (the small terms are rounded away
    in its accumulators), which biased η low by as much; the square of a float32 is exact in
    float64, so this sum errs by at most about n · 2^-53 relatively."""
    parts = (part.double() for part in x.reshape(-1).split(chunk))   # one float64 chunk at a time
    squares = [torch.dot(part, part) for part in parts]
    return float(torch.stack(squares).sum()) if squares else 0.0


class GradNoiseProbe:
    """The gradient noise between two halves of one optimizer batch, measured inside a
    gradient-accumulation loop.

        probe = GradNoiseProbe(params)                       # the trainable parameters; allocates
        nothing yet rows_a, rows_b = probe.split(rows, group_size)       # whole groups: half a,
        then half b ... backward the micro-batches of rows_a ...
        probe.snapshot()                          # copies the gradient so far (g_a) into the buffer
        ... backward the micro-batches of rows_b ...
        probe.finish()                         # before clipping / the optimizer step: g_b = g - g_a
        ... optimizer step ...
        probe.metrics(grad_norm)             # {"grad_noise_ratio": η, "grad_noise_scale": B_simple}

    Memory: one float32 copy of the trainable parameters (float64 for float64 parameters), allocated
    at the first snapshot and reused. Cost: a few element-wise passes over it; the micro-batches are
    the same backward passes the step runs anyway (a half may end in a partial micro-batch: at most
    one extra pass per optimizer step).

    Under torchrun: pass reduce= (a sum of a tensor over ranks, e.g.
    gmts.trainer.distributed.all_reduce_sum) and rank= to split (so the halves stay balanced when
    every rank holds an odd number of groups), reduce= to finish (one all-reduce of the buffer), and
    the GLOBAL gradient norm before clipping to metrics (optimizer_step's grad_norm). With one
    process, metrics() needs nothing: it uses the norm it measured in finish(). FSDP-sharded
    parameters are refused (their gradients are already summed over ranks shard by shard).
    """

    def __init__(self, params):
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("GradNoiseProbe needs at least one trainable parameter")
        from torch.distributed.tensor import DTensor
        if any(isinstance(p, DTensor) for p in self.params):
            raise ValueError("GradNoiseProbe does not support FSDP-sharded parameters (--fsdp)")
        # flat (numel,) float32, or float64 for float64 parameters
        self.buffer = None
        self.views = None                       # one view of the buffer per parameter
        self._state, self.groups_a, self.groups_b = "new", 0, 0
        self.diff_sq = self.sum_sq = None

    def split(self, rows, group_size, *, reduce=None, rank=0):
        """rows (n,) long: this rank's rows of the optimizer batch, whole groups of `group_size`
        contiguous rows in order (MiniBatch.rows). Returns (rows_a, rows_b): the first half of this
        rank's groups, then the rest; a rank with an odd count gives its extra group to half a on
        even ranks, to half b on odd ones. The halves' group counts over all ranks (reduce) are kept
        for metrics; each must be >= 1."""
        rows = torch.as_tensor(rows)
        if rows.dim() != 1 or rows.numel() % group_size:
            raise ValueError(f"rows must be 1-D whole groups of {group_size}, got shape "
                             f"{tuple(rows.shape)}")
        groups = rows.view(-1, group_size)
        offsets = torch.arange(group_size, device=rows.device)
        whole = (groups[:, :1] % group_size == 0) & (groups == groups[:, :1] + offsets)
        if not bool(whole.all()):
            raise ValueError("rows must list whole groups (group_size consecutive rows of one "
                             "prompt) in order")
        n = groups.shape[0]
        n_a = n // 2 + (n % 2 if rank % 2 == 0 else 0)
        counts = torch.tensor([n_a, n - n_a], dtype=torch.long)
        if reduce is not None:
            counts = reduce(counts)
        self.groups_a, self.groups_b = (int(c) for c in counts.tolist())
        if self.groups_a < 1 or self.groups_b < 1:
            raise ValueError("the gradient-noise halves need at least 2 groups in the optimizer "
                             f"batch, got {self.groups_a + self.groups_b}")
        self._state, self.diff_sq, self.sum_sq = "split", None, None
        return rows[:n_a * group_size], rows[n_a * group_size:]

    @torch.no_grad()
    def snapshot(self):
        """After half a's micro-batches: buffer <- the accumulated gradient g_a (a missing .grad
        counts as 0)."""
        if self._state != "split":
            raise RuntimeError("snapshot() comes after split() and before finish(), not in state "
                               f"{self._state!r}")
        if self.buffer is None:
            dtype = (torch.float64 if all(p.dtype == torch.float64 for p in self.params)
                     else torch.float32)
            self.buffer = torch.zeros(sum(p.numel() for p in self.params), dtype=dtype,
                                      device=self.params[0].device)
            self.views, offset = [], 0
            for p in self.params:
                self.views.append(self.buffer[offset:offset + p.numel()].view(p.shape))
                offset += p.numel()
        for p, buf in zip(self.params, self.views):
            if p.grad is None:
                buf.zero_()
            else:
                buf.copy_(p.grad)
        self._state = "snapshot"

    @torch.no_grad()
    def finish(self, reduce=None):
        """After half b's micro-batches, before the gradient is clipped or stepped: buffer <-
        g_a/n_a - g_b/n_b with g_b = g - g_a (in place), summed over ranks by `reduce`; keeps ‖·‖²
        of it and this process's ‖g‖²."""
        if self._state != "snapshot":
            raise RuntimeError(f"finish() comes after snapshot(), not in state {self._state!r}")
        sum_sq = 0.0
        for p, buf in zip(self.params, self.views):
            g = torch.zeros_like(buf) if p.grad is None else p.grad.to(buf.dtype)
            # exact 0 where the halves' gradients are bit-for-bit equal
            g_b = g - buf
            buf.div_(self.groups_a).sub_(g_b.div_(self.groups_b))
            sum_sq += squared_norm(g)
        if reduce is not None:
            self.buffer.copy_(reduce(self.buffer))
        self.diff_sq = squared_norm(self.buffer)
        self.sum_sq = sum_sq
        self._state = "finished"

    def metrics(self, grad_norm=None):
        """{"grad_noise_ratio": η, "grad_noise_scale": B_simple in groups} (noise_from_halves; None
        where undefined). grad_norm: the global ‖g_a + g_b‖ before clipping (required under
        torchrun; default: the norm finish() measured on this process). Calls finish() first if the
        loop did not."""
        if self._state == "snapshot":
            self.finish()
        if self._state != "finished":
            raise RuntimeError("metrics() needs split(), snapshot() and finish() first, not state "
                               f"{self._state!r}")
        sum_sq = self.sum_sq if grad_norm is None else float(grad_norm) ** 2
        eta, scale = noise_from_halves(self.diff_sq, sum_sq, self.groups_a, self.groups_b)
        return {"grad_noise_ratio": eta, "grad_noise_scale": scale}
