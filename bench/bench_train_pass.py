"""The training pass alone, in tokens/s of REAL tokens, on a batch whose answers spread in length
(issue #23).

    python bench/bench_train_pass.py --model ~/.cache/gmts/SmolLM2-135M-Instruct
        # 32 answers of 20..400 tokens
    python bench/bench_train_pass.py --smoke --out /tmp/tp.json   # tiny random model, seconds

What it times, side by side in one process, rounds alternated (old, new, tokens, old, ...):
  old     the previous step 6 (before the length grouping), restated in `old_accumulate`:
          rows cut into micro-batches of --micro-batch-size in rollout order, each padded to the
          batch's widest answer;
  new     gmts.trainer.batches.accumulate_gradients as train.py calls it: rows grouped by length
          (longest first), each micro-batch of --micro-batch-size rows trimmed to its own width;
  tokens  the same with --micro-batch-tokens (default: --micro-batch-size x the batch's mean padded
          row, so the passes hold about as many tokens as `new`'s on average).
Each is forward through the backbone and the chunked head, the loss (on-policy, weights with the
batch-wide normaliser, so any split sums to one gradient), backward. The gradient norm is reported
per side: they must agree to float error (float32 here: ~1e-6 relative).

Batch: --rows answers, lengths evenly spread over [--min-len, --max-len] in a fixed shuffled order
(rollout order is not sorted by length), prompts of 60-120 tokens, random token ids (the cost does
not depend on the values). Real tokens = prompt tokens + valid answer tokens; computed = what the
decoder actually ran (rows x padded width, summed over micro-batches, counted by a forward hook).
Each side is timed --reps times after a two-row warm-up pass through each; medians.
"""
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
        return Qwen2ForCausalLM(
            Qwen2Config(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=2, num_key_value_heads=1,
                        tie_word_embeddings=True))
    return AutoModelForCausalLM.from_pretrained(os.path.expanduser(model_name), dtype="float32")


