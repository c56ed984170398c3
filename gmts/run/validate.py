"""Every flag checked before any work starts: one table of rules per command line, one line per
problem.

    check(cfg, TRAIN_RULES)            -> raises ValueError naming the first bad flag and its value
    check_eval_args(args)              -> eval.py's flags, its output path and the model's context,
                                       up front

train.py's run folder and resume (what a folder holds, who owns it) are gmts/run/folder.py's, which
uses these. This module imports nothing of gmts/run (gmts/run/config.py imports its table), so there
is no import cycle.

A rule is (flag, predicate, message): the predicate gets the flag's value and the whole config
(rules that relate two flags read both); the message is a format string with {v} (the value), {c}
(the config) and, when the predicate raised ValueError, {err} (its text). Rules run in table order,
so a flag is checked on its own before any rule that combines it with another. Checks that need the
machine or the disk (device, output folder, the model's context length, the checkpoint to resume)
come after the table and are just as cheap: nothing here loads a model.

A usage error is `UsageError`: its one line goes to stderr and the process exits with status 2.
"""
import contextlib
import errno
import importlib.util
import json
import math
import os
import re
import sys
import tempfile
from typing import NamedTuple
from collections.abc import Callable

from gmts.method.options import (KL_COVERAGE, LOSS_NORMS, SCOPES, SELECTORS, STD_MODES,
                                 check_loss_config)

REPORT_TO = ("none", "tensorboard", "wandb")
# the optional install each backend needs
REPORT_PACKAGE = {"tensorboard": "tensorboard", "wandb": "wandb"}
SEED_MAX = 2**32 - 1            # numpy's seed range, the narrowest of the generators a seed reaches
DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")


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
    flag: str                      # the config attribute; the flag is --flag-with-dashes
    # (value, config) -> bool; raising ValueError also fails, with {err}
    ok: Callable
    message: str                   # format string: {v}, {c}, {err}


def finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _passes(check):
    """A predicate from a function that raises ValueError on a bad value (the method's own
    checks)."""
    def ok(v, c):
        check(v, c)
        return True
    return ok


def utf8_problem(value):
    """Why a flag's text cannot be written out (a byte that is not UTF-8, e.g. a Latin-1 file name,
    arrives as a lone surrogate: the checkpoint writers, the JSON records and the summaries would
    fail on it), or None."""
    for text in value if isinstance(value, (list, tuple)) else [value]:
        try:
            str(text).encode("utf-8")
        except UnicodeEncodeError as err:
            return ("holds bytes that are not UTF-8 "
                    f"({os.fsencode(str(text)[err.start:err.end])!r} at character {err.start}), "
                    "which the run's records cannot hold: rename it with UTF-8 characters only")
    return None


def _utf8(name):
    return Rule(name, _no_problem(utf8_problem), f"--{name.replace('_', '-')} {{v!r}}: {{err}}")


def _json_object(v, c):
    return not v or isinstance(json.loads(v), dict)


def _device_ok(v, c):
    """auto, cpu, cuda, cuda:N or mps, and present on this machine (torch is imported only to
    look)."""
    if v in ("auto", "cpu"):
        return True
    import torch
    try:
        device = torch.device(v)
    except (RuntimeError, ValueError):
        raise ValueError("not a device name (auto | cpu | cuda | cuda:N | mps)") from None
    if device.type == "cpu":
        return True
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"this torch {torch.__version__} sees no CUDA GPU (use --device cpu "
                             "or auto)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"this machine has {torch.cuda.device_count()} CUDA device(s)")
        return True
    if device.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError("MPS is not available on this machine")
        return True
    raise ValueError("not supported (auto | cpu | cuda | cuda:N | mps)")


def _no_problem(find):
    """A predicate from a `..._problem` function (value -> why it is bad, or None): None passes, a
    text fails and is the message's {err}."""
    def ok(v, c):
        problem = find(v)
        if problem:
            raise ValueError(problem)
        return True
    return ok


