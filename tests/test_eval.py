"""eval.py and its logic (gmts/tools/evaluate.py, gmts/tools/stats.py): pass@k, bootstrap intervals,
paired comparison, reproducible generation on a tiny random Qwen2, the output files, and clear
errors on bad input."""
import json
import math
import os
import pathlib
import sys
from fractions import Fraction

import numpy as np
import pytest

from conftest import run_python
from gmts.tools import stats
from gmts.tools.evaluate import compare_results, evaluate_model, parse_data_spec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------------------------------
# pass@k

def test_pass_at_k_matches_the_closed_form():
    for n in (1, 2, 5, 16, 33):
        for c in range(n + 1):
            for k in range(1, n + 1):
                expected = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert stats.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12), (n, c, k)
    assert stats.pass_at_k(16, 4, 1) == pytest.approx(4 / 16)           # pass@1 = c / n
    assert stats.pass_at_k(16, 0, 16) == 0.0 and stats.pass_at_k(16, 1, 16) == 1.0


def test_pass_at_k_is_stable_where_the_binomials_overflow_float():
    # C(1024, 512) ~ 1e306: the naive float ratio is at the edge
    n, c, k = 1024, 3, 512
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert stats.pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)
    assert stats.pass_at_k(4096, 1, 2048) == pytest.approx(0.5, rel=1e-12)


def test_pass_at_k_rejects_impossible_counts():
    for n, c, k in [(4, 5, 1), (4, 2, 5), (4, 2, 0), (4, -1, 1)]:
        with pytest.raises(ValueError, match="pass@k"):
            stats.pass_at_k(n, c, k)


def test_pass_k_values_are_powers_of_two_and_the_sample_count():
    assert stats.pass_k_values(1) == [1]
    assert stats.pass_k_values(16) == [1, 2, 4, 8, 16]
    assert stats.pass_k_values(12) == [1, 2, 4, 8, 12]


# --------------------------------------------------------------------------------------------------
# Bootstrap intervals

def test_bootstrap_interval_has_the_binomial_width_and_is_seeded():
    rng = np.random.default_rng(1)
    scores = (rng.random(400) < 0.5).astype(float)
    lo, hi = stats.bootstrap_ci(scores, seed=0, n_resamples=4000)
    se = math.sqrt(scores.mean() * (1 - scores.mean()) / scores.size)
    assert lo < scores.mean() < hi
    # statistics, not rounding: the percentile interval's width from 4000 resamples has a relative
    # sampling error of ~1/√(2 · 4000 · 0.05) ≈ 1.6% per end, and the binomial normal approximation
    # at n = 400 is within a few %; the seed is fixed, so this is one deterministic draw well inside
    # 12%
    assert (hi - lo) == pytest.approx(2 * 1.96 * se, rel=0.12)
    assert stats.bootstrap_ci(scores, seed=0, n_resamples=4000) == [lo, hi]      # reproducible
    # no spread, no width
    assert stats.bootstrap_ci(np.full(50, 0.25), seed=3) == [0.25, 0.25]


def test_average_over_benchmarks_resamples_within_each():
    a, b = np.zeros(100), np.ones(30)
    lo, hi = stats.bootstrap_ci([a, b], seed=0, n_resamples=2000)
    # each benchmark's mean is fixed (no spread inside), so the average of means is exactly 0.5 in
    # every resample; pooling the 130 problems instead would give 30/130 with a non-zero width
    assert lo == hi == 0.5


def test_paired_difference_identical_and_shifted():
    rng = np.random.default_rng(2)
    a = rng.random(200)
    diff, ci = stats.paired_difference(a, a.copy(), seed=0, n_resamples=2000)
    assert diff == 0.0 and ci[0] <= 0.0 <= ci[1] and stats.verdict(ci) == "indistinguishable"
    b = np.clip(a + 0.05 + 0.02 * rng.standard_normal(200), 0, 1)
    diff, ci = stats.paired_difference(a, b, seed=0, n_resamples=2000)
    assert 0 < ci[0] < diff < ci[1] and stats.verdict(ci) == "better"
    diff, ci = stats.paired_difference(b, a, seed=0, n_resamples=2000)
    assert ci[1] < 0 and stats.verdict(ci) == "worse"
    # pairing matters: a small uniform shift is clear when paired, though the scores spread over [0,
    # 1]
    noisy = rng.random(200)
    _, ci_paired = stats.paired_difference(noisy, noisy + 0.02, seed=0, n_resamples=2000)
    assert (ci_paired[0] > 0
            and stats.bootstrap_ci(noisy, seed=0, n_resamples=2000)[1] > noisy.mean() + 0.02)


