"""The code reward and a test module's own state as pytest runs it: importing the module runs its
own statements (a seed, a draw, a list built or sorted), every decorator and class body, then the
tests run in file order, sharing the module's values. Statements written after or between the
tests are judged as having run first; a value a test changes in place is every later test's.
Expected verdicts are the real pytest's, each program a pytest session of its own."""
import functools
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from test_code_reward_round5 import PLAIN_PYTEST, block, scores

from gmts.rewards import testplan

# each program is a pytest session of its own (a batch of files in one session would import every
# file, seeds and draws included, before any test ran), one after another in one process
_EACH = """import sys, pytest
for path in sys.argv[1:]:
    code = pytest.main(["-q", "-p", "no:cacheprovider", path])
    print(int(code == 0), flush=True, file=sys.stderr)
"""


@functools.cache
def _pytest_verdicts(programs: tuple) -> dict:
    """The real pytest's verdict on each (solution, tests) program, a session each."""
    with tempfile.TemporaryDirectory(prefix="gmts-order-") as folder:
        paths = []
        for i, (solution, tests) in enumerate(programs):
            paths.append(Path(folder) / f"test_p{i}.py")
            paths[-1].write_text(solution + "\n" + tests)
        run = subprocess.run([sys.executable, "-c", _EACH, *map(str, paths)], check=True,
                             capture_output=True, text=True, cwd=folder, timeout=300,
                             env=PLAIN_PYTEST)
    return dict(zip(programs, [line == "1" for line in run.stderr.split()], strict=True))


def verdict(table: dict, solutions, name: str, solution: str) -> float:
    """pytest's verdict on `solution` with the tests table[name] (every program of the table with
    each of `solutions` run at once)."""
    programs = tuple((s, t) for t in table.values() for s in solutions)
    return 1.0 if _pytest_verdicts(programs)[(solution, table[name])] else 0.0


def _draws(n: int) -> list:
    """The first n values of random.random() after random.seed(0)."""
    r = random.Random(0)
    return [r.random() for _ in range(n)]


V = _draws(3)
AFTER_THE_TESTS = {  # name: tests whose module-level statements stand after or between tests
    "seeded_after_the_test": ("import random\n\ndef test_a():\n    assert f(2) == 4\n"
                              f"    assert random.random() == {V[1]!r}\n\n"
                              "random.seed(0)\nrandom.random()\n"),
    "drawn_between_tests": ("import random\nrandom.seed(0)\n\ndef test_a():\n"
                            "    assert f(2) == 4\n\nrandom.random()\n\ndef test_b():\n"
                            f"    assert random.random() == {V[1]!r}\n"),
    "grown_after_the_test": "L = [1]\n\ndef test_a():\n    assert f(L[-1]) == 4\n\nL.append(2)\n",
    "sorted_by_the_answer_before": ("L = [3, 1, 2]\nsort_in_place(L)\n\ndef test_a():\n"
                                    "    assert L == [1, 2, 3]\n    assert f(L[-1]) == 6\n"),
    "sorted_by_the_answer_after": ("L = [3, 1, 2]\n\ndef test_a():\n    assert f(L[0]) == 2\n\n"
                                   "sort_in_place(L)\n"),
    "changed_by_a_test_after": ("L = [3, 1, 2]\nsort_in_place(L)\n\ndef test_a():\n"
                                "    L.append(0)\n    assert L == [1, 2, 3, 0]\n\n"
                                "def test_b():\n    assert f(L[-1]) == 0\n"),
}
ANSWERS = (
    "def sort_in_place(xs):\n    xs.sort()\n\ndef f(n):\n    return 2 * n\n",
    ("import random\n\ndef sort_in_place(xs):\n    xs.sort()\n\n"
     "def f(n):\n    random.random()\n    return 2 * n\n"),  # honest where nothing is seeded
    "def sort_in_place(xs):\n    xs.reverse()\n\ndef f(n):\n    return 2 * n\n",
    "def sort_in_place(xs):\n    xs.sort()\n\ndef f(n):\n    return n + 1\n",
)


def _judged(table: dict, name: str, trusted: bool) -> testplan.Plan:
    """Each of ANSWERS scores pytest's verdict on the tests table[name] (some pass there, some
    fail) in the default mode, and in trusted_only too (trusted) or 0.0 (refused); the plan."""
    tests = table[name]
    wants = {a: verdict(table, ANSWERS, name, a) for a in ANSWERS}
    assert 0.0 in wants.values() and 1.0 in wants.values()
    for answer, want in wants.items():
        assert scores(block(answer), tests) == (want, want if trusted else 0.0), answer
    return testplan.build_plan(tests)


@pytest.mark.parametrize("name", sorted(AFTER_THE_TESTS))
def test_module_statements_after_the_tests_run_first(name):
    """A seed or a draw after a test, a list grown or sorted by the answer after it, a list a
    test changes after the answer held it: each answer scores pytest's verdict in both modes, the
    trainer judging the whole file."""
    plan = _judged(AFTER_THE_TESTS, name, trusted=True)
    assert plan.harness is None


