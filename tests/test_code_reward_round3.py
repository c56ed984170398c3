"""The code reward, third round (issue 30): each kind as a class of cases, several instances each.

Every wrong solution scores 0.0 under get_reward("code") and trusted_only=True; every honest one
1.0. Kinds: the sandbox's view of the caller's folders; CPU per run; the judge's own cost;
stdin/stdout judging; the formats real suites use; stdlib value types and builtins on solution
objects; setup as part of the tests.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from gmts.rewards import get_reward, sandbox
from gmts.rewards.sandbox import run_python

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
code = get_reward("code")
trusted_code = get_reward("code", trusted_only=True)


def block(src):
    return f"```python\n{src}\n```"


def both(solution, reference, expected):
    assert code(block(solution), reference) == expected
    assert trusted_code(block(solution), reference) == expected


# ------------------------------------------------------------------ the caller's folders are not in
# the sandbox

_LAUNCH = """
import json, sys
sys.path.insert(0, {root!r})
from gmts.rewards import get_reward
fn = get_reward("code", trusted_only=True)
print(json.dumps([fn(c, {{"tests": "assert answer() == 4242"}}) for c in json.loads(sys.argv[1])]))
"""


@pytest.mark.parametrize("where", ["script_folder", "pythonpath", "script_subfolder"])
def test_the_sandbox_cannot_read_the_callers_folders(where):
    """A launching script's folder (sys.path[0]), a folder inside it, a PYTHONPATH entry: the data
    set with its answers may lie there. Outside /tmp, which the sandbox hides anyway."""
    base = tempfile.mkdtemp(dir="/var/tmp", prefix="gmts-caller-")
    try:
        os.chmod(base, 0o755)
        secret = os.path.join(base, "sub" if where == "script_subfolder" else "", "answers.txt")
        os.makedirs(os.path.dirname(secret), exist_ok=True)
        with open(secret, "w") as f:
            f.write("4242")
        os.chmod(secret, 0o644)
        script = os.path.join(base, "launch.py")
        with open(script, "w") as f:
            f.write(_LAUNCH.format(root=ROOT))
        cheat = f"def answer():\n    return int(open({secret!r}).read())\n"
        honest = "def answer():\n    return 4242\n"
        env = dict(os.environ, OMP_NUM_THREADS="1")
        completions = json.dumps([block(cheat), block(honest)])
        if where in ("script_folder", "script_subfolder"):
            argv = [sys.executable, script, completions]
        else:  # `python -c`: sys.path[0] is the working directory
            argv = [sys.executable, "-c", _LAUNCH.format(root=ROOT), completions]
        if where == "pythonpath":
            env["PYTHONPATH"] = base
        out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120,
                             cwd="/", check=False)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip().splitlines()[-1] == "[0.0, 1.0]"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_the_interpreters_own_folders_are_bound():
    paths = sandbox._interpreter_paths()
    assert not any(p == ROOT or p.startswith(ROOT + "/") or ROOT.startswith(p + "/") for p in paths
                   if not p.startswith(sys.prefix))
    assert all(not p.startswith(os.path.dirname(os.path.abspath(__file__))) for p in paths)


# ------------------------------------------------------------------ CPU per run

SPINNERS = """
import os
for _ in range({n}):
    if os.fork() == 0:
        {detach}
        while True:
            pass
import time
time.sleep(8)
def f():
    return 1
