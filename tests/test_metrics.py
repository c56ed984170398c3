"""Per-update diagnostics (gmts/trainer/metrics.py; gmts/METHOD.md, "How concentrated an update
is"): n_eff on hand-made weights and its edge cases, the gradient-noise ratio on hand-made vectors,
on identical and on opposite halves of a real batch, against separate autograd passes, and over
simulated data-parallel ranks."""
import math
import threading

import pytest
import torch

import gmts
from gmts.tools.toy import tiny_model
import types

from gmts.trainer.batches import NOTHING, STEPPED, Batch, MiniBatch, accumulate_gradients
from gmts.trainer.metrics import (GradNoise, GradNoiseProbe, noise_from_halves,
                                  update_answers_effective)


def weights_for(W, tokens=3):
    """omega, weights (N, tokens) whose per-answer W_i = Σ_t |ω_it| · w_it is W (spread over the
    first token(s)), with negative ω on some answers (|ω| must be taken) and junk ω where the weight
    is 0."""
    N = len(W)
    omega = torch.full((N, tokens), float("nan"))          # unselected positions: never read
    weights = torch.zeros(N, tokens, dtype=torch.float64)
    for i, w in enumerate(W):
        if w:
            omega[i, :2] = -2.0 if i % 2 else 2.0
            weights[i, :2] = w / 4.0                       # 2 tokens x |2| x w/4 = w
    return omega, weights


# 1. n_eff
#    -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("W, n_eff, top1", [([1, 1, 1, 1], 4.0, 0.25), ([1, 0, 0, 0], 1.0, 1.0),
                                            ([3, 1], 16 / 10, 0.75),
                                            ([2, 2, 0, 0, 0, 0], 2.0, 0.5)])
def test_n_eff_on_hand_made_weights(W, n_eff, top1):
    omega, weights = weights_for(W)
    out = update_answers_effective(omega, weights)
    assert out["update_answers_effective"] == pytest.approx(n_eff, rel=1e-12)
    assert out["update_answers_effective_share"] == pytest.approx(n_eff / len(W), rel=1e-12)
    assert out["update_weight_top1_share"] == pytest.approx(top1, rel=1e-12)
    assert out["update_answers_with_weight"] == sum(1 for w in W if w)


def test_n_eff_is_scale_free_and_uses_the_loss_weights_of_the_selection():
    # The normaliser (1/S) scales every W alike: n_eff does not move. Real loss_weights on a real
    # selection.
    gen = torch.Generator().manual_seed(0)
    valid = torch.ones(4, 5, dtype=torch.bool)
    valid[3, 3:] = False
    # on-policy ω = A
    omega = torch.tensor([2.47, -0.35, -0.35, 0.0])[:, None].expand(4, 5).clone()
    scores = gmts.token_scores("gmts", torch.rand(4, 5, generator=gen), omega)
    selected = gmts.select_tokens(scores, valid, 0.5)
    for norm in ("selected", "all"):
        weights = gmts.loss_weights(valid, selected, norm)
        W = (omega.abs().double() * weights).sum(1)
        expect = float(W.sum() ** 2 / W.pow(2).sum())
        assert (update_answers_effective(omega, weights)["update_answers_effective"]
                == pytest.approx(expect, 1e-12))
    # the row with A = 0 carries nothing whatever was selected in it
    assert update_answers_effective(omega, weights)["update_answers_with_weight"] <= 3


