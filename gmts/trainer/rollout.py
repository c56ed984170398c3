"""Stage 1 of the loop: sample G answers per prompt, recording what the loss and the scores need.

Not `model.generate`: we need, for every sampled token, its log-probability and the entropy of the
distribution it was drawn from (gmts/METHOD.md, "Where E and ω come from": on-policy with β = 0 the
scores are then known without another forward pass), and the G answers to share one prefill.

Fast and still exact: each prompt is prefilled once, its keys and values written to its G answers'
rows; the KV cache is preallocated and written in place (EagerDecode: the cache and its decode
step); finished rows leave the batch at halvings; one uniform number per row per step, drawn for
every row whether or not it is still live, turned into a token by inverse-CDF sampling, so the
samples do not depend on the batch layout (tests/test_rollout.py). A decode step attends over the
cache's KV heads as they are (grouped-query attention without copying K and V to every query head:
gqa_attention). train.py --compile decodes with gmts/trainer/compiled_decode.py's CompiledDecode
instead of EagerDecode.
"""
import dataclasses
import inspect

import torch
from transformers import AttentionInterface
from transformers.cache_utils import Cache, CacheLayerMixin
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

CHECK_EVERY = 8       # decode steps between the host's looks at the rows (int(): a device sync)


@dataclasses.dataclass
class Rollout:
    prompt_ids: list              # Q lists of prompt token ids (unpadded)
    # (N, T) long, N = Q * G, a prompt's answers contiguous, padded with pad_id
    completion_ids: torch.Tensor
    # (N, T) bool: completion tokens up to and including the first end-of-sequence
    valid_mask: torch.Tensor
    # (N, T) float32: log π_old(o_t), softmax(z / τ) at sampling time (0 at padding)
    old_logp: torch.Tensor
    # (N, T) float32: entropy of softmax(z / τ) at that position (0 at padding)
    entropy: torch.Tensor
    finished: torch.Tensor = None  # (N,) bool: the answer ended with an end-of-sequence token
    group_size: int = None

    @property
    def lengths(self):          # (N,) completion lengths (valid tokens)
        return self.valid_mask.sum(dim=1)


def left_pad(sequences, pad_id, device, width=0):
    """Q lists of ids -> (ids (Q, P), attention_mask (Q, P)), padded on the left so every prompt
    ends at column P-1; P = the longest sequence, or `width` when given."""
    width = width or max(map(len, sequences))
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)    # on the CPU, moved once
    mask = torch.zeros_like(ids)
    for row, seq in enumerate(sequences):              # (an empty one: the slice [width:] is empty)
        ids[row, width - len(seq):], mask[row, width - len(seq):] = torch.as_tensor(seq), 1
    return ids.to(device), mask.to(device)


def cache_shape(config):
    """(layers, kv_heads, head_dim) of a transformers model config (its text config for
    multimodal ones)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = text.num_attention_heads
    return (text.num_hidden_layers, getattr(text, "num_key_value_heads", None) or heads,
            getattr(text, "head_dim", None) or text.hidden_size // heads)


def kv_cache_bytes(rows, max_len, config, dtype):
    """Bytes of the sampler's KV cache (EagerDecode, allocated once): keys and values of (rows,
    kv_heads, max_len, head_dim) per layer; dtype: the compute dtype (or its name). Used by
    gmts/tools/memory.py."""
    layers, kv_heads, head_dim = cache_shape(config)
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    element = torch.empty((), dtype=dtype).element_size()
    return layers * 2 * rows * kv_heads * max_len * head_dim * element


@dataclasses.dataclass(eq=False)
class KVLayer(CacheLayerMixin):
    """One decoder layer's keys and values in `cache` (an EagerDecode), allocated at the first
    write (dtype, device and heads from the model's own keys) and written in place. The batch is
    the buffers' first n rows (n = the keys' batch size at that write). Zeros, not empty: a decode
    step reads every column, the unwritten ones masked (a weight of exactly 0, which would still
    turn a NaN into NaN)."""
    cache: "EagerDecode"
    keys: torch.Tensor = None                  # (rows, kv_heads, columns, head_dim)
    values: torch.Tensor = None                # (rows, kv_heads, columns, head_dim)
    is_initialized: bool = False
    is_compileable, is_sliding = True, False

    def update(self, k, v, *args, **kwargs):     # k, v (n, kv_heads, q, head_dim): q new columns
        cache, n, q = self.cache, len(k), k.shape[2]
        if not self.is_initialized:                # the first write (the prefill) allocates
            self.keys = k.new_zeros((cache.rows, k.shape[1], cache.columns, k.shape[3]))
            self.values = v.new_zeros((cache.rows, v.shape[1], cache.columns, v.shape[3]))
            self.is_initialized = True
        if not cache.decoding:   # the prefill: columns [0, q) of each row's rows / n copies (its
            self.keys.unflatten(0, (n, -1))[..., :q, :] = k[:, None]     # answers), attending over
            self.values.unflatten(0, (n, -1))[..., :q, :] = v[:, None]   # its own columns
            return k, v
        keys, values = ((self.keys, self.values) if n == cache.rows else   # (no slicing op)
                        (self.keys[:n], self.values[:n]))
        keys.index_copy_(2, cache.position, k)   # a decode step: one column at `position`, every
        values.index_copy_(2, cache.position, v)  # column returned (the same shapes at every step)
        return keys, values

    def get_mask_sizes(self, query_length):   # (key columns `update` returns, their offset)
        return (self.cache.columns if self.cache.decoding else query_length), 0

    def get_seq_length(self):                 # the query's first column (the mask's causal offset)
        return self.cache.length

    def get_max_length(self):
        return self.cache.columns

    get_max_cache_shape = get_max_length      # its name in transformers < 5.13

    def lazy_initialization(self, k, v):      # (for transformers' early_initialization)
        self.update(k[:1, :, :0], v[:1, :, :0])


def positions(attention_mask):
    """Position ids that skip left padding: 0 at each row's first real token."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def filter_logits(logits, top_k=0, top_p=1.0):
    """Top-k / nucleus filtering, for evaluation only: training rollouts keep both off, or the
    behaviour policy would not be π_θ (gmts/METHOD.md, "Temperature")."""
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
        # keep the smallest set reaching top_p
        drop = cumulative - torch.softmax(sorted_logits, dim=-1) >= top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits


def draw(logits, u, temperature=1.0, top_k=0, top_p=1.0):
    """One token per row from logits (n, V) and its uniform u (n,) float64, by inverse CDF: returns
    (token (n,) long, its log π (n,) float32, the entropy of softmax(z / τ) (n,) float32);
    temperature 0 = greedy. The sampler's one implementation: the eager decode calls it after the
    forward, the compiled one inside its graph."""
    scaled = logits.float() if temperature in (0, 1) else logits.float() / temperature  # (n, V)
    log_probs = torch.log_softmax(scaled, dim=-1)                              # (n, V)
    if temperature == 0:                                                       # greedy
        token = log_probs.argmax(dim=-1)                                       # (n,)
    else:                                                               # inverse CDF of u
        filtered = filter_logits(scaled, top_k, top_p) if top_k or top_p < 1 else scaled
        cdf = torch.softmax(filtered, dim=-1).double().cumsum(dim=-1)              # (n, V)
        token = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0]   # (n,)
        token = token.clamp(max=cdf.shape[1] - 1)
    return token, log_probs.gather(1, token[:, None])[:, 0], -(log_probs.exp() * log_probs).sum(-1)


def gqa_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers' SDPA attention, except for one query token per row under grouped-query
    attention: query (n, heads, 1, d) is viewed as (n, kv_heads, heads / kv_heads, d), the query
    heads of each KV head as that head's query rows, so SDPA reads K and V (n, kv_heads, L, d) as
    they are. transformers itself expands K and V to every query head (repeat_kv: heads / kv_heads
    copies of the cache per layer and step) whenever a mask is passed (5.17; 5.25 under
    torch.compile). Returns (n, 1, heads, d), None, as transformers' attention functions do;
    kwargs: theirs (dropout, scaling, softcap, ...)."""
    (n, heads, q, d), kv_heads = query.shape, key.shape[1]
    if q != 1 or heads == kv_heads or kwargs.get("dropout") or kwargs.get("softcap") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    mask = (attention_mask.view(n, kv_heads, heads // kv_heads, -1)     # a mask per query head
            if attention_mask is not None and attention_mask.shape[1] > 1 else attention_mask)
    out = torch.nn.functional.scaled_dot_product_attention(     # (n, kv_heads, heads / kv_heads, d)
        query.view(n, kv_heads, -1, d), key, value, attn_mask=mask, scale=kwargs.get("scaling"))
    return out.view(n, 1, heads, value.shape[-1]), None


GQA = "gmts_gqa"          # gqa_attention's name among transformers' attention functions
AttentionInterface.register(GQA, gqa_attention)
AttentionMaskInterface.register(GQA, sdpa_mask)                        # its masks: SDPA's


class EagerDecode(Cache):
    """`sample`'s KV cache and its decode step, for `rows` rows and width + max_new_tokens columns
    (width: the longest prompt's): one KVLayer per decoder layer, (rows, kv_heads, columns,
    head_dim) each, preallocated and written in place; `length`: the columns filled; `position`
    (1,) long: the column a decode step writes (a tensor: a compiled graph reads it in place). The
    prefill writes its columns and attends over them; then (`decoding`) each step writes one column
    and attends over all, the unwritten ones masked by causality. temperature, top_k, top_p: draw's
    (`sampler`). compiled_decode.CompiledDecode: the same, its decode step compiled.

    transformers' DynamicCache grows by concatenation (every decode step copies the whole cache:
    O(L^2) traffic over an answer of L tokens) and its batch_select_indices copies it again
    whenever rows finish. Here a step writes one column, and `select_rows` moves the rows to keep to
    the front, in place. A transformers Cache, so Qwen2, Llama and any model that calls
    cache.update work. `keyword`: the model's forward keyword for it, `cache` from transformers
    5.24, `past_key_values` before, asked of the decoder (a LoRA / FSDP wrapper's forward takes
    **kwargs)."""
    layer = KVLayer                                      # the class of its layers

    def __init__(self, model, rows, width, max_new_tokens, temperature=1.0, top_k=0, top_p=1.0):
        decoder = model.get_decoder()             # the transformers model's, under LoRA or FSDP
        forward = inspect.signature(decoder.forward).parameters
        self.keyword = "cache" if "cache" in forward else "past_key_values"
        self.model, self.rows, self.sampler = model, rows, (temperature, top_k, top_p)
        self.columns, self.length, self.decoding = width + max_new_tokens, 0, False
        self.position = torch.zeros(1, dtype=torch.long, device=next(model.parameters()).device)
        super().__init__(layers=list(map(self.layer, [self] * len(decoder.layers))))

    def step(self, ids, position_ids, mask, u):
        """The model on ids (n, q) at position_ids (n, q), mask (n, q for the prefill, else every
        column; 0 at a prompt's left padding), writing their q columns (the prefill: the prompts',
        then one per decode step) -> draw's (token, log π, entropy) of each row's next token, each
        (len(u),) for u (len(u),) float64: the prefill's n rows drawn len(u) / n times each (the
        answers of a shared prompt)."""
        logits = self.model(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                            use_cache=True, logits_to_keep=1, **{self.keyword: self}).logits[:, -1]
        self.length, self.decoding = self.length + ids.shape[1], True
        self.position.fill_(self.length)
        if len(u) > len(ids):                            # (n, V) -> (len(u), V): each prompt's
            logits = logits.repeat_interleave(len(u) // len(ids), dim=0)   # for its G answers
        return draw(logits, u, *self.sampler)

    def keep_rows(self, keep, *batch):
        """Finished rows leave: the live ones (keep (n,) bool) move up, in the cache and in each
        of `batch` (tensors of the batch's n rows), returned."""
        idx = keep.nonzero().squeeze(1)
        self.select_rows(idx)
        return [x[idx] for x in batch]

    def select_rows(self, idx):
        """Keep rows `idx` (in that order) as the batch's first; copies the filled columns."""
        for layer in self.layers:
            for buf in (layer.keys, layer.values):           # (the gather copies before the write)
                buf[:len(idx), :, :self.length] = buf[idx, :, :self.length]


@torch.no_grad()
def sample(model, prompts, *, group_size, max_new_tokens, eos_token_ids, pad_token_id,
           temperature=1.0, top_k=0, top_p=1.0, generator=None, seeds=None, prompts_per_call=0,
           share_prefix=True, drop_finished=True, decode=EagerDecode):
    """Sample `group_size` completions for each of the Q prompts (lists of token ids); temperature 0
    = greedy. Returns a Rollout of N = Q * group_size rows in prompt order. seeds: one per prompt
    (drawn from `generator` when not given), each prompt's answers drawing their uniforms from it.
    prompts_per_call (0 = all): prompts per KV cache (the paper's 64 x 16 answers of 2k tokens:
    ~90 GB on Qwen2.5-1.5B in one), the seeds drawn for all at once, so the answers do not depend
    on it. share_prefix=False prefills N rows; drop_finished=False keeps finished rows in the batch
    (all three: the same samples, tests/test_rollout.py). A row's tokens after its first
    end-of-sequence token are padding (pad may equal eos: never `tokens != pad`). decode: the KV
    cache's class, its prompt columns the longest prompt's (CompiledDecode: bucketed). The decode
    steps run under gqa_attention when the model's attention is SDPA (eager, flash: as they
    are)."""
    if group_size < 1 or max_new_tokens < 1 or min(map(len, prompts), default=0) < 1:
        raise ValueError(f"every prompt needs at least one token, group_size and max_new_tokens "
                         f">= 1 (got {len(prompts)} prompts, {group_size}, {max_new_tokens})")
    if 0 < prompts_per_call < len(prompts):
        return sample_in_calls(**locals())                                # (sample's arguments)
    device, n_rows = next(model.parameters()).device, len(prompts) * group_size   # N = Q x G
    u = torch.empty((len(prompts), group_size, max_new_tokens), dtype=torch.float64)  # (Q, G, T)
    for prompt, seed in enumerate(seeds or prompt_seeds(len(prompts), generator)):   # on the CPU
        u[prompt].uniform_(generator=torch.Generator().manual_seed(seed))   # from the prompt's seed
    u = u.flatten(0, 1).to(device)                         # (N, T): each answer's, in batch order
    cache = decode(model, n_rows, max(map(len, prompts)), max_new_tokens, temperature, top_k, top_p)
    prefill = prompts if share_prefix else [p for p in prompts for _ in range(group_size)]
    ids, mask = left_pad(prefill, pad_token_id, device, cache.columns - max_new_tokens)  # (Q|N, P)
    tok, tok_logp, tok_entropy = cache.step(ids, positions(mask), mask, u[:, 0])  # (N,) each
    rows = torch.arange(len(ids), device=device).repeat_interleave(n_rows // len(ids))   # (N,)
    first = mask[rows].sum(dim=1, keepdim=True)        # (N, 1): each answer's first position
    mask = torch.nn.functional.pad(mask, (0, max_new_tokens), value=1)[rows]   # (N, columns)
    tokens = torch.full((n_rows, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    logp, entropy = torch.zeros((2, n_rows, max_new_tokens), dtype=torch.float32, device=device)
    live = torch.arange(n_rows, device=device)    # (n,): the original rows of the batch's rows
    done = torch.zeros(n_rows, dtype=torch.bool, device=device)    # (n,) in batch order, as `u`
    eos = torch.tensor(sorted(set(eos_token_ids)), device=device)
    config = model.get_decoder().config                # (the one the attention layers read)
    own = config._attn_implementation
    config._attn_implementation = GQA if own == "sdpa" else own
    try:
        for t in range(max_new_tokens):   # index writes: no sync (masked after a row's end below)
            tokens[live, t], logp[live, t], entropy[live, t] = tok, tok_logp, tok_entropy
            done |= torch.isin(tok, eos)
            n_keep = int((~done).sum()) if (t + 1) % CHECK_EVERY == 0 else len(live)
            if n_keep == 0 or t == max_new_tokens - 1:
                break
            if drop_finished and n_keep <= len(live) // 2:   # at halvings: ~one cache copy in all
                live, tok, mask, first, u, done = cache.keep_rows(
                    ~done, live, tok, mask, first, u, done)     # (their cache rows move up)
            tok, tok_logp, tok_entropy = cache.step(tok[:, None], first + t, mask, u[:, t + 1])
    finally:
        config._attn_implementation = own
    is_eos = torch.isin(tokens, eos)                                                     # (N, T)
    valid = is_eos.cumsum(dim=1) - is_eos.long() == 0     # (N, T): no end-of-sequence before t
    return Rollout(prompt_ids=list(map(list, prompts)), valid_mask=valid,
                   completion_ids=tokens.masked_fill(~valid, pad_token_id), old_logp=logp * valid,
                   entropy=entropy * valid, finished=is_eos.any(dim=1), group_size=group_size)


def sample_in_calls(model, prompts, *, generator, seeds, prompts_per_call, pad_token_id, **kw):
    """sample(prompts_per_call=k) for k < len(prompts): one call per k prompts, their rows in
    order, each prompt with its seed (all drawn at once)."""
    seeds, k = seeds or prompt_seeds(len(prompts), generator), prompts_per_call
    return concat_rollouts([sample(model, prompts[i:i + k], seeds=seeds[i:i + k],
                                   pad_token_id=pad_token_id, **kw)
                            for i in range(0, len(prompts), k)], pad_token_id)


def prompt_seeds(n, gen):
    """n seeds, one per prompt, from the generator `gen` (any device; None: the global one)."""
    return torch.randint(2 ** 62, (n,), generator=gen, device=gen and gen.device).tolist()


def pad_cat(tensors, value):
    """Concatenate (n_i, T_i) tensors along rows into (Σ n_i, max T_i), right-padding each with
    `value`."""
    width = max(t.shape[1] for t in tensors)
    return torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1]),
                                              value=value) for t in tensors])


def concat_rollouts(parts, pad_id):
    """One Rollout (or Batch, its subclass) from several, rows in order: the (N, T) tensors
    right-padded to the longest (ids with pad_id, the rest with 0 / False), the (N,) ones and the
    lists joined."""
    if not parts or len({p.group_size for p in parts}) != 1:
        raise ValueError(f"need at least one rollout, all with the same group_size, got "
                         f"{[p.group_size for p in parts]}")

    def joined(name, values):
        if not torch.is_tensor(values[0]):
            return [x for v in values for x in v] if isinstance(values[0], list) else values[0]
        if values[0].dim() == 1:
            return torch.cat(values)
        return pad_cat(values, pad_id if name == "completion_ids" else 0)
    return dataclasses.replace(parts[0],
                               **{f.name: joined(f.name, [getattr(p, f.name) for p in parts])
                                            for f in dataclasses.fields(parts[0])})
