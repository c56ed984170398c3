"""The paper's measurements (its Figures 2 and 3) as a tool: how large is each token's true
gradient, and which score (entropy, or GMTS's |E·ω|) ranks tokens by it?

    python -m gmts.tools.analyze --model Qwen/Qwen2.5-Math-1.5B --data math500 --split test \
        --prompts 10 --group-size 16 --params last:2 --output analysis.json
        # also writes analysis_fig2.png, analysis_fig3.png

For every prompt it samples a group of answers (gmts.trainer.rollout.sample), rewards them
(rewards/), computes advantages (gmts.method.grpo), and then, for every completion token, the exact
gradient norms

    ||∇θ log π_θ(o_it)||        one backward pass per token (torch.autograd.grad with retain_graph,
                                one forward per answer); θ = every parameter, or with --params
                                last:K only the last K decoder layers, the final norm and the output
                                head (for big models), or --params head
    ||∇θ ℓ_it||                 ℓ_it = gmts.token_objective (gmts/METHOD.md, "One RLVR step", with
                                the trainer's settings). ℓ_it depends on θ only through log
                                π_θ(o_it), so ∇θ ℓ_it = (dℓ_it/d log π) ∇θ log π: the scalar is
                                taken by autograd through token_objective itself, and equals ω_it.

What is measured (gmts/METHOD.md, "The gradient of one token"): the analysis runs at θ = θ_old
(on-policy, one update per batch: r = 1, nothing clips), so ω_it = A_i, plus with --beta > 0 and
--ref-model the k3 KL term's part β(π_ref/π_θ - 1). Without --ref-model the reference is the model
itself (the trainer's π_ref at step 0), where the KL term's gradient is exactly 0.

Off-policy (--off-policy-steps K --mini-batch-size b, the trainer's mini-batch regime): before
measuring, K AdamW steps (--lr) on the clipped loss of the first K mini-batches of b groups, each
scored, selected (--selector, --ratio) and normalised at the θ it meets (off_policy_steps); then the
other groups are measured at the moved θ against the rollout's log-probs: r ≠ 1, some clips are
active, ω_it = r_it A_i I(r_it, A_i). β must be 0 there.

And reports what the paper reports (JSON, see `summarize`):
  - per group: Pearson correlation of log E_it and log ||∇θ log π|| (Figure 3 left: within answers,
    entropy tracks the gradient; Proposition 3.1), Spearman correlation of the GMTS score |E·ω| and
    of entropy alone with the true ||∇θ ℓ_it|| across the group's answers (Figure 3 middle: across
    answers entropy does not, |E·ω| does);
  - top-ρ recall: of the ρ share of tokens with the largest true gradient, how many ETS / GMTS would
    select;
  - the distribution of ε = 1 - p(sampled token) (Figure 3 right: most ε are near 0, where Prop. 3.1
    applies);
  - per token: entropy, log-prob, ε, ||e - p|| (the logit-space gradient of Prop. 3.1), both
    gradient norms, ω.
Figures (if matplotlib is installed): Figure 2's three panels for two answers of one group with
different advantages, and Figure 3's three panels over every group.
"""
import json
import math
import os
import sys
import time

if __name__ == "__main__":
    # Ctrl-C while torch loads (the next line, ~3 s) or later: one line, not a traceback. The JSON
    # is written at the end and atomically, so an interrupted analysis leaves nothing behind.
    from gmts.run.folder import exit_on_interrupt
    exit_on_interrupt("gmts.tools.analyze", "nothing was written")

import torch

from gmts.method.grpo import group_advantages
from gmts.run.config import Config, Parser, add_config_flags, resolve
from gmts.method.head import causal_lm_hidden_and_head, token_logprobs_and_entropy
from gmts.method.grpo import loss_weights, policy_loss, relative_token_weight, token_objective
from gmts.tools.plot import write_figures
from gmts.trainer.rollout import concat_rollouts, sample
from gmts.method.grpo import clip_active, token_omega, token_scores
from gmts.method.grpo import select_tokens
from gmts.tools.stats import summarize

# --------------------------------------------------------------------------------------------------
# Which parameters θ the gradient is taken over.


