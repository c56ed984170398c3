"""Long-lived helper process for rewards/code.py: judges one sandbox run's report against its tests.

Protocol: one JSON line in ({"tests", "entry_point", "setup", "nonce", "report": the report file's
text}), one line "1" / "0" out ("d": testplan.DRAWS, the tests' draws need pytest). A separate
process because everything here works on what the solution chose (its values, and the test's own
expression over them: `math.gcd` of two multi-million-bit ints, `sum(lists, [])`, a hash-colliding
set): the parent waits for each verdict with a wall clock and kills this process past it, and its
address space is capped here, so no returned value can make the trainer's own evaluation long or
large.
"""
import json
import os
import resource
import sys


def verdict(message: dict) -> bool | str:
    """The whole verdict on one run, from the child's report as text: every unit passed (the
    run's requests to the tests' mocks replayed on mocks of this process's first: the record the
    asserts read is the trainer's), and where the plan has a harness, pytest's result passes
    (testplan.pytest_verdict). testplan.DRAWS: a unit drew after the answer moved the state the
    tests seeded, and no harness ran. message["every"]: the plan with every test in the harness."""
    from rewards import mocks
    from rewards.testplan import EVERY_TEST, build_plan, judge, pytest_verdict
    try:
        report = [json.loads(line) for line in message["report"].split("\n") if line]
    except (ValueError, RecursionError):
        return False
    line = next((r for r in reversed(report) if isinstance(r, dict) and "units" in r), None)
    if line is None:
        return False
    # the child ran the plan where the tests' capitalised names are the solution's functions
    functions = frozenset(message.get("functions") or ()) if line.get("functions") is True else (
        frozenset())
    plan = build_plan(message["tests"], message.get("entry_point"), message.get("setup") or "",
                      functions, EVERY_TEST if message.get("every") else frozenset())
    session = None
    if plan.mocks:
        # the same unit boundaries as the run's: a request on an earlier unit's mock is malformed;
        # replayed unit by unit, each unit judged on the record as it was when the unit ended
        session = mocks.Session(plan.mocks, mocks.unit_handles([u.steps for u in plan.units]))
        session.replay_units(message.get("mocks"))
    outcome = judge(plan, line["units"], session)
    if outcome is False or plan.harness is None:
        return outcome
    # pytest ran every test of the module, those judged here among them: its verdict covers a
    # unit whose draws were not pytest's (testplan.DRAWS)
    return pytest_verdict(plan, message.get("pytest") or "", message["token"])


def main():
    limit = int(sys.argv[1]) << 20 if len(sys.argv) > 1 else 4 << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.setrecursionlimit(10_000)
    import rewards.mocks  # noqa: F401 - loaded (with testplan) before "ready"
    from rewards.testplan import DRAWS
    print("ready", flush=True)
    for line in sys.stdin:
        try:
            passed = verdict(json.loads(line))
        except BaseException:  # noqa: BLE001 - MemoryError, RecursionError, anything: not a pass
            passed = False
        print("1" if passed is True else "d" if passed == DRAWS else "0", flush=True)


if __name__ == "__main__":
    # the project's root: `rewards` is found
    sys.path[:0] = json.loads(os.environ.get("GMTS_JUDGE_PATH", "[]"))
    main()
