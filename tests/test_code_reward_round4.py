"""The code reward, fourth round (issue 53): each kind as a class of cases. A wrong solution scores
0.0 under get_reward("code") and trusted_only=True, an honest one 1.0 (under trusted_only, where
the tests can only run under pytest in the sandbox, 0.0 refused, as rewards/README.md says), in
each format, with real rows of the public suites in tests/code_rows/ (their sources: its README).
"""
import json
import textwrap
from pathlib import Path
from typing import ClassVar

import pytest

from gmts import data
from gmts.data import builtin
from gmts.rewards import get_reward, sandbox, testplan
from gmts.rewards.code import extract_code

code = get_reward("code")
trusted = get_reward("code", trusted_only=True)
ROWS = Path(__file__).with_name("code_rows")


def block(src: str, fence: str = "```python", close: str = "```") -> str:
    return f"Here it is:\n{fence}\n{src.strip(chr(10))}\n{close}\n"


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (ROWS / name).read_text().splitlines() if line]


def scores(answer: str, reference) -> tuple[float, float]:
    return code(answer, reference), trusted(answer, reference)


# ------------------------------------------------ 1. the solution stays out of the test module

HARNESS = textwrap.dedent("""
    import pytest
    @pytest.fixture
    def pair():
        return (2, 3)
    def test_pair(pair):
        assert add(*pair) == 5
    def test_printed(capsys):
        print(add(1, 1))
        assert capsys.readouterr().out == "2\\n"
    def test_more():
        assert add(10, 5) == 15
    """)
RIGHT_ONLY_FOR_2_3 = "    return a + b if (a, b) == (2, 3) else 0\n"


GOOD = "def add(a, b):\n    return a + b\n"


class TestTheSolutionStaysOutOfTheTestModule:
    HONEST = GOOD
    WRONG: ClassVar[dict] = {
        "pytestmark_xfail": "import pytest\npytestmark = pytest.mark.xfail\n"
                            "def add(a, b):\n    return 0\n",
        "own_capsys_fixture": (
            "import pytest\nclass Out:\n    out = '2\\n'\nclass Cap:\n    def readouterr(self):\n"
            "        return Out\n@pytest.fixture\ndef capsys():\n    return Cap()\n"
            "def add(a, b):\n" + RIGHT_ONLY_FOR_2_3),
        "swap_a_test_code": (
            "import sys\ndef add(a, b):\n    g = sys._getframe(1).f_globals\n"
            "    for n in ('test_printed', 'test_more'):\n"
            "        g[n].__code__ = (lambda *a: None).__code__\n" + RIGHT_ONLY_FOR_2_3),
        "rebind_a_test": (
            "import sys\ndef add(a, b):\n    g = sys._getframe(1).f_globals\n"
            "    g['test_more'] = lambda: None\n" + RIGHT_ONLY_FOR_2_3),
        # an otherwise right solution that installs a tracer (it could rewrite a test's frame or
        # code between two checks) scores 0
        "installs_a_tracer": ("import sys\ndef tracer(frame, event, arg):\n    return tracer\n"
                              "sys.settrace(tracer)\n" + GOOD),
        "installs_a_profiler": "import sys\nsys.setprofile(lambda *a: None)\n" + GOOD,
        # a thread that swaps a later test's code once the first test has run: caught before the
        # call it would change
        "thread_swaps_a_test_before_its_call": (
            "import sys, threading, time\n"
            "def swap(g):\n    time.sleep(0.3)\n"
            "    g['test_more'].__code__ = (lambda: None).__code__\n"
            "def add(a, b):\n    if (a, b) == (2, 3):\n"
            "        threading.Thread(target=swap, args=(sys._getframe(1).f_globals,),"
            " daemon=True).start()\n        time.sleep(0.6)\n"
            "    return a + b if (a, b) != (10, 5) else 0\n"),
        # a thread that rewrites the runner's records of failed tests to passed after each
        # report: the outcomes were written out when reported
        "thread_rewrites_results_after_the_report": (
            "import gc, threading, time\n"
            "def rewrite():\n    while True:\n        for o in gc.get_objects():\n"
            "            if type(o) is dict and o and all(type(v) is dict and 'setup' in v\n"
            "                                             for v in o.values()):\n"
            "                for v in o.values():\n                    for k in list(v):\n"
            "                        v[k] = 'passed'\n        time.sleep(0.005)\n"
            "threading.Thread(target=rewrite, daemon=True).start()\n"
            "def add(a, b):\n" + RIGHT_ONLY_FOR_2_3),
    }
    # threads that stay idle beside the tests (a daemon sleeping, a timer that never fires, a
    # worker waiting on a queue) are no tampering: what a thread could do after a report is what
    # matters, and the outcomes are written out when reported
    IDLE_THREADS: ClassVar[dict] = {
        "daemon_sleeping": ("import threading, time\nthreading.Thread(target=time.sleep, "
                            "args=(30,), daemon=True).start()\n"),
        "timer_not_daemon": "import threading\nthreading.Timer(60, print).start()\n",
        "worker_on_a_queue": ("import queue, threading\njobs = queue.Queue()\n"
                              "threading.Thread(target=jobs.get, daemon=True).start()\n"),
    }

    def test_honest(self):
        assert scores(block(self.HONEST), HARNESS) == (1.0, 0.0)  # pytest path: refused

    @pytest.mark.parametrize("name", sorted(IDLE_THREADS))
    def test_honest_with_idle_threads(self, name):
        answer = block(self.IDLE_THREADS[name] + self.HONEST)
        assert scores(answer, HARNESS) == (1.0, 0.0)  # pytest path: refused when trusted
        assert scores(answer, ADD) == (1.0, 1.0)  # judged by the trainer
        wrong = block(self.IDLE_THREADS[name] + "def add(a, b):\n" + RIGHT_ONLY_FOR_2_3)
        assert scores(wrong, HARNESS) == (0.0, 0.0)

    @pytest.mark.parametrize("name", sorted(WRONG))
    def test_wrong(self, name):
        assert scores(block(self.WRONG[name]), HARNESS) == (0.0, 0.0)

    def test_star_import_takes_only_the_names_the_tests_read(self):
        tests = "from solution import *\n" + HARNESS
        assert code(block(self.HONEST), tests) == 1.0
        assert code(block(self.WRONG["pytestmark_xfail"]), tests) == 0.0
        source = sandbox.pytest_source(testplan.build_plan(tests), "")
        assert "import *" not in source and "globals().update" not in source
        assert "['add', 'print']" in source  # the names the tests read and do not bind

    def test_the_tests_code_is_in_the_tamper_check(self):
        # the swap works under pytest (the test would pass) and the runner reports it
        plan = testplan.build_plan(HARNESS)
        spec = {"solution": self.WRONG["swap_a_test_code"], "setup": "", "units": [],
                "harness": {"source": sandbox.pytest_source(plan, ""), "token": "t" * 32}}
        run = sandbox.run_child(spec, parse=False)
        assert '"tampered": true' in run.pytest


