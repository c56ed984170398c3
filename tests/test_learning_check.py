"""The learning check's 2-step version (bench/learning_check.py --smoke) on a tiny random model, so
the script cannot rot: it must drive train.py and eval.py as subprocesses, pair the arms by problem
and write its table."""
import json
import math
import os
import pathlib
import shutil
import statistics
import subprocess
import sys

import pytest

from tests.conftest import write_tiny_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_check(tmp_path, *extra):
    model = write_tiny_model(tmp_path / "tiny", favour="0123456789")
    results = tmp_path / "results" / "lc"
    cmd = [sys.executable, "bench/learning_check.py", "--smoke", "--model", model, "--arms",
           "none,ets,gmts", "--work-dir", str(tmp_path / "work"), "--results", str(results),
           "--parallel", "2", "--train-flags=--max-bad-steps 5", "--log-grad-noise", *extra]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    return done, results


def test_smoke_writes_paired_table(tmp_path):
    done, results = run_check(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "results" / "lc.json").read_text())
    base = report["base"]
    assert base["n_problems"] == 6 and 0.0 <= base["accuracy"] <= 1.0
    arms = report["arms"]["2e-05"]
    assert set(arms) == {"none", "ets", "gmts"}
    for entry in arms.values():
        lo, hi = entry["ci95"]
        assert lo <= entry["accuracy"] <= hi
        assert entry["seeds"] == [0]
        # the run really trained 2 steps through train.py and logged what the table reports
        run = entry["runs"][0]
        assert run["steps_logged"] == 2 and run["step_s_median"] > 0
        assert entry["response_len_mean"] is not None and 0 < entry["response_len_mean"] <= 8
        # deleted after its eval
        assert not os.path.exists(os.path.join(run["run_dir"], "checkpoints"))
        # --train-flags and --log-grad-noise reach train.py
        config = json.loads(pathlib.Path(run["run_dir"], "config.json").read_text())
        assert config["max_bad_steps"] == 5 and config["log_grad_noise"] is True
        # the update diagnostics of the table are the means of what train.py logged (null where it
        # logged none)
        rows = [json.loads(line)
                for line in pathlib.Path(run["run_dir"], "metrics.jsonl").read_text().splitlines()]
        logged = [r["update_answers_effective"] for r in rows
                  if r.get("update_answers_effective") is not None]
        assert run["update_answers_effective_mean"] == (pytest.approx(sum(logged) / len(logged))
                                                        if logged else None)
        assert run["grad_noise_steps"] == sum(1 for r in rows if r.get("grad_noise_ratio") is
                                              not None)
        assert entry["stable"] == (entry["n_diverged"] == 0) and set(entry["diverged"]) <= {"0"}
        # the paired difference against the base is the mean of per-problem differences of the eval
        # files
        per_problem = [
            json.loads(l)
            for l in pathlib.Path(run["eval"].replace(".json", ".problems.jsonl"))
            .read_text().splitlines()]
        assert len(per_problem) == 6 and all(r["n"] == 2 for r in per_problem)
        acc = sum(r["correct"] / r["n"] for r in per_problem) / 6
        assert entry["accuracy"] == pytest.approx(acc)
        assert entry["vs_base"]["difference"] == pytest.approx(acc - base["accuracy"])
        completions = [c for r in per_problem for c in r["completions"]]
        assert entry["eval_cut_share"] == pytest.approx(
            sum(not c["finished"] for c in completions) / 12)
    assert "vs_none" in arms["gmts"] and "vs_ets" in arms["gmts"] and "vs_none" not in arms["none"]
    assert "vs_ets" not in arms["ets"]
    # gmts vs ets is paired on the same problems: its difference is the difference of the two
    # accuracies
    assert arms["gmts"]["vs_ets"]["difference"] == pytest.approx(
        arms["gmts"]["accuracy"] - arms["ets"]["accuracy"])
    md = (tmp_path / "results" / "lc.md").read_text()
    assert "| 2e-05 | gmts | 1 |" in md and "Base (untrained) held-out accuracy" in md
    assert "## Stability and update diagnostics" in md and "a run diverged if" in md
    assert report["meta"]["pending"] == [] and report["meta"]["failed"] == {}

    # --report-only rebuilds the same table from the finished runs, running nothing (and keeps the
    # run's command)
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
    other, _ = run_check(tmp_path, "--report-only", "--task-options",
                         '{"digits": 1, "terms": 2, "ops": "+"}')
    assert other.returncode != 0 and "task_options" in other.stderr and "--work-dir" in other.stderr
    assert json.loads((tmp_path / "results" / "lc.json").read_text()) == rebuilt        # untouched
    other, _ = run_check(tmp_path, "--report-only", "--train-flags=--exclude-zero-adv")
    assert other.returncode != 0 and "train_flags" in other.stderr


