"""An independent reference of the whole update against train.update_policy, in float64.

The reference is written from gmts/METHOD.md's formulas alone, sharing no code with the trainer's
method: plain full logits (one row at a time, no chunked head, no padding), log_softmax, entropy, r
= π_θ / π_old, ω, a sort-based top-k with k = ceil(ρ · N_valid), J = Σ w · m · ℓ with the chosen
normaliser, autograd, and plain SGD. Only the partition into mini-batches is taken from
gmts.trainer.batches.minibatch_rows (a seeded shuffle is a choice, not a formula;
test_minibatch_partition checks it). Both sides run the same sequence of optimizer steps and must
end at the same weights: this covers every selector's scores, the batch-wide threshold, each
normaliser, the KL term with both coverages, bottom-ρ, group scope with exclude, uneven
micro-batches, several epochs and several mini-batches, where θ has moved, r != 1 and some clips are
active.
"""
import math
import os
import sys
from decimal import Decimal

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

Q, G, T, VOCAB = 4, 4, 6, 48


def make_model(seed=3, tied=False):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    config = Qwen2Config(vocab_size=VOCAB, hidden_size=16, intermediate_size=32,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=64, tie_word_embeddings=tied)
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).double().eval()


# --- the reference
# ------------------------------------------------------------------------------------------------

def full_forward(model, prompt, completion, length, temperature):
    """log π(o_t) and E_t of one answer from the full logits of one unpadded sequence."""
    ids = torch.tensor([list(prompt) + completion[:length].tolist()])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1: len(prompt) - 1 + length] / temperature
    logq = torch.log_softmax(logits, dim=-1)
    token_logp = logq.gather(1, completion[:length, None]).squeeze(1)
    entropy = -(logq.exp() * logq).sum(-1)
    return token_logp, entropy.detach()


