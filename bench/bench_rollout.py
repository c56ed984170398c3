"""Rollout tokens/s: gmts.trainer.rollout.sample (shared prefix, finished rows dropped) vs our plain
path vs `model.generate`, and vs the previous sampler (DynamicCache) and the compiled decode step.

Methods (same model, same prompt, G answers of up to --new-tokens each, temperature 1.0, no top-k /
top-p):
  generate : model.generate(prompt (1, P), num_return_sequences=G, do_sample=True, temperature=1.0,
             top_k=0, top_p=1.0, max_new_tokens=T, KV cache). generate expands the ONE prompt to G
             rows before its prefill, so it is the "prompt repeated G times" case. Sampling
             settings are passed explicitly (a checkpoint's generation_config.json would otherwise
             set its own temperature / top-k / top-p).
  plain    : gmts.trainer.rollout.sample(share_prefix=False, drop_finished=False): prompt repeated
             G times, no rows dropped.
  ours     : gmts.trainer.rollout.sample(share_prefix=True, drop_finished=True): one prefill, KV
             cache repeated G times, finished rows leave the batch (at halvings of the live rows),
             preallocated KV cache written in place.
  old      : the previous sampler, `sample` of gmts/trainer/rollout.py at git revision --old-rev
             (default 8528b56): the same algorithm over transformers' DynamicCache (grown by
             concatenation, copied whenever a row finishes). Extracted with
             `git show REV:gmts/trainer/rollout.py` into a temporary file.
  compiled : ours with decode=CompiledDecode (torch.compile'd decode step over the static cache).
             Its compile time is the warm-up run (same G and lengths, so the measured run finds
             every shape compiled), reported as compile_s; tokens/s is the second run's.
Both of ours also return per-token log-probs and entropies (the trainer's scores); generate returns
tokens only. tokens/s = generated valid tokens (up to and including the first end-of-sequence token)
/ wall time of the call; tokens/cpu-s = the same over the process's CPU time (time.process_time, 1
thread): on a machine shared with other work the wall time includes waiting for a core, the CPU time
mostly does not (memory-bandwidth contention remains).

Sameness: for a fixed seed `ours` and `plain` draw the same samples (tests/test_rollout.py); vs
`generate` it is the same distribution (softmax(z / 1.0) over the whole vocabulary) but not the same
samples: generate draws with torch.multinomial, we draw one uniform per row per step and invert the
CDF.

Models: "qwen2-41m" = a random Qwen2 with Qwen2.5's vocabulary (151,936), hidden 256, 4 layers,
intermediate 640, 4 heads / 2 KV heads, tied embeddings: 41.7M parameters (bench/README.md,
"Rollout"). A random model never stops early (worst case for dropping rows). A folder path (e.g.
SmolLM2-135M-Instruct from bench/get_smollm2.py) is a real model that does stop.

  python bench/bench_rollout.py                     # G = 8, 16 on qwen2-41m, 128 new tokens, 3 reps
  python bench/bench_rollout.py --model ~/.cache/gmts/SmolLM2-135M-Instruct --groups 16 --reps 2
  python bench/bench_rollout.py --smoke --out /tmp/r.json
      # tiny shapes, seconds (tests/test_bench_smoke.py)
  python bench/bench_rollout.py --model ~/.cache/gmts/SmolLM2-135M-Instruct --groups 8 \
      --new-tokens 64 256 512 --no-eos --methods generate old ours --reps 2
      # issue #23: every row runs to the limit

--no-eos: end-of-sequence disabled (no stop token for ours/old; generate gets eos_token_id=None in
its GenerationConfig), so every row runs to --new-tokens. Without it, a real model stops where it
stops.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import (emit, environment, median, write_results, peak_bytes, reset_peak,
                          run_worker)

METHODS = ("generate", "plain", "ours", "old", "compiled")
DEFAULT_METHODS = ("generate", "plain", "ours")
# The Qwen2.5 tokenizer beside the repository (the project's data folder layout), or
# GMTS_QWEN_TOKENIZER.
QWEN_TOKENIZER = os.environ.get("GMTS_QWEN_TOKENIZER", os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), os.pardir, "shared", "data", "qwen2.5-tokenizer"))
# The first GSM8K training question, in Qwen's chat format (a realistic prompt length: ~100 tokens).
QUESTION = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many "
            "clips in May. How many clips did Natalia sell altogether in April and May?")
SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


def random_qwen2(vocab, hidden, layers, intermediate, seed=0):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    config = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, tie_word_embeddings=True)
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).eval()


def build(model_name: str):
    """-> (model, prompt ids, eos ids, pad id)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if model_name == "qwen2-41m":
        model = random_qwen2(151_936, 256, 4, 640)
        prompt = (prompt_ids(AutoTokenizer.from_pretrained(QWEN_TOKENIZER))
                  if os.path.isdir(QWEN_TOKENIZER) else list(range(1000, 1100)))
        return model, prompt, [151645, 151643], 151643              # <|im_end|>, <|endoftext|>
    # --smoke: shapes that run in a second
    if model_name == "tiny":
        return random_qwen2(512, 32, 2, 64), list(range(10, 40)), [0], 1
    tok = AutoTokenizer.from_pretrained(model_name)
    model = AutoModelForCausalLM.from_pretrained(model_name, dtype="float32").eval()
    eos = model.generation_config.eos_token_id
    eos = sorted(set((eos if isinstance(eos, list) else [eos]) + [tok.eos_token_id]) - {None})
    return model, prompt_ids(tok), eos, tok.pad_token_id if tok.pad_token_id is not None else eos[0]