"""
HONEST_WORK = ("def work():\n    s = 0\n    for i in range(3_000_000):\n        s += i\n"
               "    return s\n")


@pytest.mark.parametrize("detach", ["os.setsid()", "os.setpgid(0, 0)", "pass"])
def test_a_forking_spinner_cannot_starve_a_concurrent_run(detach):
    if sandbox.cpu_limit() == "rlimit-cpu per process":
        pytest.skip("no cpu cgroup on this machine")
    done = {}
    spinner = threading.Thread(target=lambda: done.setdefault("spin", run_python(
        SPINNERS.format(n=40, detach=detach), tests="assert f() == 1", timeout=8)))
    spinner.start()
    try:
        time.sleep(1.5)  # the spinners are running
        honest = run_python(HONEST_WORK, tests=f"assert work() == {sum(range(3_000_000))}",
                            timeout=3)
    finally:
        spinner.join()
    assert honest.passed and not honest.timed_out
    assert not done["spin"].passed


# ------------------------------------------------------------------ the judge's own cost is bounded
# by construction

LIMIT = 3.0  # the run's own time limit in these tests
SLACK = 5.0 + 4.0  # the judge's deadline (rewards/_judge.py) plus process start and teardown
# (tests, honest solution, wrong solution whose returned values make the test's own work huge)
JUDGE_BOMBS = {
    "gcd": ("import math\nassert math.gcd(f(1), g(1)) == 1",
            "def f(x):\n    return 3\ndef g(x):\n    return 4\n",
            "def f(x):\n    return 3 ** 2_000_000\ndef g(x):\n    return 2 ** 3_100_000 + 1\n"),
    "pow_mod": ("assert pow(f(1), g(1), h(1)) == 1",
                "def f(x):\n    return 3\ndef g(x):\n    return 2\ndef h(x):\n    return 8\n",
                ("def f(x):\n    return 3 ** 600_000\ndef g(x):\n    return 5 ** 600_000\n"
                 "def h(x):\n    return 7 ** 600_000\n")),
    "sum_lists": ("assert sum(f(1), []) == [0, 0]", "def f(x):\n    return [[0], [0]]\n",
                  "def f(x):\n    return [[0]] * 300_000\n"),
    "divmod": ("assert divmod(f(1), g(1)) == (2, 1)",
               "def f(x):\n    return 7\ndef g(x):\n    return 3\n",
               "def f(x):\n    return 3 ** 3_000_000\ndef g(x):\n    return 7 ** 1_000_000\n"),
}


@pytest.mark.parametrize("case", sorted(JUDGE_BOMBS))
def test_the_judge_is_bounded_whatever_the_values(case, monkeypatch):
    tests, good, bomb = JUDGE_BOMBS[case]
    # the judge's deadline, whatever it is, bounds a verdict: a shorter one here, so that the bombs
    # burn less of the suite's CPU; what a good verdict needs is far below it
    monkeypatch.setattr(sandbox._judge, "JUDGE_TIMEOUT_S", 2.0)
    bounded = get_reward("code", timeout=LIMIT)
    assert bounded(block(good), tests) == 1.0
    start = time.monotonic()
    assert bounded(block(bomb), tests) == 0.0
    assert time.monotonic() - start < LIMIT + 2.0 + 4.0
    assert bounded(block(good), tests) == 1.0  # a killed judge is replaced


def test_code_block_extraction_is_linear():
    from gmts.rewards.code import extract_code
    start = time.monotonic()
    for text in ("`" * 200_000, "```\n`" * 100_000, "```python\n" + "`" * 200_000 + "\n",
                 "x```" * 100_000):
        extract_code(text)
    assert time.monotonic() - start < 3.0


FENCES = {  # (completion, the code a reader of the markdown sees)
    "fence_in_a_string": ("```python\ndef fence():\n    return '```'\n```\n",
                          "def fence():\n    return '```'\n"),
    "fence_line_in_a_triple_quoted_string": (('```python\ndef fence():\n    return """\n```\n"""\n'
                                              '```\n'),
                                             'def fence():\n    return """\n```\n"""\n'),
    "indented_in_a_list_item": (("1. Here:\n   ```python\n   def fence():\n       return 1\n"
                                 "   ```\n"),
                                "def fence():\n    return 1\n"),
    "docstring_with_an_indented_fence": (('```python\ndef fence():\n    """Use:\n    ```\n'
                                          '    fence()\n    ```\n'
                                          '    """\n    return 1\n```'),
                                         ('def fence():\n    """Use:\n    ```\n    fence()\n'
                                          '    ```\n    """\n'
                                          '    return 1\n')),
    "longer_fence": ("````python\ndef fence():\n    return 1\n```\n````\n",
                     "def fence():\n    return 1\n```\n"),
}


@pytest.mark.parametrize("case", sorted(FENCES))
def test_fences_as_markdown_reads_them(case):
    from gmts.rewards.code import extract_code
    completion, expected = FENCES[case]
    assert extract_code(completion) == expected


# ------------------------------------------------------------------ stdin/stdout programs

def io(*pairs, **options):
    return {"cases": [{"input": i, "output": o} for i, o in pairs], **options}


THREAD_MAIN = ("import sys, threading\nsys.setrecursionlimit(1 << 20)\n"
               "threading.stack_size(1 << 26)\n"
               "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n"
               "def main():\n    n = int(input())\n    {body}\n"
               "threading.Thread(target=main).start()\n")