def analysis_parameters(model, spec="all"):
    """(params, cut_before) for --params SPEC.

    all      every parameter of the model
    head     only the output head (its weight, and bias if any)
    last:K   the last K decoder layers, the final norm and the output head

    cut_before: the decoder layer whose INPUT is detached (None for "all"; "head" detaches the final
    hidden state), so the backward pass stops there: the cost of a per-token backward shrinks with
    K, and a head tied to the input embedding (Qwen2.5 0.5B/1.5B) is counted for its use as the head
    only, not as the embedding."""
    head = model.get_output_embeddings()
    head_params = [p for p in head.parameters()]
    if spec == "all":
        return _unique(model.parameters()), None
    if spec == "head":
        return _unique(head_params), "head"
    if isinstance(spec, str) and spec.startswith("last:"):
        try:
            k = int(spec.split(":", 1)[1])
        except ValueError:
            k = 0
        decoder = model.get_decoder()
        layers = getattr(decoder, "layers", None)
        if layers is None:
            raise ValueError(f"--params {spec}: {type(decoder).__name__} has no .layers list")
        if not 1 <= k <= len(layers):
            raise ValueError(f"--params last:K needs 1 <= K <= {len(layers)} (the model's decoder "
                             f"layers), got {spec!r}")
        chosen = [p for layer in layers[-k:] for p in layer.parameters()]
        norm = getattr(decoder, "norm", None)
        chosen += list(norm.parameters()) if norm is not None else []
        return _unique(chosen + head_params), layers[-k]
    raise ValueError(f"--params must be all, head or last:K (e.g. last:2), got {spec!r}")


def _unique(params):
    seen, out = set(), []
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def _detach_input_hook(_module, args, kwargs):
    """Forward pre-hook: the layer's input hidden state becomes a constant, so no gradient flows
    below it."""
    if args:
        return (args[0].detach(),) + tuple(args[1:]), kwargs
    kwargs = dict(kwargs)
    kwargs["hidden_states"] = kwargs["hidden_states"].detach()
    return args, kwargs


# --------------------------------------------------------------------------------------------------
# One answer: one forward, then one backward per token.

def answer_token_gradients(model, prompt_ids, completion_ids, *, params, cut_before=None,
                           temperature=1.0, max_tokens=None, chunk_size=1024, progress=None):
    """Per-token quantities of ONE answer (completion_ids: its valid tokens only, list or 1-D
    tensor).

    Returns a dict of 1-D float64 tensors over the first min(T, max_tokens) tokens:
        logp             log π_θ(o_t) under softmax(z / τ)
        entropy          E_t, entropy of softmax(z / τ)
        logit_grad_norm  ||e_{o_t} - p||_2, Proposition 3.1's G_t (the gradient of log p w.r.t. z /
                         τ)
        grad_logp_norm   ||∇θ log π_θ(o_t)||_2 over `params`
    One forward pass builds the graph; each token's backward reuses it (retain_graph). Parameters
    outside `params` are frozen for the duration (their requires_grad is restored afterwards).
    """
    device = next(model.parameters()).device
    completion = torch.as_tensor(completion_ids, dtype=torch.long, device=device).reshape(-1)
    if len(prompt_ids) == 0 or completion.numel() == 0:
        raise ValueError(f"need a non-empty prompt and completion, got {len(prompt_ids)} and "
                         f"{completion.numel()} ids")
    n = completion.numel() if max_tokens is None else min(completion.numel(), max_tokens)
    chosen = {id(p) for p in params}
    flags = [(p, p.requires_grad) for p in model.parameters()]
    hook = None
    try:
        for p, _ in flags:
            p.requires_grad_(id(p) in chosen)
        if cut_before is not None and cut_before != "head":
            hook = cut_before.register_forward_pre_hook(_detach_input_hook, with_kwargs=True)
        backbone, head_w, head_b = causal_lm_hidden_and_head(model)
        ids = torch.cat([torch.as_tensor(prompt_ids, dtype=torch.long, device=device), completion])[
            None]
        P = len(prompt_ids)
        with torch.enable_grad():
            hidden = backbone(input_ids=ids, use_cache=False)[0]          # (P + T, H)
            # position P-1+t predicts token t
            h = hidden[P - 1: P - 1 + n]
            if cut_before == "head":
                h = h.detach()
            targets = completion[:n]
            with torch.no_grad():
                logp, entropy = token_logprobs_and_entropy(h.detach(), head_w, targets,
                                                           head_bias=head_b,
                                                           temperature=temperature,
                                                           chunk_size=chunk_size)
                logit_grad = _logit_grad_norm(h.detach(), head_w, head_b, targets, temperature,
                                              chunk_size)
            # The head's own part needs no backward: z = h Wᵀ + b, so ∇_W log p_t = (e - p) h_tᵀ /
            # τ, a rank-one matrix of norm ||e - p|| ||h_t|| / τ, and ∇_b = (e - p) / τ. That holds
            # when W gets its gradient only through the head: untied, or tied to an input embedding
            # that lies below the cut (last:K, head). It spares a (V, H) gradient per token, most of
            # the time for a small model with a large vocabulary.
            analytic = id(head_w) in chosen and (cut_before is not None
                                                 or model.get_input_embeddings().weight is
                                                 not head_w)
            head_sq = torch.zeros(n, dtype=torch.float64)
            if analytic:
                head_sq = logit_grad.double().pow(2) / temperature ** 2 * (
                    h.detach().double().pow(2).sum(-1).cpu() + float(
                        head_b is not None and id(head_b) in chosen))
                w_t, b_t = head_w.detach(), None if head_b is None else head_b.detach()
                rest = [p for p in params if p is not head_w and p is not head_b]
            else:
                w_t, b_t, rest = head_w, head_b, list(params)
            grad_norm = torch.zeros(n, dtype=torch.float64)
            for t in range(n):
                sq = float(head_sq[t])
                if rest and h.requires_grad:
                    lp_t, _ = token_logprobs_and_entropy(h[t:t + 1], w_t, targets[t:t + 1],
                                                         head_bias=b_t, temperature=temperature,
                                                         with_entropy=False)
                    grads = torch.autograd.grad(lp_t.sum(), rest, retain_graph=t < n - 1,
                                                allow_unused=True)
                    sq += sum(
                        float(torch.linalg.vector_norm(g, dtype=torch.float64)) ** 2 for g in grads
                              if g is not None)
                grad_norm[t] = math.sqrt(sq)
                if progress is not None:
                    progress.update(1)
    finally:
        if hook is not None:
            hook.remove()
        for p, flag in flags:
            p.requires_grad_(flag)
    return {"logp": logp.double().cpu(), "entropy": entropy.double().cpu(),
            "logit_grad_norm": logit_grad.cpu(), "grad_logp_norm": grad_norm}


