"""bench/gpu_bench.py: the prepared GPU benchmark. `--dry-run` runs the whole script on the CPU at
tiny shapes (every part's code, the JSON, the verdict), so the GPU command cannot rot before a GPU
is lent; its figures are checked for what holds on any machine (equal token counts on every side,
ratios within their physical limits), never for speed."""
import importlib.util
import json
import os
import sys

import pytest

from conftest import run_python

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
HAVE_TRL = importlib.util.find_spec("trl") is not None


def test_gpu_bench_dry_run(tmp_path):
    out = tmp_path / "bench.json"
    done = run_python(["bench/gpu_bench.py", "--dry-run", "--out", out, "--work-dir",
                       tmp_path / "work"], timeout=600)
    result = json.loads(out.read_text())
    parts = result["checks"]
    assert list(parts) == ["device", "rollout", "step", "train_pass"], done.stderr[-3000:]
    for name in ("device", "rollout", "train_pass"):
        assert parts[name]["status"] == "pass", json.dumps(parts[name])[:3000]
    step = parts["step"]
    if HAVE_TRL:
        assert step["status"] == "pass" and step["same_tokens"], json.dumps(step)[:3000]
    else:        # TRL is not installed here: the part is not run, so the run is not a pass
        assert step["status"] == "not run" and "trl is not installed" in step["why"]
        assert result["verdict"] == "incomplete" and done.returncode == 1
    sizes = result["sizes"]
    rows = sizes["step_prompts"] * sizes["step_group"]
    # our side ran: every answer forced to the limit (the random model cannot end one)
    assert step["ours"]["tokens"] == [rows * sizes["step_new_tokens"]] * sizes["steps"]
    assert step["ours"]["peak_gb"] > 0
    for shape in sizes["rollout_shapes"]:
        rollout = parts["rollout"][shape]
        expected = sizes["prompts"] * sizes["group"] * sizes["new_tokens"]
        for side in ("generate", "eager", "compiled"):
            assert rollout[side]["tokens"] == expected, side
            assert 0 < rollout[side]["bandwidth_fraction"] <= 1
        assert rollout["compiled"]["compile_s"] > 0 and set(rollout["goals"]) == {
            "compiled_60pct_bandwidth", "compiled_3x_generate", "eager_at_least_generate"}
    train_pass = parts["train_pass"]
    for mode in ("no_checkpointing", "checkpointing"):
        assert 0 < train_pass[mode]["mfu"] <= 1 and train_pass[mode]["finite"]
    assert result["dry_run"] and result["command"].startswith("python bench/gpu_bench.py")


def test_a_part_not_run_or_over_its_limit_is_not_passed(tmp_path):
    import gpu_bench
    import gpu_check
    every = {name: {"status": "pass"} for name in gpu_bench.PARTS}
    assert gpu_check.verdict(every, gpu_bench.PARTS) == "pass"
    for name in gpu_bench.PARTS:
        assert gpu_check.verdict({**every, name: {"status": "not run"}},
                                 gpu_bench.PARTS) == "incomplete"
        assert gpu_check.verdict({**every, name: {"status": "fail"}}, gpu_bench.PARTS) == "fail"
    # a part returning figures with pass False (a ratio above 1, unequal tokens) is a failure,
    # written at once
    out = str(tmp_path / "b.json")
    results = {"checks": {}}
    gpu_check.run_check("rollout", lambda: {"bandwidth_fraction": 1.3, "pass": False}, results,
                        out, float("inf"), gpu_bench.PARTS, gpu_bench.TAG)
    with open(out) as fh:
        assert json.load(fh)["checks"]["rollout"]["status"] == "fail"


def test_the_shapes_are_qwen25s_configurations():
    import gpu_bench
    from conftest import SHARED_DATA, shared_data_missing
    for shape, name in (("qwen2.5-0.5b", "Qwen2.5-0.5B-Instruct"),
                        ("qwen2.5-1.5b", "Qwen2.5-1.5B-Instruct")):
        if shared_data_missing("qwen2.5-configs", name):
            pytest.skip(shared_data_missing("qwen2.5-configs", name))
        with open(os.path.join(SHARED_DATA, "qwen2.5-configs", name, "config.json")) as fh:
            config = json.load(fh)
        assert {k: config[k] for k in gpu_bench.SHAPES[shape]} == gpu_bench.SHAPES[shape]


def test_the_random_models_never_end_an_answer():
    """The bench's random models put every end-of-sequence id far below every other token, so
    answers run to the limit on every side (the sides' token counts are then equal)."""
    import torch
    import gpu_bench
    from gmts.tools.toy import byte_tokenizer
    tok = byte_tokenizer()
    model = gpu_bench.random_model("toy", tok, gpu_bench.sizes(True))
    ids = torch.randint(0, 256, (4, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits.double(), dim=-1)       # (4, 12, V)
    ends = gpu_bench.end_ids(tok)
    # hidden 32: the gap is 4 x (at most sqrt(32)) on top of log V ≈ 12; below e^-25 per token
    # (< 1e-6 over the GPU run's 50k answer tokens); hidden 896 and 1536 give more than e^-100
    assert len(ends) >= 1 and logp[..., ends].max() < -25
