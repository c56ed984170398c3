"""Verifiable rewards: `get_reward(name)` -> fn(completion: str, reference) -> float, and the scorer
that runs a step's rewards concurrently (`Scorer`): the built-in ones, chosen per data row, or
`--reward SPEC` (repeatable).

    gsm8k   last \\boxed{} or else the last number, compared with the gold      (rewards/math.py)
    math    last \\boxed{}, compared with the gold by value / math-verify       (rewards/math.py)
    choice  the chosen letter equals the reference letter                      (rewards/choice.py)
    code    the last ```python block passes the tests: run in a sandbox,       (rewards/code.py)
            judged here

By default a reward is the binary outcome, 1.0 or 0.0, as in the paper. `format_bonus=b` opts in to
adding b when the answer has the expected form (a box, a letter, a code block) whatever its
correctness; it makes the reward non-binary and changes every group's advantages, so log it with the
run's config. Reward functions never raise on a completion string: anything unparseable scores 0.0.
A malformed *reference* raises ValueError.

Rewards of one's own (`load_reward`, `Scorer`; docs/your_task.md): a SPEC is a built-in name,
`path/to/file.py:function` or `package.module:function`. A custom function is called once per
answer as fn(completion, answer, **fields), fields being the data row's other fields, and returns a
number or None (does not apply). R = the sum of weight x value over the rewards that applied (None
adds nothing; none applying: R = 0).
"""

import asyncio
import importlib
import importlib.util
import inspect
import numbers
import os
import pickle
import sys
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from math import isfinite

from .choice import choice_reward, extract_choice, has_choice
from .code import code_reward, code_stats, extract_code, has_code_block
from .isolated import (DEFAULT_TIMEOUT, RewardError, ScoringStopped, WorkerProcess,
                       set_interrupt_check)
from .math import (
    answers_equal,
    gsm8k_reward,
    has_boxed,
    last_boxed,
    last_number,
    math_reward,
)

_REWARDS = {
    "gsm8k": (gsm8k_reward, has_boxed),
    "math": (math_reward, has_boxed),
    "choice": (choice_reward, has_choice),
    "code": (code_reward, has_code_block),
}
REWARD_NAMES = tuple(_REWARDS)
FLOAT32_MAX = 3.4028234663852886e38  # the largest finite float32: R is a float32 tensor


def get_reward(name: str, *, format_bonus: float = 0.0, trusted_only: bool = False, **options):
    """options go to the reward (code: timeout=, memory_mb=). trusted_only=True (any reward;
    train.py's --code-trusted-only) refuses verdicts this process did not make itself: a code
    problem whose tests could only run inside the sandbox scores 0.0 without running. Math and
    choice verdicts are always made here."""
    if name not in _REWARDS:
        raise ValueError(f"unknown reward {name!r}; choose one of {REWARD_NAMES}")
    outcome, has_format = _REWARDS[name]
    if trusted_only and name == "code":
        options = dict(options, trusted_only=True)
    if options:
        if name != "code":
            raise ValueError(f"reward {name!r} takes no options, got {sorted(options)}")
        outcome = partial(outcome, **options)
    if not format_bonus:
        return outcome

    def with_format_bonus(completion: str, reference) -> float:
        return outcome(completion, reference) + format_bonus * float(has_format(completion))

    return with_format_bonus


@dataclass
class Reward:
    """One reward of a run: `label` names it in the logs (reward_<label>_mean), `spec` is what was
    typed."""

    spec: str
    label: str
    fn: object
    builtin: bool
    concurrent: bool = True  # may run in a thread pool (fn.concurrent = False opts out)
    is_async: bool = False  # an `async def` reward: awaited, all of a batch's calls at once
    takes_fields: object = True  # True: **fields; else the tuple of field names it takes
    reserved: tuple = ()  # the names of its (completion, answer) parameters: no field fills them
    required: tuple = ()  # the fields it names without a default: every row must have them
    worker: object = None  # its isolated.WorkerProcess (scorer_for), None: called in this process
    index: int = 0  # its place among the worker's rewards

    def metadata(self) -> dict:
        """What a worker process tells the trainer about a reward it loaded (picklable)."""
        return {
            k: getattr(self, k)
            for k in (
                "spec",
                "label",
                "builtin",
                "concurrent",
                "is_async",
                "takes_fields",
                "reserved",
                "required",
            )
        }


