"""Two processes (gloo, CPU) against one, for what the mini-batch regime and the exactness notes
added:
- several optimizer steps per rollout batch (some mini-batches hold rows of one rank only), plain
  and FSDP;
- a step in which no process has a token with a gradient leaves the weights EXACTLY unchanged
  (AdamW's momentum must not move them, as it would from zero-filled gradients);
- ties exactly at the top-k cut-off, across ranks: the single process's order (rank, then row, then
  column) decides.

The updates run in float64, model and optimizer: AdamW turns the rounding of a regrouped gradient
sum into much more (a coordinate whose gradient is within rounding of 0 moves by a share of lr), and
in float32 the rounding inside Adam's own moment updates adds a term that cancellation can make
large. In float64 both are ~1e-16 relative, so the bound below (assert_same_update_float64, derived
term by term) holds on any CPU with room to spare.
"""
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from conftest import spawn_gloo  # a gloo group per spawned process
from test_distributed import G, Q, T, adam_directions, make_batch, record_gradients, shard

U64 = 2.0 ** -53      # float64's unit roundoff


def updates(flags, batches, fsdp=False):
    """Run update_policy on each batch in turn (AdamW, so a second update carries momentum from the
    first)."""
    import train
    from conftest import tiny_qwen2
    from gmts.trainer import distributed
    from gmts.trainer.metrics import update_figures
    from gmts.run.config import parse_config
    from gmts.trainer.optim import build_optimizer
    torch.set_num_threads(1)
    cfg = parse_config(["--selector", "gmts", "--group-size", str(G), "--prompts-per-step", str(Q),
                        "--micro-batch-size", "2", "--lr", "1e-2", "--max-grad-norm", "0.5"]
                        + flags)
    # float64 model and AdamW (module doc)
    model = tiny_qwen2(vocab_size=64, seed=11, dtype=torch.float64)
    if fsdp:
        distributed.shard_model(model, torch.float64)
    optimizer = build_optimizer(model, cfg)
    # every optimizer step's gradient, over all the batches
    grads = record_gradients(model, optimizer)
    out = []
    for step, batch in enumerate(batches, start=1):
        metrics, selected = update_figures(cfg, batch, train.update_policy(
            cfg, model, None, optimizer, batch, torch.Generator(), torch.device("cpu"), step))
        if fsdp:
            params, _ = distributed.full_state_dicts(model, optimizer)
        else:
            params = {k: v.detach().clone() for k, v in model.state_dict().items()}
        out.append((selected, params, metrics, list(grads)))
    return out


def assert_same_update_float64(grads, single_grads, params, single_params, lr, n_terms):
    """"2 processes = 1 process" for float64 updates, every rounding accounted for (u = 2^-53).

    Gradients, first step: a float64 sum of n per-token terms regrouped moves by at most n · u ·
    Σ|terms|, with Σ|terms| of the order of the largest coordinate: atol = n · u · max|g|.
    Weights: θ_T = θ_0 - lr Σ_t û_t, û_t = m̂_t / (√v̂_t + ε). (a) Adam's amplification of the
    gradients' difference: lr Σ_t |û_t - û'_t|, recomputed from the two recorded gradient sequences.
    (b) Adam's own rounding at step t: m_t is a sum of t weighted gradients, whose rounding is at
        most (t + 2) u Σ_s w_s |g_s| = (t + 2) u M_t even where the
    gradients cancel; v_t has positive terms only (relative (t + 2) u, half of it through the square
    root); the divisions, bias corrections and the product with lr add a few u · |û_t|. So the step
    moves by at most lr · 8 (t + 2) u · (M̂_t / (√v̂_t + ε) + |û_t|). (c) θ - lr · û rounds by u ·
    |θ| per step."""
    for name, g in single_grads[0].items():
        bound = n_terms * U64 * float(g.abs().max())
        torch.testing.assert_close(grads[0][name], g, rtol=0, atol=bound,
                                   msg=lambda m, name=name: f"{name} (step 1): {m}")
    ours, theirs = adam_directions(grads), adam_directions(single_grads)
    # M̂ / (√v̂ + ε)
    magnitudes = adam_directions([{k: v.abs() for k, v in step.items()} for step in single_grads])
    for name, value in single_params.items():
        # a buffer, or a parameter without a gradient: exactly unchanged
        if name not in ours:
            assert torch.equal(params[name], value), name
            continue
        amplified = lr * sum((a - b).abs() for a, b in zip(ours[name], theirs[name]))
        adam = lr * sum(8 * (t + 2) * U64 * (m + u.abs())
                        for t, (m, u) in enumerate(zip(magnitudes[name], theirs[name]), start=1))
        steps = len(grads) * U64 * (value.abs() + lr * sum(u.abs() for u in theirs[name]))
        excess = (params[name] - value).abs() - amplified - adam - steps
        assert float(excess.max()) <= 0, (name, float(excess.max()))


