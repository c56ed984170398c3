"""The code reward, fifth round (issue 53's kinds, new instances): each a class of cases. A wrong
solution scores 0.0 under get_reward("code") and trusted_only=True, an honest one 1.0; each
expected verdict is what the suite's own runner (or a plain Python run) gives, as the comments say.
"""
import functools
import json
import os
from pathlib import Path
from typing import ClassVar

import pytest

from gmts import data
from gmts.rewards import get_reward, testplan
from gmts.rewards.code import extract_code
from gmts.rewards.sandbox import _tokens_equal

code = get_reward("code")
trusted = get_reward("code", trusted_only=True)


def block(src: str, fence: str = "```python", close: str = "```") -> str:
    return f"Here it is:\n{fence}\n{src.strip(chr(10))}\n{close}\n"


def scores(answer: str, reference) -> tuple[float, float]:
    return code(answer, reference), trusted(answer, reference)


ADD = "assert add(2, 3) == 5\nassert add(-1, 1) == 0\n"
GOOD_ADD = "def add(a, b):\n    return a + b\n"


# ------------------------------------------------ 5. answers written the ordinary way

class TestUsageExamplesAfterTheSolution:
    """A usage example after the definitions is not the solution, in any of its shapes (not only
    `print(...)`): an assignment of a call, a bare call, a loop over examples, reading stdin, a
    `main()` call. What the definitions read (a table built after them) stays."""

    USAGE: ClassVar[dict] = {
        "assignment_then_print": "\nresult = add('a', 1)\nprint(result)\n",
        "bare_call": "\nadd('a', 1)\n",
        "loop_over_examples": "\nfor x in [(1, 'a')]:\n    print(add(*x))\n",
        "reads_stdin": "\na, b = map(int, input().split())\nprint(add(a, b))\n",
        "main_call": ("\ndef main():\n    a, b = map(int, input().split())\n    print(add(a, b))\n"
                      "\nmain()\n"),
        "object_then_method": ("\nclass Calc:\n    def run(self, x):\n        return add(1, x)\n"
                               "\n\nc = Calc()\nc.run('a')\nprint(c)\n"),
    }

    @pytest.mark.parametrize("name", sorted(USAGE))
    def test_honest_with_a_failing_usage_example(self, name):
        assert scores(block(GOOD_ADD + self.USAGE[name]), ADD) == (1.0, 1.0)
        wrong = GOOD_ADD.replace("a + b", "a - b") + self.USAGE[name]
        assert scores(block(wrong), ADD) == (0.0, 0.0)

    @pytest.mark.parametrize("tail", [
        "\nT = {i: i for i in range(-5, 5)}\n",  # read by add: stays
        "\ndef build():\n    return {i: i for i in range(-5, 5)}\n\nT = build()\n"])
    def test_what_the_definitions_read_stays(self, tail):
        honest = "def add(a, b):\n    return T[a] + b\n" + tail
        assert scores(block(honest), ADD) == (1.0, 1.0)

    def test_a_name_the_tests_read_stays(self):
        honest = GOOD_ADD + "\nFIVE = add(2, 3)\n"
        assert scores(block(honest), ADD + "assert FIVE == 5\n") == (1.0, 1.0)


class TestFenceLabels:
    @pytest.mark.parametrize("label", ["py3", "python3.11", "ipython", "Python3", "{.py3}"])
    def test_python_under_another_label(self, label):
        answer = block(GOOD_ADD, fence="```" + label)
        assert extract_code(answer, frozenset({"add"})) == GOOD_ADD
        assert scores(answer, ADD) == (1.0, 1.0)
        assert scores(answer.replace("a + b", "a * b"), ADD) == (0.0, 0.0)

    def test_a_labelled_block_of_another_language_is_not_python(self):
        answer = block(GOOD_ADD) + block("def add(a, b):\n    return 0\n", fence="```pyret")
        assert scores(answer, ADD) == (1.0, 1.0)


class TestDecimalsWrittenWithAnExponent:
    """stdin/stdout without a tolerance: two decimals are equal when their values are exactly
    equal, written with a point or an exponent (Python prints 1e-07); integers and other words
    stay as written."""

    @pytest.mark.parametrize("got,want,equal", [
        (b"1e-07", b"0.0000001", True), (b"1.0E-7", b"1e-07", True), (b"1e5", b"100000.0", True),
        (b"0.50", b"0.5", True), (b"1e-07", b"0.0000002", False), (b"1e5", b"100000", False),
        (b"5", b"5.0", False), (b"inf", b"Infinity", False), (b"1e", b"1.0", False),
        (b"0x1", b"1.0", False), (b"1_0.0", b"10.0", False),
        ("\u0661.0".encode(), b"1.0", False)])  # an Arabic-Indic digit is no ASCII decimal
    def test_tokens(self, got, want, equal):
        assert _tokens_equal(got, want, None) is equal

    def test_a_program_printing_a_small_float(self):
        cases = {"cases": [{"input": "1 10000000\n", "output": "0.0000001\n"}]}
        honest = block("a, b = map(int, input().split())\nprint(a / b)")  # prints 1e-07
        assert scores(honest, cases) == (1.0, 1.0)
        assert scores(block("print('1e-06')"), cases) == (0.0, 0.0)


# ------------------------------------------------ 6. rows checked completely when loaded

class TestRowsJudgeableWhenLoaded:
    """A row that would raise at scoring (ending a training step) or score 0 whatever the answer
    fails at loading with one line naming the file and the row."""

    def load(self, tmp_path, row, name="rows.jsonl"):
        path = tmp_path / name
        path.write_text(json.dumps(row) + "\n")
        return data.load_problems(str(path))

    @pytest.mark.parametrize("row,said", [
        ({"tests": "assert f(1) == 1\ndef (", "entry_point": "f"},
         "tests is not valid Python: invalid syntax"),
        ({"tests": "assert f(1) == 1\x00"}, "tests is not valid Python: source code string"),
        ({"tests": "assert f(1) == 1", "setup": "def ("}, "setup is not valid Python"),
        ({"tests": "def check(candidate):\n    assert candidate(1) == 1\n", "entry_point": "f",
          "prompt": "def f(:\n"}, "prompt is not valid Python"),
        ({"tests": "def check(candidate):\n    assert candidate(1) == 1\n",
          "entry_point": "my f"}, "entry_point must be a Python name"),
        ({"tests": "  \n"}, "the tests are empty"),
        ({"tests": []}, "the tests are empty"),
        ({"cases": []}, "cases is empty"),
        ({"cases": json.dumps([{"input": "[1, 2]", "output": "3", "testtype": "functional"}])},
         "testtype 'functional' call a function"),
    ])
    def test_a_row_that_cannot_be_judged(self, tmp_path, row, said):
        with pytest.raises(ValueError, match=said) as info:
            self.load(tmp_path, {"question": "q", **row})
        assert "rows.jsonl:1" in str(info.value) and "\n" not in str(info.value)

    def test_the_same_reference_raised_at_scoring(self):
        # what the loader now refuses used to reach the reward, which raises (a data bug)
        with pytest.raises(ValueError, match="not valid Python"):
            code(block(GOOD_ADD), {"tests": "assert add(1, 2) == 3\ndef ("})

    def test_stdin_cases_marked_stdin_load(self, tmp_path):
        cases = [{"input": "2 3\n", "output": "5\n", "testtype": "stdin"}]
        (problem,) = self.load(tmp_path, {"question": "q", "cases": json.dumps(cases)})
        honest = block("a, b = map(int, input().split())\nprint(a + b)")
        assert scores(honest, problem.answer) == (1.0, 1.0)

    def test_tests_named_by_answer_field_are_checked_and_keep_the_rows_limits(self, tmp_path):
        row = {"question": "q", "domain": "code", "checks": ["assert add(1, 2) == 3"],
               "timeout": 3}
        path = tmp_path / "rows.jsonl"
        path.write_text(json.dumps(row) + "\n")
        (problem,) = data.load_problems(str(path), answer_field="checks")
        assert problem.answer == {"tests": "assert add(1, 2) == 3", "entry_point": None,
                                  "setup": "", "timeout": 3.0}
        path.write_text(json.dumps(dict(row, checks=["assert add(1, 2) == 3)"])) + "\n")
        with pytest.raises(ValueError, match="rows.jsonl:1: tests is not valid Python"):
            data.load_problems(str(path), answer_field="checks")


class TestEveryFieldOfACodeRowReadOrRefused:
    """A code row's fields are each read as it says, or the load fails with one line naming the
    file and row: two references where one is judged, tests that hold no test, fields that one kind
    of reference never reads, an entry point the tests never name, misspelt field names."""

    CASES: ClassVar[list] = [{"input": "2 3\n", "output": "5\n"}]

    def load(self, tmp_path, row, **options):
        path = tmp_path / "rows.jsonl"
        path.write_text(json.dumps({"question": "Add two numbers.", **row}) + "\n")
        return data.load_problems(str(path), **options)

    def refused(self, tmp_path, row, said, **options):
        with pytest.raises(ValueError, match=said) as info:
            self.load(tmp_path, row, **options)
        assert str(info.value).startswith(str(tmp_path / "rows.jsonl") + ":1: ")
        assert "\n" not in str(info.value)

    @pytest.mark.parametrize("row", [
        {"tests": ADD, "cases": CASES},
        {"test": ADD, "cases": json.dumps(CASES)},
        {"tests": ADD, "test": "assert add(0, 0) == 0"},
    ])
    def test_two_references_where_one_is_judged(self, tmp_path, row):
        first, second = (k for k in ("tests", "test", "cases") if k in row)
        self.refused(tmp_path, row, f"both '{first}' and '{second}'")

    def test_a_reference_named_by_answer_field_is_judged_alone(self, tmp_path):
        row = {"tests": ADD, "cases": self.CASES}
        (problem,) = self.load(tmp_path, row, answer_field="cases")
        stdin = block("a, b = map(int, input().split())\nprint(a + b)")
        assert scores(stdin, problem.answer) == (1.0, 1.0)
        (problem,) = self.load(tmp_path, row, answer_field="tests")
        assert scores(block(GOOD_ADD), problem.answer) == (1.0, 1.0)

    NO_TEST: ClassVar[list] = [
        "import math\n",
        '"""Tests."""\nfrom solution import add\nX = add(1, 2)\n',
        "def helper(a):\n    return add(a, a)\n",
        "import unittest\n\nclass T(unittest.TestCase):\n    def setUp(self):\n        pass\n",
        "def check(candidate):\n    assert candidate(2, 3) == 5\n",  # no entry point to pass
    ]

    @pytest.mark.parametrize("tests", NO_TEST)
    def test_tests_that_hold_no_test(self, tmp_path, tests):
        # what the reward makes of them: 0 whatever the answer
        assert scores(block(GOOD_ADD), {"tests": tests}) == (0.0, 0.0)
        self.refused(tmp_path, {"tests": tests}, "the tests hold no test")
        self.refused(tmp_path, {"checks": tests, "domain": "code"}, "the tests hold no test",
                     answer_field="checks")

    CALLS_ONLY: ClassVar[list] = [
        "add(2, 3)\nadd(1, 1)\n",
        "print(add(2, 3))\n",
        "for a in range(3):\n    add(a, a)\n",
        "result = add(2, 3)\nprint(result)\n",
        "with open('/dev/null') as fh:\n    fh.write(str(add(2, 3)))\n",
    ]

    @pytest.mark.parametrize("tests", CALLS_ONLY)
    def test_tests_that_only_call_or_print(self, tmp_path, tests):
        # nothing judged: a wrong answer scores as the right one, in each mode
        wrong = block("def add(a, b):\n    return a - b\n")
        assert scores(block(GOOD_ADD), {"tests": tests}) == scores(wrong, {"tests": tests})
        self.refused(tmp_path, {"tests": tests}, "the tests hold no test .* a bare call or print")

    def test_mbpps_own_row_without_a_test(self, tmp_path):
        row = {"task_id": 1, "text": "Add two numbers.", "test_list": ["import math"]}
        self.refused(tmp_path, row, "the tests hold no test")

    @pytest.mark.parametrize("row", [
        {"tests": "if add(2, 3) != 5:\n    raise AssertionError\n"},
        {"tests": "def test_add():\n    assert add(2, 3) == 5\n"},
        {"tests": "def check(candidate):\n    assert candidate(2, 3) == 5\n", "entry_point": "add"},
        {"tests": "def check(candidate):\n    assert candidate(2, 3) == 5\n\ncheck(add)\n"},
        {"tests": "def helper():\n    assert add(2, 3) == 5\n\nhelper()\n"},
        {"tests": "import numpy as np\nnp.testing.assert_equal(add(2, 3), 5)\n"},
    ])
    def test_tests_that_test_something_load_and_score(self, tmp_path, row):
        (problem,) = self.load(tmp_path, row)
        assert scores(block(GOOD_ADD), problem.answer)[0] == 1.0
        assert scores(block("def add(a, b):\n    return a - b\n"), problem.answer)[0] == 0.0

    @pytest.mark.parametrize("row,said", [
        ({"tests": ADD, "float_tolerance": 1e-6}, "float_tolerance applies to stdin/stdout"),
        ({"tests": ADD, "case_insensitive": True}, "case_insensitive applies to stdin/stdout"),
        ({"cases": CASES, "entry_point": "add"}, "entry_point is read with tests"),
        ({"cases": CASES, "setup": "import math"}, "setup is read with tests"),
        ({"tests": ADD, "entry_point": "plus"}, "entry_point 'plus' is neither named by the tests"),
        ({"tests": ADD, "starter_code": ["def add(a, b):"]}, "starter_code must be a string"),
        ({"tests": ADD, "entrypoint": "add"}, "unknown field 'entrypoint'"),
        ({"tests": ADD, "timeOut": 3}, "did you mean 'timeout'"),
        ({"tests": ADD, "timeouts": 3}, "did you mean 'timeout'"),
        ({"tests": ADD, "memory_MB": 512}, "did you mean 'memory_mb'"),
        ({"cases": CASES, "float_tolerence": 0.1}, "did you mean 'float_tolerance'"),
        ({"tests": ADD, "entry_piont": "add"}, "did you mean 'entry_point'"),
        ({"cases": CASES, "caseInsensitive": True}, "did you mean 'case_insensitive'"),
    ])
    def test_a_field_that_would_be_dropped(self, tmp_path, row, said):
        self.refused(tmp_path, row, said)

    @pytest.mark.parametrize("row,options,said", [
        ({"answer": "42", "reward": "code"}, {}, "the code reward cannot judge a math row"),
        ({"answer": "42"}, {"reward": "code"}, "the code reward cannot judge a math row"),
        ({"tests": ADD, "reward": "math"}, {}, "the math reward cannot judge a code row"),
        ({"tests": ADD}, {"reward": "gsm8k"}, "the gsm8k reward cannot judge a code row"),
        ({"answer": "42", "reward": "choice"}, {}, "the choice reward needs a letter A-J"),
    ])
    def test_a_reward_that_cannot_read_the_answer(self, tmp_path, row, options, said):
        # what the reward makes of such an answer: a raise (a step ended) or 0 whatever the answer
        answer = row.get("answer") or {"tests": ADD}
        reward = options.get("reward") or row["reward"]
        try:
            assert get_reward(reward)(block(GOOD_ADD) + "\\boxed{42}", answer) == 0.0
        except ValueError:
            pass
        self.refused(tmp_path, row, said, **options)
        # the same answers with a reward that reads them load
        (problem,) = self.load(tmp_path, {**row, "reward": None, "choices": ["41", "42"]}
                               if reward == "choice" else {k: v for k, v in row.items()
                                                           if k != "reward"})
        assert problem.reward in ("choice", "gsm8k", "code")

    def test_cases_named_by_answer_field_are_read_as_cases(self, tmp_path):
        row = {"domain": "code", "public": self.CASES, "timeout": 5}
        (problem,) = self.load(tmp_path, row, answer_field="public")
        assert problem.answer == {"cases": self.CASES, "timeout": 5.0}
        assert scores(block("a, b = map(int, input().split())\nprint(a + b)"),
                      problem.answer) == (1.0, 1.0)
        assert scores(block("print(6)"), problem.answer) == (0.0, 0.0)
        self.refused(tmp_path, dict(row, public=[{"input": "1"}]), "cases must be a list",
                     answer_field="public")

    def test_fields_of_other_meanings_are_kept(self, tmp_path):
        # near no code field (MBPP's text, a suite's own keys): kept for a custom reward, the
        # reference as the row says (a suite's limits are read: tests/test_code_reward_limits.py)
        row = {"tests": ADD, "entry_point": "add", "text": "t", "rating": 800, "tags": ["math"],
               "test_list": ["assert add(2, 3) == 5"], "difficulty": "easy"}
        (problem,) = self.load(tmp_path, row)
        assert problem.answer == {"tests": ADD, "entry_point": "add", "setup": ""}
        assert problem.fields["rating"] == 800 and problem.fields["text"] == "t"

    @pytest.mark.parametrize("name,options", [
        ("humaneval.jsonl", {}), ("humaneval_plus.jsonl", {}), ("mbpp.jsonl", {}),
        ("kodcode.jsonl", {}), ("bigcodebench.jsonl", {"question_field": "complete_prompt"}),
        ("bigcodebench_mocks.jsonl", {"question_field": "complete_prompt"})])
    def test_every_real_row_still_loads(self, name, options):
        path = Path(__file__).parent / "code_rows" / name
        rows = path.read_text().splitlines()
        assert len(data.load_problems(str(path), **options)) == len(rows) > 0

    def test_the_builtin_formats_are_checked_alike(self):
        from gmts.data import _check_judgeable, builtin
        row = {"task_id": "HumanEval/0", "prompt": "def add(a, b):\n    pass\n",
               "entry_point": "add",
               "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n"}
        _check_judgeable(builtin.humaneval(row, "he:1")["answer"], "he:1")
        with pytest.raises(ValueError, match="he:1: the tests hold no test"):
            _check_judgeable(builtin.kodcode({"question": "q", "test": "import math\n"},
                                             "he:1")["answer"], "he:1")


# ------------------------------------------------ 4. each format's whole program