def test_n_eff_edge_cases_are_none_not_zero_or_nan():
    valid = torch.ones(3, 4, dtype=torch.bool)
    # nothing selected: all weights 0
    none_selected = torch.zeros(3, 4, dtype=torch.float64)
    # selected, but ω = 0 everywhere (A = 0)
    zero_omega = torch.zeros(3, 4)
    for omega, weights in ((torch.ones(3, 4), none_selected),
                           (zero_omega, gmts.loss_weights(valid, valid, "selected"))):
        out = update_answers_effective(omega, weights)
        assert out == {"update_answers_effective": None, "update_answers_effective_share": None,
                       "update_weight_top1_share": None, "update_answers_with_weight": 0}
    # no rows at all
    out = update_answers_effective(torch.zeros(0, 4), torch.zeros(0, 4, dtype=torch.float64))
    assert out["update_answers_effective"] is None
    with pytest.raises(ValueError, match="not finite"):
        update_answers_effective(torch.tensor([[float("inf"), 1.0]]),
                                 torch.tensor([[0.5, 0.5]], dtype=torch.float64))
    with pytest.raises(ValueError, match="same"):
        update_answers_effective(torch.ones(2, 3), torch.ones(2, 4))
    with pytest.raises(ValueError, match="together"):
        update_answers_effective(torch.ones(2, 3), torch.ones(2, 3), reduce=lambda x: x)


