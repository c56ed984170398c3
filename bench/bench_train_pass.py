"""The training pass alone, in tokens/s of REAL tokens, on a batch whose answers spread in length (issue #23).

    python bench/bench_train_pass.py --model ~/.cache/gmts/SmolLM2-135M-Instruct      # 32 answers of 20..400 tokens
    python bench/bench_train_pass.py --smoke --out /tmp/tp.json                       # tiny random model, seconds

What it times: gmts.trainer.step.accumulate_gradients, the trainer's step 6 (forward through the backbone and the
chunked head, loss, backward, for each micro-batch of --micro-batch-size rows), exactly as train.py calls it, with a
loss whose weights carry the batch-wide normaliser (1 / valid tokens), so any split of the rows into micro-batches
sums to the same gradient. Written against today's code (rows cut into micro-batches in rollout order, each padded
to the batch's widest answer) so it can be rerun unchanged when the pass learns to group rows by length and trim
each micro-batch: the figures to compare are real_tokens_per_s and the gradient checksum (grad_norm, which must
agree to float error between the two versions).

Batch: --rows answers, lengths evenly spread over [--min-len, --max-len] in a fixed shuffled order (rollout order is
not sorted by length), prompts of 60-120 tokens, random token ids (the cost does not depend on the values). Real
tokens = prompt tokens + valid answer tokens; computed = what the forward actually ran (rows x padded width, summed
over micro-batches). Each --reps round is timed after one warm-up pass; medians reported.
"""
import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def build(model_name):
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM
    if model_name == "tiny":
        torch.manual_seed(0)
        return Qwen2ForCausalLM(Qwen2Config(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True))
    return AutoModelForCausalLM.from_pretrained(os.path.expanduser(model_name), dtype="float32")


def batch(rows, min_len, max_len, vocab, seed=0):
    """-> (prompt_ids: rows lists, completion_ids (rows, max_len), valid (rows, max_len)), one prompt per row."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, vocab, (int(n),), generator=gen).tolist()
               for n in torch.randint(60, 121, (rows,), generator=gen)]
    lengths = torch.linspace(min_len, max_len, rows).round().long()[torch.randperm(rows, generator=gen)]
    completion = torch.randint(3, vocab, (rows, max_len), generator=gen)
    valid = torch.arange(max_len)[None, :] < lengths[:, None]
    return prompts, completion, valid


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="~/.cache/gmts/SmolLM2-135M-Instruct", help="a model folder, or tiny")
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--min-len", type=int, default=20)
    ap.add_argument("--max-len", type=int, default=400)
    ap.add_argument("--micro-batch-size", type=int, default=8)
    ap.add_argument("--chunk-size", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="tiny random model, 8 rows of 3..24 tokens, 1 rep")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "train_pass.json"))
    args = ap.parse_args()
    if args.smoke:
        args.model, args.rows, args.min_len, args.max_len, args.reps, args.micro_batch_size = "tiny", 8, 3, 24, 1, 4
    import torch
    from bench.common import environment, write_results
    from gmts.trainer.step import accumulate_gradients
    torch.set_num_threads(args.threads)
    model = build(args.model).train()
    prompts, completion, valid = batch(args.rows, args.min_len, args.max_len, model.config.vocab_size)
    weights = valid.float() / valid.sum()                # the batch-wide normaliser: splits sum to one gradient
    rows = torch.arange(args.rows)

    def loss_fn(chunk, logp):
        return -(logp * weights[chunk][:, :logp.shape[1]]).sum()

    times, norms = [], []
    for rep in range(args.reps + 1):                     # the first round warms up
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        accumulate_gradients(model, prompts, completion, valid, rows, loss_fn, group_size=1,
                             micro_batch_size=args.micro_batch_size, temperature=1.0, chunk_size=args.chunk_size)
        seconds = time.perf_counter() - t0
        norm = float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters() if p.grad is not None)))
        if rep:
            times.append(seconds)
            norms.append(norm)
    real = int(valid.sum()) + sum(len(p) for p in prompts)
    computed = 0
    for chunk in torch.split(rows, args.micro_batch_size):   # what today's pass computes: each micro-batch padded
        computed += len(chunk) * (max(len(prompts[i]) for i in chunk) + completion.shape[1])
    seconds = statistics.median(times)
    result = {"environment": environment(args.threads), "command": " ".join(sys.argv), "model": args.model,
              "params": sum(p.numel() for p in model.parameters()), "rows": args.rows,
              "answer_lengths": [args.min_len, args.max_len], "micro_batch_size": args.micro_batch_size,
              "real_tokens": real, "valid_answer_tokens": int(valid.sum()), "computed_tokens": computed,
              "padding_share": 1 - real / computed, "seconds": times, "median_seconds": seconds,
              "real_tokens_per_s": real / seconds, "grad_norm": norms}
    write_results(args.out, result)
    print(json.dumps({k: result[k] for k in ("real_tokens", "computed_tokens", "padding_share", "median_seconds",
                                             "real_tokens_per_s", "grad_norm")}))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
