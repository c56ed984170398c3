"""The code reward, second round (issue 22): each kind of hole as a class of attacks, several
instances each.

Every attack is a WRONG solution that scores 0.0 under get_reward("code") and under
trusted_only=True; every honest case beside it scores 1.0 (under trusted_only too, where the trainer
can judge it). Kinds:
1. tests the plan does not understand (classes, check() without entry point, nothing to judge);
2. the sandbox computing part of the expected side (builtins, names and modules of the tests,
   methods of returned values);
3. pytest's semantics (approx, raises, identity, mutation, generators, big ints);
4. the trainer's cost of reading a forged report;
5. memory per run;
6. uids of concurrent runs.
Nothing may be left in /tmp, /dev/shm, the process table or the cgroup tree.
"""
import glob
import json
import os
import random
import subprocess
import sys
import time

import pytest

from gmts.rewards import code_stats, get_reward, sandbox, testplan
from gmts.rewards.sandbox import memory_limit, run_child, run_python, run_uids

code = get_reward("code")
trusted_code = get_reward("code", trusted_only=True)


def block(src):
    return f"```python\n{src}\n```"


def _sandbox_leftovers():
    files = set()
    for d in ("/tmp", "/dev/shm"):
        for p in glob.glob(os.path.join(d, "*")):
            try:
                # this process's fallback folders (named with its pid), and files of a run uid
                mine = os.path.basename(p).startswith(f"gmts-sandbox-{os.getpid()}-")
                if os.lstat(p).st_uid in run_uids() or mine:
                    files.add(p)
            except OSError:
                pass
    procs = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid in run_uids() and sandbox.belongs_to_us(pid):
                procs.add(pid)
        except OSError:
            pass
    cgroups = set()
    for probed in (sandbox._cgroup, sandbox._cpu_cgroup):  # ours, not a concurrent test run's
        if probed and probed[0]:
            cgroups |= set(glob.glob(os.path.join(probed[1], f"gmts-*-{os.getpid()}-*")))
    return files, procs, cgroups


@pytest.fixture
def clean():
    """No new sandbox file in /tmp or /dev/shm, no process of a run's uid, no run cgroup left
    behind."""
    memory_limit()  # probe once before the snapshot
    sandbox.cpu_limit()
    before = _sandbox_leftovers()
    yield
    after = _sandbox_leftovers()
    for kind, old, new in zip(("files", "processes", "cgroups"), before, after):
        assert new - old == set(), kind


def both_zero(solution, reference):
    assert code(block(solution), reference) == 0.0
    assert trusted_code(block(solution), reference) == 0.0


# ------------------------------------------------------------------ 1. tests the plan does not
# understand

ADD_GOOD = "def add(a, b):\n    return a + b\n"
PYTEST_CLASS = ("from solution import add\n\nclass TestAdd:\n    def test_small(self):\n"
                "        assert add(1, 2) == 3\n\n"
                "    def test_zero(self):\n        assert add(0, 0) == 0\n")
UNITTEST_CLASS = ("import unittest\nfrom solution import add\n\nclass AddCase(unittest.TestCase):\n"
                  "    def test_small(self):\n        self.assertEqual(add(1, 2), 3)\n\n"
                  "    def test_neg(self):\n        self.assertEqual(add(-1, -1), -2)\n\n"
                  "if __name__ == '__main__':\n    unittest.main()\n")
# two parametrize marks on a pytest class's test (one alone is the trainer's): pytest's
PARAM_CLASS = ("import pytest\nfrom solution import add\n\nclass TestAdd:\n"
               "    @pytest.mark.parametrize('a,b,c', [(1, 2, 3), (2, 2, 4)])\n"
               "    @pytest.mark.parametrize('d', [0])\n"
               "    def test_rows(self, a, b, c, d):\n"
               "        assert add(a, b) == c + d\n")
# a TestCase is judged by the trainer (issue 53), setUpClass included; one whose setUpClass calls
# a builtin outside the trainer's safe list runs under pytest
UNITTEST_SETUP_CLASS = UNITTEST_CLASS.replace(
    "    def test_small(self):", "    @classmethod\n    def setUpClass(cls):\n"
    "        cls.n = hash(1)\n\n    def test_small(self):")
# a pytest class is judged by the trainer too; one whose test takes `request` runs under pytest
PYTEST_CLASS_FIXTURE = PYTEST_CLASS.replace("test_zero(self)", "test_zero(self, request)")
RUNNABLE_UNKNOWN = {"pytest_class": PYTEST_CLASS_FIXTURE, "unittest_case": UNITTEST_SETUP_CLASS,
                    "class_parametrize": PARAM_CLASS}