def per_token(model, batch, rows, temperature):
    """(list of log π rows, list of entropy rows) for `rows`, each of the answer's own length."""
    out = [full_forward(model, batch.prompt_ids[int(i) // G], batch.completion_ids[i],
                        int(batch.valid_mask[i].sum()), temperature) for i in rows]
    return [lp for lp, _ in out], [e for _, e in out]


def reference_top_k(scores, k, bottom):
    """scores: list of (key, value) in row-major order of the mini-batch; ties: earlier key
    first."""
    order = sorted(range(len(scores)),
                   key=lambda j: ((scores[j][1] if bottom else -scores[j][1]), j))
    return {scores[j][0] for j in order[:k]}


def reference_update(model, ref_model, batch, o, minibatches, lr):
    """The whole update: for every mini-batch in order, score at the current θ, select, J, SGD
    step."""
    adv = batch.advantages.double()
    ratio_budget = Decimal(repr(o["ratio"])) if o["selector"] != "none" else Decimal(1)
    moved = False
    for rows in minibatches:
        rows = rows.tolist()
        with torch.no_grad():
            now, ent = per_token(model, batch, rows, o["T"])
            ref = per_token(ref_model, batch, rows, o["T"])[0] if o["beta"] else None
        old = [batch.old_logp[i, :len(now[j])].double() for j, i in enumerate(rows)]
        if not moved:
            # θ = θ_old: the trainer reuses the rollout's values (here: the same full forward at
            # θ_0) and r = 1.
            now = [o_.clone() for o_ in old]
            ent = [batch.entropy[i, :len(now[j])].double() for j, i in enumerate(rows)]
        n_valid = sum(len(x) for x in now)
        excluded = {i for i in rows if o["exclude"] and adv[i] == 0}
        # Scores and selection.
        groups = {}
        for j, i in enumerate(rows):
            groups.setdefault(i // G if o["scope"] == "group" else 0, []).append(j)
        chosen, n_selected = set(), 0
        # S is known before the scores: the budget of each ranking, capped at its eligible count.
        for members in groups.values():
            n_group = sum(len(now[j]) for j in members)
            eligible = sum(len(now[j]) for j in members if rows[j] not in excluded)
            k = (min(math.ceil(ratio_budget * n_group), eligible) if o["selector"] != "none"
                 else eligible)
            n_selected += k
        kl_rel = n_selected / n_valid if (o["norm"] == "selected" and o["kl"] == "all"
                                          and o["beta"]) else 1.0
        for members in groups.values():
            n_group = sum(len(now[j]) for j in members)
            scores = []
            for j in members:
                if rows[j] in excluded:
                    continue
                i = rows[j]
                r = torch.exp(now[j] - old[j])
                a = float(adv[i])
                clip = ((a > 0) & (r > 1 + o["eps_high"])) | ((a < 0) & (r < 1 - o["eps_low"]))
                omega = r * a * (~clip)
                if o["beta"]:
                    omega = omega + kl_rel * o["beta"] * (torch.exp(ref[j] - now[j]) - 1)
                w = 1.0 / len(now[j]) if o["norm"] in ("sequence", "sequence-selected") else 1.0
                s = ent[j] if o["selector"] == "ets" else (ent[j] * omega * w).abs()
                scores += [((j, t), float(s[t])) for t in range(len(now[j]))]
            eligible = len(scores)
            k = (min(math.ceil(ratio_budget * n_group), eligible) if o["selector"] != "none"
                 else eligible)
            chosen |= reference_top_k(scores, k, o["bottom"])
        # J from the formula, at θ (with autograd), then one SGD step.
        logp, _ = per_token(model, batch, rows, o["T"])
        objective = torch.zeros((), dtype=torch.float64)
        n_answers = len(rows)
        for j, i in enumerate(rows):
            a = float(adv[i])
            old_j = logp[j].detach() if not moved else old[j]
            r = torch.exp(logp[j] - old_j)
            surrogate = torch.minimum(r * a,
                                      torch.clamp(r, 1 - o["eps_low"], 1 + o["eps_high"]) * a)
            if o["beta"]:
                log_ref_over_pi = ref[j] - logp[j]
                kl = torch.exp(log_ref_over_pi) - log_ref_over_pi - 1
            for t in range(len(logp[j])):
                sel = (j, t) in chosen
                if o["norm"] == "selected":
                    w_pol, w_kl = 1.0 / max(len(chosen), 1), 1.0 / n_valid
                elif o["norm"] == "all":
                    w_pol = w_kl = 1.0 / n_valid
                else:                                  # sequence: 1 / (answers · |o_i|)
                    w_pol = w_kl = 1.0 / (n_answers * len(logp[j]))
                if sel:
                    objective = objective + w_pol * surrogate[t]
                if o["beta"] and (sel if o["kl"] == "selected" else True):
                    objective = (objective
                                 - o["beta"] * (w_pol if o["kl"] == "selected" else w_kl) * kl[t])
        model.zero_grad(set_to_none=True)
        (-objective).backward()
        with torch.no_grad():
            stepped = False
            for p in model.parameters():
                if p.grad is not None:
                    p -= lr * p.grad
                    stepped = True
        moved |= stepped
    return model


# --- the trainer's side
# -----------------------------------------------------------------------------------------------

def make_batch(model, seed=0):
    """Q groups x G answers of ragged lengths with mixed and all-equal rewards; the rollout's
    log-probs and entropies are those of a full forward at θ_0 (what a float64 KV-cached rollout
    returns)."""
    import gmts
    import train
    gen = torch.Generator().manual_seed(seed)
    n = Q * G
    lengths = torch.randint(2, T + 1, (n,), generator=gen)
    valid = torch.arange(T)[None, :] < lengths[:, None]
    completion = torch.randint(3, VOCAB, (n, T), generator=gen).masked_fill(~valid, 0)
    # group 2: all equal
    rewards = torch.tensor([1., 0, 0, 0, 1, 1, 0, 0, 0.3, 0.3, 0.3, 0.3, 0, 1, 1, 1])
    prompts = [[int(x) for x in torch.randint(3, VOCAB, (2 + q,), generator=gen)] for q in range(Q)]
    batch = train.Batch(problems=list(range(Q)), prompt_ids=prompts, completion_ids=completion,
                        valid_mask=valid, old_logp=torch.zeros(n, T, dtype=torch.float64),
                        entropy=torch.zeros(n, T, dtype=torch.float64), texts=[""] * n,
                        rewards=rewards, advantages=gmts.group_advantages(rewards, G))
    with torch.no_grad():
        lp, ent = per_token(model, batch, range(n), 1.0)
    for i in range(n):
        batch.old_logp[i, :len(lp[i])], batch.entropy[i, :len(lp[i])] = lp[i], ent[i]
    return batch


CASES = {
    "gmts": [],
    "ets": ["--selector", "ets"],
    "none": ["--selector", "none"],
    "gmts-all": ["--loss-norm", "all"],
    "gmts-sequence": ["--loss-norm", "sequence"],
    "none-sequence-selected": ["--selector", "none", "--loss-norm", "sequence-selected"],
    "gmts-kl-selected": ["--beta", "0.1"],
    "gmts-kl-all": ["--beta", "0.1", "--kl-coverage", "all"],
    "ets-kl-all-norm-all": ["--selector", "ets", "--beta", "0.1", "--kl-coverage", "all",
                            "--loss-norm", "all"],
    # (without exclude, bottom-ρ GMTS keeps only A = 0 tokens)
    "gmts-bottom": ["--bottom", "--exclude-zero-adv"],
    "gmts-rho0.3-uneven": ["--ratio", "0.3", "--micro-batch-size", "2"],
    # 1-2 rows per micro-batch, grouped by length, trimmed
    "gmts-token-budget": ["--micro-batch-tokens", "16"],
    "ets-2-minibatches-token-budget-kl-all": ["--selector", "ets", "--mini-batch-size", "2",
                                              "--micro-batch-tokens", "24", "--beta", "0.1",
                                              "--kl-coverage", "all"],
    "gmts-group-exclude": ["--select-scope", "group", "--exclude-zero-adv"],
    "ets-exclude": ["--selector", "ets", "--exclude-zero-adv"],
    "gmts-epochs2": ["--ppo-epochs", "2"],
    "gmts-2-minibatches": ["--mini-batch-size", "2"],
    "gmts-4-minibatches": ["--mini-batch-size", "1"],
    "ets-4-minibatches-kl-all": ["--selector", "ets", "--mini-batch-size", "1", "--beta", "0.1",
                                 "--kl-coverage", "all"],
    "gmts-2-minibatches-kl-all": ["--mini-batch-size", "2", "--beta", "0.1",
                                  "--kl-coverage", "all"],
    "gmts-2-minibatches-epochs2-sequence": ["--mini-batch-size", "2", "--ppo-epochs", "2",
                                            "--loss-norm", "sequence"],
}


def trainer_update(flags, tied=False, step=5):
    import train
    from gmts.run.config import parse_config
    from gmts.trainer.metrics import update_figures
    from gmts.trainer.batches import minibatch_rows
    cfg = parse_config(
        ["--group-size", str(G), "--prompts-per-step", str(Q), "--micro-batch-size", "4",
                        "--selector", "gmts", "--max-grad-norm", "0", "--seed", "7"] + flags)
    model = make_model(tied=tied)
    batch = make_batch(model)
    ref_model = make_model(tied=tied).requires_grad_(False) if cfg.beta > 0 else None
    # Large steps, so that the later mini-batches are clearly off-policy (smaller with KL: π_ref/π
    # grows fast).
    lr = 1.0 if cfg.beta > 0 else 3.0
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    metrics, _ = update_figures(
        cfg, batch, train.update_policy(cfg, model, ref_model, optimizer, batch, torch.Generator(),
                                        torch.device("cpu"), step))
    minibatches = [rows for epoch in range(cfg.ppo_epochs)
                   for rows
                   in minibatch_rows(Q, G, cfg.mini_batch_size, seed=cfg.seed, step=step,
                                     epoch=epoch)]
    opts = {"selector": cfg.selector, "ratio": cfg.ratio, "norm": cfg.loss_norm, "beta": cfg.beta,
                "kl": cfg.kl_coverage, "bottom": cfg.bottom, "scope": cfg.select_scope,
                "exclude": cfg.exclude_zero_adv, "eps_low": cfg.eps_low, "eps_high": cfg.eps_high,
                "T": cfg.temperature, "lr": lr}
    return model, batch, ref_model, opts, minibatches, metrics


@pytest.mark.parametrize("name", list(CASES))
def test_update_policy_equals_the_reference(name):
    torch.set_num_threads(1)
    model, batch, ref_model, opts, minibatches, metrics = trainer_update(CASES[name])
    expected = reference_update(make_model(), ref_model, batch, opts, minibatches, opts["lr"])
    moved = max((a - b).abs().max().item() for a,
                b in zip(model.parameters(), make_model().parameters()))
    assert moved > 1e-3                                           # the update did something
    # float64 and plain SGD (no Adam amplification): θ differs by lr · δg, δg ~ n u64 Σ|terms| ≈
    # 1e-14 (another grouping of the same sums), times lr ≤ 3 and the few steps: ~1e-13. Qwen2's
    # float32 RMSNorm sees the same per-row values in both (rows are computed independently), so it
    # rounds alike. 1e-9 absolute is far above.
    for (key, a), b in zip(model.named_parameters(), expected.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-9,
                                   msg=lambda m, key=key: f"{name}: {key}: {m}")
    # one step per mini-batch, except where no token has a gradient (only the A = 0 group, β = 0):
    # no step at all
    dead = sum(1 for rows in minibatches if opts["beta"] == 0
               and (batch.advantages[rows] == 0).all())
    assert metrics["optimizer_steps"] == len(minibatches) - dead
    if opts["selector"] == "none":
        # a run that trains on every token still reports what ETS and GMTS would keep at ρ: they
        # differ here
        assert metrics["selected_tokens"] == metrics["valid_tokens"] and metrics[
            "selection_overlap_ets_gmts"] < 1.0
    if len(minibatches) > 1:
        # the later mini-batches are off-policy: θ moved, r != 1, and some clips are active
        assert metrics["ratio_abs_dev_mean"] > 0.01, metrics
        if opts["beta"] == 0 or opts["selector"] == "ets":
            assert metrics["clip_active_share"] > 0, metrics


def test_tied_embeddings_gradients_equal_the_reference():
    """Every Qwen2.5 up to 3B ties the input embeddings to the output head: the chunked head reads
    the same weight the embedding does, and both paths' gradients must reach it."""
    model, batch, ref_model, opts, minibatches, _ = trainer_update(
        ["--mini-batch-size", "2"], tied=True)
    expected = reference_update(make_model(tied=True), ref_model, batch, opts, minibatches,
                                opts["lr"])
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    # as above: ~1e-13 apart
    for (key, a), b in zip(model.named_parameters(), expected.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-9, msg=lambda m, key=key: f"{key}: {m}")


def test_minibatch_partition():
    """Mini-batches are whole groups, every group exactly once per epoch, shuffled by (seed, step,
    epoch), listed in ascending order inside a mini-batch; one mini-batch (the default) is every row
    in order."""
    from gmts.trainer.batches import minibatch_rows
    parts = minibatch_rows(8, 4, 2, seed=1, step=3, epoch=0)
    assert len(parts) == 4 and all(len(p) == 8 for p in parts)
    rows = torch.cat(parts)
    assert sorted(rows.tolist()) == list(range(32))
    for p in parts:
        assert torch.equal(p.view(-1, 4) % 4, torch.arange(4).expand(2, 4))       # whole groups
        assert torch.equal(p, p.sort().values)
    assert [p.tolist() for p in parts] == [
        p.tolist() for p in minibatch_rows(8, 4, 2, seed=1, step=3, epoch=0)]
    others = [minibatch_rows(8, 4, 2, seed=1, step=3, epoch=1),
              minibatch_rows(8, 4, 2, seed=1, step=4, epoch=0),
              minibatch_rows(8, 4, 2, seed=2, step=3, epoch=0)]
    assert all([p.tolist() for p in o] != [p.tolist() for p in parts] for o in others)
    assert [p.tolist() for p in minibatch_rows(8, 4, 8, seed=1, step=3, epoch=0)] == [
        list(range(32))]