_MODULES = {}  # absolute path of a reward file -> its module: each file runs once per process
_MODULES_LOCK = threading.Lock()


def _user_traceback(err: BaseException) -> str:
    """The traceback of `err` without the frames of this file (where the user's code was called
    from)."""
    tb = err.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) == os.path.abspath(
        __file__
    ):
        tb = tb.tb_next
    skip = (importlib.__file__.rsplit(os.sep, 1)[0], "<frozen ")
    frames = [f for f in traceback.extract_tb(tb) if not f.filename.startswith(skip)]
    lines = (
        ["Traceback (most recent call last):\n"] + traceback.format_list(frames) if frames else []
    )
    return "".join(lines + traceback.format_exception_only(type(err), err))


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _import_file(path: str, spec: str):
    full = os.path.abspath(os.path.expanduser(path))
    with _MODULES_LOCK:
        if full in _MODULES:
            return _MODULES[full]
        if not os.path.isfile(full):
            raise RewardError(
                f"--reward {spec}: no such file {path}"
                if not os.path.isdir(full)
                else f"--reward {spec}: {path} is a folder, not a .py file"
            )
        name = "gmts_reward_" + "".join(
            c if c.isalnum() else "_" for c in os.path.splitext(full)[0]
        )
        module_spec = importlib.util.spec_from_file_location(name, full)
        if module_spec is None:
            raise RewardError(
                f"--reward {spec}: {path} cannot be imported as Python (name it file.py)"
            )
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # what pickling and dataclasses in the file look up
        try:
            module_spec.loader.exec_module(module)
        except BaseException as err:
            del sys.modules[name]
            if isinstance(err, KeyboardInterrupt):
                raise
            raise RewardError(
                f"--reward {spec}: importing {path} raised {_one_line(err)}", _user_traceback(err)
            ) from None
        _MODULES[full] = module
        return module


def _import_module(module_name: str, spec: str):
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and (module_name == err.name or module_name.startswith(err.name + ".")):
            raise RewardError(
                f"--reward {spec}: no module named {err.name!r} (a file is written "
                f"path/to/file.py:function)"
            ) from None
        raise RewardError(
            f"--reward {spec}: importing {module_name} raised {_one_line(err)}",
            _user_traceback(err),
        ) from None
    except Exception as err:  # noqa: BLE001  (the user's module: any error is theirs to see)
        raise RewardError(
            f"--reward {spec}: importing {module_name} raised {_one_line(err)}",
            _user_traceback(err),
        ) from None


