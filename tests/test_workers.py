"""The suite on several pytest-xdist workers (pytest.ini, tests/conftest.py): the sandbox tests
(conftest.SANDBOX_TESTS) run as two groups (SANDBOX_SECOND and the rest), each on one worker, in
turn, with the machine's run uids split between the workers; the others beside them at a lower
priority, the longest first, the tests of a module in RUN_MODULES on one worker; a test outside
SANDBOX_TESTS that runs code in the sandbox fails there, saying what to do. Checked on a small
suite that reuses this repository's pytest.ini and conftest.py, run with the README's command plus
`-n 3` (what -n auto gives on 2 CPUs). And a command run in a fork of the warm process
(conftest.run_python) is the command line."""
import glob
import itertools
import json
import os
import pathlib
import shutil
import subprocess
import sys

from conftest import LONG_FIRST, OTHERS_NICE, ROOT, RUN_MODULES, SANDBOX_SECOND, SANDBOX_TESTS

RECORD = """
import json, os, time

def record(name):
    start = time.time()
    time.sleep(0.3)                 # long enough that two workers would overlap
    from gmts.rewards.sandbox import run_uids
    uids = run_uids()               # the worker's own, the environment's: what a child would get
    with open({log!r}, "a") as fh:
        fh.write(json.dumps([name, os.environ["PYTEST_XDIST_WORKER"], start, time.time(),
                             os.nice(0), [uids.start, uids.stop]]) + "\\n")
"""
# file -> source: a file of each group (test_code_reward_new.py stands for any future one), a
# group member in a file of plain tests, a long test that must start first, a module of RUN_MODULES
# whose tests share a module fixture, a sandbox run outside the group
SUITE = {
    "test_sandbox.py": "".join(f"def test_{i}():\n    record('second sandbox {i}')\n"
                               for i in range(4)),
    "test_code_reward_new.py": "".join(f"def test_{i}():\n    record('first new {i}')\n"
                                       for i in range(4)),
    "test_data.py": ("def test_local_rows_choose_their_domain():\n    record('first data')\n"
                     + "".join(f"def test_plain_{i}():\n    record('plain {i}')\n"
                               for i in range(6))),
    "test_notebooks.py": ("def test_notebook_runs_top_to_bottom():\n"
                          "    record('long')\n"),
    "test_run_safety.py": ("import pytest\n\n@pytest.fixture(scope='module')\ndef run():\n"
                           "    record('fixture')\n\n"
                           + "".join(f"def test_{i}(run):\n    record('module {i}')\n"
                                     for i in range(4))),
    "test_outside.py": ("def test_unlisted_sandbox_run():\n"        # as test_data.py's code row
                        "    from gmts.rewards import get_reward\n"
                        "    get_reward('code')('```python\\nprint(input())\\n```',\n"
                        "                       {'cases': [{'input': '5', 'output': '5'}]})\n"),
}