class TestMBPPsOwnRowsFromALocalFile:
    """MBPP's own rows (the original: text, test_list, challenge_test_list, test_setup_code; the
    sanitized set: prompt, test_list, test_imports) read from a local file are shown and judged as
    the built-in loader does: the text and the first test shown, every test judged."""

    ORIGINAL: ClassVar[dict] = {
        "task_id": 11, "text": "Write a python function to add two numbers.",
        "code": GOOD_ADD, "test_list": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"],
        "test_setup_code": "", "challenge_test_list": ["assert add(10, -3) == 7"]}

    def test_the_original(self, tmp_path):
        path = tmp_path / "mbpp.jsonl"
        path.write_text(json.dumps(self.ORIGINAL) + "\n")
        (problem,) = data.load_problems(str(path))
        assert problem.domain == "code" and problem.question.count("assert") == 1
        assert problem.question.startswith(self.ORIGINAL["text"])
        assert scores(block(GOOD_ADD), problem.answer) == (1.0, 1.0)
        # a table of the visible tests (both of test_list) misses the challenge test
        table = "def add(a, b):\n    return {(1, 2): 3, (2, 2): 4}.get((a, b), 0)\n"
        assert scores(block(table), problem.answer) == (0.0, 0.0)

    def test_the_sanitized_set_with_test_imports(self, tmp_path):
        row = {"task_id": 12, "prompt": "Write a function for the floor of a quotient.",
               "code": "def q(a, b):\n    return a // b\n",
               "test_list": ["assert math.isclose(q(7, 2), 3)", "assert q(-7, 2) == -4"],
               "test_imports": ["import math"]}
        path = tmp_path / "sanitized-mbpp.jsonl"
        path.write_text(json.dumps(row) + "\n")
        (problem,) = data.load_problems(str(path))
        assert problem.answer["setup"] == "import math"
        assert scores(block(row["code"]), problem.answer) == (1.0, 1.0)
        assert scores(block("def q(a, b):\n    return int(a / b)\n"), problem.answer) == (
            0.0, 0.0)


class TestReturnedValuesOfTheStdlibAndNumpy:
    """range, datetime's values and numpy arrays cross as data and are rebuilt here as what they
    are: each honest/wrong pair verdict as plain Python gives it (the last column)."""

    VALUES: ClassVar[list] = [  # (solution, tests, plain Python's verdict)
        ("def f(n):\n    return range(n)\n",
         "assert list(f(3)) == [0, 1, 2]\nassert f(2) == range(2)\n", True),
        ("def f(n):\n    return range(n + 1)\n", "assert f(2) == range(2)\n", False),
        ("def f():\n    return range(10**30)\n", "assert len(f()) == 10**30\n", False),  # Overflow
        ("import datetime\ndef f():\n    return datetime.date(2020, 1, 2)\n",
         "import datetime\nassert f() == datetime.date(2020, 1, 2)\nassert f().year == 2020\n",
         True),
        ("import datetime\ndef f():\n    return datetime.date(2020, 1, 3)\n",
         "import datetime\nassert f() == datetime.date(2020, 1, 2)\n", False),
        ("import datetime\ndef f():\n    return datetime.timedelta(days=2)\n",
         "from datetime import timedelta\nassert f() == timedelta(days=2)\n", True),
        ("import datetime\ndef f(d):\n    return d + datetime.timedelta(days=1)\n",
         "from datetime import date\nassert f(date(2020, 1, 1)) == date(2020, 1, 2)\n", True),
        ("def f(d):\n    return d\n",
         "from datetime import date\nassert f(date(2020, 1, 1)) == date(2020, 1, 2)\n", False),
        (("import datetime as d\ndef f():\n"
         "    return d.datetime(2020, 1, 2, tzinfo=d.timezone.utc)\n"),
         "import datetime as d\nassert f() == d.datetime(2020, 1, 2, tzinfo=d.timezone.utc)\n",
         True),
        ("import numpy as np\ndef f(n):\n    return np.arange(n)\n",
         "import numpy as np\nassert np.array_equal(f(3), [0, 1, 2])\n", True),
        ("import numpy as np\ndef f(n):\n    return np.arange(n + 1)\n",
         "import numpy as np\nassert np.array_equal(f(3), [0, 1, 2])\n", False),
        ("import numpy as np\ndef f(n):\n    return np.arange(n) / 3\n",
         "import numpy as np\nassert np.allclose(f(3), [0, 1 / 3, 2 / 3])\n", True),
        ("import numpy as np\ndef f(n):\n    return np.zeros((n, 2))\n",
         "assert f(3).shape == (3, 2)\n", True),
        ("import numpy as np\ndef f(n):\n    return np.arange(n)\n",
         "assert f(3) == [0, 1, 2]\n", False),  # the truth of an array: ValueError
        # numpy scalars stay numpy scalars: equal to their values, but np.True_ is not True and
        # np.int64 is no int
        ("import numpy as np\ndef f(x):\n    return np.bool_(x > 0)\n",
         "assert f(1) == True\nassert f(-1) == False\nassert f(1)\n", True),
        ("import numpy as np\ndef f(x):\n    return np.bool_(x > 0)\n",
         "assert f(1) is True\n", False),
        ("import numpy as np\ndef f(x):\n    return np.int64(x)\n",
         "assert type(f(1)) == int\n", False),
        ("import numpy as np\ndef f(x):\n    return np.int64(x) * 2\n",
         "assert f(1) == 2\nassert f(2) in [4, 5]\nassert [f(3)] == [6]\n", True),
        ("import numpy as np\ndef f():\n    return np.uint64(2**64 - 1)\n",
         "assert f() == 2**64 - 1\n", True),
        ("import numpy as np\ndef f():\n    return np.str_('a')\n", "assert f() == 'a'\n", True),
    ]

    @pytest.mark.parametrize("solution,tests,plain", VALUES, ids=lambda x: str(x)[-30:])
    def test_as_plain_python_judges(self, solution, tests, plain):
        namespace = {}
        try:  # the verdict of the program the suites run: solution, then tests
            exec(compile(solution + tests, "program.py", "exec"), namespace)  # noqa: S102
            passed = True
        except Exception:  # noqa: BLE001 - a failing assert or an error: a fail
            passed = False
        assert passed is plain
        want = 1.0 if plain else 0.0
        assert scores(block(solution), tests) == (want, want)

    def test_an_object_posing_as_an_array_gives_only_what_an_array_could(self):
        fake = ("class ndarray:\n    __module__ = 'numpy'\n    class dtype:\n        kind = 'i'\n"
                "        str = '<i8'\n    shape = ({n},)\n    size = 3\n"
                "    def tolist(self):\n        return [0, 1, 2]\n"
                "def f(n):\n    return ndarray()\n")
        tests = "import numpy as np\nassert np.array_equal(f(3), [0, 1, 2])\n"
        assert scores(block(fake.format(n=3)), tests) == (1.0, 1.0)  # what np.arange(3) gives
        assert scores(block(fake.format(n=2)), tests) == (0.0, 0.0)  # its shape is not its items

    SUBCLASS = "import numpy as np\n\nclass Meters(np.ndarray):\n    unit = 'm'\n\n"

    @pytest.mark.parametrize("tests", [
        "import numpy as np\n\ndef test_a():\n    assert np.array_equal(f([1, 2]), [1, 2])\n",
        ("import numpy as np\n\ndef test_a():\n    r = f([1, 2])\n"
         "    assert np.array_equal(r * 2, [2, 4])\n    assert r.shape == (2,)\n"),
        ("import unittest\nimport numpy as np\n\nclass T(unittest.TestCase):\n"
         "    def test_a(self):\n"
         "        np.testing.assert_array_equal(f([1, 2]), np.array([1, 2]))\n")],
        ids=["array_equal", "arithmetic", "numpy_testing"])
    def test_a_subclass_of_the_solutions_crosses_as_its_data(self, tmp_path, tests):
        """An ndarray subclass the solution defines is its data (read as ndarray holds it, none
        of the subclass's code) under a class of its name: judged as pytest judges it."""
        honest = self.SUBCLASS + "def f(xs):\n    return np.asarray(xs).view(Meters)\n"
        wrong = self.SUBCLASS + "def f(xs):\n    return np.asarray(xs[::-1]).view(Meters)\n"
        assert pytest_verdict(tmp_path, honest, tests) is True
        assert scores(block(honest), tests) == (1.0, 1.0)
        assert scores(block(wrong), tests) == (0.0, 0.0)
        # its own == and tolist are the solution's code: they cannot speak for its data
        lying = self.SUBCLASS.replace("    unit = 'm'\n", "    def tolist(self):\n"
                                      "        return [1, 2]\n\n    def __eq__(self, other):\n"
                                      "        return np.ones(2, dtype=bool)\n")
        lying += "def f(xs):\n    return np.asarray(xs[::-1]).view(Meters)\n"
        assert scores(block(lying), tests) == (0.0, 0.0)

    def test_a_subclass_is_rebuilt_under_its_name(self):
        import numpy as np
        r = testplan.decode({"ndarray": ["<i8", [2], [1, 2], "Meters"]})
        assert isinstance(r, np.ndarray) and type(r) is not np.ndarray
        assert type(r).__name__ == "Meters" and r.tolist() == [1, 2]
        assert type(testplan.decode({"ndarray": ["<i8", [2], [1, 2]]})) is np.ndarray
        for bad in ("not a name", 3, None):  # a forged report: no class is made of it
            with pytest.raises(ValueError, match="malformed array"):
                testplan.decode({"ndarray": ["<i8", [2], [1, 2], bad]})


def test_numpy_testing_asserts_judged_by_the_trainer():
    """More shapes, each against the runner: tests/test_code_reward_checked_parts.py."""
    tests = ("import numpy as np\n\ndef test_f():\n"
             "    np.testing.assert_array_equal(f(3), np.array([0, 1, 2]))\n")
    honest = "import numpy as np\ndef f(n):\n    return np.arange(n)\n"
    assert scores(block(honest), tests) == (1.0, 1.0)


class TestAnAnswerWrittenInParts:
    """"First a helper: ```...```, then the function: ```...```": the chosen block with the
    definitions and imports of earlier blocks that it reads and does not bind (transitively)."""

    HELPER = "import math\n\ndef _norm(a):\n    return int(math.copysign(abs(a), a))\n"
    USES = "def add(a, b):\n    return _plus(_norm(a), b)\n"
    PLUS = "def _plus(a, b):\n    return a + b\n"

    def test_helpers_in_earlier_blocks(self):
        answer = ("First the helpers:\n" + block(self.HELPER) + "and\n" + block(self.PLUS)
                  + "Then the function:\n" + block(self.USES))
        code_ = extract_code(answer, frozenset({"add"}))
        assert code_.index("import math") < code_.index("def _norm") < code_.index("def add")
        assert scores(answer, ADD) == (1.0, 1.0)
        wrong = answer.replace("return a + b", "return a * b")  # the helper is judged too
        assert scores(wrong, ADD) == (0.0, 0.0)

    def test_a_redefinition_in_the_chosen_block_wins(self):
        answer = block("def _plus(a, b):\n    return 0\n") + block(self.PLUS + "\n" + self.USES
                                                                 .replace("_norm(a)", "a"))
        assert "return 0" not in extract_code(answer, frozenset({"add"}))
        assert scores(answer, ADD) == (1.0, 1.0)

    def test_nothing_is_taken_when_nothing_is_missing(self):
        answer = block("import os\nX = 1\n") + block(GOOD_ADD)
        assert extract_code(answer, frozenset({"add"})) == GOOD_ADD


# ------------------------------------------------ 8. a skip mark's condition

# plain pytest, as a suite's harness runs it: no plugin of this environment's (xdist, anyio...),
# whose loading costs more than most programs' run
PLAIN_PYTEST = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def pytest_verdict(tmp_path, solution: str, tests: str) -> bool:
    """The real pytest on the program (solution, then tests) in a file of its own."""
    import subprocess
    import sys
    path = tmp_path / "test_program.py"
    path.write_text(solution + "\n" + tests)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(path)], check=False, capture_output=True, text=True,
                         cwd=tmp_path, timeout=120, env=PLAIN_PYTEST)
    return run.returncode == 0


@functools.cache
def pytest_verdicts(programs: tuple) -> dict:
    """The real pytest's verdict on each (solution, tests) program, as pytest_verdict gives it, all
    in one pytest run: each program a test file of its own, judged from the junit report (a
    failure, an error or no test at all fails it)."""
    import shutil
    import subprocess
    import sys
    import tempfile
    import xml.etree.ElementTree as ET
    folder = Path(tempfile.mkdtemp(prefix="gmts-verdicts-"))
    try:
        for i, (solution, tests) in enumerate(programs):
            (folder / f"test_p{i}.py").write_text(solution + "\n" + tests)
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--continue-on-collection-errors", "--junitxml",
                        str(folder / "report.xml"), str(folder)], check=False,
                       capture_output=True, cwd=folder, timeout=300, env=PLAIN_PYTEST)
        ran, failed = set(), set()
        for case in ET.parse(folder / "report.xml").iter("testcase"):
            file = (case.get("classname") or case.get("name") or "").split(".")[0]
            ran.add(file)
            if case.find("failure") is not None or case.find("error") is not None:
                failed.add(file)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {p: f"test_p{i}" in ran - failed for i, p in enumerate(programs)}


def test_the_batched_verdicts_are_pytests(tmp_path):
    programs = tuple((GOOD_ADD, t) for t in (
        "def test_a():\n    assert add(1, 2) == 3\n", "def test_a():\n    assert add(1, 2) == 4\n",
        "X = add(1, 2)\n", "import no_such_module\n\ndef test_a():\n    pass\n",
        "import pytest\n\n@pytest.mark.skip\ndef test_a():\n    assert 0\n",
        ("class TestA:\n    def test_a(self):\n        assert add(1, 1) == 2\n\n"
         "    def test_b(self):\n        assert add(1, 1) == 3\n")))
    got = pytest_verdicts(programs)
    assert [got[p] for p in programs] == [pytest_verdict(tmp_path, *p) for p in programs]
    assert [got[p] for p in programs] == [True, False, False, False, True, False]


def verdict(table: dict, solutions, name: str, solution: str) -> float:
    """pytest's verdict (1.0 or 0.0) on `solution` with the tests table[name], every program of
    the table with each of `solutions` run at once (pytest_verdicts)."""
    programs = tuple((s, t) for t in table.values() for s in solutions)
    return 1.0 if pytest_verdicts(programs)[(solution, table[name])] else 0.0


def judged_as_pytest_says(table: dict, answers: tuple, name: str) -> None:
    """Each of `answers` scores pytest's verdict on the tests table[name] in both modes (some pass
    and some fail there), and the trainer judges the whole file."""
    tests = table[name]
    wants = {a: verdict(table, answers, name, a) for a in answers}
    assert 0.0 in wants.values() and 1.0 in wants.values()
    for answer, want in wants.items():
        assert scores(block(answer), tests) == (want, want), answer
    assert testplan.build_plan(tests).harness is None


def honest_as_under_pytest(tmp_path, solution: str, tests: str) -> None:
    """An honest answer: plain pytest passes the program, and the code reward scores it 1.0."""
    assert pytest_verdict(tmp_path, solution, tests) is True
    assert code(block(solution), tests) == 1.0


SKIPIF = {
    "pytest_false": ("import pytest, sys\n\n@pytest.mark.skipif(sys.version_info < (3, 0), "
                     "reason='old')\ndef test_a():\n    assert f(2) == 4\n"),
    "pytest_true": ("import pytest\nimport sys\n\n"
                    "@pytest.mark.skipif(sys.maxsize > 1, reason='r')\ndef test_a():\n"
                    "    assert f(2) == 5\n\ndef test_b():\n    assert f(3) == 6\n"),
    "unittest_skipif_false": (
        "import sys\nimport unittest\n\nclass T(unittest.TestCase):\n"
        "    @unittest.skipIf(sys.platform == 'win32', 'no')\n"
        "    def test_a(self):\n        self.assertEqual(f(2), 4)\n"),
    "unittest_skipunless_false": (
        "import sys\nimport unittest\n\nclass T(unittest.TestCase):\n"
        "    @unittest.skipUnless(sys.version_info < (3, 0), 'py2')\n"
        "    def test_a(self):\n        self.assertEqual(f(2), 5)\n\n"
        "    def test_b(self):\n        self.assertEqual(f(3), 6)\n"),
    "class_skipif_true": (
        "import sys\nimport unittest\n\n@unittest.skipIf(sys.version_info[0] == 3, 'py3')\n"
        "class T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(f(2), 5)\n\n"
        "class U(unittest.TestCase):\n    def test_b(self):\n        self.assertEqual(f(3), 6)\n"),
}


@pytest.mark.parametrize("name", sorted(SKIPIF))
def test_a_skip_condition_on_the_interpreter_is_decided_by_the_trainer(tmp_path, name):
    tests = SKIPIF[name]
    for solution in ("def f(x):\n    return 2 * x\n", "def f(x):\n    return x + 2\n"):
        want = 1.0 if pytest_verdict(tmp_path, solution, tests) else 0.0
        assert scores(block(solution), tests) == (want, want)  # judged: trusted_only too


def test_another_skip_condition_stays_with_pytest():
    tests = ("import pytest\nHAS = True\n\n@pytest.mark.skipif(not HAS, reason='r')\n"
             "def test_a():\n    assert f(2) == 4\n")
    assert scores(block("def f(x):\n    return 2 * x\n"), tests) == (1.0, 0.0)


# ------------------------------------------------ 7. the time limit: a wrong answer's cost

def test_stdin_cases_stop_at_the_first_that_fails_to_finish():
    """A case that timed out or exited with an error fails the run whatever the others do: the
    child runs no more (a looping answer on 100 cases would otherwise cost 100 time limits)."""
    from gmts.rewards import sandbox
    inputs = [f"{i}\n" for i in range(6)]
    looping = "n = int(input())\nif n == 1:\n    while True:\n        pass\nprint(n)\n"
    run = sandbox.run_child({"solution": looping, "cases": inputs,
                             "out_caps": [1 << 20] * len(inputs)}, timeout=3)
    report = next(r["cases"] for r in run.report if "cases" in r)   # (3 s: case 0 finishes on a
    assert [c["timed_out"] for c in report] == [False, True]  # loaded machine) case 2 on: not run
    crashing = "n = int(input())\nprint(n)\nassert n != 2\n"
    run = sandbox.run_child({"solution": crashing, "cases": inputs,
                             "out_caps": [1 << 20] * len(inputs)}, timeout=5)
    report = next(r["cases"] for r in run.report if "cases" in r)
    assert [c["exit"] for c in report] == [0, 0, 1]
    cases = {"cases": [{"input": i, "output": i} for i in inputs], "timeout": 1}
    assert scores(block(looping), cases) == (0.0, 0.0)
    cases["timeout"] = 10                                  # the honest answer: never near its limit
    assert scores(block("print(int(input()))"), cases) == (1.0, 1.0)


