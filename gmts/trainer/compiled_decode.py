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

from gmts.trainer.rollout import EagerDecode, KVLayer

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


def decode_step(model, cache, cache_kw):
    """The decode step over `cache` (gmts/trainer/rollout.py's KVCache of StaticKVLayers, after the
    prefill): step(ids (n, 1), position_ids (n, 1), mask (n, max_len)) -> logits (n, V) float32 (a
    copy: CUDA graph outputs are overwritten by the next replay).

    Switches the layers to static mode (writes at `position`, attention over all max_len columns):
    every step then has the same shapes for a given n. mode="reduce-overhead" captures CUDA graphs
    on a GPU (one launch per step instead of dozens of kernels per layer); on CPU it is the default
    mode. The cache's buffers are marked static, so CUDA graphs read them in place instead of
    copying them in at every replay.
    What it costs: the first call for each shape compiles (seconds to a minute, bench/README.md,
    "Rollout"); torch's compile cache makes a later process faster, not free."""
    import torch._dynamo
    dynamo = torch._dynamo.config
    dynamo.recompile_limit = max(dynamo.recompile_limit, 64)        # one graph per bucket
    position = torch.tensor(cache.get_seq_length(), device=cache.layers[0].keys.device)
    torch._dynamo.mark_static_address(position)
    for layer in cache.layers:
        layer.position = position                 # one 0-d tensor shared by every layer
        for buf in (layer.keys, layer.values):
            torch._dynamo.mark_static_address(buf)
    on_gpu = position.device.type == "cuda"

    @torch.compile(mode="reduce-overhead" if on_gpu else None, dynamic=False, backend=BACKEND)
    def forward(ids, position_ids, mask):
        return model(input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=True,
                     **cache_kw).logits[:, -1].float()

    def step(ids, position_ids, mask):
        position.fill_(cache.layers[0].length)   # the column this step writes (a static address)
        torch.compiler.cudagraph_mark_step_begin()   # the previous step's outputs are consumed
        logits = forward(ids, position_ids, mask).clone()
        for layer in cache.layers:                # (outside the graph: a Python int)
            layer.length += 1
        return logits
    return step


class StaticKVLayer(KVLayer):
    """A KVLayer with a static mode, on once `position` (a 0-d long tensor) is set by decode_step
    after the prefill: a step writes its one column at `position` with index_copy_ and attention
    reads all max_len columns; the unwritten ones are zeros and masked by causality (query position
    = `position`), so every step has the same shapes and a compiled graph (CUDA graphs on a GPU)
    replays it. `length` is then advanced by decode_step, outside the graph."""
    position = None

    def update(self, key_states, value_states, *args, **kwargs):
        if self.position is None:                                  # the prefill: eager
            return super().update(key_states, value_states)
        n = key_states.shape[0]
        self.keys[:n].index_copy_(2, self.position.view(1), key_states)
        self.values[:n].index_copy_(2, self.position.view(1), value_states)
        return self.keys[:n], self.values[:n]

    def get_mask_sizes(self, query_length):
        return super().get_mask_sizes(query_length) if self.position is None else (self.max_len, 0)

    def get_seq_length(self):
        return self.length if self.position is None else self.position


class CompiledDecode(EagerDecode):
    """rollout.EagerDecode for the compiled step: bucketed prompt widths and rows, the prefill
    eager, then the decode step over the static cache (decode_step)."""
    layer = StaticKVLayer

    def __init__(self, model, rows, width, max_new_tokens):
        super().__init__(model, rows, prompt_width(width), max_new_tokens)
        self.step = None

    def keep_rows(self, keep):      # the live rows, then finished ones up to a power of two
        idx = bucket_rows(keep)
        if len(idx) == len(keep):   # no smaller bucket (MIN_ROWS): every row stays where it is
            return torch.arange(len(keep), device=keep.device)
        self.cache.select_rows(idx)
        return idx

    def __call__(self, ids, position_ids, mask):     # the first call is the prefill
        if self.step is not None:
            return self.step(ids, position_ids, mask)
        logits = super().__call__(ids, position_ids, mask)          # the prefill, eager
        self.step = decode_step(self.model, self.cache, self.cache_kw)
        return logits
