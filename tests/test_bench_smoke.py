"""The bench scripts still run (tiny shapes, seconds), so they cannot rot between the times someone
measures.

These are rot checks, not measurements: each script runs in its --smoke / quick mode and we check
what it wrote. The four scripts start together (each is mostly process start-up and imports) and the
test waits for all of them.
"""
import importlib.util
import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAVE_TRL = importlib.util.find_spec("trl") is not None


def start(args, log):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1",
               TOKENIZERS_PARALLELISM="false")
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT)


def test_bench_scripts_run_in_smoke_mode(digit_model_dir, digit_data, tmp_path):
    outs = {name: tmp_path / f"{name}.json" for name in ("rollout", "step", "head", "train_pass")}
    commands = {
        "rollout": ["bench/bench_rollout.py", "--smoke", "--out", str(outs["rollout"])],
        "step": ["bench/bench_step.py", "--smoke", "--model-dir", digit_model_dir, "--data",
                 digit_data, "--work-dir", str(tmp_path / "step"), "--out", str(outs["step"])]
                + ([] if HAVE_TRL else ["--sides", "ours"]),
        "head": ["bench/bench_head.py", "--tokens", "64", "--reps", "1", "--no-sweep",
                 "--big-tokens", "0", "--methods", "naive", "trl", "ours", "torch", "--out",
                 str(outs["head"])],
        "train_pass": ["bench/bench_train_pass.py", "--smoke", "--out", str(outs["train_pass"])],
    }
    procs = {}
    for name, args in commands.items():
        with open(tmp_path / f"{name}.log", "w") as log:   # the child keeps its own descriptor
            procs[name] = start(args, log)
    for name, proc in procs.items():
        assert proc.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()[-3000:]

    rollout = json.loads(outs["rollout"].read_text())
    assert set(rollout["summary"]) == {"generate@G2", "plain@G2", "ours@G2"}
    for run in rollout["runs"]:
        assert 0 < run["tokens"] <= 2 * 8 and run["tokens_per_s"] > 0
    # The tiny model's prompt and seed are the same for ours and plain: the same samples
    # (tests/test_rollout.py).
    by_method = {r["method"]: r for r in rollout["runs"]}
    assert by_method["ours"]["tokens"] == by_method["plain"]["tokens"]

    step = json.loads(outs["step"].read_text())
    ours = [r for r in step["runs"] if r["side"] == "ours"]
    assert len(ours) == 1 and "error" not in ours[0], ours
    for valid, selected in zip(ours[0]["valid_tokens"], ours[0]["selected_tokens"]):
        assert selected == math.ceil(0.2 * valid)
    assert 0 <= step["summary"]["ours"]["score_select_share"] < 1
    assert step["summary"]["ours"]["median_peak_gb"] > 0
    assert (step["summary"]["ours"]["median_tokens_per_s"] > 0
            and step["settings"]["loss"].startswith("--loss-norm all"))
    if HAVE_TRL:
        trl = step["summary"]["trl"]
        assert trl["median_step_s"] > 0 and trl["median_peak_gb"] > 0

    head = json.loads(outs["head"].read_text())
    runs = {r["method"]: r for r in head["runs"]}
    assert set(runs) == {"naive", "trl", "ours", "torch"}
    assert not any("error" in r for r in runs.values()), runs
    # same inputs, same checksums up to float32 regrouping (u = 6e-8): each logit is an 896-term dot
    # product, whose rounding errors (random in sign) grow like √896 u ≈ 2e-6 relative, and the
    # log-softmax over 151,936 logits adds a few u log V; summed over the tokens the relative error
    # of logp_sum stays ~2e-6, under 1e-5. The head gradient's norm sums tokens x vocabulary
    # products that each method groups by its own chunks: ~1e-5, under 1e-4.
    # Each token's log p against float64 on the same inputs: its logit, an 896-term dot product
    # (|z| < 3 here), is off by ~1e-6 and the log-sum-exp over 151,936 terms (cascade sums:
    # ~log2(V) u) by as much, a few 1e-6 in all; 1e-4 is far above that and far below the error
    # of a wrong token or a missing temperature (order 1).
    for method in ("trl", "ours", "torch"):
        assert math.isclose(runs[method]["logp_sum"], runs["naive"]["logp_sum"], rel_tol=1e-5)
        assert math.isclose(runs[method]["grad_w_norm"], runs["naive"]["grad_w_norm"], rel_tol=1e-4)
        assert math.isclose(runs[method]["entropy_sum"], runs["naive"]["entropy_sum"],
                            rel_tol=1e-5)
    for method, run in runs.items():
        assert run["logp_dtype"] == "float32"
        assert run["logp_max_abs_error"] < 1e-4, (method, run)

    # the training pass, old (rollout order, full width) vs new (grouped, trimmed; and by a token
    # budget): the same gradient in float32 up to regrouped sums (~1e-6 relative on a tiny model's
    # few hundred terms; 1e-4 is far above that and far below a missing or doubled row, ~1/8), and
    # the new passes compute no more tokens
    train_pass = json.loads(outs["train_pass"].read_text())["sides"]
    for side in ("new", "tokens"):
        assert train_pass[side]["grad_norm_rel_diff_vs_old"] < 1e-4
        assert train_pass[side]["computed_tokens"] <= train_pass["old"]["computed_tokens"]
