"""gmts.method.head: chunked log-probs / entropies through the output head equal the plain (tokens x
vocab) computation."""

import pytest
import torch

from gmts.method.head import causal_lm_hidden_and_head, token_entropy, token_logprobs_and_entropy

torch.set_num_threads(1)


def make_inputs(lead=(3, 7), width=16, vocab=50, dtype=torch.float32, bias=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    # Logits of std ~2: a realistic spread (some tokens near-certain, some flat).
    hidden = torch.randn(*lead, width, generator=g, dtype=torch.float64)
    weight = torch.randn(vocab, width, generator=g, dtype=torch.float64) * (2.0 / width ** 0.5)
    b = torch.randn(vocab, generator=g, dtype=torch.float64) if bias else None
    targets = torch.randint(0, vocab, lead, generator=g)
    cast = lambda t: None if t is None else t.to(dtype).requires_grad_(True)
    return cast(hidden), cast(weight), cast(b), targets


def plain(hidden, weight, targets, bias=None, temperature=1.0):
    """The reference: full logits, log_softmax, gather; entropy of softmax(z / tau)."""
    z = hidden @ weight.T
    if bias is not None:
        z = z + bias
    z = z.to(torch.promote_types(z.dtype, torch.float32)) / temperature
    logp_all = torch.log_softmax(z, dim=-1)
    logp = logp_all.gather(-1, targets[..., None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy.detach()


def grads(fn, tensors, upstream):
    logp = fn()
    (logp * upstream).sum().backward()
    out = [t.grad.clone() for t in tensors]
    for t in tensors:
        t.grad = None
    return logp.detach(), out


# 21 tokens: chunk 1, dividing-not, uneven, > tokens
@pytest.mark.parametrize("chunk_size", [1, 4, 5, 1024])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("bias", [False, True])
def test_float32_matches_plain_values_and_gradients(chunk_size, temperature, bias):
    hidden, weight, b, targets = make_inputs(bias=bias)
    params = [hidden, weight] + ([b] if bias else [])
    # per-token weights (omega/S)
    upstream = torch.randn(targets.shape, generator=torch.Generator().manual_seed(1))

    ref_logp, ref_grads = grads(lambda: plain(hidden, weight, targets, b, temperature)[0], params,
                                upstream)
    ref_entropy = plain(hidden, weight, targets, b, temperature)[1]
    logp, entropy = token_logprobs_and_entropy(hidden, weight, targets, head_bias=b,
                                               temperature=temperature, chunk_size=chunk_size)
    assert (logp.shape == targets.shape == entropy.shape and logp.dtype == entropy.dtype
            == torch.float32)
    # Tolerances from float32 arithmetic (u = 2^-24 ≈ 6e-8): a chunk is a GEMM of another shape,
    # which may block the 16-term dot products differently: |δz| <= 16 u Σ|h_i w_i| ≈ 16 · 6e-8 · 8
    # ≈ 8e-6 for logits of std ~2 (|z| up to ~8); log-softmax and the entropy add a few u · max|z| ≈
    # 1e-6. Hence 1e-5 absolute (+1e-5 relative).
    torch.testing.assert_close(logp.detach(), ref_logp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy, ref_entropy, rtol=1e-5, atol=1e-5)

    _, our_grads = grads(lambda: token_logprobs_and_entropy(hidden, weight, targets, head_bias=b,
                                                            temperature=temperature,
                                                            chunk_size=chunk_size)[0],
                         params, upstream)
    for ours, ref in zip(our_grads, ref_grads):
        assert ours.dtype == ref.dtype and ours.shape == ref.shape
        # a gradient coordinate sums up to 21 tokens x 50 vocabulary terms, regrouped by the chunks:
        # its error is at most ~(21 + 50) u Σ|terms| <= 71 · 6e-8 · (a few x max|g|) ≈ 2e-5 max|g|,
        # under 1e-4 max|g|
        torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item())


def test_temperature_scales_gradient_by_one_over_tau():
    # d logp / d z = (onehot - softmax(z / tau)) / tau: at tau = 2 with z scaled by 2 the softmax is
    # the same, so the gradient wrt hidden is exactly half of the tau = 1 gradient on the unscaled
    # weights.
    hidden, weight, _, targets = make_inputs(dtype=torch.float64)
    (g1,) = torch.autograd.grad(token_logprobs_and_entropy(hidden, weight, targets)[0].sum(),
                                [hidden])
    (g2,) = torch.autograd.grad(
        token_logprobs_and_entropy(hidden, 2 * weight, targets, temperature=2.0)[0].sum(),
                                [hidden])
    # W doubled doubles dz/dh; 1/tau halves it back. float64 (u ≈ 1.1e-16): z/τ = (2W h)/2 rounds
    # like W h up to a few u, so the two gradients differ by ~1e-15, far under 1e-12.
    torch.testing.assert_close(g2, g1, rtol=1e-12, atol=1e-12)


def test_float64_tighter_and_gradcheck():
    hidden, weight, b, targets = make_inputs(lead=(2, 3), width=5, vocab=11, dtype=torch.float64,
                                             bias=True)
    logp, entropy = token_logprobs_and_entropy(hidden, weight, targets, head_bias=b,
                                               temperature=1.3, chunk_size=4)
    ref_logp, ref_entropy = plain(hidden, weight, targets, b, 1.3)
    assert logp.dtype == torch.float64
    # float64: 5-term dot products and an 11-way log-softmax of |z| < 10 round at ~20 u · 10 ≈ 2e-14
    # << 1e-12. gradcheck's central differences at eps = 1e-6: truncation ~eps² x the third
    # derivative ≈ 1e-12 and rounding ~u/eps ≈ 1e-10, both far under atol = 1e-7.
    torch.testing.assert_close(logp.detach(), ref_logp, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(entropy, ref_entropy, rtol=1e-12, atol=1e-12)
    fn = lambda h, w, bb: token_logprobs_and_entropy(h, w, targets, head_bias=bb, temperature=1.3,
                                                     chunk_size=4)[0]
    assert torch.autograd.gradcheck(fn, (hidden, weight, b), eps=1e-6, atol=1e-7)


def test_bf16_close_to_float32_reference():
    hidden, weight, _, targets = make_inputs(lead=(4, 33), width=64, vocab=300)
    ref_logp, ref_entropy = plain(hidden, weight, targets)
    (ref_gh, ref_gw) = torch.autograd.grad(ref_logp.sum(), [hidden, weight])
    h16 = hidden.detach().bfloat16().requires_grad_(True)
    w16 = weight.detach().bfloat16().requires_grad_(True)
    logp, entropy = token_logprobs_and_entropy(h16, w16, targets, chunk_size=37)
    # softmax math in float32 even for bf16 inputs
    assert logp.dtype == entropy.dtype == torch.float32
    gh, gw = torch.autograd.grad(logp.sum(), [h16, w16])
    assert gh.dtype == gw.dtype == torch.bfloat16
    # bf16 has 8 mantissa bits: logits of magnitude ~5 carry errors ~0.03; compare at that scale.
    torch.testing.assert_close(logp.detach(), ref_logp, rtol=0, atol=0.1)
    torch.testing.assert_close(entropy, ref_entropy, rtol=0, atol=0.05)
    for ours, ref in ((gh, ref_gh), (gw, ref_gw)):
        rel = (ours.float() - ref).norm() / ref.norm()
        assert rel < 0.02, rel
    # And bf16 through our path is as close as the plain bf16 computation is (no extra error from
    # chunking).
    plain16_logp, _ = plain(h16.detach(), w16.detach(), targets)
    assert ((logp.detach() - ref_logp).abs().max()
            <= 1.5 * (plain16_logp - ref_logp).abs().max() + 1e-6)


def test_cpu_autocast_runs_matmuls_in_bf16_and_returns_grads_in_param_dtype():
    hidden, weight, _, targets = make_inputs(lead=(2, 9), width=32, vocab=70)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logp, _ = token_logprobs_and_entropy(hidden, weight, targets, chunk_size=5)
    gh, gw = torch.autograd.grad(logp.sum(), [hidden, weight])
    assert gh.dtype == gw.dtype == torch.float32
    ref_logp, _ = plain(hidden.detach().bfloat16(), weight.detach().bfloat16(), targets)
    exact_logp, _ = plain(hidden.detach(), weight.detach(), targets)
    # Both sides are the same bf16 GEMM (float32 accumulation over the same K = 32 products, in K
    # order: chunking splits rows, never the reduction), rounded to bf16 alike; what remains is the
    # float32 softmax, ~u · |z| < 1e-6.
    # matches the bf16 matmul result...
    torch.testing.assert_close(logp.detach(), ref_logp, rtol=0, atol=1e-4)
    # ...which float32 does not (so bf16 was really used)
    assert (logp.detach() - exact_logp).abs().max() > 1e-4


def test_entropy_has_no_grad_and_with_entropy_false():
    hidden, weight, _, targets = make_inputs()
    logp, entropy = token_logprobs_and_entropy(hidden, weight, targets)
    assert logp.requires_grad and not entropy.requires_grad and entropy.grad_fn is None
    logp2, none = token_logprobs_and_entropy(hidden, weight, targets, with_entropy=False,
                                             chunk_size=4)
    assert none is None
    # chunk 4 against the default 1024: other GEMM shapes, so the logits' float32 rounding may
    # differ by up to 16 u Σ|h w| ≈ 8e-6 (test_float32_matches_plain_values_and_gradients); 1e-5,
    # not the 1e-6 one CPU happened to meet
    torch.testing.assert_close(logp2, logp, rtol=0, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
def test_no_tokens_give_empty_outputs_and_zero_gradients(dtype, bias):
    """A pass with no valid token (every answer empty) goes through the same Function: logp and
    entropy (0,), float32, and a backward that gives every input a zero gradient."""
    hidden, weight, b, targets = make_inputs(lead=(0,), dtype=dtype, bias=bias)
    logp, entropy = token_logprobs_and_entropy(hidden, weight, targets, head_bias=b, chunk_size=4)
    assert logp.shape == entropy.shape == (0,) and logp.dtype == entropy.dtype == torch.float32
    logp.sum().backward()
    assert hidden.grad.shape == (0, 16) and not weight.grad.any()
    assert b is None or not b.grad.any()


def test_only_needed_gradients_are_computed():
    hidden, weight, _, targets = make_inputs()
    frozen_w = weight.detach()  # frozen head (e.g. LoRA): only grad wrt hidden
    (gh,) = torch.autograd.grad(token_logprobs_and_entropy(hidden, frozen_w, targets)[0].sum(),
                                [hidden])
    (ref_gh,) = torch.autograd.grad(plain(hidden, frozen_w, targets)[0].sum(), [hidden])
    # ∂/∂h = Σ_v (onehot - p)_v w_v: 50 terms with Σ|terms| <= 2 max|w| ≈ 3, so <= 50 u · 3 ≈ 1e-5
    # absolute (the relative 1e-4 covers the large coordinates); atol 1e-5, where 1e-6 was below
    # that bound
    torch.testing.assert_close(gh, ref_gh, rtol=1e-4, atol=1e-5)


def test_token_entropy_matches_naive_and_does_not_copy_noncontiguous():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 8, 40, generator=g) * 3
    naive = lambda z: -(torch.softmax(z.double(), -1) * torch.log_softmax(z.double(), -1)).sum(-1)
    # float32 against float64: E = logsumexp(z) - Σ p z over 40 logits of |z| up to ~10: <= 40 u ·
    # 10 ≈ 2.4e-5, within 1e-5 + 1e-5 · E (E up to log 40 ≈ 3.7, so >= 4.7e-5 allowed)
    for chunk in (1, 5, 24, 1000):
        torch.testing.assert_close(token_entropy(logits, chunk).double(), naive(logits), rtol=1e-5,
                                   atol=1e-5)
    sliced = logits[:, :-1]  # (3, 7, 40), not viewable as (21, 40)
    torch.testing.assert_close(token_entropy(sliced, 4).double(), naive(sliced), rtol=1e-5,
                               atol=1e-5)
    torch.testing.assert_close(token_entropy(logits, 7, temperature=0.5).double(),
                               naive(logits / 0.5), rtol=1e-5, atol=1e-5)
    ent16 = token_entropy(logits.bfloat16(), 6)
    assert ent16.dtype == torch.float32
    torch.testing.assert_close(ent16.double(), naive(logits.bfloat16().float()), rtol=1e-5,
                               atol=1e-5)
    leaf = logits.clone().requires_grad_(True)
    assert not token_entropy(leaf).requires_grad


def test_bad_input_raises_clear_errors():
    hidden, weight, _, targets = make_inputs()
    with pytest.raises(ValueError, match="targets must lie"):
        token_logprobs_and_entropy(hidden, weight, torch.full_like(targets, 50))
    with pytest.raises(ValueError, match="targets shape"):
        token_logprobs_and_entropy(hidden, weight, targets[:, :-1])
    with pytest.raises(ValueError, match="hidden size"):
        token_logprobs_and_entropy(hidden[..., :-1], weight, targets)
    with pytest.raises(ValueError, match="chunk_size"):
        token_logprobs_and_entropy(hidden, weight, targets, chunk_size=0)
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs_and_entropy(hidden, weight, targets, temperature=0.0)
    with pytest.raises(ValueError, match="targets must be torch.long"):
        token_logprobs_and_entropy(hidden, weight, targets.int())


def test_causal_lm_hidden_and_head_reproduces_model_logits():
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False)
    model = Qwen2ForCausalLM(config).eval()
    ids = torch.randint(0, 97, (2, 10))
    backbone, weight, bias = causal_lm_hidden_and_head(model)
    assert weight is model.lm_head.weight and bias is None
    hidden = backbone(input_ids=ids)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    # The same float32 logits by another GEMM call: 32-term dot products of normed hidden states
    # (~1) and weights of std 0.02: <= 32 u Σ|h w| ≈ 32 · 6e-8 · 0.5 ≈ 1e-6, under 1e-5; the
    # log-softmax adds ~u · log(97).
    torch.testing.assert_close(hidden.detach() @ weight.detach().T, logits, rtol=1e-5, atol=1e-5)
    # Next-token log-probs of the sequence itself (the trainer's use), against the model's own
    # logits.
    logp, entropy = token_logprobs_and_entropy(hidden[:, :-1], weight, ids[:, 1:], chunk_size=7)
    ref = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    torch.testing.assert_close(logp.detach(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy, token_entropy(logits[:, :-1]), rtol=1e-5, atol=1e-5)
    logp.sum().backward()
    assert weight.grad is not None and model.model.embed_tokens.weight.grad is not None