NEVER_RUN = {  # test functions whose body a plain call does not run: not a pass, for any solution
    "async_test": "from solution import add\n\nasync def test_add():\n    assert add(1, 2) == 3\n",
    "generator_test": ("from solution import add\n\ndef test_add():\n    yield\n"
                       "    assert add(1, 2) == 3\n"),
    "async_method": ("from solution import add\n\nclass TestAdd:\n    async def test_add(self):\n"
                     "        assert add(1, 2) == 3\n"),
}
UNJUDGEABLE = {
    "check_without_entry_point": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
    "only_imports": "import pytest\nfrom solution import add\n",
    "only_a_helper": "def helper(x):\n    assert x\n",
    "class_without_tests": "from solution import add\n\nclass TestAdd:\n    pass\n",
    "only_a_docstring": '"""Tests to come."""\n',
}
NOTHING = {"pass": "pass", "exit": "import os\nos._exit(0)",
           "wrong": "def add(a, b):\n    return 0\n"}


@pytest.mark.parametrize("tests", sorted(RUNNABLE_UNKNOWN))
@pytest.mark.parametrize("solution", sorted(NOTHING))
def test_test_classes_run_in_the_harness_and_wrong_fails(tests, solution, clean):
    both_zero(NOTHING[solution], RUNNABLE_UNKNOWN[tests])


@pytest.mark.parametrize("tests", sorted(RUNNABLE_UNKNOWN))
def test_test_classes_pass_honest_code_untrusted(tests, clean):
    plan = testplan.build_plan(RUNNABLE_UNKNOWN[tests])
    assert plan.harness is not None and plan.untrusted >= 2 and plan.harness_tests
    code_stats(reset=True)
    assert code(block(ADD_GOOD), RUNNABLE_UNKNOWN[tests]) == 1.0
    # judged in the sandbox: refused
    assert trusted_code(block(ADD_GOOD), RUNNABLE_UNKNOWN[tests]) == 0.0
    stats = code_stats()
    assert stats["untrusted_runs"] == 1 and stats["refused_runs"] == 1


@pytest.mark.parametrize("tests", sorted(NEVER_RUN))
@pytest.mark.parametrize("solution", sorted(NOTHING))
def test_tests_whose_body_never_runs_are_not_a_pass(tests, solution, clean):
    both_zero(NOTHING[solution], NEVER_RUN[tests])


@pytest.mark.parametrize("tests", [UNITTEST_CLASS, PYTEST_CLASS], ids=["unittest", "pytest"])
def test_a_plain_test_class_judged_by_the_trainer(tests, clean):
    plan = testplan.build_plan(tests)
    assert (plan.harness, plan.trusted, plan.untrusted) == (None, 2, 0)
    assert code(block(ADD_GOOD), tests) == 1.0
    assert trusted_code(block(ADD_GOOD), tests) == 1.0
    for solution in NOTHING.values():
        both_zero(solution, tests)


def test_a_test_the_harness_skips_is_not_a_pass(clean):
    # a skip at run time, and a class whose test method never runs: the parent expects every test
    # by name
    skipped = UNITTEST_SETUP_CLASS.replace(
        "self.assertEqual(add(-1, -1), -2)", "self.skipTest('later')")
    assert code(block(ADD_GOOD), skipped) == 0.0
    hidden = PYTEST_CLASS + "\nTestAdd.test_zero = None\n"
    assert code(block(ADD_GOOD), hidden) == 0.0
    # unittest's own unconditional skip mark: that test is not run, counted neither way (as pytest
    # and unittest's runner count it); the other still judges
    marked = UNITTEST_CLASS.replace("def test_neg(self):",
                                    "@unittest.skip('later')\n    def test_neg(self):")
    assert code(block(ADD_GOOD), marked) == 1.0
    not_neg = "def add(a, b):\n    return a + b if a > 0 else 0\n"
    assert (code(block(not_neg), marked), trusted_code(block(not_neg), marked)) == (1.0, 1.0)
    assert code(block("def add(a, b):\n    return 0\n"), marked) == 0.0


@pytest.mark.parametrize("tests", sorted(UNJUDGEABLE))
@pytest.mark.parametrize("solution", ["pass", "good"])
def test_nothing_judged_is_never_a_pass(tests, solution, clean):
    code_stats(reset=True)
    both_zero(ADD_GOOD if solution == "good" else "pass", UNJUDGEABLE[tests])
    assert code_stats()["unjudged_runs"] == 2


# ------------------------------------------------------------------ 2. the sandbox computing the
# expected side