def test_sandbox_groups_have_a_worker_each_and_their_own_uids_and_other_runs_fail(tmp_path):
    suite, log = tmp_path / "tests", tmp_path / "ran.jsonl"
    suite.mkdir()
    shutil.copy(os.path.join(ROOT, "pytest.ini"), tmp_path)
    shutil.copy(os.path.join(ROOT, "tests", "conftest.py"), suite)
    for name, source in SUITE.items():
        (suite / name).write_text(RECORD.format(log=str(log)) + source)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTEST_") and k != "GMTS_SANDBOX_UIDS"}
    env.update(PYTHONPATH=ROOT, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "3", "-p", "no:cacheprovider"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    ran = [dict(zip(("name", "worker", "start", "end", "nice", "uids"), json.loads(line)))
           for line in log.read_text().splitlines()]
    first = [r for r in ran if r["name"].startswith("first")]
    second = [r for r in ran if r["name"].startswith("second")]
    others = [r for r in ran if r not in first + second]
    assert len(first) == 5 and len(second) == 4 and len(ran) == 21, proc.stdout[-3000:]
    for group in (first, second):
        assert len({r["worker"] for r in group}) == 1, group             # one after another
    assert first[0]["worker"] != second[0]["worker"], ran                # side by side
    assert {r["worker"] for r in others} - {first[0]["worker"], second[0]["worker"]}, ran
    base = os.nice(0)             # the groups' workers keep it; the others yield the CPU to them
    assert {r["nice"] for r in first + second} == {base}, first + second
    assert {r["nice"] for r in others} == {min(base + OTHERS_NICE, 19)}, others
    # each worker's runs take their uids from a slice of the machine's of its own
    from gmts.rewards.sandbox import RUN_UIDS
    slices = {r["worker"]: range(*r["uids"]) for r in ran}
    assert len(slices) == 3 and len({(u.start, u.stop) for u in slices.values()}) == 3, slices
    assert all(len(u) >= len(RUN_UIDS) // 3 - 1 and RUN_UIDS.start <= u.start < u.stop
               <= RUN_UIDS.stop for u in slices.values()), slices
    ordered = sorted(slices.values(), key=lambda u: u.start)
    assert all(a.stop <= b.start for a, b in itertools.pairwise(ordered)), slices   # disjoint
    module = [r for r in ran if r["name"] == "fixture" or r["name"].startswith("module")]
    assert len(module) == 5 and len({r["worker"] for r in module}) == 1, module   # trained once
    # the long test is queued before the plain ones: its worker runs it before any of them (its
    # start against the other worker's would depend on how fast each worker starts on a loaded
    # machine)
    long = next(r for r in ran if r["name"] == "long")
    assert min((r for r in others if r["worker"] == long["worker"]
                and r["name"].startswith(("plain", "long"))), key=lambda r: r["start"]) is long, ran
    # the one failure: the sandbox run outside the groups, told what to do
    assert proc.returncode == 1 and "1 failed, 20 passed" in proc.stdout, proc.stdout[-3000:]
    assert ("test_outside.py::test_unlisted_sandbox_run runs code in the code reward's sandbox: "
            "add it to SANDBOX_TESTS in tests/conftest.py") in proc.stdout, proc.stdout[-3000:]


def test_the_lists_name_tests_that_exist_and_the_guard_has_its_hook():
    """Each prefix of SANDBOX_TESTS, SANDBOX_SECOND, RUN_MODULES and LONG_FIRST names an existing
    file (and test), and each of SANDBOX_SECOND is a sandbox test,
    and the function conftest's guard replaces (where a run's uid is taken) exists: if it is renamed
    the guard stops failing, and this says why."""
    from gmts.rewards import sandbox
    assert all(prefix.startswith(SANDBOX_TESTS) for prefix in SANDBOX_SECOND)
    for prefix in SANDBOX_TESTS + SANDBOX_SECOND + RUN_MODULES + LONG_FIRST:
        path, _, test = prefix.partition("::")
        files = glob.glob(os.path.join(ROOT, path + "*"))
        assert files, f"{prefix}: no such test file"
        name = test.split("[")[0]
        assert not name or any(f"def {name}" in pathlib.Path(f).read_text() for f in files), \
            prefix
    assert callable(getattr(sandbox, "_reserve_uid", None))



PROBE = ("import json, os, sys\n"
         "print(json.dumps([sys.argv, sys.path[0], os.getcwd(), os.environ.get('GMTS_PROBE'),\n"
         "                  os.environ.get('TOKENIZERS_PARALLELISM'), __name__,\n"
         "                  sys.stdin.read()]))\n"
         "sys.stderr.write('to stderr\\n')\n"
         "sys.exit(int(sys.argv[-1]))\n")


def test_a_command_in_a_fork_is_the_command_line(tmp_path):
    """conftest.run_python (a fork of the warm process) gives what `python ...` gives for -c, -m
    and a script: argv, sys.path[0], the folder, the environment (a variable added, one of ENV
    unset), an empty stdin, stdout, stderr and the exit status."""
    from conftest import ENV, run_python
    (tmp_path / "probe_module.py").write_text(PROBE)
    assert "TOKENIZERS_PARALLELISM" in ENV                   # so that unsetting it shows
    real_env = {k: v for k, v in ENV.items() if k != "TOKENIZERS_PARALLELISM"}
    for argv in (["-c", PROBE, "a b", "3"], ["-m", "probe_module", "x", "0"],
                 [str(tmp_path / "probe_module.py"), "--flag", "7"]):
        forked = run_python(argv, cwd=tmp_path, timeout=300,
                            env={"GMTS_PROBE": "set", "TOKENIZERS_PARALLELISM": None})
        real = subprocess.run([sys.executable, *argv], cwd=tmp_path,
                              env=dict(real_env, GMTS_PROBE="set"), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=300, check=False)
        assert (forked.returncode, forked.stdout, forked.stderr) == \
            (real.returncode, real.stdout, real.stderr), argv
        assert real.returncode == int(argv[-1])
        assert json.loads(real.stdout)[3:5] == ["set", None], real.stdout
