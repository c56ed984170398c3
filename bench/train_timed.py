"""train.py as bench/bench_step.py runs it: the same main(), with the time spent scoring and
selecting (stages 4-5: token_omega, token_scores, batch_select) added to each metrics line as
`time_score_select_s`, and with `--no-skip` the zero-advantage skip switched off
(train.update_policy drops the rows with A = 0 when β = 0 before accumulate_gradients; here they get
their passes back). The trainer has no timing lines inside its stages; these wrappers add them from
outside, for the benchmark only.

    python bench/train_timed.py [--no-skip] TRAIN_FLAGS...
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import train

spent = [0.0]          # seconds in the timed functions since the current update began


def timed(fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start
    return wrapper


for name in ("token_omega", "token_scores", "batch_select"):  # the names train.update_policy calls
    setattr(train, name, timed(getattr(train, name)))
train_step, step_figures, accumulate_gradients = (train.train_step, train.step_figures,
                                                  train.accumulate_gradients)


def train_step_timed(run, step_number):
    spent[0] = 0.0
    return train_step(run, step_number)


def step_figures_timed(run, step_number, done):
    # ω, the scores and the top-k (not the diagnostics)
    return dict(step_figures(run, step_number, done), time_score_select_s=spent[0])


def accumulate_gradients_no_skip(model, batch, mb, rows, weights, cfg, *, kl_weights=None,
                                 **loss):
    """accumulate_gradients with the rows of A = 0 kept: every row with a selected token gets its
    pass."""
    has_weight = weights.sum(1) > 0
    if kl_weights is not None:
        has_weight |= kl_weights.sum(1) > 0
    return accumulate_gradients(model, batch, mb, mb.rows[has_weight], weights, cfg,
                                kl_weights=kl_weights, **loss)


# main() and train_step look these names up in train at each call
train.train_step, train.step_figures = train_step_timed, step_figures_timed

if __name__ == "__main__":
    argv = sys.argv[1:]
    if "-h" in argv or "--help" in argv:
        print(__doc__.strip() + "\n")        # then train.py's own --help
    if "--no-skip" in argv:
        argv.remove("--no-skip")
        train.accumulate_gradients = accumulate_gradients_no_skip
    train.main(argv)