@torch.no_grad()
def _logit_grad_norm(h, weight, bias, targets, temperature, chunk_size):
    """||e_i - p||_2 = sqrt((1 - p_i)^2 + Σ_{j≠i} p_j^2), chunk by chunk, in float64. 1 - p_i is
    taken as -expm1(log p_i) and p_i is left out of the sum rather than subtracted from it, so a
    confident token (p_i near 1, ε near 0) keeps its relative precision instead of cancelling."""
    out = []
    for start in range(0, h.shape[0], chunk_size):
        z = h[start:start + chunk_size].to(weight.dtype) @ weight.t()
        if bias is not None:
            z = z + bias
        logp = torch.log_softmax(z.double() / temperature, dim=-1)
        idx = targets[start:start + chunk_size, None]
        others = logp.exp().scatter(1, idx, 0.0).pow(2).sum(-1)
        out.append(torch.sqrt(torch.expm1(logp.gather(1, idx).squeeze(1)).pow(2) + others))
    return torch.cat(out)


def objective_coefficient(logp, advantage, *, eps_low=0.2, eps_high=0.2, beta=0.0, ref_logp=None,
                          old_logp=None):
    """dℓ_t / d log π(o_t) for the tokens of one answer (1-D float64), through gmts.token_objective
    itself.

    ℓ_t = min(r A, clip(r) A) - β D_t depends on θ only through log π_θ(o_t) (old and reference
    log-probs are constants), so ∇θ ℓ_t = (dℓ_t/d log π) · ∇θ log π exactly. On-policy (old_logp =
    logp, r = 1) this is ω_t."""
    lp = logp.detach().double().clone().requires_grad_(True)
    old = lp.detach() if old_logp is None else torch.as_tensor(old_logp, dtype=torch.float64)
    ref = None if ref_logp is None else torch.as_tensor(ref_logp, dtype=torch.float64)[None]
    with torch.enable_grad():
        surrogate, kl = token_objective(lp[None], old[None],
                                        torch.tensor([float(advantage)], dtype=torch.float64),
                                        eps_low=eps_low, eps_high=eps_high, beta=beta, ref_logp=ref)
        # ℓ_t, (1, T); token t depends on lp[t]
        objective = surrogate - beta * kl
        (coef,) = torch.autograd.grad(objective.sum(), lp)
    return coef.detach()


@torch.no_grad()
def answer_ref_logp(ref_model, prompt_ids, completion_ids, *, temperature=1.0, chunk_size=1024,
                    max_tokens=None):
    """log π_ref(o_t) of one answer's tokens (1-D float64), for the KL part of ℓ (--beta with
    --ref-model)."""
    device = next(ref_model.parameters()).device
    completion = torch.as_tensor(completion_ids, dtype=torch.long, device=device).reshape(-1)
    n = completion.numel() if max_tokens is None else min(completion.numel(), max_tokens)
    backbone, head_w, head_b = causal_lm_hidden_and_head(ref_model)
    ids = torch.cat([torch.as_tensor(prompt_ids, dtype=torch.long, device=device), completion])[
        None]
    hidden = backbone(input_ids=ids, use_cache=False)[0][len(prompt_ids) - 1: len(prompt_ids) - 1
                                                         + n]
    logp, _ = token_logprobs_and_entropy(hidden, head_w, completion[:n], head_bias=head_b,
                                         temperature=temperature, chunk_size=chunk_size,
                                         with_entropy=False)
    return logp.double().cpu()


# --------------------------------------------------------------------------------------------------
# A batch: sampled groups -> per-answer records with every per-token quantity.

def analyze_groups(model, prompt_ids, rollout, rewards, *, params="all", adv_std="unbiased",
                   eps_low=0.2, eps_high=0.2, beta=0.0, ref_model=None, temperature=1.0,
                   max_tokens_per_answer=None, chunk_size=1024, progress=True, texts=None,
                   pieces=None, old_logp=None, groups=None):
    """Per-answer records for a rollout (gmts.trainer.rollout.Rollout, Q prompts x G answers) and
    its rewards (N,).

    old_logp: (N, T) log π_old of the sampled tokens (the rollout's logp) when θ has moved since
    sampling (off_policy_steps); None when θ = θ_old: then r = 1 exactly. groups: the group indices
    to analyse (default all).

    Each record: group, answer, reward, advantage, n_tokens (analysed), length (full), and per-token
    lists: logp, entropy, epsilon, logit_grad_norm, grad_logp_norm, ratio (r = π_θ/π_old),
    clip_active (1 - I(r, A)), omega (token_omega), objective_coef (dℓ/d log π), grad_objective_norm
    = |objective_coef| · grad_logp_norm = ||∇θ ℓ_it||, and gmts_score = |E · ω|."""
    group_size = rollout.group_size
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    advantages = group_advantages(rewards, group_size, std=adv_std)
    param_list, cut = analysis_parameters(model, params)
    lengths = rollout.valid_mask.sum(1).tolist()
    groups = range(len(rollout.prompt_ids)) if groups is None else groups
    answers = [q * group_size + j for q in groups for j in range(group_size)]
    n_total = sum(min(lengths[i], max_tokens_per_answer or lengths[i]) for i in answers)
    bar = None
    if progress:
        from gmts.run.progress import Progress
        bar = Progress(total=n_total, desc="per-token backward", unit="tok", dynamic_ncols=True,
                       mininterval=1.0, file=sys.stderr)
    was_training = model.training
    # no dropout: the gradient of one token must be deterministic
    model.eval()
    records = []
    try:
        for i in answers:
            q = i // group_size
            tokens = rollout.completion_ids[i][rollout.valid_mask[i]].tolist()
            out = answer_token_gradients(model, prompt_ids[q], tokens, params=param_list,
                                         cut_before=cut, temperature=temperature,
                                         max_tokens=max_tokens_per_answer, chunk_size=chunk_size,
                                         progress=bar)
            n = out["logp"].numel()
            ref_logp = None
            if beta > 0:
                ref_logp = (out["logp"] if ref_model is None else
                            answer_ref_logp(ref_model, prompt_ids[q], tokens,
                                            temperature=temperature, chunk_size=chunk_size,
                                            max_tokens=max_tokens_per_answer))
            adv = float(advantages[i])
            old = (out["logp"] if old_logp is None
                   else old_logp[i][rollout.valid_mask[i]][:n].double().cpu())
            coef = objective_coefficient(out["logp"], adv, eps_low=eps_low, eps_high=eps_high,
                                         beta=beta, ref_logp=ref_logp, old_logp=old)
            adv_t = torch.tensor([adv], dtype=torch.float64)
            omega = token_omega(out["logp"][None], old[None], adv_t, eps_low=eps_low,
                                eps_high=eps_high, beta=beta,
                                ref_logp=None if ref_logp is None else ref_logp[None])[0]
            ratio = torch.exp(out["logp"] - old)
            rec = {"group": q, "answer": i, "reward": float(rewards[i]), "advantage": adv,
                   "n_tokens": n, "length": int(lengths[i]), "finished": bool(rollout.finished[i])}
            if texts is not None:
                rec["text"] = texts[i]
            if pieces is not None:
                rec["pieces"] = pieces[i][:n]
            rec["token_ids"] = tokens[:n]
            rec.update({k: v.tolist() for k, v in out.items()})
            rec["epsilon"] = (1 - out["logp"].exp()).tolist()
            rec["ratio"] = ratio.tolist()
            rec["clip_active"] = clip_active(ratio[None], adv_t, eps_low, eps_high)[0].tolist()
            rec["omega"] = omega.tolist()
            rec["objective_coef"] = coef.tolist()
            rec["grad_objective_norm"] = (coef.abs() * out["grad_logp_norm"]).tolist()
            rec["gmts_score"] = (out["entropy"] * omega).abs().tolist()
            records.append(rec)
    finally:
        if bar is not None:
            bar.close()
        model.train(was_training)
    return records


# --------------------------------------------------------------------------------------------------
# Off-policy: move θ away from the policy that sampled, as the trainer's later mini-batches find it.

def off_policy_steps(model, rollout, advantages, mini_batches, optimizer, *, eps_low=0.2,
                     eps_high=0.2, selector="none", ratio=1.0, loss_norm="selected",
                     temperature=1.0, chunk_size=1024, max_grad_norm=1.0, generator=None):
    """One optimizer step per mini-batch of whole groups (gmts/METHOD.md, "Several optimizer steps
    per rollout batch"): each is scored at the CURRENT θ (log π_θ, E, r = π_θ/π_old against the
    rollout's log-probs, ω), selected (`selector`, exact top-ρ of that mini-batch) and normalised on
    its own, and trained on the clipped policy loss (gmts.policy_loss, β = 0). After the steps the
    analysis measures other groups of the same rollout at the moved θ: there r ≠ 1 and some clips
    are active, the regime where ω carries r and I.

    mini_batches: lists of group (prompt) indices of `rollout`; advantages: (N,) per answer. Returns
    one dict per step: the loss, the gradient norm before clipping, and the mini-batch's clip-active
    share and mean |r - 1| at the moment it was scored."""
    from gmts.trainer.batches import completion_logprobs
    device = next(model.parameters()).device
    G = rollout.group_size
    adv_all = torch.as_tensor(advantages, dtype=torch.float32)
    params = [p for p in model.parameters() if p.requires_grad]
    was_training = model.training
    # no dropout: the steps and the measurement see the same function
    model.eval()
    log = []
    try:
        for groups in mini_batches:
            rows = torch.tensor([q * G + j for q in groups for j in range(G)], dtype=torch.long)
            prompts = [rollout.prompt_ids[q] for q in groups]
            ids, valid = (rollout.completion_ids[rows].to(device),
                          rollout.valid_mask[rows].to(device))
            old, adv = rollout.old_logp[rows].to(device), adv_all[rows].to(device)
            passes = {"group_size": G, "temperature": temperature, "chunk_size": chunk_size}
            with torch.no_grad():
                logp_now, entropy = completion_logprobs(model, prompts, ids, valid,
                                                        with_entropy=True, **passes)
            omega = token_omega(logp_now, old, adv, eps_low=eps_low, eps_high=eps_high)
            scores = token_scores(selector, entropy, omega,
                                  weight=relative_token_weight(valid, loss_norm),
                                  generator=generator)
            weights = loss_weights(valid, select_tokens(scores, valid, ratio), loss_norm)
            r = torch.exp(logp_now - old)[valid]
            optimizer.zero_grad(set_to_none=True)
            loss = 0.0
            # one group per backward: the weights hold the normaliser
            for k, prompt in enumerate(prompts):
                part = slice(k * G, (k + 1) * G)
                logp, _ = completion_logprobs(model, [prompt], ids[part], valid[part], **passes)
                part_loss = policy_loss(logp, old[part], adv[part], weights[part], eps_low=eps_low,
                                        eps_high=eps_high)
                part_loss.backward()
                loss += float(part_loss.detach())
            grad_norm = torch.nn.utils.clip_grad_norm_(params,
                                                       max_grad_norm if max_grad_norm > 0
                                                       else float("inf"))
            optimizer.step()
            log.append({"groups": list(groups), "loss": loss, "grad_norm": float(grad_norm),
                        "clip_active_share": float(
                            clip_active(torch.exp(logp_now - old), adv, eps_low,
                                                               eps_high)[valid].float().mean()),
                        "ratio_abs_dev_mean": float((r - 1).abs().mean())})
    finally:
        optimizer.zero_grad(set_to_none=True)
        model.train(was_training)
    return log


def off_policy_split(n_groups, mini_batch_size, steps):
    """(mini-batches to step on, groups to measure): the first `steps` mini-batches of
    `mini_batch_size` groups in rollout order, and every group after them."""
    if steps < 0 or mini_batch_size < 1 or steps * mini_batch_size >= n_groups:
        raise ValueError(f"--off-policy-steps {steps} x --mini-batch-size {mini_batch_size} must "
                         f"leave groups to measure out of {n_groups}")
    trained = [list(range(s * mini_batch_size, (s + 1) * mini_batch_size)) for s in range(steps)]
    return trained, list(range(steps * mini_batch_size, n_groups))


# --------------------------------------------------------------------------------------------------
# Command line: the flags the analysis shares with train.py are generated from gmts.run.config's
# Config.

SHARED_FLAGS = ("model", "tokenizer", "dtype", "device", "chunk_size", "data", "split",
                "question_field", "answer_field", "template", "system_prompt", "task_options",
                "max_prompt_tokens", "group_size", "max_new_tokens", "temperature", "eps_low",
                "eps_high", "beta", "adv_std", "selector", "ratio", "loss_norm", "mini_batch_size",
                "lr", "weight_decay", "adam_beta1", "adam_beta2", "max_grad_norm", "seed", "reward",
                "reward_weights", "reward_workers", "code_trusted_only")
