"""Refusals of the GPU path (issue 29): what gmts cannot train correctly is one line, exit 2, before
anything loads."""

import pytest

from gmts.run.config import parse_config


def test_float16_training_is_refused_in_one_line(capsys):
    """float16 without loss scaling: gradients below 2^-24 underflow to 0 (bfloat16 has float32's
    range)."""
    with pytest.raises(SystemExit) as exit_:
        parse_config(["--dtype", "float16"])
    err = capsys.readouterr().err.strip()
    assert (
        exit_.value.code == 2
        and "--dtype float16" in err
        and "loss scaling" in err
        and "\n" not in err
    )
    assert parse_config(["--dtype", "bfloat16"]).dtype == "bfloat16"
