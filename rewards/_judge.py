"""The code reward's verdicts, made in helper processes under a deadline and a memory limit.

Judging evaluates the test's own expression over values the solution chose, so its cost is the
solution's to set (`math.gcd` of two huge ints, `pow(a, b, m)` on them, `sum(lists, [])`). Rather
than guard each operation, every verdict is made in a helper (rewards/_judge_worker.py, RLIMIT_AS
JUDGE_MEMORY_MB) that has JUDGE_TIMEOUT_S of wall clock; past it the helper is killed (verdict:
fail) and restarted on its next use. Helpers form a pool, one per concurrent caller up to 8
(rewards/_helpers.py, which rewards/math.py's math-verify helpers use too).
"""
import atexit
import json
import os
import sys

from ._helpers import Helper, Pool

JUDGE_TIMEOUT_S = 5.0  # wall clock per verdict, on top of the run's own limit
JUDGE_MEMORY_MB = 4096
_HERE = os.path.dirname(os.path.abspath(__file__))


def _judge_helper() -> Helper:
    env = dict(os.environ, GMTS_JUDGE_PATH=json.dumps([os.path.dirname(_HERE)]),
               OMP_NUM_THREADS="1")
    argv = [sys.executable, "-I", os.path.join(_HERE, "_judge_worker.py"), str(JUDGE_MEMORY_MB)]
    return Helper(argv, env, "the code reward's judge process", answers=("0", "1", "d"))


_pool = Pool(_judge_helper)
atexit.register(lambda: _pool.stop())  # no orphaned helper when the trainer exits


def verdict(message: dict, timeout: float = JUDGE_TIMEOUT_S) -> bool | str:
    """Does this run's report pass its tests? message: {"tests", "entry_point", "setup", "token",
    "report", "pytest"} (see _judge_worker.verdict). Made in a helper process; False past `timeout`
    seconds or the memory limit; "draws" (testplan.DRAWS): the tests' draws need pytest."""
    answer = _pool.ask(json.dumps(message) + "\n", timeout)
    return True if answer == "1" else "draws" if answer == "d" else False
