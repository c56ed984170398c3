"""The code reward and the tests' own state: a check the trainer judges at every verdict (the
judge keeps one plan per problem, for every answer of a group) gives one value at each, and a test
that draws from a seeded global random state after the answer drew from it is judged as pytest
judges it (one stream). Expected verdicts are the real pytest's (test_code_reward_round5)."""
import json
import random

import pytest
from test_code_reward_round5 import block, scores, verdict

from gmts.rewards import testplan


def _draws(seed: int, n: int, draw=lambda r: r.randint(1, 100)) -> list:
    """The first n draws after random.seed(seed), as the tests below make them."""
    r = random.Random(seed)
    return [draw(r) for _ in range(n)]


def _verdicts(tests: str, results: list, times: int = 3) -> list:
    """The judge's verdict on one run's results (a unit's), `times` over on the plan it keeps."""
    return [testplan.judge(testplan.build_plan(tests), [results]) for _ in range(times)]


CHECK_STATE = {  # name: (tests, the values an answer pytest passes returns, in order)
    # the expected side draws from the seeded state after the test's own draw
    "seeded_draw": (("import random\n\ndef test_a():\n    random.seed(1)\n"
                    "    x = random.random()\n    assert f(x) == random.random()\n"),
                    [_draws(1, 2, lambda r: r.random())[1]]),
    "from_import": (("from random import randint, seed\n\ndef test_a():\n    seed(3)\n"
                    "    assert f(0) == randint(1, 100)\n"), [_draws(3, 1)[0]]),
    "own_random": (("import random\n\ndef test_a():\n    rng = random.Random(3)\n"
                   "    assert f(0) == rng.randint(1, 100)\n"), [_draws(3, 1)[0]]),
    "testcase_random": (("import random\nimport unittest\n\nclass T(unittest.TestCase):\n"
                         "    def setUp(self):\n        self.rng = random.Random(3)\n\n"
                         "    def test_a(self):\n"
                         "        self.assertEqual(f(0), self.rng.randint(1, 100))\n"),
                        [_draws(3, 1)[0]]),
    "list_pop": (("def test_a():\n    items = [1, 2, 3]\n    assert f(0) == items.pop()\n"
                 "    assert f(1) == items.pop()\n"), [3, 2]),
    "iterator": (("def test_a():\n    it = map(abs, [-4, -5])\n    assert f(0) == next(it)\n"
                 "    assert f(1) == sum(it)\n"), [4, 5]),
    "heappop": (("import heapq\n\ndef test_a():\n    h = [3, 1, 2]\n    heapq.heapify(h)\n"
                 "    assert f(0) == heapq.heappop(h)\n    assert f(1) == heapq.heappop(h)\n"),
                [1, 2]),
    "deque": (("from collections import deque\n\ndef test_a():\n    q = deque([4, 5])\n"
               "    assert f(0) == q.popleft()\n    assert f(1) == q.popleft()\n"), [4, 5]),
    "islice": (("import itertools\n\ndef test_a():\n    it = map(abs, [-1, -2, -3])\n"
                "    assert f(0) == list(itertools.islice(it, 2))\n    assert f(1) == list(it)\n"),
               [[1, 2], [3]]),
    "insort": (("import bisect\n\ndef test_a():\n    a = [1, 3]\n"
                "    assert f(0) == [bisect.insort(a, 2), a]\n"), [[None, [1, 2, 3]]]),
    "numpy_draw": (("import numpy as np\n\ndef test_a():\n    np.random.seed(2)\n"
                   "    assert f(0) == np.random.randint(0, 100)\n"), None),
}


def _results(steps: list, values: list) -> list:
    """A child's results for one unit: each eval step returns the next of `values`; a draws step
    finds the state the plan expects."""
    values = iter(values)
    return [{"ok": next(values), "applied": 0} if "eval" in s else {"ok": True} if "draws" in s
            else {"ok": None} for s in steps]


