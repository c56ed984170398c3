"""Token log-probs and entropies from final hidden states and the output head, chunk by chunk.

Why: the full (tokens x vocab) logits are the memory bill of an RLVR step. For Qwen2.5 (vocab
151,936) 8k tokens of float32 logits are 5 GB, and log_softmax + entropy + backward make several
more copies of that size (gmts/METHOD.md, "Where E and ω come from"). Here the head matmul, softmax
and its backward run over chunks of tokens:

  forward : per chunk z = h W^T (+ b), z /= tau; keep only per-token logsumexp and log p[target]
            (and entropy, a score)
  backward: per chunk recompute z, p = exp(z/tau - lse); d logp_t / d z = (onehot(target) - p) / tau
            (gmts/METHOD.md, Proposition 3.1: grad_z log p_i = e_i - p), then grad_h = G W and
            grad_W += G^T h, grad_b += sum G.

Nothing of size (tokens, V) is ever stored; peak extra memory is a few (chunk_size, V) float32
buffers, reused across chunks (reuse matters on CPU: each fresh multi-hundred-MB allocation
page-faults through glibc's mmap). The price is one extra head matmul (the recompute) in the
backward pass.

Matmuls run in the inputs' dtype (bf16 on GPU; the autocast dtype when autocast is on); softmax /
logsumexp math runs in float32 (float64 when the inputs are float64: the softmax dtype is
promote_types(dtype, float32)) one chunk at a time: a bf16 logsumexp over 151,936 entries would lose
~3 significant digits.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from gmts.method.options import check as _check  # one ValueError naming the bad value


def _check_chunk_size(chunk_size: int) -> None:
    _check(isinstance(chunk_size, int) and not isinstance(chunk_size, bool) and chunk_size >= 1,
           f"chunk_size must be a positive int, got {chunk_size!r}")


def _check_temperature(temperature) -> None:
    _check(isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0,
           f"temperature must be a finite number > 0, got {temperature!r}")


def _chunks(ctx, hidden, weight, bias, sm_dtype):
    """Yield (s, h, z, zf) for each chunk of at most ctx.chunk_size tokens: s the slice of its
    tokens, h (n, H) their hidden states in the matmul dtype ctx.dtype, z = h W^T (+ b) (n, V) in
    the matmul dtype and zf = z / tau (n, V) in the softmax dtype sm_dtype (the same memory as z
    when the two dtypes match), tau = ctx.temperature. Forward and backward both loop over this,
    so the backward recomputes exactly the forward's values. z and zf are views of two
    (chunk_size, V) buffers allocated once and reused for every chunk. weight.to and bias.to make
    no copy when the dtypes match."""
    w, b = weight.to(ctx.dtype), None if bias is None else bias.to(ctx.dtype)
    z_buf = hidden.new_empty(min(ctx.chunk_size, len(hidden)), len(weight), dtype=ctx.dtype)
    zf_buf = z_buf if ctx.dtype == sm_dtype else torch.empty_like(z_buf, dtype=sm_dtype)
    for start in range(0, len(hidden), ctx.chunk_size):
        h = hidden[start:start + ctx.chunk_size].to(ctx.dtype)  # the last chunk may be shorter
        z, zf = z_buf[:len(h)], zf_buf[:len(h)]
        torch.matmul(h, w.t(), out=z) if b is None else torch.addmm(b, h, w.t(), out=z)
        zf.copy_(z)  # upcast (copy_ does nothing when zf is z)
        if ctx.temperature != 1.0:
            zf.div_(ctx.temperature)  # divide (not * 1/tau) to round exactly like the plain z / tau
        yield slice(start, start + len(h)), h, z, zf


def _entropy(out, shifted, p_buf):
    """H = -Σ p log p = log S - Σ(e · s) / S of each row, written into out (n,), from the shifted
    logits s (n, V), with e = exp(s) in the reused buffer p_buf (at least n rows) and S = Σ e
    (returned: the forward's logsumexp needs it too). The per-row dot product is a bmm, without a
    (n, V) temporary."""
    p = torch.exp(shifted, out=p_buf[:len(shifted)])  # unnormalised probabilities
    sum_exp = p.sum(-1)
    out.copy_(torch.log(sum_exp) - torch.bmm(p.unsqueeze(1),
                                             shifted.unsqueeze(2)).view(-1) / sum_exp)
    return sum_exp


class _ChunkedHeadLogProb(torch.autograd.Function):
    """logp[t] = log softmax(h_t W^T / tau + b / tau)[target_t] over flattened tokens, chunked (see
    module doc).

    Inputs are 2D: hidden (N, H), weight (V, H), targets (N,), bias (V,) or None; the matmuls run
    in the autocast dtype when autocast is on, else in weight's. Returns (logp (N,), entropy (N,)
    or None). Entropy is marked non-differentiable: it is a score, not part of the graph
    (gmts/METHOD.md, "The loss")."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, bias, temperature, chunk_size, with_entropy):
        """Per chunk: the shifted logits s = z/tau - max (<= 0), in place in zf; log p[target] =
        s[target] - log Σ exp(s); and lse = max + log Σ exp(s), the logsumexp of z / tau, saved
        for the backward. logp, lse and entropy (N,) are in the softmax dtype, float32 at least
        (module docstring). With entropy (a score, _entropy), a third reused (chunk, V) buffer
        p_buf holds exp(s); without it (p_buf and entropy are empty, and None is returned for
        entropy), exp runs in place: the shifted logits are not needed any more."""
        dev = hidden.device.type  # the matmuls run in the autocast dtype when autocast is on
        dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else weight.dtype
        n, sm_dtype = len(hidden), torch.promote_types(dtype, torch.float32)
        logp, lse = hidden.new_empty(n, dtype=sm_dtype), hidden.new_empty(n, dtype=sm_dtype)
        entropy = hidden.new_empty(n * with_entropy, dtype=sm_dtype)     # (n,), or (0,) without
        p_buf = hidden.new_empty(min(chunk_size, n) * with_entropy, len(weight), dtype=sm_dtype)
        ctx.temperature, ctx.chunk_size, ctx.dtype = temperature, chunk_size, dtype
        with torch.autocast(hidden.device.type, enabled=False):
            for s, _, _, zf in _chunks(ctx, hidden, weight, bias, sm_dtype):
                row_max = zf.amax(dim=-1, keepdim=True)  # (n, 1)
                target_shifted = zf.sub_(row_max).gather(-1, targets[s, None]).squeeze(-1)  # (n,)
                sum_exp = _entropy(entropy[s], zf, p_buf) if with_entropy else zf.exp_().sum(-1)
                log_sum_exp = torch.log(sum_exp)
                logp[s], lse[s] = target_shifted - log_sum_exp, row_max.squeeze(-1) + log_sum_exp
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.mark_non_differentiable(entropy)
        return logp, (entropy if with_entropy else None)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_logp, _grad_entropy):
        """Per chunk: recompute z, p = exp(z/tau - lse), and G = d loss / d z = g · (onehot(target)
        - p) / tau, built in place in the softmax buffer (p is zf) and copied back to the matmul
        dtype (into z, nothing to do when z is zf) for the gradient matmuls; then grad_h = G W,
        grad_W += G^T h, grad_b += Σ G, each only when autograd asks for it (it calls this only
        when one is asked for). grad_W and grad_b accumulate in the softmax dtype, float32 even for
        bf16 weights: summing the chunks' contributions in bf16 would round away small updates. They
        are returned in that dtype: autograd casts them to the weight's grad_dtype, which is float32
        where the optimizer sums micro-batches in float32 (gmts/trainer/optim.py), so no bf16
        rounding comes before that sum; else the weight's own dtype, as the cast here would."""
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        need_h, need_w, _, need_b = ctx.needs_input_grad[:4]
        w, g = weight.to(ctx.dtype), grad_logp.to(lse.dtype) * (1.0 / ctx.temperature)  # g / tau
        grad_h = hidden.new_empty(hidden.shape, dtype=ctx.dtype) if need_h else None
        grad_w = hidden.new_zeros(weight.shape, dtype=lse.dtype) if need_w else None
        grad_b = hidden.new_zeros(len(weight), dtype=lse.dtype) if need_b else None
        with torch.autocast(hidden.device.type, enabled=False):
            for s, h, z, zf in _chunks(ctx, hidden, weight, bias, lse.dtype):
                p = zf.sub_(lse[s, None]).exp_()  # softmax(z / tau), in place
                z.copy_(p.mul_(-g[s, None]).scatter_add_(-1, targets[s, None], g[s, None]))  # G
                if need_h:
                    torch.matmul(z, w, out=grad_h[s])  # (n, H)
                if need_w:  # (V, H); in place (addmm_) when the dtypes match
                    grad_w.addmm_(z.t(), h) if z.dtype == grad_w.dtype else grad_w.add_(z.t() @ h)
                if need_b:
                    grad_b.add_(z.sum(0, dtype=lse.dtype))
        return grad_h.to(hidden.dtype) if need_h else None, grad_w, None, grad_b, *[None] * 3