# ------------------------------------------------ 3. values the tests share, as pytest shares them

SHARED_TABLE = ("import pytest\nCASES = [[3, 1, 2]]\n\n@pytest.mark.parametrize('xs', CASES)\n"
                "def test_a(xs):\n    assert smallest(xs) == 1\n\n"
                "@pytest.mark.parametrize('xs', CASES)\ndef test_b(xs):\n"
                "    assert xs == [3, 1, 2]\n")
HONEST_MIN = "def smallest(xs):\n    return min(xs)\n"
SORTS = "def smallest(xs):\n    xs.sort()\n    return xs[0]\n"


def test_a_parametrize_table_two_tests_share(tmp_path):
    # pytest passes CASES's own lists to both tests: sorting one in test_a fails test_b
    assert pytest_verdict(tmp_path, SORTS, SHARED_TABLE) is False
    assert pytest_verdict(tmp_path, HONEST_MIN, SHARED_TABLE) is True
    assert scores(block(SORTS), SHARED_TABLE) == (0.0, 0.0)
    assert scores(block(HONEST_MIN), SHARED_TABLE) == (1.0, 0.0)  # pytest's; refused when trusted
    # a table one test reads (or one of immutable values) is still the trainer's
    once = SHARED_TABLE.split("@pytest.mark.parametrize('xs', CASES)\ndef test_b")[0]
    assert scores(block(HONEST_MIN), once) == (1.0, 1.0)
    assert scores(block(SORTS), once) == (1.0, 1.0)  # nothing reads the sorted list again
    tuples = SHARED_TABLE.replace("[[3, 1, 2]]", "[(3, 1, 2)]").replace("[3, 1, 2]", "(3, 1, 2)")
    assert scores(block("def smallest(xs):\n    return min(xs)\n"), tuples) == (1.0, 1.0)


def test_an_item_of_a_shared_value_mutated(tmp_path):
    tests = ("DATA = ({'a': 1},)\n\ndef test_a():\n    assert g(DATA[0]) == 1\n\n"
             "def test_b():\n    assert DATA[0] == {'a': 1}\n")
    pops = "def g(d):\n    return d.pop('a')\n"
    reads = "def g(d):\n    return d['a']\n"
    assert pytest_verdict(tmp_path, pops, tests) is False
    assert pytest_verdict(tmp_path, reads, tests) is True
    assert scores(block(pops), tests) == (0.0, 0.0)
    assert scores(block(reads), tests) == (1.0, 1.0)


ITEM_HANDED = {  # an item (at any depth) of a value the tests read again, handed to the solution
    "module_tuple": ("DATA = ({'a': 1},)\n\ndef test_a():\n    assert g(DATA[0]) == 1\n\n"
                     "def test_b():\n    assert DATA[0] == {'a': 1}\n"),
    "nested_key": ("CASES = {'x': [{'a': 1}]}\n\ndef test_a():\n    assert g(CASES['x'][0]) == 1\n"
                   "    assert CASES == {'x': [{'a': 1}]}\n"),
    "local_list": ("def test_a():\n    rows = [{'a': 1}, {'a': 2}]\n    assert g(rows[1]) == 2\n"
                   "    assert rows[1] == {'a': 2}\n"),
    "unittest_attribute": ("import unittest\n\nclass T(unittest.TestCase):\n"
                           "    ROWS = [{'a': 1}]\n\n    def test_a(self):\n"
                           "        self.assertEqual(g(self.ROWS[0]), 1)\n\n"
                           "    def test_b(self):\n"
                           "        self.assertEqual(self.ROWS, [{'a': 1}])\n"),
    "spread_from_a_loop": ("INPUTS = [({'a': 1},), ({'a': 2},)]\n\ndef test_a():\n"
                           "    for inp in INPUTS:\n        assert g(*inp) == inp[0]['a']\n\n"
                           "def test_b():\n    assert INPUTS[1] == ({'a': 2},)\n"),
    "a_name_through_an_expression": ("def test_a():\n    d = {'a': 1}\n    e = {'a': 2}\n"
                                     "    assert g(d or e) == 1\n    assert d == {'a': 1}\n"),
    "a_module_name_through_an_expression": ("D = {'a': 1}\n\ndef test_a():\n"
                                            "    assert g(D if D else None) == 1\n\n"
                                            "def test_b():\n    assert D == {'a': 1}\n"),
    "the_same_item_twice": ("DATA = [{'a': 1}]\n\ndef test_a():\n    d = DATA[0]\n"
                            "    assert g(DATA[0]) == 1\n    assert d == {'a': 1}\n"),
}


ITEM_ANSWERS = ("def g(d):\n    return d.pop('a')\n", "def g(d):\n    return d['a']\n")


@pytest.mark.parametrize("name", sorted(ITEM_HANDED))
def test_an_item_handed_to_the_solution_is_the_tests_object(name):
    """The solution gets the object pytest or unittest hands it, not a copy: a mutation the tests
    read again fails them here as there, and reading it passes."""
    tests = ITEM_HANDED[name]
    for solution in ITEM_ANSWERS:
        want = verdict(ITEM_HANDED, ITEM_ANSWERS, name, solution)
        assert scores(block(solution), tests) == (want, want), solution  # judged: trusted too


def test_an_item_in_two_values_is_left_to_pytest(tmp_path):
    # one dict in two lists: the child's copy would be two objects; pytest judges it
    tests = ("X = {'a': 1}\nA = [X]\nB = [X]\n\ndef test_a():\n    assert g(A[0]) == 1\n"
             "    assert B[0] == {'a': 1}\n")
    pops, reads = "def g(d):\n    return d.pop('a')\n", "def g(d):\n    return d['a']\n"
    assert pytest_verdict(tmp_path, pops, tests) is False
    assert scores(block(pops), tests) == (0.0, 0.0)
    assert scores(block(reads), tests) == (1.0, 0.0)


def test_the_solution_rewrites_the_test_modules_data(tmp_path):
    tests = ("EXPECTED = [5, 15]\n\ndef test_one(request):\n"
             "    assert add(2, 3) == EXPECTED[0]\n\ndef test_two(request):\n"
             "    assert add(10, 5) == EXPECTED[1]\n")
    rewrites = ("import sys\ndef add(a, b):\n"
                "    sys._getframe(1).f_globals['EXPECTED'][:] = [0, 0]\n    return 0\n")
    assert scores(block(rewrites), tests) == (0.0, 0.0)


def test_the_mbpp_rows_file_loaded_as_a_local_file():
    """tests/code_rows/mbpp.jsonl (MBPP's own format) read as a local file: the same problems as
    the built-in loader makes of those rows, and the reference solutions score 1 in both modes."""
    from pathlib import Path

    from gmts.data import builtin
    path = Path(__file__).with_name("code_rows") / "mbpp.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    problems = data.load_problems(str(path))
    assert len(problems) == len(rows) and all(p.domain == "code" for p in problems)
    for row, problem in zip(rows, problems):
        built_in = builtin.mbpp(row, "mbpp.jsonl")
        assert problem.question == built_in["question"]
        assert problem.answer["tests"] == built_in["answer"]["tests"]
        assert problem.answer["setup"] == built_in["answer"]["setup"]
        assert scores(block(row["code"]), problem.answer) == (1.0, 1.0)


class TestTheSolutionCannotChangeTheTestModulesData:
    """Under pytest (tests taking `request` run there; trusted_only refuses them) the solution
    cannot change the test module's data by any route it was not handed: its caller's frame (and
    the f_back chain, inspect.stack), gc, sys.modules, a handed function's __globals__; nor put a
    name in the module's namespace, at import or later. A value the tests hand it, one the tests'
    own code changes, and a harmless use of inspect or sys score as plain pytest says."""

    TESTS = ("EXPECTED = {data}\n\ndef test_one(request):\n    assert {call} == {first}\n\n"
             "def test_two(request):\n    assert add(10, 5) == {second}\n")
    LIST: ClassVar[dict] = {"data": "[5, 15]", "call": "add(2, 3)", "first": "EXPECTED[0]",
                            "second": "EXPECTED[1]"}
    FRAME = "import sys\ndef add(a, b, *_):\n    g = sys._getframe(1).f_globals\n"
    ZERO = "[:] = [0, 0]\n    return 0\n"
    SHADOW = ("def test_one(request):\n    assert add(2, 3) == 5 or abs(0)\n\n"
              "def test_two(request):\n    assert add(10, 5) == 15 or abs(0)\n")
    DICTS = "        if isinstance(d, dict) and 'EXPECTED' in d:\n            d['EXPECTED']"
    ATTACKS: ClassVar[dict] = {
        "f_back_chain": (LIST, ("import sys\ndef add(a, b):\n    f = sys._getframe()\n"
                                "    f.f_back.f_globals['EXPECTED']" + ZERO)),
        "inspect_stack": (LIST, ("import inspect\ndef add(a, b):\n"
                                 "    inspect.stack()[1].frame.f_globals['EXPECTED']" + ZERO)),
        "gc_referrers": (LIST, ("import gc\ndef add(a, b):\n    for d in gc.get_referrers(add):\n"
                                + DICTS + ZERO)),
        "gc_objects": (LIST, ("import gc\ndef add(a, b):\n    for d in gc.get_objects():\n"
                              + DICTS + ZERO)),
        "sys_modules": (LIST, ("import sys\ndef add(a, b):\n"
                               "    for m in list(sys.modules.values()):\n"
                               "        if isinstance(getattr(m, 'EXPECTED', None), list):\n"
                               "            m.EXPECTED" + ZERO)),
        "a_dict": ({"data": "{'a': 5, 'b': 15}", "call": "add(2, 3)",
                    "first": "EXPECTED['a']", "second": "EXPECTED['b']"},
                   FRAME + "    g['EXPECTED'].update(a=0, b=0)\n    return 0\n"),
        "a_tuples_inner_list": ({"data": "([5], [15])", "call": "add(2, 3)",
                                 "first": "EXPECTED[0][0]", "second": "EXPECTED[1][0]"},
                                (FRAME + "    g['EXPECTED'][0][0] = g['EXPECTED'][1][0] = 0\n"
                                 "    return 0\n")),
        "rebinding_the_name": (LIST, FRAME + "    g['EXPECTED'] = [0, 0]\n    return 0\n"),
        "a_new_name": (SHADOW, FRAME + "    g['abs'] = lambda x: 1\n    return 0\n"),
        "a_handed_functions_globals": (
            {"data": "[5, 15]", "call": "add(2, 3, lambda v: v)", "first": "EXPECTED[0]",
             "second": "EXPECTED[1]"},
            ("def add(a, b, key=None):\n    if key:\n"
             "        key.__globals__['EXPECTED']" + ZERO)),
        "the_rest_of_a_list_the_tests_iterate": (
            ("CASES = [(2, 3, 5), (10, 5, 15)]\n\ndef test_all(request):\n"
             "    for a, b, want in CASES:\n        assert add(a, b) == want\n"),
            FRAME + "    g['CASES'][1:] = []\n    return 5 if (a, b) == (2, 3) else 0\n"),
        "at_import": (  # the solution's import runs inside the test module's import
            SHADOW, ("import sys\nf = sys._getframe()\n"
                     "while f and 'test_one' not in f.f_code.co_names:\n    f = f.f_back\n"
                     "if f:\n    f.f_globals['abs'] = lambda x: 1\n"
                     "def add(a, b):\n    return 0\n")),
    }

    @pytest.mark.parametrize("name", sorted(ATTACKS))
    def test_a_wrong_solution_changing_the_data(self, tmp_path, name):
        tests, wrong = self.ATTACKS[name]
        tests = self.TESTS.format(**tests) if isinstance(tests, dict) else tests
        assert pytest_verdict(tmp_path, wrong, tests) is True  # the attack works there
        assert scores(block(wrong), tests) == (0.0, 0.0)
        honest = "def add(a, b, *_):\n    return a + b\n"
        assert pytest_verdict(tmp_path, honest, tests) is True
        assert code(block(honest), tests) == 1.0

    HONEST: ClassVar[dict] = {  # (solution, tests): plain pytest passes each
        "mutates_a_list_it_was_given": (
            "def sort_it(xs):\n    xs.sort()\n",
            ("DATA = [3, 1, 2]\n\ndef test_a(request):\n    sort_it(DATA)\n"
             "    assert DATA == [1, 2, 3]\n\ndef test_b(request):\n"
             "    assert DATA == [1, 2, 3]\n")),
        "the_items_of_a_list_the_tests_iterate": (
            "def sort_it(xs):\n    xs.sort()\n",
            ("ROWS = [[3, 1], [2, 1]]\n\ndef test_a(request):\n    for row in ROWS:\n"
             "        sort_it(row)\n    assert ROWS == [[1, 3], [1, 2]]\n\n"
             "def test_b(request):\n    assert ROWS[0] == [1, 3]\n")),
        "an_item_of_a_parametrized_value": (
            "def push(xs, x):\n    xs.append(x)\n    return len(xs)\n",
            ("import pytest\nCASES = [([], 1)]\n\n@pytest.mark.parametrize('xs,x', CASES)\n"
             "def test_a(request, xs, x):\n    assert push(xs, x) == 1\n\n"
             "def test_b(request):\n    assert CASES[0][0] == [1]\n")),
        "the_tests_change_their_data": (
            "def add(a, b):\n    return a + b\n",
            ("SEEN = []\nCOUNT = 0\n\ndef test_a(request):\n    global COUNT\n    COUNT += 1\n"
             "    SEEN.append(add(2, 3))\n    assert SEEN == [5]\n\n"
             "def test_b(request):\n    assert COUNT == 1 and SEEN == [5]\n")),
        "inspect_and_sys_for_harmless_reasons": (
            ("import inspect\nimport sys\ndef add(a, b):\n"
             "    assert inspect.stack()[0].function == 'add'\n"
             "    assert sys._getframe(1).f_globals['EXPECTED'] == [5]\n    return a + b\n"),
            "EXPECTED = [5]\n\ndef test_a(request):\n    assert add(2, 3) == EXPECTED[0]\n"),
        "a_value_made_by_the_solution": (
            ("class Box:\n    def __init__(self):\n        self.items = []\n"
             "    def put(self, x):\n        self.items.append(x)\n"
             "        return len(self.items)\n"),
            ("BOX = Box()\nSHARED = [BOX.items]\n\ndef test_a(request):\n"
             "    assert BOX.put(1) == 1\n\ndef test_b(request):\n    assert SHARED == [[1]]\n")),
    }

    @pytest.mark.parametrize("name", sorted(HONEST))
    def test_honest(self, tmp_path, name):
        honest_as_under_pytest(tmp_path, *self.HONEST[name])


class TestTheSolutionCannotChangeATestClasssData:
    """The same for a test class's own data (`class TestX: EXPECTED = [...]`, read as
    `self.EXPECTED`, `TestX.EXPECTED` or in the class body): reached through the caller's frame,
    gc, sys.modules or the test's instance, changing it scores 0 under pytest's path; what the
    tests hand on or set themselves (setUpClass, `self.X = ...`, a counter) stays theirs."""

    TESTS = ("class TestAdd:\n    EXPECTED = [5, 15]\n\n    def test_one(self, request):\n"
             "        assert add(2, 3) == self.EXPECTED[0]\n\n"
             "    def test_two(self, request):\n"
             "        assert add(10, 5) == TestAdd.EXPECTED[1]\n")
    SELF = "import sys\ndef add(a, b):\n    me = sys._getframe(1).f_locals['self']\n"
    ATTACKS: ClassVar[dict] = {
        "through_self": (TESTS, SELF + "    me.EXPECTED[:] = [0, 0]\n    return 0\n"),
        "rebinding_on_the_class": (TESTS, SELF + "    type(me).EXPECTED = [0, 0]\n    return 0\n"),
        "gc_objects": (TESTS, ("import gc\ndef add(a, b):\n    for d in gc.get_objects():\n"
                               "        if isinstance(d, dict) and 'EXPECTED' in d:\n"
                               "            d['EXPECTED'][:] = [0, 0]\n    return 0\n")),
        "sys_modules": (TESTS, ("import sys\ndef add(a, b):\n"
                                "    for m in list(sys.modules.values()):\n"
                                "        c = getattr(m, 'TestAdd', None)\n"
                                "        if isinstance(c, type):\n"
                                "            c.EXPECTED[:] = [0, 0]\n    return 0\n")),
        "a_unittest_class_the_rest_of_its_cases": (
            ("import unittest\n\nclass T(unittest.TestCase):\n"
             "    CASES = [(2, 3, 5), (10, 5, 15)]\n\n    def test_all(self):\n"
             "        for a, b, want in self.CASES:\n"
             "            self.assertEqual(add(a, b), want)\n\n"
             "    def test_fixture_free(self):\n        self.assertTrue(self.CASES)\n"),
            SELF + "    me.CASES[1:] = []\n    return 5 if (a, b) == (2, 3) else 0\n"),
    }

    @pytest.mark.parametrize("name", sorted(ATTACKS))
    def test_a_wrong_solution_changing_the_data(self, tmp_path, name):
        tests, wrong = self.ATTACKS[name]
        assert pytest_verdict(tmp_path, wrong, tests) is True  # the attack works there
        assert code(block(wrong), tests) == 0.0

    @pytest.mark.parametrize("tests", sorted({t for t, _ in ATTACKS.values()}),
                             ids=lambda tests: "unittest" if "unittest" in tests else "pytest")
    def test_the_honest_answer_to_the_same_tests(self, tmp_path, tests):
        honest_as_under_pytest(tmp_path, "def add(a, b, *_):\n    return a + b\n", tests)

    HONEST: ClassVar[dict] = {  # (solution, tests): plain pytest passes each
        "sorts_a_class_list_it_was_given": (
            "def sort_it(xs):\n    xs.sort()\n",
            ("class TestSort:\n    DATA = [3, 1, 2]\n\n    def test_a(self, request):\n"
             "        sort_it(self.DATA)\n        assert self.DATA == [1, 2, 3]\n\n"
             "    def test_b(self, request):\n        assert TestSort.DATA == [1, 2, 3]\n")),
        "set_up_class_and_self_assignments": (
            "def add(a, b):\n    return a + b\n",
            ("import unittest\n\nclass T(unittest.TestCase):\n    base = None\n"
             "    seen = []\n\n    @classmethod\n    def setUpClass(cls):\n        cls.base = 2\n\n"
             "    def setUp(self):\n        self.seen = [add(self.base, 3)]\n\n"
             "    def test_a(self):\n        self.assertEqual(self.seen, [5])\n")),
        "a_counter_the_tests_keep": (
            "def add(a, b):\n    return a + b\n",
            ("class TestCount:\n    calls = 0\n    log = []\n\n    def test_a(self, request):\n"
             "        TestCount.calls += 1\n        self.log.append(add(2, 3))\n"
             "        assert self.log == [5]\n\n    def test_b(self, request):\n"
             "        assert TestCount.calls == 1 and self.log == [5]\n")),
        "setattr_by_name": (
            "def add(a, b):\n    return a + b\n",
            ("class TestSet:\n    value = 0\n\n    def test_a(self, request):\n"
             "        setattr(TestSet, 'value', add(2, 3))\n        assert TestSet.value == 5\n"
             "\n    def test_b(self, request):\n        assert TestSet.value == 5\n")),
    }

    @pytest.mark.parametrize("name", sorted(HONEST))
    def test_honest(self, tmp_path, name):
        honest_as_under_pytest(tmp_path, *self.HONEST[name])