# ------------------------------------------------ 2. what the child keeps is frozen when returned

class TestValuesAreFrozenWhenReturned:
    TESTS = "assert f(3) == [3, 3, 3]\nassert f(1) == [1]\n"

    def test_a_list_changed_after_it_was_returned(self):
        # the first call returns a wrong list and the second call rewrites it
        wrong = ("_kept = []\ndef f(n):\n    if n == 3:\n        return _kept\n"
                 "    _kept[:] = [3, 3, 3]\n    return [1]\n")
        assert scores(block(wrong), self.TESTS) == (0.0, 0.0)

    def test_an_honest_solution_returning_its_own_state(self):
        # one list object returned twice, changed in between: each is judged as it was returned
        honest = "_buf = []\ndef f(n):\n    _buf[:] = [n] * n\n    return _buf\n"
        assert scores(block(honest), self.TESTS) == (1.0, 1.0)

    @pytest.mark.parametrize("where", ["gc", "module"])
    def test_the_builtins_snapshot_cannot_be_patched(self, where):
        patch = {"gc": ("import gc\nfor o in gc.get_objects():\n"
                        "    if isinstance(o, dict) and o.get('len') is len and 'abs' in o:\n"
                        "        o['len'] = lambda x: 3\n"),
                 "module": ("import sys\nm = sys.modules['__main__']\n"
                            "m._BUILTIN_ITEMS = (('len', lambda x: 3),)\n")}[where]
        wrong = patch + ("class Box:\n    def __len__(self):\n        return 0\n"
                         "def make(n):\n    return Box()\n")
        assert scores(block(wrong), "assert len(make(3)) == 3\n") == (0.0, 0.0)


# ------------------------------------------------ 3. test semantics as the runner's

class TestTheRunnersSemantics:
    SHARED = ("from solution import pop_first\nITEMS = [1, 2, 3]\n\n"
              "def test_a():\n    assert pop_first(ITEMS) == 1\n\n"
              "def test_b():\n    assert pop_first([5, 6]) == 5\n    assert len(ITEMS) == 3\n")

    def test_module_constants_are_shared_across_tests(self):
        assert scores(block("def pop_first(xs):\n    return xs[0]\n"), self.SHARED) == (1.0, 1.0)
        # mutating the module's list fails the later test, as under pytest
        assert scores(block("def pop_first(xs):\n    return xs.pop(0)\n"),
                      self.SHARED) == (0.0, 0.0)

    def test_a_capitalised_function_is_judged_by_its_result(self):
        row = next(r for r in rows("mbpp.jsonl") if r["task_id"] == 629)
        reference = builtin.mbpp(row, "mbpp.jsonl:1")["answer"]
        assert scores(block(row["code"]), reference) == (1.0, 1.0)
        always_equal = ("class Any:\n    def __eq__(self, other):\n        return True\n"
                        "def Split(xs):\n    return Any()\n")
        assert scores(block(always_equal), reference) == (0.0, 0.0)
        assert scores(block("def Split(xs):\n    return xs\n"), reference) == (0.0, 0.0)

    def test_a_capitalised_class_still_meets_its_methods_in_the_child(self):
        tests = ("def test_stack():\n    s = Stack()\n    s.push(1)\n    assert s.pop() == 1\n"
                 "    assert len(s) == 0\n")
        good = ("class Stack:\n    def __init__(self):\n        self.items = []\n"
                "    def push(self, x):\n        self.items.append(x)\n"
                "    def pop(self):\n        return self.items.pop()\n"
                "    def __len__(self):\n        return len(self.items)\n")
        assert scores(block(good), tests) == (1.0, 1.0)
        assert scores(block(good.replace("return len(self.items)", "return 1")),
                      tests) == (0.0, 0.0)


# ------------------------------------------------ 4. each format's whole program

