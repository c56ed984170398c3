"""Start rewards/_sandbox_child.py on untrusted code and bring back its report (data only; the caller judges).

Two ways to start it, chosen once per process by a probe run (`sandbox_info()` says which):
- bubblewrap (`bwrap`, Debian package `bubblewrap`): new mount, pid, net, ipc, uts and (where the kernel allows)
  cgroup namespaces; a root file system that holds only read-only binds of what the interpreter needs; private
  size-capped tmpfs for the working directory, /tmp and /dev/shm, so nothing written survives the run and no run
  sees another's files; --die-with-parent and --new-session. As root, bwrap keeps only CAP_SETUID/SETGID for the
  child, which becomes the run's own uid (so RLIMIT_NPROC holds: the kernel exempts uid 0 from it), enters a user
  namespace that cannot make another one, and drops every capability. As another user, bwrap makes the user
  namespace itself (--unshare-user --disable-userns).
- fallback, with one warning: today's path. unshare(NET|PID) when permitted, the run's own uid as root (keeping
  CAP_DAC_READ_SEARCH only if the interpreter is unreadable to other users), a 0700 work dir on disk, and
  afterwards the run's files in /tmp and /dev/shm are deleted and its processes killed.
Both: rlimits in the child, a wall clock in the parent that SIGKILLs the session, a minimal environment.
Each run gets its own uid from RUN_UIDS, so two runs at once cannot signal, trace or starve (NPROC) each other.
"""
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass

from .testplan import build_plan, decode, judge

_CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sandbox_child.py")
RUN_UIDS = range(0x6D000000, 0x6D000000 + (1 << 24))  # one per run, unused by any account; never 0 or 65534
TMPFS_MB = 64  # each of /work, /tmp, /dev/shm inside bwrap
SANDBOX_DIRS = ("/tmp", "/dev/shm")


@dataclass
class ChildRun:
    report: list  # the JSON lines the child wrote to fd 3, parsed; untrusted data
    timed_out: bool
    returncode: int | None
    seconds: float
    stdout: str  # first 4 KiB of what the code printed, for debugging
    stderr: str


# ---------------------------------------------------------------- bubblewrap


def _interpreter_paths() -> list[str]:
    """Directories the interpreter and its packages live in, outside the system dirs that are bound anyway."""
    paths = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    paths.update(p for p in sys.path if p and os.path.isdir(p))
    paths = sorted(os.path.realpath(p) for p in paths if p and not p.startswith(("/usr/", "/lib")))
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)}
    project = os.path.dirname(os.path.dirname(os.path.realpath(_CHILD)))
    kept = []
    for p in paths:
        if p == project or project.startswith(p + "/"):
            continue  # the project (pytest and `python train.py` put it on sys.path) or a folder holding it
        if p.startswith(project + "/") and not any(p == q or p.startswith(q + "/") for q in prefixes):
            continue  # tests/, rewards/, ...: the project's own folders, unless a virtual environment lives there
        if os.path.isdir(p) and not any(p == k or p.startswith(k + "/") for k in kept):
            kept.append(p)  # nested ones are left out: their parent is bound
    return kept