class FakeRanks:
    """`world` threads standing in for data-parallel ranks: all_reduce_sum / all_reduce_max exchange
    tensors at a barrier, as torch.distributed's collectives would (each call must be made by every
    rank, in the same order)."""

    def __init__(self, world):
        self.world, self.barrier, self.slots = world, threading.Barrier(world), [None] * world

    def _exchange(self, rank, value, combine):
        self.barrier.wait()
        self.slots[rank] = value.clone()
        self.barrier.wait()
        out = combine(torch.stack(self.slots))
        self.barrier.wait()
        return out

    def run(self, fn):
        results, errors = [None] * self.world, []

        def body(rank):
            try:
                results[rank] = fn(rank, lambda v: self._exchange(rank, v, lambda s: s.sum(0)),
                                   lambda v: self._exchange(rank, v, lambda s: s.max(0).values))
            # a failed rank must fail the test, not hang it
            except Exception as err:  # noqa: BLE001
                errors.append(err)
                self.barrier.abort()
        threads = [threading.Thread(target=body, args=(r,)) for r in range(self.world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        if errors:
            raise errors[0]
        return results


def test_n_eff_over_ranks_equals_the_whole_batch():
    W = [3.0, 0.0, 1.0, 2.0, 5.0, 0.0]
    omega, weights = weights_for(W)
    whole = update_answers_effective(omega, weights)
    # uneven shares, one rank with no weight
    parts = [slice(0, 1), slice(1, 4), slice(4, 6)]
    got = FakeRanks(3).run(lambda r, s,
                           m: update_answers_effective(omega[parts[r]], weights[parts[r]],
                                                                     reduce=s, reduce_max=m))
    for out in got:
        assert out == pytest.approx(whole, rel=1e-12)


# 2. The gradient-noise ratio on hand-made vectors
#    ---------------------------------------------------------------------

def probe_on_vectors(g_a, g_b, groups=(1, 1)):
    """Drive the probe as an accumulation loop would, with the gradients set by hand."""
    p = torch.nn.Parameter(torch.zeros(len(g_a), dtype=torch.float64))
    probe = GradNoiseProbe([p])
    rows = torch.arange(2 * sum(groups))
    rows_a, rows_b = probe.split(rows, 2)
    assert len(rows_a) == 2 * groups[0] and len(rows_b) == 2 * groups[1]
    p.grad = torch.tensor(g_a, dtype=torch.float64)
    probe.snapshot()
    p.grad = p.grad + torch.tensor(g_b, dtype=torch.float64)            # half b accumulates on top
    return probe.metrics()


def test_noise_ratio_on_hand_made_vectors():
    # ‖g_a − g_b‖² / ‖g_a + g_b‖²: d = (2, 2), s = (4, 6)
    assert probe_on_vectors([3.0, 4.0], [1.0, 2.0])["grad_noise_ratio"] == pytest.approx(
        8 / 52, rel=1e-12)
    # orthogonal halves of equal norm: η = 1, the signal estimate g_a·g_b is 0, B_simple unbounded
    assert probe_on_vectors([1.0, 0.0], [0.0, 1.0]) == {"grad_noise_ratio": pytest.approx(1.0),
                                                        "grad_noise_scale": None}
    # B = 2 groups: B η / (1 − η)
    out = probe_on_vectors([3.0, 4.0], [1.0, 2.0])
    assert out["grad_noise_scale"] == pytest.approx(2 * (8 / 52) / (1 - 8 / 52), rel=1e-12)
    # unequal halves (2 groups and 1): n_a n_b ‖g_a/n_a − g_b/n_b‖² / ‖g‖², here g_a = 2 g_b: the
    # halves agree
    assert probe_on_vectors([2.0, 4.0], [1.0, 2.0], groups=(2, 1))["grad_noise_ratio"] == 0.0
    out = probe_on_vectors([1.0, 0.0], [1.0, 1.0], groups=(2, 1))
    assert out["grad_noise_ratio"] == pytest.approx(2 * (0.5 ** 2 + 1.0) / (4 + 1), rel=1e-12)


def test_noise_edge_cases():
    assert probe_on_vectors([1.0, -2.0], [1.0, -2.0]) == {"grad_noise_ratio": 0.0,
                                                          "grad_noise_scale": 0.0}
    # opposite halves: the sum is 0 and the halves are not: η = inf, no noise scale (documented)
    assert probe_on_vectors([1.0, -2.0], [-1.0, 2.0]) == {"grad_noise_ratio": math.inf,
                                                          "grad_noise_scale": None}
    # no gradient at all: nothing to measure
    assert probe_on_vectors([0.0, 0.0], [0.0, 0.0]) == {"grad_noise_ratio": None,
                                                        "grad_noise_scale": None}
    assert noise_from_halves(float("nan"), 1.0, 1, 1) == (None, None)
    with pytest.raises(ValueError, match="at least one group"):
        noise_from_halves(1.0, 1.0, 0, 2)
    p = torch.nn.Parameter(torch.zeros(2))
    probe = GradNoiseProbe([p])
    with pytest.raises(ValueError, match="at least 2 groups"):
        # one group cannot be halved
        probe.split(torch.arange(4), 4)
    with pytest.raises(ValueError, match="whole groups"):
        probe.split(torch.tensor([0, 1, 3, 2]), 2)
    with pytest.raises(RuntimeError, match="snapshot"):
        probe.split(torch.arange(4), 2)
        probe.finish()                                                     # forgot the snapshot
    with pytest.raises(ValueError, match="trainable"):
        GradNoiseProbe([torch.nn.Parameter(torch.zeros(1), requires_grad=False)])


def test_noise_ratio_of_a_large_float32_gradient_is_summed_exactly():
    # 32 float32 parameters of 2^20 entries, the whole gradient in half a (as when half b's groups
    # all have A = 0): g_b = 0, so η = n_a n_b ‖g_a/n_a‖² / ‖g_a‖² = 1. A float32 dot over the
    # 2^25-entry buffer at once loses 1e-5 to 1e-3 of the sum on x86 CPUs, which the per-parameter
    # ‖g‖² does not; in float64 both are sums of exact squares, off by at most n 2^-53 ≈ 4e-9 each.
    params = [torch.nn.Parameter(torch.zeros(1 << 20)) for _ in range(32)]
    gen = torch.Generator().manual_seed(0)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen) * 1e-3
    probe = GradNoiseProbe(params)
    probe.split(torch.arange(8), 2)
    probe.snapshot()
    assert probe.metrics()["grad_noise_ratio"] == pytest.approx(1.0, abs=1e-7)
    # --log-grad-noise on one process takes that ‖g‖², not the clip's float32 norm
    noise = GradNoise(torch.nn.Linear(2, 2))
    noise.probe = probe
    assert noise.figures(1.001 * probe.sum_sq ** 0.5, STEPPED) == probe.metrics()
    assert noise.figures(1.0, NOTHING) == {}


def test_noise_ratio_estimates_the_noise_share_of_iid_group_gradients():
    # What η and B_simple estimate (gmts/METHOD.md): per-group gradients x_j = μ + noise, noise ~
    # N(0, σ² I) in D dimensions. Then E‖g_a − g_b‖² = B tr Σ and E‖g_a + g_b‖² = B² |μ|² + B tr Σ
    # (equal halves), so η ≈ tr Σ / (B |μ|² + tr Σ) and B_simple ≈ tr Σ / |μ|². σ is chosen so that
    # tr Σ = B |μ|² (η ≈ 1/2, where 1/(1 − η) amplifies errors only 2x). With D = 400,000 the norms'
    # relative std is about sqrt(2 / D) ≈ 0.2%, so 3% (5% after the amplification) is > 10 standard
    # deviations, whatever the generator's stream.
    D, B = 400_000, 8
    sigma = math.sqrt(B / D)
    gen = torch.Generator().manual_seed(0)
    mu = torch.randn(D, generator=gen, dtype=torch.float64) / math.sqrt(D)              # |μ|² ≈ 1
    x = mu + sigma * torch.randn(B, D, generator=gen, dtype=torch.float64)
    out = probe_on_vectors(x[:B // 2].sum(0).tolist(), x[B // 2:].sum(0).tolist(),
                           groups=(B // 2, B // 2))
    trace, signal = D * sigma ** 2, float(mu @ mu)
    assert out["grad_noise_ratio"] == pytest.approx(trace / (B * signal + trace), rel=0.03)
    # 1/(1 − η) amplifies: 5%
    assert out["grad_noise_scale"] == pytest.approx(trace / signal, rel=0.05)


# 3. On a real model, through the trainer's own gradient accumulation
#    ---------------------------------------------

G = 2


def real_batch(mirror=None):
    """4 groups x 2 answers of a tiny float64 model: prompts, completions, valid mask, advantages,
    loss weights. mirror="same": groups 2-3 repeat groups 0-1 exactly; "opposite": the same with the
    advantages negated."""
    model, _ = tiny_model(hidden=16, layers=1, dtype=torch.float64, seed=3)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 200, (n,), generator=gen) for n in (3, 5, 4, 2)]
    completions = torch.randint(0, 200, (8, 6), generator=gen)
    valid = torch.ones(8, 6, dtype=torch.bool)
    valid[1, 4:] = valid[6, 2:] = False
    adv = torch.tensor([1.0, -1.0, 0.7, -0.7, 0.3, -0.3, 1.2, -1.2], dtype=torch.float64)
    if mirror:
        prompts[2:], completions[4:], valid[4:] = prompts[:2], completions[:4], valid[:4]
        adv[4:] = adv[:4] if mirror == "same" else -adv[:4]
    weights = gmts.loss_weights(valid, valid, "selected")
    return model, prompts, completions, valid, adv, weights


def trainer_pieces(prompts, completions, valid, adv, weights, micro_batch_size):
    """The trainer's own objects for one on-policy optimizer batch of all 8 rows
    (gmts/trainer/batches.py): the rollout Batch, its one mini-batch (on-policy, r = 1: π_old :=
    this forward's log π) and the flags the passes read."""
    zeros = torch.zeros(completions.shape, dtype=torch.float64)
    batch = Batch(problems=[None] * len(prompts), prompt_ids=prompts, completion_ids=completions,
                  valid_mask=valid, old_logp=zeros, entropy=zeros, texts=[""] * len(adv),
                  rewards=torch.zeros(len(adv)), advantages=adv)
    mb = MiniBatch(batch, torch.arange(len(adv)), G)
    cfg = types.SimpleNamespace(group_size=G, micro_batch_size=micro_batch_size,
                                micro_batch_tokens=0, temperature=1.0, chunk_size=64, eps_low=0.2,
                                eps_high=0.28, beta=0.0)
    return batch, mb, cfg


def probe_step(model, prompts, completions, valid, adv, weights, micro_batch_size):
    """The trainer's accumulation with --log-grad-noise (accumulate_gradients with the probe: half
    a, snapshot, half b, finish), as train.py runs it; returns the probe's figures without and with
    the caller's norm."""
    params = [p for p in model.parameters() if p.requires_grad]
    model.zero_grad(set_to_none=True)
    noise = GradNoise(model)
    probe = noise.probe
    batch, mb, cfg = trainer_pieces(prompts, completions, valid, adv, weights, micro_batch_size)
    noise.accumulate(model, batch, mb, mb.rows, weights, cfg, on_policy=True)
    norm = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in params if p.grad is not None))
    return probe.metrics(), probe.metrics(grad_norm=norm)


