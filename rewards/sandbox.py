"""Start rewards/_sandbox_child.py on untrusted code and bring back its report (data only; the
caller judges).

Two ways to start it, chosen once per process by a probe run (`sandbox_info()` says which):
- bubblewrap (`bwrap`, Debian package `bubblewrap`): new mount, pid, net, ipc, uts and (where the
  kernel allows) cgroup namespaces; a root file system that holds only read-only binds of what the
  interpreter needs; private size-capped tmpfs for the working directory, /tmp and /dev/shm, so
  nothing written survives the run and no run sees another's files; --die-with-parent and
  --new-session. As root, bwrap keeps only CAP_SETUID/SETGID for the child, which becomes the run's
  own uid (so RLIMIT_NPROC holds: the kernel exempts uid 0 from it), enters a user namespace that
  cannot make another one, and drops every capability. As another user, bwrap makes the user
  namespace itself (--unshare-user --disable-userns).
- fallback, with one warning: today's path. unshare(NET|PID) when permitted, the run's own uid as
  root (keeping CAP_DAC_READ_SEARCH only if the interpreter is unreadable to other users), a 0700
  work dir on disk, and afterwards the run's files in /tmp and /dev/shm are deleted and its
  processes killed.
Both: rlimits in the child, a wall clock in the parent that SIGKILLs the session, a minimal
environment. Memory is bounded per RUN, not per process: each run gets its own memory cgroup (v2,
else v1) where this process may make one; without one, as root, the run may not fork (RLIMIT_NPROC =
1), so RLIMIT_AS bounds it whole. `memory_limit()` says which. Each run gets its own uid from
RUN_UIDS (GMTS_SANDBOX_UIDS moves them: run_uids), drawn from os.urandom (never from the caller's
`random`, which data-parallel ranks seed alike) and reserved host-wide for the run's lifetime by
an abstract unix socket named after it, so two runs at once, in one process or in two, cannot
share a uid, and so cannot signal, trace or starve (NPROC) each other, nor kill each other's
processes when cleaning up.
"""
import ast
import contextlib
import decimal
import errno
import json
import math
import os
import re
import secrets
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass

from . import _judge, mocks
from .testplan import (CHECK_TEST, DRAWS, DRAWS_REASON, EVERY_TEST, build_plan,
                       capitalised_calls, decode)

_CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sandbox_child.py")
_RUNNER = os.path.join(os.path.dirname(_CHILD), "_pytest_runner.py")
# one per run, unused by any account; never 0 or 65534 (GMTS_SANDBOX_UIDS moves them: run_uids)
RUN_UIDS = range(0x6D000000, 0x6D000000 + (1 << 24))
TMPFS_MB = 64  # each of /work, /tmp, /dev/shm inside bwrap
SANDBOX_DIRS = ("/tmp", "/dev/shm")


@dataclass
class ChildRun:
    # the JSON lines the child wrote to its report fd, parsed (unless parse=False); untrusted data
    report: list
    raw: str  # the same lines as text (for the judge's helper process)
    timed_out: bool
    returncode: int | None
    seconds: float
    stdout: str  # first 4 KiB of what the code printed, for debugging
    stderr: str
    outputs: object = None  # stdin/stdout cases: what read_outputs returned
    pytest: str = ""  # the pytest runner's result (rewards/_pytest_runner.py) as text; untrusted
    broken: bool = False  # the child broke the mocks' channel (malformed, flooding): a failure


# ---------------------------------------------------------------- bubblewrap


