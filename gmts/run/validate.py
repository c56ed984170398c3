"""Every flag checked before anything loads (no torch), one line naming the first bad one.

A flag's own range or choices is a spec (range_problem): train.py's stand beside each Config field
(gmts/run/config.py), eval.py's in EVAL_SPECS. A Rule says what a spec cannot (flags read together,
the disk, the machine). Specs run first, so a flag is checked alone before a rule combines it with
another. check(cfg, rules) raises ValueError with the message; UsageError is the one line, status 2.
"""
import importlib.util
import json
import math
import re
import sys
from collections.abc import Callable
from typing import NamedTuple

from gmts.method.options import check_loss_config
from gmts.run.machine import world_size
from gmts.run.paths import (context_problem, model_folder_problem, output_path_problem,
                            run_folder_problem, utf8_problem)

# numpy's seed range, the narrowest of the generators a seed reaches
SEED_RANGE = f"[0, {2**32 - 1}]"
DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")
# The smallest normal float32: logits are divided by the temperature in float32 (or bfloat16, the
# same exponent range), so a smaller one is 0 or subnormal there and the division overflows.
FLOAT32_TINY = 1.1754943508222875e-38


class UsageError(SystemExit):
    """A bad flag or input found before the work starts: exit status 2, one line (written when
    raised, because a SystemExit whose code is a number prints nothing). str(err) is that line."""

    def __init__(self, prog, message):
        self.line = f"{prog}: error: {' '.join(str(message).split())}"
        super().__init__(2)
        print(self.line, file=sys.stderr, flush=True)

    def __str__(self):
        return self.line


class Rule(NamedTuple):
    flag: str                      # the attribute; the flag is --flag-with-dashes
    ok: Callable                   # (value, config) -> bool; raising ValueError also fails
    message: str                   # format string: {v}, {c}, {err}


def check(cfg, rules):
    """Run `rules` against `cfg` in order; the first that fails raises ValueError with its message.
    Returns cfg."""
    for rule in rules:
        value = getattr(cfg, rule.flag)
        try:
            good, err = bool(rule.ok(value, cfg)), ""
        except (ValueError, TypeError) as e:
            good, err = False, " ".join(str(e).split())
        if not good:
            raise ValueError(rule.message.format(v=value, c=cfg, err=err))
    return cfg


def finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def range_problem(flag, value, spec, integer=None):
    """Why `value` of `flag` is outside `spec`, or None. spec: a tuple of choices, or a range and
    an optional note: '>= 1', '> 0 (seconds)', '[0, 1)', '(0, 1]'. integer: whether the value must
    be an int, else a finite number (None: an int when it is one)."""
    if isinstance(spec, tuple):
        return None if value in spec else f"{flag} must be one of {', '.join(spec)}, got {value!r}"
    bound, _, note = spec.partition(" (")
    integer = isinstance(value, int) if integer is None else integer
    number = finite(value) and (isinstance(value, int) or not integer)
    if bound[0] in "[(":                                  # an interval: [lo, hi], ends open or not
        lo, hi = map(float, bound[1:-1].split(","))
        inside = number and (lo < value if bound[0] == "(" else lo <= value) and (
            value < hi if bound[-1] == ")" else value <= hi)
        want = f"in {bound}"
    else:                                                 # '>= n' or '> n'
        op, n = bound.split()
        inside = number and (value > float(n) if op == ">" else value >= float(n))
        want = f"{'an integer' if integer else 'a finite number'} {bound}"
    return None if inside else f"{flag} must be {want}{note and ' (' + note}, got {value}"


def _no_problem(find):
    """A predicate from a `..._problem` function (value -> why it is bad, or None)."""
    def ok(v, c):
        problem = find(v)
        if problem:
            raise ValueError(problem)
        return True
    return ok


def spec_rule(name, spec, integer=None):
    """The Rule of one flag's spec (range_problem)."""
    flag = "--" + name.replace("_", "-")
    return Rule(name, _no_problem(lambda v: range_problem(flag, v, spec, integer)), "{err}")


