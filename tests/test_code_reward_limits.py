"""Issue 53's kinds 6 and 7 for the limits: a public suite's own time and memory limits read at
loading in the suite's units (or the row refused with one line naming file, row and field), a
machine factor for every time limit, and evalplus' raw rows judged as evalplus judges them.
"""
import base64
import json
import os
import pickle
import zlib
from pathlib import Path
from typing import ClassVar

import pytest

from gmts import data
from gmts.rewards import get_reward

code = get_reward("code")
trusted = get_reward("code", trusted_only=True)
ROWS = Path(__file__).parent / "code_rows"


def block(src: str) -> str:
    return f"Here it is:\n```python\n{src.strip(chr(10))}\n```\n"


def pack_pickle(pickled: bytes) -> str:
    return base64.b64encode(zlib.compress(pickled)).decode()


def pack(text: str) -> str:
    """`text` packed as LiveCodeBench packs its private_test_cases."""
    return pack_pickle(pickle.dumps(text))


class Runs:
    """Pickled, it says: run `touch marker` when loaded."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def scores(answer: str, reference) -> tuple[float, float]:
    return code(answer, reference), trusted(answer, reference)


def load(tmp_path, row, **options):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"question": "Add two numbers.", **row}) + "\n")
    return data.load_problems(str(path), **options)


def refused(tmp_path, row, said, **options):
    with pytest.raises(ValueError, match=said) as info:
        load(tmp_path, row, **options)
    assert str(info.value).startswith(str(tmp_path / "rows.jsonl") + ":1: ")
    assert "\n" not in str(info.value)


CASES = [{"input": "2 3\n", "output": "5\n"}, {"input": "-1 1\n", "output": "0\n"}]
ADD_STDIN = "a, b = map(int, input().split())\nprint(a + b)\n"
# sleeps 1 s per case: no CPU, so the wall clock it needs does not move with the machine's load
SLOW_STDIN = "import time\ntime.sleep(1.0)\n" + ADD_STDIN
# holds 300 MiB at once: within the default 2048 MB, past a 256 MB suite limit (the address space
# limit holds a plain Python run's ~24 MB plus this; 230 MiB fit in 256 here)
BIG_STDIN = "block = bytearray(300 << 20)\n" + ADD_STDIN


class TestPublicSuitesOwnLimits:
    """Codeforces (open-r1/codeforces: time_limit in seconds, memory_limit in MB), TACO's strings
    ("2 seconds", "256 megabytes", "None") and CodeContests (time_limit {seconds, nanos},
    memory_limit_bytes, public_tests as {"input": [...], "output": [...]}): read as the row's
    per-case timeout and memory_mb. A suite's time limit is per test, one run of the program on one
    input, which is what a stdin/stdout case is here."""

    @pytest.mark.parametrize("row,timeout,memory_mb", [
        ({"cases": CASES, "time_limit": 2.0, "memory_limit": 256.0}, 2.0, 256),   # Codeforces
        ({"cases": CASES, "time_limit": "2 seconds", "memory_limit": "256 megabytes"}, 2.0, 256),
        ({"cases": CASES, "time_limit": "1 second", "memory_limit": "64 MB"}, 1.0, 64),
        ({"cases": CASES, "time_limit": "1500 ms"}, 1.5, None),
        ({"cases": CASES, "time_limit": "None", "memory_limit": "None"}, None, None),  # TACO
        ({"cases": CASES, "time_limit": {"seconds": 2, "nanos": 500000000},
          "memory_limit_bytes": 256 << 20}, 2.5, 256),                                # CodeContests
        # 256,000,000 bytes are 244.14 MiB: rounded up, never below the suite's limit
        ({"cases": CASES, "time_limit": {"seconds": 1}, "memory_limit_bytes": 256000000}, 1.0, 245),
        # MatrixStudio/Codeforces-Python-Submissions spells them with a hyphen
        ({"cases": CASES, "time-limit": "2 seconds", "memory-limit": "256 megabytes"}, 2.0, 256),
        # protobuf's unset: CodeContests' rows without a limit
        ({"cases": CASES, "time_limit": None, "memory_limit_bytes": 0}, None, None),
        ({"tests": "assert add(2, 3) == 5\n", "memory_limit": 512}, None, 512),
    ])
    def test_read_in_the_suites_units(self, tmp_path, row, timeout, memory_mb):
        (problem,) = load(tmp_path, row)
        assert problem.answer.get("timeout") == timeout
        assert problem.answer.get("memory_mb") == memory_mb

    def test_codecontests_row_as_datasets_gives_it(self, tmp_path):
        row = {"name": "1_A. Add", "description": "Add two numbers.",
               "public_tests": {"input": ["2 3\n", "-1 1\n"], "output": ["5\n", "0\n"]},
               "time_limit": {"seconds": 2, "nanos": 0}, "memory_limit_bytes": 256000000}
        (problem,) = load(tmp_path, row, question_field="description",
                          answer_field="public_tests", domain="code")
        assert problem.answer == {"cases": CASES, "timeout": 2.0, "memory_mb": 245}
        assert scores(block(ADD_STDIN), problem.answer) == (1.0, 1.0)
        assert scores(block("print(5)"), problem.answer) == (0.0, 0.0)
        refused(tmp_path, dict(row, public_tests={"input": ["1 2\n"], "output": []}),
                "1 inputs and 0 outputs", question_field="description",
                answer_field="public_tests", domain="code")

    def test_an_open_r1_codeforces_row(self, tmp_path):
        row = {"id": "4/A", "title": "Add", "description": "Add two numbers.", "time_limit": 1.0,
               "memory_limit": 64.0, "official_tests": CASES, "input_mode": "stdio",
               "interaction_format": None, "generated_checker": None, "rating": 800}
        (problem,) = load(tmp_path, row, question_field="description",
                          answer_field="official_tests", domain="code")
        assert problem.answer == {"cases": CASES, "timeout": 1.0, "memory_mb": 64}
        assert scores(block(ADD_STDIN), problem.answer) == (1.0, 1.0)
        # what a comparison of stdout with the expected text cannot judge: refused, naming why
        for change, said in (({"input_mode": "file"}, "reads and writes files"),
                             ({"interaction_format": "Interact."}, "is interactive"),
                             ({"generated_checker": "def check(): ..."}, "has a checker")):
            refused(tmp_path, {**row, **change}, said, question_field="description",
                    answer_field="official_tests", domain="code")

    def test_taco_and_apps_rows_with_their_limits(self, tmp_path):
        # TACO: input_output a JSON string {"inputs", "outputs"} (an output may be its lines),
        # time_limit / memory_limit as strings; read only when answer_field names it
        io = {"inputs": ["2 3\n", "-1 1\n"], "outputs": ["5\n", ["0"]]}
        row = {"question": "Add.", "input_output": json.dumps(io), "time_limit": "1 second",
               "memory_limit": "256 megabytes", "difficulty": "EASY"}
        (problem,) = load(tmp_path, row, answer_field="input_output", domain="code")
        assert problem.answer == {"cases": [CASES[0], {"input": "-1 1\n", "output": "0"}],
                                  "timeout": 1.0, "memory_mb": 256}
        assert scores(block(ADD_STDIN), problem.answer) == (1.0, 1.0)
        assert scores(block("print(5)"), problem.answer) == (0.0, 0.0)
        refused(tmp_path, dict(row, input_output=json.dumps(dict(io, fn_name="add"))),
                "fn_name 'add' call a function", answer_field="input_output", domain="code")

    def test_livecodebench_public_test_cases_named_by_answer_field(self, tmp_path):
        # LiveCodeBench's public_test_cases: a JSON string of [{input, output, testtype}]
        tests = json.dumps([dict(c, testtype="stdin") for c in CASES])
        row = {"question_content": "Add.", "public_test_cases": tests, "metadata": "{}"}
        (problem,) = load(tmp_path, row, question_field="question_content",
                          answer_field="public_test_cases", domain="code")
        assert "cases" in problem.answer and "timeout" not in problem.answer
        assert scores(block(ADD_STDIN), problem.answer) == (1.0, 1.0)
        assert scores(block("print(5)"), problem.answer) == (0.0, 0.0)

    def test_livecodebench_private_test_cases_unpacked_as_its_loader_does(self, tmp_path):
        # LiveCodeBench packs private_test_cases as base64 of zlib of a pickled JSON string (its
        # loader: json.loads(pickle.loads(zlib.decompress(base64.b64decode(...)))))
        cases = [dict(c, testtype="stdin") for c in CASES]
        row = {"question_content": "Add.", "public_test_cases": json.dumps(cases[:1]),
               "private_test_cases": pack(json.dumps(cases)), "metadata": "{}"}
        (problem,) = load(tmp_path, row, question_field="question_content",
                          answer_field="private_test_cases", domain="code")
        assert [{k: c[k] for k in ("input", "output")} for c in problem.answer["cases"]] == CASES
        assert scores(block(ADD_STDIN), problem.answer) == (1.0, 1.0)
        # right on the public case, wrong on the private one
        assert scores(block("print(5)"), problem.answer) == (0.0, 0.0)

    @pytest.mark.parametrize("packed, said", [
        # a pickle that would run a command when loaded: nothing of it runs
        (lambda marker: pack_pickle(pickle.dumps(Runs(marker))),
         "names posix.system, which is not a plain value"),
        (lambda marker: pack(json.dumps({"a": 1})), "unpack to {'a': 1}, not a list of"),
        (lambda marker: base64.b64encode(b"not zlib at all, sixteen+").decode(),
         "do not unpack to cases: Error -3"),
        (lambda marker: pack("[" * 4 + "]" * 4), "unpack to .*, not a list of"),
        (lambda marker: pack("x" * 5000), "inflates past 4,096 bytes"),
    ], ids=["runs_a_command", "a_dict", "not_zlib", "nested_lists", "inflates_past_the_bound"])
    def test_a_packed_field_that_is_not_cases_is_refused(self, tmp_path, monkeypatch, packed,
                                                        said):
        monkeypatch.setattr(data, "PACKED_MAX_BYTES", 4096)
        marker = tmp_path / "ran"
        row = {"question_content": "Add.", "private_test_cases": packed(marker)}
        refused(tmp_path, row, said, question_field="question_content",
                answer_field="private_test_cases", domain="code")
        assert not marker.exists()

    def test_the_time_limit_is_the_suites(self, tmp_path):
        # 1 s per case passes under the default 10 s; Codeforces' 0.5 s fails it, 4 s passes it
        assert scores(block(SLOW_STDIN), {"cases": CASES[:1]}) == (1.0, 1.0)
        for limit, want in ((0.5, 0.0), ("500 ms", 0.0), ({"seconds": 0, "nanos": 5 * 10 ** 8},
                                                          0.0), ("4 seconds", 1.0)):
            (problem,) = load(tmp_path, {"cases": CASES[:1], "time_limit": limit})
            assert scores(block(SLOW_STDIN), problem.answer) == (want, want), limit

    def test_the_memory_limit_is_the_suites(self, tmp_path):
        assert scores(block(BIG_STDIN), {"cases": CASES[:1]}) == (1.0, 1.0)
        for field, limit, want in (("memory_limit", 256, 0.0), ("memory_limit", "256 megabytes",
                                                                0.0),
                                   ("memory_limit_bytes", 256 << 20, 0.0),
                                   ("memory_limit", "1 gigabyte", 1.0)):
            (problem,) = load(tmp_path, {"cases": CASES[:1], field: limit})
            assert scores(block(BIG_STDIN), problem.answer) == (want, want), limit

    @pytest.mark.parametrize("row,said", [
        ({"cases": CASES, "time_limit": -1}, "time_limit must be a positive amount of seconds"),
        ({"cases": CASES, "time_limit": 0}, "time_limit must be a positive amount"),
        ({"cases": CASES, "time_limit": "two seconds"}, "time_limit must be a positive amount"),
        ({"cases": CASES, "time_limit": "2 fortnights"}, "time_limit must be a positive amount"),
        ({"cases": CASES, "time_limit": True}, "time_limit must be a positive amount"),
        ({"cases": CASES, "time_limit": [2]}, "time_limit must be a positive amount"),
        ({"cases": CASES, "time_limit": float("nan")}, "time_limit must be a positive amount"),
        ({"cases": CASES, "time_limit": 2000}, "time_limit .* past the bound"),  # milliseconds
        ({"cases": CASES, "time_limit": {"seconds": -1, "nanos": 0}}, "time_limit must be"),
        ({"cases": CASES, "time_limit": {"seconds": 0, "nanos": 0}}, "time_limit must be"),
        ({"cases": CASES, "time_limit": {"secs": 2}}, "time_limit must be"),
        ({"cases": CASES, "memory_limit": 0}, "memory_limit must be a positive amount of MB"),
        ({"cases": CASES, "memory_limit": "-256 megabytes"}, "memory_limit must be"),
        ({"cases": CASES, "memory_limit": "256 furlongs"}, "memory_limit must be"),
        ({"cases": CASES, "memory_limit": 268435456}, "memory_limit .* past the bound"),  # bytes
        ({"cases": CASES, "memory_limit_bytes": -1}, "memory_limit_bytes must be a positive"),
        ({"cases": CASES, "memory_limit_bytes": "256MB"}, "memory_limit_bytes must be"),
        ({"cases": CASES, "memory_limit_bytes": 2.5}, "memory_limit_bytes must be"),
        ({"cases": CASES, "time_limit": 2, "timeout": 3}, "both 'timeout' and 'time_limit'"),
        ({"cases": CASES, "memory_limit": 256, "memory_mb": 512},
         "both 'memory_mb' and 'memory_limit'"),
        ({"cases": CASES, "memory_limit": 256, "memory_limit_bytes": 256 << 20},
         "both 'memory_limit' and 'memory_limit_bytes'"),
        # a per-test limit has no place on a test module run as one process
        ({"tests": "assert add(2, 3) == 5\n", "time_limit": 2}, "time_limit is a suite's limit"),
        ({"cases": CASES, "timeout": 5000}, "timeout 5000 is past 3600"),
        ({"cases": CASES, "memory_mb": 1 << 30}, "memory_mb .* is past"),
        ({"cases": CASES, "time_limt": 2}, "did you mean 'time_limit'"),
        ({"cases": CASES, "time-limit": "2000"}, "time-limit .* past the bound"),
        ({"cases": CASES, "time_limit": 1, "time-limit": "1 second"},
         "both 'time_limit' and 'time-limit'"),
    ])
    def test_malformed_refused_at_loading(self, tmp_path, row, said):
        refused(tmp_path, row, said)


class TestTheMachineFactor:
    """GMTS_CODE_TIME_SCALE multiplies every time limit of the code reward (the default and each
    row's): a suite's limits were set for its judge, a row's timeout on some machine; on a slower
    or busier one, a limit that held there fails honest answers here."""

    def test_a_slow_machine_scales_every_limit(self, tmp_path, monkeypatch):
        (problem,) = load(tmp_path, {"cases": CASES[:1], "time_limit": 0.5})
        assert scores(block(SLOW_STDIN), problem.answer) == (0.0, 0.0)
        monkeypatch.setenv("GMTS_CODE_TIME_SCALE", "8")           # 0.5 s becomes 4 s per case
        assert scores(block(SLOW_STDIN), problem.answer) == (1.0, 1.0)
        assert get_reward("code", timeout=0.5)(block(SLOW_STDIN), {"cases": CASES[:1]}) == 1.0
        monkeypatch.setenv("GMTS_CODE_TIME_SCALE", "0.1")         # the default 10 s becomes 1 s
        assert code(block(SLOW_STDIN), {"cases": CASES[:1]}) == 0.0

    @pytest.mark.parametrize("value", ["0", "-2", "fast", "nan", "inf"])
    def test_a_bad_factor_is_one_line_naming_it(self, monkeypatch, value):
        monkeypatch.setenv("GMTS_CODE_TIME_SCALE", value)
        with pytest.raises(ValueError, match=f"^GMTS_CODE_TIME_SCALE must be a positive number.*"
                                             f"got '{value}'$"):
            code(block(ADD_STDIN), {"cases": CASES})

    @pytest.mark.parametrize("env, said", [
        ({"GMTS_CODE_TIME_SCALE": "fast"}, "GMTS_CODE_TIME_SCALE must be a positive number"),
        ({"GMTS_SANDBOX_UIDS": "1-2"}, "GMTS_SANDBOX_UIDS must be FIRST-LAST"),   # the runs' uids
    ], ids=["time_scale", "uids"])
    def test_a_bad_factor_stops_both_entry_points_before_they_load(self, tmp_path, env, said):
        from conftest import run_python
        from test_bad_input import check_one_line
        for args in (["train.py", "--output-dir", tmp_path / "r", "--steps", "1"],
                     ["eval.py", "--model", "x/y", "--output", tmp_path / "e.json"]):
            proc = run_python(args, env=env, timeout=300)
            line = check_one_line(proc, said)
            assert proc.returncode == 2 and line.startswith(f"{args[0]}: error: ")
        assert not (tmp_path / "r").exists() and not list(tmp_path.iterdir())


# ------------------------------------------------ evalplus' raw rows

# Mbpp/787 in MBPP+'s raw format (written here, as tests/code_rows/README.md says of the others)
MBPP_787 = {
    "task_id": "Mbpp/787", "entry_point": "text_match_three", "atol": 0,
    "prompt": '"""\nWrite a function that matches a string that has an a followed by three \'b\'.\n'
              'assert not text_match_three("ac")\n"""\n',
    "canonical_solution": ("\nimport re\ndef text_match_three(text):\n        patterns = "
                           "'ab{3}?'\n        return re.search(patterns,  text)\n"),
    "base_input": [["ac"], ["dc"], ["abbbba"], ["caacabbbba"]],
    "plus_input": [[""], ["abbb"], ["xyz"]],
    "contract": '\n    assert isinstance(text, str), "invalid inputs" # $_CONTRACT_$\n',
    "assertion": '\nassert not text_match_three("ac")\nassert not text_match_three("dc")\n'
                 'assert text_match_three("abbbba")\nassert text_match_three("caacabbbba")\n'}

