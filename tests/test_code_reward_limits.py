"""Issue 53's kinds 6 and 7 for the limits: a public suite's own time and memory limits read at
loading in the suite's units (or the row refused with one line naming file, row and field), a
machine factor for every time limit, and evalplus' raw rows judged as evalplus judges them.
"""
import json
from pathlib import Path

import pytest

from gmts import data
from gmts.rewards import get_reward

code = get_reward("code")
trusted = get_reward("code", trusted_only=True)
ROWS = Path(__file__).parent / "code_rows"


def block(src: str) -> str:
    return f"Here it is:\n```python\n{src.strip(chr(10))}\n```\n"


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