def test_spread_reports_the_noise_floor():
    s = stats.spread([0.40, 0.42, 0.44])
    assert s["mean"] == pytest.approx(0.42) and s["std"] == pytest.approx(0.02)
    assert s["noise_floor_95"] == pytest.approx(1.96 * math.sqrt(2) * 0.02)


# --------------------------------------------------------------------------------------------------
# Comparing result files (synthetic per-problem files, the format eval.py writes)

def write_records(path, scores, n=4, benchmark="gsm8k:test"):
    with open(path, "w") as fh:
        for pid, score in scores.items():
            correct = round(score * n)
            fh.write(
                json.dumps(
                    {"benchmark": benchmark, "id": pid, "repeat": 0, "n": n, "correct": correct,
                                 "score": correct / n, "completions": []}) + "\n")
    return str(path)


def test_compare_identical_files_contains_zero(tmp_path):
    rng = np.random.default_rng(3)
    scores = {f"p{i}": float(rng.integers(0, 5)) / 4 for i in range(60)}
    a = write_records(tmp_path / "a.jsonl", scores)
    # order must not matter
    b = write_records(tmp_path / "b.jsonl", dict(reversed(list(scores.items()))))
    out = compare_results(a, b, n_bootstrap=2000)
    assert out["difference"] == 0.0 and out["ci95"][0] <= 0 <= out["ci95"][1]
    assert out["verdict"] == "indistinguishable" and out["n_problems"] == 60


def test_compare_clear_shift_excludes_zero(tmp_path):
    rng = np.random.default_rng(4)
    base = {f"p{i}": float(rng.integers(0, 3)) / 4 for i in range(80)}
    a = write_records(tmp_path / "a.jsonl", base)
    # one more right of 4 on each
    b = write_records(tmp_path / "b.jsonl", {k: v + 0.25 for k, v in base.items()})
    out = compare_results(a, b, n_bootstrap=2000)
    assert (out["difference"] == pytest.approx(0.25) and out["ci95"][0] > 0
            and out["verdict"] == "better")
    assert compare_results(b, a, n_bootstrap=2000)["verdict"] == "worse"


def test_compare_refuses_different_problem_sets(tmp_path):
    a = write_records(tmp_path / "a.jsonl", {"p1": 1.0, "p2": 0.0, "p3": 0.5})
    b = write_records(tmp_path / "b.jsonl", {"p1": 1.0, "p2": 0.0, "p4": 0.5})
    with pytest.raises(ValueError, match="different problems"):
        compare_results(a, b)
    c = write_records(tmp_path / "c.jsonl", {"p1": 1.0, "p2": 0.0, "p3": 0.5}, benchmark="math500")
    with pytest.raises(ValueError, match="different benchmarks"):
        compare_results(a, c)
    with pytest.raises(SystemExit) as err:         # the command line says it in one line
        import eval as eval_cli
        eval_cli.main(["--compare", a, b])
    message = str(err.value.code)
    assert message.startswith("error: --compare") and "\n" not in message and (
        "p3" in message or "p4" in message)


def test_data_spec_parsing(tmp_path):
    assert parse_data_spec("gsm8k:test") == ("gsm8k", "test")
    assert parse_data_spec("math500") == ("math500", "test")
    assert parse_data_spec("gsm8k:train") == ("gsm8k", "train")
    assert parse_data_spec("/tmp/x/probs.jsonl") == ("/tmp/x/probs.jsonl", "test")
    assert parse_data_spec("C:/data/probs.jsonl") == ("C:/data/probs.jsonl", "test")


# --------------------------------------------------------------------------------------------------
# Generation on the tiny model

@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from gmts.trainer.models import load_model, load_tokenizer
    return load_model(tiny_model_dir, dtype=__import__("torch").float32, device="cpu").eval(), \
        load_tokenizer(tiny_model_dir)


def write_problems(path, answers):
    with open(path, "w") as fh:
        fh.writelines(json.dumps({"id": f"q{i}", "question": f"What is {i} + {i}?",
                                  "answer": answer}) + "\n" for i, answer in enumerate(answers))
    return str(path)