@pytest.mark.parametrize("name", sorted(CHECK_STATE))
def test_a_check_changing_the_tests_state_gives_one_verdict_at_every_verdict(name):
    """`assert f(x) == random.random()`, `items.pop()`, `heappop(h)`, `next(it)`: the judge
    evaluates a check once per verdict on the plan it keeps; each such call is made once, where
    the statement stands, so the second answer of a group is judged as the first. A wrong value
    fails every time."""
    tests, values = CHECK_STATE[name]
    if values is None:
        numpy = pytest.importorskip("numpy")
        values = [int(numpy.random.RandomState(2).randint(0, 100))]
    plan = testplan.build_plan(tests)
    assert plan.harness is None
    steps = plan.units[0].steps
    assert _verdicts(tests, _results(steps, values)) == [True] * 3
    assert _verdicts(tests, _results(steps, [[v] for v in values])) == [False] * 3


@pytest.mark.parametrize("tests", [
    "import random\n\ndef test_a():\n    assert f(0) == 1 or f(0) == random.random()\n",
    "import random\n\ndef test_a():\n    assert random.choice(f(0)) == 1\n",
    "def test_a():\n    items = [1, 2]\n    assert [items.pop() for _ in f(0)] == [2]\n"])
def test_a_change_of_state_on_some_paths_or_on_the_answers_values_is_pytests(tests):
    """A draw the check makes only if an earlier operand is false, or on what the answer returned,
    cannot be made while planning: the harness runs that test."""
    plan = testplan.build_plan(tests)
    assert plan.harness is not None and "a change of the tests' own state" in plan.refusal


HELPERS = {  # name: tests whose helper changes the tests' state, or draws, each time it runs
    "adds_to_a_set": ("seen = set()\n\ndef record(x):\n    assert x not in seen\n"
                      "    seen.add(x)\n\ndef test_a():\n    record(f(1))\n    record(f(2))\n"),
    "appends_then_counted": ("calls = []\n\ndef verify(x, want):\n    calls.append(x)\n"
                             "    assert x == want\n\ndef test_a():\n    verify(f(1), 1)\n"
                             "    verify(f(2), 2)\n    assert len(calls) == 2\n"),
    "counts_in_a_dict": ("counts = {}\n\ndef tally(x):\n    counts[x] = counts.get(x, 0) + 1\n"
                         "    assert counts[x] == 1\n\ndef test_a():\n    tally(f(1))\n"
                         "    tally(f(2))\n"),
    "draws": ("import random\n\ndef noise():\n    return random.random()\n\n"
              "def test_a():\n    random.seed(5)\n    assert abs(f(2) - 2 - noise()) < 1e-9\n"),
}
HELPER_ANSWERS = (
    f"def f(i):\n    return i + {_draws(5, 1, lambda r: r.random())[0]!r}\n",
    "def f(i):\n    return 1\n",
    "def f(i):\n    return i\n",
)


@pytest.mark.parametrize("name", sorted(HELPERS))
def test_a_helper_changing_the_tests_state_is_pytests(name):
    """A helper of the tests' that adds to a set, appends to a list, counts in a dict or draws
    would run at every verdict on the plan the judge keeps (the second answer of a group failing
    where the first passed): pytest runs that test, the same answer scored twice gets pytest's
    verdict twice; trusted_only refuses it."""
    tests = HELPERS[name]
    plan = testplan.build_plan(tests)
    assert plan.harness is not None
    wants = {a: verdict(HELPERS, HELPER_ANSWERS, name, a) for a in HELPER_ANSWERS}
    assert set(wants.values()) == {0.0, 1.0}
    for answer, want in wants.items():
        assert [scores(block(answer), tests) for _ in range(2)] == [(want, 0.0)] * 2, answer


