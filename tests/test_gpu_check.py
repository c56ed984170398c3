"""bench/gpu_check.py: its verdict (a check not run is not a pass), and --dry-run: the GPU check's
whole path (head, rollout, compiled = eager, train + resume, the planner, train.py --compile) on
CPU at toy sizes, so the prepared GPU command cannot rot before a GPU is available."""

import json
import os
import pathlib
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))


def passed(*names):
    return {name: {"status": "pass"} for name in names}


def test_verdict_counts_a_check_not_run_as_not_passed():
    import gpu_check

    every = passed(*gpu_check.CHECKS)
    assert gpu_check.verdict(every) == "pass"
    for name in gpu_check.CHECKS:
        assert (
            gpu_check.verdict({**every, name: {"status": "not run", "why": "time"}}) == "incomplete"
        ), name
        assert gpu_check.verdict({k: v for k, v in every.items() if k != name}) == "incomplete", (
            name
        )
        assert gpu_check.verdict({**every, name: {"status": "fail"}}) == "fail", name
    assert (
        gpu_check.verdict({**every, "head": {"status": "fail"}, "torchrun": {"status": "not run"}})
        == "fail"
    )


def test_a_check_that_raises_or_runs_out_of_time_is_written_at_once(tmp_path):
    import gpu_check

    out = str(tmp_path / "gpu.json")
    results = {"checks": {}}
    gpu_check.run_check("head", lambda: 1 / 0, results, out, deadline=float("inf"))
    assert json.loads(pathlib.Path(out).read_text())["checks"]["head"]["status"] == "fail"
    gpu_check.run_check("rollout", lambda: {"pass": True}, results, out, deadline=0.0)
    written = json.loads(pathlib.Path(out).read_text())
    assert written["checks"]["rollout"]["status"] == "not run" and written["verdict"] == "fail"
    gpu_check.run_check(
        "head", lambda: {"figure": 1.0}, results, out, deadline=float("inf")
    )  # no "pass": not a pass
    assert results["checks"]["head"]["status"] == "fail"


def test_gpu_check_dry_run(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import gpu_check

    out = tmp_path / "gpu.json"
    rc = gpu_check.main(["--dry-run", "--out", str(out), "--work-dir", str(tmp_path / "work")])
    result = json.loads(out.read_text())
    checks = result["checks"]
    assert set(checks) == set(gpu_check.CHECKS)
    # no GPUs: torchrun is not run, so the verdict cannot be a pass (exit 1); everything else passed
    assert (
        checks["torchrun"]["status"] == "not run" and result["verdict"] == "incomplete" and rc == 1
    )
    assert all(checks[n]["status"] == "pass" for n in gpu_check.CHECKS if n != "torchrun"), (
        json.dumps(checks, indent=1)[:3000]
    )
    assert (
        checks["rollout"]["answers_ended"] >= 0.5
        and len(set(checks["rollout"]["prompt_lengths"])) > 1
    )
    compiled = checks["compiled_equals_eager"]
    assert (
        all(r["same_tokens"] for r in compiled["rollouts"])
        and 0 < compiled["graphs"] <= compiled["graph_bound"]
    )
    tc = checks["train_compile"]            # dynamo's own counts, from train.py's processes
    assert tc["eager"]["graphs"] == 0 and 0 < tc["compiled"]["graphs"] <= tc["graph_bound"]
    assert tc["compiled"]["graph_breaks"] == 0
    assert len(tc["eager"]["seconds_per_step"]) == len(tc["compiled"]["seconds_per_step"]) == 4
    train = checks["train_resume"]
    assert (
        train["steps"] == [[1, 2], [1, 2]] and train["bit_exact"]
    )  # CPU: the resumed run is exact
    assert train["peak_memory_planned_gib"] > 0 and train["peak_memory_measured_gib"] > 0
    assert train["first_differences"] == [] and train["weights_differing_count"] == 0
    assert all(g > 0 for g in train["grad_norm"])      # both steps updated: exactness is not void
    assert len(train["seconds_per_step"]) == len(train["seconds_per_step_deterministic"]) == 2
    import torch
    assert not torch.are_deterministic_algorithms_enabled()   # --deterministic stayed in its run
    for run in ("straight", "resumed", "default"):     # the runs' checkpoints are removed
        assert not os.path.exists(tmp_path / "work" / f"run-{run}")
    assert result["disk_max_gb"] > 0