def _signature(fn, spec: str):
    """(fields: True for **fields, else the tuple of field names fn takes by keyword; the names of
    its first two parameters, which fields never fill). fn must take (completion, answer)
    positionally."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True, ()  # no signature to read (a C function): call it and see
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2 and not any(p.kind == p.VAR_POSITIONAL for p in params):
        raise RewardError(
            f"--reward {spec}: {fn.__name__}{inspect.signature(fn)} must take "
            "(completion, answer, **fields)"
        )
    stuck = [p.name for p in positional[2:] if p.kind == p.POSITIONAL_ONLY and p.default is p.empty]
    if stuck:
        raise RewardError(
            f"--reward {spec}: {fn.__name__}{inspect.signature(fn)}: the field {stuck[0]!r} is "
            "positional-only, but fields are passed by name"
        )
    reserved = tuple(p.name for p in positional[:2])
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return True, reserved
    return tuple(p.name for p in positional[2:] if p.kind != p.POSITIONAL_ONLY) + tuple(
        p.name for p in params if p.kind == p.KEYWORD_ONLY
    ), reserved


def load_reward(spec: str, *, trusted_only: bool = False) -> Reward:
    """A Reward from a SPEC: a built-in name, path/to/file.py:function or package.module:function. A
    problem is a RewardError: one line naming the SPEC, and the user's traceback where their code
    raised."""
    spec = spec.strip()
    if spec in _REWARDS:
        return Reward(spec, spec, get_reward(spec, trusted_only=trusted_only), builtin=True)
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise RewardError(
            f"--reward {spec!r}: not a built-in reward ({', '.join(REWARD_NAMES)}) nor "
            "path/to/file.py:function nor package.module:function"
        )
    is_file = where.endswith(".py") or "/" in where or os.sep in where or os.path.isfile(where)
    module = _import_file(where, spec) if is_file else _import_module(where, spec)
    fn = getattr(module, name, None)
    if fn is None:
        found = sorted(
            k
            for k, v in vars(module).items()
            if inspect.isfunction(v)
            and not k.startswith("_")
            and getattr(v, "__module__", None) == module.__name__
        )
        raise RewardError(
            f"--reward {spec}: {where} has no function {name!r}"
            + (f" (it defines {', '.join(found)})" if found else "")
        )
    if not callable(fn):
        raise RewardError(
            f"--reward {spec}: {name} in {where} is a {type(fn).__name__}, not a function"
        )
    is_async = inspect.iscoroutinefunction(fn) or (
        not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__)
    )
    takes_fields, reserved = _signature(fn, spec)
    required = ()
    if takes_fields is not True:
        params = inspect.signature(fn).parameters
        required = tuple(
            n for n in takes_fields if params[n].default is params[n].empty and n not in reserved
        )
    return Reward(
        spec,
        name,
        fn,
        builtin=False,
        concurrent=getattr(fn, "concurrent", True) is not False,
        is_async=is_async,
        takes_fields=takes_fields,
        reserved=reserved,
        required=required,
    )


def parse_weights(text, n: int, flag: str = "--reward-weights") -> list[float]:
    """'1,0.1' -> [1.0, 0.1] for n rewards ('' = all 1). ValueError names the flag."""
    if text in ("", None):
        return [1.0] * n
    parts = text if isinstance(text, (list, tuple)) else str(text).replace(" ", "").split(",")
    try:
        weights = [float(w) for w in parts]
    except ValueError:
        raise ValueError(f"{flag} must be numbers separated by commas, got {text!r}") from None
    if not all(isfinite(w) for w in weights):
        raise ValueError(f"{flag} must be finite numbers, got {text!r}")
    if len(weights) != n:
        raise ValueError(f"{flag} gives {len(weights)} weight(s) for {n} --reward(s)")
    return weights


def load_rewards(specs, weights=None, *, trusted_only: bool = False) -> list[tuple[Reward, float]]:
    """[(Reward, weight)] for the SPECs (a list; weights: a list, a '1,0.1' string or None = all 1).
    Labels are made unique: a second `correct` from another file becomes `<file stem>_correct`, then
    `correct_2`, ..."""
    loaded = [load_reward(s, trusted_only=trusted_only) for s in specs]
    return list(zip(_unique_labels(loaded), parse_weights(weights, len(loaded))))


def _unique_labels(loaded):
    """The Rewards with unique labels (load_rewards' rule), in place."""
    seen = set()
    for r in loaded:
        if r.label in seen and not r.builtin:
            stem = os.path.splitext(os.path.basename(r.spec.rpartition(":")[0]))[0].replace(
                ".", "_"
            )
            r.label = f"{stem}_{r.label}"
        base, k = r.label, 2
        while r.label in seen:
            r.label, k = f"{base}_{k}", k + 1
        seen.add(r.label)
    return loaded


def default_workers() -> int:
    """Threads for scoring: twice the CPUs this process may use (shared among torchrun's processes
    on the node), since a code answer's thread mostly waits on its sandbox: 96 code answers on 2
    cores took 1.6x less time on 2 threads, 3.0x on 4, 3.5x on 8 (bench/README.md)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, 2 * (cpus or 1) // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)))


class Scores:
    """A batch's rewards: `total[i]` is answer i's R; `values[label][i]` each reward's own value
    (None: did not apply), empty in per-row mode."""

    def __init__(self, total, values):
        self.total, self.values = total, values

    def figures(self) -> dict:
        """{label: (answers it applied to, their sum, answers where it was None)}: sums that add up
        over batches and processes."""
        return {
            label: (
                sum(v is not None for v in vals),
                float(sum(v for v in vals if v is not None)),
                sum(v is None for v in vals),
            )
            for label, vals in self.values.items()
        }


def reward_figures(counts: dict) -> dict:
    """metrics.jsonl's per-reward fields from summed figures: reward_<label>_mean over the answers
    it applied to (None when it applied to none) and reward_<label>_none, the share of answers where
    it was None."""
    out = {}
    for label, (applied, total, nones) in counts.items():
        out[f"reward_{label}_mean"] = total / applied if applied else None
        out[f"reward_{label}_none"] = nones / max(applied + nones, 1)
    return out


class Scorer:
    """Scores a batch of answers concurrently. rewards=None: each problem's own built-in reward
    as the data rows say; else [(Reward, weight)] from load_rewards, applied to every problem.
    Every call that may run concurrently goes to one thread pool of `workers` threads: the code
    reward's sandboxes and math-verify's helpers are subprocesses, and a custom reward that waits (a
    subprocess, a model judge over HTTP) waits side by side; `async def` rewards are awaited
    together on an event loop; a reward with `fn.concurrent = False` runs in this thread, one answer
    after another."""

    def __init__(
        self,
        rewards=None,
        *,
        workers: int | None = None,
        trusted_only: bool = False,
        functions=None,
        **options,
    ):
        self.rewards = rewards or None  # [] is per-row mode too
        self.workers = workers or default_workers()
        self.trusted_only, self.options = trusted_only, options
        self._fns = dict(
            functions or {}
        )  # per-row mode: name -> fn(completion, answer), else get_reward
        self._pool = None
        self.counts = {}  # score(log=True)'s per-reward sums since take_counts()

    @property
    def labels(self) -> list[str]:
        return [r.label for r, _ in self.rewards] if self.rewards else []

    def __getitem__(self, name: str):
        """The built-in reward `name` (per-row mode): scorer[problem.reward](completion, answer)."""
        if name not in self._fns:
            opts = self.options if name == "code" else {}
            self._fns[name] = get_reward(name, trusted_only=self.trusted_only, **opts)
        return self._fns[name]

    def pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=self.workers, thread_name_prefix="gmts-reward"
            )
        return self._pool

    def close(self):
        """Ends the thread pool and the rewards' worker process (a later score starts them
        again)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for worker in {id(r.worker): r.worker for r, _ in self.rewards or () if r.worker}.values():
            worker.stop()

    def take_counts(self) -> dict:
        """The per-reward sums (Scores.figures) of every score(log=True) since the last call; resets
        them."""
        counts, self.counts = self.counts, {}
        return counts

    def score(self, completions, problems, *, concurrent: bool = True, log: bool = False) -> Scores:
        """Scores of completions[i], an answer to problems[i] (anything with .answer, .reward and
        .fields). concurrent=False: every call in this thread, in order (the same values:
        bench/bench_reward_time.py). log=True: add the per-reward sums to self.counts (what train.py
        logs per step)."""
        scores = self._score(completions, problems, concurrent)
        if log:
            for label, figures in scores.figures().items():
                self.counts[label] = [
                    a + b for a, b in zip(self.counts.get(label, (0, 0.0, 0)), figures)
                ]
        return scores

    def _score(self, completions, problems, concurrent):
        if len(completions) != len(problems):
            raise ValueError(
                f"lengths differ: {len(completions)} completions, {len(problems)} problems"
            )
        if self.rewards is None:
            jobs = [(self[p.reward], None, c, p, True) for c, p in zip(completions, problems)]
            return Scores([float(v) for v in self._run(jobs, concurrent)], {})
        jobs = [
            (r.fn, r, c, p, r.concurrent)
            for r, _ in self.rewards
            for c, p in zip(completions, problems)
        ]
        flat = self._run(jobs, concurrent)
        n = len(completions)
        values = {r.label: flat[k * n : (k + 1) * n] for k, (r, _) in enumerate(self.rewards)}
        total = []
        for i in range(n):  # R: the weighted sum over the rewards that applied (None adds nothing)
            applied = [(w, values[r.label][i]) for r, w in self.rewards]
            total.append(float(sum(w * v for w, v in applied if v is not None)))
            if not abs(total[-1]) <= FLOAT32_MAX:  # each value fits, the weighted sum may not
                terms = ", ".join(f"{r.label}={values[r.label][i]}" for r, _ in self.rewards)
                raise RewardError(
                    f"--reward-weights: R = {total[-1]:g} for problem {problems[i].id} (the "
                    f"weighted sum of {terms}) is not finite in float32; lower the weights or the "
                    "values"
                )
        return Scores(total, values)

    def _run(self, jobs, concurrent):
        out = [None] * len(jobs)
        remote = [k for k, job in enumerate(jobs) if job[1] is not None and job[1].worker]
        threaded = [
            k
            for k, job in enumerate(jobs)
            if concurrent and job[4] and not (job[1] and (job[1].is_async or job[1].worker))
        ]
        futures = {k: self.pool().submit(_call, *jobs[k][:4]) for k in threaded} if threaded else {}
        if remote:  # custom rewards, in their worker process (rewards/isolated.py)
            for k, v in zip(remote, self._run_remote([jobs[k] for k in remote], concurrent)):
                out[k] = v
        waiting = [
            k
            for k, job in enumerate(jobs)
            if job[1] is not None and job[1].is_async and not job[1].worker
        ]
        if waiting:

            async def gather():
                return (
                    await asyncio.gather(*(_call_async(*jobs[k][:4]) for k in waiting))
                    if concurrent
                    else [await _call_async(*jobs[k][:4]) for k in waiting]
                )

            for k, v in zip(waiting, _run_coroutine(gather())):
                out[k] = v
        for k, job in enumerate(jobs):
            if k not in futures and not (job[1] is not None and (job[1].is_async or job[1].worker)):
                out[k] = _call(*job[:4])
        for k, fut in futures.items():
            out[k] = fut.result()
        return out

    @staticmethod
    def _run_remote(jobs, concurrent):
        """The values of jobs whose rewards live in a worker process (one worker per Scorer):
        each call's arguments pickled on their own, so that each call gets its own copy."""
        blobs = []
        for _, reward, completion, problem, _ in jobs:
            args, kwargs = _arguments(reward, completion, problem)
            blobs.append(pickle.dumps((reward.index, problem.id, completion, args[1], kwargs)))

        def describe(k):
            if k is None:
                names = sorted({job[1].spec for job in jobs})
                return f"--reward {', '.join(names)}: a reward", " while scoring"
            _, reward, completion, problem, _ = jobs[k]
            return (
                f"--reward {reward.spec}: {reward.label}",
                f" on problem {problem.id} (completion {completion[:40]!r})",
            )

        return jobs[0][1].worker.score(blobs, concurrent, describe)

    def check(self, problems, first: int = 8, completions=("", " ")):
        """Start-up check of custom rewards: every field a reward names exists in every row, and
        each reward takes the given completions (an empty answer and a blank one, which models
        produce) on the `first` rows, returning a number or None. A problem is a RewardError naming
        the reward."""
        if not self.rewards:
            return
        for reward, _ in self.rewards:
            if reward.builtin or reward.takes_fields is True:
                continue
            for p in problems:
                missing = [n for n in reward.required if n not in p.fields]
                if missing:
                    raise RewardError(
                        f"--reward {reward.spec}: {reward.label} takes the field "
                        f"{missing[0]!r}, which problem {p.id} has not (its fields: "
                        f"{', '.join(sorted(p.fields)) or 'none'})"
                    )
        first = list(problems[:first])
        self.score(
            [c for c in completions for _ in first],
            [p for _ in completions for p in first],
            concurrent=False,
        )