# head_logprobs(hidden, head_weight, targets, head_bias, temperature, chunk_size, with_entropy),
# every argument positional: token_logprobs_and_entropy on flat inputs the caller built itself:
# hidden (n, H), targets (n,) long ids in [0, V), head_bias (V,) or None. Returns (logp (n,),
# entropy (n,) or None). gmts/trainer/batches.py's completion_logprobs calls it with the model's
# own hidden states and the sampled ids, so the public function's shape, dtype and range checks
# cannot fail there and are not repeated (nor those of temperature and chunk_size, train.py's
# checked flags).
head_logprobs = _ChunkedHeadLogProb.apply


def token_logprobs_and_entropy(hidden: Tensor, head_weight: Tensor, targets: Tensor, *,
                               head_bias: Tensor | None = None,
                               temperature: float = 1.0, chunk_size: int = 1024,
                               with_entropy: bool = True
                               ) -> tuple[Tensor, Tensor | None]:
    """hidden (..., H) any float dtype, head_weight (V, H), targets (...) long. Returns logp (...)
    float32 = log softmax(hidden @ W.T / temperature)[target], differentiable w.r.t. hidden and
    head_weight (and bias) through a custom autograd Function that never stores (tokens, V) logits:
    forward keeps only per-token logsumexp (and target logits); backward recomputes each chunk's
    logits: d logp/d z = onehot - softmax. entropy (...) float32 of softmax(z / temperature)
    computed WITHOUT gradient (it's a score: gmts/METHOD.md, "The loss"), or None.

    The bias, when given, is part of z (z = h W^T + b) and is divided by the temperature too.
    float64 inputs give float64 outputs (for gradcheck). Padding positions: any valid id works as
    their target; callers mask the result. Under autocast the matmuls run in the autocast dtype;
    otherwise in head_weight's dtype (hidden is cast to it).
    """
    _check(hidden.dim() >= 1 and head_weight.dim() == 2,
           f"expected hidden (..., H) and head_weight (V, H), got "
           f"shapes {tuple(hidden.shape)} and {tuple(head_weight.shape)}")
    vocab, width = head_weight.shape
    _check(hidden.shape[-1] == width,
           f"hidden size {hidden.shape[-1]} does not match head_weight {tuple(head_weight.shape)}")
    _check(targets.shape == hidden.shape[:-1],
           f"targets shape {tuple(targets.shape)} must equal hidden's leading shape "
           f"{tuple(hidden.shape[:-1])}")
    _check(targets.dtype == torch.long, f"targets must be torch.long, got {targets.dtype}")
    _check(hidden.is_floating_point() and head_weight.is_floating_point(),
           f"hidden and head_weight must be floating "
           f"point, got {hidden.dtype} and {head_weight.dtype}")
    _check(head_bias is None or head_bias.shape == (vocab,),
           lambda: f"head_bias must have shape ({vocab},), got "
           f"{tuple(head_bias.shape)}")
    _check_temperature(temperature)
    _check_chunk_size(chunk_size)
    if targets.numel():
        # one sync; a bad id would be a device assert on GPU
        lo, hi = int(targets.min()), int(targets.max())
        _check(lo >= 0 and hi < vocab, f"targets must lie in [0, {vocab}), got min {lo} max {hi}")
    logp, entropy = head_logprobs(hidden.reshape(-1, width), head_weight, targets.reshape(-1),
                                  head_bias, temperature, chunk_size, with_entropy)
    return logp.view(targets.shape), (entropy.view(targets.shape) if with_entropy else None)


