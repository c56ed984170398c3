"""Evaluate a checkpoint the way the paper does, with 95% intervals; compare two results honestly.

    python eval.py --model Qwen/Qwen2.5-Math-1.5B --data math500 --samples 16 --temperature 1.0
        # average@16
    python eval.py --model runs/x/checkpoints/step-000100 --data gsm8k:test math500 --temperature 0
        # greedy, a table
    python eval.py --model runs/x/checkpoints/step-000100 --data math500 --samples 4 --repeat 5
        # the noise floor
    python eval.py --compare base.json trained.json          # paired B - A

Every figure comes with a 95% percentile-bootstrap interval over problems (gmts/tools/stats.py).
Outputs: a summary JSON (--output) and, beside it, a per-problem .jsonl holding every sampled
completion and its reward. One evaluation owns its --output while it runs (an flock on
OUTPUT.lock, gmts/run/folder.py): a second one into the same file is refused in one line. Both
files are written under names of their own, then renamed into place, the summary last and naming
its per-problem file's SHA-256: a summary on disk is a complete result and the rows beside it are
its own (a run whose every completion is empty is refused). A checkpoint gmts wrote is checked
against its manifest before it loads. The logic lives in gmts/tools/evaluate.py (train.py's
--eval-every calls the same evaluate_model); this file only reads flags, loads the model, prints
and writes.
"""
import contextlib
import hashlib
import json
import os
import re
import sys
import tempfile
import time


def build_parser():
    # a bad flag is one line, like train.py's (not a usage block)
    from gmts.run.config import Parser
    p = Parser(prog="eval.py", description="\n\n".join(__doc__.split("\n\n")[:2]))
    p.add_argument("--model", help="hub id or local folder (config.json + *.safetensors + "
                                   "tokenizer); no default: required unless --compare")
    p.add_argument("--tokenizer", default="", help="tokenizer id or folder, if not the model's "
                                                   "(default: the --model's)")
    p.add_argument("--data", nargs="+", default=["math500"],
                   help="benchmarks, each name[:split] (split: test)")
    p.add_argument("--limit", type=int, default=0, help="first N problems of each benchmark (0 = "
                                                        "all)")
    p.add_argument("--samples", type=int, default=1, help="samples per problem (k of average@k)")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="sampling temperature (0 = greedy)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (evaluation only)")
    p.add_argument("--top-k", type=int, default=0, help="top-k sampling, 0 = off (evaluation only)")
    p.add_argument("--max-new-tokens", type=int, default=1024, help="answer length limit in tokens")
    p.add_argument("--max-prompt-tokens", type=int, default=0,
                   help="problems with longer prompts are skipped and counted (0 = the model's "
                        "context minus --max-new-tokens, from its config.json)")
    p.add_argument("--batch-size", type=int, default=16, help="prompts per generation batch (x "
                                                              "samples rows)")
    p.add_argument("--max-rows", type=int, default=0,
                   help="at most N answers per sampling call (0 = --batch-size x --samples); a "
                        "problem's samples beyond it are drawn over several calls")
    p.add_argument("--repeat", type=int, default=1, help="evaluate R times with different seeds; "
                                                         "report the spread")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (also seeds the bootstrap)")
    p.add_argument("--data-seed", type=int, default=0, help="problem-set seed (only the arithmetic "
                                                            "source uses it)")
    p.add_argument("--template", default=None, help="prompt template (data/templates.py) (default: "
                                                    "the source's)")
    p.add_argument("--system-prompt", default=None, help="replace the template's system prompt ('' "
                                                         "drops it; default: the template's)")
    p.add_argument("--question-field", default=None, help="question column of a local file "
                                                          "(default: the first of question, "
                                                   "problem, prompt, input)")
    p.add_argument("--answer-field", default=None, help="answer column of a local file (default: "
                                                        "the first of answer, "
                                                 "final_answer, target, output)")
    p.add_argument("--task-options", default="", help='JSON options for the source, e.g. '
                                                      '\'{"digits": 1}\'')
    p.add_argument("--reward", action="append", default=[], metavar="SPEC",
                   help="a reward for every answer, repeatable: gsm8k | math | choice | code | "
                        "path/file.py:function | package.module:function; R = the weighted sum, "
                        "correct when R >= 1 (default: each row's own reward; docs/your_task.md)")
    p.add_argument("--reward-weights", default="",
                   help="weights of the --reward functions, e.g. 1,0.1 (default: all 1)")
    p.add_argument("--reward-workers", type=int, default=0,
                   help="threads scoring answers (0 = twice the CPUs)")
    p.add_argument("--reward-timeout", type=float, default=60.0,
                   help="seconds one call of a --reward function of your own may take "
                        "(docs/your_task.md)")
    p.add_argument("--device", default="auto", help="auto (cuda if available) | cpu | cuda | "
                                                    "cuda:1 ...")
    p.add_argument("--dtype", default="auto", help="auto (bf16 on GPU, float32 on CPU), float32, "
                                                   "bfloat16, float16")
    p.add_argument("--bootstrap", type=int, default=10_000, help="bootstrap resamples")
    p.add_argument("--output", default="", help="summary JSON path (default: "
                                                "out/eval/<model>_<data>_s<seed>[_<settings>].json"
                                                ", <settings> naming any setting that changes "
                                                "results, e.g. _k4-T1-<8 hex>); the per-problem "
                                                "file is <output stem>.problems.jsonl")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"),
                   help="two result files (.json or .problems.jsonl): "
                        "paired difference B - A with a 95%% interval")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def pct(x):
    return f"{100 * x:.1f}"