class TestEachFormatsWholeProgram:
    @pytest.mark.parametrize("row", rows("humaneval.jsonl"), ids=lambda r: r["task_id"])
    def test_humaneval_rows(self, row):
        reference = builtin.humaneval(row, "humaneval.jsonl")["answer"]
        # the chat answer restating the function, and the completion (the body) alone
        whole = row["prompt"] + row["canonical_solution"]
        assert scores(block(whole), reference) == (1.0, 1.0)
        assert scores(block("    " + row["canonical_solution"].lstrip()), reference) == (1.0, 1.0)
        assert scores(block("    return None"), reference) == (0.0, 0.0)

    def test_a_helper_the_prompt_defines(self):
        # HumanEval/32: find_zero calls poly, which only the prompt defines
        row = next(r for r in rows("humaneval.jsonl") if r["task_id"] == "HumanEval/32")
        reference = builtin.humaneval(row, "humaneval.jsonl")["answer"]
        answer = ("def find_zero(xs):\n    lo, hi = -1.0, 1.0\n"
                  "    while poly(xs, lo) * poly(xs, hi) > 0:\n        lo, hi = 2 * lo, 2 * hi\n"
                  "    for _ in range(200):\n        mid = (lo + hi) / 2\n"
                  "        if poly(xs, lo) * poly(xs, mid) <= 0:\n            hi = mid\n"
                  "        else:\n            lo = mid\n    return lo\n")
        assert scores(block(answer), reference) == (1.0, 1.0)
        assert scores(block(answer.replace("return lo", "return lo + 1")),
                      reference) == (0.0, 0.0)

    @pytest.mark.parametrize("task,cheat", [
        ("HumanEval/38", ("def encode_cyclic(s):\n    return s\n\ndef decode_cyclic(s):\n"
                         "    return s\n")),
        ("HumanEval/32", ("def poly(xs, x):\n    return 0\n\ndef find_zero(xs):\n"
                         "    return 0.0\n"))])
    def test_the_prompts_helpers_cannot_be_redefined_by_the_answer(self, task, cheat):
        # the tests call them on the expected side; under the bare harness these cheats pass
        row = next(r for r in rows("humaneval.jsonl") if r["task_id"] == task)
        reference = builtin.humaneval(row, "humaneval.jsonl")["answer"]
        assert scores(block(cheat), reference) == (0.0, 0.0)

    def test_mbpp_judges_the_challenge_tests_and_shows_one(self):
        row = next(r for r in rows("mbpp.jsonl") if r["task_id"] == 11)
        problem = builtin.mbpp(row, "mbpp.jsonl:3")
        # shown: the task text and the first test (InCoder / bigcode-evaluation-harness / MBPP+)
        assert problem["question"].startswith(row["text"])
        assert problem["question"].count("assert") == 1
        assert row["test_list"][0] in problem["question"]
        reference = problem["answer"]
        # judged: test_list and challenge_test_list, all five by the trainer
        plan = testplan.build_plan(reference["tests"], None, reference["setup"])
        assert (plan.trusted, plan.untrusted) == (5, 0)
        assert scores(block(row["code"]), reference) == (1.0, 1.0)
        # a table of every visible example (the three test_list asserts) is not enough
        table = ("def remove_Occ(s, ch):\n    return {('hello', 'l'): 'heo', ('abcda', 'a'): 'bcd',"
                 " ('PHP', 'P'): 'H'}.get((s, ch), s)\n")
        assert scores(block(table), reference) == (0.0, 0.0)

    @pytest.mark.parametrize("i", range(3), ids=["HumanEval/0", "HumanEval/2", "HumanEval/32"])
    def test_humaneval_plus_rows(self, i):
        row = rows("humaneval_plus.jsonl")[i]
        problem = data.load_problems(str(ROWS / "humaneval_plus.jsonl"))[i]
        assert problem.answer["prompt"] == row["prompt"]
        # the tests' own helpers (`assertion` with numpy, `_poly`) run in the trainer on the
        # returned values: judged, under trusted_only too
        plan = testplan.build_plan(problem.answer["tests"], problem.answer["entry_point"])
        assert (plan.untrusted, plan.harness) == (0, None) and plan.trusted == 1
        honest = block(row["prompt"] + row["canonical_solution"])
        assert scores(honest, problem.answer) == (1.0, 1.0)
        assert scores(block("    return True"), problem.answer) == (0.0, 0.0)

    def test_humaneval_plus_float_tolerance(self):
        # HumanEval/2 (truncate_number): assertion(..., exp, 1e-06) is np.allclose(out, exp,
        # rtol=1e-07, atol=1e-06): an error of 1e-9 passes, one of 1e-4 fails, as in evalplus
        row = rows("humaneval_plus.jsonl")[1]
        reference = data.load_problems(str(ROWS / "humaneval_plus.jsonl"))[1].answer
        close = "    return number % 1.0 + 1e-9\n"
        assert scores(block(row["prompt"] + close), reference) == (1.0, 1.0)
        assert scores(block(row["prompt"] + close.replace("1e-9", "1e-4")),
                      reference) == (0.0, 0.0)
        # HumanEval/0 has atol 0 and bool results: exact match only; 1 == True as in Python
        row0 = rows("humaneval_plus.jsonl")[0]
        ref0 = data.load_problems(str(ROWS / "humaneval_plus.jsonl"))[0].answer
        as_int = row0["canonical_solution"].replace("return True", "return 1").replace(
            "return False", "return 0")
        assert scores(block(row0["prompt"] + as_int), ref0) == (1.0, 1.0)
        as_str = row0["canonical_solution"].replace("return True", "return 'True'")
        assert scores(block(row0["prompt"] + as_str), ref0) == (0.0, 0.0)

    def test_a_helper_handed_the_solution_stays_with_pytest(self):
        # a helper of the tests' that calls what it is given cannot run on data: the sandbox's
        tests = ("def run(fn, x):\n    return fn(x)\n\n"
                 "def check(candidate):\n    assert run(candidate, 2) == 4\n")
        plan = testplan.build_plan(tests, "sq")
        assert plan.trusted == 0 and plan.untrusted == 1
        assert scores(block("def sq(x):\n    return x * x\n"),
                      {"tests": tests, "entry_point": "sq"}) == (1.0, 0.0)

    def test_kodcode_row(self):
        row = rows("kodcode.jsonl")[0]
        reference = builtin.kodcode(row, "kodcode.jsonl")["answer"]
        assert scores(block(row["solution"]), reference) == (1.0, 1.0)
        wrong = row["solution"].replace("total += n", "total = n")
        assert scores(block(wrong), reference) == (0.0, 0.0)

    def test_bigcodebench_row(self):
        path = ROWS / "bigcodebench.jsonl"
        problem = data.load_problems(str(path), question_field="complete_prompt")[0]
        row = rows("bigcodebench.jsonl")[0]
        honest = block(row["code_prompt"] + row["canonical_solution"])
        # a plain unittest.TestCase: each method judged by the trainer with unittest's asserts
        assert scores(honest, problem.answer) == (1.0, 1.0)
        assert scores(block("import itertools\ndef task_func(numbers=[1, 2, 3]):\n"
                            "    return 8 / 3\n"), problem.answer) == (0.0, 0.0)
        # assertAlmostEqual is unittest's: 7 places; an error of 1e-9 passes, 1e-6 fails
        for error, score in (("1e-9", 1.0), ("1e-6", 0.0)):
            near = honest.replace("return sum_diffs / len(permutations)",
                                  f"return sum_diffs / len(permutations) + "
                                  f"({error} if sum_diffs else 0)")  # 0.0 is assertEqual's
            assert scores(near, problem.answer) == (score, score)

    @pytest.mark.parametrize("wrong", [
        "    words.sort()\n    return collections.Counter(words).most_common(n)\n",
        "    return collections.Counter(words).most_common(max(n, 1))\n",
        ("    if n < 1:\n        raise TypeError('n')\n"
         "    return collections.Counter(words).most_common(n)\n"),
        ("    if n < 1:\n        raise ValueError('n')\n"
         "    return collections.Counter(words).most_common(n)[::-1]\n")],
        ids=["mutates", "no_raise", "wrong_exception", "wrong_order"])
    def test_bigcodebench_setup_raises_subtests(self, wrong):
        # setUp's self.words, assertDictEqual/assertCountEqual, subTest, assertRaises in both forms
        path = ROWS / "bigcodebench.jsonl"
        problem = data.load_problems(str(path), question_field="complete_prompt")[1]
        row = rows("bigcodebench.jsonl")[1]
        plan = testplan.build_plan(problem.answer["tests"], "task_func")
        assert (plan.trusted, plan.untrusted, len(plan.units)) == (7, 0, 5)
        honest = block(row["code_prompt"] + row["canonical_solution"])
        assert scores(honest, problem.answer) == (1.0, 1.0)
        assert scores(block(row["code_prompt"] + wrong), problem.answer) == (0.0, 0.0)

    def test_a_mocked_testcase_is_judged_by_the_trainer(self):
        # a mock: the trainer holds it and its record (rewards/mocks.py; more shapes in
        # tests/test_code_reward_mocks.py)
        tests = ("import unittest\nfrom unittest.mock import patch\n\n"
                 "class TestCases(unittest.TestCase):\n"
                 "    @patch('os.getcwd', return_value='/x')\n"
                 "    def test_cwd(self, mock_cwd):\n"
                 "        self.assertEqual(task_func(), '/x')\n"
                 "        mock_cwd.assert_called_once_with()\n")
        plan = testplan.build_plan(tests, "task_func")
        assert plan.trusted == 1 and plan.harness is None and plan.mocks
        honest = block("import os\ndef task_func():\n    return os.getcwd()\n")
        assert scores(honest, {"tests": tests, "entry_point": "task_func"}) == (1.0, 1.0)
        wrong = block("def task_func():\n    return '/x'\n")  # never calls os.getcwd
        assert scores(wrong, {"tests": tests, "entry_point": "task_func"}) == (0.0, 0.0)