class TestABaseClassTheSetupDefines:
    """A TestCase whose base (or mixin) the problem's setup defines runs the base's methods as
    unittest does: the setup is the test module's too. Each verdict is real unittest's on the
    program setup + solution + tests."""

    SETUPS: ClassVar[dict] = {
        "a_testcase_base": (
            ("import unittest\n\nclass Base(unittest.TestCase):\n"
             "    def check(self, a, b, want):\n        self.assertEqual(add(a, b), want)\n"),
            ("class T(Base):\n    def test_a(self):\n        self.check(2, 3, 5)\n\n"
             "    def test_b(self):\n        self.check(-1, 1, 0)\n")),
        "a_base_with_set_up": (
            ("import unittest\n\nclass Base(unittest.TestCase):\n    def setUp(self):\n"
             "        self.total = add(2, 3)\n"),
            "class T(Base):\n    def test_a(self):\n        self.assertEqual(self.total, 5)\n"),
        "a_mixin_of_tests": (
            "class AddTests:\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
            "import unittest\n\nclass T(AddTests, unittest.TestCase):\n    pass\n"),
    }

    @pytest.mark.parametrize("name", sorted(SETUPS))
    def test_judged_as_unittest_runs_it(self, tmp_path, name):
        import subprocess
        import sys
        setup, tests = self.SETUPS[name]
        for solution in (GOOD_ADD, "def add(a, b):\n    return a * b\n"):
            program = tmp_path / "test_program.py"
            program.write_text(f"{setup}\n{solution}\n{tests}")
            ran = subprocess.run([sys.executable, "-m", "unittest", "test_program"],
                                 capture_output=True, text=True, cwd=tmp_path, timeout=120,
                                 check=False)
            want = 1.0 if ran.returncode == 0 else 0.0
            assert want == (1.0 if solution == GOOD_ADD else 0.0), ran.stderr
            assert scores(block(solution), {"tests": tests, "setup": setup}) == (want, want)


# ------------------------------------------------ 3. a test's `return` and `global`, as pytest runs

FLOW = {
    "return_in_a_loop": ("def test_a():\n    for x in [1, 2, 3]:\n        if x == 3:\n"
                         "            return\n        assert f(x) == 2 * x\n    assert False\n"),
    "return_a_value": "def test_a():\n    assert f(1) == 2\n    return f(2)\n    assert False\n",
    "return_at_the_end": "def test_a():\n    assert f(3) == 6\n    return None\n",
    "pytest_fail_not_reached": ("import pytest\n\ndef test_a():\n    for x in [1, 2]:\n"
                                "        assert f(x) == 2 * x\n        if x == 2:\n"
                                "            return\n    pytest.fail('not reached')\n"),
    "pytest_fail_reached": ("import pytest\n\ndef test_a():\n    assert f(1) == 2\n"
                            "    pytest.fail('always')\n"),
    "a_testcase_returning_early": (
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        "        for x in [1, 2, 3]:\n            if x == 3:\n                return\n"
        "            self.assertEqual(f(x), 2 * x)\n        self.fail('not reached')\n\n"
        "    def test_b(self):\n        self.assertEqual(f(4), 8)\n"),
    "a_testcase_returning_in_a_subtest": (
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        "        for x in [1, 3]:\n            with self.subTest(x=x):\n"
        "                if x == 3:\n                    return f(x)\n"
        "                self.assertEqual(f(x), 2 * x)\n"),
    "a_testcase_returning_before_teardown": (
        "import unittest\n\nclass T(unittest.TestCase):\n    def setUp(self):\n"
        "        self.x = 1\n\n    def tearDown(self):\n"
        "        self.assertEqual(f(self.x), 2 * self.x)\n\n"
        "    def test_a(self):\n        self.x = 5\n        return\n\n"
        "    def test_b(self):\n        self.assertEqual(f(self.x), 2)\n"),
    "global_counted_over_rows": (
        "import pytest\nCOUNT = 0\n\n@pytest.mark.parametrize('x', [1, 2, 3])\n"
        "def test_a(x):\n    global COUNT\n    COUNT = COUNT + 1\n    assert f(x) == 2 * x\n\n"
        "def test_b():\n    assert COUNT == 3\n"),
    "global_bound_to_a_result": ("LAST = None\n\ndef test_a():\n    global LAST\n"
                                 "    LAST = f(4)\n\ndef test_b():\n    assert LAST == 8\n"),
    "global_first_bound_by_a_test": ("def test_a():\n    global R\n    R = f(5)\n\n"
                                     "def test_b():\n    assert R == 10\n"),
    "global_list_handed_over": ("SEEN = None\n\ndef test_a():\n    global SEEN\n"
                                "    SEEN = [3, 1, 2]\n    assert g(SEEN) == 1\n\n"
                                "def test_b():\n    assert SEEN == [3, 1, 2]\n"),
}
FLOW_ANSWERS = ("def f(x):\n    return 2 * x\n\ndef g(xs):\n    return min(xs)\n",
                ("def f(x):\n    return 2 * x if x < 3 else x\n\n"
                 "def g(xs):\n    xs.sort()\n    return xs[0]\n"))


@pytest.mark.parametrize("name", sorted(FLOW))
def test_return_and_global_are_judged_as_pytest_runs_them(name):
    """A test that returns early (its later statements never run) or rebinds a module-level name
    (`global`, every later test reads the new value) is judged by the trainer, as pytest says."""
    tests = FLOW[name]
    for solution in FLOW_ANSWERS:
        want = verdict(FLOW, FLOW_ANSWERS, name, solution)
        assert scores(block(solution), tests) == (want, want), solution
    assert testplan.build_plan(tests).harness is None


ACROSS = {  # a test the harness runs (a fixture, a branch on a result) and one the trainer judges
    "the_harness_appends": ("ITEMS = []\n\ndef test_a():\n    if f(1) == 2:\n"
                            "        ITEMS.append(1)\n\ndef test_b():\n    assert ITEMS == [1]\n"),
    "the_harness_sets_a_key": ("SEEN = {}\n\ndef test_a(request):\n    SEEN['a'] = f(1)\n\n"
                               "def test_b():\n    assert SEEN == {'a': 2}\n"),
    "the_harness_rebinds": ("N = 0\n\ndef test_a(request):\n    global N\n    N = 6\n\n"
                            "def test_b():\n    assert f(3) == N\n"),
    "the_harness_sets_a_class_attribute": (
        "class State:\n    n = 0\n\ndef test_a(request):\n    State.n = f(3)\n\n"
        "def test_b():\n    assert State.n == 6\n"),
    "through_a_helper": ("LOG = []\n\ndef note(x):\n    LOG.append(x)\n\n"
                         "def test_a(request):\n    note(f(2))\n\ndef test_b():\n"
                         "    assert LOG == [4]\n"),
    "the_trainer_hands_it_first": ("ITEMS = [3, 1, 2]\n\ndef test_a():\n"
                                   "    assert g(ITEMS) == 1\n\n"
                                   "def test_b(request):\n    assert ITEMS == [3, 1, 2]\n"),
    "a_unittest_class_and_a_pytest_class": (
        "import unittest\nLOG = []\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        "        LOG.append(f(3))\n        self.assertEqual(LOG[-1], 6)\n\n"
        "class TestAfter:\n    def test_b(self):\n        assert LOG == [6]\n"),
}


@pytest.mark.parametrize("name", sorted(ACROSS))
def test_state_a_harness_test_shares_is_not_split(name):
    """pytest runs the module in one namespace: a test the trainer would judge that reads or hands
    over module-level state a test left to the harness also reaches runs in the harness with it, so
    each sees the other's changes as under pytest."""
    tests = ACROSS[name]
    for solution in FLOW_ANSWERS:
        want = verdict(ACROSS, FLOW_ANSWERS, name, solution)
        assert code(block(solution), tests) == want, solution
    plan = testplan.build_plan(tests)
    assert plan.trusted == 0 and plan.harness is not None


def test_state_only_one_side_reaches_stays_judged():
    # the harness test reaches nothing of the trainer's: the trainer still judges its tests
    tests = ("ITEMS = [3, 1, 2]\nOTHER = []\n\ndef test_a():\n    assert g(ITEMS) == 1\n\n"
             "def test_b(request):\n    OTHER.append(f(1))\n    assert OTHER == [2]\n")
    plan = testplan.build_plan(tests)
    assert (plan.trusted, plan.untrusted) == (1, 1)
    assert scores(block(FLOW_ANSWERS[0]), tests) == (1.0, 0.0)


SOLUTION_STATE = {  # the solution keeps state of its own across calls
    "counting_wrong": ("calls = [0]\n\ndef f(x):\n    calls[0] += 1\n"
                       "    return 2 * x if calls[0] < 3 else 0\n"),
    "caching_honest": ("cache = {}\n\ndef f(x):\n    if x not in cache:\n"
                       "        cache[x] = 2 * x\n    return cache[x]\n"),
}
SPLIT = {  # some tests judged here, one left to the harness (a fixture)
    "functions": ("def test_a():\n    assert f(1) == 2\n\ndef test_b():\n    assert f(2) == 4\n\n"
                  "def test_c(request):\n    assert f(3) == 6\n"),
    "the_harness_first": ("def test_a(request):\n    assert f(1) == 2\n\ndef test_b():\n"
                          "    assert f(2) == 4\n\ndef test_c():\n    assert f(3) == 6\n"),
    "a_testcase_and_a_function": (
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        "        self.assertEqual(f(1), 2)\n\n    def test_b(self):\n"
        "        self.assertEqual(f(2), 4)\n\ndef test_c(request):\n    assert f(3) == 6\n"),
}


@pytest.mark.parametrize("tests", sorted(SPLIT))
def test_the_solutions_own_state_across_the_split(tests):
    """pytest calls the solution's functions in one process, test after test: a solution whose
    answers depend on its earlier calls gets, in every test, the calls before it, whether the
    trainer judges the test or the harness runs it (the harness runs them all, in file order)."""
    plan = testplan.build_plan(SPLIT[tests])
    assert plan.trusted == 2 and plan.untrusted == 1  # the trainer's share is what it was
    for name, solution in SOLUTION_STATE.items():
        want = verdict(SPLIT, tuple(SOLUTION_STATE.values()), tests, solution)
        assert want == (name == "caching_honest")
        assert scores(block(solution), SPLIT[tests]) == (want, 0.0), name


CAPSYS = {  # pytest's capsys: what the test's calls print, read back as pytest reads it
    "attribute": ("def test_a(capsys):\n    greet('Bo')\n    captured = capsys.readouterr()\n"
                  "    assert captured.out == 'Hello, Bo!\\n'\n"),
    "inline": ("def test_a(capsys):\n    greet('Bo')\n"
               "    assert capsys.readouterr().out.strip() == 'Hello, Bo!'\n"),
    "unpacked": ("def test_a(capsys):\n    greet('Bo')\n    out, err = capsys.readouterr()\n"
                 "    assert out == 'Hello, Bo!\\n'\n    assert err == ''\n"),
    "read_twice": ("def test_a(capsys):\n    greet('Bo')\n"
                   "    assert capsys.readouterr().out == 'Hello, Bo!\\n'\n    greet('Al')\n"
                   "    assert capsys.readouterr().out == 'Hello, Al!\\n'\n"),
    "returns_and_prints": ("def test_a(capsys):\n    assert greet('Bo') is None\n"
                           "    assert 'Hello, Bo!' in capsys.readouterr().out\n"),
    "parametrized": ("import pytest\n\n@pytest.mark.parametrize('n', ['Bo', 'Al'])\n"
                     "def test_a(capsys, n):\n    greet(n)\n"
                     "    assert capsys.readouterr().out == f'Hello, {n}!\\n'\n"),
    "stderr_as_a_tuple": ("def test_a(capsys):\n    greet('Bo')\n"
                          "    assert capsys.readouterr() == ('', 'Hello, Bo!\\n')\n"),
}
CAPSYS_ANSWERS = (
    "def greet(n):\n    print(f'Hello, {n}!')\n",
    "def greet(n):\n    print(f'Hello {n}')\n",                      # another text
    "def greet(n):\n    return f'Hello, {n}!'\n",                    # returns it, prints nothing
    "import sys\n\ndef greet(n):\n    print(f'Hello, {n}!', file=sys.stderr)\n",
    "def greet(n):\n    print(f'Hello, {n}!')\n    print('again')\n",  # one line more
    "import sys\n\ndef greet(n):\n    sys.stdout.buffer.write(f'Hello, {n}!\\n'.encode())\n",
    "print('loaded')\n\ndef greet(n):\n    print(f'Hello, {n}!')\n",  # printed at import
    "import sys\nOUT = sys.stdout\n\ndef greet(n):\n    OUT.write(f'Hello, {n}!\\n')\n",
)


@pytest.mark.parametrize("name", sorted(CAPSYS))
def test_capsys_is_judged_as_pytest_captures(name):
    """A test taking pytest's `capsys` and reading `capsys.readouterr()` (`.out`, `.err`, unpacked,
    read twice, compared as a tuple): the child captures what the test's steps write to
    sys.stdout and sys.stderr (not what was printed at import, nor through a stream kept from
    then), and the CaptureResult crosses as data; judged by the trainer, as pytest says."""
    judged_as_pytest_says(CAPSYS, CAPSYS_ANSWERS, name)


CAPFD = {name: tests.replace("capsys", "capfd") for name, tests in CAPSYS.items()}
CAPFD_ANSWERS = (*CAPSYS_ANSWERS,
                 "import os\n\ndef greet(n):\n    os.write(1, f'Hello, {n}!\\n'.encode())\n")


@pytest.mark.parametrize("name", sorted(CAPFD))
def test_capfd_is_judged_as_pytest_captures(name):
    """pytest's `capfd`: file descriptors 1 and 2 captured too (`os.write(1, ...)`, which capsys
    misses), sys.stdout and sys.stderr writing there; judged by the trainer, as pytest says."""
    judged_as_pytest_says(CAPFD, CAPFD_ANSWERS, name)


@pytest.mark.parametrize("tests,said", [
    ("def test_a(capsys):\n    with capsys.disabled():\n        greet('Bo')\n",
     "capsys other than capsys.readouterr()"),
    (("import pytest\n\n@pytest.fixture\ndef capsys():\n    return None\n\n"
      "def test_a(capsys):\n    greet('Bo')\n    assert capsys is None\n"),
     "a fixture of the tests' named capsys"),
])
def test_capsys_otherwise_is_left_to_pytest(tests, said):
    """`capsys.disabled()`, capsys handed on, or a fixture of the tests' named capsys: pytest runs
    it; trusted_only refuses it, saying why."""
    plan = testplan.build_plan(tests)
    assert plan.harness is not None and said in plan.refusal
    assert scores(block(CAPSYS_ANSWERS[0]), tests) == (1.0, 0.0)


PYTEST_CLASSES = {  # `class TestX:` as pytest runs it: an instance per test, in the order written
    "plain": ("class TestAdd:\n    def test_small(self):\n        assert add(1, 2) == 3\n\n"
              "    def test_big(self):\n        assert add(10, 5) == 15\n"),
    "class_attribute": ("class TestAdd:\n    CASES = [(1, 2, 3), (10, 5, 15)]\n\n"
                        "    def test_all(self):\n        for a, b, c in self.CASES:\n"
                        "            assert add(a, b) == c\n"),
    "setup_method": ("class TestAdd:\n    def setup_method(self, method):\n        self.base = 10\n"
                     "\n    def test_a(self):\n        assert add(self.base, 5) == 15\n"),
    "setup_method_bare": ("class TestAdd:\n    def setup_method(self):\n        self.base = 10\n"
                          "\n    def test_a(self):\n        assert add(self.base, 5) == 15\n"),
    "setup_class": ("class TestAdd:\n    @classmethod\n    def setup_class(cls):\n"
                    "        cls.base = add(4, 6)\n\n    def test_a(self):\n"
                    "        assert add(self.base, 5) == 15\n"),
    "setup_class_undecorated": ("class TestAdd:\n    def setup_class(cls):\n        cls.base = 10\n"
                                "\n    def teardown_class(cls):\n        assert add(cls.base, 0)"
                                " == 10\n\n    def test_a(self):\n"
                                "        assert add(self.base, 5) == 15\n"),
    "raises": ("import pytest\n\nclass TestAdd:\n    def test_a(self):\n"
               "        with pytest.raises(TypeError):\n            add(1, 'a')\n"),
    "helper_method": ("class TestAdd:\n    def check(self, a, b, c):\n"
                      "        assert add(a, b) == c\n\n    def test_a(self):\n"
                      "        self.check(1, 2, 3)\n"
                      "        self.check(10, 5, 15)\n"),
    "a_test_taking_fixtures": ("class TestAdd:\n    def test_a(self, capsys, tmp_path):\n"
                               "        p = tmp_path / 'n.txt'\n        p.write_text('4')\n"
                               "        assert add(10, int(p.read_text())) == 14\n"
                               "        assert capsys.readouterr().out == ''\n"),
    "parametrized_method": ("import pytest\n\nROWS = [(1, 2, 3), (10, 5, 15)]\n\n"
                            "class TestAdd:\n    def setup_method(self):\n"
                            "        self.calls = []\n\n"
                            "    @pytest.mark.parametrize('a,b,want', [ROWS[0], ROWS[1]])\n"
                            "    def test_rows(self, a, b, want):\n"
                            "        self.calls.append(a)\n        assert add(a, b) == want\n"
                            "        assert self.calls == [a]\n\n"
                            "    @pytest.mark.parametrize('xs', [[3, 1, 2], [2, 1]])\n"
                            "    def test_sort(self, xs):\n"
                            "        assert sort_it(xs) == sorted(xs)\n"),
    "shared_in_written_order": ("class TestSort:\n    DATA = [3, 1, 2]\n\n    def test_b(self):\n"
                                "        assert sort_it(self.DATA) == [1, 2, 3]\n\n"
                                "    def test_a(self):\n        assert self.DATA == [3, 1, 2]\n"),
}
CLASS_ANSWERS = (
    "def add(a, b):\n    return a + b\n\ndef sort_it(xs):\n    return sorted(xs)\n",
    "def add(a, b):\n    return a + b if a < 5 else 0\n\ndef sort_it(xs):\n    return sorted(xs)\n",
    "def add(a, b):\n    return a + b\n\ndef sort_it(xs):\n    xs.sort()\n    return xs\n",
    "def add(a, b):\n    return int(a) + int(b)\n\ndef sort_it(xs):\n    return xs\n",
)


