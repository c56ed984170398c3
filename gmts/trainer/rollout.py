"""Stage 1 of the loop: sample G answers per prompt, recording what the loss and the scores need.

Why not `model.generate`: we need, for every sampled token, its log-probability and the entropy of the distribution
it was drawn from (gmts/METHOD.md, "Where E and ω come from": on-policy with β = 0 the scores are then known without
another forward pass), and we want the group's G answers to share one prefill of their prompt.

What makes it fast (and why it is still exact):
- shared prefix: each prompt is prefilled once and its KV cache repeated G times (`share_prefix=True`);
- finished rows leave the batch: once a row has produced its end-of-sequence token its cache rows are dropped, so
  later steps only compute live rows;
- one uniform number per row per step, drawn for EVERY row whether or not it is still live, and turned into a token by
  inverse-CDF sampling. The random stream is therefore independent of the batch layout: for a fixed seed the shared
  prefix path and the plain path (prompt repeated G times, no rows dropped) draw the same samples, up to float
  rounding in the logits (tested in tests/test_rollout.py).
"""
import inspect
from dataclasses import dataclass

import torch


@dataclass
class Rollout:
    prompt_ids: list            # Q lists of prompt token ids (unpadded)
    completion_ids: torch.Tensor  # (N, T) long, N = Q * G, answers to one prompt contiguous, padded with pad_id
    valid_mask: torch.Tensor    # (N, T) bool: real completion tokens, up to and including the first end-of-sequence
    logp: torch.Tensor          # (N, T) float32: log π(o_t) under softmax(z / τ) at sampling time (0 at padding)
    entropy: torch.Tensor       # (N, T) float32: entropy of softmax(z / τ) at that position (0 at padding)
    finished: torch.Tensor      # (N,) bool: the answer ended with an end-of-sequence token (not cut at the limit)
    group_size: int

    @property
    def lengths(self):          # (N,) completion lengths (valid tokens)
        return self.valid_mask.sum(dim=1)


def left_pad(sequences, pad_id, device):
    """Q lists of ids -> (ids (Q, P), attention_mask (Q, P)), padded on the left so every prompt ends at column P-1."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(sequences), width), dtype=torch.long, device=device)
    for row, seq in enumerate(sequences):
        if len(seq):
            ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long, device=device)
            mask[row, width - len(seq):] = 1
    return ids, mask


def positions(attention_mask):
    """Position ids that skip left padding: 0 at each row's first real token."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def filter_logits(logits, top_k=0, top_p=1.0):
    """Top-k / nucleus filtering, for evaluation only: training rollouts keep both off, or the behaviour policy would
    not be π_θ (gmts/METHOD.md, "Temperature")."""
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
        drop = cumulative - torch.softmax(sorted_logits, dim=-1) >= top_p   # keep the smallest set reaching top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits


@torch.no_grad()
def sample(model, prompts, *, group_size, max_new_tokens, eos_token_ids, pad_token_id, temperature=1.0, top_k=0,
           top_p=1.0, generator=None, share_prefix=True, drop_finished=True):
    """Sample `group_size` completions for each prompt. temperature 0 = greedy.

    prompts: Q lists of token ids. Returns a Rollout with N = Q * group_size rows in prompt order.
    """
    if group_size < 1 or max_new_tokens < 1:
        raise ValueError(f"group_size and max_new_tokens must be >= 1, got {group_size}, {max_new_tokens}")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    device = next(model.parameters()).device
    eos = torch.tensor(sorted(set(eos_token_ids)), device=device)
    n_rows = len(prompts) * group_size
    greedy = temperature == 0

    # Prefill. Shared prefix: Q rows, then the cache is repeated G times; plain: N rows from the start.
    ids, mask = left_pad(prompts if share_prefix else [p for p in prompts for _ in range(group_size)],
                         pad_token_id, device)
    cache_kw = _cache_keyword(model)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask), use_cache=True, logits_to_keep=1)
    cache, logits = getattr(out, cache_kw), out.logits[:, -1]
    if share_prefix and group_size > 1:
        cache.batch_repeat_interleave(group_size)
        logits = logits.repeat_interleave(group_size, dim=0)
        mask = mask.repeat_interleave(group_size, dim=0)

    tokens = torch.full((n_rows, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    logp = torch.zeros((n_rows, max_new_tokens), dtype=torch.float32, device=device)
    entropy = torch.zeros((n_rows, max_new_tokens), dtype=torch.float32, device=device)
    finished = torch.zeros(n_rows, dtype=torch.bool, device=device)
    live = torch.arange(n_rows, device=device)       # which original rows the current batch rows are
    for t in range(max_new_tokens):
        uniform = torch.rand(n_rows, generator=generator, device=device, dtype=torch.float64)  # every row, every step
        scaled = logits.float() / (temperature if not greedy else 1.0)        # the policy is softmax(z / τ)
        log_probs = torch.log_softmax(scaled, dim=-1)                          # (n_live, V)
        if greedy:
            next_tok = log_probs.argmax(dim=-1)
        else:
            probs = torch.softmax(filter_logits(scaled, top_k, top_p), dim=-1).double()
            cdf = probs.cumsum(dim=-1)
            u = (uniform[live] * cdf[:, -1]).unsqueeze(1)
            next_tok = torch.searchsorted(cdf, u, right=True).squeeze(1).clamp(max=probs.shape[-1] - 1)
        step_logp = log_probs.gather(1, next_tok[:, None]).squeeze(1)
        step_entropy = -(log_probs.exp() * log_probs).sum(dim=-1)
        rows_live = ~finished[live] if not drop_finished else torch.ones_like(live, dtype=torch.bool)
        tokens[live[rows_live], t] = next_tok[rows_live]
        logp[live[rows_live], t] = step_logp[rows_live]
        entropy[live[rows_live], t] = step_entropy[rows_live]
        finished[live] |= torch.isin(next_tok, eos) & rows_live
        if finished.all() or t == max_new_tokens - 1:
            break
        # Feed the sampled token. Dropping finished rows shrinks every later step to the live rows.
        keep = ~finished[live]
        if drop_finished and not keep.all():
            idx = keep.nonzero().squeeze(1)
            cache.batch_select_indices(idx)
            live, next_tok, mask = live[idx], next_tok[idx], mask[idx]
        mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype, device=device)], dim=1)
        out = model(input_ids=next_tok[:, None], attention_mask=mask, position_ids=positions(mask)[:, -1:],
                    use_cache=True, **{cache_kw: cache})
        cache, logits = getattr(out, cache_kw), out.logits[:, -1]

    valid = completion_mask(tokens, eos, max_new_tokens)
    tokens = tokens.masked_fill(~valid, pad_token_id)
    return Rollout(prompt_ids=[list(p) for p in prompts], completion_ids=tokens, valid_mask=valid,
                   logp=logp * valid, entropy=entropy * valid, finished=finished, group_size=group_size)