# ------------------------------------------------ 5. answers written the ordinary way

ADD = "assert add(2, 3) == 5\nassert add(-1, 1) == 0\n"
GOOD_ADD = "def add(a, b):\n    return a + b\n"


class TestOrdinaryAnswers:
    ANSWERS: ClassVar[dict] = {
        "usage_block_after": block(GOOD_ADD) + "Usage:\n" + block("print(add(2, 3))  # 5"),
        "repl_block_after": block(GOOD_ADD) + block(">>> add(2, 3)\n5"),
        "failing_usage_in_the_block": block(GOOD_ADD + "\nprint(add('a'))\n"),
        "main_guard_reading_stdin": block(GOOD_ADD + "\nif __name__ == '__main__':\n"
                                          "    print(add(*map(int, input().split())))\n"),
        "own_tests_after": block(GOOD_ADD) + "Tests:\n" + block(
            "def test_add():\n    assert add(1, 2) == 3\n"),
        "python_colon_file": block(GOOD_ADD, fence="```python:solution.py"),
        "tilde_fence": block(GOOD_ADD, fence="~~~python", close="~~~"),
        "tilde_fence_holding_backticks": block(GOOD_ADD + "DOC = '''\n```\n'''\n",
                                               fence="~~~python", close="~~~"),
    }

    @pytest.mark.parametrize("name", sorted(ANSWERS))
    def test_honest_answers(self, name):
        assert scores(self.ANSWERS[name], ADD) == (1.0, 1.0)

    @pytest.mark.parametrize("name", sorted(ANSWERS))
    def test_the_same_answers_wrong(self, name):
        wrong = self.ANSWERS[name].replace("return a + b", "return a - b")
        assert scores(wrong, ADD) == (0.0, 0.0)

    def test_a_usage_block_is_not_the_solution(self):
        answer = self.ANSWERS["usage_block_after"]
        assert extract_code(answer) == GOOD_ADD

    VALUES: ClassVar[list] = [  # (honest, wrong, tests)
        ("from fractions import Fraction\ndef f(a, b):\n    return Fraction(a, b)\n",
         "from fractions import Fraction\ndef f(a, b):\n    return Fraction(a + 1, b)\n",
         ("from fractions import Fraction\nassert f(1, 2) == Fraction(1, 2)\n"
          "assert f(2, 4) == 0.5\n")),
        ("from decimal import Decimal\ndef f(s):\n    return Decimal(s) * 2\n",
         "from decimal import Decimal\ndef f(s):\n    return Decimal(s) * 3\n",
         "from decimal import Decimal\nassert f('1.1') == Decimal('2.2')\n"),
        ("def f(s):\n    return bytearray(s, 'ascii')\n",
         "def f(s):\n    return bytearray(s[::-1], 'ascii')\n",
         "assert f('ab') == bytearray(b'ab')\n"),
        ("def f(d):\n    return d.keys()\n", "def f(d):\n    return d.values()\n",
         "assert f({'a': 1, 'b': 2}) == {'a', 'b'}\n"),
        ("def f(d):\n    return d.items()\n", "def f(d):\n    return d.keys()\n",
         "assert sorted(f({'a': 1, 'b': 2})) == [('a', 1), ('b', 2)]\n"),
        ("import enum\nclass C(enum.IntEnum):\n    A = 1\ndef f():\n    return C.A\n",
         "import enum\nclass C(enum.Enum):\n    A = 1\ndef f():\n    return C.A\n",
         "assert f() == 1\n"),
        ("def make_adder(n):\n    return lambda x: x + n\n",
         "def make_adder(n):\n    return lambda x: x + n + 1\n", "assert make_adder(2)(3) == 5\n"),
        ("class M:\n    @staticmethod\n    def sq(x):\n        return x * x\n",
         "class M:\n    @staticmethod\n    def sq(x):\n        return x + x\n",
         "assert M.sq(3) == 9\n"),
        ("def gen(n):\n    yield from range(n)\n", "def gen(n):\n    yield from range(100)\n",
         "assert 3 in gen(5)\nassert 7 not in gen(5)\n"),
        ("import numpy as np\ndef f(n):\n    return np.arange(n)\n",
         "import numpy as np\ndef f(n):\n    return np.arange(n + 1)\n",
         "assert f(3).tolist() == [0, 1, 2]\n"),
    ]

    @pytest.mark.parametrize("honest,wrong,tests", VALUES, ids=lambda x: str(x)[:24])
    def test_values_and_calls(self, honest, wrong, tests):
        assert scores(block(honest), tests) == (1.0, 1.0)
        assert scores(block(wrong), tests) == (0.0, 0.0)

    def test_any_case_where_the_statement_says_so(self, tmp_path):
        path = tmp_path / "yes.jsonl"
        cases = [{"input": "4\n", "output": "YES\n"}, {"input": "3\n", "output": "NO\n"}]
        path.write_text(json.dumps({"question": "Is n even? You can print the answer in any "
                                                "case.", "cases": cases}) + "\n")
        (problem,) = data.load_problems(str(path))
        honest = block("print('Yes' if int(input()) % 2 == 0 else 'no')")
        assert scores(honest, problem.answer) == (1.0, 1.0)
        assert scores(block("print('Yes')"), problem.answer) == (0.0, 0.0)
        # a statement that does not say so: exact
        assert code(honest, {"cases": cases}) == 0.0


# ------------------------------------------------ 6. rows checked completely when loaded

