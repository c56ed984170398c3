"""The code reward under attack (issue 15): a wrong solution, `add` returning 0, tries every trick a
policy under optimisation pressure could find. Each must score 0.0 on every test format and leave
nothing behind (no file in /tmp or /dev/shm, no process); a correct solution still scores 1.0. Also:
the test plan's trusted share."""
import glob
import json
import os
import shutil
import sys
import tempfile
import time

import pytest

from gmts import rewards
from gmts.rewards import code_stats, get_reward, testplan
from gmts.rewards.sandbox import (
    belongs_to_us,
    run_python,
    run_uids,
    sandbox_info,
    sandbox_mode,
)

code = get_reward("code")
trusted_code = get_reward("code", trusted_only=True)
MBPP = ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]
HUMANEVAL = {"tests": "METADATA = {}\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n"
                      "    assert abs(candidate(0.5, 0.25) - 0.75) < 1e-9\n"
                      "    assert candidate(-1, 1) is not None\n",
             "entry_point": "add"}
KODCODE = {"tests": "import pytest\nfrom solution import add\n\n"
                    "@pytest.mark.parametrize('a,b,expected', [(1, 2, 3), "
                    "(0, 0, 0), (-5, 5, 0)])\ndef test_add(a, b, expected):\n"
                    "    result = add(a, b)\n"
                    "    assert result == expected\n\ndef test_type():\n"
                    "    with pytest.raises(TypeError):\n"
                    "        add(1, 'x')\n\ndef test_float():\n"
                    "    assert add(0.1, 0.2) == pytest.approx(0.3)\n"}