# Where the analysis's defaults differ from the trainer's (eps_high: no --algo here, so GRPO's
# symmetric 0.2).
DEFAULTS = {"model": None, "group_size": 16, "eps_high": 0.2}
HELPS = {
    "model": "hub id or local folder (required)", "split": "split of --data",
    "eps_low": "ε1 (inactive on-policy: r = 1)", "eps_high": "ε2 (inactive on-policy: r = 1)",
    "beta": "k3 KL weight in ℓ (its gradient is 0 unless --ref-model differs from --model)",
    "ratio": "ρ: the top-ρ recall's budget and the figures' boundary; the off-policy steps' "
             "selection ratio",
    "selector": "selector of the off-policy steps' loss (none | ets | gmts | random); the "
                "measurement scores both",
    "loss_norm": "normaliser of the off-policy steps' loss",
    "mini_batch_size": "prompts per off-policy optimizer step (with --off-policy-steps; 0 = 1)",
    "lr": "AdamW learning rate of the off-policy steps",
    "max_grad_norm": "clip the off-policy steps' gradient norm",
    "seed": "seeds sampling (and the random selector)",
}


def build_parser():
    p = Parser(prog="python -m gmts.tools.analyze", description=__doc__.split("\n\n")[0])
    add_config_flags(p, SHARED_FLAGS, defaults=DEFAULTS, helps=HELPS)
    p.add_argument("--ref-model", default="", help="reference policy π_ref for --beta (default: "
                                                   "--model itself)")
    p.add_argument("--prompts", type=int, default=10, help="questions (the first N of --data); one "
                                                           "group each (default: %(default)s)")
    p.add_argument("--params", default="all", help="θ for the gradient norms: all | head | last:K "
                                                   "(last K layers + final norm + head; for big "
                                                   "models) (default: %(default)s)")
    p.add_argument("--max-tokens-per-answer", type=int, default=0,
                   help="analyse only each answer's first N tokens "
                        "(0 = all) (default: %(default)s)")
    p.add_argument("--off-policy-steps", type=int, default=0,
                   help="before measuring, take this many AdamW steps (--lr) on the clipped loss "
                        "of the first --mini-batch-size x K groups, one mini-batch each, then "
                        "measure the other groups: r != 1 and some clips active (0 = on-policy, "
                        "every group measured at θ_old) (default: %(default)s)")
    p.add_argument("--output", default="analysis.json", help="JSON path; figures go next to it "
                                                             "(_fig2/_fig3.png) (default: "
                                                             "%(default)s)")
    p.add_argument("--dpi", type=int, default=110, help="figure resolution (default: %(default)s)")
    p.add_argument("--no-plots", action="store_true", help="write the JSON only")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def analysis_config(args):
    """The trainer's Config for the shared flags (the rollout batch = --prompts prompts), validated
    by the same gmts.run.config.resolve, so a bad value gets the trainer's message.
    --mini-batch-size is checked by off_policy_split instead: here it need not divide --prompts (the
    groups left over are the measured ones)."""
    # checked apart:
    shared = {name: getattr(args, name) for name in SHARED_FLAGS if name != "mini_batch_size"}
    return resolve(
        Config(**shared, prompts_per_step=args.prompts,
               micro_batch_size=args.prompts * args.group_size))