def separate_halves(model, prompts, completions, valid, adv, weights):
    """g_a and g_b from two independent backward passes (no probe, no accumulation across
    halves)."""
    params = [p for p in model.parameters() if p.requires_grad]
    batch, mb, cfg = trainer_pieces(prompts, completions, valid, adv, weights,
                                    micro_batch_size=4)
    out = []
    for rows in (torch.arange(4), torch.arange(4, 8)):
        model.zero_grad(set_to_none=True)
        accumulate_gradients(model, batch, mb, rows, weights, cfg, on_policy=True)
        out.append(torch.cat([p.grad.reshape(-1) for p in params]))
    return out


def test_identical_halves_give_zero():
    # One micro-batch per half: g = g_a + g_a exactly, g_b = g - g_a = g_a bit for bit, η = 0
    # exactly.
    local, given = probe_step(*real_batch("same"), micro_batch_size=4)
    assert local == given == {"grad_noise_ratio": 0.0, "grad_noise_scale": 0.0}
    # Several micro-batches per half: half b's are added one by one onto g_a in .grad, so g - g_a
    # carries that accumulation's rounding, |error| <~ k · eps · |g| for k <= 4 additions (eps =
    # 2.2e-16, float64): η <= 1e-28.
    for micro in (1, 3):
        local, given = probe_step(*real_batch("same"), micro_batch_size=micro)
        assert 0.0 <= local["grad_noise_ratio"] < 1e-28 and 0.0 <= given["grad_noise_ratio"] < 1e-28