class TestRowsCheckedWhenLoaded:
    CASES: ClassVar[list] = [{"input": "2 3\n", "output": "5\n"},
                             {"input": "1 1\n", "output": "2\n"}]

    def load(self, tmp_path, row):
        path = tmp_path / "rows.jsonl"
        path.write_text(json.dumps({"question": "Add two numbers.", "id": "r1", **row}) + "\n")
        return data.load_problems(str(path))[0]

    def test_the_rows_limits_are_kept_and_used(self, tmp_path):
        problem = self.load(tmp_path, {"cases": self.CASES, "float_tolerance": 0.01,
                                       "timeout": 1.5, "memory_mb": 512})
        assert problem.answer["float_tolerance"] == 0.01
        assert problem.answer["timeout"] == 1.5 and problem.answer["memory_mb"] == 512
        near = block("a, b = map(int, input().split())\nprint(a + b + 0.001)")
        assert scores(near, problem.answer) == (1.0, 1.0)

    def test_cases_as_a_json_string(self, tmp_path):
        problem = self.load(tmp_path, {"cases": json.dumps(self.CASES)})
        assert problem.answer["cases"] == self.CASES
        honest = block("a, b = map(int, input().split())\nprint(a + b)")
        assert scores(honest, problem.answer) == (1.0, 1.0)
        assert scores(block("print(5)"), problem.answer) == (0.0, 0.0)
        # handed to the reward directly, unparsed: parsed there too
        assert code(honest, {"cases": json.dumps(self.CASES)}) == 1.0

    @pytest.mark.parametrize("row,said", [
        ({"cases": "[{\"input\": 1"}, "not JSON"),
        ({"cases": json.dumps([{"input": 1, "output": "2"}])}, "cases must be a list"),
        ({"cases": [{"input": "1"}]}, "cases must be a list"),
        ({"cases": [], "timeout": "10"}, "timeout must be a positive float"),
        ({"cases": [], "timeout": 0}, "timeout must be a positive float"),
        ({"cases": [], "memory_mb": 1.5}, "memory_mb must be a positive int"),
        ({"cases": [], "float_tolerance": -1}, "float_tolerance must be a non-negative"),
        ({"cases": [], "case_insensitive": "yes"}, "case_insensitive must be true or false"),
        ({"tests": "assert f() == 1", "entry_point": 3}, "entry_point must be a string"),
    ])
    def test_a_bad_row_fails_at_loading_with_one_line(self, tmp_path, row, said):
        with pytest.raises(ValueError, match=said) as info:
            self.load(tmp_path, row)
        assert "rows.jsonl" in str(info.value) and "\n" not in str(info.value)


# ------------------------------------------------ 7. the time limit

class TestTheTimeLimit:
    SLOW = "import time\ndef add(a, b):\n    time.sleep(2)\n    return a + b\n"

    def test_a_row_sets_its_own(self, tmp_path):
        path = tmp_path / "rows.jsonl"
        lines = [{"question": "q", "tests": "assert add(1, 2) == 3", "timeout": t} for t in (1, 6)]
        path.write_text("".join(json.dumps(r) + "\n" for r in lines))
        short, long = data.load_problems(str(path))
        assert code(block(self.SLOW), short.answer) == 0.0
        assert code(block(self.SLOW), long.answer) == 1.0


# ------------------------------------------------ 8. round 3's leftovers

class TestRoundThreeLeftovers:
    def test_a_skip_mark_is_honoured_by_the_trainer(self):
        tests = ("import pytest\n\n@pytest.mark.skip(reason='not yet')\ndef test_later():\n"
                 "    assert add(1, 1) == 3\n\ndef test_now():\n    assert add(1, 2) == 3\n")
        assert testplan.build_plan(tests).harness is None
        assert scores(block(GOOD_ADD), tests) == (1.0, 1.0)
        assert scores(block("def add(a, b):\n    return a * b\n"), tests) == (0.0, 0.0)

    def test_setup_names_on_the_expected_side_cannot_be_rebound(self):
        reference = {"tests": "assert twice(3) == expected(3)\nassert twice(4) == expected(4)\n",
                     "setup": "def expected(x):\n    return x * 2\n"}
        rebinds = ("import sys\ndef twice(x):\n"
                   "    sys._getframe(1).f_globals['expected'] = lambda x: -1\n    return -1\n")
        assert scores(block(rebinds), reference) == (0.0, 0.0)
        assert scores(block("def twice(x):\n    return 2 * x\n"), reference) == (1.0, 1.0)

    def test_printing_megabytes_while_computing(self):
        loud = "def add(a, b):\n    for _ in range(250_000):\n        print('x' * 99)\n"
        assert scores(block(loud + "    return a + b\n"), ADD) == (1.0, 1.0)
        assert scores(block(loud + "    return 0\n"), ADD) == (0.0, 0.0)

    def test_decimals_written_differently(self):
        cases = {"cases": [{"input": "1\n", "output": "0.5\n"}]}
        assert scores(block("print('0.50')"), cases) == (1.0, 1.0)
        assert scores(block("print('0.51')"), cases) == (0.0, 0.0)
        assert scores(block("print('1/2')"), cases) == (0.0, 0.0)

    # an input given to the solution and read on the other side of the same comparison (or in
    # another argument of a helper of the tests'): read as it was before the call, so a solution
    # that empties it cannot make the expected side agree (pytest would read it after the call)
    SAME_INPUT: ClassVar[dict] = {
        "expected_side_after_the_call": (
            "x = [3, 1, 2]\nassert sort_copy(x) == sorted(x)\n", "sort_copy"),
        "already_the_childs": (
            ("def test_a():\n    x = [3, 1, 2]\n    assert sort_copy(x) == [1, 2, 3]\n"
             "    assert sort_copy(x) == sorted(x)\n"), "sort_copy"),
        "a_helper_of_the_tests": (
            ("def ref(xs):\n    return sorted(xs)\n\n"
             "def check(candidate):\n    x = [5, 4, 9]\n    assert candidate(x) == ref(x)\n"),
            "sort_copy"),
        "unittest_assert": (
            ("import unittest\n\nclass TestCases(unittest.TestCase):\n"
             "    def setUp(self):\n        self.x = [3, 1, 2]\n\n"
             "    def test_sorted(self):\n"
             "        self.assertEqual(sort_copy(self.x), sorted(self.x))\n"), "sort_copy"),
    }
    HONEST_SORT = "def sort_copy(a):\n    return sorted(a)\n"

    @pytest.mark.parametrize("name", sorted(SAME_INPUT))
    def test_the_same_input_on_both_sides(self, name):
        tests, entry = self.SAME_INPUT[name]
        reference = {"tests": tests, "entry_point": entry}
        assert scores(block(self.HONEST_SORT), reference) == (1.0, 1.0)
        cheat = "def sort_copy(a):\n    a.clear()\n    return []\n"
        assert scores(block(cheat), reference) == (0.0, 0.0)
        if name == "already_the_childs":  # honest at the first call, empties x at the second
            second = ("def sort_copy(a):\n    if getattr(sort_copy, 'n', 0):\n        a.clear()\n"
                      "        return []\n    sort_copy.n = 1\n    return sorted(a)\n")
            assert scores(block(second), reference) == (0.0, 0.0)

    def test_a_mutation_across_statements_still_counts(self):
        # the in-place sort's effect is what the next statement (or the other side of an `and`)
        # reads, as in pytest
        for tests in ("x = [3, 1, 2]\nsort_in_place(x)\nassert x == [1, 2, 3]\n",
                      "x = [3, 1, 2]\nassert sort_in_place(x) is None and x == [1, 2, 3]\n"):
            assert scores(block("def sort_in_place(a):\n    a.sort()\n"), tests) == (1.0, 1.0)
            assert scores(block("def sort_in_place(a):\n    pass\n"), tests) == (0.0, 0.0)


# ------------------------------------------------ enums: the real `==`, as pytest has it

ENUM_TESTS = ("from enum import {base}\n\nclass Color({base}):\n    RED = 1\n    GREEN = 2\n\n"
              "def test_pick():\n    assert pick(1) == Color.RED\n"
              "    assert Color.GREEN == pick(2)\n")