def temperature_rule(name, greedy):
    """A sampling temperature (train.py's --temperature and --eval-temperature, eval.py's
    --temperature): finite, and 0 (greedy, where `greedy` allows it) or >= FLOAT32_TINY."""
    want = ("0 (greedy) or a finite number >= 1.2e-38" if greedy
            else "a finite number >= 1.2e-38 for training rollouts")
    return Rule(name, lambda v, c: finite(v) and ((greedy and v == 0) or v >= FLOAT32_TINY),
                f"--{name.replace('_', '-')} must be {want} (a smaller one is 0 or subnormal in "
                "float32, where logits are divided by it), got {v}")


def _filled(name):
    return Rule(name, lambda v, c: bool(v and v.strip()), f"--{name.replace('_', '-')} is empty")


def _utf8(name):
    return Rule(name, _no_problem(utf8_problem), f"--{name.replace('_', '-')} {{v!r}}: {{err}}")


def _device_ok(v, c):
    """auto, cpu, cuda, cuda:N or mps, and present on this machine (torch is imported only to look
    for a GPU)."""
    name = re.fullmatch(r"auto|(cpu|cuda|mps)(?::(\d+))?", str(v))
    if not name:
        raise ValueError("not a device name (auto | cpu | cuda | cuda:N | mps)")
    if name[1] in (None, "cpu"):
        return True
    import torch
    if name[1] == "mps" and not torch.backends.mps.is_available():
        raise ValueError("MPS is not available on this machine")
    if name[1] == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"this torch {torch.__version__} sees no CUDA GPU (use --device cpu or "
                         "auto)")
    if name[1] == "cuda" and name[2] and int(name[2]) >= torch.cuda.device_count():
        raise ValueError(f"this machine has {torch.cuda.device_count()} CUDA device(s)")
    return True


def _reward_weights_ok(text, c):
    """One finite number per --reward, comma-separated (rewards.parse_weights reads them)."""
    if not text:
        return True
    if not c.reward:
        raise ValueError("--reward-weights needs --reward")
    try:
        weights = [float(w) for w in str(text).split(",")]
    except ValueError:
        raise ValueError(f"--reward-weights must be numbers separated by commas, got {text!r}") \
            from None
    if not all(math.isfinite(w) for w in weights):
        raise ValueError(f"--reward-weights must be finite numbers, got {text!r}")
    if len(weights) != len(c.reward):
        raise ValueError(f"--reward-weights gives {len(weights)} weight(s) for {len(c.reward)} "
                         "--reward(s)")
    return True


SHARED_RULES = [              # flags train.py and eval.py both have
    Rule("tokenizer", _no_problem(lambda v: v and run_folder_problem(v)), "--tokenizer {v}: {err}"),
    Rule("task_options", lambda v, c: not v or isinstance(json.loads(v), dict),
         "--task-options must be a JSON object, got {v!r}"),
    Rule("device", _device_ok, "--device {v!r}: {err}"),
    Rule("reward_weights", _reward_weights_ok, "{err}"),
]