STDIO = {  # (solution, reference, expected score)
    "each_case_its_own_limit": ("import time\ntime.sleep(0.6)\nprint(int(input()) * 2)",
                                io(*[(str(k), str(2 * k)) for k in range(4)], timeout=1.0), 1.0),
    "one_case_over_its_limit": (("import time\nn = int(input())\n"
                                 "time.sleep(1.5 if n == 2 else 0)\nprint(n * 2)"),
                                io(*[(str(k), str(2 * k)) for k in range(4)], timeout=1.0), 0.0),
    "outputs_over_2_mib_together": ("n = int(input())\nprint(' '.join(['7'] * n))",
                                    io(*[("300000", " ".join(["7"] * 300_000))] * 4), 1.0),
    "one_output_over_16_mib": ("print('ab\\n' * (6 << 20), end='')", io(("", "ab\n" * (6 << 20))),
                               1.0),
    "one_wrong_big_output": ("print('ab\\n' * (6 << 20), end='')",
                             io(("", "ab\n" * (6 << 20) + "x")), 0.0),
    "inputs_removed_after_each_case": ("import sys\nprint(len(sys.stdin.read()))",
                                       io(*[("x" * (12 << 20), str(12 << 20))] * 6), 1.0),
    "stderr_flood_dropped": (("import sys\nsys.stderr.write('debug\\n' * (5 << 20))\n"
                              "print(int(input()) + 1)"),
                             io(("1", "2"), ("5", "6")), 1.0),
    "stdout_flood_past_the_cap_fails": ("print('x' * (40 << 20))\nprint(2)", io(("1", "2")), 0.0),
    "main_in_a_thread": (THREAD_MAIN.format(body="print(n * 2)"), io(("3", "6"), ("4", "8")), 1.0),
    "main_in_a_thread_deep_recursion": (THREAD_MAIN.format(body="print(depth(n))"),
                                        io(("100000", "100000"), ("5", "5")), 1.0),
    "main_in_a_thread_slow": (THREAD_MAIN.format(body="import time; time.sleep(0.5); print(n)"),
                              io(("3", "3")), 1.0),
    "main_in_a_thread_wrong": (THREAD_MAIN.format(body="print(n * 3)"), io(("3", "6"), ("4", "8")),
                               0.0),
    "float_within_tolerance": ("print(0.1 + 0.2)", io(("", "0.3"), float_tolerance=1e-6), 1.0),
    "float_relative_tolerance": ("print(1e12 + 1)", io(("", "1000000000000"), float_tolerance=1e-9),
                                 1.0),
    "float_outside_tolerance": ("print(0.31)", io(("", "0.3"), float_tolerance=1e-6), 0.0),
    "float_without_tolerance": ("print(0.1 + 0.2)", io(("", "0.3")), 0.0),
    "float_tolerance_not_for_words": ("print('yes')", io(("", "no"), float_tolerance=1.0), 0.0),
}


@pytest.mark.parametrize("case", sorted(STDIO))
def test_stdin_stdout_as_a_judge_runs_it(case):
    solution, reference, expected = STDIO[case]
    both(solution, reference, expected)


def test_a_case_cannot_leave_a_spinner_for_the_next():
    # case 1 leaves setsid spinners behind; each later case must still get its own CPU and limit
    src = ("import os, time\nn = int(input())\nif n == 0:\n    for _ in range(8):\n"
           "        if os.fork() == 0:\n"
           "            os.setsid()\n            while True:\n                pass\nelse:\n"
           "    s = 0\n"
           "    for i in range(3_000_000):\n        s += i\nprint(n)")
    both(src, io(*[(str(k), str(k)) for k in range(3)], timeout=2.0), 1.0)


# ------------------------------------------------------------------ the formats real suites use

ADD_GOOD = "def add(a, b):\n    return a + b\n"
ADD_WRONGS = ["def add(a, b):\n    return a - b if a > 5 else a + b\n",
              "def add(a, b):\n    return 3\n",
              "def add(a, b):\n    raise ValueError\n"]