def texts(result):
    return [[c["text"] for c in r["completions"]] for r in result["records"]]


def test_greedy_evaluation_is_deterministic_and_keeps_train_py_signature(tiny, tmp_path):
    model, tok = tiny
    from gmts.trainer.models import end_of_sequence_ids
    data = write_problems(tmp_path / "p.jsonl", ["1", "2", "3"])
    kwargs = {"limit": 3, "samples": 1, "temperature": 0.0, "max_new_tokens": 6,
                  "eos_ids": end_of_sequence_ids(model, tok), "template": None,
                  "system_prompt": None,
                  "progress": False}
    # exactly train.py's run_eval kwargs
    first = evaluate_model(model, tok, data, seed=0, batch_size=3, **kwargs)
    # other seed, other batching
    again = evaluate_model(model, tok, data, seed=123, batch_size=1, **kwargs)
    assert texts(first) == texts(again) and all(t[0] for t in texts(first))
    assert (isinstance(first["accuracy"], float) and len(first["ci95"]) == 2
            and first["metric"] == "greedy accuracy")


def test_sampling_is_reproducible_and_rewards_are_wired(tiny, tmp_path):
    """Same seed, same samples; another seed, other samples. Then make references out of what the
    model wrote, so the rerun (same seed) must score exactly those samples as correct: accuracy and
    pass@k from real rewards."""
    from gmts.rewards import get_reward
    from gmts.rewards.math import last_number
    model, tok = tiny
    data = write_problems(tmp_path / "p.jsonl", ["0"] * 6)
    kw = {"samples": 4, "temperature": 1.0, "max_new_tokens": 8, "batch_size": 4, "progress": False,
              "n_bootstrap": 500}
    one = evaluate_model(model, tok, data, seed=7, **kw)
    assert texts(one) == texts(evaluate_model(model, tok, data, seed=7, **kw))
    assert texts(one) != texts(evaluate_model(model, tok, data, seed=8, **kw))
    references = []
    for r in one["records"]:
        numbers = [last_number(c["text"]) for c in r["completions"]]
        references.append(next((x for x in numbers if x is not None), "123456789"))
    scored = evaluate_model(model, tok, write_problems(tmp_path / "p.jsonl", references), seed=7,
                            **kw)
    assert texts(scored) == texts(one)
    reward = get_reward("gsm8k")
    expected = [np.mean([reward(c["text"], ref) >= 1 for c in r["completions"]])
                for r, ref in zip(scored["records"], references)]
    assert scored["accuracy"] == pytest.approx(np.mean(expected)) and scored["accuracy"] > 0
    counts = [r["correct"] for r in scored["records"]]
    assert scored["pass_at_k"]["4"] == pytest.approx(np.mean([c > 0 for c in counts]))
    assert scored["pass_at_k"]["2"] == pytest.approx(
        np.mean([stats.pass_at_k(4, c, 2) for c in counts]))
    lo, hi = scored["ci95"]
    assert lo <= scored["accuracy"] <= hi


# --------------------------------------------------------------------------------------------------
# The command line, end to end

def run_cli(*args, cwd):
    return run_python(["eval.py", *args], cwd=cwd, timeout=120)


