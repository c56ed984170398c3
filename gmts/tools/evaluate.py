"""Evaluation the way the paper measures (average@k at temperature 1.0, or greedy), with intervals.

    evaluate_model(model, tokenizer, "math500", samples=16, temperature=1.0)   -> summary dict (+
                                                                               "records")
    compare_results("A.json", "B.json")                                        -> paired difference
                                                                               B - A

Metrics, per benchmark (a data spec "name[:split]", split "test" unless given):
- accuracy: average@k, the mean over problems of the share of a problem's k samples that are correct
  (the paper's metric; with k = 1 at temperature 0 it is greedy accuracy). A sample is correct when
  its reward is >= 1.
- pass_at_k: the unbiased estimator 1 - C(n-c, k)/C(n, k) (gmts/tools/stats.py), for k = 1, 2, 4,
  ... and k = samples.
- ci95 / pass_at_k_ci95: percentile bootstrap over problems (gmts/tools/stats.py says why problems).
- With several benchmarks, the top-level figures are the average over benchmarks (each weighs the
  same, like the paper's "Avg." column), and its interval comes from a bootstrap that resamples
  within each benchmark.
- With repeats R > 1 the same problems are evaluated R times with different sampling seeds: the
  per-problem score pools all R x k samples, and `repeat_spread` gives each run's accuracy, their
  std and the noise floor.

Generation is gmts.trainer.rollout.sample, the trainer's own batched, KV-cached sampler: what eval
measures is what the trainer samples (plus top-k / top-p, which evaluation may use and training must
not).
"""
import hashlib
import json
import math
import os
import sys
import time
import zlib

import numpy as np
import torch
from gmts.run.progress import Progress
from gmts.tools import stats
from gmts.trainer import distributed
from gmts.trainer.rollout import sample

DEFAULT_SPLIT = "test"


# --------------------------------------------------------------------------------------------------
# Data.

def parse_data_spec(spec):
    """"name[:split]" -> (source, split). A path to a local file keeps any ':' it has unless what
    follows the last ':' looks like a split name (no '/', no '.'). A hub data set is
    hf:ORG/NAME[:CONFIG[:SPLIT]] (hf:ORG/NAME::SPLIT for a split of the default config): the source
    keeps the config, as train.py's --data takes it."""
    spec = spec.strip()
    if not spec:
        raise ValueError("empty data spec; use name[:split], e.g. gsm8k:test or math500")
    if spec.startswith("hf:"):
        name, config, split = (spec[3:].split(":") + ["", ""])[:3]
        if spec[3:].count(":") > 2:
            raise ValueError(f"{spec!r}: write a hub data set as hf:ORG/NAME[:CONFIG[:SPLIT]]")
        return "hf:" + name + (f":{config}" if config else ""), split or DEFAULT_SPLIT
    source, sep, split = spec.rpartition(":")
    if sep and source and split and "/" not in split and "." not in split and not os.path.exists(
        spec):
        return source, split
    return spec, DEFAULT_SPLIT


def split_data_arg(data):
    """train.py passes one string ("gsm8k:test" or "gsm8k:test math500" or "gsm8k:test,math500");
    eval.py a list."""
    if isinstance(data, str):
        data = data.replace(",", " ").split()
    specs = [d for d in data if d.strip()]
    if not specs:
        raise ValueError("no evaluation data given")
    if len(set(specs)) != len(specs):
        raise ValueError(f"a benchmark is listed twice: {specs}")
    return specs