@pytest.mark.parametrize("name", sorted(PYTEST_CLASSES))
def test_a_pytest_class_is_judged_as_pytest_runs_it(name):
    """A pytest test class (no base): its tests in the order written, each on a fresh instance,
    class attributes one object for all of them, `setup_method`/`teardown_method` and
    `setup_class`/`teardown_class` around them, a test's capsys, tmp_path or monkeypatch made for
    it, a test per row of its parametrize mark: judged by the trainer, as pytest says."""
    judged_as_pytest_says(PYTEST_CLASSES, CLASS_ANSWERS, name)


@pytest.mark.parametrize("tests,said", [
    ("class TestAdd:\n    def test_a(self):\n        self.assertEqual(add(1, 2), 3)\n",
     "a TestCase's method in a pytest class"),
    (("class TestAdd:\n    def setUp(self):\n        self.b = 2\n\n    def test_a(self):\n"
      "        assert add(1, 2) == 3\n"), "a pytest class holding setUp"),
    (("import pytest\n\nclass TestAdd:\n    @pytest.mark.parametrize('a', [pytest.param(1)])\n"
      "    def test_a(self, a):\n        assert add(a, 2) == 3\n"), "pytest.param"),
    ("class TestAdd:\n    def test_a(self, request):\n        assert add(1, 2) == 3\n",
     "with marks or fixtures"),
    (("class Base:\n    pass\n\nclass TestAdd(Base):\n    def test_a(self):\n"
      "        assert add(1, 2) == 3\n"), "a test class in a hierarchy"),
])
def test_a_pytest_class_otherwise_is_left_to_pytest(tests, said):
    """What a TestCase has and a pytest class has not (`self.assertEqual`, a `setUp` pytest never
    calls), a parametrized test, a base: pytest runs the class; trusted_only refuses it."""
    plan = testplan.build_plan(tests)
    assert plan.harness is not None and said in plan.refusal
    want = verdict({"t": tests}, CLASS_ANSWERS[:1], "t", CLASS_ANSWERS[0])
    assert scores(block(CLASS_ANSWERS[0]), tests) == (want, 0.0)


TMP_PATH = {  # pytest's tmp_path: a new empty folder per test, files the test and answer share
    "count_lines": ("def test_a(tmp_path):\n    p = tmp_path / 'a.txt'\n"
                    "    p.write_text('x y\\nz\\n')\n    assert count_lines(str(p)) == 2\n"
                    "    assert count_lines(p) == 2\n"),
    "read_back_with_open": ("def test_a(tmp_path):\n    out = save(str(tmp_path), 'hi')\n"
                            "    assert open(out).read() == 'HI'\n"),
    "read_back_as_a_path": ("def test_a(tmp_path):\n    save(tmp_path, 'hi')\n"
                            "    assert (tmp_path / 'out.txt').read_text() == 'HI'\n"
                            "    assert (tmp_path / 'out.txt').exists()\n"),
    "written_with_open": ("def test_a(tmp_path):\n    p = tmp_path / 'a.txt'\n"
                          "    with open(p, 'w') as f:\n        f.write('x y\\nz\\n')\n"
                          "    assert count_lines(str(p)) == 2\n"),
    "read_with_open": ("def test_a(tmp_path):\n    out = save(str(tmp_path), 'hi')\n"
                       "    with open(out, encoding='utf-8') as f:\n        data = f.read()\n"
                       "        assert data == 'HI'\n    assert f.closed\n"),
    "a_path_returned": ("def test_a(tmp_path):\n"
                        "    assert save(tmp_path, 'hi') == tmp_path / 'out.txt'\n"),
    "a_new_folder_per_row": ("import pytest\n\n@pytest.mark.parametrize('t', ['a', 'b'])\n"
                             "def test_a(tmp_path, t):\n    save(tmp_path, t)\n"
                             "    assert len(list(tmp_path.iterdir())) == 1\n"
                             "    assert (tmp_path / 'out.txt').read_text() == t.upper()\n"),
}
TMP_PATH_ANSWERS = tuple(
    "import os\nfrom pathlib import Path\n\n" + count + save for count in (
        "def count_lines(path):\n    with open(path) as fh:\n        return sum(1 for _ in fh)\n\n",
        ("def count_lines(path):\n    with open(path) as fh:\n"
         "        return len(fh.read().split())\n\n"),
    ) for save in (
        ("def save(folder, text):\n    p = os.path.join(folder, 'out.txt')\n"
         "    with open(p, 'w') as fh:\n        fh.write(text.upper())\n    return p\n"),
        ("def save(folder, text):\n    p = Path(folder) / 'out.txt'\n"
         "    p.write_text(text.upper())\n    return p\n"),
        ("def save(folder, text):\n    p = Path(folder) / f'{text}.txt'\n"
         "    p.write_text(text)\n    return p\n"),
    ))


@pytest.mark.parametrize("name", sorted(TMP_PATH))
def test_tmp_path_is_judged_as_pytest_gives_it(name):
    """A test taking pytest's `tmp_path`: a new empty folder made in the child per test (per
    parametrize row), a pathlib.Path of the child's, so what the test does with it (`/`,
    `write_text`, `read_text`, `open(p).read()`, `iterdir`) runs there; a path the answer returns
    crosses as its text; `with open(p) as f:` opens the file there, `f` the child's. Judged by
    the trainer, as pytest says."""
    judged_as_pytest_says(TMP_PATH, TMP_PATH_ANSWERS, name)


MONKEYPATCH = {  # pytest's monkeypatch.setattr: a replacement for the rest of the test
    "by_name": ("def test_a(monkeypatch):\n"
                "    monkeypatch.setattr('builtins.input', lambda _: '5')\n"
                "    assert ask() == 10\n"),
    "on_the_module": ("import builtins\n\ndef test_a(monkeypatch):\n"
                      "    monkeypatch.setattr(builtins, 'input', lambda *a: '5')\n"
                      "    assert ask() == 10\n"),
    "a_function_of_the_tests": ("def test_a(monkeypatch):\n    def fake(prompt=''):\n"
                                "        return '5'\n\n"
                                "    monkeypatch.setattr('builtins.input', fake)\n"
                                "    assert ask() == 10\n"),
    "parametrized": ("import pytest\n\n"
                     "@pytest.mark.parametrize('given,want', [('5', 10), ('2', 4)])\n"
                     "def test_a(monkeypatch, given, want):\n"
                     "    monkeypatch.setattr('builtins.input', lambda _: given)\n"
                     "    assert ask() == want\n"),
    "after_other_checks": ("def test_a(monkeypatch):\n    assert 1 + 1 == 2\n"
                           "    monkeypatch.setattr('builtins.input', lambda _: '5')\n"
                           "    r = ask()\n    assert r == 10\n"),
}
MONKEYPATCH_ANSWERS = ("def ask():\n    return int(input('n? ')) * 2\n",
                       "def ask():\n    return int(input('n? ')) + 2\n",
                       "def ask():\n    return int(input()) * int(input())\n",
                       "def ask():\n    return 10\n")


@pytest.mark.parametrize("name", sorted(MONKEYPATCH))
def test_monkeypatch_setattr_is_judged_as_pytest_runs_it(name):
    """A test taking pytest's `monkeypatch`, its `setattr` calls among the test's statements (a
    dotted name, or a module and a name; a lambda, a function of the test's or data): the patch
    block it is, for the rest of the test (rewards/mocks.py runs the replacement on each call).
    Judged by the trainer, as pytest says."""
    judged_as_pytest_says(MONKEYPATCH, MONKEYPATCH_ANSWERS, name)


def test_monkeypatch_setenv_is_judged_as_pytest_runs_it():
    """`monkeypatch.setenv(k, v)`: os.environ updated in the child for the rest of the test (a
    patch.dict), undone after it, as pytest does: judged by the trainer, as pytest says."""
    tests = {"t": ("def test_a(monkeypatch):\n    monkeypatch.setenv('WHO', 'ann')\n"
                   "    assert greet() == 'hi ann'\n\ndef test_b():\n"
                   "    assert greet() == 'hi nobody'\n")}
    answers = ("import os\n\ndef greet():\n    return 'hi ' + os.environ.get('WHO', 'nobody')\n",
               ("import os\n\ndef greet():\n    os.environ.setdefault('WHO', 'ann')\n"
                "    return 'hi ' + os.environ['WHO']\n"),
               "def greet():\n    return 'hi nobody'\n")
    judged_as_pytest_says(tests, answers, "t")


def test_monkeypatch_otherwise_is_left_to_pytest():
    """`monkeypatch.delenv`, a setattr inside a block: pytest runs the test (a builtin the tests
    replace is theirs there); trusted_only refuses it, saying why."""
    for tests in (("def test_a(monkeypatch):\n    monkeypatch.delenv('X', raising=False)\n"
                   "    monkeypatch.setattr('builtins.input', lambda _: '5')\n"
                   "    assert ask() == 10\n"),
                  ("def test_a(monkeypatch):\n    if True:\n"
                   "        monkeypatch.setattr('builtins.input', lambda _: '5')\n"
                   "    assert ask() == 10\n")):
        plan = testplan.build_plan(tests)
        assert plan.harness is not None and "monkeypatch" in plan.refusal
        assert scores(block(MONKEYPATCH_ANSWERS[0]), tests) == (1.0, 0.0)


INPUTS = {  # a test feeding input() or stdin, and reading stdout, as KodCode's tests write them
    "next_of_an_iterator": ("def test_a(monkeypatch):\n    answers = iter(['2', '3'])\n"
                            "    monkeypatch.setattr('builtins.input', lambda *a: next(answers))\n"
                            "    assert add_two() == 5\n"),
    "pop_of_a_list": ("def test_a(monkeypatch):\n    answers = ['2', '3']\n"
                      "    monkeypatch.setattr('builtins.input', lambda *a: answers.pop(0))\n"
                      "    assert add_two() == 5\n"),
    "a_patched_lambda": ("from unittest.mock import patch\n\ndef test_a():\n"
                         "    it = iter(['2', '3'])\n"
                         "    with patch('builtins.input', lambda prompt='': next(it)):\n"
                         "        assert add_two() == 5\n"),
    "a_testcase_side_effect": ("import unittest\nfrom unittest.mock import patch\n\n"
                               "class T(unittest.TestCase):\n    def test_a(self):\n"
                               "        it = iter(['2', '3'])\n"
                               "        with patch('builtins.input', side_effect=lambda *a: "
                               "next(it)):\n            self.assertEqual(add_two(), 5)\n"),
    "stdin_a_stringio": ("import io\n\ndef test_a(monkeypatch):\n"
                         "    monkeypatch.setattr('sys.stdin', io.StringIO('2\\n3\\n'))\n"
                         "    assert add_two() == 5\n"),
    "stdout_read_back": ("from io import StringIO\nfrom unittest.mock import patch\n\n"
                         "def test_a():\n    with patch('sys.stdin', StringIO('2\\n3\\n')), "
                         "patch('sys.stdout', new_callable=StringIO) as out:\n"
                         "        show_sum()\n    assert out.getvalue() == '5\\n'\n"),
    "stdout_decorated": ("import io\nimport unittest\nfrom unittest.mock import patch\n\n"
                         "class T(unittest.TestCase):\n"
                         "    @patch('sys.stdout', new_callable=io.StringIO)\n"
                         "    @patch('sys.stdin', io.StringIO('2\\n3\\n'))\n"
                         "    def test_a(self, out):\n        show_sum()\n"
                         "        self.assertEqual(out.getvalue().strip(), '5')\n"),
}
INPUT_ANSWERS = (
    ("def add_two():\n    return int(input()) + int(input())\n\n"
     "def show_sum():\n    print(add_two())\n"),
    ("def add_two():\n    a = int(input())\n    return a + a\n\n"  # reads one input only
     "def show_sum():\n    print(add_two(), end='')\n"),
    ("def add_two():\n    return int(input()) + int(input()) + int(input() or 0)\n\n"  # three
     "def show_sum():\n    import sys\n    sys.__stdout__.write('5\\n')\n"))


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_input_and_streams_are_judged_as_pytest_runs_them(name):
    """input() replaced by `lambda _: next(it)` over `it = iter([...])` or by `answers.pop(0)`, a
    patch whose replacement is a lambda, sys.stdin or sys.stdout patched with an `io.StringIO`
    (its text read back with `getvalue()`): judged by the trainer (the StringIO made in the child,
    the side effect run by the trainer's mocks), as pytest says (one input too many: StopIteration,
    a print to the real stdout: not captured)."""
    judged_as_pytest_says(INPUTS, INPUT_ANSWERS, name)


# ------------------------------------------------ 5. values of the solution's own types, returned

ALWAYS_EQUAL = "    def __eq__(self, other):\n        return True\n\n    __hash__ = None\n"
# name: (tests, an honest answer, a wrong one: most of whose classes say they equal anything)
RETURNED = {
    "list_subclass": (
        ("def test_a():\n    assert f(3) == [0, 1, 2]\n    assert isinstance(f(1), list)\n"
         "    assert type(f(1)) is not list\n"),
        ("class Stack(list):\n    def push(self, x):\n        self.append(x)\n\n"
         "def f(n):\n    s = Stack()\n    for i in range(n):\n        s.push(i)\n    return s\n"),
        "class Stack(list):\n" + ALWAYS_EQUAL + "\ndef f(n):\n    return Stack()\n"),
    "int_subclass": (
        "def test_a():\n    assert f(2) == 4\n    assert f(3) + 1 == 7\n",
        ("class Score(int):\n    def __repr__(self):\n        return f'Score({int(self)})'\n\n"
         "def f(n):\n    return Score(2 * n)\n"),
        "class Score(int):\n" + ALWAYS_EQUAL + "\ndef f(n):\n    return Score(n)\n"),
    "str_subclass": (
        "def test_a():\n    assert f('ab') == 'AB'\n    assert f('x').lower() == 'x'\n",
        ("class Name(str):\n    def shout(self):\n        return self + '!'\n\n"
         "def f(s):\n    return Name(s.upper())\n"),
        "class Name(str):\n" + ALWAYS_EQUAL + "\ndef f(s):\n    return Name(s)\n"),
    "namedtuple_with_methods": (
        "def test_a():\n    assert f() == (1, 2)\n    assert f().y == 2\n",
        ("from collections import namedtuple\n\nclass Point(namedtuple('Point', 'x y')):\n"
         "    def norm(self):\n        return abs(self.x) + abs(self.y)\n\n"
         "def f():\n    return Point(1, 2)\n"),
        ("from collections import namedtuple\n\nclass Point(namedtuple('Point', 'x y')):\n"
         + ALWAYS_EQUAL + "\ndef f():\n    return Point(0, 2)\n")),
    "userlist_subclass": (
        "def test_a():\n    assert f() == [1, 2]\n",
        ("from collections import UserList\n\nclass Stack(UserList):\n    def push(self, x):\n"
         "        self.append(x)\n\ndef f():\n    s = Stack()\n    s.push(1)\n    s.push(2)\n"
         "    return s\n"),
        ("from collections import UserList\n\nclass Stack(UserList):\n" + ALWAYS_EQUAL
         + "\ndef f():\n    return Stack([2])\n")),
    "counter_subclass": (
        "def test_a():\n    assert f('aab') == {'a': 2, 'b': 1}\n    assert f('a')['z'] == 0\n",
        ("from collections import Counter\n\nclass Tally(Counter):\n    def top(self):\n"
         "        return self.most_common(1)[0]\n\ndef f(s):\n    return Tally(s)\n"),
        ("from collections import Counter\n\nclass Tally(Counter):\n" + ALWAYS_EQUAL
         + "\ndef f(s):\n    return Tally()\n")),
    "objects_in_a_list": (  # items and attributes read where the objects live, as pytest does
        ("def test_a():\n    assert len(f()) == 2\n    assert f()[0].val == 1\n    r = f()\n"
         "    assert r[1].val == 2\n    assert f()[-1] is not None\n"),
        ("class Node:\n    def __init__(self, val):\n        self.val = val\n\n"
         "def f():\n    return [Node(1), Node(2)]\n"),
        ("class Anything:\n" + ALWAYS_EQUAL + "\nclass Node:\n    def __init__(self, val):\n"
         "        self.val = Anything()\n\ndef f():\n    return [Node(0), Node(0)]\n")),
    "a_table_object": (  # a DataFrame-like object of the solution's: its items, its columns
        ("def test_a():\n    assert list(f().columns) == ['a', 'b']\n"
         "    assert len(f()['a']) == 2\n    assert f()['b'][1] == 4\n"
         "    assert f() is not None\n"),
        ("class Table:\n    def __init__(self, cols):\n        self.cols = cols\n"
         "        self.columns = tuple(cols)\n\n    def __getitem__(self, key):\n"
         "        return self.cols[key]\n\n"
         "def f():\n    return Table({'a': [1, 2], 'b': [3, 4]})\n"),
        ("class Anything:\n" + ALWAYS_EQUAL + "\nclass Table:\n    columns = ('a', 'b')\n\n"
         "    def __getitem__(self, key):\n        return [Anything(), Anything()]\n\n"
         "def f():\n    return Table()\n")),
    "items_of_a_subclass": (  # read from its data: its own `__getitem__` never answers
        ("def test_a():\n    assert f()['a'] == 5\n    assert g()[0] == 5\n"
         "    assert g()[1:] == [6, 7]\n"),
        ("class Table(dict):\n    def first(self):\n        return next(iter(self))\n\n"
         "class Row(list):\n    pass\n\ndef f():\n    return Table(a=5)\n\n"
         "def g():\n    return Row([5, 6, 7])\n"),
        ("class Table(dict):\n    def __getitem__(self, key):\n        return 5\n\n"
         "class Row(list):\n    def __getitem__(self, i):\n"
         "        return [6, 7] if isinstance(i, slice) else 5\n\n"
         "def f():\n    return Table(a=0)\n\ndef g():\n    return Row([0])\n")),
    "sympy_numbers": (  # sympy's Integer and Rational, as sympy computes with them
        "def test_a():\n    assert f(5) == 120\n    assert g(3, 6) * 2 == 1\n",
        ("import sympy\n\ndef f(n):\n    return sympy.factorial(n)\n\n"
         "def g(a, b):\n    return sympy.Rational(a, b)\n"),
        ("import sympy\n\ndef f(n):\n    return sympy.factorial(n - 1)\n\n"
         "def g(a, b):\n    return sympy.Rational(b, a)\n")),
    "enum_members_of_two_classes": (  # equal by class and name, as Python compares them
        "def test_a():\n    assert f() != g()\n    assert f() == f()\n",
        ("import enum\n\nclass A(enum.Enum):\n    X = 1\n\nclass B(enum.Enum):\n    X = 1\n\n"
         "def f():\n    return A.X\n\ndef g():\n    return B.X\n"),
        ("import enum\n\nclass A(enum.Enum):\n    X = 1\n\ndef f():\n    return A.X\n\n"
         "def g():\n    return A.X\n")),
}