def as_scorer(fns) -> Scorer:
    """A Scorer as it is, or one over a {name: fn(completion, answer)} dict (per-row mode), kept on
    the dict's first use so that its thread pool is made once."""
    if isinstance(fns, Scorer):
        return fns
    key = id(fns)
    if key not in _DICT_SCORERS or _DICT_SCORERS[key][0] is not fns:
        _DICT_SCORERS[key] = (fns, Scorer(functions=fns))
    return _DICT_SCORERS[key][1]


_DICT_SCORERS = {}


def scorer_for(
    specs,
    weights=None,
    *,
    workers=None,
    trusted_only: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    isolated: bool = True,
) -> Scorer:
    """The Scorer of the --reward SPECs with their --reward-weights (load_rewards), or without specs
    each problem's own built-in reward: what train.py, eval.py and gmts.tools score with.
    workers: threads (None or 0: twice the CPUs). isolated: the custom rewards are imported and
    called in a worker process, each call within `timeout` seconds (rewards/isolated.py); the
    built-in ones run here. Raises RewardError for a spec that does not load."""
    if not specs:
        return Scorer(None, workers=workers or None, trusted_only=trusted_only)
    if not isolated:
        chosen = load_rewards(specs, weights, trusted_only=trusted_only)
        return Scorer(chosen, workers=workers or None, trusted_only=trusted_only)
    specs = [s.strip() for s in specs]
    weights = parse_weights(weights, len(specs))
    custom = [s for s in specs if s not in _REWARDS]
    meta = {}
    if custom:
        worker = WorkerProcess(
            custom, trusted_only=trusted_only, workers=workers or default_workers(), timeout=timeout
        )
        for index, m in enumerate(worker.start()):
            meta[custom[index]] = Reward(fn=None, worker=worker, index=index, **m)
    loaded = [meta[s] if s in meta else load_reward(s, trusted_only=trusted_only) for s in specs]
    return Scorer(
        list(zip(_unique_labels(loaded), weights)),
        workers=workers or None,
        trusted_only=trusted_only,
    )