def load_benchmark(spec, tokenizer, *, limit=None, data_seed=0, template=None, system_prompt=None,
                   question_field=None, answer_field=None, task_options=None,
                   max_prompt_tokens=None):
    """(problems, prompt_ids, n_skipped) for one data spec. The problem set depends on (spec, limit,
    data_seed, max_prompt_tokens) only, never on the sampling seed, so runs with different seeds and
    different models are paired on the same problems. Problems whose prompt is longer than
    max_prompt_tokens are left out and counted."""
    from gmts import data as datasets
    source, split = parse_data_spec(spec)
    try:
        problems = datasets.load_problems(source, split, limit=limit or None, seed=data_seed,
                                          question_field=question_field or None,
                                          answer_field=answer_field or None,
                                          template=template or None, system_prompt=system_prompt,
                                          **(task_options or {}))
    except datasets.OptionError as err:
        raise ValueError(f"--task-options {json.dumps(task_options)}: {_one_line(err)}") from None
    except (FileNotFoundError, KeyError, ValueError, ImportError) as err:
        raise ValueError(f"--data {spec!r}: {_one_line(err)}") from None
    if not problems:
        raise ValueError(f"--data {spec!r}: no problems")
    ids = [p.id for p in problems]
    if len(set(ids)) != len(ids):
        raise ValueError(f"--data {spec!r}: problem ids are not unique, so results could not be "
                         "paired by id")
    kept, prompt_ids = datasets.prompt_token_ids(problems, tokenizer, max_prompt_tokens or None)
    if not kept:
        raise ValueError(f"--data {spec!r}: no problem fits --max-prompt-tokens "
                         f"{max_prompt_tokens} (all {len(problems)} prompts are longer)")
    return kept, prompt_ids, len(problems) - len(kept)


def _one_line(err):
    text = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
    return " ".join(text.split())


# --------------------------------------------------------------------------------------------------
# Generation and scoring.

def sampling_seed(seed, repeat, spec):
    """One 63-bit seed per (seed, repeat, benchmark): adding a benchmark to the command changes no
    other benchmark's samples, and repeat r of seed s is the same run whatever else is asked for."""
    words = np.random.SeedSequence([int(seed), int(repeat),
                                    zlib.crc32(spec.encode())]).generate_state(2)
    return int((int(words[0]) << 31) ^ int(words[1])) & ((1 << 63) - 1)


