"""The compiled decode step of gmts/trainer/rollout.py's `sample(decode=CompiledDecode)` (train.py
--compile): the one-token forward torch.compile'd over the sampler's static KV cache (CUDA graphs on
a GPU). The default, eager sampler never enters this file.

A compiled graph has static shapes: the batch's rows n and the cache's width (prompt columns +
max_new_tokens). Both are bucketed, so that a run compiles a small, bounded set of graphs instead of
one per new longest prompt (GSM8K under the Qwen2.5 tokenizer: 53 distinct longest prompts in 100
steps of 8 prompts):
- prompt columns: the longest prompt rounded up to a power of two, at least MIN_PROMPT_WIDTH
  (prompts are left-padded to it; padding is masked, so the samples are the same);
- rows: the call's N = prompts x G, then, as finished rows leave, powers of two (the live rows
  padded with finished ones), never fewer than MIN_ROWS: each row bucket is a compile (25-30 s at
  the 0.5B shape on an H200, docs/training.md, "On a GPU"), while a GPU's decode step reads every
  weight once whatever its rows, so below ~64 rows fewer rows save little (arithmetic, not yet
  measured). N <= MIN_ROWS: one graph per prompt width.
Prompts of at most P tokens: at most (log2(P / MIN_PROMPT_WIDTH) + 1) x (log2(N / MIN_ROWS) + 2)
graphs (graph_bound; tests/test_compile.py counts them over rollouts of mixed prompt lengths).
"""
import torch

from gmts.trainer.rollout import EagerDecode, KVLayer, draw

MIN_PROMPT_WIDTH = 16
MIN_ROWS = 64             # a power of two
BACKEND = "inductor"      # torch.compile's backend (gpu_check.py --dry-run: "eager", no codegen)


def prompt_width(longest):
    """The prompt columns of a compiled rollout whose longest prompt has `longest` tokens."""
    return max(MIN_PROMPT_WIDTH, 1 << (longest - 1).bit_length())


def bucket_rows(keep):
    """Batch rows to keep after finished rows leave: the live ones (keep (n,) bool), then finished
    ones up to a power of two, at least MIN_ROWS, so the compiled step sees few distinct batch
    sizes."""
    live, done = keep.nonzero().squeeze(1), (~keep).nonzero().squeeze(1)
    size = max(1 << (len(live) - 1).bit_length(), MIN_ROWS)
    return torch.cat([live, done[:size - len(live)]])


def graph_bound(longest_prompt, rows):
    """The most graphs a run compiles: prompt widths up to `longest_prompt` x the batch sizes of a
    call of `rows` rows (rows, then powers of two down to MIN_ROWS)."""
    widths = prompt_width(longest_prompt).bit_length() - MIN_PROMPT_WIDTH.bit_length() + 1
    return widths * len({rows} | {1 << i for i in range(rows.bit_length())
                                  if MIN_ROWS <= 1 << i < rows})


def decode_step(cache):
    """The compiled forward and draw of `cache`'s decode steps (a CompiledDecode, decoding):
    (ids (n, 1), position_ids (n, 1), mask (n, columns), u (n,)) -> rollout.draw's (token, log π,
    entropy), each (n,) (CUDA graph outputs: overwritten by the next replay, CompiledDecode.step
    copies them). The forward and the sampler (temperature, top-k / top-p, the CDF and its draw)
    are one graph.

    mode="reduce-overhead" captures CUDA graphs on a GPU (one launch per step instead of dozens of
    kernels per layer); on CPU it is the default mode. The cache's buffers and its position are
    marked static, so CUDA graphs read them in place instead of copying them in at every replay;
    they are allocated once per bucket for the model's life (CompiledDecode), so the graphs
    recorded for them are replayed by every later rollout.
    What it costs: the first call for each shape compiles (seconds to a minute, bench/README.md,
    "Rollout"); torch's compile cache makes a later process faster, not free."""
    import torch._dynamo
    dynamo = torch._dynamo.config
    dynamo.recompile_limit = max(dynamo.recompile_limit, 64)        # one graph per bucket
    torch._dynamo.mark_static_address(cache.position)
    for layer in cache.layers:
        for buf in (layer.keys, layer.values):
            torch._dynamo.mark_static_address(buf)
    on_gpu = cache.position.device.type == "cuda"
    model, cache_kw = cache.model, {cache.keyword: cache}
    sampler = dict(zip(("temperature", "top_k", "top_p"), cache.sampler))

    @torch.compile(mode="reduce-overhead" if on_gpu else None, dynamic=False, backend=BACKEND)
    def forward(ids, position_ids, mask, u):
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                       use_cache=True, **cache_kw).logits[:, -1]
        return draw(logits, u, **sampler)
    return forward


class StaticKVLayer(KVLayer):
    """A KVLayer whose query position is its cache's `position` tensor while decoding, not the
    Python int `length`: a compiled graph reads it in place at every replay instead of being
    specialised to (and recompiled for) each step's int."""

    def get_seq_length(self):
        return self.cache.position if self.cache.decoding else 0


class CompiledDecode(EagerDecode):
    """rollout.EagerDecode with its decode steps compiled (decode_step): bucketed prompt widths and
    rows, the prefill eager. One per bucket (rows, columns, sampler settings), kept on the model
    for the run: a later rollout of the same bucket gets the same one back, emptied: the same
    buffers and position (the same addresses: CUDA graphs are replayed, not recorded again) and
    the same graphs."""
    layer = StaticKVLayer

    def __new__(cls, model, rows, width, max_new_tokens, temperature=1.0, top_k=0, top_p=1.0):
        buckets = model.__dict__.setdefault("_gmts_decode_buckets", {})  # (not a parameter)
        key = (rows, prompt_width(width) + max_new_tokens, temperature, top_k, top_p, cls)
        if key not in buckets:
            buckets[key] = super().__new__(cls)
        return buckets[key]

    def __init__(self, model, rows, width, max_new_tokens, temperature=1.0, top_k=0, top_p=1.0):
        if not hasattr(self, "compiled"):               # a new bucket's (__new__): built once
            super().__init__(model, rows, prompt_width(width), max_new_tokens, temperature, top_k,
                             top_p)
            self.compiled = None
        self.length, self.decoding = 0, False     # empty again, in the same buffers, zeroed: no
        for layer in self.layers:                 # column of the last rollout is read, even masked
            if layer.is_initialized:
                layer.keys.zero_(), layer.values.zero_()

    def keep_rows(self, keep, *batch):    # the live rows, then finished ones up to a power of two
        idx = bucket_rows(keep)
        if len(idx) == len(keep):   # no smaller bucket (MIN_ROWS): every row stays where it is
            return batch
        self.select_rows(idx)
        return [x[idx] for x in batch]

    def step(self, ids, position_ids, mask, u):
        if not self.decoding:                       # the prefill: eager
            return super().step(ids, position_ids, mask, u)
        if self.compiled is None:
            self.compiled = decode_step(self)
        torch.compiler.cudagraph_mark_step_begin()   # the previous step's outputs are consumed
        out = tuple(x.clone() for x in self.compiled(ids, position_ids, mask, u))
        self.length += 1                 # as EagerDecode.step, outside the graph (a Python int,
        self.position.fill_(self.length)              # and the position the graph reads)
        return out
