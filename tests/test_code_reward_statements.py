"""The code reward and the tests' own statements as Python runs them: a lambda's parameter beside
a TestCase method's local of the same name (the trainer renames a method's locals when it inlines
it; the parameter is the lambda's own inside it, its defaults read where it is made), `n += v`
(operator's in-place function: a list extended in place, an int rebound), `d[k] = v`, `del d[k]`
and `d[k] += v` on the test's values or the answer's, a value of the test's changed in place after
a check read it (the check keeps what it read), `global N` in a TestCase method, `while`,
`break`, `continue` and a loop's `else`, `print(...)`, `time.sleep`, `a, *rest = ...`, a loop
over the answer's values whose body only checks, a comprehension reading parts of the answer's
objects (`p.get_height() > 0`), a list or dict comprehension of the answer's calls (`[f(x) for x in
inputs]`). Expected verdicts are the real pytest's (test_code_reward_round5)."""
import os

import pytest
from test_code_reward_round5 import block, judged_as_pytest_says, scores

from gmts.rewards import testplan

_CASE = "import unittest\n\n\nclass T(unittest.TestCase):\n"
SCOPES = {  # name: tests where a lambda's parameter is also a local name of the method
    "beside_a_local": (_CASE + "    def test_a(self):\n        x = 3\n"
                       "        g = lambda x: x + 1\n"
                       "        self.assertEqual(f(g(2)), [3, 2, 1])\n"
                       "        self.assertEqual(x, 3)\n"),
    "given_to_the_answer": (_CASE + "    def test_a(self):\n        x = 3\n"
                            "        self.assertEqual(f(x, key=lambda x: -x), [3, 2, 1])\n"),
    "a_default_of_the_local": (_CASE + "    def test_a(self):\n        x = 2\n"
                               "        g = lambda y, x=x: y + x\n"
                               "        self.assertEqual(f(g(1)), [3, 2, 1])\n"),
    "a_closure_beside_it": (_CASE + "    def test_a(self):\n        k, x = 1, 0\n"
                            "        g = lambda x: x + k\n"
                            "        self.assertEqual(f(g(2) + x), [3, 2, 1])\n"),
    "in_a_helper_method": (_CASE + "    def check(self, n):\n        twice = lambda n: n * 2\n"
                           "        self.assertEqual(f(twice(n) - n), list(range(n, 0, -1)))\n\n"
                           "    def test_a(self):\n        self.check(3)\n        self.check(1)\n"),
    "a_sort_key": (_CASE + "    def test_a(self):\n        p = 0\n"
                   "        r = sorted([(1, 'b'), (0, 'a')], key=lambda p: p[0])\n"
                   "        self.assertEqual(f(3 + p), [3, 2, 1])\n"
                   "        self.assertEqual(r[0][1], 'a')\n"),
}
ANSWERS = (
    ("def f(n, key=None):\n    r = list(range(n, 0, -1))\n"
     "    return sorted(r, key=key) if key else r\n"),
    "def f(n, key=None):\n    return list(range(n))\n",
    "def f(n, key=None):\n    return sorted(range(1, n + 1), key=key, reverse=key is None)\n",
)


@pytest.mark.parametrize("name", sorted(SCOPES))
def test_a_lambdas_parameter_beside_a_local_of_the_same_name(name):
    """pytest's verdict in both modes, the trainer judging the whole file (refused before as "a
    local name also a lambda's parameter")."""
    judged_as_pytest_says(SCOPES, ANSWERS, name)