CHECK = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(7, 1) == 8\n"
FORMATS = {
    "trailing_check_call": {"tests": CHECK + "\ncheck(add)\n", "entry_point": "add"},
    "trailing_check_candidate_keyword": {"tests": CHECK + "\ncheck(candidate=add)\n",
                                         "entry_point": "add"},
    "humanevalpack_check_without_entry_point": {"tests": CHECK + "\ncheck(add)\n"},
    "multipl_e_test_check": {"tests": CHECK
                             + "\ndef test_check():\n    check(add)\n\ntest_check()\n"},
    "multipl_e_test_check_uncalled": {"tests": CHECK + "\ndef test_check():\n    check(add)\n"},
    "trailing_test_call": {"tests": "def test_add():\n    assert add(1, 2) == 3\n"
                                    "    assert add(7, 1) == 8\n\n"
                                    "test_add()\n"},
    "trailing_test_calls_kodcode": {"tests": "from solution import add\n\ndef test_small():\n"
                                             "    assert add(1, 2) == 3"
                                             "\n\ndef test_big():\n    assert add(7, 1) == 8\n\n"
                                             "test_small()\n"
                                             "test_big()\n"},
    "unittest_main_without_guard_after_asserts": {"tests": "import unittest\n"
                                                           "assert add(1, 2) == 3\n"
                                                           "assert add(7, 1) == 8\n"
                                                           "unittest.main()\n"},
    "or_short_circuits_a_raise": {"tests": ("assert add(1, 2) == 3 or add('a', 1) == 0\n"
                                            "assert add(7, 1) == 8\n")},
    "and_short_circuits": {"tests": ("assert not (add(1, 2) == 4 and add('a', 1) == 0)\n"
                                     "assert add(7, 1) == 8\n")},
    "if_else_in_an_assert": {
        "tests": "assert (add(7, 1) if add(1, 2) == 3 else add('a', 1)) == 8\n"},
    "huge_input_not_a_literal": {"tests": "assert add(len([0] * 5_000_000), 0) == 5_000_000\n"
                                          "assert add(total([1] * 5_000_000), 0) == 5_000_000\n"
                                          "assert add(7, 1) == 8\n"},
    "huge_named_input": {"tests": "data = list(range(3_000_000))\n"
                                  "assert total(data) == 4_499_998_500_000\n"
                                  "assert add(7, 1) == 8\nassert add(1, 2) == 3\n"},
    "huge_nested_input": {"tests": "rows = [[1, 2]] * 1_000_000\n"
                                   "assert total([sum(r) for r in rows]) == 3_000_000\n"
                                   "assert count(rows) == 1_000_000\n"
                                   "assert add(7, 1) == 8\n"},
}


@pytest.mark.parametrize("case", sorted(FORMATS))
def test_real_suite_formats_are_judged_by_the_trainer(case):
    reference = FORMATS[case]
    plan = __import__("rewards").testplan.build_plan(reference["tests"],
                                                     reference.get("entry_point"))
    assert plan.harness is None and not plan.unjudged and plan.trusted >= 1
    total = "def total(xs):\n    return sum(xs)\n\ndef count(xs):\n    return len(xs)\n"
    both(ADD_GOOD + total, reference, 1.0)
    for wrong in ADD_WRONGS:
        both(wrong + total, reference, 0.0)


# ------------------------------------------------------------------ stdlib value types cross as
# what they are

