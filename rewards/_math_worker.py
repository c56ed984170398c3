"""Long-lived helper process for rewards/math.py: judges LaTeX answers with math-verify.

Protocol: one JSON line [gold, predicted] in, one line "1" / "0" out. A separate process because
sympy can hang or eat memory on a pathological expression, and neither can be stopped from inside a
thread (math-verify's own timeout uses signal.alarm, which works only in a main thread, and cannot
interrupt C code). The parent kills this process when an answer takes too long and starts a new one
on the next call.
"""
import json
import resource
import sys

# a runaway sympy expansion fails here, not the machine
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

import os

sys.path.extend(p for p in json.loads(os.environ.get("GMTS_PARENT_SYS_PATH", "[]"))
                if p not in sys.path)
from math_verify import LatexExtractionConfig, parse, verify

# LaTeX extraction only: the plain-expression extractor can hand strings to sympy's parse_expr,
# which evaluates Python. Both sides are wrapped in \boxed{} by the parent, so the LaTeX extractor
# finds them.
CONFIG = [LatexExtractionConfig(boxed_match_priority=0)]
TIMEOUT = int(sys.argv[1]) if len(sys.argv) > 1 else 3

print("ready", flush=True)
for line in sys.stdin:
    try:
        gold, predicted = json.loads(line)
        gold_parsed = parse(gold, extraction_config=CONFIG, parsing_timeout=TIMEOUT)
        predicted_parsed = parse(predicted, extraction_config=CONFIG, parsing_timeout=TIMEOUT)
        same = bool(gold_parsed) and bool(predicted_parsed) and verify(gold_parsed,
                                                                       predicted_parsed,
                                                                       timeout_seconds=TIMEOUT)
    except Exception:  # noqa: BLE001 - any failure to parse or compare is "not equal"
        same = False
    print("1" if same else "0", flush=True)