IN_PLACE = {  # name: tests binding with `op=`, or changing a value of theirs after a check read it
    "an_int": ("def test_a():\n    n = 1\n    n += 2\n    n **= 2\n    n //= 3\n"
               "    assert f(n) == [3, 2, 1]\n"),
    "a_str": (_CASE + "    def test_a(self):\n        s = 'a'\n        s += 'bc'\n"
              "        self.assertEqual(f(len(s)), [3, 2, 1])\n"),
    "a_total_of_results": ("def test_a():\n    total = 0\n    for i in range(1, 4):\n"
                           "        total += f(i)[0]\n    assert total == 6\n"),
    "a_list_of_results": ("def test_a():\n    acc = []\n    for i in range(1, 3):\n"
                          "        acc += f(i)\n    assert acc == [1, 2, 1]\n"),
    "an_alias_sees_it": ("def test_a():\n    xs = [1]\n    ys = xs\n    xs += [2]\n"
                         "    assert ys == [1, 2] and f(len(ys)) == [2, 1]\n"),
    "a_result_extended": "def test_a():\n    r = f(2)\n    r += [0]\n    assert r == [2, 1, 0]\n",
    "after_a_check": ("def test_a():\n    xs = [1]\n    assert len(xs) == 1 and f(1) == [1]\n"
                      "    xs += [2]\n    assert len(xs) == 2 and f(2) == [2, 1]\n"),
    "appended_after_a_check": ("def test_a():\n    xs = []\n    for i in range(1, 4):\n"
                               "        xs.append(i)\n"
                               "        assert len(xs) == i and f(i) == xs[::-1]\n"),
    "popped_in_a_check": ("def test_a():\n    xs = [1, 2, 3]\n"
                          "    assert len(xs) == 3 and f(1) == [1]\n    assert xs.pop() == 3\n"
                          "    assert f(len(xs)) == [2, 1] and xs == [1, 2]\n"),
    "updated_after_a_check": ("def test_a():\n    d = {'a': 1}\n"
                              "    assert d == {'a': 1} and f(1) == [1]\n    d.update(b=2)\n"
                              "    assert len(d) == 2 and f(2) == [2, 1]\n"),
    "inside_another": ("def test_a():\n    xs = [1]\n    rows = [xs]\n"
                       "    assert rows == [[1]] and f(1) == [1]\n    xs.append(2)\n"
                       "    assert rows == [[1, 2]]\n"),
    "an_array": ("import numpy as np\n\n\ndef test_a():\n    a = np.zeros(2)\n"
                 "    assert a.sum() == 0 and f(2) == [2, 1]\n    a += 1\n"
                 "    assert a.sum() == 2\n"),
    "a_global_in_setup": ("import unittest\nN = 0\n\n\nclass T(unittest.TestCase):\n"
                          "    def setUp(self):\n        global N\n        N += 1\n\n"
                          "    def test_a(self):\n        self.assertEqual(f(N), [1])\n\n"
                          "    def test_b(self):\n        self.assertEqual(f(N), [2, 1])\n"),
    "a_global_then_a_function": ("import unittest\nN = 0\n\n\nclass T(unittest.TestCase):\n"
                                 "    def test_a(self):\n        global N\n        N = 2\n"
                                 "        self.assertEqual(f(N), [2, 1])\n\n\n"
                                 "def test_c():\n    assert f(N + 1) == [3, 2, 1]\n"),
    "a_global_in_a_helper": ("import unittest\nN = 0\n\n\nclass T(unittest.TestCase):\n"
                             "    def bump(self, k):\n        global N\n        N = N + k\n"
                             "        return N\n\n    def test_a(self):\n"
                             "        self.assertEqual(f(self.bump(2)), [2, 1])\n\n"
                             "    def test_b(self):\n"
                             "        self.assertEqual(len(f(self.bump(1))), 3)\n"),
}


@pytest.mark.parametrize("name", sorted(IN_PLACE))
def test_an_in_place_change_and_a_global_as_python_runs_them(name):
    """pytest's verdict in both modes, the trainer judging the whole file (before: `op=` and a
    TestCase's `global` refused, and an honest answer 0.0 in both modes where a list, dict or
    array was changed after a check read it)."""
    judged_as_pytest_says(IN_PLACE, ANSWERS, name)


def test_an_in_place_change_is_made_on_the_verdicts_own_copy():
    """`acc += f(i)` is judged at every verdict: the plan's `acc` stays as built, so the same
    answer scores the same each time (and a wrong one in between changes nothing)."""
    tests = IN_PLACE["a_list_of_results"]
    for answer in (ANSWERS[0], ANSWERS[1], ANSWERS[0], ANSWERS[0]):
        want = 1.0 if answer == ANSWERS[0] else 0.0
        assert scores(block(answer), tests) == (want, want)