OWN_ENUM = ("from enum import {base}\nclass Color({base}):\n    RED = 1\n    GREEN = 2\n"
            "def pick(v):\n    return Color(v)\n")


class TestEnumsComparedAsUnderPytest:
    # the tests' own enum is built by the trainer; a member the solution returns equals it where
    # pytest's `==` says so: a plain Enum only is itself (another class's member with the same
    # name and value is not equal), an IntEnum member equals its value
    @pytest.mark.parametrize("tests_base,own_base,expected", [
        ("Enum", "Enum", 0.0), ("Enum", "IntEnum", 0.0), ("IntEnum", "Enum", 0.0),
        ("IntEnum", "IntEnum", 1.0)])
    def test_the_solutions_own_enum(self, tests_base, own_base, expected):
        tests = ENUM_TESTS.format(base=tests_base)
        assert testplan.build_plan(tests).harness is None  # judged by the trainer
        answer = block(OWN_ENUM.format(base=own_base))
        assert scores(answer, tests) == (expected, expected)
        assert code(answer, tests.replace("def test_pick():", "def test_pick(capsys):")) == (
            expected)  # the same under pytest itself

    def test_plain_values_against_an_intenum(self):
        tests = ENUM_TESTS.format(base="IntEnum")
        assert scores(block("def pick(v):\n    return v\n"), tests) == (1.0, 1.0)
        assert scores(block("def pick(v):\n    return 3 - v\n"), tests) == (0.0, 0.0)

    def test_the_solutions_enum_on_both_sides(self):
        tests = ("from solution import Color, pick\n\ndef test_pick():\n"
                 "    assert pick(1) == Color.RED\n    assert pick(2) != Color.RED\n")
        assert scores(block(OWN_ENUM.format(base="Enum")), tests) == (1.0, 1.0)
        wrong = OWN_ENUM.format(base="Enum").replace("Color(v)", "Color.RED")
        assert scores(block(wrong), tests) == (0.0, 0.0)


# ------------------------------------------------ unittest's classes as unittest runs them

SHARED_FIXTURE = """
import unittest

class TestItems(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.items = [3, 1, 2]

    @classmethod
    def tearDownClass(cls):
        pass

    def test_a_smallest(self):
        self.assertEqual(smallest(self.items), 1)

    def test_b_unchanged(self):
        self.assertEqual(self.items, [3, 1, 2])
"""
SHARED_LOG = """
import unittest

class TestLog(unittest.TestCase):
    log = []

    def test_a_first(self):
        record(self.log, 1)
        self.assertEqual(self.log, [1])

    def test_b_second(self):
        record(self.log, 2)
        self.assertEqual(self.log, [1, 2])
"""
ONCE = """
import unittest

class TestTable(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.table = build_table(3)

    def test_size(self):
        self.assertEqual(len(self.table), 3)

    def test_values(self):
        self.assertEqual(self.table, [0, 1, 4])
"""
HELPERS = """
import unittest

class Checks:
    def expected(self, x):
        return [v * 2 for v in x]

    def test_doubles(self):
        self.assertEqual(double(self.x), self.expected(self.x))

class Base(unittest.TestCase):
    def setUp(self):
        self.x = [1, 2]

class TestSmall(Checks, Base):
    pass

class TestLarge(Checks, Base):
    def setUp(self):
        super().setUp()
        self.x = self.x + [100]
"""