def dead_batch():
    """Every group all-equal: A = 0 everywhere, β = 0, so no token has a gradient."""
    import gmts
    batch = make_batch(seed=1)
    batch.rewards = torch.zeros_like(batch.rewards)
    batch.advantages = gmts.group_advantages(batch.rewards, G)
    return batch


def _worker(rank, world, flags, kind, fsdp):
    if kind == "ties":
        return tie_selection(rank, world)
    batches = [make_batch()] + ([dead_batch()] if kind == "dead" else [])
    return updates(flags, [shard(b, rank, world) for b in batches], fsdp)


def spawn(tmp_path, flags, kind, fsdp=False):
    return spawn_gloo(_worker, tmp_path, flags, kind, fsdp)


@pytest.mark.parametrize("flags, fsdp",
                         [(["--mini-batch-size", "1"], False), (["--mini-batch-size", "2"], False),
                                         (
                                             ["--mini-batch-size", "1", "--selector", "ets",
                                              "--ppo-epochs", "2"], False),
                                         (["--mini-batch-size", "1"], True)])
def test_minibatches_on_two_processes_equal_one_process(tmp_path, flags, fsdp):
    parts = spawn(tmp_path, flags, "minibatch", fsdp)
    [(single_sel, single_params, single_metrics, single_grads)] = updates(flags, [make_batch()])
    assert torch.equal(torch.cat([p[0][0] for p in parts]), single_sel)
    for p in (parts[:1] if fsdp else parts):
        # the first step's gradient tightly, the weights after every step within Adam's
        # amplification of the rounding and Adam's own float64 rounding (assert_same_update_float64
        # derives each)
        assert_same_update_float64(p[0][3], single_grads, p[0][1], single_params, lr=1e-2,
                                   n_terms=Q * G * T + 16)
    m = parts[0][0][2]
    assert m["optimizer_steps"] == single_metrics["optimizer_steps"] > 1
    # Counts and shares of tokens are exact (the selections are equal, asserted above).
    # ratio_abs_dev_mean and the gradient norms of the later mini-batches are measured at θ after
    # Adam steps, so they carry the weights' difference (assert_same_update_float64 bounds it;
    # float64 leaves it ~1e-15 here): through a Lipschitz forward pass that moves a log-ratio or a
    # norm of order 1 by far less than the rel=1e-5 allowed; abs=1e-9 for the mean |r - 1|, which is
    # 0 up to rounding on the first mini-batch.
    for key in ("selected_tokens", "valid_tokens", "clip_active_share", "ratio_abs_dev_mean",
                "selection_overlap_ets_gmts", "selection_overlap_ets_gmts_min", "grad_norm",
                "grad_norm_max"):
        assert m[key] == pytest.approx(single_metrics[key], rel=1e-5, abs=1e-9), key


def test_a_step_with_nothing_to_learn_leaves_the_weights_unchanged_on_every_rank(tmp_path):
    parts = spawn(tmp_path, [], "dead")
    single = updates([], [make_batch(), dead_batch()])
    for (_, after_first, _, _), (_, after_dead, m, _) in [p for p in parts] + [single]:
        assert m["optimizer_steps"] == 0
        for name, value in after_first.items():
            assert torch.equal(after_dead[name], value), name          # exactly: no momentum step
    # the first batch's steps as in test_minibatches_on_two_processes_equal_one_process (the dead
    # one adds none)
    assert_same_update_float64(parts[0][1][3], single[1][3], parts[0][1][1], single[1][1], lr=1e-2,
                               n_terms=Q * G * T + 16)


def tie_scores():
    """16 rows x 1 token of scores where the 4th and 5th largest (k = ceil(0.25 · 16) = 4) tie: row
    6 (rank 0) and row 9 (rank 1), so the cut-off falls inside the tie and only the tie order
    decides which one is kept."""
    scores = torch.linspace(0.0, 1.0, 16)[:, None].clone()
    scores[15], scores[14], scores[13] = 9.0, 8.0, 7.0
    scores[6] = scores[9] = 5.0
    return scores, torch.ones(16, 1, dtype=torch.bool)


def tie_selection(rank, world):
    from gmts.trainer import distributed
    scores, valid = tie_scores()
    rows = slice(rank * 8, (rank + 1) * 8)
    return [(distributed.select_tokens_global(scores[rows], valid[rows], 0.25),
             distributed.select_tokens_global(scores[rows], valid[rows], 0.25, bottom=True))]


def test_ties_exactly_at_the_cut_off_across_ranks(tmp_path):
    import gmts
    parts = spawn(tmp_path, [], "ties")
    scores, valid = tie_scores()
    top = torch.cat([p[0][0] for p in parts])
    single = gmts.select_tokens(scores, valid, 0.25)
    assert torch.equal(top, single) and int(top.sum()) == 4
    assert top[6, 0] and not top[9, 0]                 # the lower index (rank 0's row) wins the tie
    bottom = torch.cat([p[0][1] for p in parts])
    assert torch.equal(bottom, gmts.select_tokens(scores, valid, 0.25, bottom=True))
