"""The learning check's 2-step version (bench/learning_check.py --smoke) on a tiny random model, so the script
cannot rot: it must drive train.py and eval.py as subprocesses, pair the arms by problem and write its table."""
import json
import math
import os
import statistics
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
           "--train-flags=--max-bad-steps 5", "--log-grad-noise", *extra]
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
        # --train-flags and --log-grad-noise reach train.py
        config = json.loads(open(os.path.join(run["run_dir"], "config.json")).read())
        assert config["max_bad_steps"] == 5 and config["log_grad_noise"] is True
        # the update diagnostics of the table are the means of what train.py logged (null where it logged none)
        rows = [json.loads(line) for line in open(os.path.join(run["run_dir"], "metrics.jsonl"))]
        logged = [r["update_answers_effective"] for r in rows if r.get("update_answers_effective") is not None]
        assert run["update_answers_effective_mean"] == (pytest.approx(sum(logged) / len(logged)) if logged else None)
        assert run["grad_noise_steps"] == sum(1 for r in rows if r.get("grad_noise_ratio") is not None)
        assert entry["stable"] == (entry["n_diverged"] == 0) and set(entry["diverged"]) <= {"0"}
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
    assert "## Stability and update diagnostics" in md and "a run diverged if" in md
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


# ----------------------------------------------------------------------------------------------------------------------
# The stability map's machinery (issue #24), end to end with fake runs: train.py and eval.py are replaced by a
# function that writes what they would (metrics.jsonl, a checkpoint folder, eval files), so the pool, the
# divergence rules, --extend-lrs, the diagnostics' aggregation, the table and the figure run for real in seconds.

sys.path.insert(0, os.path.join(ROOT, "bench"))
import learning_check as lc  # noqa: E402

PROBLEMS = [f"p{i}" for i in range(10)]
BASE = [0.0, 0.5, 0.25, 0.0, 0.5, 0.25, 0.0, 0.5, 0.25, 0.25]           # mean 0.25


def flag(cmd, name):
    return cmd[cmd.index(name) + 1]


def fake_scenario(lr, arm, seed):
    """What each fake run does. none: learns everywhere. ets: reward collapse at 2e-5 (seed 1). gmts: non-finite
    steps at 4e-5 (seed 0: train.py stops it). ets-exclude: below the base at 4e-5 (seed 1)."""
    acc_first, acc_last, accuracy, nonfinite = 0.4, 0.6, 0.6, False
    if arm == "ets" and lr == 2e-5 and seed == 1:
        acc_last = 0.1                                                       # < 0.5 x 0.4: collapse
    if arm == "gmts" and lr == 4e-5 and seed == 0:
        nonfinite = True
    if arm == "ets-exclude" and lr == 4e-5 and seed == 1:
        accuracy = 0.0                                                       # below the base's interval
    # the update diagnostics train.py logs: GMTS concentrates (n_eff 2 of 32) and one of its steps has no update
    n_eff = {"gmts": [2.0, None, 3.0, 3.0]}.get(arm, [8.0 + seed, 8.0, 8.0, 8.0 + seed])
    noise = [0.2, 0.4 + lr * 1e4, math.inf, 0.3]                             # one-sample η: median is robust
    return acc_first, acc_last, accuracy, nonfinite, n_eff, noise