def test_train_flags_may_not_override_the_checks_own():
    cmd = [sys.executable, "bench/learning_check.py", "--train-flags=--lr 1e-3", "--report-only"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "--lr is set by the check itself" in done.stderr


def test_bad_arm_is_refused_before_any_work(tmp_path):
    cmd = [sys.executable, "bench/learning_check.py", "--arms", "none,gtms", "--work-dir",
           str(tmp_path / "w")]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "gtms" in done.stderr
    assert not (tmp_path / "w").exists()


# --------------------------------------------------------------------------------------------------
# The stability map's machinery (issue #24), end to end with fake runs: train.py and eval.py are
# replaced by a function that writes what they would (metrics.jsonl, a checkpoint folder, eval
# files), so the pool, the divergence rules, --extend-lrs, the diagnostics' aggregation, the table
# and the figure run for real in seconds.

sys.path.insert(0, os.path.join(ROOT, "bench"))
import learning_check as lc

PROBLEMS = [f"p{i}" for i in range(10)]
BASE = [0.0, 0.5, 0.25, 0.0, 0.5, 0.25, 0.0, 0.5, 0.25, 0.25]           # mean 0.25


def flag(cmd, name):
    return cmd[cmd.index(name) + 1]


def fake_scenario(lr, arm, seed):
    """What each fake run does. none: learns everywhere. ets: reward collapse at 2e-5 (seed 1).
    gmts: non-finite steps at 4e-5 (seed 0: train.py stops it). ets-exclude: below the base at 4e-5
    (seed 1)."""
    acc_first, acc_last, accuracy, nonfinite = 0.4, 0.6, 0.6, False
    if arm == "ets" and lr == 2e-5 and seed == 1:
        acc_last = 0.1                                                       # < 0.5 x 0.4: collapse
    if arm == "gmts" and lr == 4e-5 and seed == 0:
        nonfinite = True
    if arm == "ets-exclude" and lr == 4e-5 and seed == 1:
        # below the base's interval
        accuracy = 0.0
    # the update diagnostics train.py logs: GMTS concentrates (n_eff 2 of 32) and one of its steps
    # has no update
    n_eff = {"gmts": [2.0, None, 3.0, 3.0]}.get(arm, [8.0 + seed, 8.0, 8.0, 8.0 + seed])
    # one-sample η: median is robust
    noise = [0.2, 0.4 + lr * 1e4, math.inf, 0.3]
    return acc_first, acc_last, accuracy, nonfinite, n_eff, noise


def write_fake_eval(output, scores):
    """What eval.py writes: the summary with per-problem scores and the per-problem .jsonl (4
    samples)."""
    with open(output, "w") as fh:
        json.dump({"benchmarks": {"arithmetic": {"scores": dict(zip(PROBLEMS, scores))}}}, fh)
    with open(output[:-len(".json")] + ".problems.jsonl", "w") as fh:
        fh.writelines(
            json.dumps({"benchmark": "arithmetic", "id": pid, "n": 4, "correct": round(4 * score),
                                  "completions": [{"finished": True}] * 4}) + "\n"
                      for pid, score in zip(PROBLEMS, scores))


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
            row = {"step": step, "reward_mean": 0.5,
                   "accuracy": acc_first if step == 1 else acc_last, "grad_norm": 2.0 * step,
                   "time_rollout_s": 1.0, "time_train_s": 1.0, "response_len_mean": 10.0,
                   "mixed_groups": 2, "update_answers_effective": n_eff[step - 1],
                   "update_answers_effective_share": None if n_eff[step - 1] is None
                   else n_eff[step - 1] / 32, "update_weight_top1_share": 0.5,
                   "grad_noise_ratio": noise[step - 1],
                   "grad_noise_scale": None if noise[step - 1] >= 1 else 8
                   * noise[step - 1] / (1 - noise[step - 1])}
            if nonfinite and step >= 2:
                row.update(grad_norm=math.nan, skipped="non-finite loss/gradient in 1 of 1 updates")
            rows.append(row)
        with open(os.path.join(out, "metrics.jsonl"), "w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in rows)
        if nonfinite:
            raise lc.TrainingDiverged(f"exit 1: train.py ... (log {log_path}):\nerror: 3 "
                                      f"{lc.NONFINITE_EXIT} (last at step 4); the last good "
                                      "checkpoint is none. Lower --lr or check the data.")
        ckpt = os.path.join(out, "checkpoints", f"step-{steps:06d}")
        os.makedirs(ckpt)
        with open(os.path.join(ckpt, "which.json"), "w") as fh:
            json.dump([lr, arm, seed], fh)
        return 1.0
    assert script == "eval.py"
    model, output = flag(cmd, "--model"), flag(cmd, "--output")
    if os.path.exists(os.path.join(model, "which.json")):
        accuracy = fake_scenario(*json.loads(pathlib.Path(model, "which.json").read_text()))[2]
        # per problem, mean = accuracy
        scores = [min(1.0, accuracy + (b - 0.25)) for b in BASE]
    else:
        scores = BASE
    write_fake_eval(output, scores)
    return 1.0


def test_map_machinery_divergence_extension_and_diagnostics(tmp_path, monkeypatch):
    monkeypatch.setattr(lc, "run_logged", fake_run_logged)
    results = tmp_path / "map"
    argv = ["--map", "--model", "fake-model", "--lrs", "1e-5,2e-5,4e-5", "--extend-lrs",
            "8e-5,1.6e-4", "--arms", "none,ets,gmts,ets-exclude", "--seeds", "0,1", "--steps", "4",
            "--bootstrap", "200", "--work-dir", str(tmp_path / "work"), "--results", str(results),
            "--parallel", "2"]
    assert lc.main(argv) == 0
    report = json.loads(results.with_suffix(".json").read_text())
    cells = report["arms"]
    # divergence, each rule once: collapse (ets 2e-5), non-finite (gmts 4e-5), below base
    # (ets-exclude 4e-5)
    assert cells["2e-05"]["ets"]["diverged"] == {"1": ["reward collapse"]}
    assert cells["4e-05"]["gmts"]["diverged"] == {"0": ["non-finite"]}
    assert cells["4e-05"]["gmts"]["seeds"] == [1] and cells["4e-05"]["gmts"]["seeds_run"] == [0, 1]
    assert cells["4e-05"]["ets-exclude"]["diverged"] == {"1": ["below base"]}
    assert all(cells[lr]["none"]["stable"] for lr in cells)
    # --extend-lrs: 8e-5 only for the arms whose every seed survived 4e-5 (none, and ets, whose
    # collapse was at 2e-5), then 1.6e-4 for those that survived 8e-5
    assert report["meta"]["extended"] == {"8e-05": ["none", "ets"], "0.00016": ["none", "ets"]}
    assert set(cells["8e-05"]) == set(cells["0.00016"]) == {"none", "ets"}
    st = report["stability"]
    assert st["none"]["largest_stable_lr"] == 1.6e-4 and st["none"]["smallest_diverged_lr"] is None
    assert st["ets"]["stable_lrs"] == [1e-5, 4e-5, 8e-5, 1.6e-4] and st["ets"][
        "smallest_diverged_lr"] == 2e-5
    assert st["gmts"]["largest_stable_lr"] == 2e-5 and st["gmts"]["smallest_diverged_lr"] == 4e-5
    # the update diagnostics: n_eff the mean over the steps that logged it (None skipped), then over
    # seeds; η the median over steps (an inf included), then over seeds
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
    # records made by this checkout: η summed in float64, nothing flagged
    assert all(r["grad_noise_float64"] for arms in cells.values() for e in arms.values()
               for r in e["runs"])
    assert "†" not in md
    assert "- gmts: stable at 1e-05, 2e-05 of 1e-05, 2e-05, 4e-05" in md
    # (2+3+3)/3 over (8 + 8.5)/2
    assert f"n_eff of GMTS over ETS: {(8 / 3) / 8.25:.2f} at 1e-05" in md
    # diverged against held seeds: ets 2e-5 and ets-exclude 4e-5 lost s1 (n_eff 8.5, s0 8.0);
    # GMTS at 4e-5 lost s0, level with s1 (8/3 each), a tie the sign test leaves out
    assert ("2e-05 ets 8.50 vs 8.00; 4e-05 gmts 2.67 vs 2.67; 4e-05 ets-exclude 8.50 vs 8.00. "
            "Lower in 0 of 3 cells (sign test, ties out: two-sided p = 0.50).") in md
    png = tmp_path / "map_map.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report["meta"]["figure"] == str(png)
    # --report-only rebuilds the same cells, the extension rates' runs included
    assert lc.main(argv + ["--report-only"]) == 0
    rebuilt = json.loads(results.with_suffix(".json").read_text())
    assert rebuilt["arms"] == cells and rebuilt["meta"]["extended"] == report["meta"]["extended"]


def test_map_options_and_the_commands_they_build(tmp_path):
    args = lc.parse_args(["--map"])
    assert (args.lrs == [5e-6, 1e-5, 2e-5, 4e-5] and args.extend_lrs == [8e-5]
            and args.log_grad_noise)
    assert args.arms == ["none", "ets", "gmts", "random", "ets-exclude"]
    assert args.work_dir.endswith(os.path.join("runs", "lr_map")) and args.results.endswith(
        "lr_map")
    # explicit flags win
    assert lc.parse_args(["--map", "--lrs", "1e-5", "--arms", "gmts"]).lrs == [1e-5]
    cmd = lc.train_cmd(args, "m", "ets-exclude", 0, 1e-5, str(tmp_path / "run"))
    assert (flag(cmd, "--selector") == "ets" and "--exclude-zero-adv" in cmd
            and "--log-grad-noise" in cmd)
    # train.py accepts the exact command line the map builds (checked whole, before any model loads)
    done = subprocess.run(cmd[:1] + cmd[1:] + ["--print-config"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, HF_HUB_OFFLINE="1"),
                          check=False)
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout[done.stdout.index("{"):])
    assert config["selector"] == "ets" and config["exclude_zero_adv"] and config["log_grad_noise"]
    for bad, message in ((["--extend-lrs", "1e-6"], "above the largest"),
                         (["--lrs", "0"], "must be > 0")):
        cmd = [sys.executable, "bench/learning_check.py", *bad, "--report-only"]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60,
                              check=False)
        assert done.returncode == 2 and message in done.stderr