def _bwrap_argv(bwrap: str, as_root: bool, workdir: str, uid: int) -> list[str]:
    argv = [bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if as_root:  # the child drops to `uid` itself and makes its own user namespace (see module docstring)
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        argv += ["--unshare-user", "--disable-userns", "--uid", "65534", "--gid", "65534"]
    for path in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc/ld.so.cache", "/etc/ld.so.conf",
                 "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime"):
        argv += ["--ro-bind-try", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for path in (workdir, "/tmp", "/dev/shm"):
        # as root, the tmpfs is made before the child becomes the run's uid, which must still write there
        argv += ["--size", str(TMPFS_MB << 20), "--perms", "0777" if as_root else "0700", "--tmpfs", path]
    # The interpreter's folders are bound AFTER the tmpfs mounts: a venv under /tmp (or under a checkout in /work)
    # would otherwise be hidden by them, and bwrap could not even start the interpreter.
    made = {workdir, "/tmp", "/dev", "/dev/shm"}
    for path in _interpreter_paths():
        parts = path.split("/")
        for i in range(2, len(parts)):  # bwrap makes missing parents 0700: the run's uid could not pass them
            parent = "/".join(parts[:i])
            if parent not in made:
                made.add(parent)
                argv += ["--perms", "0755", "--dir", parent]
        argv += ["--ro-bind", path, path]
    argv += ["--perms", "0755", "--dir", "/gmts", "--ro-bind", _CHILD, "/gmts/child.py"]
    argv += ["--chdir", workdir, "--clearenv"]
    for key, value in _clean_env(workdir, tmp="/tmp").items():
        argv += ["--setenv", key, value]
    return argv + ["--", sys.executable, "-I", "/gmts/child.py"]


def _clean_env(workdir: str, tmp: str) -> dict:
    # Only what an interpreter needs. Thread-count variables keep numpy & co. from counting against max_procs.
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": tmp, "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# ---------------------------------------------------------------- fallback helpers


def _world_traversable(path: str) -> bool:
    """Can a user with no special rights reach and read `path` (every parent o+x, the path o+r)?"""
    path = os.path.realpath(path)
    parts = path.split("/")
    for i in range(2, len(parts) + 1):
        try:
            mode = os.stat("/".join(parts[:i]) or "/").st_mode
        except OSError:
            return False
        if not mode & stat.S_IXOTH:
            return False
    return bool(os.stat(path).st_mode & stat.S_IROTH)


def _kill_uid(uid: int):
    """SIGKILL every process of the run's uid (unique to this run) until none is left (at most ~2 s)."""
    for _ in range(200):  # a process may fork while we scan; a dying namespace takes a moment
        found = False
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    os.kill(int(entry), signal.SIGKILL)
                    found = True
            except OSError:
                continue
        if not found:
            return
        time.sleep(0.01)


def _remove_owned_by(uid: int):
    """Fallback clean-up: whatever the run's uid left directly in /tmp or /dev/shm."""
    for top in SANDBOX_DIRS:
        try:
            entries = os.listdir(top)
        except OSError:
            continue
        for name in entries:
            path = os.path.join(top, name)
            try:
                if os.lstat(path).st_uid != uid:
                    continue
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.remove(path)
            except OSError:
                continue


def _kill_group(proc: subprocess.Popen):
    """SIGKILL the child's session (start_new_session made its pid the group id); bwrap's --die-with-parent and
    the pid namespace take the rest with it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


# ---------------------------------------------------------------- one run


_mode = None  # "bwrap" | "fallback", decided by the first run's probe


def _read_report(f) -> list:
    f.seek(0)
    lines = []
    for line in f.read(64 << 20).splitlines():
        try:
            lines.append(json.loads(line))
        except (ValueError, RecursionError):
            continue
    return lines


def _start(spec: dict, *, mode: str, timeout: float, isolate: bool) -> ChildRun:
    as_root = os.getuid() == 0
    uid = random.choice(RUN_UIDS)
    base = None if mode == "bwrap" else tempfile.mkdtemp(prefix="gmts-sandbox-")
    start = time.monotonic()
    try:
        if mode == "bwrap":
            workdir = "/work"
            argv = _bwrap_argv(shutil.which("bwrap"), as_root, workdir, uid)
            spec["drop"] = {"how": "bwrap-root" if as_root else "bwrap-user", "uid": uid}
            env, cwd = {}, "/"
        else:
            workdir = os.path.join(base, "work")
            os.mkdir(workdir, 0o700)
            if as_root:  # the work dir belongs to this run's uid alone
                os.chown(workdir, uid, uid)
                os.chmod(base, 0o711)
            spec["status_path"] = os.path.join(base, "status")
            spec["drop"] = {"how": "fallback-root" if as_root else "fallback-user", "uid": uid,
                            "keep_dac": not _world_traversable(sys.executable)
                            or not _world_traversable(_CHILD)}
            argv, env, cwd = [sys.executable, "-I", _CHILD], _clean_env(workdir, workdir), workdir
        spec.update(workdir=workdir, isolate=isolate)
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as rep:
            spec["report_fd"] = rep.fileno()
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err, cwd=cwd, env=env,
                                    start_new_session=True, pass_fds=(rep.fileno(),))
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
                _kill_group(proc)
                if as_root:  # the pid namespace dies asynchronously: return only once nothing of the run is left
                    _kill_uid(uid)
            out.seek(0)
            err.seek(0)
            return ChildRun(report=[] if timed_out else _read_report(rep), timed_out=timed_out,
                            returncode=proc.returncode, seconds=time.monotonic() - start,
                            stdout=out.read(4096).decode(errors="replace"),
                            stderr=err.read(4096).decode(errors="replace"))
    finally:
        if base is not None:
            shutil.rmtree(base, ignore_errors=True)
            if as_root:
                _remove_owned_by(uid)


_PROBE = r'''
import os, socket
INFO = {"uid": os.getuid(), "pid_namespace": os.getpid() <= 2,
        "caps": open("/proc/self/status").read().split("CapEff:")[1].split()[0],
        "namespaces": {n: os.readlink(f"/proc/self/ns/{n}") for n in sorted(os.listdir("/proc/self/ns"))}}
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


def _limits(timeout: float, memory_mb: int, cpu_s: int | None, max_procs: int, file_mb: int) -> dict:
    return {"memory_mb": memory_mb, "cpu_s": int(cpu_s or max(1, timeout) + 1), "max_procs": max_procs,
            "file_mb": file_mb}


def _probe_mode() -> str:
    """bwrap if it is installed and runs a trivial program here; else the fallback, with one warning."""
    if shutil.which("bwrap") is None:
        warnings.warn("bubblewrap (bwrap) is not installed: the code sandbox falls back to rlimits, namespaces "
                      "where permitted and a uid drop, which cannot hide the machine's files from the code "
                      "(apt-get install bubblewrap; see rewards/README.md)", stacklevel=4)
        return "fallback"
    spec = {"solution": "X = 1", "units": [[{"eval": "X"}]], "limits": _limits(30, 2048, None, 64, 16)}
    run = _start(spec, mode="bwrap", timeout=30, isolate=True)
    if run.report and run.report[0] == {"units": [[{"ok": 1}]]}:
        return "bwrap"
    warnings.warn(f"bubblewrap is installed but cannot run a sandbox here (returncode {run.returncode}: "
                  f"{run.stderr.strip()[-300:]!r}); the code sandbox falls back to rlimits, namespaces where "
                  f"permitted and a uid drop (see rewards/README.md)", stacklevel=4)
    return "fallback"


def sandbox_mode() -> str:
    """'bwrap' or 'fallback': decided by a probe run the first time it is asked, then fixed for the process."""
    global _mode
    if _mode is None:
        _mode = _probe_mode()
    return _mode


def run_child(spec: dict, *, timeout: float = 10.0, memory_mb: int = 2048, cpu_s: int | None = None,
              max_procs: int = 64, file_mb: int = 16, isolate: bool = True) -> ChildRun:
    """Run the child on `spec` (solution, and units, cases or a harness; see rewards/_sandbox_child.py) in the
    sandbox. isolate=False forces the fallback without namespaces (for tests of that path)."""
    spec = dict(spec, limits=_limits(timeout, memory_mb, cpu_s, max_procs, file_mb))
    mode = sandbox_mode() if isolate else "fallback"
    return _start(spec, mode=mode, timeout=timeout, isolate=isolate)


def sandbox_info(isolate: bool = True) -> dict:
    """What the sandbox gives on this machine: {'mode': 'bwrap' | 'fallback', 'uid' (as the code sees it),
    'pid_namespace', 'net': 'namespace' | 'socket-patch' | ..., 'caps' (effective, hex), 'new_namespaces' (those
    that differ from the trainer's)}. Runs one tiny sandboxed program (about 0.1 s)."""
    run = run_child({"solution": _PROBE, "units": [[{"eval": "INFO"}]]}, timeout=10, isolate=isolate)
    try:
        info = decode(run.report[0]["units"][0][0]["ok"])
    except (IndexError, KeyError, TypeError, ValueError):
        raise RuntimeError(f"sandbox probe failed: {run.stderr[-500:]}") from None
    ours = {n: os.readlink(f"/proc/self/ns/{n}") for n in os.listdir("/proc/self/ns")}
    new = sorted(n for n, link in info.pop("namespaces").items() if ours.get(n) not in (None, link)
                 and not n.endswith("_for_children"))
    return {"mode": sandbox_mode() if isolate else "fallback", **info, "new_namespaces": new}



@dataclass
class SandboxResult:
    passed: bool
    trusted: bool  # False: part of the verdict came from tests run inside the sandbox (plan.harness)
    timed_out: bool
    returncode: int | None
    seconds: float
    stdout: str
    stderr: str
    cases_trusted: int = 0  # test cases judged by this process
    cases_untrusted: int = 0  # test cases judged inside the sandbox
    refused: bool = False  # trusted_only and the tests needed the harness: not run, not passed


def run_python(solution: str, *, tests: str = "", entry_point: str | None = None, setup: str = "",
               cases: list[dict] | None = None, timeout: float = 10.0, memory_mb: int = 2048,
               cpu_s: int | None = None, max_procs: int = 64, file_mb: int = 16, isolate: bool = True,
               trusted_only: bool = False) -> SandboxResult:
    """Run `solution` (Python source) against `tests` (see rewards/testplan.py for the formats) or stdin/stdout
    `cases` ([{"input": str, "output": str}], compared token by token here). passed=True only if every test case
    passed. trusted_only=True refuses tests that would have to be judged inside the sandbox."""
    if cases is None and not tests.strip():
        raise ValueError("run_python needs `tests` or `cases`; got neither")
    limits = dict(timeout=timeout, memory_mb=memory_mb, cpu_s=cpu_s, max_procs=max_procs, file_mb=file_mb,
                  isolate=isolate)
    if cases is not None:
        run = run_child({"solution": solution, "cases": [str(c["input"]) for c in cases]}, **limits)
        outputs = next((r["cases"] for r in reversed(run.report) if isinstance(r, dict) and "cases" in r), None)
        passed = (not run.timed_out and isinstance(outputs, list) and len(outputs) == len(cases)
                  and all(isinstance(o, dict) and o.get("exit") == 0 and isinstance(o.get("stdout"), str)
                          and o["stdout"].split() == str(c["output"]).split() for o, c in zip(outputs, cases)))
        return SandboxResult(passed, True, run.timed_out, run.returncode, run.seconds, run.stdout, run.stderr,
                             cases_trusted=len(cases))
    plan = build_plan(tests, entry_point, setup or "")
    counts = dict(cases_trusted=plan.trusted, cases_untrusted=plan.untrusted)
    if trusted_only and plan.harness is not None:
        return SandboxResult(False, False, False, None, 0.0, "", "", refused=True, **counts)
    spec = {"solution": solution, "setup": setup or "", "units": [u.steps for u in plan.units]}
    if plan.harness is not None:
        spec.update(harness={"source": plan.harness, "entry_point": entry_point}, nonce=os.urandom(16).hex())
    run = run_child(spec, **limits)
    units = next((r["units"] for r in reversed(run.report) if isinstance(r, dict) and "units" in r), None)
    passed = not run.timed_out and units is not None and judge(plan, units)
    if plan.harness is not None:  # the anti-cheat nonce: only where tests still run inside
        passed = passed and f"harness {spec['nonce']}" in run.report
    return SandboxResult(passed, plan.harness is None, run.timed_out, run.returncode, run.seconds, run.stdout,
                         run.stderr, **counts)
