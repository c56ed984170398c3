"""One full training step (rollout + reward + score + select + update): our train.py vs TRL's GRPOTrainer (ETS).

Same model, prompt, reward and settings on both sides:
  model   : random Qwen2, Qwen2.5's vocabulary (151,936), hidden 256, 4 layers: 41.7M parameters, float32, CPU
            (bench/bench_rollout.py's "qwen2-41m"), saved once as an ordinary folder with the Qwen2.5 tokenizer.
  batch   : 1 prompt x 8 answers x up to 64 new tokens (a random model never stops: always 8 x 64), temperature 1.0,
            no top-k / top-p, beta 0, one update per batch, lr 1e-6, max grad norm 1.0, AdamW, no gradient
            checkpointing on either side (TRL's GRPOConfig turns it ON by default: we turn it off).
  select  : top 20% of the batch's tokens by entropy. Ours: --selector ets --ratio 0.2; TRL: top_entropy_quantile=0.2.
  loss    : token-level mean over the selected tokens. Ours: --loss-norm selected; TRL: loss_type="bnpo" (TRL
            divides by all valid tokens: the 1/rho scale difference of METHOD.md, which costs no time).
  prompt  : the first GSM8K training question through data.render_prompt (the same text on both sides), reward =
            rewards.get_reward("gsm8k") on both sides (always 0 for a random model: advantages are 0, but neither
            side skips the forward/backward for that).
Ours runs as a user would: `python train.py ...` in a subprocess; its metrics.jsonl gives per-step times
(time_rollout_s + time_train_s), time_score_select_s and the process's VmHWM after each step. TRL runs in a fresh
process too (this file with --worker trl); a callback times each optimizer step and reads VmHWM after the last one.
Peak memory is the whole process's VmHWM through the last step on both sides (imports, model load and the steps).
The first step of each run is a warm-up; the median is over the remaining steps; runs alternate ours, trl, ours ...

  python bench/bench_step.py                       # 2 runs each x (1 warm-up + 3) steps, ~6 min on one thread
  python bench/bench_step.py --smoke --model-dir DIR --data FILE --out /tmp/s.json   # tiny, tests/test_bench_smoke.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import emit, environment, median, write_results, run_worker  # noqa: E402

QWEN_TOKENIZER = "/work/shared/data/qwen2.5-tokenizer"
GSM8K_FIRST = {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in "
                           "May. How many clips did Natalia sell altogether in April and May?", "answer": "72"}


def prepare(work_dir):
    """The 41.7M random Qwen2 + Qwen2.5 tokenizer as a model folder, and a one-question data file."""
    from transformers import AutoTokenizer, GenerationConfig
    from bench.bench_rollout import random_qwen2
    model_dir, data = os.path.join(work_dir, "qwen2-41m"), os.path.join(work_dir, "gsm8k-first.jsonl")
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        if not os.path.isdir(QWEN_TOKENIZER):
            raise SystemExit(f"error: the Qwen2.5 tokenizer folder {QWEN_TOKENIZER} is missing; pass --model-dir")
        tok = AutoTokenizer.from_pretrained(QWEN_TOKENIZER)
        model = random_qwen2(151_936, 256, 4, 640)
        model.generation_config = GenerationConfig(eos_token_id=[151645, 151643], pad_token_id=151643)
        model.save_pretrained(model_dir)
        tok.save_pretrained(model_dir)
    with open(data, "w") as f:
        f.write(json.dumps(GSM8K_FIRST) + "\n")
    return model_dir, data


def load_average():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


# ----------------------------------------------------------------------------------------------------------------------
# Ours: train.py as a subprocess.

def run_ours(args, out_dir):
    cmd = [sys.executable, os.path.join(ROOT, "train.py"), "--model", args.model_dir, "--data", args.data,
           "--steps", str(args.steps), "--prompts-per-step", "1", "--group-size", str(args.group_size),
           "--max-new-tokens", str(args.new_tokens), "--micro-batch-size", str(args.group_size),
           "--selector", "ets", "--ratio", "0.2", "--loss-norm", "selected", "--beta", "0", "--lr", "1e-6",
           "--max-grad-norm", "1.0", "--temperature", "1.0", "--no-gradient-checkpointing", "--device", "cpu",
           "--dtype", "float32", "--save-every", "0", "--log-samples", "0", "--seed", "0", "--output-dir", out_dir]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=3600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"error": f"train.py rc={proc.returncode}: " + " | ".join(proc.stderr.strip().splitlines()[-3:])}
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        metrics = [json.loads(line) for line in f if line.strip()]
    steps = [m["time_rollout_s"] + m["time_train_s"] for m in metrics]
    measured = metrics[1:] or metrics
    return {"step_s": steps, "median_step_s": median([m["time_rollout_s"] + m["time_train_s"] for m in measured]),
            "median_rollout_s": median([m["time_rollout_s"] for m in measured]),
            "median_train_s": median([m["time_train_s"] for m in measured]),
            "score_select_share": median([m["time_score_select_s"] / (m["time_rollout_s"] + m["time_train_s"])
                                          for m in measured]),
            "median_score_select_s": median([m["time_score_select_s"] for m in measured]),
            "peak_gb": metrics[-1]["peak_memory_mb"] * 2**20 / 1e9, "valid_tokens": [m["valid_tokens"] for m in metrics],
            "selected_tokens": [m["selected_tokens"] for m in metrics], "process_wall_s": wall}


# ----------------------------------------------------------------------------------------------------------------------
# TRL: GRPOTrainer in this process (called as a fresh worker).

def trl_worker(args):
    import torch
    torch.set_num_threads(args.threads)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    import data as datasets_module
    import rewards
    from bench.common import peak_bytes

    tok = AutoTokenizer.from_pretrained(args.model_dir)
    problem = datasets_module.load_problems(args.data, "train")[0]
    prompt = datasets_module.render_prompt(problem, tok)              # the exact text train.py feeds the model
    reward = rewards.get_reward(problem.reward)

    def reward_fn(prompts, completions, answer, **_):
        return [float(reward(c, a)) for c, a in zip(completions, answer)]

    dataset = Dataset.from_list([{"prompt": prompt, "answer": problem.answer}] * (args.steps + 2))
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32)
    config = GRPOConfig(output_dir=args.trl_out, use_cpu=True, use_vllm=False, bf16=False, report_to="none",
                        loss_type="bnpo", beta=0.0, top_entropy_quantile=0.2, num_generations=args.group_size,
                        per_device_train_batch_size=args.group_size, max_completion_length=args.new_tokens,
                        temperature=1.0, top_p=1.0, top_k=0, repetition_penalty=1.0, learning_rate=1e-6,
                        max_grad_norm=1.0, gradient_checkpointing=False, max_steps=args.steps, logging_steps=1,
                        save_strategy="no", seed=0, disable_tqdm=True, dataloader_num_workers=0)

    class Timer(TrainerCallback):
        def __init__(self):
            self.steps, self.t0, self.peak = [], None, None

        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.steps.append(time.perf_counter() - self.t0)
            self.peak = peak_bytes()

    timer = Timer()
    trainer = GRPOTrainer(model=model, reward_funcs=reward_fn, args=config, train_dataset=dataset,
                          processing_class=tok, callbacks=[timer])
    trainer.train()
    measured = timer.steps[1:] or timer.steps
    emit({"step_s": timer.steps, "median_step_s": median(measured), "peak_gb": timer.peak / 1e9,
          "trl": __import__("trl").__version__})


# ----------------------------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", choices=["trl"], help=argparse.SUPPRESS)
    ap.add_argument("--trl-out", default="", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", default="", help="model folder (default: build the 41.7M random Qwen2)")
    ap.add_argument("--data", default="", help="data file (default: the first GSM8K question)")
    ap.add_argument("--work-dir", default="/tmp/gmts_bench_step")
    ap.add_argument("--steps", type=int, default=4, help="steps per run; the first is a warm-up")
    ap.add_argument("--reps", type=int, default=2, help="runs per side, alternating ours, trl, ours, trl")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sides", nargs="+", default=["ours", "trl"], choices=["ours", "trl"])
    ap.add_argument("--smoke", action="store_true", help="2 steps, G=4, 4 tokens, 1 run each: a rot check")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "step.json"))
    args = ap.parse_args()
    if args.smoke:
        args.steps, args.reps, args.group_size, args.new_tokens = 2, 1, 4, 4

    if args.worker == "trl":
        trl_worker(args)
        return

    os.makedirs(args.work_dir, exist_ok=True)
    if not args.model_dir or not args.data:
        model_dir, data = prepare(args.work_dir)
        args.model_dir, args.data = args.model_dir or model_dir, args.data or data
    sides = list(args.sides)
    if "trl" in sides:
        try:
            import trl  # noqa: F401
        except ImportError:
            print("trl is not installed: pip install trl (bench-only); measuring ours only")
            sides.remove("trl")

    runs, loads = [], [load_average()]
    for rep in range(args.reps):
        for side in (sides if rep % 2 == 0 else sides[::-1]):
            out = os.path.join(args.work_dir, f"{side}-{rep}")
            if side == "ours":
                r = run_ours(args, out)
            else:
                r = run_worker([os.path.abspath(__file__), "--worker", "trl", "--trl-out", out, "--model-dir",
                                args.model_dir, "--data", args.data, "--steps", str(args.steps), "--group-size",
                                str(args.group_size), "--new-tokens", str(args.new_tokens), "--threads",
                                str(args.threads)], timeout_s=3600)
            r.update(side=side, rep=rep, load_after=load_average())
            print(json.dumps(r), flush=True)
            runs.append(r)
    loads.append(load_average())

    summary = {}
    for side in sides:
        ok = [r for r in runs if r["side"] == side and "error" not in r]
        if ok:
            summary[side] = {"median_step_s": median([r["median_step_s"] for r in ok]),
                             "median_peak_gb": median([r["peak_gb"] for r in ok]), "runs": len(ok)}
            if side == "ours":
                summary[side]["score_select_share"] = median([r["score_select_share"] for r in ok])
                summary[side]["median_rollout_s"] = median([r["median_rollout_s"] for r in ok])
                summary[side]["median_train_s"] = median([r["median_train_s"] for r in ok])
    result = {"environment": environment(args.threads), "settings": {
        "model_dir": args.model_dir, "data": args.data, "group_size": args.group_size, "new_tokens": args.new_tokens,
        "steps_per_run": args.steps, "warmup_steps": 1, "beta": 0.0, "lr": 1e-6, "gradient_checkpointing": False,
        "selector": "ets 0.2 (ours) / top_entropy_quantile 0.2 (trl)", "loss": "selected (ours) / bnpo (trl)"},
        "load_average_1_5_15": loads, "summary": summary, "runs": runs}
    write_results(args.out, result)

    print(f"\n{args.group_size} answers x {args.new_tokens} tokens, {args.threads} thread(s), load {loads[0]} -> {loads[-1]}")
    print("| side | s/step (median) | runs | peak GB (VmHWM) | score+select share |")
    print("|---|---|---|---|---|")
    for side, s in summary.items():
        share = f"{100 * s['score_select_share']:.2f}%" if "score_select_share" in s else "-"
        print(f"| {side} | {s['median_step_s']:.2f} | {s['runs']} | {s['median_peak_gb']:.2f} | {share} |")
    if "ours" in summary and "trl" in summary:
        print(f"trl / ours time: {summary['trl']['median_step_s'] / summary['ours']['median_step_s']:.2f}x; "
              f"peak ours / trl: {summary['ours']['median_peak_gb'] / summary['trl']['median_peak_gb']:.2f}x")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