def _check_args(p, args):
    if not args.model:
        p.error("--model is required (hub id or local folder)")
    for name in ("prompts", "max_prompt_tokens", "dpi"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.max_tokens_per_answer < 0:
        p.error(f"--max-tokens-per-answer must be >= 0, got {args.max_tokens_per_answer}")
    if args.beta < 0:
        p.error(f"--beta must be >= 0, got {args.beta}")
    if not (args.params in ("all", "head") or args.params.startswith("last:")):
        p.error(f"--params must be all, head or last:K (e.g. last:2), got {args.params!r}")
    if args.off_policy_steps:
        if args.beta > 0:
            p.error("--off-policy-steps trains on the clipped loss without the KL term: use "
                    f"--beta 0, got {args.beta}")
        try:
            off_policy_split(args.prompts, args.mini_batch_size or 1, args.off_policy_steps)
        except ValueError as err:
            p.error(f"{err} (--prompts)")
    try:
        args.eps_high = analysis_config(args).eps_high
    except ValueError as err:
        p.error(str(err))
    # Every path this run will write, before the minutes of sampling and gradients: a folder or an
    # unwritable place given as --output is refused now, not after the analysis has run.
    from gmts.run.paths import output_path_problem
    stem = os.path.splitext(args.output)[0]
    for path in [args.output] + ([] if args.no_plots else [stem + "_fig2.png", stem + "_fig3.png"]):
        problem = output_path_problem(path, "file")
        if problem:
            p.error(f"--output {args.output}: {path} {problem}" if path != args.output
                    else f"--output {args.output}: {problem}")


def load_prompt_ids(args, tokenizer):
    """The first --prompts problems of --data whose prompt fits --max-prompt-tokens, with their
    prompt ids."""
    from gmts import data as datasets
    kept, ids, _ = datasets.load_prompts_for_cli(args.data, args.split, tokenizer,
                                                 max_prompt_tokens=args.max_prompt_tokens,
                                                 question_field=args.question_field,
                                                 answer_field=args.answer_field,
                                                 template=args.template,
                                                 task_options=args.task_options, seed=args.seed,
                                                 system_prompt=args.system_prompt)
    return kept[:args.prompts], ids[:args.prompts]


def run(args):
    """Sample, reward, (optionally step off-policy), analyse, summarise: the result dict that main()
    writes as JSON."""
    from gmts import rewards as reward_lib
    from gmts.trainer.optim import build_optimizer
    from gmts.trainer.models import (check_vocabulary, end_of_sequence_ids, load_model,
                                     load_tokenizer, resolve_device, resolve_dtype)

    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    tokenizer = load_tokenizer(args.tokenizer or args.model,
                               flag="--tokenizer" if args.tokenizer else "--model")
    problems, prompt_ids = load_prompt_ids(args, tokenizer)
    # train.py's rewards: --reward's functions (tried on the problems before the model loads), else
    # each problem's own; a whole batch scored at once
    try:
        scorer = reward_lib.scorer_for(args.reward, args.reward_weights,
                                       workers=args.reward_workers,
                                       trusted_only=args.code_trusted_only)
        if args.reward:
            scorer.check(problems, first=len(problems))
    except reward_lib.RewardError as err:
        raise SystemExit(err.for_cli()) from None
    model = load_model(args.model, dtype=dtype, device=device).eval()
    non_finite_weights(model, "--model", args.model)
    check_vocabulary(model, tokenizer, flag="--tokenizer" if args.tokenizer else "--model")
    ref_model = load_model(args.ref_model, dtype=dtype, device=device, flag="--ref-model").eval() \
        if args.ref_model else None
    if ref_model is not None:
        check_vocabulary(ref_model, tokenizer, flag="--ref-model")
    eos_ids = end_of_sequence_ids(model, tokenizer)
    generator = torch.Generator(device=device).manual_seed(args.seed)

    t0 = time.time()
    G = args.group_size
    roll_parts, texts, pieces = [], [], []
    # one group at a time: memory stays one group's
    for ids in prompt_ids:
        roll = sample(model, [ids], group_size=G, max_new_tokens=args.max_new_tokens,
                      eos_token_ids=eos_ids, pad_token_id=tokenizer.pad_token_id,
                      temperature=args.temperature, generator=generator)
        for row, mask in zip(roll.completion_ids.cpu(), roll.valid_mask.cpu()):
            toks = row[mask].tolist()
            texts.append(tokenizer.decode(toks, skip_special_tokens=True))
            pieces.append([tokenizer.decode([t]) for t in toks])
        roll_parts.append(roll)
    try:
        all_rewards = scorer.score(texts, [p for p in problems for _ in range(G)]).total
    except reward_lib.RewardError as err:
        raise SystemExit(err.for_cli()) from None
    scorer.close()
    t_sample = time.time() - t0
    rollout = concat_rollouts(roll_parts, tokenizer.pad_token_id)

    steps_log, measured, old_logp = [], None, None
    if args.off_policy_steps:
        cfg = analysis_config(args)
        trained, measured = off_policy_split(len(problems), args.mini_batch_size or 1,
                                             args.off_policy_steps)
        advantages = group_advantages(torch.tensor(all_rewards, dtype=torch.float32), G,
                                      std=args.adv_std)
        select_gen = torch.Generator(device=device).manual_seed(args.seed)     # (--selector random)
        steps_log = off_policy_steps(model, rollout, advantages, trained,
                                     build_optimizer(model, cfg), eps_low=args.eps_low,
                                     eps_high=args.eps_high, selector=args.selector,
                                     ratio=args.ratio, loss_norm=args.loss_norm,
                                     temperature=args.temperature, chunk_size=args.chunk_size,
                                     max_grad_norm=args.max_grad_norm, generator=select_gen)
        old_logp = rollout.old_logp          # π_old: the policy that sampled, before the steps
    t_steps = time.time() - t0 - t_sample

    params, _ = analysis_parameters(model, args.params)
    records = analyze_groups(model, prompt_ids, rollout, all_rewards, params=args.params,
                             adv_std=args.adv_std, eps_low=args.eps_low, eps_high=args.eps_high,
                             beta=args.beta, ref_model=ref_model, temperature=args.temperature,
                             max_tokens_per_answer=args.max_tokens_per_answer or None,
                             chunk_size=args.chunk_size, progress=not args.no_progress, texts=texts,
                             pieces=pieces, old_logp=old_logp, groups=measured)
    summary = summarize(records, args.ratio)
    for g in summary["groups"]:
        g["problem"] = problems[g["group"]].id
    return {
        "config": vars(args),
        "device": str(device), "dtype": str(dtype).replace("torch.", ""),
        "params": args.params, "n_params": sum(p.numel() for p in params),
        "objective": _objective_text(args),
        "off_policy_steps": steps_log,
        "time_sample_s": t_sample, "time_off_policy_steps_s": t_steps,
        "time_gradients_s": time.time() - t0 - t_sample - t_steps,
        "summary": summary,
        "answers": records,
    }


def non_finite_weights(model, flag, name):
    """A model with NaN/inf weights gives NaN gradients and scores throughout: one line, before any
    sampling."""
    for pname, p in model.named_parameters():
        bad = int((~torch.isfinite(p.detach())).sum())
        if bad:
            raise SystemExit(f"error: {flag} {name}: {bad} weight(s) of {pname} are NaN/inf; "
                             "nothing to analyse")


def _objective_text(args):
    if args.off_policy_steps:
        return (f"off-policy: gradients at θ after {args.off_policy_steps} AdamW step(s) (lr "
                f"{args.lr:g}) on the first {args.off_policy_steps} mini-batch(es) of "
                f"{args.mini_batch_size or 1} group(s) of the same rollout; the other groups are "
                "measured, with r = π_θ/π_old against the rollout's log-probs: ∇θ ℓ_it = ω_it ∇θ "
                "log π with ω_it = r_it A_i I(r_it, A_i)")
    return ("on-policy: gradients at θ = θ_old, so r = 1 and no clip is active; ∇θ ℓ_it = ω_it ∇θ "
            "log π with ω_it = A_i"
            + (f" + β(π_ref/π - 1), β = {args.beta}" if args.beta > 0 else "")
            + (" (π_ref = the model itself: the KL gradient is 0)" if args.beta > 0 and
               not args.ref_model else ""))


def format_summary(summary):
    """The summary as lines of text; a statistic with no data says why in its line."""
    groups = summary["groups"]
    no_mixed = not groups or summary["groups_without_gradient"] == len(groups)
    no_gradient = ("no group with mixed rewards: every advantage is 0, no token has a gradient"
                   if no_mixed else "no group with 3 tokens with a gradient")

    def fmt(d, why):
        return (f"n/a, {why}" if d["mean"] is None
                else f"mean {d['mean']:+.3f} (min {d['min']:+.3f}, max {d['max']:+.3f})")
    rec = summary["top_recall"]
    eps = summary["epsilon"]
    no_pearson = "no group with 3 tokens with E > 0 and ||∇ log π|| > 0"
    rows = (("Pearson(log E, log ||∇ log π||) per group : ", "pearson_logE_loggrad", no_pearson),
            ("Spearman(|E·ω|, ||∇ℓ||) per group         : ", "spearman_gmts_grad", no_gradient),
            ("Spearman(E, ||∇ℓ||) per group             : ", "spearman_entropy_grad", no_gradient))
    lines = [head + fmt(summary[key], why) for head, key, why in rows]
    lines.append("groups with no gradient (all rewards equal): "
                 f"{summary['groups_without_gradient']}")
    head = f"top-{summary['ratio']:.0%} by true gradient recovered"
    if rec["gmts"] is not None:
        lines.append(f"{head}: GMTS {rec['gmts']:.3f}, ETS {rec['ets']:.3f}, "
                     f"random {rec['random_expected']:.3f}")
    else:
        lines.append(f"{head}: n/a, " + (no_gradient if no_mixed else "no token has a gradient"))
    if summary.get("clip_active_share") is not None:
        lines.append(f"clip active on {summary['clip_active_share']:.3f} of the tokens, mean |r - "
                     f"1| {summary['ratio_abs_dev_mean']:.4f}")
    if eps.get("n"):
        lines.append(f"ε = 1 - p: median {eps['quantiles']['0.5']:.3f}, share < 0.1: "
                     f"{eps['share_below_0.1']:.3f} ({eps['n']} tokens)")
    else:
        lines.append("ε = 1 - p: n/a, no token analysed (every answer empty)")
    return "\n".join(lines)


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_args(parser, args)
    torch.manual_seed(args.seed)
    result = run(args)
    from gmts.run.checkpoint import write_text_atomic
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    try:
        text = json.dumps(result, allow_nan=False)     # NaN is not JSON, and not a measurement
    except ValueError:
        raise SystemExit("error: the analysis produced NaN/inf (non-finite gradients or scores: a "
                         "model with NaN/inf outputs?); nothing written to "
                         f"{args.output}") from None
    # whole or not at all: a full disk or a Ctrl-C leaves no half JSON
    try:
        write_text_atomic(args.output, text)
    except OSError as err:
        raise SystemExit(f"error: could not write {args.output} ({err.strerror or err})") from None
    figures = [] if args.no_plots else write_figures(result, args.output, dpi=args.dpi)
    print(format_summary(result["summary"]))
    print(f"gmts.tools.analyze: {len(result['answers'])} answers, "
          f"{sum(r['n_tokens'] for r in result['answers'])} tokens in "
          f"{result['time_gradients_s']:.1f}s; wrote {args.output}"
          + "".join(f", {f}" for f in figures))
    return result


if __name__ == "__main__":
    main()