STDLIB = {  # (tests, honest solution, wrong solutions)
    "counter": (("from collections import Counter\n"
                 "assert count('abca') == Counter({'a': 2, 'b': 1, 'c': 1})\n"
                 "assert count('abca').most_common(1) == [('a', 2)]\n"),
                "from collections import Counter\ndef count(s):\n    return Counter(s)\n",
                ["from collections import Counter\ndef count(s):\n    return Counter(s[:-1])\n",
                 "def count(s):\n    return {'a': 2, 'b': 1, 'c': 1}\n"]),
    "namedtuple": (("assert point(1, 2) == (1, 2)\nassert point(1, 2).x == 1\n"
                    "assert point(3, 4).y == 4\n"),
                   ("from collections import namedtuple\nP = namedtuple('P', 'x y')\n"
                    "def point(a, b):\n"
                    "    return P(a, b)\n"),
                   [("from collections import namedtuple\nP = namedtuple('P', 'y x')\n"
                     "def point(a, b):\n"
                     "    return P(a, b)\n"), "def point(a, b):\n    return (a, b)\n"]),
    "deque": (("from collections import deque\n"
               "assert window([1, 2, 3], 2) == deque([2, 3], maxlen=2)\n"),
              "from collections import deque\ndef window(xs, n):\n    return deque(xs, maxlen=n)\n",
              ["def window(xs, n):\n    return xs[-n:]\n",
               "from collections import deque\ndef window(xs, n):\n    return deque(xs[:n])\n"]),
    "ordered_dict": (("import collections\nassert list(order('ba')) == ['b', 'a']\n"
                      "assert order('ba') == collections.OrderedDict([('b', 0), ('a', 1)])\n"),
                     ("from collections import OrderedDict\ndef order(s):\n"
                      "    return OrderedDict((c, i) for i, c in "
                      "enumerate(s))\n"),
                     [("from collections import OrderedDict\ndef order(s):\n"
                       "    return OrderedDict((c, i) for i, c "
                       "in enumerate(sorted(s)))\n")]),
    "defaultdict": ("assert groups([1, 2, 3])[1] == [1, 3]\nassert groups([1, 2, 3])[5] == []\n",
                    ("from collections import defaultdict\ndef groups(xs):\n"
                     "    d = defaultdict(list)\n    for x in xs:"
                     "\n        d[x % 2].append(x)\n    return d\n"),
                    ["def groups(xs):\n    return {1: [1, 3], 0: [2]}\n"]),
}


@pytest.mark.parametrize("case", sorted(STDLIB))
def test_stdlib_value_types_cross_as_what_they_are(case):
    tests, good, wrongs = STDLIB[case]
    both(good, tests, 1.0)
    for wrong in wrongs:
        both(wrong, tests, 0.0)


# ------------------------------------------------------------------ setup is part of the tests;
# identity survives

SETUP = [  # (reference, honest, wrong: rebinds the setup's name, which the child would read)
    ({"tests": "assert f(3) == EXPECTED", "setup": "EXPECTED = 9"}, "def f(x):\n    return x * x\n",
     "import sys\ndef f(x):\n    sys._getframe(1).f_globals['EXPECTED'] = 0\n    return 0\n"),
    ({"tests": "assert f(K) == K * K", "setup": "K = 4"}, "def f(x):\n    return x * x\n",
     "def f(x):\n    __import__('sys')._getframe(1).f_globals['K'] = 0\n    return 0\n"),
    ({"tests": "assert area(2) == math.pi * 4", "setup": "import math"},
     "import math\ndef area(r):\n    return math.pi * r * r\n",
     "import math\nmath.pi = 0\ndef area(r):\n    return 0.0\n"),
]


@pytest.mark.parametrize("case", range(len(SETUP)))
def test_setup_names_are_the_tests(case):
    reference, good, wrong = SETUP[case]
    both(good, reference, 1.0)
    both(wrong, reference, 0.0)


IDENTITY = [
    ("original = [5, 3, 1]\narr = original\nresult = sorted_copy(arr)\nassert result == [1, 3, 5]\n"
     "assert original == [5, 3, 1]\n"),
    ("def test_no_mutation():\n    original = [5, 3, 1]\n    arr = original\n"
     "    assert sorted_copy(arr) == [1, 3, 5]\n"
     "    assert original == [5, 3, 1]\n"),
    ("data = {'b': 2, 'a': 1}\nalias = data\nassert keys(alias) == ['a', 'b']\n"
     "assert data == {'b': 2, 'a': 1}\n"),
]
KEEPS = "def sorted_copy(a):\n    return sorted(a)\ndef keys(d):\n    return sorted(d)\n"
MUTATES = ("def sorted_copy(a):\n    a.sort()\n    return a\n"
           "def keys(d):\n    k = sorted(d)\n    d.clear()\n    return k\n")


@pytest.mark.parametrize("case", range(len(IDENTITY)))
def test_names_bound_to_one_object_stay_one(case):
    both(KEEPS, IDENTITY[case], 1.0)
    both(MUTATES, IDENTITY[case], 0.0)


# ------------------------------------------------------------------ builtins applied to the
# solution's objects

STACK = ("class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n"
         "        self.items.append(x)\n    def __len__(self):\n        return len(self.items)\n"
         "    def __str__(self):\n        return 'Stack(%d)' % len(self.items)\n")