def _interpreter_paths() -> list[str]:
    """What the interpreter needs, outside the system dirs that are bound anyway: its own folder
    (the binary, pyvenv.cfg), the standard library, the installed packages (sysconfig's and site's
    folders) and libpython's folder. Never a folder of the caller's: neither sys.path entries (the
    launching script's folder, PYTHONPATH, the project, editable installs) nor the working
    directory."""
    import site
    import sysconfig
    exe = os.path.realpath(sys.executable)
    paths = {os.path.dirname(exe), os.path.dirname(os.path.abspath(sys.executable))}
    base = {"base": sys.base_prefix, "platbase": sys.base_prefix}
    for scheme_paths in (sysconfig.get_paths(), sysconfig.get_paths(vars=base)):
        paths.update(scheme_paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib"))
    paths.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    # libpython*.so of a shared build (pyenv, conda)
    paths.add(sysconfig.get_config_var("LIBDIR") or "")
    # a venv: how the interpreter finds its site-packages
    files = [os.path.join(sys.prefix, "pyvenv.cfg")]
    paths = sorted({os.path.realpath(p) for p in paths if p and os.path.isdir(p)})
    kept = []
    for p in paths:
        if p.startswith(("/usr/", "/lib")) or p in ("/usr", "/"):
            continue
        if not any(p == k or p.startswith(k + "/") for k in kept):
            kept.append(p)  # nested ones are left out: their parent is bound
    return kept + [f for f in files if os.path.isfile(f)]


def _bwrap_argv(bwrap: str, as_root: bool, workdir: str, uid: int) -> list[str]:
    argv = [bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    # the child drops to `uid` itself and makes its own user namespace (see module docstring)
    if as_root:
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        argv += ["--unshare-user", "--disable-userns", "--uid", "65534", "--gid", "65534"]
    for path in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc/ld.so.cache",
                 "/etc/ld.so.conf",
                 "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime"):
        argv += ["--ro-bind-try", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for path in (workdir, "/tmp", "/dev/shm"):
        # as root, the tmpfs is made before the child becomes the run's uid, which must still write
        # there
        argv += ["--size", str(TMPFS_MB << 20), "--perms", "0777" if as_root else "0700", "--tmpfs",
                 path]
    # The interpreter's folders are bound AFTER the tmpfs mounts: a venv under /tmp (or under a
    # checkout in /work) would otherwise be hidden by them, and bwrap could not even start the
    # interpreter.
    made = {workdir, "/tmp", "/dev", "/dev/shm"}
    for path in _interpreter_paths():
        parts = path.split("/")
        # bwrap makes missing parents 0700: the run's uid could not pass them
        for i in range(2, len(parts)):
            parent = "/".join(parts[:i])
            if parent not in made:
                made.add(parent)
                argv += ["--perms", "0755", "--dir", parent]
        argv += ["--ro-bind", path, path]
    argv += ["--perms", "0755", "--dir", "/gmts", "--ro-bind", _CHILD, "/gmts/child.py",
             "--ro-bind", _RUNNER, "/gmts/pytest_runner.py"]
    argv += ["--chdir", workdir, "--clearenv"]
    for key, value in _clean_env(workdir, tmp="/tmp").items():
        argv += ["--setenv", key, value]
    return argv + ["--", sys.executable, "-I", "/gmts/child.py"]


def _clean_env(workdir: str, tmp: str) -> dict:
    # Only what an interpreter needs. Thread-count variables keep numpy & co. from counting against
    # max_procs.
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": tmp,
            "LANG": "C.UTF-8",
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
    """SIGKILL every process of the run's uid (unique to this run) until none is left (at most ~2
    s)."""
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
    """SIGKILL the child's session (start_new_session made its pid the group id); bwrap's
    --die-with-parent and the pid namespace take the rest with it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


# ---------------------------------------------------------------- a run's uid and its memory


def run_uids() -> range:
    """The uids a run takes its own from: GMTS_SANDBOX_UIDS=FIRST-LAST (environment, inclusive),
    else RUN_UIDS. For a machine whose accounts use RUN_UIDS, or to keep sets of runs apart (the
    test suite gives each pytest worker its own: tests/conftest.py). ValueError, in one line, for a
    value that is not such a range."""
    raw = os.environ.get("GMTS_SANDBOX_UIDS", "").strip()
    if not raw:
        return RUN_UIDS
    first, _, last = raw.partition("-")
    try:
        uids = range(int(first), int(last) + 1)
    except ValueError:
        uids = range(0)
    # above the system's and users' usual uids (65534 is nobody); 2**32 - 1 is no uid
    if not (uids.start >= 65536 and uids.stop <= 2**32 - 1 and len(uids) >= 1024):
        raise ValueError("GMTS_SANDBOX_UIDS must be FIRST-LAST, a range of at least 1024 uids "
                         f"from 65536 to 4294967294, got {raw!r}")
    return uids


def _reserve_uid() -> tuple[int, socket.socket]:
    """A uid from run_uids() that no other run on this machine holds, and the socket that holds it:
    an abstract unix socket (no file, released by the kernel when closed or when this process dies)
    is bound to the uid's name; a second bind of the same name, from any process, fails with
    EADDRINUSE."""
    uids = run_uids()
    while True:
        # os.urandom: the caller's `random` is not touched
        uid = uids[secrets.randbelow(len(uids))]
        holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            holder.bind(f"\0gmts-run-uid-{uid}")
            return uid, holder
        except OSError as e:
            holder.close()
            if e.errno != errno.EADDRINUSE:
                raise


def _cgroup_candidates(controller: str = "memory") -> list[tuple[str, str]]:
    """(version, directory) of this process's own cgroup in each hierarchy that has `controller`
    (memory, cpu): cgroup2 first, then the v1 hierarchy of that controller (hybrid hosts such as
    this one bind them to v1)."""
    mounts = {}
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                tail = fields[fields.index("-") + 1:]
                if tail[0] == "cgroup2":
                    mounts.setdefault("cgroup2", (fields[4], fields[3]))
                elif tail[0] == "cgroup" and controller in tail[2].split(","):
                    mounts.setdefault("cgroup1", (fields[4], fields[3]))
        with open("/proc/self/cgroup") as f:
            membership = [line.rstrip("\n").split(":", 2) for line in f]
    except (OSError, ValueError, IndexError):
        return []
    found = []
    for version in ("cgroup2", "cgroup1"):
        if version not in mounts:
            continue
        mount, root = mounts[version]
        for _, controllers, path in membership:
            if (version == "cgroup2" and controllers == "") or (version == "cgroup1"
                                                                and controller in
                                                                controllers.split(",")):
                if root != "/" and path.startswith(root):
                    path = path[len(root):]
                found.append((version, os.path.join(mount, path.lstrip("/"))))
                break
    return found


def _write(path: str, text: str):
    with open(path, "w") as f:
        f.write(text)


def _make_cgroup(version: str, base: str, name: str, memory_mb: int) -> str:
    """A child cgroup of `base` whose memory (with swap, and tmpfs pages written in it) is capped
    for all its processes together."""
    path = os.path.join(base, name)
    os.mkdir(path)
    try:
        limit = str(memory_mb << 20)
        if version == "cgroup2":
            _write(os.path.join(path, "memory.max"), limit)
            if os.path.exists(os.path.join(path, "memory.swap.max")):
                _write(os.path.join(path, "memory.swap.max"), "0")
        else:
            _write(os.path.join(path, "memory.limit_in_bytes"), limit)
            # memory + swap: no swap
            if os.path.exists(os.path.join(path, "memory.memsw.limit_in_bytes")):
                _write(os.path.join(path, "memory.memsw.limit_in_bytes"), limit)
    except OSError:
        os.rmdir(path)
        raise
    return path


CPU_QUOTA = 1.0  # CPUs a run may use at once, all its processes together


def _make_cpu_cgroup(version: str, base: str, name: str) -> str:
    """A child cgroup of `base` whose processes together get at most CPU_QUOTA CPUs (CFS bandwidth):
    a run that forks spinners (setsid or not) shares one CPU among them, so a concurrent run keeps
    its own; with the wall clock, a run's CPU time is at most CPU_QUOTA x its time limit."""
    path = os.path.join(base, name)
    os.mkdir(path)
    period = 100_000
    try:
        if version == "cgroup2":
            _write(os.path.join(path, "cpu.max"), f"{int(CPU_QUOTA * period)} {period}")
        else:
            _write(os.path.join(path, "cpu.cfs_period_us"), str(period))
            _write(os.path.join(path, "cpu.cfs_quota_us"), str(int(CPU_QUOTA * period)))
    except OSError:
        os.rmdir(path)
        raise
    return path


def _remove_cgroup(path: str):
    """Kill whatever is still in the run's cgroup and remove it (at most ~2 s: a dying process takes
    a moment)."""
    for _ in range(200):
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            return
        if not pids:
            try:
                os.rmdir(path)
                return
            except OSError:
                pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)


_cgroup = None  # (version, base directory) once probed; ("", "") when no cgroup can be made here
_cpu_cgroup = None  # the same for the cpu controller


def _probe(controller: str, make) -> tuple[str, str]:
    """The first hierarchy where this process can make a child cgroup capped by `controller`
    (memory, cpu; make(version, base, name) makes one). cgroup2 needs the controller enabled for
    its children (a delegated cgroup); this process is never moved."""
    for version, base in _cgroup_candidates(controller):
        if version == "cgroup2":
            try:
                with open(os.path.join(base, "cgroup.subtree_control")) as f:
                    if controller not in f.read().split():
                        continue
            except OSError:
                continue
        try:
            _remove_cgroup(make(version, base, f"gmts-probe-{os.getpid()}-{secrets.token_hex(4)}"))
            return version, base
        except OSError:
            continue
    return "", ""


def _probe_cgroup() -> tuple[str, str]:
    return _probe("memory", lambda version, base, name: _make_cgroup(version, base, name, 64))


def _probe_cpu_cgroup() -> tuple[str, str]:
    return _probe("cpu", _make_cpu_cgroup)


def cpu_limit() -> str:
    """Which CPU limit holds for a run: 'cgroup2' or 'cgroup1' (CPU_QUOTA CPUs for the run's
    processes together), or 'rlimit-cpu per process' (no cgroup: RLIMIT_CPU on each process, the
    weak case)."""
    global _cpu_cgroup
    if _cpu_cgroup is None:
        _cpu_cgroup = _probe_cpu_cgroup()
    return _cpu_cgroup[0] or "rlimit-cpu per process"


def memory_limit() -> str:
    """Which memory limit holds for a run: 'cgroup2' or 'cgroup1' (the run's processes together),
    'rlimit-as, no forks' (root without a cgroup: RLIMIT_AS on the run's only process), or
    'rlimit-as per process' (neither: up to RLIMIT_AS x RLIMIT_NPROC, the weak case, which
    warns)."""
    global _cgroup
    if _cgroup is None:
        _cgroup = _probe_cgroup()
        if not _cgroup[0] and os.getuid() != 0:
            warnings.warn("the code sandbox cannot make a memory cgroup and does not run as root: "
                          "its memory "
                          "limit holds per process, not per run (see rewards/README.md)",
                          stacklevel=3)
    if _cgroup[0]:
        return _cgroup[0]
    return "rlimit-as, no forks" if os.getuid() == 0 else "rlimit-as per process"


def belongs_to_us(pid) -> bool:
    """Is this process (of some run's uid) one of THIS process's runs? With a run cgroup in force,
    exactly those in a cgroup named after our pid (a run cannot leave its cgroup); without one, any
    run uid could be ours. For leak checks on a machine where other trainers run sandboxes too."""
    if not (_cgroup and _cgroup[0]):
        return True
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            return f"/gmts-run-{os.getpid()}-" in f.read()
    except OSError:
        return False


# ---------------------------------------------------------------- one run


_mode = None  # "bwrap" | "fallback", decided by the first run's probe


# per stdin/stdout case beyond its own limit: forking it, removing its input, killing leftovers
CASE_SLACK_S = 0.25
START_S = 3.0  # a run's start (bwrap, the interpreter) beyond the cases' limits
# of one case's stdout kept at least (twice the expected output if that is more); the child
OUTPUT_BYTES = 8 << 20
# reads and drops the rest, so a program's writes never fail
# the child's units (or cases) line; the pytest runner writes a line per report to its own file
# (bounded by REPORT_BYTES only)
REPORT_LINES = 1
# What the trainer reads back at most. Parsing and rebuilding cost ~1-3 s per MiB for the worst
# shapes (millions of one-item lists) on this 2-core machine under load, so 2 MiB bounds a forged
# report to a few seconds; an honest result that large (a 300,000-int list) fails, like one that
# runs past the time limit.
REPORT_BYTES = 2 << 20


def _raw_report(f, max_bytes: int, lines: int | None = REPORT_LINES) -> str:
    """The child's JSON lines as text, at bounded cost whatever the solution wrote to the report
    file: more than `max_bytes` (REPORT_BYTES) or more lines than the child writes is a forged
    report (or too big a result), refused (""). Parsing is left to the judge (rewards/_judge.py),
    under its deadline."""
    if os.fstat(f.fileno()).st_size > max_bytes:
        return ""
    f.seek(0)
    data = f.read(max_bytes + 1)
    if len(data) > max_bytes or lines is not None and data.count(b"\n") > lines:
        return ""
    return data.decode("utf-8", errors="replace")


def parse_report(text: str) -> list:
    """The report's lines, parsed by the C JSON decoder (linear; a nesting too deep for it fails:
    [])."""
    try:
        return [json.loads(line) for line in text.split("\n") if line]
    except (ValueError, RecursionError):
        return []


class _Channel:
    """The live channel between the running child and the trainer's mocks (rewards/mocks.py): the
    child writes one JSON request a line and blocks for the reply line; answer(request) makes the
    reply here. Bounded: a line over MAX_LINE, more than MAX_BYTES or MAX_REQUESTS in all, or a
    request that is not JSON or that answer refuses breaks it (the run fails); the run's deadline
    holds while serving, and a child that stops reading its replies meets it too."""

    # the trainer performs each request (~30 us for a call of a mock) and the judge replays them:
    # a flood costs both at most this much
    MAX_LINE, MAX_BYTES, MAX_REQUESTS = 1 << 20, 16 << 20, 20_000

    def __init__(self, answer):
        self.answer = answer
        self.requests, self.child_w = os.pipe()
        self.child_r, self.replies = os.pipe()
        os.set_blocking(self.replies, False)

    def child_ends(self) -> list:
        return [self.child_w, self.child_r]

    def close(self, ends):
        for fd in ends:
            with contextlib.suppress(OSError):
                os.close(fd)

    def serve(self, deadline: float) -> str:
        """Answer requests until the child's "end" (or the end of everything of it): "ok",
        "timeout" or "broken"."""
        buf, total, count = bytearray(), 0, 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.requests], [], [], left)[0]:
                return "timeout"
            chunk = os.read(self.requests, 1 << 16)
            if not chunk:
                return "ok"
            total += len(chunk)
            buf += chunk
            if total > self.MAX_BYTES:
                return "broken"
            while (end := buf.find(b"\n")) >= 0:
                line = bytes(buf[:end])
                del buf[:end + 1]
                count += 1
                try:
                    request = json.loads(line)
                    if request == ["end"]:
                        return "ok"
                    if count > self.MAX_REQUESTS:  # never performed: the run fails
                        return "broken"
                    reply = (json.dumps(self.answer(request)) + "\n").encode()
                except Exception:  # noqa: BLE001 - malformed, too deep: the run fails
                    return "broken"
                if not self.write(reply, deadline):
                    return "timeout"
            if len(buf) > self.MAX_LINE:
                return "broken"

    def write(self, data: bytes, deadline: float) -> bool:
        while data:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [self.replies], [], left)[1]:
                return False
            try:
                data = data[os.write(self.replies, data):]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                return True  # the child is gone: its end shows at the next read
        return True