# (tests, honest solution, wrong solutions that try to make the child compute the expected side)
REBIND = "import sys\n"
EXPECTED_SIDE = {
    "builtin_bin": ("assert to_binary(10) == bin(10)[2:]",
                    "def to_binary(n):\n    return format(n, 'b')\n", [
        "import builtins\nbuiltins.bin = lambda n: '0bX'\ndef to_binary(n):\n    return 'X'\n"]),
    "builtin_sorted_len": ("assert count(['a', 'b']) == len(sorted(['a', 'b']))",
                           "def count(xs):\n    return len(xs)\n", [
        ("import builtins\nbuiltins.len = lambda x: 0\nbuiltins.sorted = lambda x: []\n"
         "def count(xs):\n    return 0\n")]),
    "module_constant_mbpp": ("n = 12\nassert gcd(n, 0) == n",
                             "def gcd(a, b):\n    return a if b == 0 else gcd(b, a % b)\n", [
        REBIND + "def gcd(a, b):\n    sys._getframe(1).f_globals['n'] = 0\n    return 0\n",
        REBIND + ("def gcd(a, b):\n    f = sys._getframe(1)\n    f.f_globals['n'] = 0\n"
                  "    f.f_locals['n'] = 0\n    return 0\n")]),
    "local_in_test_function": (("from solution import gcd\n\ndef test_gcd():\n    n = 12\n"
                                "    assert gcd(n, 0) == n\n"),
                               "def gcd(a, b):\n    return a if b == 0 else gcd(b, a % b)\n", [
        REBIND + "def gcd(a, b):\n    sys._getframe(1).f_globals['n'] = 0\n    return 0\n"]),
    "parametrize_row": (("import pytest\nfrom solution import gcd\n\n"
                         "@pytest.mark.parametrize('n', [12, 7])\n"
                         "def test_gcd(n):\n    assert gcd(n, 0) == n\n"),
                        "def gcd(a, b):\n    return a if b == 0 else gcd(b, a % b)\n", [
        REBIND + "def gcd(a, b):\n    sys._getframe(1).f_globals['n'] = -1\n    return -1\n"]),
    "humaneval_local": ({"tests": ("def check(candidate):\n    n = 12\n"
                                   "    assert candidate(n, 0) == n\n"), "entry_point": "gcd"},
                        "def gcd(a, b):\n    return a if b == 0 else gcd(b, a % b)\n", [
        REBIND + "def gcd(a, b):\n    sys._getframe(1).f_globals['n'] = 0\n    return 0\n"]),
    "module_math": ("import math\nassert my_sin(1.0) == math.sin(1.0)",
                    "import math\ndef my_sin(x):\n    return math.sin(x)\n", [
        "import math\nmath.sin = lambda x: 0.0\ndef my_sin(x):\n    return 0.0\n"]),
    "module_constant_pi": ("import math\nassert area(1.0) == math.pi",
                           "import math\ndef area(r):\n    return math.pi * r * r\n", [
        "import math\nmath.pi = 0.0\ndef area(r):\n    return 0.0\n"]),
    "method_startswith": ("assert greet('Bob').startswith('Hello')",
                          "def greet(n):\n    return 'Hello ' + n\n", [
        ("class S(str):\n    def startswith(self, *a):\n        return True\ndef greet(n):\n"
         "    return S('Bye')\n"),
        ("class D:\n    def startswith(self, *a):\n        return True\ndef greet(n):\n"
         "    return D()\n")]),
    "method_on_bound_name": (("from solution import greet\n\ndef test_greet():\n"
                              "    s = greet('Bob')\n    assert s.startswith('Hello')\n"
                              "    assert s.endswith('Bob')\n"),
                             "def greet(n):\n    return 'Hello ' + n\n", [
        ("class S(str):\n    def startswith(self, *a):\n        return True\n"
         "    endswith = startswith\n"
         "def greet(n):\n    return S('Bye')\n")]),
    "method_of_an_objects_attribute": (("from solution import Greeting\n\ndef test_text():\n"
                                        "    assert Greeting('Bob').text.startswith('Hello')\n"),
                                       ("class Greeting:\n    def __init__(self, n):\n"
                                        "        self.text = 'Hello ' + n\n"), [
        ("class S(str):\n    def startswith(self, *a):\n        return True\nclass Greeting:\n"
         "    def __init__(self, n):\n        self.text = S('Bye')\n")]),
    "loop_variable": ({"tests": ("def check(candidate):\n    for x in range(2, 6):\n"
                                 "        assert candidate(x, 0) == x\n"),
                       "entry_point": "gcd"},
                      "def gcd(a, b):\n    return a if b == 0 else gcd(b, a % b)\n", [
        REBIND + "def gcd(a, b):\n    sys._getframe(1).f_globals['x'] = 0\n    return 0\n"]),
    "comprehension_over_carried_input": (("from solution import odd_squares\n\ndef test_f():\n"
                                          "    lst = list(range(-9, 10))\n"
                                          "    want = sum([i ** 2 for i in lst if i % 2 and i > "
                                          "0])\n"
                                          "    assert odd_squares(lst) == want\n"),
                                         ("def odd_squares(xs):\n    return sum(i * i for i in xs"
                                          " if i % 2 and i > 0)\n"), [
        "def odd_squares(xs):\n    xs.clear()\n    return 0\n"]),
    "method_count_list": ("assert dup([1, 2]).count(1) == 2",
                          "def dup(xs):\n    return xs + xs\n", [
        ("class L(list):\n    def count(self, x):\n        return 2\n"
         "def dup(xs):\n    return L()\n")]),
    "method_isdigit": ("assert digits(5).isdigit()\nassert not digits(-5).isdigit()",
                       "def digits(n):\n    return str(n)\n", [
        ("class S(str):\n    def isdigit(self):\n        return self.startswith('+')\n"
         "def digits(n):\n    return S('+') if n > 0 else 'x'\n")]),
}


@pytest.mark.parametrize("case", sorted(EXPECTED_SIDE))
def test_the_child_never_computes_the_expected_side(case, clean):
    tests, good, attacks = EXPECTED_SIDE[case]
    assert code(block(good), tests) == 1.0
    assert trusted_code(block(good), tests) == 1.0  # judged by the trainer
    for attack in attacks:
        both_zero(attack, tests)