def prompt_ids(tok):
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tok(text, add_special_tokens=False)["input_ids"]


def old_sampler(rev):
    """`sample` of gmts/trainer/rollout.py at git revision `rev`, imported from a temporary file
    (not kept in the repository: gmts has one sampler)."""
    import importlib.util
    import subprocess
    import tempfile
    path = os.path.join(tempfile.gettempdir(),
                        f"gmts_old_rollout_{rev.replace('/', '_')}_{os.getpid()}.py")
    src = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:gmts/trainer/rollout.py"],
                         capture_output=True, text=True, check=True).stdout
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("old_rollout", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.sample


def run_once(method, model, prompt, G, new_tokens, eos, pad, seed, no_eos=False, old_rev="8528b56"):
    """One rollout; returns the number of valid generated tokens."""
    import torch
    from gmts.trainer import compiled_decode
    from gmts.trainer.rollout import sample
    gen = torch.Generator().manual_seed(seed)
    if method == "generate":
        from transformers import GenerationConfig
        torch.manual_seed(seed)
        config = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                  repetition_penalty=1.0, max_new_tokens=new_tokens,
                                  eos_token_id=None if no_eos else eos, pad_token_id=pad,
                                  use_cache=True)
        out = model.generate(torch.tensor([prompt]),
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             num_return_sequences=G, generation_config=config)
        completions = out[:, len(prompt):]
        # generate pads finished rows with pad (which may equal eos): count up to the first eos,
        # like the trainer (rollout.sample's valid_mask).
        is_eos = torch.isin(completions, torch.tensor([-1] if no_eos else eos))
        return int((is_eos.cumsum(dim=1) - is_eos.long() == 0).sum())
    fn = old_sampler(old_rev) if method == "old" else sample
    kw = {"decode": compiled_decode.CompiledDecode} if method == "compiled" else {}
    roll = fn(model, [prompt], group_size=G, max_new_tokens=new_tokens,
              eos_token_ids=[-1] if no_eos else eos, pad_token_id=pad, temperature=1.0,
              generator=gen, share_prefix=(method != "plain"),
              drop_finished=(method != "plain"), **kw)
    return int(roll.valid_mask.sum())


def worker(method, model_name, G, new_tokens, threads, seed, built=None, no_eos=False,
           old_rev="8528b56"):
    """One measurement (normally in a fresh process). `built`: a model already built (--smoke runs
    in-process)."""
    import torch
    torch.set_num_threads(threads)
    model, prompt, eos, pad = built or build(model_name)
    t0 = time.perf_counter()
    # the warm-up compiles every shape the measured run will see: the same run
    if method == "compiled":
        run_once(method, model, prompt, G, new_tokens, eos, pad, seed, no_eos, old_rev)
    else:                        # warm-up: kernels, caches, lazy imports
        run_once(method, model, prompt, 2, 2, eos, pad, seed, no_eos, old_rev)
    warmup_s = time.perf_counter() - t0
    baseline = reset_peak()
    t0, c0 = time.perf_counter(), time.process_time()
    tokens = run_once(method, model, prompt, G, new_tokens, eos, pad, seed, no_eos, old_rev)
    seconds, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    return {"method": method, "model": model_name, "G": G, "new_tokens": new_tokens,
            "prompt_tokens": len(prompt),
            "params_m": sum(p.numel() for p in model.parameters()) / 1e6, "tokens": tokens,
            "seconds": seconds, "tokens_per_s": tokens / seconds, "cpu_s": cpu_s,
            "tokens_per_cpu_s": tokens / cpu_s, "extra_peak_gb": (peak_bytes() - baseline) / 1e9,
            "no_eos": no_eos, "warmup_s": warmup_s,
            **({"compile_s": warmup_s - seconds} if method == "compiled" else {})}


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return None


