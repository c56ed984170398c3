"""gmts.tools.analyze (the paper's Figures 2-3 measurements) and gmts.tools.plot, on tiny offline
models.

The per-token gradient norms are checked against a direct computation written here independently:
the model's own full logits, log_softmax, and one torch.autograd.grad of the token objective per
token."""
import json
import math
import os
import pathlib
import sys

import pytest
import torch

from conftest import run_python
from gmts.tools import analyze, plot, stats
from gmts.trainer.rollout import sample
from gmts.tools.toy import tiny_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _prompt(tok, text="Say 1"):
    ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                  tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def _batch(model, tok, group_size=4, max_new_tokens=5, seed=0):
    prompts = [_prompt(tok, "Say 1"), _prompt(tok, "Say 2")]
    roll = sample(model, prompts, group_size=group_size, max_new_tokens=max_new_tokens,
                  eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id,
                  generator=torch.Generator().manual_seed(seed))
    return prompts, roll


def direct_token_gradients(model, prompt, completion, advantage, params, *, beta=0.0,
                           ref_model=None, temperature=1.0):
    """Independent reference: ||∇θ log π(o_t)|| and ||∇θ ℓ_t|| for every token t of one answer, from
    the full logits. ℓ_t = r A - β (π_ref/π - log(π_ref/π) - 1) with r = π/π_old, π_old = π (a
    constant copy)."""
    ids = torch.tensor([prompt + completion])
    P = len(prompt)
    ref_logp = None
    if ref_model is not None:
        with torch.no_grad():
            ref_all = torch.log_softmax(ref_model(input_ids=ids).logits[0].double(), -1)
        ref_logp = ref_all[P - 1 + torch.arange(len(completion)), torch.tensor(completion)]
    logp_norms, obj_norms, entropies = [], [], []
    for t, token in enumerate(completion):
        logits = model(input_ids=ids).logits[0, P - 1 + t].double() / temperature
        logp_all = torch.log_softmax(logits, -1)
        entropies.append(float(-(logp_all.exp() * logp_all).sum().detach()))
        logp = logp_all[token]
        g = torch.autograd.grad(logp, params, retain_graph=True)
        logp_norms.append(math.sqrt(sum(float(x.double().pow(2).sum()) for x in g)))
        objective = torch.exp(logp - logp.detach()) * advantage
        if beta:
            d = ref_logp[t] - logp
            objective = objective - beta * (torch.exp(d) - d - 1)
        g = torch.autograd.grad(objective, params)
        obj_norms.append(math.sqrt(sum(float(x.double().pow(2).sum()) for x in g)))
    return logp_norms, obj_norms, entropies