def reward_weights_problem(text, specs):
    """None, or raises ValueError: why --reward-weights does not fit the --reward list (one finite
    number per --reward, comma-separated)."""
    if not text:
        return
    if not specs:
        raise ValueError("--reward-weights needs --reward")
    try:
        weights = [float(w) for w in str(text).split(",")]
    except ValueError:
        raise ValueError(f"--reward-weights must be numbers separated by commas, got {text!r}") \
            from None
    if not all(math.isfinite(w) for w in weights):
        raise ValueError(f"--reward-weights must be finite numbers, got {text!r}")
    if len(weights) != len(specs):
        raise ValueError(f"--reward-weights gives {len(weights)} weight(s) for {len(specs)} "
                         "--reward(s)")
    return


def at_least(n):
    return lambda v, c: isinstance(v, int) and v >= n


def _between(lo, hi, *, lo_open=False, hi_open=False):
    def ok(v, c):
        return finite(v) and (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)
    return ok


def _need(name, n):
    return Rule(name, at_least(n), f"--{name.replace('_', '-')} must be an integer >= {n}, got "
                                   "{v}")


# The smallest normal float32: logits are divided by the temperature in float32 (or bfloat16, the
# same exponent range), so a smaller one is 0 or subnormal there and the division overflows.
FLOAT32_TINY = 1.1754943508222875e-38


def temperature_rule(name, greedy):
    """The one rule for a sampling temperature (train.py's --temperature and --eval-temperature,
    eval.py's --temperature): finite, and either 0 (greedy, where `greedy` allows it) or at least
    FLOAT32_TINY."""
    flag = "--" + name.replace("_", "-")
    want = ("0 (greedy) or a finite number >= 1.2e-38 (a smaller one is 0 or subnormal in "
            "float32, where logits are divided by it)" if greedy else
            "a finite number >= 1.2e-38 for training rollouts (a smaller one is 0 or subnormal in "
            "float32, where logits are divided by it)")
    return Rule(name, lambda v, c: finite(v) and ((greedy and v == 0) or v >= FLOAT32_TINY),
                f"{flag} must be {want}, got {{v}}")


def _finite_at_least(name, n, why=""):
    return Rule(name, lambda v, c: finite(v) and v >= n,
                f"--{name.replace('_', '-')} must be a finite number >= {n}{why}, got {{v}}")


# --------------------------------------------------------------------------------------------------
# train.py

TRAIN_RULES = [
    # model and data
    Rule("model", lambda v, c: bool(v and v.strip()), "--model is empty"),
    _utf8("model"), _utf8("tokenizer"), _utf8("data"), _utf8("output_dir"), _utf8("resume"),
    _utf8("eval_data"),
    Rule("model", _no_problem(lambda v: model_folder_problem(v)), "--model {v}: {err}"),
    Rule("tokenizer", _no_problem(lambda v: run_folder_problem(v) if v else None),
         "--tokenizer {v}: {err}"),
         Rule("dtype", lambda v, c: v in DTYPE_NAMES, "--dtype must be one of "
                                                      f"{', '.join(DTYPE_NAMES)}, got {{v!r}}"),
    Rule("dtype", lambda v, c: v != "float16", "--dtype float16: training has no loss scaling "
         "(small gradients underflow to 0 in float16); use bfloat16 or float32"),
    Rule("device", _device_ok, "--device {v!r}: {err}"),
    _need("lora_rank", 0),
    _finite_at_least("lora_alpha", 0, " (0 = 2 x rank)"),
    _need("chunk_size", 1),
    Rule("data", lambda v, c: bool(v and v.strip()), "--data is empty"),
    _need("limit", 0),
    _need("max_prompt_tokens", 1),
    Rule("task_options", _json_object, "--task-options must be a JSON object, got {v!r}"),
    Rule("reward", lambda v, c: isinstance(v, list) and all(s.strip() for s in v),
         "--reward is empty"),
    Rule("reward_weights", lambda v, c: reward_weights_problem(v, c.reward) is None,
         "{err}"),
    _need("reward_workers", 0),
    Rule("reward_timeout", lambda v, c: finite(v) and v > 0,
         "--reward-timeout must be a finite number of seconds > 0, got {v}"),
    # rollout
    _need("prompts_per_step", 1),
    Rule("group_size", at_least(2), "--group-size must be >= 2 (a group of one answer has no "
                                    "baseline), got {v}"),
    _need("max_new_tokens", 1),
    temperature_rule("temperature", greedy=False),
    Rule("rollout_batch_size", at_least(0), "--rollout-batch-size must be >= 0 (0 = all prompts at "
                                            "once), got {v}"),
    Rule("compile", lambda v, c: not (v and c.fsdp), "--compile cannot be combined with --fsdp "
                                                     "(the compiled decode "
         "step would trace FSDP's hooks; untested)"),
    # algorithm
    Rule("algo", lambda v, c: v in ("grpo", "dapo"), "--algo must be grpo or dapo, got {v!r}"),
    Rule("eps_low", _between(0, 1, hi_open=True), "--eps-low (ε1) must be in [0, 1) (the ratio is "
                                                  "clipped at "
                                                 "1 - ε1 > 0), got {v}"),
    _finite_at_least("eps_high", 0, " (ε2; leave it out for the --algo default)"),
    _finite_at_least("beta", 0),
    Rule("beta", lambda v, c: c.algo != "dapo" or v == 0, "--algo dapo uses no KL term (β = 0), "
                                                          "got --beta {v}"),
    Rule("kl_coverage", lambda v, c: v in KL_COVERAGE, "--kl-coverage must be one of "
                                                       f"{KL_COVERAGE}, got {{v!r}}"),
    Rule("adv_std", lambda v, c: v in STD_MODES, f"--adv-std must be one of {STD_MODES}, got "
                                                 "{v!r}"),
    _need("ppo_epochs", 1),
    Rule("mini_batch_size", lambda v, c: isinstance(v, int) and 1 <= v <= c.prompts_per_step
         and c.prompts_per_step % v == 0,
         "--mini-batch-size must divide --prompts-per-step {c.prompts_per_step} (whole groups per "
         "optimizer step; 0 = all), got {v}"),
    Rule("dynamic_sampling", lambda v, c: v in ("auto", "on", "off"),
         "--dynamic-sampling must be auto, on or off, got {v!r}"),
    _need("max_sampling_tries", 1),
    Rule("overlong_buffer", lambda v, c: isinstance(v, int) and 0 <= v <= c.max_new_tokens,
         "--overlong-buffer must be in [0, --max-new-tokens = {c.max_new_tokens}], got {v}"),
    _finite_at_least("overlong_penalty", 0),
    # selection
    Rule("selector", lambda v, c: v in SELECTORS, "--selector must be one of "
                                                  f"{', '.join(SELECTORS)}, got {{v!r}}"),
    Rule("ratio", lambda v, c: finite(v) and 0 < v <= 1, "--ratio must be in (0, 1], got {v}"),
    Rule("select_scope", lambda v, c: v in SCOPES, f"--select-scope must be one of {SCOPES}, got "
                                                   "{v!r}"),
    Rule("loss_norm", lambda v, c: v in LOSS_NORMS, "--loss-norm must be one of "
                                                    f"{', '.join(LOSS_NORMS)}, got {{v!r}}"),
    Rule("loss_norm", _passes(lambda v, c: check_loss_config(c.selector, c.ratio, v)),
         "--loss-norm: {err}"),
    # optimisation
    _need("steps", 1),
    _need("micro_batch_size", 1),
    Rule("micro_batch_size", lambda v, c: (c.prompts_per_step * c.group_size) % v == 0,
         "--micro-batch-size {v} does not divide the batch of --prompts-per-step "
         "{c.prompts_per_step} x --group-size {c.group_size} answers"),
    _need("micro_batch_tokens", 0),
    Rule("lr", lambda v, c: finite(v) and v > 0, "--lr must be a finite number > 0, got {v}"),
    _finite_at_least("weight_decay", 0),
    Rule("adam_beta1", _between(0, 1, hi_open=True), "--adam-beta1 must be in [0, 1), got {v}"),
    Rule("adam_beta2", _between(0, 1, hi_open=True), "--adam-beta2 must be in [0, 1), got {v}"),
    _need("warmup_steps", 0),
    _finite_at_least("max_grad_norm", 0, " (0 = no clipping)"),
    Rule("fsdp", lambda v, c: not v or world_size() > 1,
         "--fsdp shards the model over several processes, and this is one: start it with torchrun, "
         "e.g. torchrun --nproc-per-node 2 train.py --fsdp ... (a resumed run: the same number of "
         "processes as before)"),
    Rule("fsdp", lambda v, c: not (v and (c.lora_rank or c.optimizer_offload)),
         "--fsdp cannot be combined with --lora-rank or --optimizer-offload (choose one way to "
         "save memory)"),
    _need("max_bad_steps", 1),
    # output
    Rule("seed", lambda v, c: isinstance(v, int) and 0 <= v <= SEED_MAX,
         f"--seed must be in [0, {SEED_MAX}], got {{v}}"),
    Rule("output_dir", lambda v, c: bool(v and v.strip()), "--output-dir is empty"),
    Rule("save_every", at_least(0), "--save-every must be >= 0 (0 = only at the end), got {v}"),
    _need("keep_checkpoints", 1),
    _need("log_samples", 0),
    Rule("log_grad_noise", lambda v, c: not v or c.mini_batch_size >= 2,
         "--log-grad-noise needs at least 2 prompts per optimizer step (two halves of whole "
         "groups), got --mini-batch-size {c.mini_batch_size}"),
    Rule("log_grad_noise", lambda v, c: not v or not c.fsdp, "--log-grad-noise does not support "
                                                             "--fsdp (its "
         "gradients are sharded over the processes)"),
    Rule("eval_every", at_least(0), "--eval-every must be >= 0 (0 = never), got {v}"),
    Rule("eval_every", lambda v, c: not v or bool(c.eval_data), "--eval-every needs --eval-data"),
    Rule("eval_before", lambda v, c: not v or bool(c.eval_data), "--eval-before needs --eval-data"),
    _need("eval_limit", 0),
    _need("eval_samples", 1),
    temperature_rule("eval_temperature", greedy=True),
    Rule("eval_max_rows", at_least(0), "--eval-max-rows must be >= 0 (0 = a step's rollout "
                                       "call), got {v}"),
    Rule("report_to", lambda v, c: v in REPORT_TO, "--report-to must be one of "
                                                   f"{', '.join(REPORT_TO)}, got {{v!r}}"),
    # Looked up, not imported (no cost): a missing backend fails here, before anything is written.
    Rule("report_to", lambda v,
         c: v not in REPORT_PACKAGE or importlib.util.find_spec(REPORT_PACKAGE[v]) is not None,
         "--report-to {v} needs the optional package {v}, which is not installed: pip install {v}"),
]


def world_size():
    """WORLD_SIZE as torchrun sets it, 1 without it (or when it is not a number: launcher_problem
    says so)."""
    value = os.environ.get("WORLD_SIZE", "1")
    return int(value) if value.strip().isdigit() else 1


TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def main_process():
    """Whether this process speaks for the run (its notes, its download bars): the only process
    (WORLD_SIZE absent or 1: a RANK beside it means nothing, as gmts/trainer/distributed.py's init
    reads it), or torchrun's rank 0."""
    return world_size() == 1 or os.environ.get("RANK", "0").strip() == "0"


def launcher_problem():
    """Why the environment is neither one process nor torchrun's (WORLD_SIZE set by hand, not a
    number, or without the variables torchrun sets beside it), or None."""
    value, rank = os.environ.get("WORLD_SIZE"), os.environ.get("RANK")
    if value is None:
        if rank is not None and rank.strip() not in ("", "0"):
            return (f"the environment variable RANK={rank!r} is set but WORLD_SIZE is not (a "
                    "leftover of another launch?): unset RANK for one process, or start with "
                    "torchrun")
        return None
    if not value.strip().isdigit() or int(value) < 1:
        return (f"the environment variable WORLD_SIZE={value!r} is not a number of processes: "
                "unset it, or start with torchrun")
    missing = [v for v in TORCHRUN_VARS if not os.environ.get(v)]
    if int(value) > 1 and missing:
        return (f"the environment variable WORLD_SIZE={value} is set but {', '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not, so this is not a torchrun process: "
                f"start with torchrun --nproc-per-node {value} train.py ..., or unset WORLD_SIZE "
                "for one process")
    if int(value) > 1 and not (rank.strip().isdigit() and int(rank) < int(value)):
        return (f"the environment variable RANK={rank!r} is not a rank of WORLD_SIZE={value} "
                "processes: start with torchrun, which sets both")
    return None


# --------------------------------------------------------------------------------------------------
# The machine's limits as one line.

# The address space importing torch, transformers and their libraries takes on a CPU: a tiny run
# passed at `ulimit -v 1700000` (kB) and failed at 1400000 (an allocation), and at 1000000 a library
# (OpenBLAS, in an import) retries its allocation forever at 100% CPU, so a smaller limit is refused
# before any import.
MIN_ADDRESS_SPACE = 3 << 29                     # 1.5 GiB


def address_space_problem(prog):
    """Why the address-space limit (ulimit -v) is too small to start, or None."""
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft >= MIN_ADDRESS_SPACE:
        return None
    return (f"the address-space limit (ulimit -v {soft >> 10}) is {soft / 2 ** 30:.2f} GiB, below "
            f"the {MIN_ADDRESS_SPACE / 2 ** 30:.1f} GiB {prog} needs to load torch; raise it "
            "(ulimit -v unlimited, or a limit for the model on top of that)")


def out_of_memory(err):
    """A one-line description when `err` is an allocation that failed (a GPU's OutOfMemoryError,
    MemoryError, CPU torch's "can't allocate memory" RuntimeError, a library that could not be
    mapped), else None."""
    text = " ".join(str(err).split())
    if isinstance(err, MemoryError):
        return f"MemoryError{': ' + text if text else ''}"
    name = type(err).__name__
    if name == "OutOfMemoryError" or (isinstance(err, RuntimeError) and (
            "can't allocate memory" in text or "out of memory" in text.lower())) or (
            isinstance(err, (ImportError, OSError)) and "failed to map segment" in text):
        tried = re.search(r"[Tt]ried to allocate ([0-9.]+ ?[KMGT]?i?B|(\d+) bytes)", text)
        size = tried and (f"{int(tried.group(2)) / 2 ** 30:.2f} GiB" if tried.group(2)
                          else tried.group(1))
        return f"{name}" + (f" allocating {size}" if size else "")
    return None


@contextlib.contextmanager
def memory_line(prog, what, advice):
    """Out of memory inside the block: one line, `prog: error: out of memory <what> (<the error>);
    <advice>` (the flags to lower), exit 1."""
    try:
        yield
    except BaseException as err:         # one kind is caught, the rest raised again
        said = out_of_memory(err)
        if said is None:
            raise
        raise SystemExit(f"error: out of memory {what} ({said}); {advice}") from None


def check(cfg, rules, prefix=""):
    """Run `rules` against `cfg` in order; the first one that fails raises ValueError with its
    message."""
    for rule in rules:
        value = getattr(cfg, rule.flag)
        try:
            good, err = bool(rule.ok(value, cfg)), ""
        except (ValueError, TypeError) as e:
            good, err = False, " ".join(str(e).split())
        if not good:
            raise ValueError(prefix + rule.message.format(v=value, c=cfg, err=err))
    return cfg


# --------------------------------------------------------------------------------------------------
# Paths and the model's context, read without loading anything.

def output_path_problem(path, kind):
    """Why `path` (kind "folder" or "file") could not be created or written, or None. Tries a real
    write in the nearest existing folder, so read-only file systems are caught as well as
    permissions."""
    full = os.path.abspath(os.path.expanduser(path))
    problem = _name_problem(full)
    if problem:
        return problem
    if kind == "folder" and os.path.exists(full) and not os.path.isdir(full):
        return "is a file, not a folder"
    if kind == "file" and os.path.isdir(full):
        return "is a folder; give a file name such as results.json"
    probe = full if kind == "folder" else os.path.dirname(full)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return f"{probe} is a file, so nothing can be created under it"
    try:
        _write_test(probe)
    except OSError as err:
        return f"{probe} is not writable ({err.strerror or err})"
    if kind == "file" and os.path.exists(full) and not os.access(full, os.W_OK):
        return "is not writable"
    return None


def _write_test(folder):
    """Create a file in `folder` and remove it (OSError when that fails): an unnamed one
    (O_TMPFILE) where the file system has them, so that a kill leaves nothing behind; else a
    .gmts-write-test-* file, which gmts/run/checkpoint.py's clean_leftovers removes from a run
    folder."""
    try:
        os.close(os.open(folder, getattr(os, "O_TMPFILE", 0) | os.O_WRONLY, 0o600))
        return
    except OSError as err:
        if not hasattr(os, "O_TMPFILE") or err.errno not in (errno.EOPNOTSUPP, errno.EISDIR,
                                                             errno.EINVAL):
            raise
    fd, name = tempfile.mkstemp(dir=folder, prefix=".gmts-write-test-")
    os.close(fd)
    os.unlink(name)


def _name_problem(full):
    """A name the file system cannot hold: bytes that are not UTF-8 (the checkpoint writers and the
    JSON files need text), a component longer than its NAME_MAX, or the whole over PATH_MAX."""
    problem = utf8_problem(full)
    if problem:
        return "the path " + problem
    probe = full
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    try:
        name_max, path_max = os.pathconf(probe, "PC_NAME_MAX"), os.pathconf(probe, "PC_PATH_MAX")
    except (OSError, ValueError):
        return None
    for part in full.split(os.sep):
        if len(os.fsencode(part)) > name_max:
            return (f"the name {part[:40]}... is {len(os.fsencode(part))} bytes, longer than this "
                    f"file system allows ({name_max})")
    if len(os.fsencode(full)) >= path_max:
        return (f"the path is {len(os.fsencode(full))} bytes, longer than this system allows "
                f"({path_max - 1})")
    return None


def run_folder_problem(name_or_path):
    """'is a train.py run folder, ...' when `name_or_path` is one (it has checkpoints/ or
    metrics.jsonl), else None: a run folder passed where a model or tokenizer is expected."""
    path = os.path.expanduser(str(name_or_path))
    if not (os.path.isdir(os.path.join(path, "checkpoints"))
            or os.path.isfile(os.path.join(path, "metrics.jsonl"))):
        return None
    root = os.path.join(path, "checkpoints")
    steps = (sorted(d for d in os.listdir(root) if d.startswith("step-")) if os.path.isdir(root)
             else [])
    return ("is a train.py run folder, not a model: pass one of its checkpoints"
            + (f" (the newest is {os.path.join(path, 'checkpoints', steps[-1])})" if steps else "")
            + f", or continue the run with train.py --resume {path}")


def model_folder_problem(name_or_path):
    """Why the local folder `name_or_path` cannot be a model (a train.py run folder, no config.json,
    a damaged config.json), or None; None too for a hub id or a path that does not exist (load_model
    names those). Reads file names and config.json only: no torch, so the command line says it
    before anything loads. The weights themselves are checked by gmts.trainer.policy.load_model (a
    tool such as gmts.tools.memory needs config.json alone)."""
    path = os.path.expanduser(str(name_or_path))
    if os.path.isfile(path):
        return ("is a file, not a model folder: pass the folder that holds config.json and the "
                "weights")
    if not os.path.isdir(path):
        return None
    if run_folder_problem(path):
        return run_folder_problem(path)
    config = os.path.join(path, "config.json")
    if not os.path.isfile(config):
        # a LoRA checkpoint: peft loads it
        if os.path.isfile(os.path.join(path, "adapter_config.json")):
            return None
        return ("no config.json in this folder (a model folder holds config.json and the weights, "
                "*.safetensors, as save_pretrained writes them)")
    try:
        with open(config, encoding="utf-8") as fh:
            fields = json.load(fh)
    except (OSError, ValueError) as err:
        return f"{config} does not read as JSON ({' '.join(str(err).split())}): the file is damaged"
    if not isinstance(fields, dict):
        return f"{config} is not a JSON object: the file is damaged"
    # train.py's config.json, copied alone
    if "selector" in fields and "output_dir" in fields:
        return f"{config} is a train.py run configuration, not a model's: pass a checkpoint folder"
    return None


CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def model_context(name_or_path):
    """The model's context length from its config.json (a local folder, or the hub cache), or None
    when it cannot be read without a download."""
    path = os.path.join(os.path.expanduser(name_or_path), "config.json")
    if not os.path.isfile(path):
        try:
            from huggingface_hub import try_to_load_from_cache
            path = try_to_load_from_cache(name_or_path, "config.json")
        except Exception:  # noqa: BLE001 - not a valid repo id, no cache: nothing to read cheaply
            return None
        if not isinstance(path, str) or not os.path.isfile(path):
            return None
    try:
        with open(path) as fh:
            config = json.load(fh)
    except (OSError, ValueError):
        return None
    for section in (config, config.get("text_config") or {}):
        for key in CONTEXT_KEYS:
            if isinstance(section.get(key), int) and section[key] > 0:
                return section[key], key, path
    return None