R3, R4 = _draws(3, 3), _draws(4, 3)
DRAWN_AFTER = {  # name: tests that draw after the answer ran
    "after_the_call": ("import random\n\ndef test_a():\n    random.seed(3)\n"
                       "    r = task_func(2)\n    x = random.randint(1, 100)\n"
                       f"    assert len(r) == 2\n    assert x == {R3[2]}\n"),
    "next_test": ("import random\n\ndef test_a():\n    random.seed(4)\n"
                  "    assert len(task_func(2)) == 2\n\n"
                  f"def test_b():\n    assert random.randint(1, 100) == {R4[2]}\n"),
    "loop": ("import unittest\nimport random\n\nclass T(unittest.TestCase):\n"
             "    def test_a(self):\n        random.seed(8)\n        for _ in range(300):\n"
             "            a = random.randint(0, 9)\n"
             "            self.assertEqual(task_func(1, a)[-1], a + 1)\n"),
}
DRAWN_AFTER_ANSWERS = {  # answer: whether it draws
    "import random\n\ndef task_func(n, a=None):\n"
    "    out = [random.randint(1, 100) for _ in range(n)]\n"
    "    return out if a is None else out + [a + 1]\n": True,
    "import random\n\ndef task_func(n, a=None):\n"
    "    out = [random.randint(1, 100) for _ in range(n + 1)][1:]\n"
    "    return out if a is None else out + [a + 1]\n": True,
    "def task_func(n, a=None):\n    return [0] * n if a is None else [a + 1]\n": False,
    "def task_func(n, a=None):\n    return [0] * n if a is None else [a]\n": False,
}


@pytest.mark.parametrize("name", sorted(DRAWN_AFTER))
def test_the_tests_draws_after_an_answer_that_drew_are_pytests(name):
    """pytest draws the test's values after the answer's on one stream. The trainer plans the
    tests' draws as if the answer drew nothing and the child says whether it did: where it did,
    the default mode runs the tests under pytest (pytest's verdict), trusted_only refuses (0.0);
    where it did not, the trainer's verdict is pytest's in both modes. One more draws step per
    round of a loop, the key sent only when it changed."""
    tests = DRAWN_AFTER[name]
    answers = tuple(DRAWN_AFTER_ANSWERS)
    wants = {a: verdict(DRAWN_AFTER, answers, name, a) for a in answers}
    assert 0.0 in wants.values() and 1.0 in wants.values()
    for answer, want in wants.items():
        trusted_want = 0.0 if DRAWN_AFTER_ANSWERS[answer] else want
        assert scores(block(answer), tests) == (want, trusted_want), answer
    plan = testplan.build_plan(tests)
    assert plan.harness is None
    steps = [s for u in plan.units for s in u.steps if "draws" in s]
    # a round's step is a position, not the 624 words of the key (~7 KB)
    assert steps and len(json.dumps(steps)) < 8_000 + 200 * len(steps)


def test_a_moved_state_is_judged_by_pytest_each_time():
    """The same honest answer that draws, scored twice, and a wrong one after it: pytest's
    verdicts, not a cached one."""
    tests = DRAWN_AFTER["after_the_call"]
    honest, wrong = list(DRAWN_AFTER_ANSWERS)[:2]
    assert [scores(block(a), tests)[0] for a in (honest, honest, wrong, honest)] == [
        1.0, 1.0, 0.0, 1.0]


def test_every_answer_of_a_group_is_judged_alike():
    """The judge helper keeps one plan per problem: `items.pop()` on the expected side is made once,
    so the same honest answer scores 1.0 each time and a wrong one 0.0, in both modes."""
    tests = CHECK_STATE["list_pop"][0]
    honest, wrong = "def f(i):\n    return 3 - i\n", "def f(i):\n    return 3\n"
    assert [scores(block(a), tests) for a in (honest, honest, wrong, honest)] == [
        (1.0, 1.0), (1.0, 1.0), (0.0, 0.0), (1.0, 1.0)]