AT_IMPORT = {  # name: tests where a decorator or a class body draws as pytest imports them
    "parametrize_table": ("import random\nimport pytest\nrandom.seed(0)\n\ndef test_a():\n"
                          f"    assert random.random() == {V[1]!r}\n\n"
                          "@pytest.mark.parametrize('x', [random.random()])\ndef test_b(x):\n"
                          f"    assert f(2) == 4\n    assert x == {V[0]!r}\n"),
    "class_body_after_a_test": ("import random\nimport unittest\nrandom.seed(0)\n\n"
                                "class A(unittest.TestCase):\n    def test_a(self):\n"
                                f"        self.assertEqual(random.random(), {V[1]!r})\n\n"
                                "class B(unittest.TestCase):\n    x = random.random()\n\n"
                                "    def test_b(self):\n        self.assertEqual(f(2), 4)\n"
                                f"        self.assertEqual(self.x, {V[0]!r})\n"),
    "default_value": ("import random\nrandom.seed(0)\n\ndef test_a():\n"
                      f"    assert random.random() == {V[1]!r}\n\n"
                      "def test_b(x=random.random()):\n"
                      f"    assert f(2) == 4\n    assert x == {V[0]!r}\n"),
}


@pytest.mark.parametrize("name", sorted(AT_IMPORT))
def test_a_draw_made_at_import_leaves_the_file_to_pytest(name):
    """A draw in a decorator, a default or a class body after a test, in a file that seeds: pytest
    makes it at import, before any test's; the default mode runs the whole file under pytest (its
    verdict), trusted_only refuses, saying why."""
    plan = _judged(AT_IMPORT, name, trusted=False)
    assert plan.units == [] and plan.refusal == testplan.OUT_OF_ORDER


def test_a_draw_in_a_first_class_body_or_unseeded_stays_the_trainers():
    """A class body drawing before any test runs where the plan runs it (first); one after a test
    in a file that seeds nothing draws values no test can know in advance: the trainer judges
    both."""
    first = ("import random\nimport unittest\nrandom.seed(0)\n\nclass A(unittest.TestCase):\n"
             "    x = random.random()\n\n    def test_a(self):\n"
             f"        self.assertEqual(f(2), 4)\n        self.assertEqual(self.x, {V[0]!r})\n")
    unseeded = ("import random\nimport unittest\n\nclass A(unittest.TestCase):\n"
                "    def test_a(self):\n        self.assertEqual(f(2), 4)\n\n"
                "class B(unittest.TestCase):\n    n = random.randint(1, 9)\n\n"
                "    def test_b(self):\n        self.assertEqual(f(self.n), 2 * self.n)\n")
    for tests in (first, unseeded):
        assert scores(block(ANSWERS[0]), tests) == (1.0, 1.0)
        assert scores(block(ANSWERS[3]), tests) == (0.0, 0.0)
        assert testplan.build_plan(tests).harness is None


CHANGED_IN_PLACE = {  # name: tests where a test changes a list later tests (and checks) read
    "heappush": ("import heapq\nH = [1, 5]\n\ndef test_a():\n    assert f(2) == 2 * len(H)\n\n"
                 "def test_b():\n    heapq.heappush(H, 0)\n    assert f(0) == H[0]\n"),
    "insort": ("from bisect import insort\nH = [1, 5]\n\ndef test_a():\n"
               "    assert f(2) == 2 * len(H)\n\ndef test_b():\n    insort(H, 3)\n"
               "    assert f(3) == H[1] * 2\n"),
    "class_attribute": ("import heapq\nimport unittest\n\nclass T(unittest.TestCase):\n"
                        "    H = [1, 5]\n\n    def test_a(self):\n"
                        "        self.assertEqual(f(2), 2 * len(self.H))\n\n"
                        "    def test_b(self):\n        heapq.heappush(self.H, 0)\n"
                        "        self.assertEqual(f(0), self.H[0])\n"),
    "deque_attribute": ("from collections import deque\nimport unittest\n\n"
                        "class T(unittest.TestCase):\n    Q = deque([1, 5])\n\n"
                        "    def test_a(self):\n        self.assertEqual(f(2), 2 * len(self.Q))\n\n"
                        "    def test_b(self):\n        self.Q.appendleft(0)\n"
                        "        self.assertEqual(f(0), self.Q[0])\n"),
}


@pytest.mark.parametrize("name", sorted(CHANGED_IN_PLACE))
def test_a_list_heapq_or_bisect_changes_in_place_is_pytests(name):
    """heapq's and bisect's functions change a module-level list or a class attribute in place,
    as `append` does, and a deque's methods a deque: an earlier test's check, judged after the
    plan is built, would read the changed value. pytest's verdict in the default mode, refused by
    trusted_only."""
    plan = _judged(CHANGED_IN_PLACE, name, trusted=False)
    assert "the tests change a value later tests share" in plan.refusal


NAMED = {  # name: tests whose module does something with a test function
    "attribute_set_after": "def test_a():\n    assert f(test_a.n) == 6\n\ntest_a.n = 3\n",
    "aliased": "def test_a():\n    assert f(3) == 6\n\ncheck_it = test_a\n",
    "called_by_a_test": ("def test_a():\n    assert f(3) == 6\n\n"
                         "def test_b():\n    test_a()\n    assert f(1) == 2\n"),
}


@pytest.mark.parametrize("name", sorted(NAMED))
def test_a_test_function_the_module_names_is_pytests(name):
    """A test function the module names (an attribute set on it, an alias, a call from another
    test) is the tests' own function, never the solution's: pytest's verdict in the default mode
    (the honest answer 0.0 before: the child had no such name), refused by trusted_only. A bare
    `test_a()` after it, under `if __name__ == "__main__":` too, stays the trainer's."""
    plan = _judged(NAMED, name, trusted=False)
    assert "a test function named by the tests" in plan.refusal
    for runs in ("test_a()\n", 'if __name__ == "__main__":\n    test_a()\n'):
        plan = testplan.build_plan("def test_a():\n    assert f(3) == 6\n\n" + runs)
        assert plan.harness is None and plan.trusted == 1