def interval(ci):
    return f"[{pct(ci[0])}, {pct(ci[1])}]"


def print_table(result):
    """Rows: the metrics; columns: one per benchmark, plus the average over benchmarks (as in the
    paper's tables)."""
    benches = list(result["benchmarks"])
    columns = benches + (["average"] if len(benches) > 1 else [])
    entries = [result["benchmarks"][b] for b in benches] + ([result] if len(benches) > 1 else [])
    rows = [(result["metric"], [pct(e["accuracy"]) for e in entries]),
            ("  95% CI", [interval(e["ci95"]) for e in entries])]
    for k in result["pass_at_k"]:
        if k != "1" or result["samples"] > 1:
            rows.append((f"pass@{k}", [pct(e["pass_at_k"][k]) for e in entries]))
            rows.append(("  95% CI", [interval(e["pass_at_k_ci95"][k]) for e in entries]))
    if result["repeats"] > 1:
        rows.append(
            (f"std over {result['repeats']} runs",
             [pct(e["repeat_spread"]["std"]) for e in entries]))
        rows.append(
            ("  noise floor (95%)", [pct(e["repeat_spread"]["noise_floor_95"]) for e in entries]))
    rows.append(("problems", [str(e["n_problems"]) for e in entries]))
    rows.append(
        ("cut at max tokens %", [pct(result["benchmarks"][b]["truncated_share"]) for b in benches]
                 + ([""] if len(benches) > 1 else [])))
    first = max(len(r[0]) for r in rows)
    widths = [max(len(c), *(len(r[1][i]) for r in rows)) for i, c in enumerate(columns)]
    print(" " * first + "  " + "  ".join(c.rjust(w) for c, w in zip(columns, widths)))
    for label, cells in rows:
        print(label.ljust(first) + "  " + "  ".join(c.rjust(w) for c, w in zip(cells, widths)))


def _name_tag(name):
    """A file-name tag for a hub id or built-in name (its own text), or for a local path: its last
    two components and 8 hex digits of its real path, so RUN_A/checkpoints/step-000001 and
    RUN_B/checkpoints/ step-000001 get two names."""
    safe = lambda text: re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "model"
    path = os.path.expanduser(name.split(":")[0]) if name else name
    if not path or not os.path.exists(path):
        return safe(name)
    real = os.path.realpath(path)
    parts = [p for p in real.split(os.sep) if p][-3:]
    if len(parts) == 3 and parts[1] == "checkpoints":        # RUN/checkpoints/step-N -> RUN-step-N
        parts = [parts[0], parts[2]]
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:8]
    return f"{safe('-'.join(parts[-2:]))}-{digest}" + (f"-{safe(name.split(':', 1)[1])}"
                                                       if ":" in name else "")


# the flags that change what an evaluation measures or how it reports it (besides --model, --data
# and --seed, which the name spells out); --reward-workers, --quiet and --output do not
RESULT_FLAGS = ("tokenizer", "limit", "samples", "temperature", "top_p", "top_k", "max_new_tokens",
                "max_prompt_tokens", "batch_size", "repeat", "data_seed", "template",
                "system_prompt", "question_field", "answer_field", "task_options", "reward",
                "reward_weights", "device", "dtype", "bootstrap")