class TestTestCaseClassesAsUnittestRunsThem:
    """setUpClass once per class (its attributes one object for the class's tests), class
    attributes shared, the tests' own bases and mixins (their tests run for every class that
    inherits them, setUp by the resolution order, `super()`), helper methods inlined: judged by
    the trainer, under trusted_only too."""

    def test_a_real_shaped_row_with_a_base_class_and_setupclass(self):
        path = ROWS / "bigcodebench.jsonl"
        problem = data.load_problems(str(path), question_field="complete_prompt")[2]
        row = rows("bigcodebench.jsonl")[2]
        plan = testplan.build_plan(problem.answer["tests"], "task_func")
        # BaseStats: 2 tests; TestNegative: its own 2 + the inherited test_stats
        assert plan.harness is None and plan.untrusted == 0
        assert [u.name for u in plan.units if ".test" in u.name] == [
            "BaseStats.test_input_unchanged", "BaseStats.test_stats", "TestNegative.test_empty",
            "TestNegative.test_input_unchanged", "TestNegative.test_stats"]
        honest = block(row["code_prompt"] + row["canonical_solution"])
        assert scores(honest, problem.answer) == (1.0, 1.0)
        body = row["canonical_solution"]
        for wrong in (
                body.replace('return {', 'data.sort()\n    return {'),  # mutates its input
                body.replace('min(data)', 'min(data, key=abs)'),  # fails the inherited test only
                body.replace('raise ValueError("data is empty")', 'return {}'),
                body.replace('"mode": statistics.mode(data)', '"mode": data[0]')):
            assert scores(block(row["code_prompt"] + wrong), problem.answer) == (0.0, 0.0)

    SKIPPED_BASE = ("import unittest\n\n@unittest.skip('base')\nclass Base(unittest.TestCase):\n"
                    "    def test_a(self):\n        self.assertEqual(f(1), 2)\n\n"
                    "class Sub(Base):\n    def test_b(self):\n        self.assertEqual(f(2), 3)\n\n"
                    "class Other(unittest.TestCase):\n    def test_c(self):\n"
                    "        self.assertEqual(f(5), {})\n")

    @pytest.mark.parametrize("other", ["6", "print(6) or 6"])  # the trainer's, pytest's
    def test_a_skipped_base_skips_the_classes_inheriting_it(self, other):
        # unittest's skip is the class attribute __unittest_skip__: Sub inherits it, so only
        # Other runs; under unittest itself as here
        import io
        import unittest
        tests = self.SKIPPED_BASE.format(other)
        namespace = {"f": lambda x: x + 1, "__name__": "gmts_skips"}
        exec(compile(tests, "tests.py", "exec"), namespace)  # noqa: S102 - the tests' own text
        suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(namespace[c])
                                   for c in ("Base", "Sub", "Other"))
        result = unittest.TextTestRunner(stream=io.StringIO()).run(suite)
        assert (result.testsRun, len(result.skipped)) == (4, 3)  # Other.test_c alone runs
        plan = testplan.build_plan(tests, "f")
        assert plan.trusted + plan.untrusted == 1
        assert [u.name for u in plan.units] == (["Other.test_c"] if other == "6" else [])
        reference = {"tests": tests, "entry_point": "f"}
        honest = block("def f(x):\n    return x + 1\n")
        assert scores(honest, reference) == ((1.0, 1.0) if other == "6" else (1.0, 0.0))
        wrong_in_skipped = block("def f(x):\n    return 6 if x == 5 else 0\n")
        assert scores(wrong_in_skipped, reference)[0] == 1.0  # only Other.test_c is run
        assert scores(block("def f(x):\n    return 0\n"), reference) == (0.0, 0.0)

    CASES_LOOP = ("import unittest\n\nclass T(unittest.TestCase):\n"
                  "    CASES = [([1, 2], 3), ([], 0), ([5], 5)]\n\n"
                  "    def test_table(self):\n        for xs, want in self.CASES:\n"
                  "            self.assertEqual(f(xs), want)\n\n"
                  "    def test_local(self):\n        cases = [([1], 1), ([2, 2], 4)]\n"
                  "        for xs, want in cases:\n            with self.subTest(xs=xs):\n"
                  "                self.assertEqual(f(xs), want)\n"
                  "        self.assertEqual(len(cases[1][0]), 2)\n")

    @pytest.mark.parametrize("body", [
        "    return sum(xs)\n",
        "    xs.sort()\n    return sum(xs)\n",  # mutates, and no test reads it again
        "    xs.append(0)\n    return sum(xs)\n",  # mutates what test_local reads again
        "    return 3\n"])
    def test_a_loop_over_a_table_of_inputs_as_unittest_runs_it(self, body):
        # each input is the table's own object (a path into it, bound in the child): a mutation
        # counts where the test reads the table again, as under unittest
        import io
        import unittest
        solution = "def f(xs):\n" + body
        namespace = {"__name__": "gmts_cases"}
        exec(compile(solution + self.CASES_LOOP, "tests.py", "exec"), namespace)  # noqa: S102
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(namespace["T"])
        expected = unittest.TextTestRunner(stream=io.StringIO()).run(suite).wasSuccessful()
        plan = testplan.build_plan(self.CASES_LOOP, "f")
        assert plan.harness is None and plan.trusted == 3
        want = 1.0 if expected else 0.0
        assert scores(block(solution), {"tests": self.CASES_LOOP, "entry_point": "f"}) == (
            want, want)

    def test_a_solution_that_mutates_a_class_fixture(self):
        # setUpClass's list is one object for both tests: sorting it in the first fails the second
        assert testplan.build_plan(SHARED_FIXTURE).harness is None
        assert scores(block("def smallest(xs):\n    return min(xs)\n"),
                      SHARED_FIXTURE) == (1.0, 1.0)
        assert scores(block("def smallest(xs):\n    xs.sort()\n    return xs[0]\n"),
                      SHARED_FIXTURE) == (0.0, 0.0)

    def test_a_class_attribute_is_one_object_for_the_class(self):
        # the second test reads what the first appended, as unittest runs them (by name)
        good = "def record(log, x):\n    log.append(x)\n"
        assert scores(block(good), SHARED_LOG) == (1.0, 1.0)
        assert scores(block("def record(log, x):\n    log[:] = [x]\n"),
                      SHARED_LOG) == (0.0, 0.0)

    def test_setupclass_calls_the_solution_once(self):
        plan = testplan.build_plan(ONCE)
        calls = [s for u in plan.units for s in u.steps if "build_table(" in str(s)]
        assert len(calls) == 1 and plan.harness is None
        assert scores(block("def build_table(n):\n    return [i * i for i in range(n)]\n"),
                      ONCE) == (1.0, 1.0)
        assert scores(block("def build_table(n):\n    return [i * 2 for i in range(n)]\n"),
                      ONCE) == (0.0, 0.0)

    def test_mixins_bases_super_and_helper_methods(self):
        plan = testplan.build_plan(HELPERS)
        assert plan.harness is None and [u.name for u in plan.units] == [
            "TestSmall.test_doubles", "TestLarge.test_doubles"]
        assert scores(block("def double(xs):\n    return [2 * v for v in xs]\n"),
                      HELPERS) == (1.0, 1.0)
        # right for TestSmall's input only: the inherited test under TestLarge's setUp fails
        wrong = "def double(xs):\n    return [2 * v if v < 50 else v for v in xs]\n"
        assert scores(block(wrong), HELPERS) == (0.0, 0.0)
        # emptying the input: the helper's side is read before the call, as everywhere else
        assert scores(block("def double(xs):\n    xs.clear()\n    return []\n"),
                      HELPERS) == (0.0, 0.0)

    @pytest.mark.parametrize("change", [
        "\nTestItems.test_a_smallest = None\n",  # a class the module changes after defining it
        "\ndef setUpModule():\n    pass\n"])
    def test_what_stays_with_pytest(self, change):
        tests = SHARED_FIXTURE + change
        assert testplan.build_plan(tests).harness is not None
        assert trusted(block("def smallest(xs):\n    return min(xs)\n"), tests) == 0.0


# ------------------------------------------------ HumanEval+'s input lists at their real size

class TestLongInputLists:
    """A check looping over thousands of inputs (HumanEval+ has problems with over a thousand) is
    unrolled by the trainer: every round judged, under trusted_only too (MAX_UNROLL rounds in all
    per plan; the judge's deadline grows with the plan's build time)."""

    N = 2500

    def reference(self):
        row = rows("humaneval_plus.jsonl")[0]  # HumanEval/0, has_close_elements
        answer = data.load_problems(str(ROWS / "humaneval_plus.jsonl"))[0].answer
        ns = {}
        exec(row["prompt"] + row["canonical_solution"], ns)  # noqa: S102 - the row's reference
        base = next(json.loads(line.split("=", 1)[1]) for line in answer["tests"].splitlines()
                    if line.strip().startswith("inputs ="))
        # the row's inputs, each shifted by a step of its own: N distinct inputs
        inputs = [[[x + i / 8 for x in base[i % len(base)][0]], base[i % len(base)][1]]
                  for i in range(self.N)]
        results = [ns["has_close_elements"](*inp) for inp in inputs]
        lines = [f"    inputs = {inputs!r}" if line.strip().startswith("inputs =") else
                 f"    results = {results!r}" if line.strip().startswith("results =") else line
                 for line in answer["tests"].splitlines()]
        return row, dict(answer, tests="\n".join(lines) + "\n"), results

    def test_every_round_judged_by_the_trainer(self):
        row, reference, results = self.reference()
        assert results.count(True) and results.count(False)
        plan = testplan.build_plan(reference["tests"], reference["entry_point"])
        assert (plan.trusted, plan.untrusted, plan.harness) == (1, 0, None)
        assert sum("eval" in s for s in plan.units[0].steps) == self.N  # one call per input
        honest = block(row["prompt"] + row["canonical_solution"])
        assert scores(honest, reference) == (1.0, 1.0)
        # right for the first 2,000 calls, wrong from then on: the late rounds are judged too
        late = (row["prompt"] + "    calls.append(1)\n    if len(calls) > 2000:\n"
                "        return not _right(numbers, threshold)\n"
                "    return _right(numbers, threshold)\n\ncalls = []\n\n"
                "def _right(numbers, threshold):\n" + row["canonical_solution"])
        assert scores(block(late), reference) == (0.0, 0.0)

    def test_more_rounds_than_the_plan_unrolls_go_to_pytest(self, monkeypatch):
        _, reference, _ = self.reference()
        monkeypatch.setattr(testplan, "MAX_UNROLL", self.N - 1)
        plan = testplan.build_plan.__wrapped__(reference["tests"], reference["entry_point"])
        assert plan.trusted == 0 and plan.untrusted == 1 and plan.harness is not None