def test_no_expected_value_reaches_the_child():
    for case, (tests, _, _) in EXPECTED_SIDE.items():
        if isinstance(tests, dict):
            tests, entry = tests["tests"], tests["entry_point"]
        else:
            entry = None
        plan = testplan.build_plan(tests, entry)
        sent = json.dumps([u.steps for u in plan.units])
        for forbidden in ("bin(", "math.", "startswith", "endswith", "count(1)", "isdigit",
                          "sorted"):
            assert forbidden not in sent, (case, sent)


# a builtin the trainer does not evaluate: judged inside, untrusted
UNSAFE_BUILTIN = "assert h('x') == hash('x')"


def test_builtins_outside_the_safe_list_are_untrusted(clean):
    plan = testplan.build_plan(UNSAFE_BUILTIN)
    assert plan.trusted == 0 and plan.untrusted == 1
    assert trusted_code(block("def h(x):\n    return hash(x)\n"), UNSAFE_BUILTIN) == 0.0
    # the harness calls the builtins as they were before the solution ran
    assert code(block("import builtins\nbuiltins.hash = lambda x: 0\ndef h(x):\n    return 0\n"),
                UNSAFE_BUILTIN) == 0.0


# ------------------------------------------------------------------ 3. pytest's semantics

APPROX = {  # tests, honest solution, wrong solutions
    "inf": (("import pytest\nfrom solution import f\n\ndef test_f():\n"
             "    assert f() == pytest.approx(float('inf'))\n"),
            "def f():\n    return float('inf')\n",
            ["def f():\n    return 1e308\n", "def f():\n    return 0.0\n"]),
    "abs_only": (("import pytest\nfrom solution import f\n\ndef test_f():\n"
                  "    assert f() == pytest.approx(1e9, abs=0.5)\n"),
                 "def f():\n    return 1e9 + 0.25\n", ["def f():\n    return 1e9 + 100\n"]),
    "from_import": (("from pytest import approx\nfrom solution import f\n\ndef test_f():\n"
                     "    assert f() == approx(0.3)\n"),
                    "def f():\n    return 0.1 + 0.2\n", ["def f():\n    return 0.31\n"]),
    "sequence": (("import pytest\nfrom solution import f\n\ndef test_f():\n"
                  "    assert f() == pytest.approx([0.3, 1.0])\n"),
                 "def f():\n    return [0.1 + 0.2, 1.0]\n",
                 ["def f():\n    return [0.3]\n", "def f():\n    return [0.3, 1.1]\n"]),
    "nan_ok": (("import pytest\nfrom solution import f\n\ndef test_f():\n"
                "    assert f() == pytest.approx(float('nan'), nan_ok=True)\n"),
               "def f():\n    return float('nan')\n", ["def f():\n    return 0.0\n"]),
    "rel": (("import pytest\nfrom solution import f\n\ndef test_f():\n"
             "    assert f() == pytest.approx(100.0, rel=1e-3)\n"),
            "def f():\n    return 100.05\n", ["def f():\n    return 100.2\n"]),
}
RAISES = {
    "builtin": (("import pytest\nfrom solution import f\n\ndef test_f():\n"
                 "    with pytest.raises(ValueError):\n        f(-1)\n"),
                ["def f(x):\n    raise ValueError('negative')\n",
                 ("class NegativeError(ValueError):\n    pass\ndef f(x):\n"
                  "    raise NegativeError('negative')\n")],
                [("class ValueError(Exception):\n    pass\ndef f(x):\n"
                  "    raise ValueError('negative')\n"),
                 "def f(x):\n    return 0\n",
                 ("import builtins\nclass ValueError(Exception):\n    pass\n"
                  "builtins.ValueError = ValueError\n"
                  "def f(x):\n    raise ValueError('x')\n"),
                 "def f(x):\n    raise TypeError('negative')\n"]),
    "tuple_and_match": (("import pytest\nfrom solution import f\n\ndef test_f():\n"
                         "    with pytest.raises((KeyError, ValueError), match='neg.*ive'):\n"
                         "        f(-1)\n"),
                        ["def f(x):\n    raise ValueError('negative input')\n"],
                        ["def f(x):\n    raise ValueError('positive input')\n",
                         "class E(Exception):\n    pass\ndef f(x):\n    raise E('negative')\n"]),
    "solution_class": (("import pytest\nfrom solution import f, InvalidInput\n\ndef test_f():\n"
                        "    with pytest.raises(InvalidInput):\n        f(-1)\n"),
                       [("class InvalidInput(Exception):\n    pass\ndef f(x):\n"
                         "    raise InvalidInput()\n")],
                       [("class InvalidInput(Exception):\n    pass\nclass Other(Exception):\n"
                         "    pass\nOther.__name__ = 'InvalidInput'\n"
                         "def f(x):\n    raise Other()\n")]),
    "from_import": (("from pytest import raises\nfrom solution import f\n\ndef test_f():\n"
                     "    with raises(ZeroDivisionError):\n"
                     "        f(0)\n"), ["def f(x):\n    return 1 / x\n"],
                    ["def f(x):\n    return 0\n"]),
}