def test_opposite_halves_give_infinity():
    # g_b = -g_a: one micro-batch per half sums to exactly 0: η = inf, no noise scale (documented).
    local, given = probe_step(*real_batch("opposite"), micro_batch_size=4)
    assert local == given == {"grad_noise_ratio": math.inf, "grad_noise_scale": None}
    # Several micro-batches: the sum is the accumulation's rounding only (|g| <~ k · eps · |g_a|): η
    # > 1e28.
    local, _ = probe_step(*real_batch("opposite"), micro_batch_size=1)
    assert local["grad_noise_ratio"] > 1e28 and local["grad_noise_scale"] is None


def test_ratio_matches_separate_autograd_halves_for_any_micro_batching():
    batch = real_batch()
    g_a, g_b = separate_halves(*batch)
    expect = float((g_a - g_b).pow(2).sum() / (g_a + g_b).pow(2).sum())
    assert 0 < expect < math.inf
    for micro in (1, 2, 3, 8):
        local, given = probe_step(*batch, micro_batch_size=micro)
        # float64 model: the halves' sums differ from the separate passes only in summation order
        # (~1e-15 relative)
        assert local["grad_noise_ratio"] == pytest.approx(expect, rel=1e-9)
        assert given["grad_noise_ratio"] == pytest.approx(expect, rel=1e-9)