def sample_batched(model, prompts, *, prompts_per_call=0, **kwargs):
    """`sample` over chunks of `prompts_per_call` prompts (0 = all at once), concatenated into one Rollout. The KV
    cache of one call holds prompts_per_call x group_size rows: chunking bounds that memory (e.g. the paper's 64 x 16
    answers of 2k tokens would need ~90 GB of cache on Qwen2.5-1.5B in one call)."""
    if not prompts_per_call or prompts_per_call >= len(prompts):
        return sample(model, prompts, **kwargs)
    parts = [sample(model, prompts[i:i + prompts_per_call], **kwargs) for i in range(0, len(prompts), prompts_per_call)]
    return concat_rollouts(parts, kwargs["pad_token_id"])


def pad_cat(tensors, value):
    """Concatenate (n_i, T_i) tensors along rows into (Σ n_i, max T_i), right-padding each with `value`."""
    width = max(t.shape[1] for t in tensors)
    return torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value) for t in tensors])


def concat_rollouts(parts, pad_id):
    """One Rollout from several (e.g. one per generation call), rows in order; completions right-padded with pad_id
    (masks with False, log-probs and entropies with 0) to the longest."""
    if not parts or len({p.group_size for p in parts}) != 1:
        raise ValueError(f"need at least one rollout, all with the same group_size, got {[p.group_size for p in parts]}")
    return Rollout(prompt_ids=sum((p.prompt_ids for p in parts), []),
                   completion_ids=pad_cat([p.completion_ids for p in parts], pad_id),
                   valid_mask=pad_cat([p.valid_mask for p in parts], False),
                   logp=pad_cat([p.logp for p in parts], 0.0), entropy=pad_cat([p.entropy for p in parts], 0.0),
                   finished=torch.cat([p.finished for p in parts]), group_size=parts[0].group_size)


def _cache_keyword(model):
    """The KV cache's name, as forward keyword and output attribute: `cache` in transformers 5.x (where
    `past_key_values` is a deprecated alias, removed in 5.40), `past_key_values` in 4.x.

    Asked of the transformers model itself, not of a wrapper around it: a LoRA model (peft) or a DDP/FSDP wrapper has a
    forward(*args, **kwargs) that names neither, and would otherwise get the deprecated alias."""
    from transformers import PreTrainedModel
    inner = next((m for m in model.modules() if isinstance(m, PreTrainedModel)), model)
    params = inspect.signature(inner.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def completion_mask(tokens, eos, max_len):
    """Valid = every token up to and including the FIRST end-of-sequence token (pad may equal eos: never use
    `tokens != pad`)."""
    is_eos = torch.isin(tokens, eos)
    first_eos = torch.where(is_eos.any(dim=1), is_eos.float().argmax(dim=1), torch.full_like(is_eos[:, 0], max_len,
                                                                                            dtype=torch.long))
    return torch.arange(tokens.shape[1], device=tokens.device)[None, :] <= first_eos[:, None]