@pytest.mark.parametrize("case", sorted(APPROX))
def test_approx_is_pytests(case, clean):
    tests, good, wrongs = APPROX[case]
    assert code(block(good), tests) == 1.0 and trusted_code(block(good), tests) == 1.0
    for wrong in wrongs:
        both_zero(wrong, tests)


@pytest.mark.parametrize("case", sorted(RAISES))
def test_raises_checks_the_real_class(case, clean):
    tests, goods, wrongs = RAISES[case]
    for good in goods:
        assert code(block(good), tests) == 1.0 and trusted_code(block(good), tests) == 1.0
    for wrong in wrongs:
        both_zero(wrong, tests)


IDENTITY = ("from solution import clone\n\ndef test_clone():\n    data = [1, 2]\n"
            "    result = clone(data)\n    assert result == data\n    assert result is not data\n")


def test_identity_is_judged_where_it_exists(clean):
    plan = testplan.build_plan(IDENTITY)
    # identity cannot cross: the harness, untrusted
    assert plan.trusted == 0 and plan.harness is not None
    assert code(block("def clone(xs):\n    return list(xs)\n"), IDENTITY) == 1.0
    both_zero("def clone(xs):\n    return xs\n", IDENTITY)
    ok = ("from solution import f\n\ndef test_f():\n    assert f(1) is None\n"
          "    assert f(2) is True\n    assert type(f(3)) is bool\n")
    good = "def f(x):\n    return None if x == 1 else True\n"
    # against singletons and types, identity survives rebuilding
    assert trusted_code(block(good), ok) == 1.0
    both_zero("def f(x):\n    return 0 if x == 1 else 1\n", ok)


MUTATION = {
    "sorts_in_place": ("lst = [3, 1, 2]\nsort_in_place(lst)\nassert lst == [1, 2, 3]",
                       "def sort_in_place(xs):\n    xs.sort()\n",
                       ["def sort_in_place(xs):\n    return sorted(xs)\n"]),
    "must_not_mutate": (("from solution import sorted_copy\n\ndef test_f():\n"
                         "    data = [3, 1, 2]\n"
                         "    assert sorted_copy(data) == [1, 2, 3]\n"
                         "    assert data == [3, 1, 2]\n"),
                        "def sorted_copy(xs):\n    return sorted(xs)\n",
                        ["def sorted_copy(xs):\n    xs.sort()\n    return xs\n"]),
    "dict_update": ("d = {'a': 1}\nadd_key(d, 'b')\nassert d == {'a': 1, 'b': 0}",
                    "def add_key(d, k):\n    d[k] = 0\n",
                    ["def add_key(d, k):\n    return {**d, k: 0}\n"]),
}


@pytest.mark.parametrize("case", sorted(MUTATION))
def test_in_place_mutation_is_carried_exactly(case, clean):
    tests, good, wrongs = MUTATION[case]
    assert code(block(good), tests) == 1.0 and trusted_code(block(good), tests) == 1.0
    for wrong in wrongs:
        both_zero(wrong, tests)


HONEST_SHAPES = {  # results an honest solution returns that crossed badly before
    "generator_list": ("assert list(evens(6)) == [0, 2, 4]",
                       "def evens(n):\n    return (i for i in range(0, n, 2))\n",
                       "def evens(n):\n    return (i for i in range(1, n, 2))\n"),
    "generator_function_sorted": ("assert sorted(gen(3)) == [0, 1, 2]",
                                  "def gen(n):\n    yield from reversed(range(n))\n",
                                  "def gen(n):\n    yield from range(n + 1)\n"),
    "map_sum": ("assert sum(squares([1, 2])) == 5",
                "def squares(xs):\n    return map(lambda x: x * x, xs)\n",
                "def squares(xs):\n    return map(lambda x: x + x, xs)\n"),
    "big_int": ("import math\nassert fact(2000) == math.factorial(2000)",
                ("def fact(n):\n    r = 1\n    for i in range(2, n + 1):\n        r *= i\n"
                 "    return r\n"),
                "import math\ndef fact(n):\n    return math.factorial(n) + 1\n"),
    "big_int_input": ("n = 10 ** 5000\nassert succ(n) == n + 1", "def succ(n):\n    return n + 1\n",
                      "def succ(n):\n    return n\n"),
    "attribute_of_object": (("from solution import Node, reverse\n\ndef test_rev():\n"
                             "    head = reverse(Node(1, Node(2)))\n"
                             "    assert head.val == 2\n    assert head.next.val == 1\n"),
                            ("class Node:\n    def __init__(self, val, next=None):\n"
                             "        self.val, self.next = val, next\n"
                             "def reverse(h):\n    prev = None\n    while h:\n"
                             "        h.next, prev, h = prev, h, h.next\n    return prev\n"),
                            ("class Node:\n    def __init__(self, val, next=None):\n"
                             "        self.val, self.next = val, next\n"
                             "def reverse(h):\n    return h\n")),
    "object_methods": (("from solution import Stack\n\ndef test_stack():\n    s = Stack()\n"
                        "    s.push(1)\n    s.push(2)\n"
                        "    assert s.pop() == 2\n    assert s.size() == 1\n"),
                       ("class Stack:\n    def __init__(self):\n        self.items = []\n"
                        "    def push(self, x):\n"
                        "        self.items.append(x)\n    def pop(self):\n"
                        "        return self.items.pop()\n"
                        "    def size(self):\n        return len(self.items)\n"),
                       ("class Stack:\n    def push(self, x):\n        pass\n    def pop(self):\n"
                        "        return 1\n"
                        "    def size(self):\n        return 1\n")),
}