def result_settings(args):
    """{flag: value} of RESULT_FLAGS that differ from their defaults (--samples as used: 1 when
    --temperature is 0)."""
    defaults = vars(build_parser().parse_args([]))
    values = {k: getattr(args, k) for k in RESULT_FLAGS}
    if values["temperature"] == 0:
        values["samples"] = 1
    return {k: v for k, v in values.items() if v != defaults[k]}


def default_output(model, specs, seed, settings=None):
    """out/eval/<model>_<data>_s<seed>.json, unique per model folder and data file (_name_tag);
    settings (result_settings: those that differ from the defaults) add _<sampling>-<8 hex of all
    of them>, so results under different settings never share a file."""
    data = "+".join(_name_tag(s) for s in specs)
    tag = ""
    if settings:
        samples, temperature = settings.get("samples", 1), settings.get("temperature", 1.0)
        sampling = "greedy" if temperature == 0 else f"k{samples}-T{temperature:g}"
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
        tag = f"_{sampling}-{digest}"
    return os.path.join("out", "eval", f"{_name_tag(model)}_{data}_s{seed}{tag}.json")


def one_line_errors(fn, *args, **kwargs):
    """Loading errors from transformers span several lines; the command line reports one."""
    try:
        return fn(*args, **kwargs)
    except SystemExit as err:
        raise SystemExit(" ".join(str(err.code).split())) from None


def run_compare(args):
    from gmts.tools.evaluate import compare_results
    try:
        cmp = compare_results(args.compare[0], args.compare[1], seed=args.seed,
                              n_bootstrap=args.bootstrap)
    except ValueError as err:
        raise SystemExit(f"error: --compare: {err}") from None
    print(f"A = {cmp['a']}\nB = {cmp['b']}")
    if cmp["settings_differ"]:
        print(f"note: the runs differ in {', '.join(cmp['settings_differ'])}: "
              + "; ".join(
                  f"{k} {cmp['a_settings'][k]} vs {cmp['b_settings'][k]}" for k
                  in cmp["settings_differ"]))
    rows = list(cmp["benchmarks"].items())
    if len(rows) > 1:
        rows.append(
            ("average",
             {"a": cmp["a_accuracy"], "b": cmp["b_accuracy"], "difference": cmp["difference"],
                                 "ci95": cmp["ci95"], "verdict": cmp["verdict"]}))
    width = max(len(name) for name, _ in rows)
    print(f"{'':{width}}  {'A':>6}  {'B':>6}  {'B - A':>6}  {'95% CI':>15}  verdict")
    for name, e in rows:
        print(f"{name:{width}}  {pct(e['a']):>6}  {pct(e['b']):>6}  "
              f"{100 * e['difference']:>+6.1f}  {interval(e['ci95']):>15}  {e['verdict']}")
    words = {"better": "better than A", "worse": "worse than A",
             "indistinguishable": "indistinguishable from A"}
    print(f"verdict: B is {words[cmp['verdict']]}"
          + f" ({100 * cmp['difference']:+.1f} points, 95% CI {interval(cmp['ci95'])}, paired "
            f"bootstrap over {cmp['n_problems']} problems)")
    if args.output:
        write_result(args.output, json.dumps(cmp, indent=2))
    return cmp


def write_result(path, text):
    """Write `path` whole (a temporary file of its own, renamed into place) or fail with one line,
    leaving no partial file."""
    from gmts.run.checkpoint import write_text_atomic
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        write_text_atomic(path, text, unique=True)
    except OSError as err:
        raise SystemExit(f"error: could not write {path} ({err.strerror or err})") from None


def write_results(output, summary, records):
    """The per-problem file and the summary as one result: the summary names the per-problem file
    and its SHA-256. Both are written whole under names of their own first (a full disk fails here,
    in one line, and leaves the earlier result as it was), then the old summary is removed and the
    rows and the new summary are renamed in. A kill at any point leaves the old pair, rows without a
    summary (no result), or the new pair; never one evaluation's summary beside another's rows."""
    per_problem = problems_path(output)
    rows = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    summary["problems_file"] = per_problem
    summary["problems_sha256"] = hashlib.sha256(rows.encode("utf-8")).hexdigest()
    written = []
    try:
        for path, text in ((per_problem, rows),
                           (output, json.dumps(summary, indent=2, ensure_ascii=False))):
            written.append((_written_aside(path, text), path))
        if os.path.exists(output):
            os.remove(output)
        for tmp, path in written:
            os.replace(tmp, path)
    except OSError as err:
        for tmp, _ in written:
            with contextlib.suppress(OSError):
                os.remove(tmp)
        raise SystemExit(f"error: could not write {output} and {per_problem} "
                         f"({err.strerror or err}); nothing of this evaluation was kept") from None
    return per_problem