def _run_coroutine(coro):
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(
        1
    ) as one:  # called from inside a running loop (a notebook): another thread
        return one.submit(asyncio.run, coro).result()


def _arguments(reward, completion, problem):
    names = problem.fields if reward.takes_fields is True else reward.takes_fields
    return (completion, problem.answer), {
        k: problem.fields[k] for k in names if k in problem.fields and k not in reward.reserved
    }


def _checked(reward, value, completion, problem):
    if value is None:
        return None
    if isinstance(value, numbers.Real):  # bool, int, float, numpy scalars
        value = float(value)
    elif getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        value = float(value.item())  # a 0-d numpy array or tensor
    else:
        raise RewardError(
            f"--reward {reward.spec}: {reward.label} returned {type(value).__name__} "
            f"{repr(value)[:60]} for problem {problem.id}; return a number or None"
        )
    if not isfinite(value) or abs(value) > FLOAT32_MAX:  # R is a float32 tensor
        raise RewardError(
            f"--reward {reward.spec}: {reward.label} returned {value} for problem {problem.id} "
            f"(completion {completion[:40]!r}); return a number finite in float32 "
            f"(|value| <= {FLOAT32_MAX:.4g}) or None"
        )
    return value


def _raised(reward, err, completion, problem) -> RewardError:
    """The RewardError for a custom reward that raised `err` (the user's code: any error is theirs
    to see)."""
    return RewardError(
        f"--reward {reward.spec}: {reward.label} raised {_one_line(err)} on problem "
        f"{problem.id} (completion {completion[:40]!r})",
        _user_traceback(err),
    )