@pytest.mark.parametrize("case", sorted(HONEST_SHAPES))
def test_honest_results_cross_exactly(case, clean):
    tests, good, wrong = HONEST_SHAPES[case]
    assert code(block(good), tests) == 1.0 and trusted_code(block(good), tests) == 1.0
    both_zero(wrong, tests)


# ------------------------------------------------------------------ 4. the trainer's cost of a
# forged report

LIMIT = 3.0  # the run's own time limit in these tests
SLACK = 5.0  # what the trainer may spend beyond it (process start and teardown included)


def forge(payload: str) -> str:
    """A wrong solution that writes `payload` (Python bytes expression) to every file descriptor it
    holds beyond stdio (the report file among them), then stops before the child writes its own
    report."""
    return (f"import os\npayload = {payload}\nfor fd in range(3, 64):\n    try:\n"
            f"        if os.path.isfile(f'/proc/self/fd/{{fd}}'):\n"
            f"            os.write(fd, payload)\n    except OSError:\n        pass\nos._exit(0)\n")


UNITS = "b'{\"units\": [[{\"ok\": ' + %s + b'}]]}\\n'"
FORGED = {
    "megabytes_of_newlines": "b'\\n' * (15 << 20)",
    "newlines_then_report": "b'\\n' * (8 << 20) + b'{\"units\": [[{\"ok\": 3}]]}\\n'",
    "many_small_lines": "b'{}\\n' * (4 << 20)",
    "hash_collision_set": UNITS % ("(b'{\"set\": [' + b','.join(str(k * (2**61 - 1)).encode() for "
                                   "k in range(1, 60000)) + b']}')"),
    "hash_collision_list": UNITS % ("(b'[' + b','.join(str(k * (2**61 - 1)).encode() for k in "
                                    "range(1, 60000)) + b']')"),
    "hash_collision_tuples": UNITS % ("(b'[' + b','.join(b'{\"tuple\": [' + str(k * (2**61 - "
                                      "1)).encode() + b']}' for k in range(1, 40000)) + b']')"),
    # the costliest shapes to parse and rebuild, just under the 2 MiB the trainer reads at most
    "one_item_lists_under_the_cap": UNITS % ("(b'[' + b','.join([b'[0]'] * ((2 << 20) // 4 - 64)) "
                                             "+ b']')"),
    "tiny_tuples_under_the_cap": UNITS % ("(b'[' + b','.join([b'{\"tuple\": [0]}'] * ((2 << 20) "
                                          "// 15 - 64)) + b']')"),
    "floats_under_the_cap": UNITS % "(b'[' + b','.join([b'0.5'] * ((2 << 20) // 4 - 64)) + b']')",
    "deep_nesting": UNITS % "(b'[' * 5000000 + b']' * 5000000)",
    "huge_decimal_int": UNITS % "(b'9' * (14 << 20))",
    "huge_hex_int": UNITS % "(b'{\"int\": \"' + b'f' * (14 << 20) + b'\"}')",
    "long_message_vs_match": ("b'{\"units\": [[{\"ok\": null}, {\"exc\": \"ValueError\", \"msg\": "
                              "\"' + b'neg' * (4 << 20) + b'\", \"mro\": [[\"ValueError\", "
                              "\"builtins\"]]}]]}\\n'"),
}
COLLIDING = {"tests": "assert set(f(1)) == {1, 2}\n"}
REFERENCES = {
    "hash_collision_list": COLLIDING,
    "hash_collision_set": COLLIDING,
    "hash_collision_tuples": COLLIDING,
    "long_message_vs_match": {"tests": "import pytest\nfrom solution import f\n\ndef test_f():\n"
                                       "    f(1)\n"
                                       "    with pytest.raises(ValueError, match='neg(.*)*ive'):\n"
                                       "        f(-1)\n"},
}


def test_the_forger_reaches_the_report_channel(clean):
    # control for the cases below: the payload does land in the report file; a forged report passes
    # only when it holds the right values, which is what a correct solution would have returned
    assert code(block(forge("b'{\"units\": [[{\"ok\": 3, \"applied\": 0}]]}\\n'")),
                {"tests": "assert f(1) == 3\n"}) == 1.0
    assert code(block(forge("b'{\"units\": [[{\"ok\": 4, \"applied\": 0}]]}\\n'")),
                {"tests": "assert f(1) == 3\n"}) == 0.0