# --------------------------------------------------------------------------------------------------
# The boundary's statistics (issue #34): rates with intervals against known values in float64, and
# the whole analysis on fake runs whose answer is known.

from gmts.tools import stats


def test_rate_intervals_against_known_values():
    # Clopper-Pearson: R's binom.test(5, 10) ([0.1870860, 0.8129140]), and 1/3 as scipy 1.17's
    # binomtest(1, 3).proportion_ci('exact') gives it (its root finder stops at ~1e-12); the ends at
    # k = 0 and k = n are closed forms
    assert stats.clopper_pearson_interval(5, 10) == pytest.approx([0.1870860, 0.8129140], abs=5e-8)
    assert stats.clopper_pearson_interval(1, 3) == pytest.approx(
        [0.008403758659612647, 0.9057006759492866],
                                                                 abs=1e-11)
    for n in (3, 10, 37):
        assert stats.clopper_pearson_interval(0, n) == pytest.approx(
            [0.0, 1 - 0.025 ** (1 / n)], rel=1e-13)
        assert stats.clopper_pearson_interval(n, n) == pytest.approx(
            [0.025 ** (1 / n), 1.0], rel=1e-13)
    # each exact end puts exactly 2.5% in its tail (the binomial summed in float64)
    for k, n in ((1, 10), (3, 10), (7, 12)):
        lo, hi = stats.clopper_pearson_interval(k, n)
        assert 1 - stats.binomial_cdf(k - 1, n, lo) == pytest.approx(0.025, abs=1e-12)
        assert stats.binomial_cdf(k, n, hi) == pytest.approx(0.025, abs=1e-12)
    # Wilson: 0/10's upper end 0.2775 and 5/10's [0.2366, 0.7634]; each end solves (p̂ - p)² = z² p
    # (1 - p) / n
    assert stats.wilson_interval(0, 10) == pytest.approx([0.0, 0.2775328], abs=5e-8)
    assert stats.wilson_interval(5, 10) == pytest.approx([0.2365931, 0.7634069], abs=5e-8)
    z = 1.959963984540054
    for k, n in ((1, 3), (2, 10), (9, 10)):
        for p in stats.wilson_interval(k, n):
            assert (k / n - p) ** 2 == pytest.approx(z * z * p * (1 - p) / n, abs=1e-14)
    # Newcombe (1998), Stat. Med. 17:873, example (a): 56/70 - 48/80, method 10: [0.0524, 0.3339]
    d, ci = stats.rate_difference(48, 80, 56, 70)
    assert d == pytest.approx(0.2) and ci == pytest.approx([0.0524, 0.3339], abs=5e-5)
    with pytest.raises(ValueError):
        stats.wilson_interval(4, 3)