def main():
    from gmts.run.config import Parser      # one default per option, a bad flag in one line
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", nargs=4, metavar=("METHOD", "G", "SEED", "NEW_TOKENS"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--model", default="qwen2-41m", help="qwen2-41m (random, Qwen2.5 vocab) or a "
                                                         "model folder")
    ap.add_argument("--groups", type=int, nargs="+", default=[8, 16], help="answers per prompt (G)")
    ap.add_argument("--new-tokens", type=int, nargs="+", default=[128],
                    help="answer length limit(s)")
    ap.add_argument("--no-eos", action="store_true", help="end-of-sequence disabled: every row "
                                                          "runs to the limit")
    # 8528b56 ("Layout by role"): the last revision whose sampler used transformers' DynamicCache
    # (issue #23).
    ap.add_argument("--old-rev", default="8528b56", help="git revision whose sampler is `old`")
    ap.add_argument("--reps", type=int, default=3, help="A,B,C rounds per G (alternating), medians "
                                                        "reported")
    ap.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), choices=METHODS)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--smoke", action="store_true",
                    help="tiny random model, G=2, 8 tokens, 1 rep, all in this process (a quick "
                         "check, not a figure)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "rollout.json"))
    args = ap.parse_args()
    if args.smoke:
        args.model, args.groups, args.new_tokens, args.reps = "tiny", [2], [8], 1
    model_name = args.model if args.model in ("qwen2-41m", "tiny") else os.path.expanduser(
        args.model)
    common = {"no_eos": args.no_eos, "old_rev": args.old_rev}

    if args.worker:
        method, G, seed, T = args.worker
        emit(worker(method, model_name, int(G), int(T), args.threads, int(seed), **common))
        return

    script = os.path.abspath(__file__)
    # smoke: one process (a rot check, not a measurement)
    built = build(model_name) if args.smoke else None
    runs, loads = [], [load_average()]
    # One key per (method, G) with one length, as before; per (method, G, length) with several.
    key = (lambda m, G, T: f"{m}@G{G}") if len(args.new_tokens) == 1 else (
        lambda m, G, T: f"{m}@G{G}@T{T}")
    for T in args.new_tokens:
        for G in args.groups:
            for rep in range(args.reps):
                # Rotate the order each round so no method always runs first after a pause (A,B,C /
                # B,C,A / ...).
                order = args.methods[rep % len(args.methods):] + args.methods[
                    :rep % len(args.methods)]
                for method in order:
                    if built is not None:
                        r = worker(method, model_name, G, T, args.threads, rep, built=built,
                                   **common)
                    else:
                        r = run_worker(
                            [script, "--worker", method, str(G), str(rep), str(T), "--model",
                             model_name,
                                        "--threads", str(args.threads), "--old-rev", args.old_rev]
                                       + (["--no-eos"] if args.no_eos else []), timeout_s=3600)
                    r.update(method=method, G=G, rep=rep, new_tokens=T)
                    print(json.dumps(r), flush=True)
                    runs.append(r)
            loads.append(load_average())

    summary = {}
    for r in runs:
        if "error" in r:
            continue
        s = summary.setdefault(key(r["method"], r["G"], r["new_tokens"]),
                               {"tokens_per_s": [], "extra_peak_gb": [], "tokens": [],
                                "compile_s": []})
        s["tokens_per_s"].append(r["tokens_per_s"])
        s.setdefault("tokens_per_cpu_s", []).append(r.get("tokens_per_cpu_s", float("nan")))
        s["extra_peak_gb"].append(r["extra_peak_gb"])
        s["tokens"].append(r["tokens"])
        if "compile_s" in r:
            s["compile_s"].append(r["compile_s"])
    for s in summary.values():
        s["median_tokens_per_s"] = median(s["tokens_per_s"])
        s["median_tokens_per_cpu_s"] = median(s["tokens_per_cpu_s"])
        s["median_extra_peak_gb"] = median(s["extra_peak_gb"])
        if not s["compile_s"]:
            del s["compile_s"]
    result = {"environment": environment(args.threads), "model": model_name,
              "new_tokens": args.new_tokens, "no_eos": args.no_eos, "old_rev": args.old_rev,
              "command": " ".join(sys.argv), "load_average_1_5_15": loads, "summary": summary,
              "runs": runs, "generate_call": "generate(prompt (1,P), num_return_sequences=G, "
                                             "GenerationConfig(do_sample=True, "
                               "temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0, "
                               "use_cache=True))"}
    write_results(args.out, result)

    print(f"\nmodel {model_name}, {args.threads} thread(s), no_eos={args.no_eos}, load {loads[0]} "
          f"-> {loads[-1]}")
    print("| new tokens | G | method | tokens/s (median) | runs | tokens/cpu-s | valid tokens | "
          "extra peak GB | vs generate | vs old |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for T in args.new_tokens:
        for G in args.groups:
            base, old = summary.get(key("generate", G, T)), summary.get(key("old", G, T))
            for method in args.methods:
                s = summary.get(key(method, G, T))
                if s is None:
                    print(f"| {T} | {G} | {method} | failed | | | | | | |")
                    continue
                ratio = (lambda b, s=s:
                         f"{s['median_tokens_per_s'] / b['median_tokens_per_s']:.2f}x"
                         if b else "-")
                print(f"| {T} | {G} | {method} | {s['median_tokens_per_s']:.1f} | "
                      f"{', '.join(f'{x:.1f}' for x in s['tokens_per_s'])} | "
                      f"{s['median_tokens_per_cpu_s']:.1f} | {int(median(s['tokens']))} | "
                      f"{s['median_extra_peak_gb']:.2f} | {ratio(base)} | {ratio(old)} |")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
