"""The option machinery: each Config field's own range or choices (its spec) refuses a value just
outside it in one line naming the flag, from the command line, from a preset and from a resumed
run's settings alike, before torch loads."""
import os
import subprocess
import sys
from dataclasses import fields

import pytest

from gmts.run.config import Config, parse_config, resolve
from gmts.run.validate import SEED_RANGE, range_problem

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPECS = {f.name: (f.metadata["valid"], f.type) for f in fields(Config) if f.metadata["valid"]}


def outside(spec, kind):
    """Values just outside a range spec ('>= 1', '> 0', '[0, 1)', '(0, 1]')."""
    bound = spec.split(" (")[0]
    if bound[0] in "[(":
        lo, hi = map(float, bound[1:-1].split(","))
        out = [lo - 1, hi + 1] + ([lo] if bound[0] == "(" else []) + ([hi] if bound[-1] == ")"
                                                                         else [])
    else:
        op, n = bound.split()
        out = [float(n) - 1] + ([float(n)] if op == ">" else [])
    return [int(v) if kind is int else v for v in out] + ([] if kind is int else [float("nan")])


def one_line(capsys, argv):
    with pytest.raises(SystemExit) as err:
        parse_config(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    assert err.value.code == 2 and len(lines) == 1, lines
    return lines[0]


def test_every_ranged_flag_refuses_a_value_just_outside_its_range(capsys):
    ranged = {name: spec for name, (spec, _) in SPECS.items() if isinstance(spec, str)}
    assert len(ranged) >= 30 and ranged["seed"] == SEED_RANGE
    for name, spec in ranged.items():
        flag = "--" + name.replace("_", "-")
        # a negative --eps-high means "by --algo" (resolve fills it in)
        for value in [float("nan")] if name == "eps_high" else outside(spec, SPECS[name][1]):
            line = one_line(capsys, [flag, str(value)])
            assert line.startswith(f"train.py: error: {flag} must be "), (flag, value, line)
            assert f"got {value}" in line, line
        bound = spec.split(" (")[0]                 # a closed lower end passes
        if bound[0] == "[" or bound.startswith(">="):
            assert getattr(parse_config([flag, bound.strip("[>=").split(",")[0].strip()]),
                           name) == SPECS[name][1](bound.strip("[>=").split(",")[0].strip())


def test_every_choice_flag_is_refused_from_the_command_line_and_from_a_preset_or_resume(capsys):
    chosen = {name: spec for name, (spec, _) in SPECS.items() if isinstance(spec, tuple)}
    assert {"selector", "loss_norm", "adv_std", "algo", "dtype", "report_to"} <= set(chosen)
    for name, choices in chosen.items():
        flag = "--" + name.replace("_", "-")
        line = one_line(capsys, [flag, "no-such-choice"])
        assert f"{flag}: invalid choice: 'no-such-choice'" in line, line
        # a value that did not come through argparse (a preset, a resumed run's settings)
        with pytest.raises(ValueError) as err:
            resolve(Config(**{name: "no-such-choice"}))
        assert str(err.value) == (f"{flag} must be one of {', '.join(choices)}, got "
                                  "'no-such-choice'")


@pytest.mark.parametrize("name, value", [("steps", 2.0), ("steps", True), ("group_size", "8"),
                                         ("lr", float("inf")), ("ratio", None)])
def test_a_resumed_setting_of_the_wrong_type_is_refused(name, value):
    """config.json read back may hold 2.0 where the field is an int: refused, not run."""
    with pytest.raises(ValueError, match=f"^--{name.replace('_', '-')} must be "):
        resolve(Config(**{name: value}))


def test_range_problem_reads_open_and_closed_ends():
    assert range_problem("--x", 0.0, "[0, 1)") is None
    assert range_problem("--x", 1.0, "[0, 1)") == "--x must be in [0, 1), got 1.0"
    assert range_problem("--x", 0.0, "(0, 1]") == "--x must be in (0, 1], got 0.0"
    assert range_problem("--x", 1, "(0, 1]") is None
    assert range_problem("--x", 3, ">= 4 (a note)") == ("--x must be an integer >= 4 (a note), got "
                                                        "3")
    assert range_problem("--x", 0.5, "> 0") is None
    assert range_problem("--x", 0.5, "> 0", integer=True) == "--x must be an integer > 0, got 0.5"
    assert range_problem("--x", "b", ("a", "c")) == "--x must be one of a, c, got 'b'"


def test_a_bad_device_name_is_one_line_without_importing_torch():
    child = ("import sys; from gmts.run.config import parse_config\n"
             "try:\n    parse_config(['--device', 'tpu'])\n"
             "except SystemExit as err:\n    print(err.code, 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, check=False)
    assert proc.stdout.split() == ["2", "False"], proc.stdout + proc.stderr
    assert proc.stderr.strip() == ("train.py: error: --device 'tpu': not a device name (auto | cpu "
                                   "| cuda | cuda:N | mps) (see --help)")