def test_paired_rate_difference_tells_apart_what_it_should():
    # 0/10 against 5/10 diverged on the same seeds: the two Wilson intervals overlap ([0, 27.8] and
    # [23.7, 76.3]), yet the paired difference excludes 0 - overlap of the two intervals is not the
    # test
    a, b = [0] * 10, [1] * 5 + [0] * 5
    assert stats.wilson_interval(0, 10)[1] > stats.wilson_interval(5, 10)[0]
    d, ci = stats.paired_rate_difference(a, b)
    # (φ = 0, a margin being empty: 0.5 - sqrt(0.2634² + 0.2775²) and 0.5 + 0.2634, the Wilson
    # distances)
    assert d == 0.5 and ci[0] > 0 and ci == pytest.approx([0.1173675, 0.7634069], abs=5e-8)
    # 1/10 against 2/10: no difference can be told apart
    d, ci = stats.paired_rate_difference([1] + [0] * 9, [1, 1] + [0] * 8)
    assert d == pytest.approx(0.1) and ci[0] < 0 < ci[1]
    # with no correlation in the 2x2 table (ad = bc) it is the independent-rates interval of the
    # same margins
    a, b = [1, 1, 0, 0], [1, 0, 1, 0]
    (d, ci), (d_ind, ci_ind) = stats.paired_rate_difference(a, b), stats.rate_difference(2, 4, 2, 4)
    assert d == d_ind == 0 and ci == pytest.approx(ci_ind, abs=1e-15)
    # positively correlated pairs give a narrower interval than independent rates with the same
    # margins
    a, b = [1, 1, 1, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]
    _, paired = stats.paired_rate_difference(a, b)
    _, independent = stats.rate_difference(3, 10, 5, 10)
    assert paired[1] - paired[0] < independent[1] - independent[0]
    with pytest.raises(ValueError):
        stats.paired_rate_difference([1, 0], [1])