ON_OBJECTS = [
    "s = Stack()\ns.push(1)\ns.push(2)\nassert len(s) == 2\n",
    "s = Stack()\ns.push(1)\nassert str(s) == 'Stack(1)'\n",
    "s = Stack()\ns.push(4)\nassert bool(s)\nassert isinstance(s, Stack)\n",
    ("def test_stack():\n    s = Stack()\n    s.push(1)\n"
     "    assert len(s) == 1 and repr(len(s)) == '1'\n"),
]


@pytest.mark.parametrize("case", range(len(ON_OBJECTS)))
def test_builtins_meet_the_solutions_objects_in_the_sandbox(case):
    both(STACK, ON_OBJECTS[case], 1.0)
    both(STACK.replace("self.items.append(x)", "pass"), ON_OBJECTS[case], 0.0)


# ------------------------------------------------------------------ operators between the
# solution's objects

VECTOR = ("class Vector:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n"
          "    def __add__(self, o):\n        return Vector(self.x + o.x, self.y + o.y)\n"
          "    def __mul__(self, k):\n        return Vector(self.x * k, self.y * k)\n"
          "    def __neg__(self):\n        return Vector(-self.x, -self.y)\n"
          "    def __eq__(self, o):\n"
          "        return isinstance(o, Vector) and (self.x, self.y) == (o.x, o.y)\n"
          "    def __hash__(self):\n        return hash((self.x, self.y))\n"
          "    def __lt__(self, o):\n        return (self.x, self.y) < (o.x, o.y)\n"
          "    def __iter__(self):\n        return iter((self.x, self.y))\n"
          "def norm2(v):\n    return v.x * v.x + v.y * v.y\n")
POINT = ("from dataclasses import dataclass\n@dataclass(frozen=True)\nclass Point:\n    x: int\n"
         "    y: int\n"
         "def make_point(a, b):\n    return Point(a, b)\ndef mirror(p):\n"
         "    return Point(p.y, p.x)\n"
         "def diagonal(n):\n    return [Point(i, i) for i in range(n)]\n")
LINKED = ("class LinkedList:\n    def __init__(self, items=()):\n        self.items = list(items)\n"
          "    def __iter__(self):\n        return iter(self.items)\n"
          "def build(items):\n    return LinkedList(reversed(items))\n")
ALWAYS_EQUAL = ("class Vector:\n    def __init__(self, *a):\n        pass\n"
                "    def __eq__(self, o):\n"
                "        return False\n    def __add__(self, o):\n        return self\n"
                "class _Eq:\n    def __eq__(self, o):\n        return True\n"
                "def norm2(v):\n    return _Eq()\n")
OPERATORS = [  # (tests, honest, wrong ones)
    # a value the solution returns is still data the trainer judges (norm2): always-equal fails
    ("assert Vector(1, 2) + Vector(3, 4) == Vector(4, 6)\nassert norm2(Vector(3, 4)) == 25", VECTOR,
     [VECTOR.replace("self.x + o.x", "self.x - o.x"), ALWAYS_EQUAL,
      VECTOR.replace("v.y * v.y", "v.y")]),
    (("v = Vector(1, 2)\nw = v + v\nassert w == Vector(2, 4)\nassert v * 3 == Vector(3, 6)\n"
      "assert -v == Vector(-1, -2)"), VECTOR,
     [VECTOR.replace("self.x * k", "self.x + k"), VECTOR.replace("(-self.x", "(self.x")]),
    (("def test_vectors():\n"
      "    assert sorted([Vector(2, 1), Vector(1, 2)]) == [Vector(1, 2), Vector(2, 1)]\n"
      "    assert Vector(1, 2) in {Vector(0, 0), Vector(1, 2)}\n"
      "    assert Vector(1, 2) != Vector(2, 1)"),
     VECTOR,
     [VECTOR.replace("< (o.x", "> (o.x"), VECTOR.replace("(self.x, self.y) == (o.x", "(o.x")]),
    ("assert list(Vector(5, 7)) == [5, 7]\nassert tuple(Vector(1, 2)) == (1, 2)", VECTOR,
     [VECTOR.replace("iter((self.x, self.y))", "iter((self.y, self.x))")]),
    ("assert make_point(1, 2) == Point(1, 2)\nassert mirror(Point(1, 2)) == Point(2, 1)", POINT,
     [POINT.replace("return Point(a, b)", "return Point(b, a)"),
      POINT.replace("Point(p.y, p.x)", "p")]),
    (("from solution import Point, diagonal\n\ndef test_diagonal():\n    p = Point(1, 1)\n"
      "    assert diagonal(2) == [Point(0, 0), p]\n    assert p in diagonal(3)"), POINT,
     [POINT.replace("Point(i, i)", "Point(i, 0)")]),
    ("assert list(build([1, 2, 3])) == [3, 2, 1]\nassert list(LinkedList([1, 2])) == [1, 2]",
     LINKED,
     [LINKED.replace("reversed(items)", "items"), LINKED.replace("iter(self.items)", "iter([])")]),
]


