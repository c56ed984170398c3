"""One full training step (rollout + reward + score + select + update) on a real model: our train.py
vs TRL's GRPOTrainer, ETS on both sides.

Same model, prompts, reward and settings on both sides (the learning check's task,
bench/learning_check.py):
  model   : SmolLM2-135M-Instruct, float32, CPU (gmts/trainer/smollm2.py's folder, built once from
            the PyPI copy; or --model-dir).
  task    : the offline arithmetic task, sums of two numbers 0..30, the learning check's system
            prompt; reward = rewards.get_reward("gsm8k") (the last number). The base model gets ~21%
            right: groups have mixed rewards, so both sides really run the backward pass.
  batch   : 4 prompts x 8 answers, up to 48 new tokens, temperature 0.5, no top-k / top-p, beta 0,
            one update per batch, lr 1e-5, max grad norm 1.0, AdamW, no gradient checkpointing on
            either side.
  select  : top 20% of the batch's tokens by entropy. Ours: --selector ets --ratio 0.2; TRL:
            top_entropy_quantile=0.2.
  loss    : ours --loss-norm all (divide by every valid token of the batch) = TRL's
            loss_type="bnpo".
Answers differ between the sides (different samplers and random streams), so lengths differ:
tokens/s (generated valid tokens per second of step) is the fair rate; s/step is reported beside it.

Where our gain comes from: train.py skips the forward/backward of answers whose advantage is
exactly 0 (all-equal groups; with beta = 0 their gradient is exactly 0). The side `ours-noskip` is
the same run with that skip off (bench/train_timed.py --no-skip: the rows with A = 0, which
train.update_policy drops, get their passes back); the share of the time
saved that the skip explains is (noskip - ours) / (trl - ours) on s/step.

Ours runs as a user would, train.py's main() in a subprocess (through bench/train_timed.py, which
adds time_score_select_s); its metrics.jsonl gives per-step times (time_rollout_s + time_train_s),
valid tokens, that time and the process's VmHWM. TRL runs in a fresh process too (this file with
--worker trl); a callback times each optimizer step and reads VmHWM after the last one; its logged
completions/mean_length gives the tokens. The first step of each run is a warm-up; the median is
over the remaining steps; runs alternate sides.

  python bench/bench_step.py
      # 2 runs per side x (1 warm-up + 3) steps (pip install trl: bench only)
  python bench/bench_step.py --sides ours ours-noskip
  python bench/bench_step.py --smoke --model-dir DIR --data FILE --out /tmp/s.json
      # tiny, tests/test_bench_smoke.py
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

from bench.common import emit, environment, median, write_results, run_worker
from bench.learning_check import DEFAULT_SYSTEM, DEFAULT_TASK

SIDES = ("ours", "ours-noskip", "trl")


def load_average():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


# --------------------------------------------------------------------------------------------------
# Ours: train.py as a subprocess.

def task_flags(args):
    """train.py's data flags for the task (the learning check's arithmetic, or a file given with
    --data)."""
    if args.data == "arithmetic":
        return ["--data", "arithmetic", "--task-options", DEFAULT_TASK, "--system-prompt",
                DEFAULT_SYSTEM]
    return ["--data", args.data]


def run_ours(args, out_dir, keep_zero_adv_rows=False):
    import shutil
    shutil.rmtree(out_dir, ignore_errors=True)
    # bench/train_timed.py: train.py's main() with the score + select time logged (and --no-skip for
    # ours-noskip)
    cmd = [sys.executable, os.path.join(ROOT, "bench", "train_timed.py"), "--model", args.model_dir,
           *task_flags(args), "--steps", str(args.steps), "--prompts-per-step", str(args.prompts),
           "--group-size", str(args.group_size), "--max-new-tokens", str(args.new_tokens),
           "--micro-batch-size", str(args.prompts * args.group_size), "--selector", "ets",
           "--ratio", "0.2", "--loss-norm", "all", "--beta", "0", "--lr", str(args.lr),
           "--max-grad-norm", "1.0", "--temperature", str(args.temperature),
           "--no-gradient-checkpointing", "--device", "cpu", "--dtype", "float32", "--save-every",
           "0", "--log-samples", "0", "--seed", "0", "--output-dir", out_dir]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    # the same run with gmts/trainer/batches.py's skip of A = 0 rows switched off
    if keep_zero_adv_rows:
        cmd.append("--no-skip")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=3600,
                          check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"error": f"train.py rc={proc.returncode}: "
                + " | ".join(proc.stderr.strip().splitlines()[-3:])}
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        metrics = [json.loads(line) for line in f if line.strip()]
    steps = [m["time_rollout_s"] + m["time_train_s"] for m in metrics]
    measured = metrics[1:] or metrics
    return {"step_s": steps,
            "median_step_s": median([m["time_rollout_s"] + m["time_train_s"] for m in measured]),
            "median_tokens_per_s": median(
                [m.get("valid_tokens", 0) / (m["time_rollout_s"] + m["time_train_s"])
                                           for m in measured]),
            "median_rollout_s": median([m["time_rollout_s"] for m in measured]),
            "median_train_s": median([m["time_train_s"] for m in measured]),
            "score_select_share": median(
                [m.get("time_score_select_s", 0.0) / (m["time_rollout_s"] + m["time_train_s"])
                                          for m in measured]),
            "peak_gb": metrics[-1]["peak_memory_mb"] * 2**20 / 1e9,
            "valid_tokens": [m.get("valid_tokens") for m in metrics],
            "selected_tokens": [m.get("selected_tokens") for m in metrics],
            "mixed_groups": [m.get("mixed_groups") for m in metrics],
            "accuracy": [m.get("accuracy") for m in metrics],
            "skipped": [m.get("skipped", "") for m in metrics], "process_wall_s": wall}


# --------------------------------------------------------------------------------------------------
# TRL: GRPOTrainer in this process (called as a fresh worker).

def trl_worker(args):
    import torch
    torch.set_num_threads(args.threads)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from gmts import data as datasets_module
    from gmts import rewards
    from bench.common import peak_bytes

    tok = AutoTokenizer.from_pretrained(args.model_dir)
    if args.data == "arithmetic":
        problems = datasets_module.load_problems("arithmetic", "train",
                                                 system_prompt=DEFAULT_SYSTEM,
                                                 **json.loads(DEFAULT_TASK))
    else:
        problems = datasets_module.load_problems(args.data, "train")
    reward = rewards.get_reward(problems[0].reward)
    n_rows = (args.steps + 2) * args.prompts
    # the text train.py feeds
    rows = [{"prompt": datasets_module.render_prompt(p, tok), "answer": p.answer}
            for p in (problems * (n_rows // len(problems) + 1))[:n_rows]]

    def reward_fn(prompts, completions, answer, **_):
        return [float(reward(c, a)) for c, a in zip(completions, answer)]

    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32)
    config = GRPOConfig(output_dir=args.trl_out, use_cpu=True, use_vllm=False, bf16=False,
                        report_to="none", loss_type="bnpo", beta=0.0, top_entropy_quantile=0.2,
                        num_generations=args.group_size,
                        per_device_train_batch_size=args.prompts * args.group_size,
                        max_completion_length=args.new_tokens, temperature=args.temperature,
                        top_p=1.0, top_k=0, repetition_penalty=1.0, learning_rate=args.lr,
                        max_grad_norm=1.0, gradient_checkpointing=False, max_steps=args.steps,
                        logging_steps=1, save_strategy="no", seed=0, disable_tqdm=True,
                        dataloader_num_workers=0)

    class Timer(TrainerCallback):
        def __init__(self):
            self.steps, self.t0, self.peak, self.lengths = [], None, None, []

        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.steps.append(time.perf_counter() - self.t0)
            self.peak = peak_bytes()

        def on_log(self, _args, _state, _control, logs=None, **k):
            if logs and "completions/mean_length" in logs:
                self.lengths.append(logs["completions/mean_length"])

    timer = Timer()
    trainer = GRPOTrainer(model=model, reward_funcs=reward_fn, args=config,
                          train_dataset=Dataset.from_list(rows), processing_class=tok,
                          callbacks=[timer])
    trainer.train()
    n = args.prompts * args.group_size
    rates = [length * n / t for length, t in zip(timer.lengths, timer.steps)]
    emit({"step_s": timer.steps, "median_step_s": median(timer.steps[1:] or timer.steps),
          "median_tokens_per_s": median(rates[1:] or rates) if rates else None,
          "valid_tokens": [length * n for length in timer.lengths], "peak_gb": timer.peak / 1e9,
          "trl": __import__("trl").__version__})


# --------------------------------------------------------------------------------------------------

def main():
    from gmts.run.config import Parser      # one default per option, a bad flag in one line
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", choices=["trl"], help=argparse.SUPPRESS)
    ap.add_argument("--trl-out", default="", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", default="", help="model folder (default: SmolLM2-135M-Instruct, "
                                                    "gmts/trainer/smollm2.py)")
    ap.add_argument("--data", default="arithmetic", help="arithmetic (the learning check's task) "
                                                         "or a data file")
    ap.add_argument("--work-dir", default="/tmp/gmts_bench_step")
    ap.add_argument("--steps", type=int, default=4, help="steps per run; the first is a warm-up")
    ap.add_argument("--reps", type=int, default=2, help="runs per side, sides alternating order")
    ap.add_argument("--prompts", type=int, default=4, help="prompts per step")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=0.5)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sides", nargs="+", default=["ours", "trl"], choices=SIDES,
                    help="ours-noskip: train.py with the zero-advantage skip off "
                         "(bench/train_timed.py --no-skip)")
    ap.add_argument("--smoke", action="store_true",
                    help="2 steps, 2 prompts x G=4, 4 tokens, 1 run each: a rot check")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "step.json"))
    args = ap.parse_args()
    if args.smoke:
        args.steps, args.reps, args.prompts, args.group_size, args.new_tokens = 2, 1, 2, 4, 4

    if args.worker == "trl":
        trl_worker(args)
        return

    os.makedirs(args.work_dir, exist_ok=True)
    if not args.model_dir:
        from gmts.trainer.smollm2 import fetch
        # ~/.cache/gmts/SmolLM2-135M-Instruct (built once from the PyPI copy)
        args.model_dir = fetch()
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
            if side.startswith("ours"):
                r = run_ours(args, out, keep_zero_adv_rows=side == "ours-noskip")
            else:
                r = run_worker(
                    [os.path.abspath(__file__), "--worker", "trl", "--trl-out", out, "--model-dir",
                                args.model_dir, "--data", args.data, "--steps", str(args.steps),
                     "--prompts",
                                str(args.prompts), "--group-size", str(args.group_size),
                     "--new-tokens",
                                str(args.new_tokens), "--temperature", str(args.temperature),
                     "--lr", str(args.lr),
                                "--threads", str(args.threads)], timeout_s=3600)
            r.update(side=side, rep=rep, load_after=load_average())
            print(json.dumps(r), flush=True)
            runs.append(r)
    loads.append(load_average())

    summary = {}
    for side in sides:
        ok = [r for r in runs if r["side"] == side and "error" not in r]
        if ok:
            summary[side] = {"median_step_s": median([r["median_step_s"] for r in ok]),
                             "median_tokens_per_s": median([r["median_tokens_per_s"] for r in ok
                                                            if r.get("median_tokens_per_s") is
                                                            not None] or [0.0]),
                             "median_peak_gb": median([r["peak_gb"] for r in ok]), "runs": len(ok)}
            if side.startswith("ours"):
                for key in ("score_select_share", "median_rollout_s", "median_train_s"):
                    summary[side][key] = median([r[key] for r in ok])
    if {"ours", "ours-noskip", "trl"} <= set(summary):
        gain = summary["trl"]["median_step_s"] - summary["ours"]["median_step_s"]
        skip = summary["ours-noskip"]["median_step_s"] - summary["ours"]["median_step_s"]
        summary["skip_share_of_gain"] = skip / gain if gain > 0 else None
    result = {"environment": environment(args.threads), "settings": {
        "model_dir": args.model_dir, "data": args.data,
        "task_options": DEFAULT_TASK if args.data == "arithmetic" else "", "prompts": args.prompts,
        "group_size": args.group_size, "new_tokens": args.new_tokens,
        "temperature": args.temperature, "steps_per_run": args.steps, "warmup_steps": 1,
        "beta": 0.0, "lr": args.lr, "gradient_checkpointing": False,
        "selector": "ets 0.2 (ours) / top_entropy_quantile 0.2 (trl)",
        "loss": "--loss-norm all (ours) / bnpo (trl)"},
        "load_average_1_5_15": loads, "summary": summary, "runs": runs}
    write_results(args.out, result)

    print(f"\n{args.prompts} prompts x {args.group_size} answers x <= {args.new_tokens} tokens, "
          f"{args.threads} thread(s), load {loads[0]} -> {loads[-1]}")
    print("| side | s/step (median) | tokens/s (median) | runs | peak GB (VmHWM) | score+select "
          "share |")
    print("|---|---|---|---|---|---|")
    for side in sides:
        if side in summary:
            s = summary[side]
            share = f"{100 * s['score_select_share']:.2f}%" if "score_select_share" in s else "-"
            print(f"| {side} | {s['median_step_s']:.2f} | {s['median_tokens_per_s']:.1f} | "
                  f"{s['runs']} | {s['median_peak_gb']:.2f} | {share} |")
    if summary.get("skip_share_of_gain") is not None:
        print(f"share of ours' s/step gain over TRL explained by skipping zero-advantage rows: "
              f"{100 * summary['skip_share_of_gain']:.0f}%")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