# train.py: what the specs beside Config's fields cannot say (gmts/run/config.py runs both).
TRAIN_RULES = [
    *map(_filled, ("model", "data", "output_dir")),
    *map(_utf8, ("model", "tokenizer", "data", "output_dir", "resume", "eval_data")),
    Rule("model", _no_problem(model_folder_problem), "--model {v}: {err}"),
    *SHARED_RULES,
    Rule("dtype", lambda v, c: v != "float16", "--dtype float16: training has no loss scaling "
         "(small gradients underflow to 0 in float16); use bfloat16 or float32"),
    Rule("reward", lambda v, c: isinstance(v, list) and all(s.strip() for s in v),
         "--reward is empty"),
    temperature_rule("temperature", greedy=False),
    temperature_rule("eval_temperature", greedy=True),
    # true / false: an older run's config.json (on / off)
    Rule("gradient_checkpointing", lambda v, c: v in ("auto", "on", "off", True, False),
         "--gradient-checkpointing must be auto, on or off, got {v!r}"),
    Rule("compile", lambda v, c: not (v and c.fsdp), "--compile cannot be combined with --fsdp "
         "(the compiled decode step would trace FSDP's hooks; untested)"),
    Rule("beta", lambda v, c: c.algo != "dapo" or v == 0,
         "--algo dapo uses no KL term (β = 0), got --beta {v}"),
    Rule("mini_batch_size", lambda v, c: isinstance(v, int) and 1 <= v <= c.prompts_per_step
         and c.prompts_per_step % v == 0,
         "--mini-batch-size must divide --prompts-per-step {c.prompts_per_step} (whole groups per "
         "optimizer step; 0 = all), got {v}"),
    Rule("overlong_buffer", lambda v, c: isinstance(v, int) and 0 <= v <= c.max_new_tokens,
         "--overlong-buffer must be in [0, --max-new-tokens = {c.max_new_tokens}], got {v}"),
    Rule("loss_norm", lambda v, c: check_loss_config(c.selector, c.ratio, v) or True,
         "--loss-norm: {err}"),
    Rule("micro_batch_size", lambda v, c: (c.prompts_per_step * c.group_size) % v == 0,
         "--micro-batch-size {v} does not divide the batch of --prompts-per-step "
         "{c.prompts_per_step} x --group-size {c.group_size} answers"),
    Rule("fsdp", lambda v, c: not v or world_size() > 1,
         "--fsdp shards the model over several processes, and this is one: start it with torchrun, "
         "e.g. torchrun --nproc-per-node 2 train.py --fsdp ... (a resumed run: the same number of "
         "processes as before)"),
    Rule("fsdp", lambda v, c: not (v and (c.lora_rank or c.optimizer_offload)),
         "--fsdp cannot be combined with --lora-rank or --optimizer-offload (choose one way to "
         "save memory)"),
    Rule("log_grad_noise", lambda v, c: not v or c.mini_batch_size >= 2,
         "--log-grad-noise needs at least 2 prompts per optimizer step (two halves of whole "
         "groups), got --mini-batch-size {c.mini_batch_size}"),
    Rule("log_grad_noise", lambda v, c: not (v and c.fsdp), "--log-grad-noise does not support "
         "--fsdp (its gradients are sharded over the processes)"),
    Rule("eval_every", lambda v, c: not v or bool(c.eval_data), "--eval-every needs --eval-data"),
    Rule("eval_before", lambda v, c: not v or bool(c.eval_data), "--eval-before needs --eval-data"),
    # looked up, not imported (no cost): a missing backend fails here, before anything is written
    Rule("report_to", lambda v, c: v == "none" or importlib.util.find_spec(v) is not None,
         "--report-to {v} needs the optional package {v}, which is not installed: pip install {v}"),
]

# eval.py's flags of one number or name: the range or choices each must be in.
EVAL_SPECS = {
    "limit": ">= 0 (0 = all)", "samples": ">= 1", "top_p": "(0, 1]", "top_k": ">= 0 (0 = off)",
    "max_new_tokens": ">= 1", "batch_size": ">= 1", "repeat": ">= 1", "seed": SEED_RANGE,
    "max_prompt_tokens": ">= 0 (0 = the model's context minus --max-new-tokens)",
    "max_rows": ">= 0 (0 = --batch-size x --samples)", "data_seed": SEED_RANGE,
    "bootstrap": ">= 100 (resamples behind each 95% interval)", "dtype": DTYPE_NAMES,
    "reward_workers": ">= 0", "reward_timeout": "> 0 (seconds)"}

EVAL_RULES = [
    *[spec_rule(name, spec) for name, spec in EVAL_SPECS.items()],
    Rule("model", lambda v, c: bool(c.compare) or bool(v and v.strip()),
         "--model is required (or --compare A B)"),
    *map(_utf8, ("model", "tokenizer", "data", "output")),
    Rule("model", lambda v, c: bool(c.compare) or _no_problem(model_folder_problem)(v, c),
         "--model {v}: {err}"),
    temperature_rule("temperature", greedy=True),
    *SHARED_RULES,
]


def check_eval_args(args, outputs, prog="eval.py"):
    """eval.py's flags, the files it will write (`outputs`) and --max-new-tokens against the model's
    context; a UsageError (one line, exit 2) on the first problem."""
    try:
        check(args, EVAL_RULES)
    except ValueError as err:
        raise UsageError(prog, err) from None
    for path in filter(None, outputs):
        problem = output_path_problem(path, "file")
        if problem:
            raise UsageError(prog, f"--output {path}: {problem}")
    problem = not args.compare and context_problem(args.max_new_tokens, args.model)
    if problem:
        raise UsageError(prog, problem)