ITEMS = {  # name: tests setting or deleting an item of a value of theirs or of the answer's
    "an_item_set": ("def test_a():\n    d = {'a': 1}\n    d['b'] = 2\n"
                    "    assert f(len(d)) == [2, 1] and d == {'a': 1, 'b': 2}\n"),
    "a_list_item": ("def test_a():\n    xs = [1, 2]\n    xs[0] = 3\n"
                    "    assert f(xs[0]) == [3, 2, 1]\n"),
    "a_slice": ("def test_a():\n    xs = [1, 2, 3]\n    xs[1:] = [9]\n"
                "    assert f(len(xs)) == [2, 1] and xs == [1, 9]\n"),
    "deleted": ("def test_a():\n    d = {'a': 1, 'b': 2}\n    del d['a']\n"
                "    assert f(len(d)) == [1]\n"),
    "an_item_of_an_item": ("def test_a():\n    d = {'a': {'x': 1}}\n    d['a']['x'] = 2\n"
                           "    assert f(d['a']['x']) == [2, 1]\n"),
    "an_item_plus": ("def test_a():\n    d = {'a': 1}\n    d['a'] += 2\n"
                     "    assert f(d['a']) == [3, 2, 1]\n"),
    "an_item_of_a_result": "def test_a():\n    r = f(2)\n    r[1] = 0\n    assert r == [2, 0]\n",
    "set_after_a_check": ("def test_a():\n    d = {}\n    assert d == {} and f(0) == []\n"
                          "    d['a'] = 1\n    assert f(len(d)) == [1] and d == {'a': 1}\n"),
    "set_from_a_result": ("def test_a():\n    d = {}\n    e = d\n    d['r'] = f(2)\n"
                          "    assert e == {'r': [2, 1]}\n"),
    "set_in_a_loop": ("def test_a():\n    d = {}\n    for i in range(1, 4):\n"
                      "        d[i] = f(i)[0]\n        assert d[i] == i and len(d) == i\n"),
    "a_frame_column": ("import pandas as pd\n\n\ndef test_a():\n"
                       "    df = pd.DataFrame({'a': [1, 2]})\n    df['b'] = df['a'] * 2\n"
                       "    df.loc[0, 'a'] = 5\n    assert f(len(df.columns)) == [2, 1]\n"
                       "    assert df['a'].tolist() == [5, 2]\n"),
    "an_attribute_of_the_test": (_CASE + "    def setUp(self):\n        self.d = {'a': 1}\n\n"
                                 "    def test_a(self):\n        self.d['b'] = 2\n"
                                 "        self.assertEqual(f(len(self.d)), [2, 1])\n\n"
                                 "    def test_b(self):\n"
                                 "        self.assertEqual(f(len(self.d)), [1])\n"),
}


@pytest.mark.parametrize("name", sorted(ITEMS))
def test_an_item_set_or_deleted_by_the_tests(name):
    """pytest's verdict in both modes, the trainer judging the whole file (refused before as
    "assignment to something other than names")."""
    judged_as_pytest_says(ITEMS, ANSWERS, name)


def test_an_item_of_what_is_not_the_tests_value_stays_with_pytest():
    """`os.environ['K'] = v` (the process's environment), an item of a class attribute later tests
    read: pytest's verdict in the default mode, refused under trusted_only with the reason; the
    trainer's own environment untouched."""
    environ = ("import os\n\n\ndef test_a():\n    os.environ['GMTS_ITEM_SET'] = '3'\n"
               "    assert f(int(os.environ['GMTS_ITEM_SET'])) == [3, 2, 1]\n")
    shared = (_CASE + "    D = {'a': 1}\n\n    def test_a(self):\n        self.D['b'] = 2\n"
              "        self.assertEqual(f(len(self.D)), [2, 1])\n\n"
              "    def test_b(self):\n        self.assertEqual(len(self.D), 2)\n")
    for tests, why in ((environ, "an item of os set by the tests"),
                       (shared, "the tests change a value later tests share")):
        plan = testplan.build_plan(tests)
        assert plan.untrusted and why in plan.refusal
        assert scores(block(ANSWERS[0]), tests) == (1.0, 0.0)
        assert scores(block(ANSWERS[1]), tests) == (0.0, 0.0)
    assert "GMTS_ITEM_SET" not in os.environ