# (tests, an honest task_func, a wrong one): shapes the trainer does not judge (a mock passed to
# the solution, a spec'd mock) stay with pytest, refused under trusted_only; the shapes it judges
# are in tests/test_code_reward_mocks.py
MOCKED = {
    "autospec": (
        ("    @patch('os.getcwd', autospec=True, return_value='/x')\n"
         "    def test_cwd(self, mock_cwd):\n        self.assertEqual(task_func(), '/x')\n"),
        "import os\ndef task_func():\n    return os.getcwd()\n",
        "def task_func():\n    return '/x/'\n"),
    "magicmock": (
        ("    def test_calls(self):\n        m = MagicMock(return_value=3)\n"
         "        self.assertEqual(task_func(m), 6)\n        m.assert_called_once_with()\n"),
        "def task_func(f):\n    return f() * 2\n",
        "def task_func(f):\n    return 6\n"),  # right value, the mock never called
}


@pytest.mark.parametrize("shape", sorted(MOCKED))
def test_mocked_testcases_are_refused_with_one_reason(shape):
    body, honest, wrong = MOCKED[shape]
    tests = ("import unittest\nfrom unittest.mock import MagicMock, mock_open, patch\n\n"
             "class TestCases(unittest.TestCase):\n" + body)
    plan = testplan.build_plan(tests, "task_func")
    assert plan.trusted == 0 and plan.harness is not None
    assert plan.refusal.startswith("line 4 (TestCases): unittest.mock")
    result = sandbox.run_python(honest, tests=tests, entry_point="task_func", trusted_only=True)
    assert result.refused and not result.passed
    assert result.stderr == f"refused (trusted_only): {plan.refusal}"
    reference = {"tests": tests, "entry_point": "task_func"}
    assert scores(block(honest), reference) == (1.0, 0.0)  # pytest in the sandbox; refused
    assert scores(block(wrong), reference) == (0.0, 0.0)


class TestSharedValuesTheTestsChange:
    """The trainer runs the tests' own statements while building the plan, but judges the checks
    that read the solution's values afterwards: a shared value (a class attribute, a module-level
    list) that a later test changes in place would reach an earlier test's check changed. Such
    tests go to pytest; a function class attribute is a method of the instance, not a value."""

    LOG = ("import unittest\n\nclass TestLog(unittest.TestCase):\n    log = []\n\n"
           "    def test_a(self):\n        self.assertEqual(count([]), len(self.log))\n\n"
           "    def test_b(self):\n        self.log.append(1)\n"
           "        self.assertEqual(count(self.log), 1)\n")
    ITEMS = ("ITEMS = []\n\ndef test_a():\n    assert count([]) == len(ITEMS)\n\n"
             "def test_b():\n    ITEMS.append(1)\n    assert count(ITEMS) == 1\n")

    @pytest.mark.parametrize("tests", [LOG, ITEMS], ids=["class_attribute", "module_list"])
    def test_a_later_test_changing_a_shared_value(self, tests):
        plan = testplan.build_plan(tests)
        assert plan.harness is not None and "later tests share" in plan.refusal
        assert scores(block("def count(xs):\n    return len(xs)\n"), tests) == (1.0, 0.0)
        assert scores(block("def count(xs):\n    return 1\n"), tests) == (0.0, 0.0)

    def test_a_function_class_attribute(self):
        tests = ("import unittest\n\nclass TestF(unittest.TestCase):\n    f = lambda x: x + 1\n\n"
                 "    def test_a(self):\n        g = self.f\n"
                 "        self.assertEqual(add(1, 1), 2)\n        self.assertEqual(g(1), 2)\n")
        # under unittest, g is bound to the instance: g(1) is f(self, 1), a TypeError
        assert scores(block("def add(a, b):\n    return a + b\n"), tests) == (0.0, 0.0)


def test_a_helper_method_is_not_moved_before_another_call():
    # `assertEqual(nxt(), self.norm(nxt()) - 1)`: inlining norm before the statement would call
    # the second nxt() first; the test stays with pytest, where a counter answers 1 then 2
    tests = ("import unittest\n\nclass TestN(unittest.TestCase):\n    def norm(self, x):\n"
             "        return x * 1\n\n    def test_order(self):\n"
             "        self.assertEqual(nxt(), self.norm(nxt()) - 1)\n")
    plan = testplan.build_plan(tests)
    assert plan.harness is not None and "moved before another call" in plan.refusal
    counter = "n = [0]\ndef nxt():\n    n[0] += 1\n    return n[0]\n"
    assert scores(block(counter), tests) == (1.0, 0.0)
    assert scores(block("def nxt():\n    return 1\n"), tests) == (0.0, 0.0)


# super(C, self), two TestCase bases of one class (each base's tests run for it too), a tearDown
# that asserts
MORE_SHAPES = {  # each judged by the trainer, as unittest runs it
    "old_super": '''import unittest
class Base(unittest.TestCase):
    def setUp(self):
        self.xs = [2, 1]
class TestX(Base):
    def setUp(self):
        super(TestX, self).setUp()
        self.want = [1, 2]
    def test_a(self):
        self.assertEqual(f(self.xs), self.want)
        self.assertRaises(ValueError, f, [])
''',
    "two_bases": '''import unittest
class A(unittest.TestCase):
    def test_a(self):
        self.assertEqual(f([3, 1]), [1, 3])
class B(unittest.TestCase):
    def test_b(self):
        with self.assertRaises(ValueError):
            f([])
class TestAB(A, B):
    pass
''',
    "teardown_asserts": '''import unittest
class T(unittest.TestCase):
    def setUp(self):
        self.calls = []
    def tearDown(self):
        self.assertEqual(f([2, 1]), [1, 2])
    def test_a(self):
        self.assertRaises(ValueError, f, [])
''',
}


@pytest.mark.parametrize("shape", sorted(MORE_SHAPES))
def test_more_testcase_shapes_judged_by_the_trainer(shape):
    tests = MORE_SHAPES[shape]
    plan = testplan.build_plan(tests)
    assert plan.harness is None and plan.untrusted == 0
    good = "def f(xs):\n    if not xs:\n        raise ValueError('e')\n    return sorted(xs)\n"
    assert scores(block(good), tests) == (1.0, 1.0)
    assert scores(block("def f(xs):\n    return sorted(xs)\n"), tests) == (0.0, 0.0)
    assert scores(block(good.replace("sorted(xs)", "xs")), tests) == (0.0, 0.0)