def test_seed_problem_bootstrap_pieces():
    counts = stats.problem_counts(7, seed=0, n_resamples=300)
    assert counts.shape == (300, 7) and (counts.sum(axis=1) == 7).all()
    profiles = [[1, 0, 1, 0, 1, 0, 1.0], [0, 0, 1, 1, 1, 1, 0.0]]
    acc = [sum(p) / 7 for p in profiles]
    reps = stats.seed_problem_replicates(acc + [0.9], profiles + [None], counts)
    assert reps.shape == (3, 300)
    assert reps[0] == pytest.approx(counts @ profiles[0] / 7)
    # a seed without per-problem scores moves with the mean profile of the others
    mean_profile = [(x + y) / 2 for x, y in zip(*profiles)]
    assert reps[2] - 0.9 == pytest.approx(counts @ mean_profile / 7 - sum(mean_profile) / 7)
    # no profile at all: the seeds do not move (a bootstrap over seeds only)
    assert (stats.seed_problem_replicates([0.2, 0.4], None, counts) == [[0.2], [0.4]]).all()
    draws = stats.seed_draws(3, seed=1, n_resamples=300)
    means = stats.resample_seed_means(reps, draws)
    assert means == pytest.approx(
        [statistics.fmean(reps[j, b] for j in draws[b]) for b in range(300)])
    # identical seeds and no problem term: a degenerate interval at their value
    flat = stats.resample_seed_means([[0.3], [0.3], [0.3]], draws)
    assert stats.percentile_interval(flat) == pytest.approx([0.3, 0.3])
    # the first of three rates whose mean is below 0.2, per resample (3 = none)
    assert list(stats.first_below([[0.5, 0.1, 0.5], [0.1, 0.3, 0.5], [0.1, 0.1, 0.5]], 0.2)) == [
        1, 0, 3]


BOUNDARY_SEEDS = range(10)


def boundary_scenario(lr, arm, seed):
    """The fake boundary: at 4e-5 ETS's seeds 0-4 fall to accuracy 0 (5/10 below the base), GMTS
    keeps every seed (0/10), none collapses on seed 9 (1/10); at 2e-5 nothing diverges. AGAIN marks
    a run made a second time."""
    accuracy, acc_last = 0.6, 0.6
    if lr == 4e-5 and arm == "ets":
        accuracy = 0.0 if seed < 5 else 0.2
    if lr == 4e-5 and arm == "none" and seed == 9:
        acc_last = 0.1
    if lr == 4e-5 and arm == "gmts" and AGAIN.get("flip") and seed == 0:
        # the repeat on "another machine" diverges
        accuracy = 0.0
    return accuracy, acc_last


AGAIN = {}