def batch(rows, min_len, max_len, vocab, seed=0):
    """-> (prompt_ids: rows lists, completion_ids (rows, max_len), valid (rows, max_len)), one
    prompt per row."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, vocab, (int(n),), generator=gen).tolist()
               for n in torch.randint(60, 121, (rows,), generator=gen)]
    lengths = torch.linspace(min_len, max_len, rows).round().long()[
        torch.randperm(rows, generator=gen)]
    completion = torch.randint(3, vocab, (rows, max_len), generator=gen)
    valid = torch.arange(max_len)[None, :] < lengths[:, None]
    return prompts, completion, valid


def old_accumulate(model, batch, mb, rows, weights, cfg):
    """Step 6 before the length grouping (gmts/trainer/step.py at 080566f, one process, on-policy):
    micro-batches in rollout order, every one at the batch's full completion width."""
    import torch
    from gmts.method.grpo import policy_loss
    from gmts.trainer.batches import completion_logprobs
    for chunk in torch.split(rows, cfg.micro_batch_size):
        prompts = [batch.prompt_ids[int(i) // cfg.group_size] for i in chunk]
        logp, _ = completion_logprobs(model, prompts, batch.completion_ids[chunk],
                                      batch.valid_mask[chunk], temperature=cfg.temperature,
                                      chunk_size=cfg.chunk_size, with_entropy=False)
        i = mb.position[chunk]
        policy_loss(logp, logp.detach(), mb.advantages[i], weights[i], eps_low=cfg.eps_low,
                    eps_high=cfg.eps_high, beta=cfg.beta).backward()


def main():
    from gmts.run.config import Parser      # one default per option, a bad flag in one line
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="~/.cache/gmts/SmolLM2-135M-Instruct",
                    help="a model folder, or tiny")
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--min-len", type=int, default=20)
    ap.add_argument("--max-len", type=int, default=400)
    ap.add_argument("--micro-batch-size", type=int, default=8)
    ap.add_argument("--micro-batch-tokens", type=int, default=0,
                    help="the `tokens` side's budget (0: see above)")
    ap.add_argument("--chunk-size", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="tiny random model, 8 rows of 3..24 "
                                                         "tokens, 1 rep")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "train_pass.json"))
    args = ap.parse_args()
    if args.smoke:
        (args.model, args.rows, args.min_len, args.max_len, args.reps,
         args.micro_batch_size) = "tiny", 8, 3, 24, 1, 4
    import types

    import torch
    from bench.common import environment, write_results
    from gmts.method.grpo import loss_weights
    from gmts.trainer.batches import Batch, MiniBatch, accumulate_gradients
    torch.set_num_threads(args.threads)
    model = build(args.model).train()
    prompts, completion, valid = batch(args.rows, args.min_len, args.max_len,
                                       model.config.vocab_size)
    n = args.rows
    zeros = torch.zeros(completion.shape)
    advantages = torch.linspace(-1, 1, n)
    rollout = Batch(problems=[None] * n, prompt_ids=prompts, completion_ids=completion,
                    valid_mask=valid, old_logp=zeros, entropy=zeros, texts=[""] * n,
                    rewards=torch.zeros(n), advantages=advantages)
    mb = MiniBatch(rollout, torch.arange(n), 1)
    weights = loss_weights(valid, valid, "selected")          # (n, T) on-policy: r = 1
    real = int(valid.sum()) + sum(len(p) for p in prompts)
    mean_row = sum(len(p) for p in prompts) / n + int(valid.sum()) / n
    tokens = args.micro_batch_tokens or int(args.micro_batch_size * mean_row)
    cfgs = {
        side: types.SimpleNamespace(group_size=1, micro_batch_size=args.micro_batch_size,
                                    temperature=1.0, eps_low=0.2, eps_high=0.28, beta=0.0,
                                        chunk_size=args.chunk_size,
                                        micro_batch_tokens=tokens if side == "tokens" else 0)
            for side in ("old", "new", "tokens")}
    computed = {}
    hook = model.get_decoder().register_forward_hook(
        lambda module, a, kw,
        out: computed.__setitem__("n", computed.get("n", 0) + kw["input_ids"].numel()),
        with_kwargs=True)
    times, norms, passes_tokens = {s: [] for s in cfgs}, {s: [] for s in cfgs}, {}
    for cfg in cfgs.values():      # warm-up: two rows through each side's code, not timed
        accumulate_gradients(model, rollout, mb, mb.rows[:2], weights, cfg, on_policy=True)
    for rep in range(1, args.reps + 1):
        for side, cfg in cfgs.items():
            model.zero_grad(set_to_none=True)
            computed["n"] = 0
            t0 = time.perf_counter()
            if side == "old":
                old_accumulate(model, rollout, mb, mb.rows, weights, cfg)
            else:
                accumulate_gradients(model, rollout, mb, mb.rows, weights, cfg, on_policy=True)
            seconds = time.perf_counter() - t0
            passes_tokens[side] = computed["n"]
            print(f"round {rep} {side}: {seconds:.2f} s", flush=True)
            if rep:
                times[side].append(seconds)
                norms[side].append(float(torch.sqrt(sum((p.grad.double() ** 2).sum()
                                                        for p in model.parameters() if p.grad is
                                                        not None))))
    hook.remove()
    sides = {}
    for side in cfgs:
        seconds = statistics.median(times[side])
        sides[side] = {"median_seconds": seconds, "seconds": times[side],
                       "computed_tokens": passes_tokens[side],
                       "padding_share": 1 - real / passes_tokens[side],
                       "real_tokens_per_s": real / seconds, "grad_norm": norms[side][-1]}
    for side in ("new", "tokens"):
        sides[side]["speedup_vs_old"] = sides["old"]["median_seconds"] / sides[side][
            "median_seconds"]
        sides[side]["grad_norm_rel_diff_vs_old"] = abs(
            sides[side]["grad_norm"] / sides["old"]["grad_norm"] - 1)
    result = {"environment": environment(args.threads), "command": " ".join(sys.argv),
              "model": args.model, "params": sum(p.numel() for p in model.parameters()),
              "rows": args.rows, "answer_lengths": [args.min_len, args.max_len],
              "micro_batch_size": args.micro_batch_size, "micro_batch_tokens": tokens,
              "real_tokens": real, "valid_answer_tokens": int(valid.sum()), "sides": sides}
    write_results(args.out, result)
    for side, r in sides.items():
        print(f"{side:>6}: {r['median_seconds']:.2f} s  {r['real_tokens_per_s']:.0f} real tokens/s "
              f" computed {r['computed_tokens']} (padding {r['padding_share']:.0%})  grad norm "
              f"{r['grad_norm']:.9g}"
              + (f"  {r['speedup_vs_old']:.2f}x old" if "speedup_vs_old" in r else ""))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