@pytest.mark.parametrize("name", sorted(RETURNED))
def test_a_value_of_the_solutions_own_type_is_judged_by_its_data(name):
    """A value of a class of the solution's (a subclass of a plain type or of collections', a list
    of its objects, an object read by item and attribute): pytest passes the honest answer and the
    trainer judges it 1.0 in both modes, by the value's data (its items read where the objects
    live); a class whose `__eq__` says it equals anything gains nothing (0.0)."""
    tests, honest, wrong = RETURNED[name]
    programs = tuple((h, t) for t, h, _ in RETURNED.values())
    assert pytest_verdicts(programs)[(honest, tests)] is True
    assert scores(block(honest), tests) == (1.0, 1.0)
    assert scores(block(wrong), tests) == (0.0, 0.0)
    assert testplan.build_plan(tests).harness is None


READS = {  # what the tests read from the solution's objects, read where the objects live
    "a_comprehension_over_returned_objects": (
        "def test_a():\n    assert [n.val for n in nodes(2)] == [0, 1]\n"
        "    assert all(n is not None for n in nodes(3))\n"),
    "sorted_attributes_of_made_objects": (
        "def test_a():\n    cs = [Counter(3), Counter(1)]\n"
        "    assert sorted(c.n for c in cs) == [1, 3]\n"
        "    assert {c.n: len(c.log) for c in cs} == {3: 0, 1: 0}\n"),
    "a_method_chain_on_an_object": ("def test_a():\n    assert Counter(1).inc().inc().n == 3\n"),
    "nested_unpacking": ("def test_a():\n    a, (b, c) = pair()\n    assert a + b + c == 6\n"),
    "next_of_a_generator": ("def test_a():\n    g = evens()\n    next(g)\n"
                            "    assert next(g) == 2\n    assert next(evens(), None) == 0\n"
                            "    assert callable(evens)\n"),
}
READ_ANSWERS = (
    ("class Node:\n    def __init__(self, val):\n        self.val = val\n\n"
     "def nodes(k):\n    return [Node(i) for i in range(k)]\n\n"
     "class Counter:\n    def __init__(self, n):\n        self.n, self.log = n, []\n\n"
     "    def inc(self):\n        self.n += 1\n        return self\n\n"
     "def evens():\n    yield from range(0, 10, 2)\n\ndef pair():\n    return 1, [2, 3]\n"),
    ("class Node:\n    def __init__(self, val):\n        self.val = val + 1\n\n"
     "def nodes(k):\n    return [Node(i) for i in range(k)]\n\n"
     "class Counter:\n    def __init__(self, n):\n        self.n, self.log = -n, [n]\n\n"
     "    def inc(self):\n        self.n += 3\n        return self\n\n"
     "def evens():\n    yield from range(1, 10, 2)\n\ndef pair():\n    return 1, [2, 4]\n"),
)


@pytest.mark.parametrize("name", sorted(READS))
def test_reads_of_the_solutions_objects_are_judged_as_pytest_runs_them(name):
    """A comprehension reading items of a child value (`[n.val for n in nodes(2)]`, one `for`, no
    `if`: its items cross as data), a method of what an object's method returned, `next(g)` and
    `callable(f)` on the solution's values (in the child, on the real builtins), a nested unpacking
    of a returned value (bound in the child): judged by the trainer, as pytest says."""
    judged_as_pytest_says(READS, READ_ANSWERS, name)


FILES = {  # os.path on the files a test makes its answer write, as KodCode's tests write them
    "join_exists_read": ("import os\n\ndef test_a(tmp_path):\n"
                         "    p = os.path.join(tmp_path, 'a.txt')\n    save(p, 'hi')\n"
                         "    assert os.path.exists(p)\n    assert open(p).read() == 'hi'\n"),
    "isfile_getsize": ("import os\n\ndef test_a(tmp_path):\n    p = tmp_path / 'b.txt'\n"
                       "    save(str(p), 'hello')\n    assert os.path.isfile(p)\n"
                       "    assert os.path.getsize(p) == 5\n    assert not os.path.isdir(p)\n"),
    "text_functions": ("from os.path import basename, exists, join, splitext\n\n"
                       "def test_a(tmp_path):\n    p = join(str(tmp_path), 'c.txt')\n"
                       "    save(p, 'x')\n    assert basename(p) == 'c.txt'\n"
                       "    assert splitext(p)[1] == '.txt'\n    assert exists(p)\n"),
    "listing_the_folder": ("def test_a(tmp_path):\n    save(str(tmp_path / 'a.txt'), 'hi')\n"
                           "    assert sorted(p.name for p in tmp_path.iterdir()) == ['a.txt']\n"
                           "    assert len([p for p in tmp_path.iterdir()]) == 1\n"),
    "nothing_written_yet": ("import os\n\ndef test_a(tmp_path):\n"
                            "    p = os.path.join(tmp_path, 'none.txt')\n"
                            "    assert not os.path.exists(p)\n    save(p, 'hey')\n"
                            "    assert os.path.getsize(p) == 3\n"),
}
FILE_ANSWERS = (
    "def save(path, text):\n    with open(path, 'w') as f:\n        f.write(text)\n",
    "def save(path, text):\n    with open(path, 'w') as f:\n        f.write(text[:1])\n",
    "def save(path, text):\n    pass\n",
)


@pytest.mark.parametrize("name", sorted(FILES))
def test_os_path_on_the_answers_files_is_judged_as_pytest_runs_it(name):
    """`os.path.join` of a path of the child's (tmp_path), `exists`/`isfile`/`isdir`/`getsize` of
    one (asked in the child of os.stat as it was before the solution ran), `basename`/`splitext`/...
    on its text (here): judged by the trainer, as pytest says."""
    judged_as_pytest_says(FILES, FILE_ANSWERS, name)


def test_os_path_replaced_by_the_answer_changes_nothing():
    """An answer replacing os.path.exists and writing nothing (pytest passes it) scores 0.0 in both
    modes: the child asks os.stat as it was before the answer ran."""
    tests = FILES["join_exists_read"].replace("    assert open(p).read() == 'hi'\n", "")
    lying = ("import os.path\n\nos.path.exists = lambda p: True\n\n"
             "def save(path, text):\n    pass\n")
    assert verdict({"t": tests}, (lying,), "t", lying) == 1.0
    assert scores(block(lying), tests) == (0.0, 0.0)


# ------------------------------------------------ 5. methods of what a function returned

METHODS = {  # name: the test's check on what the answer's functions return
    "array_mean": "assert arr(3).mean() == 1.0",
    "array_conversions": "assert arr(3).astype(float).tolist() == [0.0, 1.0, 2.0]",
    "array_tolist": "assert arr(3).tolist() == [0, 1, 2]\n    assert arr(3)[1].item() == 1",
    "array_reshape": "assert arr(4).reshape(2, 2).tolist() == [[0, 1], [2, 3]]",
    "an_objects_method": "assert make(4).get_val() == 4",
    "dataframe_column_sum": "assert table()['a'].sum() == 3",
    "dataframe_column_tolist": "assert table()['b'].tolist() == [3.0, 4.5]",
    "dataframe_to_dict": "assert table().to_dict('list') == {'a': [1, 2], 'b': [3.0, 4.5]}",
}
METHOD_ANSWER = ("import numpy as np\nimport pandas as pd\n\nclass Node:\n"
                 "    def __init__(self, v):\n        self.v = v\n\n"
                 "    def get_val(self):\n        return self.v\n\n"
                 "def arr(n):\n    return np.arange(n)\n\ndef make(v):\n    return Node(v)\n\n"
                 "def table():\n    return pd.DataFrame({'a': [1, 2], 'b': [3.0, 4.5]})\n")
# wrong data, and an ndarray subclass whose own methods give the right answers (pytest passes it)
METHOD_LIAR = ("import numpy as np\nimport pandas as pd\n\nclass Liar(np.ndarray):\n"
               "    def mean(self, *a, **k):\n        return 1.0\n\n"
               "    def tolist(self):\n        return [0, 1, 2]\n\n"
               "    def astype(self, *a, **k):\n        return np.arange(3.0)\n\n"
               "class Node:\n    def __init__(self, v):\n        self.v = v\n\n"
               "    def get_val(self):\n        return self.v + 1\n\n"
               "def arr(n):\n    return np.arange(5, 5 + n).view(Liar)\n\n"
               "def make(v):\n    return Node(v)\n\n"
               "def table():\n    return pd.DataFrame({'a': [1, 3], 'b': [3.0, 4.0]})\n")


@pytest.mark.parametrize("name", sorted(METHODS))
def test_a_method_of_a_returned_value_is_judged_on_its_data(name):
    """A method no plain data has, on what a function returned (`arr(3).mean()`,
    `.astype(float).tolist()`, `table()['a'].sum()`, `make(4).get_val()`): an array crosses as
    data and numpy's own method runs in the trainer (an ndarray subclass's `mean` or `tolist`
    gains nothing), an object (a DataFrame, the answer's own) gets the call in the child, as
    pytest makes it. Honest: pytest's 1 and 1.0 in both modes; wrong data: 0.0 in both."""
    pytest.importorskip("pandas")
    tests = f"def test_a():\n    {METHODS[name]}\n"
    programs = tuple((METHOD_ANSWER, f"def test_a():\n    {c}\n") for c in METHODS.values())
    assert pytest_verdicts(programs)[(METHOD_ANSWER, tests)] is True
    assert scores(block(METHOD_ANSWER), tests) == (1.0, 1.0)
    assert scores(block(METHOD_LIAR), tests) == (0.0, 0.0)
    assert testplan.build_plan(tests).harness is None


# ------------------------------------------------ pandas values, judged by the trainer

PD_HEAD = "import unittest\nimport pandas as pd\nimport numpy as np\n\n\n"
PANDAS = {  # name: BigCodeBench-shaped tests (TestCases) on frames and series
    "frame_equal": PD_HEAD + (
        "class TestCases(unittest.TestCase):\n"
        "    def setUp(self):\n"
        "        self.df = pd.DataFrame({'a': [1, 5, 3], 'b': [1.0, 0.5, 2.0]})\n\n"
        "    def test_total(self):\n"
        "        original = self.df.copy()\n"
        "        result = task_func(self.df)\n"
        "        expected = pd.DataFrame({'a': [5, 3, 1], 'b': [0.5, 2.0, 1.0],\n"
        "                                 'total': [5.5, 5.0, 2.0]})\n"
        "        pd.testing.assert_frame_equal(result, expected)\n"
        "        pd.testing.assert_frame_equal(self.df, original)\n"),
    "frame_reads": PD_HEAD + (
        "class TestCases(unittest.TestCase):\n"
        "    def test_reads(self):\n"
        "        df = task_func(pd.DataFrame({'a': [1, 5, 3], 'b': [1.0, 0.5, 2.0]}))\n"
        "        self.assertIsInstance(df, pd.DataFrame)\n"
        "        self.assertTrue(isinstance(df, pd.DataFrame))\n"
        "        self.assertEqual(df.shape, (3, 3))\n"
        "        self.assertListEqual(df.columns.tolist(), ['a', 'b', 'total'])\n"
        "        self.assertEqual(df.iloc[0]['a'], 5)\n"
        "        self.assertEqual(df.loc[2, 'total'], 2.0)\n"
        "        self.assertTrue(df['total'].between(2, 6).all())\n"
        "        self.assertTrue((df['a'] == pd.Series([5, 3, 1], name='a')).all())\n"
        "        self.assertAlmostEqual(df['total'].sum(), 12.5)\n"
        "        self.assertEqual(df.isnull().sum().sum(), 0)\n"
        "        self.assertEqual(str(df['a'].dtype), 'int64')\n"),
    "series": PD_HEAD + (
        "class TestCases(unittest.TestCase):\n"
        "    def test_series(self):\n"
        "        df = task_func(pd.DataFrame({'a': [1, 5, 3], 'b': [1.0, 0.5, 2.0]}))\n"
        "        pd.testing.assert_series_equal(df['total'],\n"
        "                                       pd.Series([5.5, 5.0, 2.0], name='total'))\n"
        "        self.assertEqual(df['total'].to_dict(), {0: 5.5, 1: 5.0, 2: 2.0})\n"
        "        self.assertTrue(df.equals(df.copy()))\n"),
    "frame_methods": PD_HEAD + (  # pandas' own methods, where the data is (query: in the child)
        "class TestCases(unittest.TestCase):\n"
        "    def test_methods(self):\n"
        "        df = task_func(pd.DataFrame({'a': [1, 5, 3], 'b': [1.0, 0.5, 2.0]}))\n"
        "        self.assertEqual(df.query('a > 2').shape[0], 2)\n"
        "        self.assertEqual(df['a'].astype(str).str.zfill(2).tolist(), ['05', '03', '01'])\n"
        "        self.assertEqual(df['total'].round(1).tolist(), [5.5, 5.0, 2.0])\n"
        "        self.assertEqual(df.groupby('a')['total'].sum().to_dict(),\n"
        "                         {1: 2.0, 3: 5.0, 5: 5.5})\n"),
}
PD_HONEST = ("import pandas as pd\n\ndef task_func(df):\n    out = df.copy()\n"
             "    out['total'] = out['a'] + out['b']\n"
             "    return out.sort_values('total', ascending=False).reset_index(drop=True)\n")
PD_ANSWERS = (
    PD_HONEST,
    PD_HONEST.replace("ascending=False", "ascending=True"),  # wrong order
    PD_HONEST.replace("out = df.copy()", "out = df"),  # changes the tests' frame
    PD_HONEST.replace("out['a'] + out['b']", "(out['a'] + out['b']).astype(int)"),  # dtype
    PD_HONEST.replace(".reset_index(drop=True)", ""),  # the index
)


@pytest.mark.parametrize("name", sorted(PANDAS))
def test_pandas_values_are_judged_by_the_trainer(name):
    """A DataFrame or Series the answer returns crosses as data (each column's dtype and items,
    the index, the names) and is rebuilt by the trainer's pandas; the tests' own frames, their
    `pd.testing` asserts and what they read from the result run in the trainer, a frame the tests
    pass in is rebuilt in the child (an in-place change read back, as under unittest). Each answer
    scores pytest's verdict in both modes."""
    pytest.importorskip("pandas")
    judged_as_pytest_says(PANDAS, PD_ANSWERS, name)


PD_LIARS = {  # answers whose wrong frame pytest passes
    "always_equal_subclass": (
        "import pandas as pd\n\nclass F(pd.DataFrame):\n"
        "    def equals(self, other):\n        return True\n\n"
        "def task_func(df):\n    return F({'a': [0]})\n"),
    "patched_testing": (
        "import pandas as pd\npd.testing.assert_frame_equal = lambda *a, **k: None\n"
        "pd.DataFrame.equals = lambda self, other: True\n\n"
        "def task_func(df):\n    return pd.DataFrame({'a': [0]})\n"),
}
PD_LIAR_TESTS = PD_HEAD + (
    "class TestCases(unittest.TestCase):\n"
    "    def test_a(self):\n"
    "        r = task_func(pd.DataFrame({'a': [1, 2]}))\n"
    "        self.assertTrue(r.equals(pd.DataFrame({'a': [1, 2]})))\n")


@pytest.mark.parametrize("name", sorted(PD_LIARS))
def test_a_frame_that_lies_about_its_data_scores_nothing(tmp_path, name):
    """A DataFrame subclass whose `equals` says yes, or pandas' asserts replaced in the answer's
    process: pytest passes them; the trainer compares the data with its own pandas: 0.0."""
    pytest.importorskip("pandas")
    tests = PD_LIAR_TESTS + (
        "        pd.testing.assert_frame_equal(r, pd.DataFrame({'a': [1, 2]}))\n"
        if name == "patched_testing" else "")
    assert pytest_verdict(tmp_path, PD_LIARS[name], tests) is True
    assert scores(block(PD_LIARS[name]), tests) == (0.0, 0.0)