@pytest.mark.parametrize("case", sorted(FORGED))
def test_a_forged_report_costs_the_trainer_little(case, clean):
    reference = REFERENCES.get(case, {"tests": "assert f(1) == 3\n"})
    bounded = get_reward("code", timeout=LIMIT)
    start = time.monotonic()
    assert bounded(block(forge(FORGED[case])), reference) == 0.0
    assert time.monotonic() - start < LIMIT + SLACK


def test_colliding_results_from_an_honest_child_are_refused_fast(clean):
    # no forging: the solution's own return value, a cheap list of ints sharing one hash, judged by
    # set(...)
    src = "def f(x):\n    return [k * (2 ** 61 - 1) for k in range(1, 50000)]\n"
    start = time.monotonic()
    assert get_reward("code", timeout=LIMIT)(block(src), COLLIDING) == 0.0
    assert time.monotonic() - start < LIMIT + SLACK
    assert testplan.decode([1, 2, 3, 2 ** 61 - 1, 2 ** 61, 7, 7, 7]) == [1, 2, 3, 2 ** 61 - 1,
                                                                         2 ** 61, 7, 7, 7]


def test_a_long_message_is_refused_not_searched(clean):
    tests = ("import pytest\nfrom solution import f\n\ndef test_f():\n"
             "    with pytest.raises(ValueError, match='neg.*ive'):\n        f(-1)\n")
    start = time.monotonic()
    both_zero("def f(x):\n    raise ValueError('neg' * 10 ** 6)\n", tests)
    assert time.monotonic() - start < 2 * (LIMIT + SLACK)
    assert code(block("def f(x):\n    raise ValueError('negative')\n"), tests) == 1.0


# the test's own expression over a small returned number whose VALUE sets the trainer's work
VALUE_BOMBS = {
    "power": ("assert 3 ** f(1) == 27", "def f(x):\n    return 3\n",
              "def f(x):\n    return 10 ** 9\n"),
    "builtin_pow": ("assert pow(7, f(1)) == 49", "def f(x):\n    return 2\n",
                    "def f(x):\n    return 10 ** 9\n"),
    "repeat": ("assert 'ab' * f(1) == 'abab'", "def f(x):\n    return 2\n",
               "def f(x):\n    return 10 ** 10\n"),
    "shift": ("assert 1 << f(1) == 8", "def f(x):\n    return 3\n",
              "def f(x):\n    return 10 ** 12\n"),
    "range_sum": ("assert sum(range(f(1))) == 3", "def f(x):\n    return 3\n",
                  "def f(x):\n    return 10 ** 12\n"),
    "factorial": ("import math\nassert math.factorial(f(1)) == 6", "def f(x):\n    return 3\n",
                  "def f(x):\n    return 10 ** 8\n"),
    "bytes": ("assert len(bytes(f(1))) == 2", "def f(x):\n    return 2\n",
              "def f(x):\n    return 10 ** 10\n"),
}


@pytest.mark.parametrize("case", sorted(VALUE_BOMBS))
def test_a_returned_value_cannot_set_the_trainers_work(case, clean, monkeypatch):
    tests, good, bomb = VALUE_BOMBS[case]
    # the judge's deadline, whatever it is, bounds a verdict: a shorter one here, so that the bombs
    # burn less of the suite's CPU; what a good verdict needs is far below it
    monkeypatch.setattr(sandbox._judge, "JUDGE_TIMEOUT_S", 2.0)
    assert trusted_code(block(good), tests) == 1.0
    start = time.monotonic()
    both_zero(bomb, tests)
    assert time.monotonic() - start < 2 * (2.0 + SLACK)
    assert code(block(good), tests) == 1.0 == trusted_code(block(good), tests)   # judged again


# ------------------------------------------------------------------ 5. memory per run

HOG = """import os, time
def grab(mb):
    return b'x' * (mb << 20)  # written, so resident
own = grab(100)
r, w = os.pipe()
pids = []
for index in range(6):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        try:
            held = grab(100)
            os.write(w, bytes([index]))
            time.sleep(30)
        finally:
            os._exit(0)
    pids.append(pid)
os.close(w)
deadline = time.monotonic() + 4
got = b''
os.set_blocking(r, False)
while time.monotonic() < deadline and len(got) < len(pids):
    try:
        got += os.read(r, 16)
    except BlockingIOError:
        time.sleep(0.05)
# Count the children that hold their 100 MiB NOW (reported and still alive), not every report: the
# OOM killer may take a child that had already reported, and then let the next one finish its
# allocation.
alive = [i for i in set(got) if os.waitpid(pids[i], os.WNOHANG) == (0, 0)]
TOTAL_MB = 100 * (1 + len(alive))
"""


def hog_total(memory_mb: int, src: str = HOG):
    run = run_child({"solution": src, "units": [[{"eval": "TOTAL_MB"}]]}, timeout=20,
                    memory_mb=memory_mb)
    try:
        return testplan.decode(run.report[0]["units"][0][0]["ok"])
    except (IndexError, KeyError, TypeError):
        return None  # the run was killed (the OOM killer, or the limit on its only process)