FLOW = {  # name: tests with loops the trainer unrolls, prints, and loops over the answer's values
    "a_while_loop": ("def test_a():\n    i = 1\n    while i < 4:\n"
                     "        assert len(f(i)) == i and f(i)[0] == i\n        i += 1\n"),
    "break_and_else": ("def test_a():\n    i = 0\n    while i < 9:\n        if i == 3:\n"
                       "            break\n        i += 1\n    else:\n        assert False\n"
                       "    for j in range(2):\n        pass\n    else:\n        i += j\n"
                       "    assert f(i) == [4, 3, 2, 1]\n"),
    "continue_and_nested_break": ("def test_a():\n    hits = 0\n    for i in range(4):\n"
                                  "        if i % 2:\n            continue\n"
                                  "        for j in range(9):\n            if j > i:\n"
                                  "                break\n            hits += 1\n"
                                  "    assert f(hits) == [4, 3, 2, 1]\n"),
    "a_print": ("def test_a():\n    r = f(3)\n    print('got', r, sep=': ', end='\\n')\n"
                "    assert r == [3, 2, 1]\n"),
    "a_print_capsys_reads": ("def test_a(capsys):\n    print(f(2))\n"
                             "    assert capsys.readouterr().out == '[2, 1]\\n'\n"),
    "a_print_in_a_testcase": ("import sys\n" + _CASE + "    def test_a(self):\n"
                              "        print(f(1), file=sys.stderr)\n"
                              "        self.assertEqual(f(1), [1])\n"),
    "a_loop_over_a_result": ("def test_a():\n    for a, b in zip(f(3), [3, 2, 1]):\n"
                             "        assert a == b\n        assert a > 0\n"),
    "a_loop_in_subtests": (_CASE + "    def test_a(self):\n        r = f(3)\n"
                           "        for i, x in enumerate(r):\n"
                           "            with self.subTest(i=i):\n"
                           "                self.assertEqual(x, 3 - i)\n"
                           "        self.assertEqual(len(r), 3)\n"),
    "a_loop_over_a_computed_result": ("def test_a():\n    r = sorted(f(3))\n"
                                      "    for a, b in zip(r, [1, 2, 3]):\n"
                                      "        assert a == b\n"),
    "a_sleep": "import time\n\n\ndef test_a():\n    time.sleep(0.01)\n    assert f(1) == [1]\n",
    "a_starred_result": ("def test_a():\n    a, *rest = f(3)\n"
                         "    assert a == 3 and rest == [2, 1]\n"),
    "a_starred_middle": ("def test_a():\n    a, *mid, z = f(4)\n"
                         "    assert (a, mid, z) == (4, [3, 2], 1)\n"),
    "starred_in_a_loop": ("def test_a():\n    for a, *rest in [(1, 2), (3, 4, 5, 6)]:\n"
                          "        assert f(a)[0] == a and len(rest) == a\n"),
}
OBJECTS = {  # name: tests reading parts of the answer's objects in a comprehension or loop
    "all_greater": "def test_a():\n    assert all(n.val > 0 for n in g(3))\n",
    "a_loop": "def test_a():\n    for n in g(3):\n        assert n.val > 0 and n.label() != ''\n",
    "a_sum": "def test_a():\n    assert sum(n.val * 2 for n in g(3)) == 12\n",
    "enumerated": ("def test_a():\n    d = {i: n.val - i for i, n in enumerate(g(3))}\n"
                   "    assert d == {0: 1, 1: 1, 2: 1}\n"),
    "filtered": "def test_a():\n    assert [n.val + 1 for n in g(4) if n.val > 2] == [4, 5]\n",
}
OBJECT_ANSWERS = (
    ("class Node:\n    def __init__(self, v):\n        self.val = v\n\n"
     "    def label(self):\n        return f'N{self.val}'\n\n"
     "def g(n):\n    return [Node(i + 1) for i in range(n)]\n"),
    ("class Node:\n    def __init__(self, v):\n        self.val = v\n\n"
     "    def label(self):\n        return ''\n\n"
     "def g(n):\n    return [Node(i) for i in range(n)]\n"),
)


@pytest.mark.parametrize("name", sorted(FLOW))
def test_loops_and_prints_as_python_runs_them(name):
    """pytest's verdict in both modes, the trainer judging the whole file (refused before: a
    while, a break or continue, a loop's else, a print, a sleep, a starred target, a loop over the
    answer's values)."""
    judged_as_pytest_says(FLOW, ANSWERS, name)


@pytest.mark.parametrize("name", sorted(OBJECTS))
def test_parts_of_the_answers_objects_read_in_the_child(name):
    """`all(n.val > 0 for n in g(3))`: the objects' parts read in the child, the rest here;
    pytest's verdict in both modes (before: an honest answer 0.0 in both modes, its objects
    crossing as no data)."""
    judged_as_pytest_says(OBJECTS, OBJECT_ANSWERS, name)