def _start(spec: dict, *, mode: str, timeout: float, isolate: bool, parse: bool = True,
           outputs: int = 0, read_outputs=None, answer=None) -> ChildRun:
    """One run of the child on `spec`. `outputs` > 0: that many files for the stdin/stdout cases'
    outputs, their fds passed as spec["out_fds"]; read_outputs(files) is called on them (still open)
    after the run. answer: the trainer's mocks answering the child's requests while it runs
    (_Channel), or None."""
    as_root = os.getuid() == 0
    uid, holder = _reserve_uid()
    # the trainer's pid in the name: whose run a leftover folder was is visible (and tests of
    # concurrent runs can tell)
    base = None if mode == "bwrap" else tempfile.mkdtemp(prefix=f"gmts-sandbox-{os.getpid()}-")
    cgroups = []
    start = time.monotonic()
    try:
        version, cgroup_base = _cgroup if _cgroup and _cgroup[0] else ("", "")
        # a stale one (a trainer killed mid-run) says whose it was
        name = f"gmts-run-{os.getpid()}-{uid}"
        if version:
            cgroups.append(_make_cgroup(version, cgroup_base, name, spec["limits"]["memory_mb"]))
        cpu_limit()
        if _cpu_cgroup[0] and (_cpu_cgroup[0], _cpu_cgroup[1]) != (version, cgroup_base):
            cgroups.append(_make_cpu_cgroup(*_cpu_cgroup, name))
        elif _cpu_cgroup[0]:  # one cgroup2 directory holds both limits
            _write(os.path.join(cgroups[0], "cpu.max"), f"{int(CPU_QUOTA * 100_000)} 100000")
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
        # the run joins its cgroups before anything of it starts: a shell moves itself, then execs
        if cgroups:
            joins = " && ".join(f'echo $$ > "${i}"' for i in range(len(cgroups)))
            argv = ["/bin/sh", "-c", f'{joins} && shift {len(cgroups) - 1} && exec "$@"',
                    *(os.path.join(c, "cgroup.procs") for c in cgroups), *argv]
        with contextlib.ExitStack() as files:
            out, err, rep = (files.enter_context(tempfile.TemporaryFile()) for _ in range(3))
            case_files = [files.enter_context(tempfile.TemporaryFile()) for _ in range(outputs)]
            spec["report_fd"] = rep.fileno()
            results = files.enter_context(tempfile.TemporaryFile()) if spec.get("harness") else None
            if results is not None:
                runner = "/gmts/pytest_runner.py" if mode == "bwrap" else _RUNNER
                spec["harness"] = dict(spec["harness"], fd=results.fileno(), runner=runner,
                                       file=os.path.join(workdir, "gmts_tests.py"))
            spec["out_fds"] = [f.fileno() for f in case_files]
            channel = _Channel(answer) if answer is not None else None
            files.callback(lambda: channel and channel.close([channel.requests,
                                                               channel.replies]))
            if channel is not None:
                spec["mock_fds"] = channel.child_ends()
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err,
                                        cwd=cwd, env=env, start_new_session=True, pass_fds=(
                                            rep.fileno(), *spec["out_fds"],
                                            *([results.fileno()] if results else []),
                                            *spec.get("mock_fds", ())))
            finally:
                if channel is not None:
                    channel.close(channel.child_ends())
            timed_out, broken = False, False
            deadline = time.monotonic() + timeout
            try:
                proc.stdin.write(json.dumps(spec).encode())
                proc.stdin.close()
                if channel is not None:
                    served = channel.serve(deadline)
                    timed_out, broken = served == "timeout", served == "broken"
                if not timed_out and not broken:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
            except BrokenPipeError:
                pass
            finally:
                _kill_group(proc)
                for cgroup in cgroups:
                    _remove_cgroup(cgroup)
                # the pid namespace dies asynchronously: return only once nothing of the run is left
                if as_root:
                    _kill_uid(uid)
            out.seek(0)
            err.seek(0)
            raw = "" if timed_out else _raw_report(rep, REPORT_BYTES)
            verdicts = read_outputs(case_files) if read_outputs and not timed_out else None
            result = ("" if timed_out or results is None
                      else _raw_report(results, REPORT_BYTES, None))
            return ChildRun(report=parse_report(raw) if parse else [], raw=raw, timed_out=timed_out,
                            outputs=verdicts, pytest=result, broken=broken,
                            returncode=proc.returncode, seconds=time.monotonic() - start,
                            stdout=out.read(4096).decode(errors="replace"),
                            stderr=err.read(4096).decode(errors="replace"))
    finally:
        for cgroup in cgroups:
            _remove_cgroup(cgroup)  # again: a failure before the wait
        if base is not None:
            shutil.rmtree(base, ignore_errors=True)
            if as_root:
                _remove_owned_by(uid)
        holder.close()  # only now may another run take this uid


