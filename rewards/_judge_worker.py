"""Long-lived helper process for rewards/code.py: judges one sandbox run's report against its tests.

Protocol: one JSON line in ({"tests", "entry_point", "setup", "nonce", "report": the report file's
text}), one line "1" / "0" out. A separate process because everything here works on what the
solution chose (its values, and the test's own expression over them: `math.gcd` of two
multi-million-bit ints, `sum(lists, [])`, a hash-colliding set): the parent waits for each verdict
with a wall clock and kills this process past it, and its address space is capped here, so no
returned value can make the trainer's own evaluation long or large.
"""
import json
import os
import resource
import sys

LIMIT = int(sys.argv[1]) << 20 if len(sys.argv) > 1 else 4 << 30
resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))
sys.setrecursionlimit(10_000)
# the project's root: `rewards` is found
sys.path[:0] = json.loads(os.environ.get("GMTS_JUDGE_PATH", "[]"))
from rewards.testplan import verdict

print("ready", flush=True)
for line in sys.stdin:
    try:
        passed = verdict(json.loads(line))
    except BaseException:  # noqa: BLE001 - MemoryError, RecursionError, anything: not a pass
        passed = False
    print("1" if passed is True else "0", flush=True)