def test_processes_of_one_run_share_its_memory_limit(clean):
    assert sandbox.sandbox_info()["memory_limit"] == memory_limit()
    # control: the hog works when it fits
    assert hog_total(2048, HOG.replace("range(6)", "range(2)")) == 300
    total = hog_total(350)
    assert total is None or total <= 350, (memory_limit(), total)


def test_without_a_cgroup_a_run_cannot_fork(monkeypatch, clean):
    if os.getuid() != 0:
        pytest.skip("without root, the run's processes share the trainer's uid: RLIMIT_NPROC "
                    "cannot be 1")
    monkeypatch.setattr(sandbox, "_cgroup", ("", ""))
    assert memory_limit() == "rlimit-as, no forks"
    assert hog_total(350) == 100  # its own 100 MiB, and no child at all
    assert code(block(ADD_GOOD), ["assert add(1, 2) == 3"]) == 1.0  # honest code runs as before
    io = {"cases": [{"input": "1 2\n", "output": "3\n"}]}
    assert code(block("a, b = map(int, input().split())\nprint(a + b)"), io) == 1.0


# ------------------------------------------------------------------ 6. uids of concurrent runs

def test_the_reward_does_not_touch_the_callers_random(clean):
    random.seed(1234)
    state = random.getstate()
    assert code(block(ADD_GOOD), ["assert add(1, 2) == 3"]) == 1.0
    assert random.getstate() == state


def test_a_reserved_uid_is_refused_to_every_other_process(clean):
    uid, holder = sandbox._reserve_uid()
    try:
        probe = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n"
                 f"    s.bind('\\0gmts-run-uid-{uid}')\n    print('free')\nexcept OSError:\n"
                 "    print('taken')\n")
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             timeout=60, check=False)
        assert out.stdout.strip() == "taken"
        other, second = sandbox._reserve_uid()  # and within this process too
        second.close()
        assert other != uid
    finally:
        holder.close()


@pytest.mark.parametrize("value", ["100000-101023", " 2000000000-2100000000 "])
def test_runs_take_their_uids_from_the_machines_range(monkeypatch, value):
    """GMTS_SANDBOX_UIDS=FIRST-LAST (inclusive) moves the runs' uids (a machine whose accounts use
    the default ones; the suite's workers each have their own)."""
    monkeypatch.setenv("GMTS_SANDBOX_UIDS", value)
    first, last = map(int, value.split("-"))
    assert sandbox.run_uids() == range(first, last + 1)
    held = [sandbox._reserve_uid() for _ in range(50)]
    assert all(first <= uid <= last for uid, _ in held) and len({u for u, _ in held}) == 50
    for _, holder in held:
        holder.close()
    assert code(block(ADD_GOOD), ["assert add(1, 2) == 3"]) == 1.0     # a run in that range
    assert code(block("def add(a, b):\n    return 0\n"), ["assert add(1, 2) == 3"]) == 0.0


@pytest.mark.parametrize("value", ["5", "abc-def", "1e6-2e6", "100000", "100-200000",
                                   "200000-100000", "100000-100999", "4294966000-4294967295",
                                   "0-4294967294"])
def test_a_bad_uid_range_is_one_line_naming_it(monkeypatch, value):
    from gmts.run.machine import code_reward_env_problem
    monkeypatch.setenv("GMTS_SANDBOX_UIDS", value)
    said = f"GMTS_SANDBOX_UIDS must be FIRST-LAST, a range of at least 1024 uids from 65536 to " \
           f"4294967294, got '{value}'"
    with pytest.raises(ValueError) as err:
        code(block(ADD_GOOD), ["assert add(1, 2) == 3"])
    assert str(err.value) == said and code_reward_env_problem() == said


SEEDED = """
import random, sys, warnings
warnings.simplefilter("ignore")
random.seed(0)  # every data-parallel rank does this
from gmts import rewards
slow = "```python\\nimport time\\ntime.sleep(1.5)\\ndef add(a, b):\\n    return a + b\\n```"
print(rewards.score_batch(["code"] * 4, [slow] * 4, [["assert add(1, 2) == 3"]] * 4, workers=4))
"""


def test_two_processes_seeded_alike_do_not_touch_each_others_runs(clean):
    root = os.path.dirname(os.path.dirname(os.path.abspath(testplan.__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    procs = [subprocess.Popen([sys.executable, "-c", SEEDED], cwd=root, env=env,
                              stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for out, err in outs:
        assert out.strip() == "[1.0, 1.0, 1.0, 1.0]", err[-2000:]


# ------------------------------------------------------------------ the same without bubblewrap


@pytest.mark.parametrize("case", ["module_constant_mbpp", "method_startswith", "builtin_bin"])
def test_the_fallback_judges_alike(case, clean):
    """isolate=False: the fallback layer (no bwrap, no namespaces), which a machine without
    bubblewrap uses."""
    tests, good, attacks = EXPECTED_SIDE[case]
    assert run_python(good, tests=tests, isolate=False).passed
    for attack in attacks:
        assert not run_python(attack, tests=tests, isolate=False).passed
    tests, goods, wrongs = RAISES["builtin"]
    assert all(run_python(g, tests=tests, isolate=False).passed for g in goods)
    assert not any(run_python(w, tests=tests, isolate=False).passed for w in wrongs)