_PROBE = r'''
import os, socket
INFO = {"uid": os.getuid(), "pid_namespace": os.getpid() <= 2,
        "caps": open("/proc/self/status").read().split("CapEff:")[1].split()[0],
        "namespaces": {n: os.readlink(f"/proc/self/ns/{n}")
                       for n in sorted(os.listdir("/proc/self/ns"))}}
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(("1.1.1.1", 53))
    INFO["net"] = "open"
except PermissionError as e:
    INFO["net"] = "socket-patch" if "sandbox" in str(e) else "blocked"
except OSError as e:
    # ENETUNREACH: no interface at all
    INFO["net"] = "namespace" if e.errno == 101 else f"blocked ({e})"
'''


def _limits(timeout: float, memory_mb: int, cpu_s: int | None, max_procs: int,
            file_mb: int) -> dict:
    if memory_limit() == "rlimit-as, no forks":
        # no cgroup: RLIMIT_AS bounds a run only if it is one process (threads count too)
        max_procs = 1
    return {"memory_mb": memory_mb, "cpu_s": int(cpu_s or max(1, timeout) + 1),
            "max_procs": max_procs,
            "file_mb": file_mb}


def _probe_mode() -> str:
    """bwrap if it is installed and runs a trivial program here; else the fallback, with one
    warning."""
    if shutil.which("bwrap") is None:
        warnings.warn("bubblewrap (bwrap) is not installed: the code sandbox falls back to "
                      "rlimits, namespaces "
                      "where permitted and a uid drop, which cannot hide the machine's files from "
                      "the code "
                      "(apt-get install bubblewrap; see rewards/README.md)", stacklevel=4)
        return "fallback"
    spec = {"solution": "X = 1", "units": [[{"eval": "X"}]],
            "limits": _limits(30, 2048, None, 64, 16)}
    run = _start(spec, mode="bwrap", timeout=30, isolate=True)
    if run.report and run.report[0] == {"units": [[{"ok": 1, "applied": 0}]]}:
        return "bwrap"
    warnings.warn(f"bubblewrap is installed but cannot run a sandbox here (returncode "
                  f"{run.returncode}: {run.stderr.strip()[-300:]!r}); the code sandbox falls back "
                  f"to rlimits, namespaces where permitted and a uid drop (see rewards/README.md)",
                  stacklevel=4)
    return "fallback"