# What a custom reward's call may raise and be named for: in a worker process every exception
# (SystemExit, KeyboardInterrupt: nothing outside the reward's own code could raise them there);
# in this process, Exception (a Ctrl-C in the trainer is the trainer's).
_CATCH = Exception


def _call(fn, reward, completion, problem):
    """One reward call: a built-in in per-row mode (reward None), or a custom reward with its
    fields."""
    if reward is None or reward.builtin:
        return fn(completion, problem.answer)
    args, kwargs = _arguments(reward, completion, problem)
    try:
        value = fn(*args, **kwargs)
    except _CATCH as err:
        raise _raised(reward, err, completion, problem) from None
    return _checked(reward, value, completion, problem)


async def _call_async(fn, reward, completion, problem):
    args, kwargs = _arguments(reward, completion, problem)
    try:
        value = await fn(*args, **kwargs)
    except _CATCH as err:
        raise _raised(reward, err, completion, problem) from None
    return _checked(reward, value, completion, problem)


@dataclass
class _Row:
    answer: object
    reward: str
    id: str = ""
    fields: dict = None


def score_batch(
    names: list[str],
    completions: list[str],
    references: list,
    *,
    workers: int | None = None,
    **options,
) -> list[float]:
    """Rewards for a batch, names[i] being the built-in reward of completion i, all scored
    concurrently on `workers` threads (default: twice the CPUs); options go to the code reward
    (timeout=, memory_mb=, trusted_only=)."""
    if not len(names) == len(completions) == len(references):
        raise ValueError(
            f"lengths differ: {len(names)} names, {len(completions)} completions, "
            f"{len(references)} references"
        )
    trusted = options.pop("trusted_only", False)
    scorer = Scorer(workers=workers, trusted_only=trusted, **options)
    try:
        return scorer.score(
            completions, [_Row(ref, name) for name, ref in zip(names, references)]
        ).total
    finally:
        scorer.close()


__all__ = [
    "REWARD_NAMES",
    "RewardError",
    "Scorer",
    "Scores",
    "ScoringStopped",
    "answers_equal",
    "as_scorer",
    "choice_reward",
    "code_reward",
    "code_stats",
    "extract_choice",
    "extract_code",
    "get_reward",
    "gsm8k_reward",
    "last_boxed",
    "last_number",
    "load_reward",
    "load_rewards",
    "math_reward",
    "reward_figures",
    "score_batch",
    "scorer_for",
    "set_interrupt_check",
]