def context_problem(max_new_tokens, name_or_path):
    found = model_context(name_or_path)
    if found and max_new_tokens >= found[0]:
        return (f"--max-new-tokens {max_new_tokens} does not fit the model's context ({found[1]} = "
                f"{found[0]} in {found[2]}), which also holds the prompt")
    return None


# --------------------------------------------------------------------------------------------------
# eval.py (train.py's run folder and resume: gmts/run/folder.py)

EVAL_RULES = [
    Rule("model", lambda v, c: bool(c.compare) or bool(v and v.strip()),
         "--model is required (or --compare A B)"),
    _utf8("model"), _utf8("tokenizer"), _utf8("data"), _utf8("output"),
    Rule("model", lambda v, c: bool(c.compare) or _no_problem(model_folder_problem)(v, c),
         "--model {v}: {err}"),
    Rule("tokenizer", lambda v, c: not v or _no_problem(run_folder_problem)(v, c),
         "--tokenizer {v}: {err}"),
    Rule("limit", at_least(0), "--limit must be >= 0 (0 = all), got {v}"),
    _need("samples", 1),
    temperature_rule("temperature", greedy=True),
    Rule("top_p", _between(0, 1, lo_open=True), "--top-p must be in (0, 1], got {v}"),
    Rule("top_k", at_least(0), "--top-k must be >= 0 (0 = off), got {v}"),
    _need("max_new_tokens", 1),
    Rule("max_prompt_tokens", at_least(0), "--max-prompt-tokens must be >= 0 (0 = the model's "
                                           "context minus --max-new-tokens), got {v}"),
    _need("batch_size", 1),
    Rule("max_rows", at_least(0),
         "--max-rows must be >= 0 (0 = --batch-size x --samples), got {v}"),
    _need("repeat", 1),
    Rule("seed", lambda v, c: isinstance(v, int) and 0 <= v <= SEED_MAX,
         f"--seed must be in [0, {SEED_MAX}], got {{v}}"),
    Rule("data_seed", lambda v, c: isinstance(v, int) and 0 <= v <= SEED_MAX,
         f"--data-seed must be in [0, {SEED_MAX}], got {{v}}"),
    Rule("task_options", _json_object, "--task-options must be a JSON object, got {v!r}"),
    Rule("device", _device_ok, "--device {v!r}: {err}"),
    Rule("dtype", lambda v, c: v in DTYPE_NAMES, "--dtype must be one of "
                                                 f"{', '.join(DTYPE_NAMES)}, got {{v!r}}"),
    Rule("bootstrap", at_least(100), "--bootstrap must be >= 100 (resamples behind each 95% "
                                     "interval), got {v}"),
    Rule("reward_weights", lambda v, c: reward_weights_problem(v, c.reward) is None, "{err}"),
    _need("reward_workers", 0),
    Rule("reward_timeout", lambda v, c: finite(v) and v > 0,
         "--reward-timeout must be a finite number of seconds > 0, got {v}"),
]


def check_eval_args(args, output, prog="eval.py"):
    """eval.py's flags, the paths it will write (the summary `output` and its .problems.jsonl beside
    it) and --max-new-tokens against the model's context; a UsageError (one line, exit 2) on the
    first problem."""
    try:
        check(args, EVAL_RULES)
    except ValueError as err:
        raise UsageError(prog, err) from None
    for path in filter(None,
                       [output, problems_path(output) if output and not args.compare else None]):
        problem = output_path_problem(path, "file")
        if problem:
            raise UsageError(prog, f"--output {path}: {problem}")
    if not args.compare:
        problem = context_problem(args.max_new_tokens, args.model)
        if problem:
            raise UsageError(prog, problem)


def problems_path(output):
    """Where eval.py writes the per-problem records of the summary `output`."""
    return output.removesuffix(".json") + ".problems.jsonl"
