"""train.py as bench/bench_step.py runs it: the same main(), with the time spent scoring and
selecting (stages 4-5: token_omega, token_scores, run_selection) added to each metrics line as
`time_score_select_s`, and with `--no-skip` the zero-advantage skip switched off
(gmts/trainer/step.py's masked_loss_inputs drops the rows with A = 0 when β = 0; here they get their
passes back). The trainer has no timing lines inside its stages; these wrappers add them from
outside, for the benchmark only.

    python bench/train_timed.py [--no-skip] TRAIN_FLAGS...
"""
import dataclasses
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


for name in ("token_omega", "token_scores", "run_selection"):  # the names train.update_policy calls
    setattr(train, name, timed(getattr(train, name)))
train_step, step_figures, masked_loss_inputs = (train.train_step, train.step_figures,
                                                train.masked_loss_inputs)


def train_step_timed(run, step_number):
    spent[0] = 0.0
    return train_step(run, step_number)


def step_figures_timed(run, step_number, done):
    # ω, the scores and the top-k (not the diagnostics)
    return dict(step_figures(run, step_number, done), time_score_select_s=spent[0])


def masked_loss_inputs_no_skip(cfg, mb, selected, on_policy):
    """masked_loss_inputs with the rows of A = 0 kept: every row with a selected token gets its
    pass."""
    inputs = masked_loss_inputs(cfg, mb, selected, on_policy)
    has_weight = inputs.weights.sum(1) > 0
    if inputs.kl_weights is not None:
        has_weight |= inputs.kl_weights.sum(1) > 0
    return dataclasses.replace(inputs, rows=mb.rows[has_weight])


# main() and train_step look these names up in train at each call
train.train_step, train.step_figures = train_step_timed, step_figures_timed

if __name__ == "__main__":
    argv = sys.argv[1:]
    if "-h" in argv or "--help" in argv:
        print(__doc__.strip() + "\n")        # then train.py's own --help
    if "--no-skip" in argv:
        argv.remove("--no-skip")
        train.masked_loss_inputs = masked_loss_inputs_no_skip
    train.main(argv)