def sandbox_mode() -> str:
    """'bwrap' or 'fallback': decided by a probe run the first time it is asked, then fixed for the
    process."""
    global _mode
    if _mode is None:
        _mode = _probe_mode()
    return _mode


def run_child(spec: dict, *, timeout: float = 10.0, memory_mb: int = 2048, cpu_s: int | None = None,
              max_procs: int = 64, file_mb: int = 16, isolate: bool = True, parse: bool = True,
              read_outputs=None, answer=None) -> ChildRun:
    """Run the child on `spec` (solution, and units, cases or a harness; see
    rewards/_sandbox_child.py) in the sandbox. isolate=False forces the fallback without namespaces
    (for tests of that path)."""
    spec = dict(spec, limits=dict(_limits(timeout, memory_mb, cpu_s, max_procs, file_mb),
                                  cases=spec.get("cases") is not None,
                                  out_caps=spec.get("out_caps", [])))
    mode = sandbox_mode() if isolate else "fallback"
    cases = len(spec["cases"]) if spec.get("cases") is not None else 0
    # each case has `timeout` of its own (the child kills it there); the run, all of them and a
    # start
    if cases:
        spec["case_s"] = timeout
        timeout = cases * (timeout + CASE_SLACK_S) + START_S
    return _start(spec, mode=mode, timeout=timeout, isolate=isolate, parse=parse, outputs=cases,
                  read_outputs=read_outputs, answer=answer)


