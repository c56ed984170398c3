"""The process that runs untrusted code for rewards/code.py. Started as `python -I _sandbox_child.py`.

A standalone script (no imports from this repo): it runs in a fresh interpreter, inside bubblewrap when the
machine has it (rewards/sandbox.py). The spec arrives as JSON on stdin; the report leaves as JSON lines on the fd it names.
This process only COMPUTES: it never sees an expected output of a trusted test, and the parent judges what it
reports. Whatever the solution does to this process (replacing builtins, walking the stack, writing to the report fd)
can change the report, but a report only passes if its values are the right ones.

Work, in order:
  1. privileges: bwrap as root -> drop to the run's own uid, enter a fresh user namespace that cannot make
     another one, drop every capability; fallback (no bwrap) -> today's unshare(NET|PID) + fork + uid drop.
  2. rlimits (memory, CPU, file size, fds, processes, no core dumps).
  3. `units`: lists of steps ({"run": stmt} or {"eval": expr}, optionally "raises": True) evaluated in a copy of
     the solution's namespace; each eval's value goes back as plain data (exact types only), or the exception.
     `cases`: the solution runs as a script once per stdin; its stdout goes back.
     Report line: {"units": [...], "cases": [...]}.
  4. `harness` (untrusted tests that could not be turned into pairs): run as before, then write "harness NONCE".
"""
import ctypes
import json
import math
import os
import resource
import signal
import sys
import traceback

CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWPID = 0x10000000, 0x40000000, 0x20000000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_KEEPCAPS, PR_CAPBSET_DROP = 1, 4, 8, 24
PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 38, 47
CAP_DAC_READ_SEARCH, CAP_LAST = 2, 63
MAX_DEPTH, MAX_ITEMS = 64, 1_000_000
_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def set_caps(caps: int):
    """Effective = permitted = inheritable = `caps` (a bit mask of capability numbers < 32)."""
    data = (_CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3 uses two 32-bit words
    data[0].effective = data[0].permitted = data[0].inheritable = caps
    if _libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def become(uid: int):
    """Root -> `uid` (group too, no supplementary groups). Dumpable again afterwards, so that this process may
    write its own /proc/self/uid_map (a uid change makes /proc/self root-owned)."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)


def enter_user_namespace(uid: int):
    """A user namespace of our own, mapping only ourselves (to 65534 inside), in which no further user namespace
    can be created (user.max_user_namespaces = 0: bwrap's --disable-userns). Then every capability that creating
    it gave us is dropped, bounding set included."""
    if _libc.unshare(CLONE_NEWUSER) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER) failed")
    for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"65534 {uid} 1"),
                       ("/proc/self/gid_map", f"65534 {uid} 1"), ("/proc/sys/user/max_user_namespaces", "0")):
        with open(path, "w") as f:
            f.write(text)
    for cap in range(CAP_LAST + 1):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    _libc.prctl(PR_CAP_AMBIENT, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    set_caps(0)


def drop_fallback(uid: int, keep_dac: bool):
    """Without bwrap, as root: become the run's uid, keeping CAP_DAC_READ_SEARCH only when the interpreter lives
    where other users cannot read it (e.g. pyenv under /root); the parent decides and says so in sandbox_info()."""
    if not keep_dac:
        become(uid)
        return
    _libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0)
    become(uid)
    set_caps(1 << CAP_DAC_READ_SEARCH)
    _libc.prctl(PR_CAP_AMBIENT, 2, CAP_DAC_READ_SEARCH, 0, 0)  # PR_CAP_AMBIENT_RAISE: a subprocess keeps it


def set_limits(limits):
    mb = 1 << 20
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_mb"] * mb,) * 2)
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_mb"] * mb,) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (limits["max_procs"],) * 2)


def block_sockets():
    """Fallback when no network namespace could be made. Weak: ctypes or a subprocess can get around it."""
    import socket

    def refuse(*args, **kwargs):
        raise PermissionError("network access is disabled in the sandbox")

    class NoNetSocket(socket.socket):
        def __init__(self, family=-1, *args, **kwargs):
            if family in (socket.AF_INET, socket.AF_INET6, -1):
                refuse()
            super().__init__(family, *args, **kwargs)

    socket.socket = NoNetSocket
    socket.create_connection = socket.getaddrinfo = socket.socketpair = refuse


# ---------------------------------------------------------------- results as plain data

_SCALARS = (type(None), bool, int, str)


def encode(value, depth=0, budget=None):
    """`value` as JSON, exact types only (no subclass, so no custom __eq__ survives). Tuples, sets, dicts with
    any keys, bytes, complex and non-finite floats are tagged so the parent rebuilds exactly the same value."""
    budget = budget if budget is not None else [MAX_ITEMS]
    budget[0] -= 1
    if depth > MAX_DEPTH or budget[0] < 0:
        raise ValueError("result too deep or too large")
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if kind is list:
        return [encode(v, depth + 1, budget) for v in value]
    if kind in (tuple, set, frozenset):
        return {kind.__name__: [encode(v, depth + 1, budget) for v in value]}
    if kind is dict:
        return {"dict": [[encode(k, depth + 1, budget), encode(v, depth + 1, budget)] for k, v in value.items()]}
    if kind is bytes:
        return {"bytes": value.hex()}
    if kind is complex:
        return {"complex": [encode(value.real), encode(value.imag)]}
    item = getattr(value, "item", None)  # numpy scalars: an honest solution's np.int64(5) means 5
    if type(value).__module__ == "numpy" and callable(item) and type(item()) in (bool, int, float, complex):
        return encode(item(), depth, budget)
    raise TypeError(f"result of type {kind.__name__} is not plain data")


def run_units(units, namespace):
    """Each unit in a fresh copy of the solution's namespace; a step that raises ends its unit (unless it was
    expected to raise). Results: {"ok": value} | {"ok": null} for run steps | {"exc": name, "msg": str}."""
    out = []
    for steps in units:
        ns, results = dict(namespace), []
        for step in steps:
            try:
                if "eval" in step:
                    results.append({"ok": encode(eval(step["eval"], ns))})
                else:
                    exec(step["run"], ns)
                    results.append({"ok": None})
            except BaseException as e:  # noqa: BLE001 - SystemExit in a call is a failure too
                results.append({"exc": type(e).__name__, "msg": str(e)[:2000],
                                "mro": [c.__name__ for c in type(e).__mro__][:20]})
                if not step.get("raises"):
                    break
        out.append(results)
    return out


def run_cases(inputs):
    """stdin/stdout programs: one forked process per input; its stdout (up to the file-size limit) goes back."""
    out = []
    for i, text in enumerate(inputs):
        with open(f"in{i}.txt", "w") as f:
            f.write(text)
        pid = os.fork()
        if pid == 0:
            try:
                os.close(_report_fd)
                os.dup2(os.open(f"in{i}.txt", os.O_RDONLY), 0)
                os.dup2(os.open(f"out{i}.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
                import runpy
                runpy.run_path("solution.py", run_name="__main__")
                sys.stdout.flush()
                os._exit(0)
            except SystemExit as e:
                sys.stdout.flush()
                os._exit(0 if e.code in (None, 0) else 1)
            except BaseException:
                traceback.print_exc(limit=5)
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        with open(f"out{i}.txt", errors="replace") as f:
            out.append({"exit": os.waitstatus_to_exitcode(status), "stdout": f.read()})
        os.remove(f"out{i}.txt")
    return out


def call_tests(ns):
    """Call every test_* function the harness defined, expanding @pytest.mark.parametrize (KodCode uses it)."""
    for name, fn in list(ns.items()):
        if not (name.startswith("test") and callable(fn) and getattr(fn, "__module__", None) == "__gmts_tests__"):
            continue
        cases = [{}]
        for mark in getattr(fn, "pytestmark", []):
            if getattr(mark, "name", "") == "parametrize":
                names = mark.args[0]
                names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
                values = [v if len(names) > 1 else (v,) for v in mark.args[1]]
                cases = [dict(c, **dict(zip(names, v))) for c in cases for v in values]
        for kwargs in cases:
            fn(**kwargs)


def run_harness(harness, namespace):
    """Untrusted tests, as before this module judged nothing itself: they run with the solution's names in scope."""
    ns = dict(namespace, __name__="__gmts_tests__")
    exec(compile(harness["source"], "tests.py", "exec"), ns)
    entry = harness.get("entry_point")
    if entry and callable(ns.get("check")):
        ns["check"](ns[entry])  # HumanEval style: def check(candidate)
    call_tests(ns)


_report_fd = None  # the parent's anonymous report file, passed as spec["report_fd"]


def report(obj):
    os.write(_report_fd, (json.dumps(obj) + "\n").encode())


def work(spec):
    """Everything after privileges and limits: the solution, the units or cases, then the harness."""
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # setuid binaries cannot give privileges back
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # after setuid, which clears it
    if not spec["net_isolated"]:
        block_sockets()
    os.chdir(spec["workdir"])
    with open("solution.py", "w", encoding="utf-8") as f:
        f.write(spec["solution"])
    if spec.get("cases") is not None:
        report({"cases": run_cases(spec["cases"])})
        return
    sys.path.insert(0, spec["workdir"])
    import importlib
    solution = importlib.import_module("solution")  # `from solution import f` works too
    if spec.get("setup"):
        exec(compile(spec["setup"], "setup.py", "exec"), vars(solution))
    namespace = {k: v for k, v in vars(solution).items() if not k.startswith("__")}
    report({"units": run_units(spec["units"], namespace)})
    if spec.get("harness"):
        run_harness(spec["harness"], namespace)
        report(f"harness {spec['nonce']}")


def child(spec):
    try:
        drop = spec["drop"]
        set_limits(spec["limits"])  # before the uid drop: RLIMIT_NPROC then counts the new uid's processes
        if drop["how"] == "bwrap-root":
            become(drop["uid"])
            enter_user_namespace(drop["uid"])
        elif drop["how"] == "fallback-root":
            drop_fallback(drop["uid"], drop["keep_dac"])
        if os.getuid() == 0 or os.geteuid() == 0:
            raise RuntimeError("could not drop root")
        work(spec)
        sys.stdout.flush()
        os._exit(0)
    except BaseException:  # noqa: BLE001 - SystemExit included: exiting is not passing, the report decides
        try:
            traceback.print_exc(limit=5)
            sys.stderr.flush()
        finally:
            os._exit(1)


def try_unshare():
    """Fallback only: new network + pid namespaces (root directly, others through a user namespace)."""
    for flags in (CLONE_NEWNET | CLONE_NEWPID, CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID):
        if _libc.unshare(flags) == 0:
            return True
    return False


def main():
    global _report_fd
    spec = json.loads(sys.stdin.read())
    os.close(0)
    _report_fd = spec["report_fd"]
    if spec["drop"]["how"].startswith("bwrap"):
        spec["net_isolated"] = True  # bwrap made every namespace; its init is pid 1 and reaps the rest
        child(spec)
    # Fallback: unshare(CLONE_NEWPID) only moves our children into the new namespace, so fork: the inner process is
    # pid 1 there, and when it ends the kernel kills everything it left behind, setsid() escapees included.
    spec["net_isolated"] = try_unshare() if spec.get("isolate", True) else False
    with open(spec["status_path"], "w") as f:  # tells the parent whether it must hunt for leftovers itself
        f.write("namespaces" if spec["net_isolated"] else "none")
    pid = os.fork()
    if pid == 0:
        child(spec)
    os.close(_report_fd)
    _, status = os.waitpid(pid, 0)
    os._exit(min(255, abs(os.waitstatus_to_exitcode(status))))


if __name__ == "__main__":
    main()