@torch.no_grad()
def token_entropy(logits: Tensor, chunk_size: int = 1024, *, temperature: float = 1.0) -> Tensor:
    """float32 entropy of softmax(logits) over the last dim, computed chunk by chunk over the
    leading (flattened) dims so that no float32 copy of the whole (..., V) tensor is made (upcast
    one chunk at a time). No gradient.

    temperature: entropy of softmax(logits / temperature), without a scaled copy of the logits
    (gmts/METHOD.md, "Temperature": the policy trained at sampling temperature tau is softmax(z /
    tau)). float64 logits give a float64 result."""
    if logits.dim() < 1 or logits.shape[-1] == 0:
        raise ValueError(f"logits must have a non-empty last (vocab) dim, got shape "
                         f"{tuple(logits.shape)}")
    if not logits.is_floating_point():
        raise ValueError(f"logits must be floating point, got {logits.dtype}")
    _check_temperature(temperature)
    _check_chunk_size(chunk_size)
    vocab = logits.shape[-1]
    try:
        # (N, V) view; fails for e.g. logits[:, :-1] of a (B, T, V) tensor
        rows = logits.view(-1, vocab)
    except RuntimeError:
        # Not viewable as 2D: go one leading index at a time rather than let reshape copy the whole
        # tensor.
        return torch.stack([token_entropy(x, chunk_size,
                                          temperature=temperature) for x in logits.unbind(0)])
    # float32 at least (module docstring)
    sm_dtype = torch.promote_types(logits.dtype, torch.float32)
    out = torch.empty(rows.shape[0], dtype=sm_dtype, device=logits.device)
    for start in range(0, rows.shape[0], chunk_size):
        # one fresh (upcast) chunk, ours to modify
        shifted = rows[start:start + chunk_size].to(sm_dtype, copy=True)
        if temperature != 1.0:
            shifted.div_(temperature)
        shifted.sub_(shifted.amax(dim=-1, keepdim=True))
        e = shifted.exp()
        sum_exp = e.sum(-1)
        dot = torch.bmm(e.unsqueeze(1), shifted.unsqueeze(2)).view(-1)  # sum e * shifted, per row
        out[start:start + chunk_size] = torch.log(sum_exp) - dot / sum_exp
    return out.view(logits.shape[:-1])