@pytest.mark.parametrize("case", range(len(OPERATORS)))
def test_operators_between_the_solutions_objects_run_in_the_sandbox(case):
    tests, good, wrongs = OPERATORS[case]
    both(good, tests, 1.0)
    assert run_python(good, tests=tests).trusted
    for wrong in wrongs:
        both(wrong, tests, 0.0)


# ------------------------------------------------------------------ what the test binds, the
# solution cannot rebind

REBIND = ("import sys\n{target}def {name}(*args):\n"
          "    sys._getframe(1).f_globals[{var!r}] = {value}\n    return {value}\n")
# (reference, honest, the name the wrong solution rebinds in its caller's frame, to what)
REBINDS = [
    ({"tests": "assert my_sorted(data) == sorted(data)", "setup": "data = [3, 1, 2]"},
     "def my_sorted(x):\n    return sorted(x)\n", "my_sorted", "data", "[9]"),
    ({"tests": "def test_x():\n    assert my_sorted(data) == sorted(data)",
      "setup": "data = [3, 1, 2]"},
     "def my_sorted(x):\n    return sorted(x)\n", "my_sorted", "data", "[9]"),
    ("data = [3, 1, 2]\nassert my_sorted(data) == sorted(data)",
     "def my_sorted(x):\n    return sorted(x)\n", "my_sorted", "data", "[9]"),
    ({"tests": "lst = [3, 1, 2]\nsort_in_place(lst)\nassert lst == expected",
      "setup": "expected = [1, 2, 3]"},
     "def sort_in_place(x):\n    x.sort()\n", "sort_in_place", "lst", "[1, 2, 3]"),
    ("result = double(4)\ntouch()\nassert result == 8",
     "def double(x):\n    return 2 * x\ndef touch():\n    pass\n", "touch", "result", "8"),
]


@pytest.mark.parametrize("case", range(len(REBINDS)))
def test_what_the_tests_bind_the_solution_cannot_rebind(case):
    reference, good, name, var, value = REBINDS[case]
    both(good, reference, 1.0)
    other = "def double(x):\n    return 0\n" if name == "touch" else ""
    both(REBIND.format(target=other, name=name, var=var, value=value), reference, 0.0)
    # the same objects stay bound: an in-place sort passes, and mutating an input the test says
    # must not change fails, as in pytest
    both("def sort_in_place(x):\n    x.sort()\n",
         {"tests": "sort_in_place(data)\nassert data == [1, 2, 3]", "setup": "data = [3, 1, 2]"},
         1.0)
    both("def total(x):\n    s = sum(x)\n    x.clear()\n    return s\n",
         {"tests": "assert total(data) == 6\nassert data == [1, 2, 3]",
          "setup": "data = [1, 2, 3]"}, 0.0)


# ------------------------------------------------------------------ checks that draw random inputs,
# mixins

RANDOM_CHECKS = [  # (tests, entry point, honest)
    (("def check(candidate):\n    import random\n    assert candidate(2, 3) == 5\n"
      "    for i in range(50):\n        x, y = random.randint(0, 1000), random.randint(0, 1000)\n"
      "        assert candidate(x, y) == x + y\n"), "add", "def add(a, b):\n    return a + b\n"),
    (("def check(candidate):\n    from random import randint, choice\n    import string\n"
      "    letters = string.ascii_lowercase\n    for _ in range(30):\n"
      "        s = ''.join(choice(letters) for i in range(randint(5, 10)))\n"
      "        encoded = encode(s)\n        assert candidate(encoded) == s\n"), "decode",
     "def encode(s):\n    return s[::-1]\ndef decode(s):\n    return s[::-1]\n"),
    (("def check(candidate):\n    import random\n    import copy\n    rng = random.Random(42)\n"
      "    for _ in range(30):\n        xs = []\n        for _ in range(rng.randint(1, 6)):\n"
      "            x = rng.randint(-5, 5)\n            if x == 0:\n                x = 1\n"
      "            xs.append(x)\n        rng.shuffle(xs)\n"
      "        assert candidate(copy.deepcopy(xs)) == sorted(xs)\n"), "sort_list",
     "def sort_list(xs):\n    return sorted(xs)\n"),
    (("import random\n\ndef test_add():\n    random.seed(7)\n    for _ in range(20):\n"
      "        a = random.random()\n        assert add(a, 1) == a + 1\n"), None,
     "def add(a, b):\n    return a + b\n"),
]
ALWAYS_EQ = ("class _Eq(str):\n    def __eq__(self, o):\n        return True\n"
             "    __hash__ = str.__hash__\n"
             "def {name}(*args):\n    return _Eq()\ndef encode(s):\n    return s\n")