def sandbox_info(isolate: bool = True) -> dict:
    """What the sandbox gives on this machine: {'mode': 'bwrap' | 'fallback', 'uid' (as the code
    sees it), 'pid_namespace', 'net': 'namespace' | 'socket-patch' | ..., 'caps' (effective, hex),
    'new_namespaces' (those that differ from the trainer's)}. Runs one tiny sandboxed program (about
    0.1 s)."""
    run = run_child({"solution": _PROBE, "units": [[{"eval": "INFO"}]]}, timeout=10,
                    isolate=isolate)
    try:
        info = decode(run.report[0]["units"][0][0]["ok"])
    except (IndexError, KeyError, TypeError, ValueError):
        raise RuntimeError(f"sandbox probe failed: {run.stderr[-500:]}") from None
    ours = {n: os.readlink(f"/proc/self/ns/{n}") for n in os.listdir("/proc/self/ns")}
    new = sorted(n for n, link in info.pop("namespaces").items() if ours.get(n) not in (None, link)
                 and not n.endswith("_for_children"))
    return {"mode": sandbox_mode() if isolate else "fallback", **info, "new_namespaces": new,
            "memory_limit": memory_limit(), "cpu_limit": cpu_limit()}



_DECIMAL = re.compile(rb"[-+]?(?:\d+\.\d*|\.\d+|\d+(?=[eE]))(?:[eE][-+]?\d+)?")


def _tokens_equal(got: bytes, want: bytes, tolerance: float | None, fold: bool = False) -> bool:
    """One output token against the expected one: equal bytes; with `fold`, equal ignoring case
    ("Yes" for "YES" where the statement accepts any case); two decimals written differently
    ("0.50" for "0.5", "1e-07" for "0.0000001") are equal when their values are exactly equal;
    with a tolerance, numbers may differ by it (absolute, or relative to the expected value)."""
    if got == want or (fold and got.lower() == want.lower()):
        return True
    if len(got) > 400 or len(want) > 400:  # no number is that long; Decimal would be slow
        return False
    if tolerance is None:
        # decimals only (a point or an exponent in both: "1e-07" for "0.0000001"); integers and
        # words as written
        if not (_DECIMAL.fullmatch(got) and _DECIMAL.fullmatch(want)):
            return False
        try:
            return decimal.Decimal(got.decode()) == decimal.Decimal(want.decode())
        except (decimal.InvalidOperation, UnicodeDecodeError):
            return False
    try:
        a, b = float(got), float(want)
    except ValueError:
        return False
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= tolerance * max(1.0, abs(b))