def boundary_run_logged(cmd, log_path, threads, calls=None):
    script = os.path.basename(cmd[1])
    if calls is not None:
        calls.append(script)
    if script == "train.py":
        out, lr, arm = flag(cmd, "--output-dir"), float(flag(cmd, "--lr")), flag(cmd, "--selector")
        seed, steps = int(flag(cmd, "--seed")), int(flag(cmd, "--steps"))
        _, acc_last = boundary_scenario(lr, arm, seed)
        with open(os.path.join(out, "metrics.jsonl"), "w") as fh:
            fh.writelines(json.dumps({"step": step, "accuracy": 0.4 if step == 1 else acc_last,
                                      "grad_norm": 1.0, "time_rollout_s": 1.0, "time_train_s": 1.0,
                                      "response_len_mean": 5.0}) + "\n" for step
                          in range(1, steps + 1))
        ckpt = os.path.join(out, "checkpoints", f"step-{steps:06d}")
        os.makedirs(ckpt)
        with open(os.path.join(ckpt, "which.json"), "w") as fh:
            json.dump([lr, arm, seed], fh)
        return 7.0
    model, output = flag(cmd, "--model"), flag(cmd, "--output")
    if os.path.exists(os.path.join(model, "which.json")):
        with open(os.path.join(model, "which.json")) as fh:
            accuracy = boundary_scenario(*json.load(fh))[0]
        scores = [accuracy + (b - 0.25) * min(1.0, accuracy / 0.25) for b in BASE]  # mean: accuracy
    else:
        scores = BASE
    write_fake_eval(output, scores)
    return 3.0