def test_a_print_runs_the_answers_str_in_the_child():
    """An object whose `__str__` raises, printed by the test: pytest's failure, in both modes;
    what it prints reaches capsys."""
    def answer(body: str) -> str:
        return OBJECT_ANSWERS[0].replace("    def label", f"    def __str__(self):\n{body}\n"
                                                        "    def label")
    tests = "def test_a():\n    print(g(1)[0])\n    assert g(1)[0].val == 1\n"
    assert testplan.build_plan(tests).harness is None
    assert scores(block(answer("        return 1 / 0\n")), tests) == (0.0, 0.0)
    assert scores(block(OBJECT_ANSWERS[0]), tests) == (1.0, 1.0)
    tests = ("def test_a(capsys):\n    print(g(2)[1], 'x')\n"
             "    assert capsys.readouterr().out == 'N2 x\\n'\n")
    assert testplan.build_plan(tests).harness is None
    assert scores(block(answer("        return self.label()\n")), tests) == (1.0, 1.0)
    assert scores(block(OBJECT_ANSWERS[0]), tests) == (0.0, 0.0)


def test_a_loop_over_the_answers_values_that_binds_stays_with_pytest():
    """A loop over a result whose body binds a name, or whose name a later statement reads:
    pytest's verdict, refused under trusted_only; more than MAX_UNROLL rounds: the same."""
    for tests in (("def test_a():\n    for x in f(3):\n        y = x + 1\n"
                   "        assert y > 1\n"),
                  "def test_a():\n    for x in f(3):\n        assert x > 0\n    assert x == 1\n",
                  ("def test_a():\n    i = 0\n    while i < 30000:\n        i += 1\n"
                   "    assert f(1) == [1]\n")):
        assert testplan.build_plan(tests).trusted == 0
        assert scores(block(ANSWERS[0]), tests) == (1.0, 0.0)
        assert scores(block(ANSWERS[1]), tests) == (0.0, 0.0)


CALLS = {  # name: tests building a list, set or dict of the answer's results in a comprehension
    "a_list": "def test_a():\n    assert [f(x) for x in range(1, 3)] == [[1], [2, 1]]\n",
    "assigned_with_keywords": ("def test_a():\n    inputs = [1, 2]\n"
                               "    results = [f(x, key=abs) for x in inputs]\n"
                               "    assert results == [[1], [1, 2]]\n"),
    "a_dict_with_an_if": ("def test_a():\n    d = {k: f(k) for k in (0, 1, 2) if k > 0}\n"
                          "    assert d == {1: [1], 2: [2, 1]}\n"),
    "a_value_of_the_tests": ("def test_a():\n    n = 3\n    assert [f(n) for _ in 'ab'] == "
                             "[[3, 2, 1]] * 2\n"),
    "in_a_testcase": (_CASE + "    def test_a(self):\n        cases = [(1, [1]), (2, [2, 1])]\n"
                      "        self.assertEqual([f(n) for n, _ in cases],\n"
                      "                         [w for _, w in cases])\n"),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_comprehension_of_the_answers_calls(name):
    """The child makes the comprehension whole (the iterable and the tests' values as it sees
    them), its items crossing as data: pytest's verdict in both modes (refused before as "a call
    of the solution's inside a lambda or comprehension")."""
    judged_as_pytest_says(CALLS, ANSWERS, name)


def test_the_inputs_a_comprehension_hands_over_are_the_childs():
    """`[f(d) for d in data]` with an answer that changes each list: the test reads `data` after
    as pytest does (changed by an answer that changes it, unchanged otherwise)."""
    changes = "def f(d):\n    d.append(0)\n    return len(d)\n"
    keeps = "def f(d):\n    return len(d) + 1\n"
    for after, wants in (("[[1, 0], [2, 3, 0]]", (1.0, 0.0)), ("[[1], [2, 3]]", (0.0, 1.0))):
        tests = ("def test_a():\n    data = [[1], [2, 3]]\n    lens = [f(d) for d in data]\n"
                 f"    assert lens == [2, 3] and data == {after}\n")
        assert testplan.build_plan(tests).harness is None
        for answer, want in zip((changes, keeps), wants, strict=True):
            assert scores(block(answer), tests) == (want, want)