def test_ratio_over_ranks_equals_one_process():
    # Two ranks, each with two of the four groups (rank 0: groups 0, 2; rank 1: groups 1, 3), each
    # its own copy of the model; the gradients summed over ranks as optimizer_step does before
    # clipping.
    batch = real_batch()
    whole, _ = probe_step(*batch, micro_batch_size=2)
    ranks = FakeRanks(2)
    _model0, prompts, completions, valid, adv, weights = batch
    mine = {0: torch.tensor([0, 1, 4, 5]), 1: torch.tensor([2, 3, 6, 7])}
    # Each rank's copy of the model is built here, not in its thread: tiny_model seeds torch's
    # global generator, which two threads building at once would share (the copies would differ by
    # the interleaving).
    models = {
        rank: tiny_model(hidden=16, layers=1, dtype=torch.float64, seed=3)[0] for rank in mine}

    def rank_body(rank, reduce, _max):
        model = models[rank]
        params = [p for p in model.parameters() if p.requires_grad]
        rows = mine[rank]
        noise = GradNoise(model)
        probe = noise.probe
        sub = ([prompts[int(r) // G] for r in rows[::G]], completions[rows], valid[rows], adv[rows],
               weights[rows])
        # this rank's rows, renumbered
        batch, mb, cfg = trainer_pieces(*sub, micro_batch_size=1)
        # over the simulated ranks
        noise.accumulate(model, batch, mb, mb.rows, weights[rows], cfg, reduce=reduce, rank=rank,
                         on_policy=True)
        flat = reduce(torch.cat([p.grad.reshape(-1) for p in params]))  # all_reduce_gradients
        return probe.groups_a, probe.groups_b, probe.metrics(grad_norm=float(flat.norm()))

    # one process splits groups {0, 1} | {2, 3}; the ranks {0} + {1} | {2} + {3}: the same halves
    for groups_a, groups_b, out in ranks.run(rank_body):
        assert (groups_a, groups_b) == (2, 2)
        assert out["grad_noise_ratio"] == pytest.approx(whole["grad_noise_ratio"], rel=1e-9)


def test_split_keeps_halves_balanced_when_every_rank_has_an_odd_count():
    out = FakeRanks(2).run(lambda r, s,
                           m: GradNoiseProbe([torch.nn.Parameter(torch.zeros(1))]).split(
        torch.arange(3 * G), G, reduce=s, rank=r))
    assert [len(a) // G for a, _ in out] == [2, 1] and [len(b) // G for _, b in out] == [1, 2]


# 4. The flag
#    -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flags, message", [
    (["--prompts-per-step", "1"], "--log-grad-noise needs at least 2 prompts per optimizer step"),
    (["--prompts-per-step", "4", "--mini-batch-size", "1"], "got --mini-batch-size 1"),
    (["--fsdp"], "--log-grad-noise does not support --fsdp")])
def test_log_grad_noise_flag_refuses_what_it_cannot_measure(flags, message, capsys, monkeypatch):
    from gmts.run.config import parse_config
    # as under torchrun, so that --fsdp itself passes its own rule
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit) as exit_:
        parse_config(["--log-grad-noise", *flags])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert parse_config(["--log-grad-noise", "--prompts-per-step", "4",
                         "--mini-batch-size", "2"]).log_grad_noise
    # off by default: it costs a buffer
    assert not parse_config([]).log_grad_noise


def test_combine_steps_of_one_rollout_batch():
    from gmts.trainer.metrics import combine_steps
    omega, weights = weights_for([1, 1, 1, 1])
    a = update_answers_effective(omega, weights)                            # n_eff 4
    b = update_answers_effective(*weights_for([3, 1]))                      # n_eff 1.6
    # no update
    empty = update_answers_effective(torch.ones(2, 3), torch.zeros(2, 3, dtype=torch.float64))
    out = combine_steps([a, empty, b])
    # the undefined step is skipped
    assert out["update_answers_effective"] == pytest.approx((4 + 1.6) / 2)
    assert out["update_weight_top1_share"] == pytest.approx((0.25 + 0.75) / 2)
    # over the same steps as n_eff
    assert out["update_answers_with_weight"] == pytest.approx((4 + 2) / 2)
    # no step measured the noise
    assert "grad_noise_ratio" not in out
    assert combine_steps([empty])["update_answers_effective"] is None
    noisy = [dict(a, grad_noise_ratio=r, grad_noise_scale=s)
             for r, s in ((0.2, 0.5), (math.inf, None), (0.5, 2.0), (None, None))]
    out = combine_steps(noisy)
    # medians of 3 measured steps
    assert out["grad_noise_ratio"] == 0.5 and out["grad_noise_scale"] == 2.0
    out = combine_steps(noisy[:2])
    # (0.2 + inf) / 2, unbounded
    assert out["grad_noise_ratio"] == math.inf and out["grad_noise_scale"] is None