def _written_aside(path, text):
    """`text` in a new file .NAME.<random>.tmp beside `path`, fsynced; returns its path."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)),
                               prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    return tmp


def clean_partial_writes(output):
    """Remove the temporary files a killed evaluation left beside `output` (.NAME.<random>.tmp of
    the summary and the per-problem file); call while owning `output` (lock_output)."""
    folder = os.path.dirname(os.path.abspath(output))
    prefixes = tuple(f".{os.path.basename(p)}." for p in (output, problems_path(output)))
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        if name.startswith(prefixes) and name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(folder, name))


def problems_path(output):
    """Where eval.py writes the per-problem records of the summary `output`."""
    return output.removesuffix(".json") + ".problems.jsonl"


def model_problem(model):
    """Why the local folder `model` is a damaged checkpoint or export of gmts (its manifest.json, or
    an older checkpoint's structure: gmts/run/checkpoint.py), or None; a folder gmts did not write
    is not checked here (transformers loads it)."""
    from gmts.run import checkpoint as ckpt
    folder = os.path.expanduser(model)
    if not os.path.isdir(folder):
        return None
    if os.path.isfile(os.path.join(folder, ckpt.STATE_FILE)):
        return ckpt.checkpoint_problem(folder, report=lambda _: None)
    if os.path.isfile(os.path.join(folder, ckpt.MANIFEST)):
        return ckpt.manifest_problem(folder, required=None)
    return None


def main(argv=None):
    args = build_parser().parse_args(argv)
    # Cheap checks first: every flag, the output path and the model's context
    # (gmts/run/validate.py), before any data or model loads; a bad one is one line and exit status
    # 2.
    from gmts.run.folder import lock_output
    from gmts.run.machine import address_space_problem, code_reward_env_problem
    from gmts.run.validate import UsageError, check_eval_args
    problem = address_space_problem("eval.py") or code_reward_env_problem()
    if problem:
        raise UsageError("eval.py", problem)
    output = args.output if args.compare else (args.output
                                               or default_output(
                                                   args.model or "", args.data, args.seed,
                                                   result_settings(args)))
    check_eval_args(args, [output, None if args.compare else output and problems_path(output)])
    if args.compare:
        return run_compare(args)
    # (a hub id is "owner/name": one slash, no leading "/", ".", "~"; anything else naming no folder
    # is a typo)
    looks_like_path = (os.path.isabs(args.model) or args.model.startswith((".", "~"))
                       or args.model.count("/") > 1 or os.path.sep != "/"
                       and os.path.sep in args.model)
    if looks_like_path and not os.path.isdir(os.path.expanduser(args.model)):
        raise SystemExit(f"error: --model {args.model!r}: no such folder")
    problem = model_problem(args.model)
    if problem:
        raise UsageError("eval.py", f"--model {args.model}: the checkpoint is damaged ({problem}); "
                                    "nothing was evaluated: evaluate an intact checkpoint of the "
                                    "run")
    release = lock_output(output)
    try:
        clean_partial_writes(output)
        return evaluate(args, output)
    finally:
        release()


def evaluate(args, output):
    """eval.py's evaluation into `output`, which this process owns (lock_output)."""
    from gmts.run.machine import memory_line
    from gmts.run.paths import model_context
    task_options = json.loads(args.task_options) if args.task_options else {}
    context = model_context(args.model)
    max_prompt_tokens = args.max_prompt_tokens or (context[0] - args.max_new_tokens if context
                                                   else None)
    if args.temperature == 0 and args.samples > 1:
        print(f"note: --temperature 0 is greedy, so all {args.samples} samples would be identical; "
              "using --samples 1",
              file=sys.stderr)
        args.samples = 1

    import torch
    from gmts.rewards import RewardError
    from gmts.tools.evaluate import degenerate, evaluate_model, load_benchmark, split_data_arg
    from gmts.trainer.models import (check_vocabulary, end_of_sequence_ids, load_model,
                                     load_tokenizer, resolve_device, resolve_dtype)
    try:
        specs = split_data_arg(args.data)
        device = resolve_device(args.device)
        dtype = resolve_dtype(args.dtype, device)
    except (ValueError, RuntimeError) as err:
        raise SystemExit(f"error: {err}") from None
    tokenizer = one_line_errors(load_tokenizer, args.tokenizer or args.model,
                                flag="--tokenizer" if args.tokenizer else "--model")
    data_kw = {"limit": args.limit or None, "data_seed": args.data_seed, "template": args.template,
                   "system_prompt": args.system_prompt, "question_field": args.question_field,
                   "answer_field": args.answer_field, "task_options": task_options}
    # load every benchmark once now: an unknown source fails before the model loads
    try:
        sizes = {
            spec: load_benchmark(spec, tokenizer, max_prompt_tokens=max_prompt_tokens, **data_kw)
                 for spec in specs}
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    check_rewards(args, [p for problems, _, _ in sizes.values() for p in problems])
    with memory_line("eval.py", "loading the model", "use --dtype bfloat16, a smaller --model or "
                     "a larger machine"):
        model = one_line_errors(load_model, args.model, dtype=dtype, device=device).eval()
    check_vocabulary(model, tokenizer, flag="--tokenizer" if args.tokenizer else "--model")
    # the context was not readable before loading: the loaded config has it
    if max_prompt_tokens is None:
        context = getattr(model.config, "max_position_embeddings", None)
        max_prompt_tokens = context - args.max_new_tokens if context else None
    eos_ids = end_of_sequence_ids(model, tokenizer)
    print(f"eval: {args.model} on {device} {str(dtype).replace('torch.', '')}; "
          + ", ".join(f"{s} ({len(p)} problems" + (f", {n} skipped: prompt over "
                                                   f"{max_prompt_tokens} tokens" if n else "")
                      + ")" for s, (p, _, n) in sizes.items())
          + f"; {args.samples} sample(s) at T={args.temperature}"
          + (f", top_p={args.top_p}" if args.top_p < 1 else "")
          + (f", top_k={args.top_k}" if args.top_k else "") + f", {args.max_new_tokens} new tokens"
          + (f", {args.repeat} repeats" if args.repeat > 1 else ""), file=sys.stderr, flush=True)

    t0 = time.time()
    sampling = memory_line("eval.py", "sampling",
                           f"lower --samples ({args.samples}) or --batch-size ({args.batch_size} "
                           f"prompts x {args.samples} samples = rows sampled at once) or "
                           "--max-new-tokens")
    try:
        with sampling:
            result = evaluate_model(
                model, tokenizer, specs, samples=args.samples, temperature=args.temperature,
                top_p=args.top_p, top_k=args.top_k, max_new_tokens=args.max_new_tokens,
                seed=args.seed, eos_ids=eos_ids, batch_size=args.batch_size,
                max_rows=args.max_rows,
                progress=not args.quiet, repeats=args.repeat, n_bootstrap=args.bootstrap,
                max_prompt_tokens=max_prompt_tokens, rewards=args.reward or None,
                reward_weights=args.reward_weights, reward_workers=args.reward_workers,
                reward_timeout=args.reward_timeout, **data_kw)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    except RewardError as err:
        raise SystemExit(err.for_cli()) from None
    records = result.pop("records")
    problem = degenerate(records)
    if problem:
        raise SystemExit(f"error: {problem}, so this run is not a result and nothing was saved "
                         "(check --temperature, --max-new-tokens and the model's end-of-sequence "
                         "tokens)")
    summary = {"model": args.model, **result, "device": str(device),
               "dtype": str(dtype).replace("torch.", ""), "template": args.template,
               "system_prompt": args.system_prompt, "wall_s": time.time() - t0,
               "torch": torch.__version__}

    per_problem = write_results(output, summary, records)

    print_table(summary)
    print(f"wrote {output} and {per_problem} ({summary['wall_s']:.1f}s)")
    return summary


def check_rewards(args, problems):
    """--reward: each function loaded and tried on the first problems before the model loads; a
    problem is one line naming the reward, with the user's own traceback below it."""
    if not args.reward:
        return
    from gmts import rewards
    try:
        scorer = rewards.scorer_for(args.reward, args.reward_weights, workers=1,
                                    timeout=args.reward_timeout)
        try:
            scorer.check(problems, first=args.batch_size)
        finally:
            scorer.close()
    except rewards.RewardError as err:
        raise SystemExit(err.for_cli()) from None


if __name__ == "__main__":
    from gmts.run.folder import exit_on_interrupt
    # Ctrl-C: one line, not a traceback from deep in an import; the summary is written last and
    # atomically, so what is on disk is a complete earlier result or nothing of this run
    exit_on_interrupt("eval.py", "no summary was written")
    main()
