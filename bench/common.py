"""Bench helpers: one measurement per fresh subprocess, peak memory from VmHWM, medians
(bench/README.md, "How to measure on a small shared CPU machine").

Why a fresh process each time: the kernel's high-water mark (VmHWM) is per process, and a process
that already held a big tensor keeps its pages (allocator caches) and its peak. `ru_maxrss` of a
child carries the parent's value across exec, so it over-reports; VmHWM after `echo 5 >
/proc/self/clear_refs` measures from the point we choose.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys

RESULT_TAG = "BENCH_RESULT "  # the worker prints one line starting with this, followed by JSON


def read_status_kib(field: str) -> int:
    """A field of /proc/self/status in KiB (e.g. VmHWM, VmRSS)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise ValueError(f"no field {field!r} in /proc/self/status")


def reset_peak() -> int:
    """Reset this process's VmHWM to its current RSS; returns that RSS in bytes (the baseline to
    subtract)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return read_status_kib("VmRSS") * 1024


def peak_bytes() -> int:
    return read_status_kib("VmHWM") * 1024


def mem_available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise ValueError("no MemAvailable in /proc/meminfo")


def limit_address_space(max_bytes: int) -> None:
    """Cap this process's virtual memory so an oversize run fails with an allocation error instead
    of waking the OOM killer on a machine other people share."""
    resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))


def emit(result: dict) -> None:
    print(RESULT_TAG + json.dumps(result), flush=True)


def run_worker(argv: list[str], timeout_s: float = 900) -> dict:
    """Run `python <argv>` in a fresh process; return the dict it emitted, or {'error': ...}."""
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"error": f"rc={proc.returncode}: " + " | ".join(tail)}


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def environment(threads: int) -> dict:
    """What a reader needs to weigh the figures: date, machine, threads, allocator, versions."""
    import torch
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    preload = os.environ.get("LD_PRELOAD", "")
    return {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "mem_total_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "torch_threads": threads,
        "allocator": "tcmalloc (LD_PRELOAD)" if "tcmalloc" in preload else "glibc malloc",
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def write_results(path: str, result: dict) -> None:
    """A bench's results as JSON (folders created), the file the README's tables are read from."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
