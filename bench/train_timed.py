"""train.py as bench/bench_step.py runs it: the same main(), with the time spent scoring and
selecting (stages 4-5: token_omega, token_scores, select) added to each metrics line as
`time_score_select_s`, and with `--no-skip` the zero-advantage skip switched off
(gmts/trainer/step.py, SKIP_ZERO_ADVANTAGE_ROWS). The trainer has no timing lines inside its stages;
these wrappers add them from outside, for the benchmark only.

    python bench/train_timed.py [--no-skip] TRAIN_FLAGS...
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import train
from gmts.trainer import step

spent = [0.0]          # seconds in the timed functions since the current update began


def timed(fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start
    return wrapper


for name in ("token_omega", "token_scores", "select"):      # the names train.policy_steps calls
    setattr(train, name, timed(getattr(train, name)))
train_step = train.train_step


def train_step_timed(run, step_number):
    spent[0] = 0.0
    metrics, log = train_step(run, step_number)
    # ω, the scores and the top-k (not the diagnostics)
    metrics["time_score_select_s"] = spent[0]
    return metrics, log


# main() looks train_step up at each call
train.train_step = train_step_timed

if __name__ == "__main__":
    argv = sys.argv[1:]
    if "--no-skip" in argv:
        argv.remove("--no-skip")
        step.SKIP_ZERO_ADVANTAGE_ROWS = False
    train.main(argv)
