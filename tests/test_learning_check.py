"""The learning check's 2-step version (bench/learning_check.py --smoke) on a tiny random model, so the script
cannot rot: it must drive train.py and eval.py as subprocesses, pair the arms by problem and write its table."""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import write_tiny_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_check(tmp_path, *extra):
    model = write_tiny_model(tmp_path / "tiny", favour="0123456789")
    results = tmp_path / "results" / "lc"
    cmd = [sys.executable, "bench/learning_check.py", "--smoke", "--model", model, "--arms", "none,ets,gmts",
           "--work-dir", str(tmp_path / "work"), "--results", str(results), "--parallel", "2",
           "--train-flags=--max-bad-steps 5", *extra]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return done, results


def test_smoke_writes_paired_table(tmp_path):
    done, results = run_check(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "results" / "lc.json").read_text())
    base = report["base"]
    assert base["n_problems"] == 6 and 0.0 <= base["accuracy"] <= 1.0
    arms = report["arms"]["2e-05"]
    assert set(arms) == {"none", "ets", "gmts"}
    for arm, entry in arms.items():
        lo, hi = entry["ci95"]
        assert lo <= entry["accuracy"] <= hi
        assert entry["seeds"] == [0]
        # the run really trained 2 steps through train.py and logged what the table reports
        run = entry["runs"][0]
        assert run["steps_logged"] == 2 and run["step_s_median"] > 0
        assert entry["response_len_mean"] is not None and 0 < entry["response_len_mean"] <= 8
        assert not os.path.exists(os.path.join(run["run_dir"], "checkpoints"))   # deleted after its eval
        # --train-flags reach train.py
        assert json.loads(open(os.path.join(run["run_dir"], "config.json")).read())["max_bad_steps"] == 5
        # the paired difference against the base is the mean of per-problem differences of the eval files
        per_problem = [json.loads(l) for l in open(run["eval"].replace(".json", ".problems.jsonl"))]
        assert len(per_problem) == 6 and all(r["n"] == 2 for r in per_problem)
        acc = sum(r["correct"] / r["n"] for r in per_problem) / 6
        assert entry["accuracy"] == pytest.approx(acc)
        assert entry["vs_base"]["difference"] == pytest.approx(acc - base["accuracy"])
        completions = [c for r in per_problem for c in r["completions"]]
        assert entry["eval_cut_share"] == pytest.approx(sum(not c["finished"] for c in completions) / 12)
    assert "vs_none" in arms["gmts"] and "vs_ets" in arms["gmts"] and "vs_none" not in arms["none"]
    assert "vs_ets" not in arms["ets"]
    # gmts vs ets is paired on the same problems: its difference is the difference of the two accuracies
    assert arms["gmts"]["vs_ets"]["difference"] == pytest.approx(arms["gmts"]["accuracy"] - arms["ets"]["accuracy"])
    md = (tmp_path / "results" / "lc.md").read_text()
    assert "| 2e-05 | gmts | 1 |" in md and "Base (untrained) held-out accuracy" in md
    assert report["meta"]["pending"] == [] and report["meta"]["failed"] == {}

    # --report-only rebuilds the same table from the finished runs, running nothing (and keeps the run's command)
    os.remove(results.with_suffix(".md"))
    again, _ = run_check(tmp_path, "--report-only", "--seeds", "0,1")
    assert again.returncode == 0, again.stderr[-3000:]
    rebuilt = json.loads((tmp_path / "results" / "lc.json").read_text())
    assert rebuilt["arms"] == report["arms"] and rebuilt["base"] == report["base"]
    assert rebuilt["meta"]["command"] == report["meta"]["command"]
    assert rebuilt["meta"]["pending"] == ["lr2e-05_none_s1", "lr2e-05_ets_s1", "lr2e-05_gmts_s1"]
    assert not os.path.exists(tmp_path / "work" / "lr2e-05_none_s1")     # nothing was started
    assert "Not finished (partial table)" in (tmp_path / "results" / "lc.md").read_text()

    # the work folder remembers its settings: runs of another task are never mixed into this table
    other, _ = run_check(tmp_path, "--report-only", "--task-options", '{"digits": 1, "terms": 2, "ops": "+"}')
    assert other.returncode != 0 and "task_options" in other.stderr and "--work-dir" in other.stderr
    assert json.loads((tmp_path / "results" / "lc.json").read_text()) == rebuilt        # untouched
    other, _ = run_check(tmp_path, "--report-only", "--train-flags=--exclude-zero-adv")
    assert other.returncode != 0 and "train_flags" in other.stderr


def test_train_flags_may_not_override_the_checks_own():
    cmd = [sys.executable, "bench/learning_check.py", "--train-flags=--lr 1e-3", "--report-only"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--lr is set by the check itself" in done.stderr


def test_bad_arm_is_refused_before_any_work(tmp_path):
    cmd = [sys.executable, "bench/learning_check.py", "--arms", "none,gtms", "--work-dir", str(tmp_path / "w")]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "gtms" in done.stderr
    assert not (tmp_path / "w").exists()