IO = {"cases": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5", "output": "10"}]}
FORMATS = {"mbpp": MBPP, "humaneval": HUMANEVAL, "kodcode": KODCODE}
GOOD = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return 0\n"


def block(src):
    return f"```python\n{src}\n```"


def _ours(path):
    """A file one of this process's sandbox runs could have left (other jobs, and other pytest
    workers, share this machine's /tmp): a run uid of ours (conftest.pytest_configure gives each
    worker its own), or a fallback folder named with our pid."""
    try:
        return (os.lstat(path).st_uid in run_uids()
                or os.path.basename(path).startswith(f"gmts-sandbox-{os.getpid()}-"))
    except OSError:
        return False


def leftovers():
    """Sandbox files in /tmp and /dev/shm, and processes of any sandbox run."""
    files = {p for d in ("/tmp", "/dev/shm") for p in glob.glob(os.path.join(d, "*")) if _ours(p)}
    procs = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            # not another trainer's
            if os.stat(f"/proc/{pid}").st_uid in run_uids() and belongs_to_us(pid):
                procs.add(pid)
        except OSError:
            pass
    return files, procs


@pytest.fixture
def clean():
    """The test must leave no new file in /tmp or /dev/shm and no sandbox process."""
    files, procs = leftovers()
    yield
    new_files, new_procs = leftovers()
    assert new_procs - procs == set()
    assert new_files - files == set()


def test_correct_solution_passes_every_format_and_is_trusted(clean):
    stats = code_stats(reset=True)
    for name, reference in FORMATS.items():
        assert code(block(GOOD), reference) == 1.0, name
        assert trusted_code(block(GOOD), reference) == 1.0, name
        assert code(block(WRONG), reference) == 0.0, name
    assert code(block("a, b = map(int, input().split())\nprint(a + b)"), IO) == 1.0
    assert code(block("a, b = map(int, input().split())\nprint(a * b)"), IO) == 0.0
    stats = code_stats()
    assert stats["untrusted_runs"] == 0 and stats["refused_runs"] == 0
    assert stats["trusted_runs"] == 11


# Each attack is a wrong solution (add returns 0, or nothing sensible) with a trick. Harness-era
# cheats.
ATTACKS = {
    "eq_always_true": "class Yes:\n    def __eq__(self, other):\n        return True\n"
                      "    __hash__ = None\n"
                      "    def __sub__(self, other):\n        return 0\n    __rsub__ = __sub__\n"
                      "def add(a, b):\n    return Yes()\n",
    "int_subclass_eq": "class I(int):\n    def __eq__(self, other):\n        return True\n"
                       "    __hash__ = int.__hash__\n"
                       "def add(a, b):\n    return I(0)\n",
    "exec_replaced": "import builtins\nbuiltins.exec = lambda *a, **k: None\n" + WRONG,
    "compile_replaced": ("import builtins\n"
                         "builtins.compile = lambda *a, **k: compile('pass', 'x', 'exec')\n"
                         + WRONG),
    "eval_replaced": "import builtins\nbuiltins.eval = lambda *a, **k: True\n" + WRONG,
    "callable_replaced": "import builtins\nbuiltins.callable = lambda x: False\n" + WRONG,
    "fake_pytest": "import sys, types\nfake = types.ModuleType('pytest')\nclass Mark:\n"
                   "    def parametrize(self, *a, **k):\n"
                   "        return lambda f: (lambda *x, **y: None)\n"
                   "fake.mark = Mark()\nclass Raises:\n    def __init__(self, *a, **k): pass\n"
                   "    def __enter__(self): return self\n    def __exit__(self, *a): return True\n"
                   "fake.raises = Raises\n"
                   "fake.approx = lambda x, **k: type('A', (), {'__eq__': lambda s, o: True})()\n"
                   "sys.modules['pytest'] = fake\n" + WRONG,
    "stack_walk_nonce": "import sys, os, json\ndef add(a, b):\n    f = sys._getframe()\n"
                        "    while f is not None:\n"
                        "        for v in list(f.f_locals.values()) + list(f.f_globals.values()):\n"
                        "            if isinstance(v, dict) and 'nonce' in v and 'report_fd' in "
                        "v:\n"
                        "                os.write(v['report_fd'], (json.dumps('harness ' + "
                        "v['nonce']) + '\\n').encode())\n"
                        "                os._exit(0)\n        f = f.f_back\n    return 0\n",
    "stack_walk_expected": "import sys\ndef add(a, b):\n    f = sys._getframe().f_back\n"
                           "    found = []\n"
                           "    while f is not None:\n        for k, v in f.f_locals.items():\n"
                           "            if k in ('expected', 'c', 'case', 'cases'):\n"
                           "                found.append(v)\n"
                           "        f = f.f_back\n    return found[0] if found else 0\n",
    "fake_report": "import os, json, sys\n"
                   "fd = [int(x) for x in os.listdir('/proc/self/fd') if int(x) > 2]\n"
                   "for x in fd:\n    try:\n"
                   "        os.write(x, (json.dumps({'units': [[{'ok': True}] * 9] * 9}) + "
                   "'\\n').encode())\n"
                   "    except OSError:\n        pass\nos._exit(0)\n",
    "exit_zero_early": "import os\nos._exit(0)\n",
    "sys_exit_in_call": "import sys\ndef add(a, b):\n    sys.exit(0)\n",
    "deep_result": ("def add(a, b):\n    x = []\n    for _ in range(100000):\n        x = [x]\n"
                    "    return x\n"),
    "huge_report": "import os\nfor x in range(3, 20):\n    try:\n"
                   "        os.write(x, b'[' * (1 << 20))\n    except OSError:\n"
                   "        pass\n" + WRONG,
    "raise_base_exception": ("class Boom(BaseException):\n    pass\ndef add(a, b):\n"
                             "    raise Boom()\n"),
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_scores_zero(attack, fmt, clean):
    assert code(block(ATTACKS[attack]), FORMATS[fmt]) == 0.0


IO_ATTACKS = {
    # the harness's current case, found by walking the stack, printed as the answer
    "stack_walk_expected": "import sys\nf = sys._getframe()\nout = None\nwhile f is not None:\n"
                           "    for k, v in f.f_locals.items():\n"
                           "        if isinstance(v, dict) and 'output' in v:\n"
                           "            out = v['output']\n"
                           "    f = f.f_back\nprint(out if out is not None else 0)\n",
    "read_expected_files": "import glob\nfor p in glob.glob('/**/*', recursive=True)[:2000]:\n"
                           "    if 'out' in p:\n"
                           "        try:\n            print(open(p).read())\n"
                           "        except OSError:\n            pass\n",
    "exit_zero": "import os\nos._exit(0)\n",
}


@pytest.mark.parametrize("attack", sorted(IO_ATTACKS))
def test_io_attack_scores_zero(attack, clean):
    assert code(block(IO_ATTACKS[attack]), IO) == 0.0


def test_untrusted_tests_are_counted_and_refused_on_request(clean):
    """A harness the parent cannot split (a while loop on the answer's values; one on values it
    computes is unrolled) still runs, flagged; trusted_only refuses it."""
    loop = {"tests": "def check(candidate):\n    i = 0\n    while candidate(i, i) < 6:\n"
                     "        assert candidate(i, i) == 2 * i\n"
                     "        i += 1\n", "entry_point": "add"}
    plan = testplan.build_plan(loop["tests"], "add")
    assert plan.harness is not None and plan.trusted == 0 and plan.untrusted == 1
    code_stats(reset=True)
    assert code(block(GOOD), loop) == 1.0 and code(block(WRONG), loop) == 0.0
    assert trusted_code(block(GOOD), loop) == 0.0
    assert code_stats() == {"runs": 3, "trusted_runs": 0, "untrusted_runs": 2, "refused_runs": 1,
                            "unjudged_runs": 0,
                            "cases_trusted": 0, "cases_untrusted": 3}
    # the residual hole trusted_only closes: inside a harness, the stack-walking cheat can find the
    # nonce
    assert trusted_code(block(ATTACKS["stack_walk_nonce"]), loop) == 0.0
    # the option is accepted by every reward (the others are judged by the trainer anyway)
    assert get_reward("math", trusted_only=True)("\\boxed{4}", "4") == 1.0


@pytest.mark.skipif(os.getuid() != 0, reason="the secret is protected by root-only permissions")
def test_root_only_file_cannot_be_read(clean):
    home = tempfile.mkdtemp(prefix="gmts-secret-")
    os.chmod(home, 0o700)
    secret = os.path.join(home, "key")
    with open(secret, "w") as f:
        f.write("hunter2")
    os.chmod(secret, 0o600)
    try:
        thief = f"def add(a, b):\n    return open({secret!r}).read()\n"
        from gmts.rewards.sandbox import _world_traversable
        if sandbox_mode() == "fallback" and not _world_traversable(sys.executable):
            # rewards/README.md's defence table: without bwrap, as root, with the interpreter
            # unreadable to others (pyenv under /root), the child keeps CAP_DAC_READ_SEARCH and CAN
            # read every file. Pin that, so the table goes stale loudly if it changes.
            assert code(block(thief), ["assert add(1, 2) == 'hunter2'"]) == 1.0
            return
        assert code(block(thief), ["assert add(1, 2) == 'hunter2'"]) == 0.0
        # and the project's own files are not there either (bubblewrap binds only the interpreter)
        here = os.path.abspath(__file__)
        peek = f"import os\ndef add(a, b):\n    return os.path.exists({here!r})\n"
        if sandbox_mode() == "bwrap":
            assert code(block(peek), ["assert add(1, 2) is False"]) == 1.0
    finally:
        import shutil
        shutil.rmtree(home)


def test_project_folders_are_not_bound_wherever_the_project_lives():
    # The sandbox's own workdir is /work, a tmpfs: a checkout under /work (or /tmp) is hidden by it
    # anyway, so the test above passes there whatever is bound. This one checks the binds
    # themselves, for any checkout path.
    from gmts.rewards.sandbox import _interpreter_paths
    project = os.path.dirname(os.path.dirname(os.path.abspath(rewards.__file__)))
    project = os.path.realpath(project)
    assert project in map(os.path.realpath, sys.path)  # pytest.ini's pythonpath = . put it there
    for p in _interpreter_paths():
        assert p != project and not project.startswith(p + "/"), p
        inside = p.startswith(project + "/")
        # only a venv kept inside the project
        assert not inside or p.startswith(os.path.realpath(sys.prefix)), p
    import sysconfig  # the standard library is there (or under /usr, /lib, bound anyway)
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    assert stdlib.startswith(("/usr/", "/lib")) or any(stdlib.startswith(p + "/")
                                                       for p in _interpreter_paths())


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_bubblewrap_runs_from_a_venv_under_tmp():
    # The sandbox mounts fresh tmpfs on /tmp and on its workdir /work: an interpreter living there
    # (a venv in /tmp, or in a checkout under /work) must be bound after them, or bwrap cannot start
    # it and everything falls back.
    import subprocess
    venv = tempfile.mkdtemp(prefix="gmts-venv-", dir="/tmp")
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                        venv], check=True)
        project = os.path.dirname(os.path.dirname(os.path.abspath(rewards.__file__)))
        probe = "from gmts.rewards.sandbox import sandbox_mode; print(sandbox_mode())"
        out = subprocess.run([os.path.join(venv, "bin", "python"), "-W", "ignore", "-c", probe],
                             cwd=project, capture_output=True, text=True, timeout=120,
                             check=False)
        # as good as from the interpreter itself
        assert out.stdout.strip() == sandbox_mode(), out.stdout + out.stderr
    finally:
        shutil.rmtree(venv)