def causal_lm_hidden_and_head(model) -> tuple:
    """(backbone, head_weight, head_bias) of a transformers causal LM, so that
    model(input_ids, ...).logits == backbone(input_ids, ...) @ head_weight.T (+ head_bias).

    backbone(**kwargs) calls the decoder (model.get_decoder(), i.e. model.model for Qwen2/Llama) and
    returns its last_hidden_state (..., H), which already has the final norm applied. Refuses models
    whose logits are not a plain linear map of that state (final logit soft-capping, logit
    scaling)."""
    config = getattr(model, "config", None)
    for attr in ("final_logit_softcapping", "logit_scale"):
        value = getattr(config, attr, None)
        if value not in (None, 1.0):
            raise ValueError(f"model config has {attr}={value!r}: its logits are not hidden @ W.T; "
                             "token_logprobs_and_entropy would be wrong for it")
    head = model.get_output_embeddings()
    if head is None or not hasattr(head, "weight"):
        raise ValueError(f"{type(model).__name__} has no output embedding (lm_head) with a weight")
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if decoder is None:
        decoder = getattr(model, "model", None)
    if decoder is None:
        raise ValueError(f"cannot find the decoder of {type(model).__name__} (no get_decoder() and "
                         "no .model)")

    def backbone(*args, **kwargs) -> Tensor:
        return decoder(*args, **kwargs).last_hidden_state

    return backbone, head.weight, getattr(head, "bias", None)