def sampling_calls(n_prompts, samples, batch_size, max_rows=0):
    """The sampling calls that answer n_prompts prompts `samples` times each, as lists of (prompt,
    first answer, answers): at most `batch_size` prompts and `max_rows` answers (rows, 0: no bound)
    per call. A prompt whose samples exceed max_rows is answered over several calls."""
    rows = max_rows or batch_size * samples
    if samples <= rows:
        per_call = max(1, min(batch_size, rows // samples))
        return [[(q, 0, samples) for q in range(start, min(start + per_call, n_prompts))]
                for start in range(0, n_prompts, per_call)]
    return [[(q, first, min(rows, samples - first))] for q in range(n_prompts)
            for first in range(0, samples, rows)]


def part_seed(seed, first):
    """The seed of a prompt's answers from `first` on, when they are sampled apart from its first
    ones (sampling_calls); answers 0.. keep the prompt's own seed."""
    if first == 0:
        return seed
    return int(np.random.SeedSequence([seed, first]).generate_state(2, np.uint64)[0] >> 2)


def generate_records(model, tokenizer, problems, prompt_ids, *, spec, repeat, samples, temperature,
                     top_p, top_k, max_new_tokens, eos_ids, batch_size, generator, reward_fns,
                     on_batch=None, max_rows=0):
    """Sample `samples` answers for every problem, at most `batch_size` prompts and `max_rows`
    answers (0: batch_size x samples) per sampling call (sampling_calls), and score each call's
    answers at once (rewards.Scorer). One seed per problem, drawn from `generator` up front, so the
    answers do not depend on how the calls split the problems. One record per problem: the
    question, the reference, every completion with its reward R and, with --reward, each reward's
    own value ("rewards": {name: value or None})."""
    from gmts import rewards
    from gmts.trainer.rollout import prompt_seeds
    scorer = rewards.as_scorer(reward_fns)
    seeds = prompt_seeds(len(problems), generator)
    completions = [[] for _ in problems]
    records = []
    for call in sampling_calls(len(problems), samples, batch_size, max_rows):
        ended = len(records)            # the records of the problems this call completes follow
        group = call[0][2]              # answers per prompt in this call (one part of one prompt)
        roll = sample(model, [prompt_ids[q] for q, _, _ in call], group_size=group,
                      max_new_tokens=max_new_tokens, eos_token_ids=eos_ids,
                      pad_token_id=tokenizer.pad_token_id, temperature=temperature, top_k=top_k,
                      top_p=top_p, seeds=[part_seed(seeds[q], first) for q, first, _ in call])
        tokens, valid, finished = (roll.completion_ids.cpu(), roll.valid_mask.cpu(),
                                   roll.finished.cpu())
        texts = [tokenizer.decode(tokens[row][valid[row]], skip_special_tokens=True)
                 for row in range(len(tokens))]
        scores = scorer.score(texts, [problems[call[row // group][0]] for row in range(len(texts))])
        for row, text in enumerate(texts):
            q = call[row // group][0]
            completions[q].append({"text": text, "reward": scores.total[row],
                                   "tokens": int(valid[row].sum()),
                                   "finished": bool(finished[row])})
            if scores.values:
                completions[q][-1]["rewards"] = {k: v[row] for k, v in scores.values.items()}
        for q, first, n in call:
            if first + n < samples:
                continue
            problem, done = problems[q], completions[q]
            n_correct = sum(c["reward"] >= 1.0 for c in done)
            record = {"benchmark": spec, "id": problem.id, "repeat": repeat,
                      "question": problem.question, "reference": _jsonable(problem.answer),
                      "n": samples, "correct": n_correct, "score": n_correct / samples,
                      "completions": done}
            records.append(record)
        if on_batch is not None and records[ended:]:     # once per call that completes problems
            on_batch(records[ended:])
    return records


def _jsonable(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)


# --------------------------------------------------------------------------------------------------
# Summaries.

def summarize_benchmark(records, *, samples, seed, n_bootstrap=stats.N_BOOTSTRAP):
    """Figures for one benchmark from its records (every repeat). Per problem, the samples of all
    repeats pool."""
    by_id = {}
    for r in records:
        by_id.setdefault(r["id"], []).append(r)
    ids = list(by_id)
    # (P,) samples per problem
    n = np.array([sum(r["n"] for r in by_id[i]) for i in ids])
    # (P,) correct samples
    c = np.array([sum(r["correct"] for r in by_id[i]) for i in ids])
    # (P,) per-problem average@k
    scores = c / n
    repeats = sorted({r["repeat"] for r in records})
    run_accuracy = [
        float(np.mean([r["score"] for r in records if r["repeat"] == k])) for k in repeats]
    pass_k = {str(k): stats.pass_at_k_per_problem(n, c, k) for k in stats.pass_k_values(samples)}
    completions = [comp for r in records for comp in r["completions"]]
    out = {
        "n_problems": len(ids),
        "accuracy": float(scores.mean()),
        "ci95": stats.bootstrap_ci(scores, seed=seed, n_resamples=n_bootstrap),
        "pass_at_k": {k: float(v.mean()) for k, v in pass_k.items()},
        "pass_at_k_ci95": {k: stats.bootstrap_ci(v, seed=seed, n_resamples=n_bootstrap) for k,
                           v in pass_k.items()},
        "mean_reward": float(np.mean([comp["reward"] for comp in completions])),
        "mean_completion_tokens": float(np.mean([comp["tokens"] for comp in completions])),
        "truncated_share": float(np.mean([not comp["finished"] for comp in completions])),
        "repeat_spread": stats.spread(run_accuracy),
        "scores": {i: float(s) for i, s in zip(ids, scores)},            # what --compare pairs on
    }
    if figures := each_reward(completions):
        out["rewards"] = figures
    return out, scores, pass_k


def each_reward(completions):
    """With --reward: each reward's mean over the completions where it applied and its share of
    None (rewards.reward_figures' reward_<label>_mean / _none); {} without --reward."""
    from gmts import rewards
    labels = list(completions[0].get("rewards", {})) if completions else []
    return rewards.reward_figures({label: (
        sum(c["rewards"][label] is not None for c in completions),
        sum(c["rewards"][label] for c in completions if c["rewards"][label] is not None),
        sum(c["rewards"][label] is None for c in completions)) for label in labels})


def summarize(per_benchmark, *, seed, n_bootstrap=stats.N_BOOTSTRAP):
    """Top-level figures: the average over benchmarks, with a stratified bootstrap interval."""
    names = list(per_benchmark)
    score_arrays = [per_benchmark[b][1] for b in names]
    ks = list(per_benchmark[names[0]][2])
    run_accuracy = np.mean([per_benchmark[b][0]["repeat_spread"]["values"] for b in names], axis=0)
    return {
        "accuracy": float(np.mean([a.mean() for a in score_arrays])),
        "ci95": stats.bootstrap_ci(score_arrays, seed=seed, n_resamples=n_bootstrap),
        "pass_at_k": {k: float(np.mean([per_benchmark[b][2][k].mean() for b in names]))
                      for k in ks},
        "pass_at_k_ci95": {k: stats.bootstrap_ci([per_benchmark[b][2][k] for b in names], seed=seed,
                                                 n_resamples=n_bootstrap) for k in ks},
        "repeat_spread": stats.spread(run_accuracy),
    }


def degenerate(records):
    """Why a finished evaluation is no result (every completion empty: the model ends every answer
    at once, or sampling broke), or None. eval.py refuses to save such a run."""
    completions = [c for r in records for c in r["completions"]]
    if completions and not any(c["text"].strip() for c in completions):
        return f"every one of the {len(completions)} completions is empty"
    return None


def metric_name(samples, temperature):
    return "greedy accuracy" if temperature == 0 and samples == 1 else f"average@{samples}"


# --------------------------------------------------------------------------------------------------
# The entry point train.py and eval.py share.

def evaluate_model(model, tokenizer, data, *, limit=None, samples=1, temperature=0.0,
                   max_new_tokens=512, seed=0, eos_ids=None, template=None, system_prompt=None,
                   batch_size=8, progress=True, top_p=1.0, top_k=0, question_field=None,
                   answer_field=None, repeats=1, data_seed=0, task_options=None,
                   n_bootstrap=stats.N_BOOTSTRAP, max_prompt_tokens=None, rewards=None,
                   reward_weights=None, reward_workers=0, max_rows=0, reward_timeout=60.0):
    """Evaluate `model` on one or more benchmarks. Returns the summary dict (accuracy, ci95,
    pass_at_k, benchmarks, ...) with "records": one dict per (benchmark, problem, repeat) holding
    every completion and its reward.

    data: "name[:split]", several separated by spaces or commas, or a list of them.
    batch_size: prompts per generation batch (each brings `samples` rows). max_rows: at most this
    many rows (answers) per sampling call, 0 = batch_size x samples (train.py passes its rollout's
    rows per call); a problem's samples beyond it are drawn over several calls.
    progress: a progress bar on stderr (True), none (False), or a bar named by the string, gone when
    done. seed: sampling seed; repeat r of benchmark b uses torch.Generator seeded from (seed, r,
    b). data_seed: which problems --limit picks (and the arithmetic source's problems); kept apart
    from the sampling seed so that results under different seeds are paired on the same problems.
    max_prompt_tokens: problems with longer prompts are skipped and counted (per benchmark,
    "skipped_too_long"). rewards, reward_weights: --reward SPECs and their weights
    (rewards.load_rewards) for every problem; None: each problem's own reward. A sample is correct
    when its R >= 1. reward_workers: scoring threads (0 = twice the CPUs).
    """
    from gmts import rewards as reward_lib
    specs_of_rewards = rewards
    from gmts.trainer.models import end_of_sequence_ids
    specs = split_data_arg(data)
    if samples < 1 or repeats < 1 or batch_size < 1 or max_new_tokens < 1 or max_rows < 0:
        raise ValueError("samples, repeats, batch_size and max_new_tokens must be >= 1 and "
                         f"max_rows >= 0, got {samples}, {repeats}, {batch_size}, "
                         f"{max_new_tokens}, {max_rows}")
    if not math.isfinite(temperature) or temperature < 0 or not 0 < top_p <= 1 or top_k < 0:
        raise ValueError(f"need temperature >= 0, 0 < top_p <= 1, top_k >= 0; got {temperature}, "
                         f"{top_p}, {top_k}")
    eos_ids = eos_ids if eos_ids is not None else end_of_sequence_ids(model, tokenizer)
    loaded = {
        spec: load_benchmark(spec, tokenizer, limit=limit, data_seed=data_seed, template=template,
                                   system_prompt=system_prompt, question_field=question_field,
                                   answer_field=answer_field, task_options=task_options,
                                   max_prompt_tokens=max_prompt_tokens) for spec in specs}
    skipped = {spec: n for spec, (_, _, n) in loaded.items()}
    loaded = {spec: (problems, ids) for spec, (problems, ids, _) in loaded.items()}
    reward_fns = reward_lib.scorer_for(specs_of_rewards, reward_weights, workers=reward_workers,
                                       timeout=reward_timeout)

    device = next(model.parameters()).device
    total = repeats * sum(len(problems) for problems, _ in loaded.values())
    # progress: True a bar, False none, a string a bar of that name that goes when done (the caller
    # prints the result)
    # Nested in train.py's bar, tqdm moves the cursor with escape sequences; a log file (not a
    # terminal) gets plain lines: the bar takes the first line.
    tty = getattr(sys.stderr, "isatty", lambda: False)()
    bar = Progress(total=total, desc=progress if isinstance(progress, str) else "eval",
                   unit="problem", dynamic_ncols=True, mininterval=1.0,
                   leave=not isinstance(progress, str), disable=not progress,
                   position=None if tty else 0, file=sys.stderr)
    running = {"score": 0.0, "done": 0}

    def on_batch(done):
        # one update per call: per problem, the first call's problems would read as one problem in
        # the whole call's time and the rest at once (a rate 16x too slow, then too fast)
        running["score"] += sum(record["score"] for record in done)
        running["done"] += len(done)
        bar.set_postfix(acc=f"{running['score'] / running['done']:.3f}",
                        bench=done[-1]["benchmark"], refresh=False)
        bar.update(len(done))

    was_training = model.training
    model.eval()
    t0 = time.time()
    records = {spec: [] for spec in specs}
    try:
        for repeat in range(repeats):
            for spec, (problems, prompt_ids) in loaded.items():
                generator = torch.Generator(device=device).manual_seed(
                    sampling_seed(seed, repeat, spec))
                records[spec] += generate_records(
                    model, tokenizer, problems, prompt_ids, spec=spec, repeat=repeat,
                    samples=samples, temperature=temperature, top_p=top_p, top_k=top_k,
                    max_new_tokens=max_new_tokens, eos_ids=eos_ids, batch_size=batch_size,
                    generator=generator, reward_fns=reward_fns, on_batch=on_batch,
                    max_rows=max_rows)
    finally:
        bar.close()
        reward_fns.close()
        model.train(was_training)
    elapsed = time.time() - t0

    per_benchmark = {
        spec: summarize_benchmark(records[spec], samples=samples, seed=seed,
                                  n_bootstrap=n_bootstrap)
                     for spec in specs}
    result = {
        "data": specs,
        "metric": metric_name(samples, temperature),
        "n_problems": sum(len(problems) for problems, _ in loaded.values()),
        "samples": samples, "temperature": temperature, "top_p": top_p, "top_k": top_k,
        "max_new_tokens": max_new_tokens, "seed": seed, "data_seed": data_seed, "repeats": repeats,
        "limit": limit, "batch_size": batch_size, "max_rows": max_rows, "n_bootstrap": n_bootstrap,
        "time_s": elapsed,
        "max_prompt_tokens": max_prompt_tokens, "skipped_too_long": sum(skipped.values()),
        "rewards": list(specs_of_rewards or []),
        "reward_weights": [w for _, w in reward_fns.rewards or ()],
    }
    result.update(summarize(per_benchmark, seed=seed, n_bootstrap=n_bootstrap))
    result["benchmarks"] = {}
    for spec in specs:
        source, split = parse_data_spec(spec)
        result["benchmarks"][spec] = {"source": source, "split": split,
                                      "skipped_too_long": skipped[spec], **per_benchmark[spec][0]}
    result["records"] = [r for spec in specs for r in records[spec]]
    return result


# --------------------------------------------------------------------------------------------------
# Comparing two result files.

def load_scores(path):
    """{benchmark: {problem id: score}} and the run's settings, from a summary .json written by
    eval.py or its per-problem .jsonl (repeats of one problem pool their samples)."""
    if not os.path.exists(path):
        raise ValueError(f"no such result file: {path}")
    if os.path.isdir(path):
        raise ValueError(f"{path} is a folder; give a result file (eval.py's summary .json or its "
                         ".problems.jsonl)")
    try:
        _check_pair(path)
        return _read_scores(path)
    except (OSError, UnicodeDecodeError) as err:     # unreadable, or not text at all
        raise ValueError(f"{path}: cannot be read as an eval.py result ({type(err).__name__}: "
                         f"{_one_line(err)})") \
            from None


def _check_pair(path):
    """A per-problem file beside a summary that records another file's SHA-256 (eval.py writes the
    hash of its own rows into its summary) belongs to another evaluation: ValueError."""
    summary = path.removesuffix(".problems.jsonl") + ".json"
    if not path.endswith(".problems.jsonl") or not os.path.isfile(summary):
        return
    try:
        with open(summary) as fh:
            recorded = json.load(fh).get("problems_sha256")
    except (ValueError, AttributeError):
        return
    with open(path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    if recorded and recorded != digest:
        raise ValueError(f"{path} is not the per-problem file of {summary} (its SHA-256 differs "
                         "from the one the summary records): the two come from different "
                         "evaluations; evaluate again")


def _read_scores(path):
    if path.endswith(".jsonl"):
        counts, meta = {}, {}
        with open(path) as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                    key = (r["benchmark"], r["id"])
                    n, c = counts.get(key, (0, 0))
                    counts[key] = (n + int(r["n"]), c + int(r["correct"]))
                except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
                    raise ValueError(f"{path}:{lineno}: not a per-problem record of eval.py "
                                     f"({type(err).__name__}: {_one_line(err)})") from None
        scores = {}
        for (bench, pid), (n, c) in counts.items():
            scores.setdefault(bench, {})[pid] = c / n
        if not scores:
            raise ValueError(f"{path}: no records")
        return scores, meta
    try:
        with open(path) as fh:
            summary = json.load(fh)
        scores = {bench: dict(entry["scores"]) for bench, entry in summary["benchmarks"].items()}
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{path}: not a summary written by eval.py ({type(err).__name__}: "
                         f"{_one_line(err)})") from None
    meta = {
        k: summary.get(k) for k
        in ("model", "samples", "temperature", "top_p", "top_k", "max_new_tokens",
                                        "repeats", "seed")}
    return scores, meta


def compare_results(path_a, path_b, *, seed=0, n_bootstrap=stats.N_BOOTSTRAP):
    """Paired difference B - A, per benchmark and on the average over benchmarks. Refuses
    (ValueError) unless both files hold exactly the same benchmarks and, within each, the same
    problem ids."""
    scores_a, meta_a = load_scores(path_a)
    scores_b, meta_b = load_scores(path_b)
    if set(scores_a) != set(scores_b):
        raise ValueError(f"{path_a} and {path_b} hold different benchmarks ({sorted(scores_a)} vs "
                         f"{sorted(scores_b)}); evaluate both with the same --data")
    benches = list(scores_a)
    for bench in benches:
        only_a, only_b = set(scores_a[bench]) - set(scores_b[bench]), set(scores_b[bench]) - set(
            scores_a[bench])
        if only_a or only_b:
            example = min(only_a or only_b)
            raise ValueError(f"{bench}: the files hold different problems ({len(only_a)} only in "
                             f"{path_a}, {len(only_b)} only in {path_b}, e.g. {example!r}); "
                             "evaluate both with the same --data and --limit")
    arrays_a, arrays_b = [], []
    out = {"a": path_a, "b": path_b, "a_settings": meta_a, "b_settings": meta_b, "benchmarks": {},
           "n_bootstrap": n_bootstrap, "seed": seed}
    for bench in benches:
        ids = sorted(scores_a[bench])
        a = np.array([scores_a[bench][i] for i in ids])
        b = np.array([scores_b[bench][i] for i in ids])
        diff, ci = stats.paired_difference(a, b, seed=seed, n_resamples=n_bootstrap)
        out["benchmarks"][bench] = {"n_problems": len(ids), "a": float(a.mean()),
                                    "b": float(b.mean()), "difference": diff, "ci95": ci,
                                    "verdict": stats.verdict(ci),
                                    "b_better_problems": int((b > a).sum()),
                                    "a_better_problems": int((a > b).sum())}
        arrays_a.append(a)
        arrays_b.append(b)
    diff, ci = stats.paired_difference(arrays_a, arrays_b, seed=seed, n_resamples=n_bootstrap)
    out.update(a_accuracy=float(np.mean([a.mean() for a in arrays_a])),
               b_accuracy=float(np.mean([b.mean() for b in arrays_b])),
               difference=diff, ci95=ci, verdict=stats.verdict(ci),
               n_problems=sum(len(a) for a in arrays_a))
    differing = sorted(k for k in meta_a if meta_a.get(k) != meta_b.get(k) and k
                       not in ("model", "seed"))
    out["settings_differ"] = [k for k in differing if meta_a.get(k) is not None and meta_b.get(k) is
                              not None]
    return out


# --------------------------------------------------------------------------------------------------
# In-training evaluation (train.py's --eval-every, --eval-before): this protocol on the run's model.

def evaluate_during_training(run, label="eval"):
    """run_eval where it must run: under FSDP every process (each holds a shard of every layer; all
    evaluate identically), else rank 0 alone. Returns the eval_* metrics on rank 0, {} on the
    others. Rank 0 shows a progress bar named `label`."""
    out = {}
    if run.cfg.fsdp:
        with distributed.layers_gathered(run.model):
            out = run_eval(run.cfg, run.model, run.tokenizer, run.eos_ids, run.device,
                           progress=run.main_process and label)
    elif run.main_process:
        out = run_eval(run.cfg, run.model, run.tokenizer, run.eos_ids, run.device, progress=label)
    distributed.barrier()
    return out if run.main_process else {}


def run_eval(cfg, model, tokenizer, eos_ids, device, progress="eval"):
    """In-training evaluation with eval.py's protocol (the same code as `python eval.py`);
    `progress` as in evaluate_model (a name: a bar on stderr that goes when done)."""
    was_training = model.training
    model.eval()
    rows = cfg.eval_max_rows or rollout_rows(cfg)      # answers per sampling call
    result = evaluate_model(model, tokenizer, cfg.eval_data, limit=cfg.eval_limit,
                            samples=cfg.eval_samples, temperature=cfg.eval_temperature,
                            max_new_tokens=cfg.max_new_tokens, seed=cfg.seed, eos_ids=eos_ids,
                            template=cfg.template or None, system_prompt=cfg.system_prompt,
                            batch_size=rows, max_rows=rows, progress=progress,
                            max_prompt_tokens=cfg.max_prompt_tokens,
                            task_options=json.loads(cfg.task_options) if cfg.task_options else None,
                            rewards=cfg.reward or None, reward_weights=cfg.reward_weights,
                            reward_workers=cfg.reward_workers,
                            reward_timeout=cfg.reward_timeout)
    model.train(was_training)
    # with --reward: each one's figures too, eval_reward_<label>_mean / _none
    per_reward = each_reward([c for record in result["records"] for c in record["completions"]])
    return {"eval_accuracy": result["accuracy"], "eval_ci95": result["ci95"],
            "eval_data": cfg.eval_data, **{f"eval_{k}": v for k, v in per_reward.items()}}


def rollout_rows(cfg):
    """The most rows (answers) one sampling call of this process's rollout holds:
    --rollout-batch-size prompts (0: the process's share of --prompts-per-step) x --group-size.
    Evaluation samples in calls of at most as many rows (unless --eval-max-rows says how many), so
    it never needs more KV cache than a step does."""
    share = cfg.prompts_per_step // distributed.world_size()
    return min(cfg.rollout_batch_size or share, share) * cfg.group_size


def check_eval_data(cfg, tokenizer):
    """Fail at start-up, not at the first evaluation, when --eval-data names something that cannot
    be loaded."""
    for spec in split_data_arg(cfg.eval_data):
        try:
            load_benchmark(spec, tokenizer, limit=cfg.eval_limit, template=cfg.template or None,
                           system_prompt=cfg.system_prompt, max_prompt_tokens=cfg.max_prompt_tokens,
                           task_options=json.loads(cfg.task_options) if cfg.task_options else None)
        except (FileNotFoundError, ValueError, KeyError, SystemExit) as err:
            raise SystemExit(f"error: --eval-data {spec!r}: {' '.join(str(err).split())}") from None
