"""bench/gpu_check.py --dry-run: the GPU check's whole path (head, rollout, speed, train + resume, planner) on CPU at
toy sizes, so the prepared GPU command cannot rot before a GPU is available."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_gpu_check_dry_run(tmp_path, monkeypatch):
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import gpu_check
    out = tmp_path / "gpu.json"
    rc = gpu_check.main(["--dry-run", "--out", str(out), "--work-dir", str(tmp_path / "work")])
    result = json.loads(out.read_text())
    assert rc == 0 and result["pass"] and result["dry_run"], json.dumps(result, indent=1)[:3000]
    checks = result["checks"]
    assert set(checks) == {"head", "rollout", "speed", "train_pass", "train-toy", "fsdp"}
    assert checks["train_pass"]["real_tokens_per_s"] > 0 and checks["train_pass"]["mfu"] is None   # no peak on CPU
    head = checks["head"]
    assert set(head["max_abs_error_ours"]) == {"logp", "entropy", "grad_hidden", "grad_weight"}
    assert checks["rollout"]["valid_tokens"] > 0 and checks["rollout"]["mean_abs_dlogp"] < 0.05
    for G in ("G8", "G16"):
        assert all(v > 0 for v in checks["speed"][G]["tokens_per_s"].values())
    train = checks["train-toy"]
    assert train["steps"] == [1, 2] and len(train["seconds_per_step"]) == 2       # one step, then the resumed one
    assert train["peak_memory_planned_gib"] > 0 and train["peak_memory_measured_gib"] > 0
    assert "skipped" in checks["fsdp"]
