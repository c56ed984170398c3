"""Run untrusted Python (a policy's code completion) against tests, without letting it hurt the trainer's machine.

Defences, strongest first (Linux; see rewards/_sandbox_child.py for the child side):
- Wall clock: the parent waits `timeout` seconds, then SIGKILLs the child's process group and the pid namespace.
- PID namespace (root, or unprivileged user namespaces): the test process is pid 1 of its own namespace, so
  killing it (or its exiting) kills every process it started, even ones that left the process group.
- Network namespace (same condition): the code sees no network interface at all; kernel-enforced.
  Otherwise socket.socket is replaced in the child before the code runs, which stops ordinary code but not
  ctypes or a subprocess (weak; `sandbox_info()` says which one you have).
- uid nobody (when the trainer runs as root): no write/delete/signal rights on anything of the trainer's,
  /proc/<trainer>/environ unreadable, and RLIMIT_NPROC (fork bombs) enforced. Without root the code runs as the
  trainer's own user: it cannot be denied that user's files. Run training as root in a container for that.
- setrlimit in the child: address space (memory), CPU seconds, file size, open files, processes, no core dumps.
- Its own temporary directory (cwd, HOME, TMPDIR), removed afterwards; a minimal environment (no trainer secrets).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

_CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sandbox_child.py")
NOBODY = 65534


@dataclass
class SandboxResult:
    passed: bool
    timed_out: bool
    returncode: int | None
    seconds: float
    stdout: str  # first 4 KiB of what the code printed, for debugging
    stderr: str


def _clean_env(workdir: str, run_id: str) -> dict:
    # Only what an interpreter needs. Thread-count variables keep numpy & co. from counting against max_procs.
    # GMTS_SANDBOX_RUN marks this run's processes in /proc/<pid>/environ for the no-namespace clean-up.
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "GMTS_SANDBOX_RUN": run_id}


def _kill_marked(run_id: str):
    """Without a pid namespace, a process that left our process group (setsid) survives killpg. Forked
    processes keep the environment block they started with, so find them by the run's marker and kill them.
    (A program that execs with a fresh environment escapes this; the namespace path has no such gap.)"""
    marker = f"GMTS_SANDBOX_RUN={run_id}".encode()
    for _ in range(3):  # a process may fork while we scan
        found = False
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        os.kill(int(entry), signal.SIGKILL)
                        found = True
            except OSError:
                continue
        if not found:
            return


def _children_of(pid: int) -> list[int]:
    """Live children of `pid`, by scanning /proc (the pid-namespace init the outer child forked)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:  # fields after "(comm)": state, ppid, pgrp, ...
                    found.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return found


def _kill_all(proc: subprocess.Popen):
    """SIGKILL the pid-namespace init (takes its whole namespace with it), then the process group."""
    if proc.poll() is None:  # not reaped yet, so its children's pids cannot have been reused
        for child in _children_of(proc.pid):
            try:
                os.kill(child, signal.SIGKILL)
            except OSError:
                pass
        try:
            proc.wait(timeout=0.5)  # the outer child reaps the init it forked and exits by itself
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # start_new_session=True made proc.pid the group id
    except OSError:
        pass
    proc.wait()


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read(64)
    except OSError:
        return ""


def _remove_tree(path: str):
    def make_writable_and_retry(func, p, _):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=make_writable_and_retry)


def run_python(solution: str, *, tests: str = "", entry_point: str | None = None, setup: str = "",
               cases: list[dict] | None = None, files: dict | None = None, timeout: float = 10.0,
               memory_mb: int = 2048, cpu_s: int | None = None, max_procs: int = 64, file_mb: int = 16,
               isolate: bool = True) -> SandboxResult:
    """Run `solution` (Python source) then `tests` in a sandbox; passed=True only if every test ran and passed.

    tests: Python code executed with the solution's names in scope (asserts, HumanEval's `def check(candidate)`
    together with `entry_point`, or KodCode/pytest-style `test_*` functions, which are called). `setup` is
    prepended (MBPP's test_setup_code). cases: instead of tests, a list of {"input": str, "output": str}: the
    solution runs as a script per case with that stdin, and its stdout must match token by token.
    """
    if cases is None and not tests.strip():
        raise ValueError("run_python needs `tests` or `cases`; got neither")
    base = tempfile.mkdtemp(prefix="gmts-sandbox-")
    workdir = os.path.join(base, "work")
    os.mkdir(workdir)
    start = time.monotonic()
    try:
        for name, text in {"solution.py": solution, **(files or {})}.items():
            if os.path.basename(name) != name:
                raise ValueError(f"sandbox file names must be plain names, got {name!r}")
            with open(os.path.join(workdir, name), "w", encoding="utf-8") as f:
                f.write(text)
        if os.getuid() == 0:  # the child drops to nobody: give it its work dir, and only that
            for root, dirs, names in os.walk(workdir):
                for p in [root] + [os.path.join(root, n) for n in names]:
                    os.chown(p, NOBODY, NOBODY)
            os.chmod(base, 0o711)
        run_id = os.urandom(8).hex()
        spec = {"workdir": workdir, "status_path": os.path.join(base, "status"), "tests": tests,
                "entry_point": entry_point, "setup": setup, "cases": cases, "isolate": isolate,
                "limits": {"memory_mb": memory_mb, "cpu_s": int(cpu_s or max(1, timeout) + 1),
                           "max_procs": max_procs, "file_mb": file_mb}}
        with open(os.path.join(base, "stdout"), "w+b") as out, open(os.path.join(base, "stderr"), "w+b") as err:
            proc = subprocess.Popen([sys.executable, "-I", _CHILD], stdin=subprocess.PIPE, stdout=out, stderr=err,
                                    cwd=workdir, env=_clean_env(workdir, run_id), start_new_session=True,
                                    close_fds=True)
            timed_out = False
            try:
                proc.stdin.write(json.dumps(spec).encode())
                proc.stdin.close()
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
            except BrokenPipeError:
                pass
            finally:
                _kill_all(proc)  # always: a finished run may still have left processes in its group
                if _read(os.path.join(base, "status")) != "namespaces":
                    _kill_marked(run_id)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(4096).decode(errors="replace"), err.read(4096).decode(errors="replace")
        return SandboxResult(passed=(not timed_out and proc.returncode == 0), timed_out=timed_out,
                             returncode=proc.returncode, seconds=time.monotonic() - start, stdout=stdout,
                             stderr=stderr)
    finally:
        _remove_tree(base)


_INFO_PROBE = r'''
import os, socket
INFO = {"uid": os.getuid(), "pid_namespace": os.getpid() == 1}
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(("1.1.1.1", 53))
    INFO["net"] = "open"
except PermissionError as e:
    INFO["net"] = "socket-patch" if "sandbox" in str(e) else "blocked"
except OSError as e:
    INFO["net"] = "namespace" if e.errno == 101 else f"blocked ({e})"  # ENETUNREACH: no interface at all
'''


def sandbox_info() -> dict:
    """What this machine's sandbox gives: {'net': 'namespace' | 'socket-patch' | ..., 'pid_namespace': bool,
    'uid': int (65534 = nobody)}. Runs one tiny sandboxed program (about 0.1 s)."""
    result = run_python(_INFO_PROBE, tests="import json; print('GMTS_INFO' + json.dumps(INFO))", timeout=10)
    for line in result.stdout.splitlines():
        if line.startswith("GMTS_INFO"):
            return json.loads(line[len("GMTS_INFO"):])
    raise RuntimeError(f"sandbox probe failed: {result.stderr[-500:]}")