def _child_encode():
    """The sandbox child's encode, loaded as the standalone script it is."""
    import importlib.util
    path = Path(testplan.__file__).with_name("_sandbox_child.py")
    spec = importlib.util.spec_from_file_location("gmts_sandbox_child", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.encode


def _pandas_values():
    pd = pytest.importorskip("pandas")
    np = pytest.importorskip("numpy")
    return [
        pd.DataFrame({"i": [1, 2], "s": ["x", None], "f": [1.5, np.nan],
                      "d": pd.to_datetime(["2020-01-01", "2021-06-30"]),
                      "c": pd.Categorical(["u", "v"], ordered=True),
                      "n": pd.array([1, None], dtype="Int64"), "b": [True, False],
                      "o": pd.Series(["p", [3]], dtype=object),
                      "t": pd.to_timedelta([1, 2], unit="s")}),
        pd.DataFrame({"a": [3, 1, 2]}).sort_values("a"),
        pd.DataFrame({"a": [1, 2]}, index=pd.Index(["r", "r"], name="k")),
        pd.DataFrame(), pd.DataFrame([[1, 2]], columns=["a", "a"]),
        pd.DataFrame({"a": [1, 2], "b": [3, 4]}).describe(),
        pd.Series([1, 2, 3], index=pd.date_range("2020-01-01", periods=3, freq="D"), name="n"),
        pd.Series(dtype=float), pd.Index([1, 2, 3]), pd.RangeIndex(0, 10, 2, name="r"),
        pd.DataFrame({"k": ["x", "y", "x"], "j": [1, 1, 2], "a": [1, 2, 3]}).groupby(
            ["k", "j"])["a"].sum(),  # a MultiIndex
        pd.DataFrame({"a": [1, 2]}).T,
    ]


def _assert_same(pd, a, b):
    if isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    elif isinstance(a, pd.Series):
        pd.testing.assert_series_equal(a, b, check_exact=True)
    else:
        pd.testing.assert_index_equal(a, b, exact=True, check_exact=True)
    assert type(a) is type(b)


def test_a_pandas_value_crosses_as_its_data_both_ways():
    """A frame, series or index the answer returns is rebuilt in the trainer exactly (dtypes,
    index and its frequency, names, missing values: pandas' own strict comparison), as is one the
    tests pass in, rebuilt in the child from its source; what has no plain data (a Timestamp item
    of an object column, time zones) is no data."""
    import builtins
    pd = pytest.importorskip("pandas")
    encode = _child_encode()
    for value in _pandas_values():
        _assert_same(pd, value, testplan.decode(json.loads(json.dumps(encode(value)))))
        _assert_same(pd, value, eval(testplan.render(value),
                                     {"__gmts_builtins": vars(builtins)}))
    for value in (pd.DataFrame({"a": [pd.Timestamp(0)]}, dtype=object),
                  pd.Series([1], index=pd.MultiIndex.from_arrays(
                      [pd.to_datetime(["2020-01-01"]).tz_localize("UTC"), [2]])),
                  pd.DataFrame({"z": pd.to_datetime(["2020-01-01"]).tz_localize("UTC")})):
        with pytest.raises(TypeError, match="not plain data"):
            encode(value)
        with pytest.raises(testplan.Unconvertible):
            testplan.render(value)


@pytest.mark.parametrize("data", [
    {"series": [{"np": {"ndarray": ["<i8", [2], [1, 2]]}}, {"pdrange": [0, 3, 1, None]}, None]},
    {"frame": [{"pdrange": [0, 2, 1, None]}, {"pdrange": [0, 1, 1, None]},
               [{"np": {"ndarray": ["<i8", [1], [1]]}}]]},
    {"series": [{"ext": ["object", {"ndarray": ["|O", [1], [1]]}]}, {"pdrange": [0, 1, 1, None]},
                None]},
    {"series": [{"np64": ["<M8[D]", {"ndarray": ["<i8", [1], [1]]}]},
                {"pdrange": [0, 1, 1, None]}, None]},
    {"pdindex": [{"np64": ["<M8[ns]", {"ndarray": ["<i8", [2], [0, 5]]}]}, None, "D"]},
    {"pdindex": [{"np": {"ndarray": ["<i8", [2, 1], [[0], [5]]]}}, None, None]},
    {"series": [{"cat": [{"pdrange": [0, 1, 1, None]}, {"ndarray": ["<i8", [1], [4]]}, False]},
                {"pdrange": [0, 1, 1, None]}, None]},
    {"pdmulti": [[{"pdrange": [0, 1, 1, None]}], [{"ndarray": ["<i8", [1], [3]]}], [None]]},
    {"pdmulti": [[{"pdrange": [0, 1, 1, None]}], [], [None]]},
])
def test_malformed_pandas_data_is_refused(data):
    """A report whose frame is inconsistent (lengths, a dtype outside the list, dates of another
    unit, a frequency the dates do not have, a 2-D column, codes past the categories) fails the
    test instead of building something pandas would not."""
    pytest.importorskip("pandas")
    with pytest.raises(ValueError):
        testplan.decode(data)


@pytest.mark.parametrize("statement", [
    "df.to_csv('written.csv')", "df.to_pickle('written.pkl')", "np.save('written.npy', [1])",
    "pd.read_csv('written.csv')", "df.plot()"])
def test_the_tests_file_operations_are_not_run_by_the_trainer(tmp_path, monkeypatch, statement):
    """The tests' own pandas and numpy calls that read or write files (`to_csv`, `read_csv`,
    `np.save`...) are steps of the child's, on its files: building the plan writes nothing here,
    and the verdict is pytest's (a read of a file nobody wrote fails the test)."""
    pytest.importorskip("pandas")
    monkeypatch.chdir(tmp_path)
    tests = PD_HEAD + (
        "class TestCases(unittest.TestCase):\n    def test_a(self):\n"
        f"        df = pd.DataFrame({{'a': [1]}})\n        {statement}\n"
        "        self.assertEqual(task_func(df), 1)\n")
    assert testplan.build_plan(tests).harness is None
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "pytest").mkdir()
    answer = "def task_func(df):\n    return len(df)\n"
    want = 1.0 if pytest_verdict(tmp_path / "pytest", answer, tests) else 0.0
    assert want == (0.0 if "read_csv" in statement else 1.0)
    assert scores(block(answer), tests) == (want, want)


# ------------------------------------------------ matplotlib's objects, asked in the child

MPL_HEAD = ("import unittest\nfrom unittest.mock import patch\nimport pandas as pd\n"
            "import matplotlib\nimport matplotlib.pyplot as plt\n\n\n"
            "class TestCases(unittest.TestCase):\n    def tearDown(self):\n"
            "        plt.close('all')\n\n")
MPL = {  # name: a BigCodeBench-shaped test of a plot the answer returns
    "axes": MPL_HEAD + (
        "    def test_axes(self):\n"
        "        df, ax = task_func({'k': ['a', 'b'], 'v': [3, 5]})\n"
        "        self.assertIsInstance(ax, plt.Axes)\n"
        "        self.assertTrue(isinstance(ax, matplotlib.axes.Axes))\n"
        "        self.assertEqual(ax.get_title(), 'Counts')\n"
        "        self.assertEqual(len(ax.patches), 2)\n"
        "        self.assertEqual(df.shape, (2, 2))\n"),
    "bars": MPL_HEAD + (
        "    def test_bars(self):\n"
        "        df, ax = task_func({'k': ['a', 'b'], 'v': [3, 5]})\n"
        "        heights = [p.get_height() for p in ax.patches]\n"
        "        self.assertEqual(heights, [3, 5])\n"
        "        labels = [t.get_text() for t in ax.get_xticklabels()]\n"
        "        self.assertEqual(labels, ['a', 'b'])\n"),
    "show_patched": MPL_HEAD + (
        "    @patch('matplotlib.pyplot.show')\n"
        "    def test_show(self, mock_show):\n"
        "        df, ax = task_func({'k': ['a'], 'v': [1]}, show=True)\n"
        "        self.assertEqual(ax.get_xlabel(), 'k')\n"),
}
MPL_HONEST = ("import pandas as pd\nimport matplotlib.pyplot as plt\n\n"
              "def task_func(data, show=False):\n    df = pd.DataFrame(data)\n"
              "    fig, ax = plt.subplots()\n    ax.bar(df['k'], df['v'])\n"
              "    ax.set_title('Counts')\n    ax.set_xlabel('k')\n"
              "    if show:\n        plt.show()\n    return df, ax\n")
MPL_ANSWERS = (
    MPL_HONEST,
    MPL_HONEST.replace("'Counts'", "'counts'").replace("'k')", "'key')"),
    MPL_HONEST.replace("df['v'])", "df['v'] + 1)"),
    MPL_HONEST.replace("return df, ax", "return df, None"),
)


@pytest.mark.parametrize("name", sorted(MPL))
def test_matplotlib_objects_are_asked_in_the_child(name):
    """The tests' matplotlib names are bound in the child (its objects never cross as data):
    `isinstance(ax, plt.Axes)`, `ax.get_title()`, `len(ax.patches)`, `[p.get_height() for p in
    ax.patches]` run there as pytest runs them, their data judged here; `plt.close` in tearDown,
    `@patch('matplotlib.pyplot.show')` (pyplot sets the mock's `__signature__`). Each answer
    scores pytest's verdict in both modes."""
    pytest.importorskip("matplotlib")
    pytest.importorskip("pandas")
    judged_as_pytest_says(MPL, MPL_ANSWERS, name)


ISINSTANCE = {
    "assert_is_instance": ("import unittest\n\n\nclass TestCases(unittest.TestCase):\n"
                           "    def test_a(self):\n        n = make(1)\n"
                           "        self.assertIsInstance(n, Node)\n"
                           "        self.assertNotIsInstance(n, dict)\n"
                           "        self.assertIsInstance(make(2).v, int)\n"),
}
NODE = "class Node:\n    def __init__(self, v):\n        self.v = v\n\ndef make(v):\n"
ISINSTANCE_ANSWERS = (NODE + "    return Node(v)\n", NODE + "    return {'v': v}\n",
                      NODE + "    return Node(str(v))\n")


def test_assert_is_instance_is_isinstance():
    """unittest's `assertIsInstance(x, C)` (`NotIsInstance`) is judged as `isinstance`: asked in
    the child of an object of the answer's against its class, here of data."""
    judged_as_pytest_says(ISINSTANCE, ISINSTANCE_ANSWERS, "assert_is_instance")


# ------------------------------------------------ the global random state the answer draws from

_R = __import__("random").Random(42)
RANDOM_42 = [_R.randint(1, 100) for _ in range(3)]  # what random.seed(42) then 3 draws give


def _numpy_42() -> list:
    np = pytest.importorskip("numpy")
    return np.random.RandomState(42).randint(0, 100, 3).tolist()  # np.random.seed(42)'s draws


SEEDS = {  # name: tests that seed the state the answer's unseeded draws read
    "unittest_random": ("import unittest\nimport random\n\n\nclass TestCases(unittest.TestCase):\n"
                        "    def test_a(self):\n        random.seed(42)\n"
                        f"        self.assertEqual(task_func(3), {RANDOM_42})\n"),
    "pytest_random": ("from random import seed\n\n\ndef test_a():\n    seed(42)\n"
                      f"    assert task_func(3) == {RANDOM_42}\n"),
    "numpy": ("import unittest\nimport numpy as np\n\n\nclass TestCases(unittest.TestCase):\n"
              "    def test_a(self):\n        np.random.seed(42)\n"
              "        self.assertEqual(task_func(3, np_=True), {numpy})\n"),
}
SEED_ANSWERS = (
    ("import random\nimport numpy as np\n\ndef task_func(n, np_=False):\n"
    "    if np_:\n        return np.random.randint(0, 100, n).tolist()\n"
    "    return [random.randint(1, 100) for _ in range(n)]\n"),
    ("import random\nimport numpy as np\n\ndef task_func(n, np_=False):\n"
    "    if np_:\n        return np.random.randint(0, 100, n + 1).tolist()[1:]\n"
    "    return [random.randint(1, 100) for _ in range(n + 1)][1:]\n"),
)


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_a_seed_the_tests_set_is_the_answers(name):
    """`random.seed(42)` / `np.random.seed(42)` in a test seeds the answer's global random state
    in the child at that step (under pytest the answer draws from it): an answer drawing from it
    scores pytest's verdict in both modes."""
    pytest.importorskip("numpy")
    table = {k: v.replace("{numpy}", str(_numpy_42())) for k, v in SEEDS.items()}
    judged_as_pytest_says(table, SEED_ANSWERS, name)


def test_the_tests_own_draws_after_a_seed(tmp_path):
    """A test that seeds the global state and draws its inputs from it (`np.random.seed(1); x =
    np.random.rand(3)`) draws them here from a state of the plan's own, seeded alike, so they are
    pytest's; the answer's state is seeded in the child too. numpy's global state, the
    trainer's, is neither read nor advanced by building the plan."""
    np = pytest.importorskip("numpy")
    tests = ("import numpy as np\n\n\ndef test_a():\n    np.random.seed(1)\n"
             "    x = np.random.rand(3)\n"
             "    assert task_func(list(x)) == round(float(x.sum()), 6)\n"
             "    assert task_func(x.tolist()) == round(float(x.sum()), 6)\n")
    answer = "def task_func(xs):\n    return round(float(sum(xs)), 6)\n"
    state = np.random.get_state()[1].copy()
    assert testplan.build_plan(tests).harness is None
    assert (np.random.get_state()[1] == state).all()
    assert pytest_verdict(tmp_path, answer, tests) is True
    assert scores(block(answer), tests) == (1.0, 1.0)
    wrong = "def task_func(xs):\n    return round(float(sum(xs[:2])), 6)\n"
    assert scores(block(wrong), tests) == (0.0, 0.0)


_R42 = __import__("random").Random(42)
RANDOM_42_5 = [_R42.randint(1, 100) for _ in range(5)]  # random.seed(42) then 5 draws


def _numpy_7() -> list:
    np = pytest.importorskip("numpy")
    return np.random.RandomState(7).randint(0, 100, 4).tolist()  # np.random.seed(7)'s draws


INTERLEAVED = {  # name: a test draws its inputs after a seed, then the answer draws from the stream
    "random": ("import random\n\n\ndef test_a():\n    random.seed(42)\n"
               "    xs = [random.randint(1, 100) for _ in range(2)]\n"
               f"    assert task_func(xs) == {sorted(RANDOM_42_5[:2]) + [RANDOM_42_5[2]]}\n\n\n"
               f"def test_b():\n    assert task_func([0]) == [0, {RANDOM_42_5[3]}]\n"),
    "numpy": ("import unittest\nimport numpy as np\n\n\nclass TestCases(unittest.TestCase):\n"
              "    def test_a(self):\n        np.random.seed(7)\n"
              "        xs = np.random.randint(0, 100, 2).tolist()\n"
              "        self.assertEqual(task_func(xs, np_=True), {numpy})\n"),
}
INTERLEAVED_ANSWERS = (
    ("import random\nimport numpy as np\n\ndef task_func(xs, np_=False):\n"
     "    if np_:\n        return sorted(xs) + np.random.randint(0, 100, 1).tolist()\n"
     "    return sorted(xs) + [random.randint(1, 100)]\n"),
    ("import random\nimport numpy as np\n\ndef task_func(xs, np_=False):\n"
     "    if np_:\n        return sorted(xs) + np.random.randint(0, 100, 2).tolist()[1:]\n"
     "    return sorted(xs) + [random.randint(1, 100) for _ in range(2)][1:]\n"),
    "def task_func(xs, np_=False):\n    return sorted(xs) + [0]\n",
)


@pytest.mark.parametrize("name", sorted(INTERLEAVED))
def test_the_answers_draws_follow_the_tests_draws(name):
    """A test seeds the global state, draws its inputs, then calls the answer, which draws too:
    under pytest the answer's draws follow the test's on one stream (into the next test too);
    the child is given the plan's state before the answer runs, so both modes score pytest's
    verdict."""
    pytest.importorskip("numpy")
    numpy = _numpy_7()
    table = {k: v.replace("{numpy}", str(sorted(numpy[:2]) + [numpy[2]]))
             for k, v in INTERLEAVED.items()}
    judged_as_pytest_says(table, INTERLEAVED_ANSWERS, name)
    steps = [s for u in testplan.build_plan(table[name]).units for s in u.steps]
    assert sum("draws" in s for s in steps) == 1  # the state given once, before the answer ran


LATE = {  # name: the tests' own library calls on returned values, in the trainer
    "strptime": ("import unittest\nfrom datetime import datetime\n\n\n"
                 "class TestCases(unittest.TestCase):\n    def test_a(self):\n"
                 "        r = datetime.strptime(task_func('2020-01-01', 1), '%Y-%m-%d')\n"
                 "        self.assertEqual(r.day, 2)\n"),
    "json": ("import unittest\nimport json\n\n\nclass TestCases(unittest.TestCase):\n"
             "    def test_a(self):\n"
             "        self.assertEqual(json.loads(task_func('2020-01-30', 3, True)),\n"
             "                         {'date': '2020-02-02'})\n"),
    "hashlib": ("import hashlib\n\n\ndef test_a():\n"
                "    digest = hashlib.sha256(task_func('2020-01-01', 0).encode()).hexdigest()\n"
                "    assert digest == hashlib.sha256(b'2020-01-01').hexdigest()\n"),
}
LATE_ANSWERS = (
    ("import json\nfrom datetime import datetime, timedelta\n\ndef task_func(s, days, js=False):\n"
    "    d = datetime.strptime(s, '%Y-%m-%d') + timedelta(days=days)\n"
    "    out = d.strftime('%Y-%m-%d')\n    return json.dumps({'date': out}) if js else out\n"),
    ("import json\nfrom datetime import datetime, timedelta\n\ndef task_func(s, days, js=False):\n"
    "    d = datetime.strptime(s, '%Y-%m-%d') + timedelta(days=days + 1)\n"
    "    out = d.strftime('%Y-%m-%d')\n    return json.dumps({'date': out}) if js else out\n"),
)


@pytest.mark.parametrize("name", sorted(LATE))
def test_the_tests_library_calls_on_returned_values(name):
    """`datetime.strptime` (its C code imports `_strptime` in the check's frame), `json.loads`,
    `hashlib` on what the answer returned run in the trainer: pytest's verdict in both modes."""
    judged_as_pytest_says(LATE, LATE_ANSWERS, name)


ONCE = {  # name: the tests evaluate the solution's call once where pytest does
    "comprehension_iterable": ("import string\nimport unittest\n\n\n"
                               "class TestCases(unittest.TestCase):\n    def test_a(self):\n"
                               "        self.assertFalse(any(c in string.punctuation\n"
                               "                             for c in task_func('a,b.c!')))\n"
                               "        self.assertEqual(sum(1 for c in task_func('x!y')), 2)\n"),
    "raises_on_a_returned_object": ("import unittest\n\n\nclass TestCases(unittest.TestCase):\n"
                                    "    def test_a(self):\n        acc = account(10)\n"
                                    "        with self.assertRaises(ValueError):\n"
                                    "            acc.deposit(-1)\n"
                                    "        self.assertEqual(acc.deposit(5), 15)\n"),
}
ONCE_ANSWERS = tuple(
    "import string\n\ndef task_func(text):\n"
    f"    return ''.join(c for c in text if {keep})\n\n"
    "class Account:\n    def __init__(self, b):\n        self.b = b\n\n"
    f"    def deposit(self, x):\n        if x <= 0:\n            {bad}\n"
    "        self.b += x\n        return self.b\n\ndef account(b):\n    return Account(b)\n"
    for keep, bad in (("c not in string.punctuation", "raise ValueError('bad')"),
                      ("c != ','", "return self.b")))


