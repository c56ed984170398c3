"""Log-probs + entropy through the output head: naive vs TRL-style vs gmts.method.head (chunked,
recompute in backward).

Work measured (one fresh process per measurement, forward + backward through logp, entropy as a
no-grad score):
  naive : logits = h @ W.T (float32, T x V), log_softmax, gather, entropy = -(p * logp).sum,
        backward.
  trl   : the same logits and log_softmax gather for logp, entropy chunked over 128 rows at a time.
        The entropy part
          is equivalent to trl.trainer.utils.entropy_from_logits (log_softmax of 128-row chunks,
          -(exp(lp) * lp).sum); reimplemented here so the bench does not depend on trl. It still
        needs the whole logits tensor.
  ours  : gmts.method.head.token_logprobs_and_entropy (never holds T x V).
  torch : torch.nn.functional.linear_cross_entropy chunked over tokens (torch >= 2.13:
        LinearCrossEntropyOptions, reduction "none", recompute in backward) for logp; it gives no
        entropy, so the score takes one more no-grad head matmul per chunk (gmts.token_entropy).
Shapes: Qwen2.5-0.5B head, hidden 896, vocab 151,936; T tokens. Peak = VmHWM - RSS after inputs were
built (includes the 0.54 GB float32 grad of W, which every method allocates).

  python bench/bench_head.py                   # the README table (~15 min on 2 CPU cores, 1 thread)
  python bench/bench_head.py --tokens 256 --reps 1 --no-sweep --big-tokens 0   # smoke run, seconds
  python bench/bench_head.py --methods ours torch --dtype bfloat16 --big-tokens 0 --no-sweep \
      --out bench/results/head_vs_torch_bfloat16.json   # ours against torch's own op, bf16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import (emit, environment, limit_address_space, mem_available_bytes,
                          median, peak_bytes, reset_peak, run_worker, write_results)

HIDDEN, VOCAB = 896, 151_936
METHODS = ("naive", "trl", "ours", "torch")


def entropy_from_logits_rows(logits, chunk_rows: int = 128):
    """Same idea as trl.trainer.utils.entropy_from_logits: entropy of 128-row chunks of the
    flattened logits."""
    import torch
    flat = logits.reshape(-1, logits.shape[-1])
    parts = []
    for chunk in flat.split(chunk_rows):
        logp = torch.log_softmax(chunk, dim=-1)
        parts.append(-(logp.exp() * logp).sum(-1))
    return torch.cat(parts).view(logits.shape[:-1])


def step(method: str, hidden, weight, targets, chunk_size: int):
    """One forward + backward; returns (logp, entropy) detached."""
    import torch
    from gmts.method.head import token_entropy, token_logprobs_and_entropy
    if method == "naive":
        logits = hidden @ weight.T  # (T, V) float32
        logp_all = torch.log_softmax(logits, dim=-1)
        logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    elif method == "trl":
        logits = hidden @ weight.T
        logp = torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None]).squeeze(-1)
        with torch.no_grad():
            entropy = entropy_from_logits_rows(logits)
    elif method == "ours":
        logp, entropy = token_logprobs_and_entropy(hidden, weight, targets, chunk_size=chunk_size)
    elif method == "torch":
        options = torch.nn.LinearCrossEntropyOptions(batch_chunk_size=chunk_size,
                                                     chunking_method=None)
        logp = -torch.nn.functional.linear_cross_entropy(hidden, weight, targets,
                                                         reduction="none", options=options)
        with torch.no_grad():           # the entropy it does not give: a second pass over chunks
            entropy = torch.cat([token_entropy(h @ weight.T) for h in hidden.split(chunk_size)])
    else:
        raise ValueError(f"unknown method {method!r}")
    logp.sum().backward()
    return logp.detach(), entropy


def worker(method: str, tokens: int, chunk_size: int, threads: int, mem_cap: int,
           dtype: str) -> None:
    import torch
    torch.set_num_threads(threads)
    if mem_cap > 0:
        limit_address_space(mem_cap)
    g = torch.Generator().manual_seed(0)
    dtype = getattr(torch, dtype)
    weight = (torch.randn(VOCAB, HIDDEN, generator=g) * 0.02).to(dtype).requires_grad_(True)
    hidden = torch.randn(tokens, HIDDEN, generator=g).to(dtype).requires_grad_(True)
    targets = torch.randint(0, VOCAB, (tokens,), generator=g)
    # Warm up kernels on a few tokens (same code path), then drop those grads and start the peak
    # from here.
    step(method, hidden[:8].detach().requires_grad_(True), weight, targets[:8], chunk_size)
    weight.grad = None
    baseline = reset_peak()
    t0 = time.perf_counter()
    logp, entropy = step(method, hidden, weight, targets, chunk_size)
    seconds = time.perf_counter() - t0
    extra_peak = peak_bytes() - baseline
    with torch.no_grad():           # log p in float64 from the same (rounded) inputs, by chunks
        ref = torch.cat([torch.log_softmax(h.double() @ weight.double().T, -1)
                         .gather(1, t[:, None]).squeeze(1)
                         for h, t in zip(hidden.split(256), targets.split(256))])
    emit(
        {"method": method, "tokens": tokens,
         "chunk_size": chunk_size if method in ("ours", "torch") else None,
         "dtype": str(dtype).replace("torch.", ""),
         "logp_dtype": str(logp.dtype).replace("torch.", ""),
          "seconds": seconds, "extra_peak_gb": extra_peak / 1e9,
          "logp_max_abs_error": float((logp.double() - ref).abs().max()),
          # checksums: every method must agree on these (same seed, same inputs)
          "logp_sum": float(logp.double().sum()), "entropy_sum": float(entropy.double().sum()),
          "grad_w_norm": float(weight.grad.double().norm()),
         "grad_h_norm": float(hidden.grad.double().norm())})


def naive_estimate_gb(tokens: int) -> float:
    # four live (T, V) float32 tensors at the entropy line (logits, logp_all, exp, product), plus W
    # and its grad
    return 4 * tokens * VOCAB * 4 / 1e9 + 2 * VOCAB * HIDDEN * 4 / 1e9


def main() -> None:
    from gmts.run.config import Parser      # one default per option, a bad flag in one line
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", nargs=3, metavar=("METHOD", "TOKENS", "CHUNK"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--mem-cap", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--methods", nargs="+", choices=METHODS, default=["naive", "trl", "ours"],
                    help="the side-by-side methods (torch: torch >= 2.13)")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                    help="of hidden states and head weight")
    ap.add_argument("--tokens", type=int, nargs="+", default=[2048],
                    help="sizes run A,B,C x reps, alternating")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--big-tokens", type=int, default=8192,
                    help="size run once per method (0: skip)")
    ap.add_argument("--chunk", type=int, default=1024, help="chunk_size for 'ours', 'torch'")
    ap.add_argument("--sweep", type=int, nargs="*", default=[256, 512, 1024, 2048],
                    help="chunk sizes to try")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--sweep-tokens", type=int, default=2048)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "head.json"))
    args = ap.parse_args()

    if args.worker:
        method, tokens, chunk = args.worker
        worker(method, int(tokens), int(chunk), args.threads, args.mem_cap, args.dtype)
        return

    script = os.path.abspath(__file__)

    def measure(method, tokens, chunk, mem_cap=0):
        r = run_worker(
            [script, "--worker", method, str(tokens), str(chunk), "--threads", str(args.threads),
             "--mem-cap", str(mem_cap), "--dtype", args.dtype])
        r.setdefault("method", method)
        r.setdefault("tokens", tokens)
        print(json.dumps(r), flush=True)
        return r

    runs = []
    for tokens in args.tokens:  # side by side: A, B, C, A, B, C, ...
        for _ in range(args.reps):
            for method in args.methods:
                runs.append(measure(method, tokens, args.chunk))
    if args.big_tokens:
        for method in sorted(args.methods, key=("ours", "torch", "trl", "naive").index):
            cap = 0
            if method == "naive":
                # Do not risk the OOM killer on a shared machine: cap the address space at what is
                # free minus 2 GB; if the naive path does not fit under it, it fails with an
                # allocation error and we say so.
                cap = mem_available_bytes() - 2 * 2**30
                print(f"naive at {args.big_tokens}: needs "
                      f"~{naive_estimate_gb(args.big_tokens):.1f} GB, cap {cap / 1e9:.1f} GB",
                      flush=True)
            runs.append(measure(method, args.big_tokens, args.chunk, cap))
    sweep = []
    if not args.no_sweep:
        for chunk in args.sweep:
            sweep.append(measure("ours", args.sweep_tokens, chunk))

    summary = {}
    for r in runs:
        if "error" in r:
            continue
        key = f"{r['method']}@{r['tokens']}"
        summary.setdefault(key, {"seconds": [], "extra_peak_gb": []})
        summary[key]["seconds"].append(r["seconds"])
        summary[key]["extra_peak_gb"].append(r["extra_peak_gb"])
        summary[key]["logp_dtype"] = r["logp_dtype"]
        summary[key].setdefault("logp_max_abs_error", []).append(r["logp_max_abs_error"])
    for key, v in summary.items():
        v["median_seconds"] = median(v["seconds"])
        v["median_extra_peak_gb"] = median(v["extra_peak_gb"])
    result = {"environment": environment(args.threads), "hidden": HIDDEN, "vocab": VOCAB,
              "dtype": args.dtype,
              "chunk_size": args.chunk, "summary": summary, "runs": runs, "chunk_sweep": sweep}
    write_results(args.out, result)

    print(f"\n{args.dtype} inputs\n\n| tokens | method | fwd+bwd s (median) | extra peak GB | "
          "time vs naive | peak vs naive | log p: dtype, max abs error |")
    print("|---|---|---|---|---|---|---|")
    for tokens in sorted({r["tokens"] for r in runs}):
        base = summary.get(f"naive@{tokens}")
        for method in args.methods:
            v = summary.get(f"{method}@{tokens}")
            if v is None:
                print(f"| {tokens} | {method} | failed | | | | |")
                continue
            tr = f"{v['median_seconds'] / base['median_seconds']:.2f}x" if base else "-"
            pr = f"{v['median_extra_peak_gb'] / base['median_extra_peak_gb']:.3f}x" if base else "-"
            print(f"| {tokens} | {method} | {v['median_seconds']:.1f} (n={len(v['seconds'])}) | "
                  f"{v['median_extra_peak_gb']:.2f} | {tr} | {pr} | {v['logp_dtype']}, "
                  f"{max(v['logp_max_abs_error']):.1e} |")
    if sweep:
        print(f"\nchunk sweep, ours at {args.sweep_tokens} tokens: " +
              ", ".join(f"{r.get('chunk_size')}: {r.get('seconds', float('nan')):.1f} s / "
                        f"{r.get('extra_peak_gb', float('nan')):.2f} GB" for r in sweep))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