def test_gradient_norms_equal_direct_autograd_per_token():
    model, tok = tiny_model(favour="12 ", dtype=torch.float64)
    prompts, roll = _batch(model, tok)
    # G = 4, unbiased std: A = +1.5 / -0.5 and ±0.866
    rewards = [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    records = analyze.analyze_groups(model, prompts, roll, rewards, params="all", progress=False)
    assert len(records) == 8
    params = list(model.parameters())
    for rec in records:
        completion = roll.completion_ids[rec["answer"]][roll.valid_mask[rec["answer"]]].tolist()
        logp_norms, obj_norms, entropies = direct_token_gradients(
            model, prompts[rec["group"]], completion,
                                                                  rec["advantage"], params)
        assert rec["n_tokens"] == len(completion) == len(rec["grad_logp_norm"])
        # float64: the same forward and a backward from the same token's log π, ~1e-14 apart.
        # (Qwen2's RMSNorm runs in float32 inside: its inputs are the same, and upstream gradients
        # ~1e-16 apart round to the same float32 values except with probability ~1e-16 / 6e-8 per
        # element, so it adds nothing in practice.)
        torch.testing.assert_close(torch.tensor(rec["grad_logp_norm"]), torch.tensor(logp_norms),
                                   rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(torch.tensor(rec["grad_objective_norm"]),
                                   torch.tensor(obj_norms), rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(torch.tensor(rec["entropy"]), torch.tensor(entropies), rtol=1e-9,
                                   atol=1e-12)
        # On-policy, β = 0: ω = A exactly, the GMTS score is |E·A|, ε = 1 - p.
        assert rec["omega"] == pytest.approx([rec["advantage"]] * rec["n_tokens"])
        assert rec["gmts_score"] == pytest.approx(
            [abs(e * rec["advantage"]) for e in rec["entropy"]])
        assert rec["epsilon"] == pytest.approx([1 - math.exp(lp) for lp in rec["logp"]])
    assert {round(r["advantage"], 4) for r in records} == {1.5, -0.5, 0.866, -0.866}


def test_last_layers_option_and_kl_term_match_direct_autograd():
    model, tok = tiny_model(favour="12 ", dtype=torch.float64, layers=3)
    ref, _ = tiny_model(favour="12 ", dtype=torch.float64, layers=3, seed=1)     # a different π_ref
    prompts, roll = _batch(model, tok, max_new_tokens=4)
    params, cut = analyze.analysis_parameters(model, "last:1")
    last = model.get_decoder().layers[-1]
    expected = {id(p) for p in [*last.parameters(), *model.get_decoder().norm.parameters(),
                                model.get_output_embeddings().weight]}
    assert {id(p) for p in params} == expected and cut is last
    rewards = [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    records = analyze.analyze_groups(model, prompts, roll, rewards, params="last:1", beta=0.1,
                                     ref_model=ref, progress=False)
    for rec in records[:3]:
        completion = roll.completion_ids[rec["answer"]][roll.valid_mask[rec["answer"]]].tolist()
        logp_norms, obj_norms, _ = direct_token_gradients(model, prompts[rec["group"]], completion,
                                                          rec["advantage"], params, beta=0.1,
                                                          ref_model=ref)
        torch.testing.assert_close(torch.tensor(rec["grad_logp_norm"]), torch.tensor(logp_norms),
                                   rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(torch.tensor(rec["grad_objective_norm"]),
                                   torch.tensor(obj_norms), rtol=1e-9, atol=1e-12)
        # the KL term makes ω differ from A, and the coefficient autograd found through
        # token_objective is ω
        assert rec["objective_coef"] == pytest.approx(rec["omega"], rel=1e-9)
        assert any(abs(w - rec["advantage"]) > 1e-4 for w in rec["omega"])
    # every parameter's requires_grad is restored
    assert all(p.requires_grad for p in model.parameters())


def test_untied_head_with_a_bias_and_temperature_match_direct_autograd():
    # Untied head, so with --params all its gradient is taken in closed form ((e - p) h / τ, a
    # rank-one matrix); a bias and τ != 1 exercise every term of that formula against plain autograd
    # of the full logits.
    from conftest import tiny_qwen2
    model = tiny_qwen2(dtype=torch.float64, seed=3)
    head = model.get_output_embeddings()
    head.bias = torch.nn.Parameter(0.3 * torch.randn(head.out_features, dtype=torch.float64))
    prompt, completion = [3, 9, 11, 4], [12, 40, 7, 33, 2]
    for spec in ("all", "last:1", "head"):
        params, cut = analyze.analysis_parameters(model, spec)
        assert any(p is head.bias for p in params)
        out = analyze.answer_token_gradients(model, prompt, completion, params=params,
                                             cut_before=cut, temperature=0.7)
        logp_norms, _, entropies = direct_token_gradients(model, prompt, completion, 1.0, params,
                                                          temperature=0.7)
        # rtol 1e-6: the closed-form head gradient and autograd of the full logits are different
        # graphs, so the float32 RMSNorm inside the float64 model rounds their backward differently
        # (~16 u32 ≈ 1e-6 relative at most)
        torch.testing.assert_close(out["grad_logp_norm"],
                                   torch.tensor(logp_norms, dtype=torch.float64), rtol=1e-6,
                                   atol=1e-12)
        torch.testing.assert_close(out["entropy"], torch.tensor(entropies, dtype=torch.float64),
                                   rtol=1e-9, atol=1e-12)


def test_head_only_on_a_tied_head_is_the_outer_product_norm():
    # Tied head (= the input embedding). With --params head, θ is the head's use only: ∇_W log p_t =
    # (e - p) h_tᵀ, so the norm is ||e - p|| · ||h_t|| (Prop. 3.1's G_t times the hidden state's
    # norm). Counting the embedding use as well would make it larger.
    model, tok = tiny_model(dtype=torch.float64)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    prompt, completion = _prompt(tok), [40, 41, 42, 43]
    params, cut = analyze.analysis_parameters(model, "head")
    out = analyze.answer_token_gradients(model, prompt, completion, params=params, cut_before=cut)
    with torch.no_grad():
        h = model.get_decoder()(input_ids=torch.tensor([prompt + completion])).last_hidden_state[0]
    h = h[len(prompt) - 1: len(prompt) - 1 + len(completion)]
    torch.testing.assert_close(out["grad_logp_norm"], out["logit_grad_norm"] * h.norm(dim=-1),
                               rtol=1e-9, atol=0)
    p = torch.softmax(h @ model.get_output_embeddings().weight.t(), -1)
    e = torch.nn.functional.one_hot(torch.tensor(completion), p.shape[-1]).double()
    torch.testing.assert_close(out["logit_grad_norm"], (e - p).norm(dim=-1), rtol=1e-9, atol=0)
    full, _ = analyze.analysis_parameters(model, "all")
    # embedding+head use
    tied_all = analyze.answer_token_gradients(model, prompt, completion, params=[full[0]])
    assert (tied_all["grad_logp_norm"] > out["grad_logp_norm"] + 1e-9).all()


def test_off_policy_steps_move_theta_and_the_measured_tokens_have_r_not_one():
    """After an AdamW step on group 0, group 1 is measured at the moved θ against the rollout's
    log-probs: r ≠ 1, some clips active, and ||∇θ ℓ|| still equals a direct autograd of min(r A,
    clip(r) A) per token."""
    model, tok = tiny_model(favour="12 ", dtype=torch.float64)
    prompts, roll = _batch(model, tok, max_new_tokens=4)
    rewards = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    before = [p.detach().clone() for p in model.parameters()]
    trained, measured = analyze.off_policy_split(2, 1, 1)
    assert (trained, measured) == ([[0]], [1])
    # unbiased std, G = 4
    advantages = torch.tensor([1.0, -1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0]) * math.sqrt(3) / 2
    log = analyze.off_policy_steps(model, roll, advantages, trained,
                                   torch.optim.AdamW(model.parameters(), lr=0.05), eps_low=0.2,
                                   eps_high=0.2)
    assert len(log) == 1 and log[0]["groups"] == [0] and log[0]["grad_norm"] > 0
    # the first mini-batch is scored at θ_old: r = 1 up to the rollout's KV-cached values against a
    # full forward (float64 model with Qwen2's float32 RMSNorm: |Δ log π| ~ 1e-7,
    # tests/test_rollout.py), so mean |r - 1| < 1e-5
    assert log[0]["ratio_abs_dev_mean"] < 1e-5
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    records = analyze.analyze_groups(model, prompts, roll, rewards, params="all",
                                     old_logp=roll.old_logp, groups=measured, progress=False)
    assert [r["answer"] for r in records] == [4, 5, 6, 7] and {r["group"] for r in records} == {1}
    ratios = torch.tensor([v for r in records for v in r["ratio"]])
    assert (ratios - 1).abs().max() > 0.05
    assert any(c for r in records for c in r["clip_active"])
    params = list(model.parameters())
    for rec in records:
        i = rec["answer"]
        completion = roll.completion_ids[i][roll.valid_mask[i]].tolist()
        old = roll.old_logp[i][roll.valid_mask[i]].double()
        ids = torch.tensor([prompts[1] + completion])
        P = len(prompts[1])
        expected = []
        for t, token in enumerate(completion):
            logp = torch.log_softmax(model(input_ids=ids).logits[0, P - 1 + t].double(), -1)[token]
            r = torch.exp(logp - old[t])
            objective = torch.minimum(r * rec["advantage"], r.clamp(0.8, 1.2) * rec["advantage"])
            g = torch.autograd.grad(objective, params)
            expected.append(math.sqrt(sum(float(x.pow(2).sum()) for x in g)))
        # rtol 1e-6, not 1e-9: Qwen2's RMSNorm computes in float32 even in a float64 model, so a
        # backward seeded with r·A instead of 1 rounds differently at ~1e-7 (the clipped tokens'
        # exact zeros are checked below).
        torch.testing.assert_close(torch.tensor(rec["grad_objective_norm"], dtype=torch.float64),
                                   torch.tensor(expected, dtype=torch.float64), rtol=1e-6,
                                   atol=1e-12)
        assert rec["objective_coef"] == pytest.approx(rec["omega"], rel=1e-9, abs=1e-12)
        for w, r, clipped, g in zip(rec["omega"], rec["ratio"], rec["clip_active"],
                                    rec["grad_objective_norm"]):
            # ω = r·A·I
            assert w == pytest.approx(0.0 if clipped else r * rec["advantage"], rel=1e-9, abs=1e-12)
            assert (g == 0) == clipped
    s = stats.summarize(records, ratio=0.2)
    assert 0 < s["clip_active_share"] < 1 and s["ratio_abs_dev_mean"] > 0.01
    on_policy = stats.summarize(
        analyze.analyze_groups(model, prompts, roll, rewards, groups=[1], progress=False))
    assert on_policy["clip_active_share"] == 0 and on_policy["ratio_abs_dev_mean"] == 0


def test_bad_params_spec_names_it():
    model, _ = tiny_model(layers=2)
    for spec in ("last:0", "last:3", "first:1", "last:x"):
        with pytest.raises(ValueError, match="--params"):
            analyze.analysis_parameters(model, spec)


def test_pearson_spearman_against_known_values():
    assert stats.pearson([1, 2, 3, 4], [2, 4, 6, 8]) == pytest.approx(1.0)
    # constant: undefined, not NaN
    assert stats.pearson([1, 2, 3], [5, 5, 5]) is None
    # monotone, not linear
    assert stats.spearman([1, 2, 3, 4, 5], [1, 8, 27, 64, 125]) == pytest.approx(1.0)
    assert stats.ranks([10, 20, 20, 30]).tolist() == [1.0, 2.5, 2.5, 4.0]
    # Spearman with ties = Pearson of average ranks: x ranks [1, 2.5, 2.5, 4], y ranks [1, 2, 3, 4]
    assert stats.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486832980505138)
    scipy_stats = pytest.importorskip("scipy.stats")
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(50, generator=g, dtype=torch.float64) for _ in range(2))
    x[::5] = x[0]                                                            # ties
    assert stats.spearman(x, y) == pytest.approx(scipy_stats.spearmanr(x, y).statistic, abs=1e-12)
    assert stats.pearson(x, y) == pytest.approx(scipy_stats.pearsonr(x, y).statistic, abs=1e-12)


def test_summary_recall_prefers_gmts_when_one_answer_carries_the_gradient():
    # Synthetic records: answer 0 (A = +2.47) has LOW entropy, the seven wrong answers (A = -0.35)
    # high entropy.
    records = []
    for i in range(8):
        adv = 2.4748 if i == 0 else -0.3536
        ent = [0.5 + 0.01 * t for t in range(10)] if i == 0 else [1.0 + 0.01 * t for t in range(10)]
        # gradient tracks entropy within answers
        glp = [e for e in ent]
        records.append(
            {"group": 0, "answer": i, "reward": float(i == 0), "advantage": adv, "n_tokens": 10,
                        "entropy": ent, "grad_logp_norm": glp, "epsilon": [0.05] * 10,
                        "grad_objective_norm": [abs(adv) * g for g in glp],
                        "gmts_score": [abs(adv) * e for e in ent]})
    s = stats.summarize(records, ratio=0.2)
    # k = ceil(0.2 * 80) = 16 true top tokens: answer 0's 10 (|A| = 2.47) and 6 of the wrong
    # answers' highest. ETS ranks by entropy alone, misses all 10 of answer 0 and finds only those
    # 6.
    assert s["top_recall"]["gmts"] == 1.0 and s["top_recall"]["ets"] == pytest.approx(6 / 16)
    assert s["groups"][0]["spearman_gmts_grad"] == pytest.approx(1.0)
    # right within the wrong answers, wrong across
    assert s["groups"][0]["spearman_entropy_grad"] < 0.5
    assert s["pearson_logE_loggrad"]["mean"] == pytest.approx(1.0)
    assert s["epsilon"]["share_below_0.1"] == 1.0 and sum(s["epsilon"]["histogram"]["counts"]) == 80


def test_cli_end_to_end_writes_json_and_figures(digit_model_dir, digit_data, tmp_path):
    out = tmp_path / "analysis.json"
    proc = run_python(["-m", "gmts.tools.analyze", "--model", digit_model_dir, "--data",
                       digit_data, "--prompts", "3", "--group-size", "4", "--max-new-tokens", "4",
                       "--device", "cpu", "--seed", "1", "--params", "last:1",
                       "--max-tokens-per-answer", "3", "--output", out], timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert {"config", "summary", "answers", "objective", "params", "n_params"} <= set(result)
    summary = result["summary"]
    assert {"groups", "pearson_logE_loggrad", "spearman_gmts_grad", "spearman_entropy_grad",
            "epsilon", "top_recall", "pearson_logE_loggrad_within_answer"} <= set(summary)
    assert len(summary["groups"]) == 3 and len(result["answers"]) == 12
    for g in summary["groups"]:
        assert {"pearson_logE_loggrad", "spearman_gmts_grad", "spearman_entropy_grad", "rewards",
                "advantages", "problem"} <= set(g)
    eps = summary["epsilon"]
    assert eps["n"] == sum(a["n_tokens"] for a in result["answers"]) and 0 <= eps["quantiles"][
        "0.5"] <= 1
    for a in result["answers"]:
        assert a["n_tokens"] <= 3 and len(a["grad_objective_norm"]) == a["n_tokens"]
        assert all(v >= 0 and math.isfinite(v) for v in a["grad_logp_norm"])
    assert "Spearman(|E·ω|, ||∇ℓ||)" in proc.stdout and "per-token backward" in proc.stderr
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    for fig in ("analysis_fig2.png", "analysis_fig3.png"):
        assert (tmp_path / fig).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_off_policy_steps_then_measures_the_other_groups(digit_model_dir, digit_data, tmp_path):
    out = tmp_path / "off.json"
    result = analyze.main(
        ["--model", digit_model_dir, "--data", digit_data, "--prompts", "3", "--group-size", "4",
                           "--max-new-tokens", "4", "--device", "cpu", "--seed", "3", "--params",
         "last:1",
                           "--off-policy-steps", "1", "--mini-batch-size", "1", "--lr", "0.05",
         "--selector", "gmts",
                           "--output", str(out), "--no-plots", "--no-progress"])
    assert json.loads(out.read_text())["objective"].startswith("off-policy")
    (step,) = result["off_policy_steps"]
    assert step["groups"] == [0] and math.isfinite(step["loss"])
    assert ({a["group"] for a in result["answers"]} == {1, 2}
            and len(result["summary"]["groups"]) == 2)
    # a mixed group, scored at θ_old
    assert step["grad_norm"] > 0 and step["ratio_abs_dev_mean"] < 1e-5
    assert (result["summary"]["ratio_abs_dev_mean"] > 0.01
            and result["summary"]["clip_active_share"] > 0)


def test_cli_scores_with_the_users_own_reward(digit_model_dir, digit_data, tmp_path,
                                              monkeypatch):
    """--reward FILE.py:FUNCTION as in train.py: every answer gets the function's value (the
    advantages follow from it), and a reward that fails on the first problems is one line naming
    it, before the model loads."""
    own = tmp_path / "own.py"
    own.write_text("def length(completion, answer):\n    return len(completion) / 10\n"
                   "def broken(completion, answer):\n    raise KeyError('score')\n")
    base = ["--model", digit_model_dir, "--data", digit_data, "--prompts", "2", "--group-size",
            "4", "--max-new-tokens", "4", "--device", "cpu", "--seed", "2", "--params", "head",
            "--no-plots", "--no-progress"]
    result = analyze.main([*base, "--reward", f"{own}:length", "--output",
                           str(tmp_path / "a.json")])
    answers = result["answers"]
    assert len(answers) == 8
    # R in float32, as the trainer holds it
    assert [a["reward"] for a in answers] == [
        float(torch.tensor(len(a["text"]) / 10, dtype=torch.float32)) for a in answers]
    for g in result["summary"]["groups"]:
        rewards = torch.tensor(g["rewards"])
        assert g["rewards"] == [a["reward"] for a in answers if a["group"] == g["group"]]
        want = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
        assert torch.allclose(torch.tensor(g["advantages"]), want.masked_fill(
            rewards.max() == rewards.min(), 0.0), atol=1e-6)
    from gmts.trainer import models

    def no_model(*args, **kwargs):
        raise AssertionError("the model loaded before the reward was tried")
    monkeypatch.setattr(models, "load_model", no_model)
    with pytest.raises(SystemExit) as exc:
        analyze.main([*base, "--reward", f"{own}:broken", "--output", str(tmp_path / "b.json")])
    message = str(exc.value.code)
    assert "broken" in message and "KeyError" in message, message
    assert not (tmp_path / "b.json").exists()


def test_cli_rejects_bad_flags_naming_them(capsys):
    for argv, flag in ((["--group-size", "1"], "--group-size"),
                       (["--params", "middle"], "--params"),
                       (["--task-options", "[1]"], "--task-options"),
                       (["--ratio", "1.5"], "--ratio"), (["--temperature", "0"], "--temperature"),
                       (["--adv-std", "x"], "--adv-std"),
                       (["--prompts", "4", "--mini-batch-size", "2", "--off-policy-steps", "2"],
                        "--off-policy-steps"),
                       (["--off-policy-steps", "1", "--beta", "0.1"], "--beta")):
        with pytest.raises(SystemExit) as exc:
            analyze.main(["--model", "x", *argv])
        assert exc.value.code == 2 and flag in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        analyze.main(["--prompts", "2"])
    assert exc.value.code == 2 and "--model is required" in capsys.readouterr().err


def _synthetic_run(path, selector, seed, steps=5):
    path.mkdir()
    (path / "config.json").write_text(
        json.dumps({"selector": selector, "seed": seed, "ratio": 0.2}))
    rows = [{"step": s, "reward_mean": 0.1 * s, "accuracy": 0.1 * s, "entropy_mean": 2.0 - 0.1 * s,
             "grad_norm": 1.0 + s, "response_len_mean": 30 + s, "selection_overlap_ets_gmts": 0.7}
            for s in range(1, steps)]
    rows.append(
        {"step": steps, "reward_mean": 0.0, "accuracy": 0.0,
         "skipped": "no group with mixed rewards"})
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_plot_writes_a_png_comparing_runs(tmp_path):
    pytest.importorskip("matplotlib")
    a = _synthetic_run(tmp_path / "a", "ets", 0)
    b = _synthetic_run(tmp_path / "b", "gmts", 0)
    out = tmp_path / "runs.png"
    plot.main([a, b, "--output", str(out), "--smooth", "2"])
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert (plot.run_label(json.loads((tmp_path / "b" / "config.json").read_text()), b)
            == "gmts ρ=0.2 seed 0")
    assert plot.series(plot.read_run(a)[1], "grad_norm") == ([1, 2, 3, 4], [2.0, 3.0, 4.0, 5.0])
    assert plot.moving_average([1.0, 3.0, 5.0], 2) == [1.0, 2.0, 4.0]
    with pytest.raises(SystemExit, match="no metrics.jsonl"):
        plot.main([str(tmp_path), "--output", str(tmp_path / "x.png")])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metrics.jsonl").write_text('{"step": 1}\n{oops\n')
    with pytest.raises(SystemExit, match=r"metrics.jsonl:2"):
        plot.main([str(bad), "--output", str(tmp_path / "y.png")])


def test_cli_all_wrong_batch_writes_json_and_says_what_it_could_not_draw(digit_model_dir,
                                                                         tmp_path):
    """No group with mixed rewards (every answer wrong): the JSON, the summary and the figures are
    written, and each statistic or panel with nothing to show says so in one line, no traceback."""
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text("".join(json.dumps({"question": f"Say {i}", "answer": "987"}) + "\n"
                             for i in range(3)))
    out = tmp_path / "out" / "analysis.json"
    proc = run_python(["-m", "gmts.tools.analyze", "--model", digit_model_dir, "--data", wrong,
                       "--prompts", "2", "--group-size", "4", "--max-new-tokens", "4", "--device",
                       "cpu", "--params", "last:1", "--output", out, "--no-progress"],
                      timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    result = json.loads(out.read_text())
    summary = result["summary"]
    assert [a["reward"] for a in result["answers"]] == [0.0] * 8
    assert summary["groups_without_gradient"] == 2 and summary["top_recall"]["gmts"] is None
    lines = proc.stdout.splitlines()
    for head in ("Spearman(|E·ω|, ||∇ℓ||)", "Spearman(E, ||∇ℓ||)", "top-20% by true gradient"):
        (line,) = [x for x in lines if x.startswith(head)]
        assert "n/a, no group with mixed rewards" in line, line
    assert f"wrote {out}" in proc.stdout
    pytest.importorskip("matplotlib")
    notes = [x for x in proc.stderr.splitlines() if "nothing to draw" in x]
    stem = str(out)[:-len(".json")]
    assert sorted(x.split(":")[0] for x in notes) == [
        f"{stem}_fig2.png, middle panel (E vs ||∇θ ℓ_t||)",
        f"{stem}_fig2.png, right panel (||∇θ ℓ_t|| histogram)",
        f"{stem}_fig3.png, middle panel (Spearman per group)"], proc.stderr
    for fig in ("_fig2.png", "_fig3.png"):
        assert pathlib.Path(stem + fig).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _saved_figures(monkeypatch):
    """Every matplotlib Figure saved from now on, in order (to read its axes back)."""
    from matplotlib.figure import Figure
    saved, save = [], Figure.savefig

    def keep(fig, *args, **kwargs):
        saved.append(fig)
        return save(fig, *args, **kwargs)
    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def test_every_figure_tool_draws_degenerate_data_and_names_each_empty_panel(tmp_path, capsys,
                                                                            monkeypatch):
    """analyze's figures with no gradient anywhere or no answer at all, plot with a run that logged
    no step, the learning check's map with no value: each writes its PNG, and each empty panel is
    one stderr line naming the file and the panel."""
    pytest.importorskip("matplotlib")
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from lr_map_figure import plot_map
    saved = _saved_figures(monkeypatch)
    flat = {"group": 0, "answer": 0, "reward": 0.0, "advantage": 0.0, "n_tokens": 3,
            "entropy": [0.0, 0.5, 1.0],
            "grad_logp_norm": [0.0, 1.0, 2.0], "grad_objective_norm": [0.0] * 3,
            "gmts_score": [0.0] * 3, "epsilon": [0.5] * 3}
    records = [dict(flat, answer=i) for i in range(2)]
    zero = {"answers": records, "summary": stats.summarize(records)}
    empty = {"answers": [], "summary": stats.summarize([])}
    for name, result, empty_panels in (("zero", zero, 3), ("empty", empty, 6)):
        paths = [plot.plot_figure2(result, str(tmp_path / f"{name}2.png")),
                 plot.plot_figure3(result, str(tmp_path / f"{name}3.png"))]
        notes = capsys.readouterr().err.splitlines()
        assert len(notes) == empty_panels and all("nothing to draw" in n for n in notes), notes
        assert all(pathlib.Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)
    assert "nothing to draw, no answer analysed" in notes[0]
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    (stopped / "metrics.jsonl").write_text("")
    plot.main([str(stopped), "--output", str(tmp_path / "runs.png")])
    notes = [n for n in capsys.readouterr().err.splitlines() if "nothing to draw" in n]
    assert len(notes) == len(plot.DEFAULT_METRICS)
    assert plot_map({"arms": {}}, str(tmp_path / "map.png")) == str(tmp_path / "map.png")
    assert capsys.readouterr().err.count("nothing to draw") == 2
    assert len(saved) == 6


def test_step_and_group_axes_have_whole_number_ticks(tmp_path, monkeypatch):
    """A 3-step run and 2 groups: matplotlib's default locator would tick 1.25, 1.5, ...; steps and
    groups are counted, so every tick is an integer."""
    pytest.importorskip("matplotlib")
    saved = _saved_figures(monkeypatch)
    run = _synthetic_run(tmp_path / "a", "gmts", 0, steps=3)
    plot.plot_runs([run], str(tmp_path / "runs.png"))
    records = [{"group": g, "answer": g * 2 + j, "reward": float(j), "advantage": (-1.0) ** j,
                "n_tokens": 3,
                "entropy": [0.2, 0.5, 1.0], "grad_logp_norm": [0.5, 1.0, 2.0],
                "grad_objective_norm": [0.5, 1.0, 2.0 + j], "gmts_score": [0.2, 0.5, 1.0 + j],
                "epsilon": [0.5] * 3} for g in range(2) for j in range(2)]
    plot.plot_figure3({"answers": records, "summary": stats.summarize(records)},
                      str(tmp_path / "f3.png"))
    axes = [ax for ax in saved[0].axes if ax.get_visible()] + saved[1].axes[:2]
    assert len(axes) == len(plot.DEFAULT_METRICS) + 2
    for ax in axes:
        ticks = ax.get_xticks()
        assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks
