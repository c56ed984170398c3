"""Per-update diagnostics: how many answers does one optimizer step rest on, and how noisy is its
gradient? (gmts/METHOD.md, "How concentrated an update is").

The public reproduction read GMTS's divergence at a large learning rate as "each update depends on
fewer sequences" and left it unmeasured (gmts/METHOD.md, "What the reproduction learned"). Two
measurements of ONE optimizer batch (a mini-batch of whole groups, over all its micro-batches and
data-parallel ranks):

    update_answers_effective   n_eff = (Σ_i W_i)² / Σ_i W_i²,   W_i = Σ_t |ω_it| · w_it over answer
                               i's selected tokens: how many answers carry the loss's gradient
                               coefficients. Cheap: always on.
    GradNoiseProbe             η = ‖g_a − g_b‖² / ‖g_a + g_b‖² between the gradients of two halves
                               of the batch (whole groups each), and the noise scale it implies. One
                               parameter-sized buffer: behind --log-grad-noise.

Nothing here changes the update: the functions read ω, the loss weights and the accumulated
gradients.
"""
import math

import torch


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