def test_eval_cli_end_to_end_writes_summary_and_per_problem_files(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "res" / "a.json"
    proc = run_cli("--model", tiny_model_dir, "--data", "arithmetic:test", "arithmetic:validation",
                   "--limit", "3", "--samples", "2", "--temperature", "1.0", "--max-new-tokens",
                   "4", "--batch-size", "2", "--repeat", "2", "--top-k", "50", "--bootstrap", "500",
                   "--output", str(out), "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(out.read_text())
    for field in ("model", "data", "n_problems", "samples", "temperature", "accuracy", "ci95",
                  "pass_at_k", "seed", "benchmarks", "repeat_spread", "problems_file"):
        assert field in summary, field
    assert summary["n_problems"] == 6 and summary["samples"] == 2 and summary["repeats"] == 2
    assert set(summary["pass_at_k"]) == {"1", "2"}
    assert set(summary["benchmarks"]) == {"arithmetic:test", "arithmetic:validation"}
    for entry in summary["benchmarks"].values():
        assert entry["n_problems"] == 3 and len(entry["scores"]) == 3 and len(
            entry["repeat_spread"]["values"]) == 2
        assert entry["ci95"][0] <= entry["accuracy"] <= entry["ci95"][1]
    lines = [json.loads(x) for x in pathlib.Path(summary["problems_file"]).read_text().splitlines()]
    # every problem, every repeat
    assert len(lines) == 2 * 6
    for r in lines:
        assert {"benchmark", "id", "repeat", "question", "reference", "completions", "correct",
                "score"} <= set(r)
        assert len(r["completions"]) == 2 and all(
            {"text", "reward"} <= set(c) for c in r["completions"])
        assert r["correct"] == sum(c["reward"] >= 1 for c in r["completions"])
    assert "average" in proc.stdout and "average@2" in proc.stdout and "95% CI" in proc.stdout
    # the result compared with itself (summary vs its own per-problem file): no difference
    import eval as eval_cli
    cmp = eval_cli.main(["--compare", str(out), summary["problems_file"], "--bootstrap", "200"])
    assert (cmp["difference"] == 0.0 and cmp["verdict"] == "indistinguishable"
            and cmp["n_problems"] == 6)
    assert "B is indistinguishable from A" in capsys.readouterr().out


def test_eval_cli_bad_input_gives_one_line_errors(tiny_model_dir, tmp_path):
    missing = run_cli("--model", str(tmp_path / "no-such-model"), "--data", "arithmetic",
                      cwd=tmp_path)
    assert missing.returncode != 0
    assert missing.stderr.strip().splitlines() == [
        f"error: --model {str(tmp_path / 'no-such-model')!r}: no such folder"]
    import eval as eval_cli
    with pytest.raises(SystemExit) as err:
        eval_cli.main(
            ["--model", tiny_model_dir, "--data", "no-such-benchmark", "--quiet",
             "--max-new-tokens", "8"])
    message = str(err.value.code)
    assert message.startswith("error: --data 'no-such-benchmark'") and "unknown source" in message
    assert "\n" not in message
    # a bad flag: a usage error (status 2), one line
    with pytest.raises(SystemExit) as err:
        eval_cli.main(["--model", tiny_model_dir, "--samples", "0"])
    assert (err.value.code == 2
            and str(err.value) == "eval.py: error: --samples must be an integer >= 1, got 0")
    # the model's context holds the prompt and the answer
    with pytest.raises(SystemExit) as err:
        eval_cli.main(
            ["--model", tiny_model_dir, "--data", "arithmetic", "--max-new-tokens", "1024"])
    assert err.value.code == 2 and "--max-new-tokens 1024 does not fit the model's context" in str(
        err.value)


def test_train_eval_every_logs_the_same_evaluation(tiny_model_dir, tmp_path):
    import train
    out = tmp_path / "run"
    train.main(
        ["--model", tiny_model_dir, "--data", "arithmetic", "--steps", "2", "--prompts-per-step",
         "2",
                "--group-size", "2", "--max-new-tokens", "3", "--micro-batch-size", "2", "--device",
         "cpu",
                "--output-dir", str(out), "--eval-every", "2", "--eval-data", "arithmetic:test",
         "--eval-limit", "3",
                "--eval-samples", "2", "--eval-temperature", "1.0"])
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert "eval_accuracy" not in metrics[0]
    logged = metrics[1]
    assert logged["eval_data"] == "arithmetic:test"
    assert logged["eval_ci95"][0] <= logged["eval_accuracy"] <= logged["eval_ci95"][1]


# --------------------------------------------------------------------------------------------------
# Rows per sampling call: evaluation never holds more answers at once than the rollout does

def test_sampling_calls_cover_every_answer_once_within_the_bounds():
    from gmts.tools.evaluate import sampling_calls
    for n, samples, batch, rows in [(7, 3, 4, 0), (7, 3, 4, 6), (7, 3, 4, 2), (5, 16, 8, 128),
                                    (5, 16, 8, 5), (1, 1, 1, 1), (9, 4, 100, 8)]:
        calls = sampling_calls(n, samples, batch, rows)
        answers = sorted((q, first + i) for call in calls for q, first, k in call for i in range(k))
        assert answers == [(q, s) for q in range(n) for s in range(samples)]
        bound = rows or batch * samples
        for call in calls:
            assert sum(k for _, _, k in call) <= bound and len(call) <= batch
            assert len({k for _, _, k in call}) == 1          # one group size per sample() call
        if samples <= bound:      # as few calls as the bounds allow
            assert len(calls) == math.ceil(n / max(1, min(batch, bound // samples)))


class RowCounter:
    """Wraps a sampler function and records the rows (prompts x group size) of every call."""

    def __init__(self, fn):
        self.fn, self.rows = fn, []

    def __call__(self, model, prompts, **kw):
        self.rows.append(len(prompts) * kw["group_size"])
        return self.fn(model, prompts, **kw)


def test_answers_do_not_depend_on_how_the_calls_split_the_problems(tiny, tmp_path, monkeypatch):
    """One seed per problem, drawn up front: any --batch-size and any --max-rows of at least
    --samples give the same answers; --max-rows below --samples draws each problem's answers over
    several calls of at most that many rows (reproducibly)."""
    from gmts.tools import evaluate
    counter = RowCounter(evaluate.sample)
    monkeypatch.setattr(evaluate, "sample", counter)
    model, tok = tiny
    data = write_problems(tmp_path / "p.jsonl", ["0"] * 5)
    kw = {"samples": 3, "temperature": 1.0, "max_new_tokens": 6, "progress": False,
          "n_bootstrap": 200, "seed": 3}
    whole = evaluate_model(model, tok, data, batch_size=5, **kw)
    assert counter.rows == [15]
    counter.rows.clear()
    assert texts(evaluate_model(model, tok, data, batch_size=2, **kw)) == texts(whole)
    assert counter.rows == [6, 6, 3]
    counter.rows.clear()
    assert texts(evaluate_model(model, tok, data, batch_size=5, max_rows=7, **kw)) == texts(whole)
    assert counter.rows == [6, 6, 3]
    counter.rows.clear()
    split = evaluate_model(model, tok, data, batch_size=5, max_rows=2, **kw)
    assert counter.rows == [2, 1] * 5 and [len(t) for t in texts(split)] == [3] * 5
    assert texts(evaluate_model(model, tok, data, batch_size=5, max_rows=2, **kw)) == texts(split)
    # the first part of each problem keeps the problem's seed: its first 2 answers are the same
    assert [t[:2] for t in texts(split)] == [t[:2] for t in texts(whole)]
    assert split["records"][0]["n"] == 3 and split["max_rows"] == 2


def test_train_evaluates_in_calls_no_larger_than_its_rollout(tiny_model_dir, tmp_path,
                                                              monkeypatch):
    """--eval-every with --rollout-batch-size 1 x --group-size 2: every evaluation call holds at
    most the rollout's 2 rows, also with --eval-samples 3 (each problem over two calls)."""
    from gmts.tools import evaluate
    from gmts.trainer import rollout
    import train
    evaluating, rolling = RowCounter(evaluate.sample), RowCounter(rollout.sample)
    monkeypatch.setattr(evaluate, "sample", evaluating)
    monkeypatch.setattr(rollout, "sample", rolling)
    train.main(["--model", tiny_model_dir, "--data", "arithmetic", "--steps", "1",
                "--prompts-per-step", "4", "--group-size", "2", "--rollout-batch-size", "1",
                "--max-new-tokens", "3", "--micro-batch-size", "2", "--device", "cpu",
                "--output-dir", str(tmp_path / "run"), "--eval-every", "1",
                "--eval-data", "arithmetic:test", "--eval-limit", "3", "--eval-samples", "3",
                "--eval-temperature", "1.0"])
    assert rolling.rows == [2, 2, 2, 2]
    assert evaluating.rows == [2, 1] * 3


def test_train_eval_max_rows_sets_the_evaluation_calls_and_keeps_its_answers(tiny_model_dir,
                                                                              tmp_path, capsys,
                                                                              monkeypatch):
    """--eval-max-rows 4 (3 problems x 2 samples): calls of 2 problems (4 rows) and 1, above the
    rollout's 2 rows, and the same held-out answers as calls of 2 rows (one seed per problem).
    --eval-max-rows -1 is refused."""
    from gmts.tools import evaluate
    import train
    answers = []

    def recorded(model, prompts, **kw):            # every call's answers, in problem order
        roll = evaluate_sample(model, prompts, **kw)
        answers.extend(row[mask].tolist() for row, mask in zip(roll.completion_ids,
                                                                roll.valid_mask))
        return roll
    evaluate_sample, evaluating = evaluate.sample, RowCounter(recorded)
    monkeypatch.setattr(evaluate, "sample", evaluating)
    common = ["--model", tiny_model_dir, "--data", "arithmetic", "--steps", "1",
              "--prompts-per-step", "2", "--group-size", "2", "--rollout-batch-size", "1",
              "--max-new-tokens", "3", "--micro-batch-size", "2", "--device", "cpu",
              "--eval-before", "--eval-data", "arithmetic:test", "--eval-limit", "3",
              "--eval-samples", "2", "--eval-temperature", "1.0"]
    seen = {}
    for rows, calls in (("0", [2, 2, 2]), ("4", [4, 2])):
        evaluating.rows.clear(), answers.clear()
        train.main(common + ["--eval-max-rows", rows, "--output-dir", str(tmp_path / rows)])
        assert evaluating.rows == calls                    # the evaluation before the first step
        seen[rows] = list(answers)
    assert len(seen["4"]) == 6 and seen["4"] == seen["0"]
    with pytest.raises(SystemExit) as err:
        train.main(common + ["--eval-max-rows", "-1", "--output-dir", str(tmp_path / "bad")])
    refusal = capsys.readouterr().err
    assert err.value.code == 2 and "--eval-max-rows must be an integer >= 0" in refusal


def test_eval_cli_max_rows_bounds_every_sampling_call(tiny_model_dir, tmp_path, monkeypatch):
    import eval as eval_cli
    from gmts.tools import evaluate
    counter = RowCounter(evaluate.sample)
    monkeypatch.setattr(evaluate, "sample", counter)
    common = ["--model", tiny_model_dir, "--data", "arithmetic:test", "--limit", "3", "--samples",
              "2", "--max-new-tokens", "3", "--bootstrap", "200", "--quiet"]
    eval_cli.main(common + ["--batch-size", "2", "--output", str(tmp_path / "a.json")])
    assert counter.rows == [4, 2]                      # --batch-size 2 x --samples 2
    counter.rows.clear()
    summary = eval_cli.main(common + ["--max-rows", "3", "--output", str(tmp_path / "b.json")])
    assert counter.rows == [2, 2, 2] and summary["max_rows"] == 3
    with pytest.raises(SystemExit) as err:
        eval_cli.main(common + ["--max-rows", "-1"])
    assert err.value.code == 2 and "--max-rows must be an integer >= 0" in str(err.value)


def test_the_evaluation_bar_moves_once_per_sampling_call(digit_model_dir, digit_data, monkeypatch):
    """The bar counts problems, but a call's problems end together: one update per call (5
    problems, 2 per call: 2, 2, 1), so the first reading's rate is the call's, not one problem in
    the call's whole time."""
    from gmts.tools import evaluate
    from gmts.trainer.models import load_model, load_tokenizer
    import torch
    updates = []

    class Bar:
        def __init__(self, *args, **kwargs):
            self.total = kwargs.get("total")

        def update(self, n):
            updates.append(n)

        def set_postfix(self, *args, **kwargs):
            pass

        def close(self):
            pass
    monkeypatch.setattr(evaluate, "Progress", Bar)
    model = load_model(digit_model_dir, dtype=torch.float32, device=torch.device("cpu"))
    result = evaluate.evaluate_model(model, load_tokenizer(digit_model_dir), digit_data, limit=5,
                                     samples=2, max_new_tokens=2, batch_size=2, progress=True)
    assert updates == [2, 2, 1] and len(result["records"]) == 5


def test_an_evaluation_inside_the_training_bar_writes_no_escape_sequence_to_a_log(
        digit_model_dir, digit_data, capsys):
    """stderr not a terminal (a log file): the in-training evaluation's bar, nested in train.py's,
    moves no cursor (tqdm's nested bars write ESC [A), so the log holds plain lines."""
    from tqdm import tqdm
    from gmts.tools import evaluate
    from gmts.trainer.models import load_model, load_tokenizer
    import torch
    model = load_model(digit_model_dir, dtype=torch.float32, device=torch.device("cpu"))
    outer = tqdm(total=2, desc="train", file=sys.stderr)
    for _ in range(2):
        evaluate.evaluate_model(model, load_tokenizer(digit_model_dir), digit_data, limit=3,
                                samples=2, max_new_tokens=2, batch_size=2, progress="eval")
        outer.update(1)
    outer.close()
    err = capsys.readouterr().err
    assert "eval" in err and "train" in err and "\x1b" not in err, repr(err[-300:])
