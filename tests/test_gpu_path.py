"""Refusals of the GPU path (issue 29): what gmts cannot train correctly is one line, exit 2, before
anything loads."""

import pytest
import torch

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


def test_auto_dtype_is_bf16_only_where_the_gpu_computes_in_bf16(monkeypatch):
    """--dtype auto: bf16 on a GPU with bf16 arithmetic, float32 on one without (V100, T4: bf16
    would be emulated) and on the CPU."""
    from gmts.trainer.models import resolve_dtype
    asked = []
    for supported in (True, False):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                            lambda including_emulation=True, s=supported: asked.append(
                                including_emulation) or s)
        want = torch.bfloat16 if supported else torch.float32
        assert resolve_dtype("auto", torch.device("cuda", 0)) == want
    assert asked == [False, False]
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("bfloat16", torch.device("cpu")) == torch.bfloat16