def test_boundary_rates_pairs_records_resume_and_repeats(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(lc, "run_logged", lambda *a: boundary_run_logged(*a, calls=calls))
    results, records = tmp_path / "map", tmp_path / "records"
    argv = ["--map-boundary", "--model", "fake-model", "--lrs", "2e-5,4e-5", "--seeds-at",
            "2e-5,4e-5=0-9", "--arms", "none,ets,gmts", "--steps", "4", "--bootstrap", "400",
            "--work-dir", str(tmp_path / "work"), "--results", str(results), "--records",
            str(records), "--parallel", "2"]
    args = lc.parse_args(argv)
    assert args.extend_lrs == [] and lc.seeds_for(args, 4e-5) == list(range(10))
    # --max-runs: this invocation starts 7 runs, the next goes on (resumable run by run)
    assert lc.main(argv + ["--max-runs", "7"]) == 0
    assert calls.count("train.py") == 7
    assert (len(json.loads(results.with_suffix(".json").read_text())["meta"]["left_for_later"])
            == 60 - 7)
    assert lc.main(argv) == 0
    assert calls.count("train.py") == 60
    report = json.loads(results.with_suffix(".json").read_text())
    cells = report["arms"]
    ets, gmts, none = (cells["4e-05"][a]["intervals"] for a in ("ets", "gmts", "none"))
    assert (ets["diverged"], ets["n"], gmts["diverged"], none["diverged"]) == (5, 10, 0, 1)
    assert ets["wilson95"] == pytest.approx([0.2365931, 0.7634069], abs=5e-8)
    assert ets["exact95"] == pytest.approx([0.1870860, 0.8129140], abs=5e-8)
    assert ets["bootstrap"] == "over seeds and problems"
    lo, hi = ets["accuracy_seeds_problems95"]
    assert lo <= cells["4e-05"]["ets"]["accuracy"] <= hi and hi - lo > 0
    pairs = {(p["arm"], p["ref"]): p for p in report["rate_pairs"]["4e-05"]}
    gv = pairs["gmts", "ets"]
    assert gv["rate_pairing"] == "paired by seed, 10 pairs" and gv["rate_difference"] == -0.5
    assert gv["rate_told_apart"] and gv["rate_difference95"][1] < 0
    assert not pairs["gmts", "none"]["rate_told_apart"]                 # 0/10 against 1/10
    assert gv["accuracy_told_apart"] and gv["accuracy_difference"] == pytest.approx(0.6 - 0.1)
    assert not pairs["gmts", "none"]["accuracy_told_apart"] and pairs["gmts", "none"][
        "accuracy_difference"] == 0
    # the first rate below the base: ETS at 4e-5 (mean 0.1), GMTS and none at none of the rates run
    fb = report["first_below"]
    assert fb["ets"]["observed"] == "4e-05" and fb["gmts"]["observed"] == "> 4e-05"
    # the reading is generated from the numbers
    reading = report["reading"]
    assert "- gmts vs ets: 0/10 against 5/10, -50 points" in "\n".join(reading)
    assert any(line.startswith("- gmts vs none: 0/10 against 1/10") and
               line.endswith("no difference can be told apart.") for line in reading)
    assert any("gmts diverged less often" in line for line in reading)
    md = results.with_suffix(".md").read_text()
    assert ("## Divergence rates and intervals" in md
            and "| 4e-05 | ets | 5/10 | 50% [24, 76] | [19, 81] |" in md)
    # one record per run, with its CPU, revision, scores and settings
    names = sorted(os.listdir(records))
    assert len([n for n in names if n.startswith("lr")]) == 60 and len(
        [n for n in names if n.startswith("base")]) == 1
    rec = json.loads(
        (records / next(n for n in names if n.startswith("lr4e-05_ets_s0."))).read_text())
    assert rec["cpu_name"] == lc.cpu_name() and "revision" in rec and rec["accuracy"] == 0.0
    assert len(rec["scores"]) == 10 and rec["settings"]["steps"] == 4 and "run_dir" not in rec

    # a fresh machine: no work folder, only the records; nothing is trained again, the table is the
    # same
    shutil.rmtree(tmp_path / "work")
    calls.clear()
    assert lc.main(argv) == 0
    # the base only, recorded a second time
    assert "train.py" not in calls and calls == ["eval.py"]
    again = json.loads(results.with_suffix(".json").read_text())
    assert again["rate_pairs"] == report["rate_pairs"] and again["first_below"] == report[
        "first_below"]
    assert len(again["base_records"]) == 2

    # the same run on another CPU (--repeat): both records kept, the table uses the first and shows
    # the flip
    monkeypatch.setattr(lc, "cpu_name", lambda: "Other CPU")
    AGAIN["flip"] = True
    try:
        assert lc.main(argv + ["--repeat", "lr4e-05_gmts_s0"]) == 0
    finally:
        AGAIN.clear()
    assert calls.count("train.py") == 1
    assert len([n for n in os.listdir(records) if n.startswith("lr4e-05_gmts_s0.")]) == 2
    flipped = json.loads(results.with_suffix(".json").read_text())
    assert flipped["arms"]["4e-05"]["gmts"]["intervals"]["diverged"] == 0
    (rep,) = flipped["repeats"]
    assert rep["key"] == "lr4e-05_gmts_s0" and rep["again"]["cpu_name"] == "Other CPU"
    assert rep["verdict"] == "flipped" and rep["diverged_again"] == ["below base"]
    assert rep["difference"] == pytest.approx(-0.6)
    assert "| lr4e-05_gmts_s0 |" in results.with_suffix(".md").read_text()
    # the repeat is itself finished: running again starts nothing
    calls.clear()
    assert lc.main(argv + ["--repeat", "lr4e-05_gmts_s0"]) == 0 and "train.py" not in calls
    # --plan: nothing left
    capsys.readouterr()
    assert lc.main(argv + ["--plan", "--seeds-at", "8e-5=0-1", "--lrs", "2e-5,4e-5,8e-5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("6 of 66 runs to do") and "lr 8e-05: 6 runs" in out and "estimate:" in out


def test_seed_options_refuse_bad_values():
    assert lc.parse_seeds("0-2,5, 7") == [0, 1, 2, 5, 7]
    for bad in (["--seeds", "3-1"], ["--seeds-at", "2e-5"], ["--seeds-at", "x=0-9"],
                ["--max-runs", "-1"]):
        cmd = [sys.executable, "bench/learning_check.py", *bad, "--report-only"]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60,
                              check=False)
        last = done.stderr.strip().splitlines()[-1]
        assert done.returncode == 2 and last.startswith("learning_check.py: error"), last


def test_existing_map_records_rebuilt(tmp_path):
    """The 69 runs of the map as committed records (imported from its results file, append-only):
    --report-only rebuilds the map from them alone (no work folder, no model) with the verdicts
    issue #34 quotes, and the new intervals on its 3-seed cells."""
    records = tmp_path / "records"
    records.mkdir()
    committed = os.path.join(ROOT, "bench", "results", "lr_map_runs")
    for name in os.listdir(committed):
        with open(os.path.join(committed, name)) as fh:
            record = json.load(fh)
        if record.get("imported_from") == "bench/results/lr_map.json":
            shutil.copy(os.path.join(committed, name), records / name)
    assert len(os.listdir(records)) == 70                                  # 69 runs and the base
    argv = ["--map", "--report-only", "--records", str(records), "--results", str(tmp_path / "map"),
            "--work-dir", str(tmp_path / "work"), "--bootstrap", "400"]
    assert lc.main(argv) == 0
    new = json.loads((tmp_path / "map.json").read_text())
    assert new["base"]["accuracy"] == 0.2125
    diverged = {(lr, arm): e["n_diverged"] for lr, arms in new["arms"].items() for arm,
                e in arms.items()}
    assert len(diverged) == 23 and sum(diverged.values()) == 8
    assert diverged == {**{k: 0 for k in diverged}, ("4e-05", "ets"): 1, ("4e-05", "random"): 1,
                        ("8e-05", "none"): 2, ("8e-05", "gmts"): 1, ("8e-05", "ets-exclude"): 3}
    assert new["arms"]["4e-05"]["gmts"]["seed_accuracies"][0] == 0.36      # "36.0%" in the issue
    assert new["arms"]["8e-05"]["gmts"]["seed_accuracies"][0] == 0.2325
    cell = new["arms"]["4e-05"]["ets"]
    assert (cell["ci95"] is not None
            and cell["intervals"]["bootstrap"] == "over seeds only (no per-problem scores)")
    assert cell["intervals"]["exact95"] == pytest.approx([0.0084037587, 0.9057006759])
    assert cell["cpus"] == {"Intel(R) Xeon(R) Processor": 3} and cell["revisions"] == {
        "not recorded": 3}
    # their η was summed in float32: flagged in the cell and the table
    assert cell["grad_noise_float32_runs"] == 3
    md = (tmp_path / "map.md").read_text()
    assert "| 0.996† | 1002.5† |" in md and "†: 69 runs' η and B_simple were measured" in md
    pairs = {(p["arm"], p["ref"]): p for p in new["rate_pairs"]["4e-05"]}
    assert not pairs["gmts", "ets"]["rate_told_apart"]                     # 0/3 against 1/3
    assert any(line.startswith("- gmts vs ets: 0/3 against 1/3")
               and "no difference can be told apart" in line
               for line in new["reading"])
    # records of another setting are counted, not used; the model is compared by its folder's name
    other = lc.parse_args(argv + ["--steps", "10"])
    assert lc.load_records(other, "/elsewhere/SmolLM2-135M-Instruct") == ({}, [], 70)
    assert len(lc.load_records(lc.parse_args(argv), "/elsewhere/SmolLM2-135M-Instruct")[0]) == 69


def test_import_results_reproduces_the_table(tmp_path, monkeypatch):
    """--import-results: an older results file's runs become records (no per-problem scores) from
    which --report-only gives the same verdicts, accuracies and intervals over problems; importing
    twice adds nothing."""
    monkeypatch.setattr(lc, "run_logged", fake_run_logged)
    results = tmp_path / "old"
    argv = ["--map", "--model", "fake-model", "--lrs", "1e-5,4e-5", "--arms",
            "none,gmts,ets-exclude", "--seeds", "0,1", "--steps", "4", "--bootstrap", "200",
            "--work-dir", str(tmp_path / "work"), "--results", str(results), "--records",
            str(tmp_path / "unused")]
    assert lc.main(argv) == 0
    old = json.loads(results.with_suffix(".json").read_text())
    records = tmp_path / "records"
    again = ["--map", "--model", "fake-model", "--lrs", "1e-5,4e-5", "--arms",
             "none,gmts,ets-exclude", "--seeds", "0,1", "--steps", "4", "--bootstrap", "200",
             "--work-dir", str(tmp_path / "fresh"), "--results", str(tmp_path / "new"), "--records",
             str(records), "--report-only", "--import-results", str(results.with_suffix(".json"))]
    assert lc.main(again) == 0
    new = json.loads((tmp_path / "new.json").read_text())
    assert new["base"] == old["base"] and set(new["arms"]) == set(old["arms"])
    for lr, arms in old["arms"].items():
        for arm, e in arms.items():
            mine = new["arms"][lr][arm]
            for key in ("diverged", "seeds", "seeds_run", "seed_accuracies", "accuracy", "ci95",
                        "vs_base", "vs_none"):
                assert mine.get(key) == e.get(key), (lr, arm, key)
            assert mine["intervals"]["bootstrap"] == "over seeds only (no per-problem scores)"
    rec = json.loads(
        next((records / n) for n in os.listdir(records)
             if n.startswith("lr4e-05_gmts_s1.")).read_text())
    assert rec["scores"] is None and rec["cpu_name"] == lc.cpu_name() and rec["revision"] is None
    assert lc.import_results(lc.parse_args(again), again[-1]) == 0
