"""The machine and the launcher as one line each, read before torch loads: the address-space limit
(ulimit -v), torchrun's environment (WORLD_SIZE, RANK), and an allocation that failed (out of
memory, naming the flags to lower)."""
import contextlib
import os
import re

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


def code_reward_env_problem():
    """Why GMTS_CODE_TIME_SCALE (the code reward's time limits, rewards/code.py) or
    GMTS_SANDBOX_UIDS (its runs' uids, rewards/sandbox.py) is unusable, or None."""
    from gmts.rewards.code import time_scale
    from gmts.rewards.sandbox import run_uids
    try:
        time_scale()
        run_uids()
    except ValueError as err:
        return str(err)
    return None