def _output_cap(expected: str) -> int:
    return max(OUTPUT_BYTES, 2 * len(expected.encode("utf-8", errors="replace")) + 4096)


def _same_output(f, expected: str, cap: int, tolerance: float | None, fold: bool = False) -> bool:
    """A case's stdout (the file the child wrote, at most `cap` bytes) against the expected output,
    token by token; with a tolerance, numbers may differ by it (absolute, or relative to the
    expected value)."""
    if os.fstat(f.fileno()).st_size > cap:
        return False
    f.seek(0)
    got, want = f.read(cap + 1).split(), expected.encode("utf-8", errors="replace").split()
    return len(got) == len(want) and all(_tokens_equal(g, w, tolerance, fold)
                                         for g, w in zip(got, want))


@dataclass
class SandboxResult:
    passed: bool
    # False: part of the verdict came from tests run inside the sandbox (plan.harness)
    trusted: bool
    timed_out: bool
    returncode: int | None
    seconds: float
    stdout: str
    stderr: str
    cases_trusted: int = 0  # test cases judged by this process
    cases_untrusted: int = 0  # test cases judged inside the sandbox
    refused: bool = False  # trusted_only and the tests needed the harness: not run, not passed
    # the tests hold a part that can be neither judged nor run (or no test): not run, 0
    unjudged: bool = False


# names pytest reads from a test module by themselves: never taken from the solution
_PYTEST_MODULE_NAMES = frozenset(("pytestmark", "setup_module", "teardown_module", "setup_function",
                                  "teardown_function", "setUpModule", "tearDownModule"))


def free_names(tree: ast.AST) -> set:
    """Names the tests read but never bind (anywhere in the file): what their runner gives them
    from the solution (MBPP and HumanEval run the solution and the tests as one program)."""
    bound, used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias) and node.name != "*":
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return {n for n in used - bound
            if n not in _PYTEST_MODULE_NAMES and not n.startswith(("pytest_", "@"))}


def _star_import(node) -> bool:
    return (isinstance(node, ast.ImportFrom) and node.module == "solution"
            and any(a.name == "*" for a in node.names))


def pytest_source(plan, setup: str) -> str:
    """The test file pytest runs: the solution is a module of its own (`solution`), and the test
    module holds only the names of it that the tests (and the problem's setup) read without binding
    them, as `from solution import f` gives them: never its `pytestmark`, a fixture of its own
    (`capsys`), `setup_module` or any other name pytest reads from a test module. Then the setup
    (MBPP's test_setup_code, run where the tests' names live), then the tests the trainer could not
    judge; a HumanEval `check` the trainer could not judge becomes a test function calling it on
    its candidate. `from solution import *` imports those names only."""
    tree = ast.parse(plan.harness)
    tree.body = [s for s in tree.body if not _star_import(s)]
    names = free_names(ast.Module(body=tree.body + ast.parse(setup).body, type_ignores=[]))
    if "check" in plan.harness_tests and plan.check_candidate:
        names.add(plan.check_candidate)
    lines = ["import solution as __gmts_solution", "__gmts_name = __gmts_value = None",
             f"for __gmts_name in {sorted(names)!r}:",
             "    __gmts_value = vars(__gmts_solution).get(__gmts_name, __gmts_solution)",
             "    if __gmts_value is not __gmts_solution and not hasattr(",
             "            type(__gmts_value), '_get_wrapped_function') and not hasattr(",
             "            __gmts_value, '_pytestfixturefunction'):  # not a fixture",
             "        globals()[__gmts_name] = __gmts_value",
             "del __gmts_solution, __gmts_name, __gmts_value"]
    if setup.strip():
        lines.append(setup)
    lines.append(ast.unparse(tree))
    if "check" in plan.harness_tests:
        lines.append(f"\n\ndef {CHECK_TEST}():\n    check({plan.check_candidate})")
    return "\n".join(lines) + "\n"


