"""gmts/method/checked.py: what `import gmts` exports is grpo.py's functions with every argument
checked. Each has grpo's signature and returns grpo's result unchanged on good input; each bad
argument is one ValueError naming it (more cases in tests/test_method.py, "Bad input")."""
import inspect

import pytest
import torch

import gmts
from gmts.method import checked, grpo

CHECKED = ("group_advantages", "overlong_penalty", "token_omega", "clip_active", "token_scores",
           "num_to_select", "select_tokens", "loss_weights", "token_objective", "policy_loss")


@pytest.mark.parametrize("name", CHECKED)
def test_the_package_exports_the_checked_function_with_grpos_signature(name):
    assert getattr(gmts, name) is getattr(checked, name)
    assert inspect.signature(getattr(checked, name)) == inspect.signature(getattr(grpo, name))


def test_on_good_input_each_checked_function_returns_grpos_result():
    g = torch.Generator().manual_seed(0)
    valid = torch.rand(6, 5, generator=g) > 0.3
    logp, old = -torch.rand(6, 5, generator=g), -torch.rand(6, 5, generator=g)
    ref, entropy = -torch.rand(6, 5, generator=g), torch.rand(6, 5, generator=g)
    adv = torch.randn(6, generator=g)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    exclude, group_ids = adv > 1.0, torch.arange(6) // 3
    scores = torch.rand(6, 5, generator=g)
    selected = grpo.select_tokens(scores, valid, 0.4)
    weights, kl_weights = grpo.loss_weights(valid, selected), grpo.loss_weights(valid, valid)
    calls = [
        ("group_advantages", (rewards, 3), {"std": "biased"}),
        ("overlong_penalty", (torch.tensor([1, 5, 8]), 8, 4), {"factor": 0.5}),
        ("token_omega", (logp, old, adv), {"beta": 0.1, "ref_logp": ref, "kl_share": 0.5}),
        ("clip_active", (torch.exp(logp - old), adv, 0.2, 0.28), {}),
        ("token_scores", ("gmts", entropy, logp), {"weight": 0.5}),
        ("num_to_select", (0.3, 10), {}),
        ("select_tokens", (scores, valid, 0.4), {"scope": "group", "group_ids": group_ids,
                                                 "exclude": exclude, "bottom": True}),
        ("loss_weights", (valid, selected, "sequence"), {}),
        ("token_objective", (logp, old, adv), {"beta": 0.1, "ref_logp": ref}),
        ("policy_loss", (logp, old, adv, weights), {"beta": 0.1, "ref_logp": ref,
                                                     "kl_weights": kl_weights}),
    ]
    assert {name for name, _, _ in calls} == set(CHECKED)
    for name, args, kwargs in calls:
        want, got = getattr(grpo, name)(*args, **kwargs), getattr(checked, name)(*args, **kwargs)
        for w, o in zip(want if isinstance(want, tuple) else (want,),
                        got if isinstance(got, tuple) else (got,)):
            assert torch.equal(torch.as_tensor(w), torch.as_tensor(o)), name


def test_each_bad_argument_is_one_value_error_naming_it():
    valid = torch.ones(2, 3, dtype=torch.bool)
    scores, z = torch.rand(2, 3), torch.zeros(2, 3)
    cases = [
        (lambda: checked.group_advantages(torch.zeros(2, 2), 2), "1-D"),
        (lambda: checked.group_advantages([0.0, float("nan")], 2), "NaN"),
        (lambda: checked.overlong_penalty([3], 8, 9), "overlong buffer"),
        (lambda: checked.overlong_penalty([3], 8, 4, factor=-1), "factor"),
        (lambda: checked.clip_active(z, torch.zeros(3), 0.2, 0.28), "rows"),
        (lambda: checked.token_omega(z, z, torch.zeros(2, 4)), "shape mismatch"),
        (lambda: checked.token_scores("gmts", z), "needs omega"),
        (lambda: checked.token_scores("gmts", z, torch.zeros(2, 4)), "shape mismatch"),
        (lambda: checked.num_to_select(True, 10), "ratio"),
        (lambda: checked.select_tokens(scores, valid.long(), 0.2), "bool"),
        (lambda: checked.select_tokens(scores, valid, 0.2, exclude=[True]), "exclude"),
        (lambda: checked.select_tokens(scores, valid, 0.2, scope="group", group_ids=[0]),
         "group_ids"),
        (lambda: checked.select_tokens(None, valid, 0.0), "ratio"),       # also without scores
        (lambda: checked.select_tokens(None, valid, 0.2, scope="row"), "scope"),
        (lambda: checked.loss_weights(valid, valid[:, :2]), "shape mismatch"),
        (lambda: checked.loss_weights(~valid, valid), "padding"),
        (lambda: checked.token_objective(z, z, torch.zeros(2), beta=0.1), "ref_logp"),
        (lambda: checked.policy_loss(z, z, torch.zeros(3), z), "rows"),
        (lambda: checked.policy_loss(z, z, torch.zeros(2), z, beta=0.1), "ref_logp"),
        (lambda: checked.token_scores("entropy", z), r"unknown selector 'entropy'; choose one"),
        (lambda: checked.loss_weights(valid, valid, "token"), r"unknown loss_norm 'token'"),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()


def test_inputs_are_handed_on_as_grpo_takes_them_from_the_trainer():
    """grpo.py takes the trainer's tensors as built: advantages a tensor on the tokens' device,
    log-probs and entropies float32 or float64 (head.py's). gmts.<name> hands a caller's other
    input on so: a list of advantages as a tensor, bf16 log-probs and entropies upcast, so ω and
    the scores are float32 and equal to grpo's on the upcast input (a bf16 ratio near 1 would
    misplace the clip: bf16 has 8 bits of mantissa, 1.28 and 1.2734 are neighbours)."""
    g = torch.Generator().manual_seed(0)
    logp, old = -torch.rand(4, 6, generator=g), -torch.rand(4, 6, generator=g)
    ref, entropy = -torch.rand(4, 6, generator=g), torch.rand(4, 6, generator=g)
    adv = [1.5, -0.5, 0.0, 2.0]
    adv_t = torch.tensor(adv)
    for lp, old_lp in ((logp, old), (logp.bfloat16(), old.bfloat16())):
        omega = gmts.token_omega(lp, old_lp, adv, beta=0.1, ref_logp=ref)
        assert omega.dtype == torch.float32
        assert torch.equal(omega, grpo.token_omega(lp.float(), old_lp, adv_t, beta=0.1,
                                                   ref_logp=ref))
        assert torch.equal(gmts.clip_active(torch.exp(lp - old_lp), adv, 0.2, 0.28),
                           grpo.clip_active(torch.exp(lp - old_lp), adv_t, 0.2, 0.28))
        surrogate, _ = gmts.token_objective(lp, old_lp, adv)
        assert torch.equal(surrogate, grpo.token_objective(lp, old_lp, adv_t)[0])
    low = entropy.bfloat16()
    for selector in ("ets", "gmts", "random"):
        scores = gmts.token_scores(selector, low, -logp, generator=torch.Generator().manual_seed(1))
        assert scores.dtype == torch.float32
        assert torch.equal(scores, grpo.token_scores(selector, low.float(), -logp,
                                                     generator=torch.Generator().manual_seed(1)))