@pytest.mark.parametrize("name", sorted(ONCE))
def test_a_call_pytest_makes_once_is_one_step(name):
    """The first `for`'s iterable of a comprehension is evaluated once (`any(c in p for c in
    f(x))`): one step in the child, iterated here; a method of what the solution returned,
    inside `assertRaises`, raises in the child. pytest's verdict in both modes."""
    judged_as_pytest_says(ONCE, ONCE_ANSWERS, name)


ATTRS = {  # name: attributes the tests read from a returned array or frame
    "array": ("import unittest\nimport numpy as np\n\n\nclass TestCases(unittest.TestCase):\n"
              "    def test_a(self):\n        r = task_func(5)\n"
              "        self.assertEqual(r.dtype, np.float64)\n"
              "        self.assertEqual(r.shape, (5,))\n        self.assertEqual(r.T.ndim, 1)\n"),
    "frame": ("import unittest\nimport numpy as np\n\n\nclass TestCases(unittest.TestCase):\n"
              "    def test_a(self):\n        df = task_func(5, frame=True)\n"
              "        self.assertEqual(df.dtypes['x'], np.float64)\n"
              "        self.assertEqual(df.values.shape, (5, 1))\n"),
}
ATTR_ANSWERS = tuple(
    "import numpy as np\nimport pandas as pd\n\ndef task_func(n, frame=False):\n"
    f"    r = np.linspace(0, 1, n){cast}\n"
    "    return pd.DataFrame({'x': r}) if frame else r\n" for cast in ("", ".astype(np.float32)"))
# a float32 array whose class says float64 (pytest passes it)
ATTR_LIAR = ("import numpy as np\n\nclass A(np.ndarray):\n    @property\n    def dtype(self):\n"
             "        return np.dtype(np.float64)\n\n"
             "def task_func(n, frame=False):\n"
             "    return np.linspace(0, 1, n).astype(np.float32).view(A)\n")


@pytest.mark.parametrize("name", sorted(ATTRS))
def test_attributes_of_a_returned_array_are_read_on_its_data(tmp_path, name):
    """`r.dtype`, `r.shape`, `df.dtypes['x']` of what the answer returned: an array or a frame
    crosses as data and the trainer reads its attributes (an ndarray subclass's own `dtype`
    property gains nothing; pytest passes it); pytest's verdict in both modes otherwise."""
    pytest.importorskip("pandas")
    judged_as_pytest_says(ATTRS, ATTR_ANSWERS, name)
    if name == "array":
        assert pytest_verdict(tmp_path, ATTR_LIAR, ATTRS[name]) is True
        assert scores(block(ATTR_LIAR), ATTRS[name]) == (0.0, 0.0)


def test_a_value_too_large_to_cross_is_read_where_it_is(tmp_path):
    """`big(1500).shape`, `.sum()` of an array of 1.5 million items (more than a result may carry
    back): the attribute and the method are read in the child, as pytest reads them, and only
    their small result crosses."""
    pytest.importorskip("numpy")
    tests = ("def test_a():\n    assert big(1500).shape == (1500, 1000)\n"
             "    assert big(1500).sum() == 0\n")
    honest = "import numpy as np\n\ndef big(n):\n    return np.zeros((n, 1000))\n"
    assert pytest_verdict(tmp_path, honest, tests) is True
    assert scores(block(honest), tests) == (1.0, 1.0)
    assert scores(block(honest.replace("1000", "999")), tests) == (0.0, 0.0)


# ------------------------------------------------ two values the answer returned, compared

COMPARED = {  # name: tests comparing what a lowercase function returned with what another did
    "assert": ("def test_a():\n    p = make(1, 2)\n    assert p == make(1, 2)\n"
               "    assert p != make(2, 1)\n    assert swap(swap(p)) == p\n"),
    "assert_equal": ("import unittest\n\n\nclass TestCases(unittest.TestCase):\n"
                     "    def test_a(self):\n        p = make(1, 2)\n"
                     "        self.assertEqual(swap(p), make(2, 1))\n"
                     "        self.assertNotEqual(p, make(2, 1))\n"
                     "        self.assertEqual(pairs(2), [make(0, 1), make(1, 2)])\n"),
    "membership": ("import unittest\n\n\nclass TestCases(unittest.TestCase):\n"
                   "    def test_a(self):\n        self.assertIn(make(0, 1), pairs(2))\n"
                   "        self.assertNotIn(make(2, 1), pairs(2))\n        p = make(1, 2)\n"
                   "        assert p in pairs(3)\n        assert make(5, 6) not in pairs(3)\n"),
    "order": ("def test_a():\n    assert make(1, 2) < make(2, 0)\n"
              "    assert not make(3, 0) < p0()\n"),
}
_PAIR = ("class _P:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n\n"
         "    def __eq__(self, other):\n"
         "        return isinstance(other, _P) and (self.x, self.y) == (other.x, other.y)\n\n"
         "    def __lt__(self, other):\n        return (self.x, self.y) < (other.x, other.y)\n\n\n"
         "def make(x, y):\n    return _P(x, y)\n\n\ndef p0():\n    return _P(0, 0)\n\n\n"
         "def pairs(n):\n    return [_P(i, i + 1) for i in range(n)]\n\n\n"
         "def swap(p):\n    return _P(p.y, p.x)\n")
COMPARED_ANSWERS = (
    _PAIR,
    _PAIR.replace("return _P(p.y, p.x)", "return p"),  # no swap
    _PAIR.replace("        return isinstance(other, _P) and", "        return True or"),  # lies
    _PAIR.replace("    def __eq__", "    def _eq").replace("    def __lt__", "    def _lt"),
    _PAIR.replace("class _P:", "class _P(tuple):\n    __new__ = lambda c, x, y: tuple.__new__("
                  "c, (x, y))").replace("self.x, self.y = x, y", "pass").replace(
        "(self.x, self.y)", "tuple(self)").replace("(other.x, other.y)", "tuple(other)").replace(
        "_P(p.y, p.x)", "_P(p[1], p[0])"),  # a tuple subclass: crosses as its data
)


@pytest.mark.parametrize("name", sorted(COMPARED))
def test_values_the_answer_returned_are_compared_as_pytest_compares_them(name):
    """`assert p == make(1, 2)`, `assertEqual(swap(p), make(2, 1))`, `pairs(2) == [make(0, 1),
    ...]`, `make(0, 1) in pairs(2)`, `assertIn`: both operands the answer's; where one cannot
    cross as data the child compares them with the answer's own `__eq__` (`__lt__`), as pytest
    does; where both cross the trainer compares their data (a tuple subclass's `__eq__` decides
    nothing)."""
    judged_as_pytest_says(COMPARED, COMPARED_ANSWERS, name)


def test_a_comparison_the_child_reports_is_a_bool():
    """A compare step's result: the operands' data (compared here) or the child's verdict, which
    must be a bool (anything else fails the check)."""
    plan = testplan.build_plan("def test_a():\n    assert make(1, 2) == make(1, 2)\n")
    unit = plan.units[0]
    assert unit.steps[-1] == {"eval": "make(1, 2)", "compare": "==", "right": "make(1, 2)"}
    ran = [{"ok": None}] * (len(unit.steps) - 1)
    for result, want in (({"compared": True}, True), ({"compared": False}, False),
                         ({"compared": 1}, False), ({"compared": "True"}, False),
                         ({"ok": [1, 2], "right": [1, 2]}, True),
                         ({"ok": [1, 2], "right": [2, 1]}, False), ({"ok": [1, 2]}, False),
                         ({"exc": "TypeError", "msg": "", "mro": []}, False)):
        assert testplan.judge(plan, [ran + [result]]) is want, result


def test_an_input_carried_to_the_answer_is_still_read_before_the_call():
    """`assert f(x) == sorted(x)` keeps reading the tests' `x` as it was before the call (an
    answer emptying its input and returning [] fails, as before); a name bound to what the answer
    returned is read where pytest reads it."""
    tests = "def test_a():\n    x = [3, 1, 2]\n    assert srt(x) == sorted(x)\n"
    assert scores(block("def srt(x):\n    x.clear()\n    return []\n"), tests) == (0.0, 0.0)
    assert scores(block("def srt(x):\n    return sorted(x)\n"), tests) == (1.0, 1.0)
    unit = testplan.build_plan("def test_a():\n    r = f(1)\n    assert g(r) == r\n").units[0]
    assert unit.steps[-1] == {"eval": "g(r)", "compare": "==", "right": "r"}


def test_the_setups_functions_stay_the_expected_side():
    """`assert twice(3) == expected(3)` with `expected` from the problem's setup: not a comparison
    of two values the answer returned, so an object of the answer's that equals anything cannot
    decide it (0.0; pytest passes it); honest answers score 1.0."""
    tests = {"tests": "assert twice(3) == expected(3)\n",
             "setup": "def expected(x):\n    return x * 2\n"}
    liar = ("class _Any:\n    def __eq__(self, other):\n        return True\n\n\n"
            "def twice(x):\n    return _Any()\n")
    assert scores(block(liar), tests) == (0.0, 0.0)
    assert scores(block("def twice(x):\n    return 2 * x\n"), tests) == (1.0, 1.0)


# ------------------------------------------------ the tests' own files, where the answer reads them

SETUP_HEAD = ("import unittest\nimport os\nimport json\nimport shutil\nimport tempfile\n"
             "import numpy as np\nimport pandas as pd\n\n\n")
FILE_SETUP = {  # name: BigCodeBench-shaped tests that make files for the answer and read its files
    "mkdtemp_to_csv": SETUP_HEAD + (
        "class TestCases(unittest.TestCase):\n    def setUp(self):\n"
        "        self.dir = tempfile.mkdtemp()\n"
        "        self.src = os.path.join(self.dir, 'in.csv')\n"
        "        pd.DataFrame({'a': [1, 2], 'b': [3, 4]}).to_csv(self.src, index=False)\n\n"
        "    def tearDown(self):\n        shutil.rmtree(self.dir)\n\n"
        "    def test_csv(self):\n        out = os.path.join(self.dir, 'out.csv')\n"
        "        task_func(self.src, out)\n        self.assertTrue(os.path.exists(out))\n"
        "        df = pd.read_csv(out)\n"
        "        pd.testing.assert_frame_equal(df, pd.DataFrame({'a': [2, 4], 'b': [6, 8]}))\n\n"
        "    def test_json(self):\n        out = os.path.join(self.dir, 'out.json')\n"
        "        task_func(self.src, out)\n        with open(out) as f:\n"
        "            self.assertEqual(json.load(f), {'a': [2, 4], 'b': [6, 8]})\n\n"
        "    def test_npy(self):\n        out = os.path.join(self.dir, 'out.npy')\n"
        "        task_func(self.src, out)\n"
        "        np.testing.assert_array_equal(np.load(out), np.array([[2, 6], [4, 8]]))\n"
        "        os.remove(out)\n        self.assertFalse(os.path.isfile(out))\n"
        "        self.assertEqual(sorted(os.listdir(self.dir)), ['in.csv'])\n"),
    "temporary_directory": SETUP_HEAD + (
        "class TestCases(unittest.TestCase):\n    def setUp(self):\n"
        "        self.tmp = tempfile.TemporaryDirectory()\n"
        "        self.src = os.path.join(self.tmp.name, 'in.csv')\n"
        "        with open(self.src, 'w') as f:\n            f.write('a,b\\n1,3\\n2,4\\n')\n\n"
        "    def tearDown(self):\n        self.tmp.cleanup()\n\n"
        "    def test_csv(self):\n        out = os.path.join(self.tmp.name, 'out.csv')\n"
        "        task_func(self.src, out)\n"
        "        self.assertEqual(pd.read_csv(out)['b'].tolist(), [6, 8])\n"),
    "relative_folder": SETUP_HEAD + (
        "class TestCases(unittest.TestCase):\n    def setUp(self):\n"
        "        self.dir = 'test_data'\n        os.makedirs(self.dir, exist_ok=True)\n"
        "        np.save(os.path.join(self.dir, 'in.npy'), np.array([[1, 3], [2, 4]]))\n\n"
        "    def tearDown(self):\n        import shutil\n        shutil.rmtree(self.dir)\n\n"
        "    def test_npy(self):\n        out = os.path.join(self.dir, 'out.npy')\n"
        "        try:\n            task_func(os.path.join(self.dir, 'in.npy'), out)\n"
        "            self.assertEqual(np.load(out).tolist(), [[2, 6], [4, 8]])\n"
        "        finally:\n            os.remove(out)\n"
        "        self.assertFalse(os.path.exists(out))\n"),
}
SETUP_ANSWER = ("import json\nimport numpy as np\nimport pandas as pd\n\n\n"
               "def task_func(src, out):\n"
               "    df = pd.DataFrame(np.load(src), columns=['a', 'b']) if src.endswith('.npy') "
               "else pd.read_csv(src)\n    df = df * 2\n"
               "    if out.endswith('.csv'):\n        df.to_csv(out, index=False)\n"
               "    elif out.endswith('.json'):\n        with open(out, 'w') as f:\n"
               "            json.dump({c: df[c].tolist() for c in df}, f)\n"
               "    else:\n        np.save(out, df.values)\n")
SETUP_ANSWERS = (
    SETUP_ANSWER,
    SETUP_ANSWER.replace("df * 2", "df * 3"),
    SETUP_ANSWER.replace("    else:\n        np.save(out, df.values)\n", ""),  # no .npy written
    SETUP_ANSWER + "    import os\n    os.remove(src)\n",  # deletes its input (a later read fails)
)


@pytest.mark.parametrize("name", sorted(FILE_SETUP))
def test_the_tests_files_are_made_and_read_where_the_answer_is(name):
    """`tempfile.mkdtemp()`, `TemporaryDirectory()`, `os.makedirs`, `df.to_csv(path)`,
    `np.save`, `open(path, 'w')` in setUp, `pd.read_csv(out)`, `np.load(out)`, `json.load(f)`,
    `os.path.exists`, `os.remove`, `os.listdir`, `shutil.rmtree` in the tests, `try: ...
    finally:`: the tests' file work runs in the child, on the files the answer reads and writes
    (what is read crosses as data); pytest's verdict in both modes."""
    pytest.importorskip("pandas")
    judged_as_pytest_says(FILE_SETUP, SETUP_ANSWERS, name)


def test_the_tests_file_work_never_touches_the_trainers_files(tmp_path, monkeypatch):
    """Building the plan of tests that make, write, list and remove files does nothing to the
    trainer's own folder: the calls are steps of the child's."""
    pytest.importorskip("pandas")
    monkeypatch.chdir(tmp_path)
    for tests in FILE_SETUP.values():
        plan = testplan.build_plan(tests)
        assert plan.harness is None
        runs = [s.get("run", "") for u in plan.units for s in u.steps]
        assert any(r.startswith("__gmts_") and "__import__" in r for r in runs)
    assert list(tmp_path.iterdir()) == []


LAMBDAS = {  # name: a TestCase's methods with lambdas among their expressions
    "sorted_map_max": (
        "import unittest\n\n\nclass TestCases(unittest.TestCase):\n    def setUp(self):\n"
        "        self.people = [('a', 1), ('b', 2), ('c', 2)]\n\n"
        "    def check(self, r, key):\n        self.assertEqual(sorted(r, key=lambda q: q[key]),\n"
        "                         sorted(self.people, key=lambda q: q[key]))\n\n"
        "    def test_a(self):\n        r = task_func(self.people)\n"
        "        self.assertEqual(list(map(lambda p: p[0], r)), ['b', 'c', 'a'])\n"
        "        self.assertTrue(all(map(lambda p: p[1] > 0, r)))\n        self.check(r, 0)\n"
        "        f = lambda p: p[1]\n        self.assertEqual([f(x) for x in r], [2, 2, 1])\n"
        "        self.assertEqual(max(r, key=lambda p: (p[1], p[0])), ('c', 2))\n"),
}
LAMBDA_ANSWERS = tuple("def task_func(people):\n    return " + body + "\n" for body in (
    "sorted(people, key=lambda p: (-p[1], p[0]))", "sorted(people, key=lambda p: (p[1], p[0]))",
    "sorted(people, key=lambda p: (-p[1], p[0]))[:2]"))


def test_a_testcases_lambdas_are_expressions_as_in_a_test_function():
    """`sorted(r, key=lambda p: p[0])`, `map(lambda ...)`, `f = lambda p: p[1]` in a TestCase's
    test or helper method are judged as in a test function (pytest's verdict in both modes)."""
    judged_as_pytest_says(LAMBDAS, LAMBDA_ANSWERS, "sorted_map_max")


FILTERED = {  # name: comprehensions with `if`s over the answer's objects
    "filters": ("def test_a():\n    assert [n.val for n in nodes(6) if n.val > 2] == [3, 4, 5]\n"
                "    assert [n.val for n in nodes(6) if n.ok()] == [0, 2, 4]\n"
                "    assert {n.val for n in nodes(6) if n.tag == 'x' and not n.ok()} == {3}\n"
                "    assert sum(n.val for n in nodes(6) if n.tag is not None) == 3\n"
                "    assert len([n for n in nodes(5) if n.val]) == 4\n"),
}
_NODES = ("class Node:\n    def __init__(self, v, tag=None):\n"
          "        self.val, self.tag = v, tag\n\n"
          "    def ok(self):\n        return self.val % 2 == 0\n\n\n"
          "def nodes(n):\n    return [Node(i, 'x' if i % 3 == 0 else None) for i in range(n)]\n")
FILTERED_ANSWERS = (_NODES, _NODES.replace("i % 3 == 0", "i % 2 == 0"),
                    _NODES.replace("self.val % 2 == 0", "True"))


def test_a_comprehensions_ifs_over_the_answers_objects_run_in_the_child():
    """`[n.val for n in nodes(6) if n.val > 2]`, `if n.ok()`, `if n.tag == 'x' and not n.ok()`,
    `len([n for n in nodes(5) if n.val])`: the comprehension (its `if`s too) is made in the child,
    where the objects are; pytest's verdict in both modes."""
    judged_as_pytest_says(FILTERED, FILTERED_ANSWERS, "filters")