def test_files_in_tmp_and_shm_do_not_survive(clean):
    litter = ("import os\nfor d in ('/tmp', '/dev/shm', '.'):\n    for i in range(2000):\n"
              "        try:\n"
              "            open(os.path.join(d, f'gmts-litter-{i}'), 'w').close()\n"
              "        except OSError:\n"
              "            break\n    try:\n"
              "        with open(os.path.join(d, 'gmts-big'), 'wb') as f:\n"
              "            f.write(b'x' * (200 << 20))\n    except (OSError, MemoryError):\n"
              "        pass\n" + WRONG)
    assert code(block(litter), MBPP) == 0.0
    assert not glob.glob("/tmp/gmts-litter-*") and not glob.glob("/dev/shm/gmts-litter-*")
    assert not glob.glob("/tmp/gmts-big") and not glob.glob("/dev/shm/gmts-big")


def test_two_sandboxes_at_once_cannot_touch_each_other(clean):
    """A wrong solution that looks for a concurrent run's solution.py (in /tmp, or through
    /proc/*/cwd) and copies it, while a correct one runs beside it; and one that signals every
    process it can see."""
    copycat = ("import glob, time\ndef add(a, b):\n    for _ in range(20):\n"
               "        for p in glob.glob('/tmp/gmts-sandbox-*/work/solution.py') + "
               "glob.glob('/proc/*/cwd/solution.py'):\n"
               "            try:\n                src = open(p).read()\n"
               "            except OSError:\n                continue\n"
               "            if 'a + b' in src:\n                g = {}\n"
               "                exec(src, g)\n"
               "                return g['add'](a, b)\n        time.sleep(0.05)\n    return 0\n")
    killer = ("import os, signal\nfor pid in range(2, 4096):\n    try:\n"
              "        if pid != os.getpid():\n"
              "            os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\n"
              + WRONG)
    slow_good = "import time\ntime.sleep(0.5)\n" + GOOD
    jobs = [(copycat, 0.0), (slow_good, 1.0), (killer, 0.0), (slow_good, 1.0)] * 2
    names = ["code"] * len(jobs)
    scores = rewards.score_batch(names, [block(src) for src, _ in jobs], [MBPP] * len(jobs),
                                 workers=len(jobs))
    assert scores == [want for _, want in jobs]


def test_sandbox_info_names_its_layer():
    info = sandbox_info()
    assert info["mode"] in ("bwrap", "fallback")
    if info["mode"] == "bwrap":
        assert info["caps"] == "0" * 16
        assert {"mnt", "pid", "net", "ipc", "uts", "user"} <= set(info["new_namespaces"])


def test_results_cross_as_exact_plain_data():
    value = (1, 2.5, "x", None, True, [1, {2: (3,)}], {1, 2}, frozenset({3}), b"\x00", 1 + 2j)
    run = run_python(f"V = {value!r}\nW = float('-inf')", timeout=10,
                     tests=f"assert V == {value!r}\nassert type(V[6]) is set\n"
                           "assert W == float('-inf')")
    assert run.passed and run.trusted
    # a subclass crosses as its base's data under its name: its own __eq__ never does
    for sub in ("class L(list):\n    def __eq__(s, o):\n        return True\nV = L()",
                ("import collections\nclass D(collections.OrderedDict):\n"
                 "    def __eq__(s, o):\n        return True\nV = D()")):
        run = run_python(sub, tests="assert V == V and not V and type(V) not in (list, dict)",
                         timeout=10)
        assert run.passed and run.trusted
        assert not run_python(sub, tests="assert V == [1]", timeout=10).passed
    assert testplan.decode({"tuple": [1, {"set": [2]}]}) == (1, {2})
    with pytest.raises(ValueError):
        testplan.decode({"object": 1})


def test_plan_keeps_expected_values_out_of_the_child():
    plan = testplan.build_plan(KODCODE["tests"], None)
    sent = json.dumps([u.steps for u in plan.units])
    assert plan.harness is None and plan.untrusted == 0 and plan.trusted == 5
    assert "expected" not in sent and "0.3" not in sent and "TypeError" not in sent
    he = testplan.build_plan(HUMANEVAL["tests"], "add")
    assert "0.75" not in json.dumps([u.steps for u in he.units]) and he.harness is None


def test_sandbox_overhead_is_small():
    """Print the per-run cost of each layer (see rewards/README.md); loose bound only, the machine
    is shared."""
    times = {}
    for isolate in (True, False):
        start = time.monotonic()
        for _ in range(5):
            assert run_python(GOOD, tests=MBPP[0], isolate=isolate).passed
        times["sandbox" if isolate else "fallback-no-namespaces"] = (time.monotonic() - start) / 5
    print("seconds per run:", times)
    assert max(times.values()) < 3.0
