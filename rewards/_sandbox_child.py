"""The process that runs untrusted code for rewards/code.py. Started as `python -I _sandbox_child.py`.

It is a standalone script (no imports from this repo) because it runs in a fresh interpreter with a clean
environment. The spec arrives as JSON on stdin. Layout of one run:

    trainer --Popen(new session)--> outer (this script, trainer's uid)
        unshare(NEWNET | NEWPID) when permitted, then fork -->
            inner (pid 1 of a new pid namespace): rlimits, drop to uid nobody (when root), run solution + tests

Why two processes: unshare(CLONE_NEWPID) only moves the caller's *children* into the new namespace. Making the
inner process pid 1 means that when it exits or is killed, the kernel kills every process it left behind,
including ones that called setsid() to leave our process group. The outer process never runs user code, so its
exit status can be trusted: 0 only if the inner one exited 0 AND wrote the per-run nonce after the tests, so a
solution that calls os._exit(0) or sys.exit(0) before the tests run does not pass.
"""
import ctypes
import json
import os
import resource
import signal
import sys
import traceback

CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWPID = 0x10000000, 0x40000000, 0x20000000
PR_SET_PDEATHSIG, PR_SET_KEEPCAPS, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 8, 38, 47
CAP_DAC_READ_SEARCH = 2  # read/traverse any file, write nothing: lets uid nobody import an interpreter under /root
NOBODY = 65534
_libc = ctypes.CDLL(None, use_errno=True)


def try_unshare():
    """New network + pid namespaces. Root can do it directly; others via a user namespace if the kernel allows."""
    for flags in (CLONE_NEWNET | CLONE_NEWPID, CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID):
        if _libc.unshare(flags) == 0:
            return True
    return False


def drop_privileges():
    """Root -> uid/gid nobody, keeping only CAP_DAC_READ_SEARCH (also as an ambient cap, so a subprocess of the
    solution can still exec the interpreter). As nobody the code cannot write, delete or signal anything of the
    trainer's, cannot read /proc/<trainer>/environ, and RLIMIT_NPROC applies (the kernel exempts root from it)."""
    if os.getuid() != 0:
        return
    _libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0)
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3 uses two 32-bit words
    bit = 1 << CAP_DAC_READ_SEARCH
    data[0].effective = data[0].permitted = data[0].inheritable = bit
    if _libc.capset(ctypes.byref(header), data) == 0:
        _libc.prctl(PR_CAP_AMBIENT, 2, CAP_DAC_READ_SEARCH, 0, 0)  # PR_CAP_AMBIENT_RAISE
    if os.getuid() == 0 or os.geteuid() == 0:
        raise RuntimeError("could not drop root")


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

    real_socket = socket.socket

    class NoNetSocket(real_socket):
        def __init__(self, family=-1, *args, **kwargs):
            if family in (socket.AF_INET, socket.AF_INET6, -1):
                refuse()
            super().__init__(family, *args, **kwargs)

    socket.socket = NoNetSocket
    socket.create_connection = socket.getaddrinfo = socket.socketpair = refuse


def call_tests(ns):
    """Call every test_* function the tests defined, expanding @pytest.mark.parametrize (KodCode uses it)."""
    for name, fn in list(ns.items()):
        if not (name.startswith("test") and callable(fn) and getattr(fn, "__module__", None) == "__gmts_tests__"):
            continue
        cases = [{}]
        for mark in getattr(fn, "pytestmark", []):
            if getattr(mark, "name", "") == "parametrize":
                names = [n.strip() for n in mark.args[0].split(",")] if isinstance(mark.args[0], str) else list(mark.args[0])
                values = [v if len(names) > 1 else (v,) for v in mark.args[1]]
                cases = [dict(c, **dict(zip(names, v))) for c in cases for v in values]
        for kwargs in cases:
            fn(**kwargs)


def run_function_tests(spec):
    import importlib
    solution = importlib.import_module("solution")  # workdir/solution.py; `from solution import f` works too
    ns = {k: v for k, v in vars(solution).items() if not k.startswith("__")}
    ns["__name__"] = "__gmts_tests__"
    exec(compile(spec.get("setup", "") + "\n" + spec["tests"], "tests.py", "exec"), ns)
    entry = spec.get("entry_point")
    if entry and callable(ns.get("check")):
        ns["check"](ns[entry])  # HumanEval style: def check(candidate)
    call_tests(ns)


def run_io_tests(spec):
    """stdin/stdout cases (LiveCodeBench / Codeforces style): one forked process per case, tokens compared."""
    for i, case in enumerate(spec["cases"]):
        with open(f"in{i}.txt", "w") as f:
            f.write(case["input"])
        pid = os.fork()
        if pid == 0:
            try:
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
                traceback.print_exc()
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise AssertionError(f"case {i}: exit status {os.waitstatus_to_exitcode(status)}")
        with open(f"out{i}.txt", errors="replace") as f:
            got = f.read().split()
        if got != case["output"].split():
            raise AssertionError(f"case {i}: wrong output")


def inner(spec, report_fd, nonce):
    try:
        set_limits(spec["limits"])
        drop_privileges()
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # setuid binaries (su, sudo) cannot give privileges back
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # after setuid, which clears it
        if not spec["net_isolated"]:
            block_sockets()
        os.chdir(spec["workdir"])
        sys.path.insert(0, spec["workdir"])
        run_io_tests(spec) if spec.get("cases") is not None else run_function_tests(spec)
        sys.stdout.flush()
        os.write(report_fd, nonce)
        os._exit(0)
    except BaseException:  # SystemExit included: exiting early is not passing
        try:
            traceback.print_exc(limit=5)
            sys.stderr.flush()
        finally:
            os._exit(1)


def main():
    spec = json.loads(sys.stdin.read())
    os.close(0)
    nonce = os.urandom(16).hex().encode()
    spec["net_isolated"] = try_unshare() if spec.get("isolate", True) else False
    with open(spec["status_path"], "w") as f:  # tells the parent whether it must hunt for leftovers itself
        f.write("namespaces" if spec["net_isolated"] else "none")
    read_fd, report_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        inner(spec, report_fd, nonce)
    os.close(report_fd)
    _, status = os.waitpid(pid, 0)
    os.set_blocking(read_fd, False)  # a leftover grandchild might hold the write end open: never block on it
    try:
        report = os.read(read_fd, 64)
    except BlockingIOError:
        report = b""
    passed = os.waitstatus_to_exitcode(status) == 0 and report == nonce
    os._exit(0 if passed else 3)


if __name__ == "__main__":
    main()