def plus_rows(name: str = "evalplus_humaneval.jsonl") -> list[dict]:
    return [json.loads(line) for line in (ROWS / name).read_text().splitlines()]


class TestEvalplusRawRows:
    """HumanEval+ rows as evalplus distributes them (base_input, plus_input, canonical_solution,
    atol; no test): the expected value of every input is the canonical solution's, compared as
    evalplus' untrusted_check compares (exact, else same type and length and np.allclose with the
    row's atol, 1e-6 for floats at atol 0; find_zero by |poly(xs, x)| <= atol)."""

    WRONG: ClassVar[dict] = {
        "HumanEval/0": "def has_close_elements(numbers, threshold):\n    return False\n",
        "HumanEval/2": "def truncate_number(number):\n    return number % 1.0 + 5e-6\n",
        "HumanEval/8": "def sum_product(numbers):\n    return (sum(numbers), 0)\n",
        "HumanEval/32": "def find_zero(xs):\n    return 0.0\n",
        "Mbpp/2": "def similar_elements(a, b):\n    return tuple(set(a) | set(b))\n",
        "Mbpp/17": "def square_perimeter(a):\n    return a * a\n",
        "Mbpp/581": "def surface_Area(b, s):\n    return b * b + 2 * b\n",
    }

    @pytest.fixture(scope="class")
    def problems(self):
        return data.load_problems(str(ROWS / "evalplus_humaneval.jsonl"))

    @pytest.mark.parametrize("i", range(4))
    def test_canonical_scores_1_and_a_wrong_answer_0(self, problems, i):
        row, problem = plus_rows()[i], problems[i]
        assert problem.domain == "code" and problem.question == row["prompt"]
        # the whole function, as a model writes it, and the body alone (HumanEval's completion)
        assert scores(block(row["prompt"] + row["canonical_solution"]), problem.answer) == (1, 1)
        assert scores(block(row["canonical_solution"]), problem.answer) == (1.0, 1.0)
        assert scores(block(self.WRONG[row["task_id"]]), problem.answer) == (0.0, 0.0)

    @pytest.fixture(scope="class")
    def mbpp(self):
        return data.load_problems(str(ROWS / "evalplus_mbpp.jsonl"))

    @pytest.mark.parametrize("i", range(3))
    def test_mbpp_plus_canonical_scores_1_and_a_wrong_answer_0(self, mbpp, i):
        row, problem = plus_rows("evalplus_mbpp.jsonl")[i], mbpp[i]
        assert problem.domain == "code" and "prompt" not in problem.answer
        assert scores(block(row["canonical_solution"]), problem.answer) == (1.0, 1.0)
        assert scores(block(self.WRONG[row["task_id"]]), problem.answer) == (0.0, 0.0)

    def test_mbpp_plus_as_evalplus_converts_and_judges(self, tmp_path, mbpp):
        # Mbpp/2's inputs are tuples (mbpp_deserialize_inputs), its outputs compared as sets
        typed = block("def similar_elements(a, b):\n    assert type(a) is tuple\n"
                      "    return [x for x in b if x in a]\n")
        assert scores(typed, mbpp[0].answer) == (1.0, 1.0)
        # Mbpp/581: the canonical's value or _special_oracle's slant-height formula
        slant = block("import math\n\ndef surface_Area(b, h):\n"
                      "    return round(b * b + 2 * b * math.sqrt((b / 2) ** 2 + h ** 2))\n")
        assert scores(slant, mbpp[2].answer) == (1.0, 1.0)
        # Mbpp/17: right on MBPP's three inputs, wrong on the plus input 3.5
        whole = block("def square_perimeter(a):\n    return 4 * int(a)\n")
        assert scores(whole, mbpp[1].answer) == (0.0, 0.0)
        (base_only,) = load(tmp_path, dict(plus_rows("evalplus_mbpp.jsonl")[1], plus_input=[]))
        assert scores(whole, base_only.answer) == (1.0, 1.0)

    def test_plus_inputs_are_judged(self, tmp_path, problems):
        # right on HumanEval's three inputs of truncate_number, 1e-5 off on 999.99999 (plus)
        answer = block("def truncate_number(number):\n    return round(number % 1.0, 3)\n")
        assert scores(answer, problems[1].answer) == (0.0, 0.0)
        (base_only,) = load(tmp_path, dict(plus_rows()[1], plus_input=[]))
        assert scores(answer, base_only.answer) == (1.0, 1.0)

    def test_compared_as_evalplus_compares(self, problems):
        # atol 1e-6 (+ rtol 1e-7 of the expected value): 5e-7 off passes, 5e-6 off fails
        near = block("def truncate_number(number):\n    return number % 1.0 + 5e-7\n")
        assert scores(near, problems[1].answer) == (1.0, 1.0)
        # atol 0 and ints: exact, and a list is not the expected tuple (out == exp is False)
        as_list = block("def sum_product(numbers):\n    p = 1\n    for n in numbers:\n"
                        "        p *= n\n    return [sum(numbers), p]\n")
        assert scores(as_list, problems[2].answer) == (0.0, 0.0)
        # find_zero: any zero within atol 1e-4 of the polynomial passes (evalplus' oracle), so
        # a Newton iteration that stops at another zero than the canonical bisection still does
        newton = block(
            "def find_zero(xs):\n    x = 0.5\n    for _ in range(200):\n"
            "        f = sum(c * x ** i for i, c in enumerate(xs))\n"
            "        d = sum(i * c * x ** (i - 1) for i, c in enumerate(xs) if i)\n"
            "        x = x - f / d if d else x + 1.0\n    return x\n")
        assert scores(newton, problems[3].answer) == (1.0, 1.0)

    def test_values_of_every_plain_kind_become_the_expected_ones(self, tmp_path):
        # tuples, sets, dicts, inf, None, bytes, complex: written back as the values they were;
        # the canonical's own print is not read as its values
        body = ("    return [x, (x,), {x}, {x: 1.5}, float('inf'), None, True, b'ab', "
                "complex(1, 2)]\n")
        row = {"task_id": "HumanEval/x", "prompt": 'def f(x):\n    """x."""\n',
               "entry_point": "f", "canonical_solution": "    print('hi')\n" + body,
               "base_input": [[1], [2]], "plus_input": [], "atol": 0}
        (problem,) = load(tmp_path, row)
        good = block("def f(x):\n" + body)
        assert scores(good, problem.answer) == (1.0, 1.0)
        assert scores(good.replace("True", "False"), problem.answer) == (0.0, 0.0)
        assert scores(good.replace("(x,)", "[x]"), problem.answer) == (0.0, 0.0)

    def test_the_time_limit_is_evalplus_rule(self, tmp_path):
        # evalplus: each input max(1 s, 4x the canonical's time); a run here holds every input:
        # 4 x (3 x 1 s of sleep) + 1 s to start = 13 s, past the default 10 s; sleep returns no
        # earlier than asked, and under load later (up to 0.1 s on the three calls, 13.4 s)
        row = {"task_id": "HumanEval/x", "prompt": 'def f(x):\n    """x, slowly."""\n',
               "entry_point": "f",
               "canonical_solution": "    import time\n    time.sleep(1.0)\n    return x\n",
               "base_input": [[1], [2], [3]], "plus_input": [], "atol": 0}
        (problem,) = load(tmp_path, row)
        assert 13.0 <= problem.answer["timeout"] <= 13.4
        (fast,) = load(tmp_path, dict(row, canonical_solution="    return x\n"))
        assert "timeout" not in fast.answer                      # the default 10 s holds
        (own,) = load(tmp_path, dict(row, timeout=20))
        assert own.answer["timeout"] == 20.0                     # the row's own wins

    def test_the_canonical_values_are_kept_and_read_back(self, tmp_path, monkeypatch):
        """A row's canonical values and time are computed once: a later load reads them from the
        data folder's evalplus-expected/ without running anything; another row, or a damaged
        file, is run again."""
        from gmts.rewards import sandbox
        monkeypatch.setenv("GMTS_DATA_DIR", str(tmp_path / "cache"))
        row = {"task_id": "HumanEval/x", "prompt": 'def f(x):\n    """x, twice."""\n',
               "entry_point": "f", "canonical_solution": "    return 2 * x\n",
               "base_input": [[1], [2.5], ["ab"]], "plus_input": [[[1, 2]]], "atol": 0}
        (first,) = load(tmp_path, row)
        (kept,) = (tmp_path / "cache" / "evalplus-expected").glob("*.json")
        run_child = sandbox.run_child

        def never(*args, **kwargs):
            raise AssertionError("the canonical solution ran again")
        monkeypatch.setattr(sandbox, "run_child", never)
        (again,) = load(tmp_path, row)
        assert again.answer == first.answer
        with pytest.raises(AssertionError, match="ran again"):  # another program: not kept
            load(tmp_path, dict(row, canonical_solution="    return 3 * x\n"))
        monkeypatch.setattr(sandbox, "run_child", run_child)
        assert scores(block("def f(x):\n    return x * 2\n"), again.answer) == (1.0, 1.0)
        assert scores(block("def f(x):\n    return x\n"), again.answer) == (0.0, 0.0)
        for damage in ("{", '{"inputs": [1], "values": [], "seconds": 0.1}',
                       '{"inputs": [], "values": [], "seconds": -1}'):
            kept.write_text(damage)
            (mended,) = load(tmp_path, row)
            assert mended.answer == first.answer
            assert json.loads(kept.read_text())["values"]  # written whole again

    def test_a_value_no_answer_can_return_is_refused(self, tmp_path):
        # Mbpp/787's canonical returns a re.Match (evalplus judges `is not None`): no answer's
        # value crosses the sandbox as one, so the canonical itself would score 0
        refused(tmp_path, MBPP_787, "returns a Match, which no answer's value can be")

    @pytest.mark.parametrize("change,said", [
        ({"canonical_solution": None}, "needs canonical_solution as a string"),
        ({"canonical_solution": "    return numbers[99]\n"}, "IndexError.*on input 0"),
        ({"canonical_solution": "    return object()\n"}, "returns a object, which no answer"),
        ({"canonical_solution": "    while True:\n        pass\n"}, "no expected values \\(timed"),
        ({"atol": -1}, "atol must be a non-negative number"),
        ({"base_input": "[[1.0], 0.5]"}, "base_input must be a list of argument lists"),
        ({"base_input": [], "plus_input": []}, "base_input and plus_input are empty"),
    ])
    def test_a_row_that_cannot_be_judged_is_refused(self, tmp_path, monkeypatch, change, said):
        from gmts.data import evalplus
        monkeypatch.setattr(evalplus, "CANONICAL_TIMEOUT_S", 2.0)
        refused(tmp_path, {**plus_rows()[0], **change}, said)