@pytest.mark.parametrize("case", range(len(RANDOM_CHECKS)))
def test_checks_that_draw_random_inputs_are_judged_by_the_trainer(case):
    tests, entry_point, good = RANDOM_CHECKS[case]
    reference = {"tests": tests, "entry_point": entry_point} if entry_point else tests
    both(good, reference, 1.0)
    assert run_python(good, tests=tests, entry_point=entry_point).trusted
    name = entry_point or "add"
    wrong = good.replace("return a + b", "return a + b + (a > 0.5)").replace(
        "def decode(s):\n    return s[::-1]", "def decode(s):\n    return s").replace(
        "sorted(xs)", "xs")
    assert wrong != good
    both(wrong, reference, 0.0)
    both(ALWAYS_EQ.format(name=name), reference, 0.0)


def test_the_tests_random_draws_are_the_plans_own():
    # the trainer and the judge helper build the plan separately: the draws must agree, and the
    # caller's global random is neither read nor advanced
    import random

    from gmts.rewards import testplan
    tests = RANDOM_CHECKS[0][0]
    random.seed(1)
    expected = random.random()
    random.seed(1)
    first = testplan.build_plan.__wrapped__(tests, "add")
    assert random.random() == expected
    again = testplan.build_plan.__wrapped__(tests.replace("range(50)", "range(50) "), "add")
    assert [u.steps for u in first.units] == [u.steps for u in again.units]
    assert first.harness is None and not first.untrusted  # judged here: 51 calls, 50 drawn
    assert sum("eval" in step for step in first.units[0].steps) == 51


MIXINS = [
    ("class AddChecks:\n    def test_add(self):\n        assert add(2, 3) == 5\n"
     "class TestAdd(AddChecks):\n    pass\n"),
    ("import unittest\nclass AddChecks:\n    def test_add(self):\n"
     "        self.assertEqual(add(2, 3), 5)\n"
     "class AddTests(AddChecks, unittest.TestCase):\n    pass\n"),
    ("import unittest\nclass Base(unittest.TestCase):\n    def setUp(self):\n        self.f = add\n"
     "class AddTests(Base):\n    def test_add(self):\n        self.assertEqual(self.f(2, 3), 5)\n"),
    ("class A:\n    def test_a(self):\n        assert add(2, 3) == 5\nclass B(A):\n"
     "    def test_b(self):\n        assert add(1, 1) == 2\nclass TestC(B):\n    pass\n"),
]


@pytest.mark.parametrize("case", range(len(MIXINS)))
def test_test_classes_with_inherited_tests_run_under_pytest(case):
    good, wrong = "def add(a, b):\n    return a + b\n", "def add(a, b):\n    return a * 2 - 1\n"
    assert code(block(good), MIXINS[case]) == 1.0
    # pytest classes run under pytest (refused under trusted_only); unittest TestCases, their
    # mixins and bases included, are judged by the trainer (issue 53)
    testcase = "unittest" in MIXINS[case]
    assert trusted_code(block(good), MIXINS[case]) == (1.0 if testcase else 0.0)
    assert code(block(wrong), MIXINS[case]) == 0.0
    assert trusted_code(block(wrong), MIXINS[case]) == 0.0
    # every inherited test is expected by name: one that does not run is a failure
    hidden = MIXINS[case] + "\ndel AddChecks.test_add\n" if "AddChecks" in MIXINS[case] else None
    if hidden:  # a class the module changes after defining it: pytest's, refused if trusted
        assert code(block(good), hidden) == 0.0
        assert trusted_code(block(good), hidden) == 0.0