def run_python(solution: str, *, tests: str = "", entry_point: str | None = None, setup: str = "",
               cases: list[dict] | None = None, timeout: float = 10.0, memory_mb: int = 2048,
               cpu_s: int | None = None, max_procs: int = 64, file_mb: int = 16,
               isolate: bool = True,
               trusted_only: bool = False, float_tolerance: float | None = None,
               case_insensitive: bool = False) -> SandboxResult:
    """Run `solution` (Python source) against `tests` (see rewards/testplan.py for the formats) or
    stdin/stdout `cases` ([{"input": str, "output": str}], compared token by token here, each case
    with `timeout` of its own; float_tolerance: tokens that are both numbers may differ by that
    much, absolute or relative; case_insensitive: tokens may differ in case). passed=True only if
    every test case passed. trusted_only=True refuses tests that would have to be judged inside the
    sandbox."""
    if cases is None and not tests.strip():
        raise ValueError("run_python needs `tests` or `cases`; got neither")
    limits = {"timeout": timeout, "memory_mb": memory_mb, "cpu_s": cpu_s, "max_procs": max_procs,
              "file_mb": file_mb, "isolate": isolate}
    if cases is not None and not cases:  # zero test cases judged is never a pass
        return SandboxResult(False, False, False, None, 0.0, "", "", unjudged=True)
    if cases is not None:
        caps = [_output_cap(str(c["output"])) for c in cases]
        verdicts = run_child({"solution": solution, "cases": [str(c["input"]) for c in cases],
                              "out_caps": caps},
                             **limits, read_outputs=lambda files: [
                                 _same_output(f, str(c["output"]), cap, float_tolerance,
                                              case_insensitive)
                                 for f, c, cap in zip(files, cases, caps)])
        report = next((r["cases"] for r in reversed(verdicts.report) if isinstance(r, dict)
                       and "cases" in r), None)
        passed = (not verdicts.timed_out and isinstance(report, list) and len(report) == len(cases)
                  and all(isinstance(o, dict) and o.get("exit") == 0 and o.get("timed_out") is False
                          for o in report) and all(verdicts.outputs or [False]))
        return SandboxResult(passed, True, verdicts.timed_out, verdicts.returncode,
                             verdicts.seconds,
                             verdicts.stdout, verdicts.stderr, cases_trusted=len(cases))
    plan = build_plan(tests, entry_point, setup or "")
    counts = {"cases_trusted": plan.trusted, "cases_untrusted": plan.untrusted}
    if plan.unjudged:  # zero test cases judged is never a pass
        return SandboxResult(False, False, False, None, 0.0, "", "", unjudged=True, **counts)
    if trusted_only and plan.harness is not None:
        # one line saying why: the first part of the tests the trainer could not judge
        return SandboxResult(False, False, False, None, 0.0, "",
                             f"refused (trusted_only): {plan.refusal}", refused=True, **counts)
    spec = {"solution": solution, "setup": setup or "", "units": [u.steps for u in plan.units]}
    paths = sorted({p for u in plan.units for c in u.checks for p, origin in c.exceptions
                    if origin == "module"})
    if paths:  # the tests' exception classes of their modules, resolved before the solution runs
        spec["exc_paths"] = paths
    # `Split(...)`: a class (its objects' methods and operators run in the child) or a function
    # (its result judged here)? The run decides by what the names are once the solution ran.
    functions = capitalised_calls(tests)
    if functions:
        as_functions = build_plan(tests, entry_point, setup or "", functions)
        steps = [u.steps for u in as_functions.units]
        if as_functions.harness == plan.harness and steps != spec["units"]:
            spec["alt"] = {"names": sorted(functions), "units": steps}
    # the standard library's classes the steps name (testplan.stdlib_class), resolved likewise
    named = json.dumps([spec["units"], spec.get("alt", {}).get("units")])
    classes = sorted(set(re.findall(r"__gmts_classes\['([\w.:]+)'\]", named)))
    if classes:
        spec["class_paths"] = classes
    token = os.urandom(16).hex()
    if plan.harness is not None:
        spec["harness"] = {"source": pytest_source(plan, setup or ""), "token": token}
    # the tests' mocks: this process's, answering the child while it runs (rewards/mocks.py)
    session = mocks.Session(plan.mocks, mocks.unit_handles(spec["units"])) if plan.mocks else None
    run = run_child(spec, **limits, parse=False, answer=session and session.answer)
    passed = not run.timed_out and not run.broken and bool(run.raw) and _judge.verdict(
        {"tests": tests, "entry_point": entry_point, "setup": setup or "", "token": token,
         "report": run.raw, "pytest": run.pytest, "functions": sorted(functions),
         "mocks": session.log if session else None},
        _judge.JUDGE_TIMEOUT_S + 2 * plan.build_seconds)
    if passed == DRAWS:  # the tests drew after the answer moved their seeded state: pytest's
        if trusted_only:
            return SandboxResult(False, False, False, run.returncode, run.seconds, run.stdout,
                                 f"refused (trusted_only): {DRAWS_REASON}", refused=True,
                                 **counts)
        plan = build_plan(tests, entry_point, setup or "", to_harness=EVERY_TEST)
        if plan.harness is None:  # nothing pytest could run: not a pass
            return SandboxResult(False, False, False, run.returncode, run.seconds, run.stdout,
                                 run.stderr, **counts)
        token = os.urandom(16).hex()  # a run of its own: a token of its own
        spec = {"solution": solution, "setup": setup or "", "units": [u.steps for u in plan.units],
                "harness": {"source": pytest_source(plan, setup or ""), "token": token}}
        run = run_child(spec, **limits, parse=False)
        passed = not run.timed_out and not run.broken and bool(run.raw) and _judge.verdict(
            {"tests": tests, "entry_point": entry_point, "setup": setup or "", "token": token,
             "report": run.raw, "pytest": run.pytest, "every": True},
            _judge.JUDGE_TIMEOUT_S + 2 * plan.build_seconds)
        counts = {"cases_trusted": 0, "cases_untrusted": plan.untrusted}
    return SandboxResult(passed is True, plan.harness is None, run.timed_out, run.returncode,
                         run.seconds, run.stdout, run.stderr, **counts)