def fake_run_logged(cmd, log_path, threads):
    script = os.path.basename(cmd[1])
    if script == "train.py":
        out, lr, arm = flag(cmd, "--output-dir"), float(flag(cmd, "--lr")), flag(cmd, "--selector")
        arm = "ets-exclude" if "--exclude-zero-adv" in cmd else arm
        seed, steps = int(flag(cmd, "--seed")), int(flag(cmd, "--steps"))
        assert "--log-grad-noise" in cmd
        acc_first, acc_last, _, nonfinite, n_eff, noise = fake_scenario(lr, arm, seed)
        rows = []
        for step in range(1, steps + 1):
            row = {"step": step, "reward_mean": 0.5, "accuracy": acc_first if step == 1 else acc_last,
                   "grad_norm": 2.0 * step, "time_rollout_s": 1.0, "time_train_s": 1.0, "response_len_mean": 10.0,
                   "mixed_groups": 2, "update_answers_effective": n_eff[step - 1],
                   "update_answers_effective_share": None if n_eff[step - 1] is None else n_eff[step - 1] / 32,
                   "update_weight_top1_share": 0.5, "grad_noise_ratio": noise[step - 1],
                   "grad_noise_scale": None if noise[step - 1] >= 1 else 8 * noise[step - 1] / (1 - noise[step - 1])}
            if nonfinite and step >= 2:
                row.update(grad_norm=math.nan, skipped="non-finite loss/gradient in 1 of 1 updates")
            rows.append(row)
        with open(os.path.join(out, "metrics.jsonl"), "w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in rows)
        if nonfinite:
            raise lc.TrainingDiverged(f"exit 1: train.py ... (log {log_path}):\nerror: 3 {lc.NONFINITE_EXIT} "
                                      "(last at step 4); the last good checkpoint is none. Lower --lr or check "
                                      "the data.")
        ckpt = os.path.join(out, "checkpoints", f"step-{steps:06d}")
        os.makedirs(ckpt)
        with open(os.path.join(ckpt, "which.json"), "w") as fh:
            json.dump([lr, arm, seed], fh)
        return 1.0
    assert script == "eval.py"
    model, output = flag(cmd, "--model"), flag(cmd, "--output")
    if os.path.exists(os.path.join(model, "which.json")):
        accuracy = fake_scenario(*json.load(open(os.path.join(model, "which.json"))))[2]
        scores = [min(1.0, accuracy + (b - 0.25)) for b in BASE]            # per problem, mean = accuracy
    else:
        scores = BASE
    with open(output, "w") as fh:
        json.dump({"benchmarks": {"arithmetic": {"scores": dict(zip(PROBLEMS, scores))}}}, fh)
    with open(output[:-len(".json")] + ".problems.jsonl", "w") as fh:
        for pid, score in zip(PROBLEMS, scores):
            fh.write(json.dumps({"benchmark": "arithmetic", "id": pid, "n": 4, "correct": round(4 * score),
                                 "completions": [{"finished": True}] * 4}) + "\n")
    return 1.0


def test_map_machinery_divergence_extension_and_diagnostics(tmp_path, monkeypatch):
    monkeypatch.setattr(lc, "run_logged", fake_run_logged)
    results = tmp_path / "map"
    argv = ["--map", "--model", "fake-model", "--lrs", "1e-5,2e-5,4e-5", "--extend-lrs", "8e-5,1.6e-4",
            "--arms", "none,ets,gmts,ets-exclude", "--seeds", "0,1", "--steps", "4", "--bootstrap", "200",
            "--work-dir", str(tmp_path / "work"), "--results", str(results), "--parallel", "2"]
    assert lc.main(argv) == 0
    report = json.loads(results.with_suffix(".json").read_text())
    cells = report["arms"]
    # divergence, each rule once: collapse (ets 2e-5), non-finite (gmts 4e-5), below base (ets-exclude 4e-5)
    assert cells["2e-05"]["ets"]["diverged"] == {"1": ["reward collapse"]}
    assert cells["4e-05"]["gmts"]["diverged"] == {"0": ["non-finite"]}
    assert cells["4e-05"]["gmts"]["seeds"] == [1] and cells["4e-05"]["gmts"]["seeds_run"] == [0, 1]
    assert cells["4e-05"]["ets-exclude"]["diverged"] == {"1": ["below base"]}
    assert all(cells[lr]["none"]["stable"] for lr in cells)
    # --extend-lrs: 8e-5 only for the arms whose every seed survived 4e-5 (none, and ets, whose collapse was at
    # 2e-5), then 1.6e-4 for those that survived 8e-5
    assert report["meta"]["extended"] == {"8e-05": ["none", "ets"], "0.00016": ["none", "ets"]}
    assert set(cells["8e-05"]) == set(cells["0.00016"]) == {"none", "ets"}
    st = report["stability"]
    assert st["none"]["largest_stable_lr"] == 1.6e-4 and st["none"]["smallest_diverged_lr"] is None
    assert st["ets"]["stable_lrs"] == [1e-5, 4e-5, 8e-5, 1.6e-4] and st["ets"]["smallest_diverged_lr"] == 2e-5
    assert st["gmts"]["largest_stable_lr"] == 2e-5 and st["gmts"]["smallest_diverged_lr"] == 4e-5
    # the update diagnostics: n_eff the mean over the steps that logged it (None skipped), then over seeds;
    # η the median over steps (an inf included), then over seeds
    gmts = cells["1e-05"]["gmts"]
    assert gmts["update_answers_effective_mean"] == pytest.approx((2 + 3 + 3) / 3)
    none = cells["1e-05"]["none"]
    assert none["update_answers_effective_mean"] == pytest.approx(statistics.fmean([8.0, 8.5]))
    assert none["runs"][0]["grad_noise_ratio_median"] == pytest.approx((0.3 + 0.5) / 2)
    assert none["grad_noise_ratio_median"] == pytest.approx(0.4)
    assert none["runs"][0]["grad_noise_steps"] == 4
    # the paired comparisons the reading needs
    assert cells["1e-05"]["gmts"]["vs_ets-exclude"]["difference"] == pytest.approx(0.0)
    assert "vs_ets" in cells["1e-05"]["ets-exclude"] and "vs_none" in cells["1e-05"]["gmts"]
    # the table, the definition and the figure
    md = results.with_suffix(".md").read_text()
    assert lc.DIVERGENCE in md and "| 4e-05 | gmts | 60.0" in md and "1/2 (s0: non-finite)" in md
    assert "- gmts: stable at 1e-05, 2e-05 of 1e-05, 2e-05, 4e-05" in md
    assert f"n_eff of GMTS over ETS: {(8 / 3) / 8.25:.2f} at 1e-05" in md        # (2+3+3)/3 over (8 + 8.5)/2
    png = tmp_path / "map_map.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report["meta"]["figure"] == str(png)
    # --report-only rebuilds the same cells, the extension rates' runs included
    assert lc.main(argv + ["--report-only"]) == 0
    rebuilt = json.loads(results.with_suffix(".json").read_text())
    assert rebuilt["arms"] == cells and rebuilt["meta"]["extended"] == report["meta"]["extended"]


def test_map_options_and_the_commands_they_build(tmp_path):
    args = lc.parse_args(["--map"])
    assert args.lrs == [5e-6, 1e-5, 2e-5, 4e-5] and args.extend_lrs == [8e-5] and args.log_grad_noise
    assert args.arms == ["none", "ets", "gmts", "random", "ets-exclude"]
    assert args.work_dir.endswith(os.path.join("runs", "lr_map")) and args.results.endswith("lr_map")
    assert lc.parse_args(["--map", "--lrs", "1e-5", "--arms", "gmts"]).lrs == [1e-5]      # explicit flags win
    cmd = lc.train_cmd(args, "m", "ets-exclude", 0, 1e-5, str(tmp_path / "run"))
    assert flag(cmd, "--selector") == "ets" and "--exclude-zero-adv" in cmd and "--log-grad-noise" in cmd
    # train.py accepts the exact command line the map builds (checked whole, before any model loads)
    done = subprocess.run(cmd[:1] + cmd[1:] + ["--print-config"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout[done.stdout.index("{"):])
    assert config["selector"] == "ets" and config["exclude_zero_adv"] and config["log_grad_noise"]
    for bad, message in ((["--extend-lrs", "1e-6"], "above the largest"), (["--lrs", "0"], "must be > 0")):
        cmd = [sys.executable, "bench/learning_check.py", *bad, "--report-only"]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and message in done.stderr
