"""The paper's measurements (its Figures 2 and 3) as a tool: how large is each token's true gradient, and which score
(entropy, or GMTS's |E·ω|) ranks tokens by it?

    python -m gmts.analyze --model Qwen/Qwen2.5-Math-1.5B --data math500 --split test --prompts 10 --group-size 16 \
        --params last:2 --output analysis.json          # also writes analysis_fig2.png, analysis_fig3.png

For every prompt it samples a group of answers (gmts.rollout.sample), rewards them (rewards/), computes advantages
(gmts.advantage), and then, for every completion token, the exact gradient norms

    ||∇θ log π_θ(o_it)||        one backward pass per token (torch.autograd.grad with retain_graph, one forward per
                                answer); θ = every parameter, or with --params last:K only the last K decoder layers,
                                the final norm and the output head (for big models), or --params head
    ||∇θ ℓ_it||                 ℓ_it = gmts.token_objective (METHOD.md's token objective with the trainer's settings).
                                ℓ_it depends on θ only through log π_θ(o_it), so ∇θ ℓ_it = (dℓ_it/d log π) ∇θ log π:
                                the scalar is taken by autograd through token_objective itself, and equals ω_it.

What is measured (METHOD.md, "The gradient of one token"): the analysis runs at θ = θ_old (on-policy, one update per
batch: r = 1, nothing clips), so ω_it = A_i, plus with --beta > 0 and --ref-model the k3 KL term's part
β(π_ref/π_θ - 1). Without --ref-model the reference is the model itself (the trainer's π_ref at step 0), where the KL
term's gradient is exactly 0.

And reports what the paper reports (JSON, see `summarize`):
  - per group: Pearson correlation of log E_it and log ||∇θ log π|| (Figure 3 left: within answers, entropy tracks
    the gradient; Proposition 3.1), Spearman correlation of the GMTS score |E·ω| and of entropy alone with the true
    ||∇θ ℓ_it|| across the group's answers (Figure 3 middle: across answers entropy does not, |E·ω| does);
  - top-ρ recall: of the ρ share of tokens with the largest true gradient, how many ETS / GMTS would select;
  - the distribution of ε = 1 - p(sampled token) (Figure 3 right: most ε are near 0, where Prop. 3.1 applies);
  - per token: entropy, log-prob, ε, ||e - p|| (the logit-space gradient of Prop. 3.1), both gradient norms, ω.
Figures (if matplotlib is installed): Figure 2's three panels for two answers of one group with different
advantages, and Figure 3's three panels over every group.
"""
import argparse
import json
import math
import os
import sys
import time

import torch

from .advantage import STD_MODES, group_advantages
from .head import causal_lm_hidden_and_head, token_logprobs_and_entropy
from .loss import token_objective
from .scores import token_omega, token_scores
from .selection import select_tokens

# ----------------------------------------------------------------------------------------------------------------------
# Which parameters θ the gradient is taken over.


def analysis_parameters(model, spec="all"):
    """(params, cut_before) for --params SPEC.

    all      every parameter of the model
    head     only the output head (its weight, and bias if any)
    last:K   the last K decoder layers, the final norm and the output head

    cut_before: the decoder layer whose INPUT is detached (None for "all"; "head" detaches the final hidden state),
    so the backward pass stops there: the cost of a per-token backward shrinks with K, and a head tied to the input
    embedding (Qwen2.5 0.5B/1.5B) is counted for its use as the head only, not as the embedding."""
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
            raise ValueError(f"--params last:K needs 1 <= K <= {len(layers)} (the model's decoder layers), got {spec!r}")
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
    """Forward pre-hook: the layer's input hidden state becomes a constant, so no gradient flows below it."""
    if args:
        return (args[0].detach(),) + tuple(args[1:]), kwargs
    kwargs = dict(kwargs)
    kwargs["hidden_states"] = kwargs["hidden_states"].detach()
    return args, kwargs


# ----------------------------------------------------------------------------------------------------------------------
# One answer: one forward, then one backward per token.

def answer_token_gradients(model, prompt_ids, completion_ids, *, params, cut_before=None, temperature=1.0,
                           max_tokens=None, chunk_size=1024, progress=None):
    """Per-token quantities of ONE answer (completion_ids: its valid tokens only, list or 1-D tensor).

    Returns a dict of 1-D float64 tensors over the first min(T, max_tokens) tokens:
        logp             log π_θ(o_t) under softmax(z / τ)
        entropy          E_t, entropy of softmax(z / τ)
        logit_grad_norm  ||e_{o_t} - p||_2, Proposition 3.1's G_t (the gradient of log p w.r.t. z / τ)
        grad_logp_norm   ||∇θ log π_θ(o_t)||_2 over `params`
    One forward pass builds the graph; each token's backward reuses it (retain_graph). Parameters outside `params`
    are frozen for the duration (their requires_grad is restored afterwards).
    """
    device = next(model.parameters()).device
    completion = torch.as_tensor(completion_ids, dtype=torch.long, device=device).reshape(-1)
    if len(prompt_ids) == 0 or completion.numel() == 0:
        raise ValueError(f"need a non-empty prompt and completion, got {len(prompt_ids)} and {completion.numel()} ids")
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
        ids = torch.cat([torch.as_tensor(prompt_ids, dtype=torch.long, device=device), completion])[None]
        P = len(prompt_ids)
        with torch.enable_grad():
            hidden = backbone(input_ids=ids, use_cache=False)[0]          # (P + T, H)
            h = hidden[P - 1: P - 1 + n]                                  # position P-1+t predicts token t
            if cut_before == "head":
                h = h.detach()
            targets = completion[:n]
            with torch.no_grad():
                logp, entropy = token_logprobs_and_entropy(h.detach(), head_w, targets, head_bias=head_b,
                                                           temperature=temperature, chunk_size=chunk_size)
                logit_grad = _logit_grad_norm(h.detach(), head_w, head_b, targets, temperature, chunk_size)
            grad_norm = torch.zeros(n, dtype=torch.float64)
            for t in range(n):
                lp_t, _ = token_logprobs_and_entropy(h[t:t + 1], head_w, targets[t:t + 1], head_bias=head_b,
                                                     temperature=temperature, with_entropy=False)
                grads = torch.autograd.grad(lp_t.sum(), params, retain_graph=t < n - 1, allow_unused=True)
                grad_norm[t] = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads if g is not None))
                if progress is not None:
                    progress.update(1)
    finally:
        if hook is not None:
            hook.remove()
        for p, flag in flags:
            p.requires_grad_(flag)
    return {"logp": logp.double().cpu(), "entropy": entropy.double().cpu(), "logit_grad_norm": logit_grad.cpu(),
            "grad_logp_norm": grad_norm}


@torch.no_grad()
def _logit_grad_norm(h, weight, bias, targets, temperature, chunk_size):
    """||e_i - p||_2 = sqrt((1 - p_i)^2 + Σ_{j≠i} p_j^2) = sqrt(1 - 2 p_i + Σ_j p_j^2), chunk by chunk."""
    out = []
    for start in range(0, h.shape[0], chunk_size):
        z = h[start:start + chunk_size].to(weight.dtype) @ weight.t()
        if bias is not None:
            z = z + bias
        p = torch.softmax(z.double() / temperature, dim=-1)
        p_i = p.gather(1, targets[start:start + chunk_size, None]).squeeze(1)
        out.append(torch.sqrt((1 - 2 * p_i + p.pow(2).sum(-1)).clamp(min=0)))
    return torch.cat(out)


def objective_coefficient(logp, advantage, *, eps_low=0.2, eps_high=0.2, beta=0.0, ref_logp=None, old_logp=None):
    """dℓ_t / d log π(o_t) for the tokens of one answer (1-D float64), through gmts.token_objective itself.

    ℓ_t = min(r A, clip(r) A) - β D_t depends on θ only through log π_θ(o_t) (old and reference log-probs are
    constants), so ∇θ ℓ_t = (dℓ_t/d log π) · ∇θ log π exactly. On-policy (old_logp = logp, r = 1) this is ω_t."""
    lp = logp.detach().double().clone().requires_grad_(True)
    old = lp.detach() if old_logp is None else torch.as_tensor(old_logp, dtype=torch.float64)
    ref = None if ref_logp is None else torch.as_tensor(ref_logp, dtype=torch.float64)[None]
    with torch.enable_grad():
        surrogate, kl = token_objective(lp[None], old[None], torch.tensor([float(advantage)], dtype=torch.float64),
                                        eps_low=eps_low, eps_high=eps_high, beta=beta, ref_logp=ref)
        objective = surrogate - beta * kl                                   # ℓ_t, (1, T); token t depends on lp[t]
        (coef,) = torch.autograd.grad(objective.sum(), lp)
    return coef.detach()


@torch.no_grad()
def answer_ref_logp(ref_model, prompt_ids, completion_ids, *, temperature=1.0, chunk_size=1024, max_tokens=None):
    """log π_ref(o_t) of one answer's tokens (1-D float64), for the KL part of ℓ (--beta with --ref-model)."""
    device = next(ref_model.parameters()).device
    completion = torch.as_tensor(completion_ids, dtype=torch.long, device=device).reshape(-1)
    n = completion.numel() if max_tokens is None else min(completion.numel(), max_tokens)
    backbone, head_w, head_b = causal_lm_hidden_and_head(ref_model)
    ids = torch.cat([torch.as_tensor(prompt_ids, dtype=torch.long, device=device), completion])[None]
    hidden = backbone(input_ids=ids, use_cache=False)[0][len(prompt_ids) - 1: len(prompt_ids) - 1 + n]
    logp, _ = token_logprobs_and_entropy(hidden, head_w, completion[:n], head_bias=head_b, temperature=temperature,
                                         chunk_size=chunk_size, with_entropy=False)
    return logp.double().cpu()


# ----------------------------------------------------------------------------------------------------------------------
# A batch: sampled groups -> per-answer records with every per-token quantity.

def analyze_groups(model, prompt_ids, rollout, rewards, *, params="all", adv_std="unbiased", eps_low=0.2,
                   eps_high=0.2, beta=0.0, ref_model=None, temperature=1.0, max_tokens_per_answer=None,
                   chunk_size=1024, progress=True, texts=None, pieces=None):
    """Per-answer records for a rollout (gmts.rollout.Rollout, Q prompts x G answers) and its rewards (N,).

    Each record: group, answer, reward, advantage, n_tokens (analysed), length (full), and per-token lists:
    logp, entropy, epsilon, logit_grad_norm, grad_logp_norm, omega (token_omega), objective_coef (dℓ/d log π),
    grad_objective_norm = |objective_coef| · grad_logp_norm = ||∇θ ℓ_it||, and gmts_score = |E · ω|."""
    group_size = rollout.group_size
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    advantages = group_advantages(rewards, group_size, std=adv_std)
    param_list, cut = analysis_parameters(model, params)
    lengths = rollout.valid_mask.sum(1).tolist()
    n_total = sum(min(L, max_tokens_per_answer or L) for L in lengths)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=n_total, desc="per-token backward", unit="tok", dynamic_ncols=True, mininterval=1.0,
                   file=sys.stderr)
    was_training = model.training
    model.eval()                                   # no dropout: the gradient of one token must be deterministic
    records = []
    try:
        for i in range(rollout.completion_ids.shape[0]):
            q = i // group_size
            tokens = rollout.completion_ids[i][rollout.valid_mask[i]].tolist()
            out = answer_token_gradients(model, prompt_ids[q], tokens, params=param_list, cut_before=cut,
                                         temperature=temperature, max_tokens=max_tokens_per_answer,
                                         chunk_size=chunk_size, progress=bar)
            n = out["logp"].numel()
            ref_logp = None
            if beta > 0:
                ref_logp = (out["logp"] if ref_model is None else
                            answer_ref_logp(ref_model, prompt_ids[q], tokens, temperature=temperature,
                                            chunk_size=chunk_size, max_tokens=max_tokens_per_answer))
            adv = float(advantages[i])
            coef = objective_coefficient(out["logp"], adv, eps_low=eps_low, eps_high=eps_high, beta=beta,
                                         ref_logp=ref_logp)
            omega = token_omega(out["logp"][None], out["logp"][None], torch.tensor([adv], dtype=torch.float64),
                                eps_low=eps_low, eps_high=eps_high, beta=beta,
                                ref_logp=None if ref_logp is None else ref_logp[None])[0]
            rec = {"group": q, "answer": i, "reward": float(rewards[i]), "advantage": adv, "n_tokens": n,
                   "length": int(lengths[i]), "finished": bool(rollout.finished[i])}
            if texts is not None:
                rec["text"] = texts[i]
            if pieces is not None:
                rec["pieces"] = pieces[i][:n]
            rec["token_ids"] = tokens[:n]
            rec.update({k: v.tolist() for k, v in out.items()})
            rec["epsilon"] = (1 - out["logp"].exp()).tolist()
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


# ----------------------------------------------------------------------------------------------------------------------
# Statistics (no scipy needed).

def pearson(x, y):
    """Pearson correlation of two 1-D sequences; None when fewer than 3 points or either is constant."""
    x, y = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
    if x.numel() != y.numel():
        raise ValueError(f"pearson: {x.numel()} != {y.numel()} values")
    if x.numel() < 3:
        return None
    x, y = x - x.mean(), y - y.mean()
    denom = math.sqrt(float((x * x).sum()) * float((y * y).sum()))
    if denom == 0 or not math.isfinite(denom):
        return None
    return float((x * y).sum()) / denom


def ranks(x):
    """Ranks 1..n with ties given their average rank (what Spearman's correlation needs)."""
    x = torch.as_tensor(x, dtype=torch.float64)
    order = torch.argsort(x, stable=True)
    sorted_x = x[order]
    r = torch.empty_like(x)
    start, n = 0, x.numel()
    while start < n:
        end = start
        while end + 1 < n and sorted_x[end + 1] == sorted_x[start]:
            end += 1
        r[order[start:end + 1]] = (start + end) / 2 + 1
        start = end + 1
    return r


def spearman(x, y):
    """Spearman rank correlation (Pearson of the tie-averaged ranks); None when undefined."""
    x, y = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
    if x.numel() != y.numel():
        raise ValueError(f"spearman: {x.numel()} != {y.numel()} values")
    return pearson(ranks(x), ranks(y)) if x.numel() >= 3 else None


def _describe(values):
    vals = [v for v in values if v is not None]
    if not vals:
        return {"n": 0, "mean": None, "median": None, "min": None, "max": None}
    t = torch.tensor(vals, dtype=torch.float64)
    return {"n": len(vals), "mean": float(t.mean()), "median": float(t.median()), "min": float(t.min()),
            "max": float(t.max())}


def _padded(records, key):
    width = max(r["n_tokens"] for r in records)
    out = torch.zeros(len(records), width, dtype=torch.float64)
    valid = torch.zeros(len(records), width, dtype=torch.bool)
    for i, r in enumerate(records):
        out[i, :r["n_tokens"]] = torch.tensor(r[key], dtype=torch.float64)
        valid[i, :r["n_tokens"]] = True
    return out, valid


def top_recall(records, ratio=0.2):
    """Of the top-ρ tokens by TRUE gradient norm ||∇θ ℓ|| (batch-wide, exact top-k), the share that ETS (entropy) and
    GMTS (|E·ω|) would select with the same budget. None when no token has a gradient (every advantage 0)."""
    true, valid = _padded(records, "grad_objective_norm")
    if not (true[valid] > 0).any():
        return {"ets": None, "gmts": None, "random_expected": ratio}
    entropy, _ = _padded(records, "entropy")
    gscore, _ = _padded(records, "gmts_score")
    target = select_tokens(true, valid, ratio)
    k = int(target.sum())
    return {"ets": float((select_tokens(token_scores("ets", entropy), valid, ratio) & target).sum()) / k,
            "gmts": float((select_tokens(gscore, valid, ratio) & target).sum()) / k,
            "random_expected": ratio}


def epsilon_distribution(records, bins=20):
    eps = torch.tensor([e for r in records for e in r["epsilon"]], dtype=torch.float64)
    if eps.numel() == 0:
        return {"n": 0}
    qs = [0.1, 0.25, 0.5, 0.75, 0.9]
    counts = torch.histc(eps.clamp(0, 1), bins=bins, min=0.0, max=1.0)
    return {"n": int(eps.numel()), "mean": float(eps.mean()),
            "quantiles": {str(q): float(torch.quantile(eps, q)) for q in qs},
            "share_below_0.1": float((eps < 0.1).double().mean()), "share_below_0.01": float((eps < 0.01).double().mean()),
            "histogram": {"edges": torch.linspace(0, 1, bins + 1).tolist(), "counts": [int(c) for c in counts]}}


def _log_pairs(x, y, floor=1e-30):
    """log x, log y where both are > floor (entropy 0 or a zero gradient has no logarithm)."""
    x, y = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
    keep = (x > floor) & (y > floor)
    return x[keep].log(), y[keep].log()


def summarize(records, ratio=0.2):
    """The numbers the paper reports (Figure 3), per group and over all groups."""
    groups = []
    for g in sorted({r["group"] for r in records}):
        rows = [r for r in records if r["group"] == g]
        ent = [e for r in rows for e in r["entropy"]]
        glp = [v for r in rows for v in r["grad_logp_norm"]]
        gobj = [v for r in rows for v in r["grad_objective_norm"]]
        score = [v for r in rows for v in r["gmts_score"]]
        has_gradient = any(v > 0 for v in gobj)
        groups.append({
            "group": g, "rewards": [r["reward"] for r in rows], "advantages": [r["advantage"] for r in rows],
            "n_tokens": len(ent),
            "pearson_logE_loggrad": pearson(*_log_pairs(ent, glp)),
            # Across answers: undefined when every advantage is 0 (all-equal rewards: no token has a gradient).
            "spearman_gmts_grad": spearman(score, gobj) if has_gradient else None,
            "spearman_entropy_grad": spearman(ent, gobj) if has_gradient else None,
        })
    within = [pearson(*_log_pairs(r["entropy"], r["grad_logp_norm"])) for r in records]
    return {
        "groups": groups,
        "pearson_logE_loggrad": _describe([g["pearson_logE_loggrad"] for g in groups]),
        "pearson_logE_loggrad_within_answer": _describe(within),
        "spearman_gmts_grad": _describe([g["spearman_gmts_grad"] for g in groups]),
        "spearman_entropy_grad": _describe([g["spearman_entropy_grad"] for g in groups]),
        "groups_without_gradient": sum(g["spearman_gmts_grad"] is None for g in groups),
        "top_recall": top_recall(records, ratio),
        "ratio": ratio,
        "epsilon": epsilon_distribution(records),
    }


# ----------------------------------------------------------------------------------------------------------------------
# Figures (matplotlib optional).

def _pick_pair(records):
    """Two answers of one group with different advantages (Figure 2): the first mixed group's extremes."""
    for g in sorted({r["group"] for r in records}):
        rows = [r for r in records if r["group"] == g]
        hi, lo = max(rows, key=lambda r: r["advantage"]), min(rows, key=lambda r: r["advantage"])
        if hi["advantage"] != lo["advantage"]:
            return hi, lo
    return records[0], records[min(1, len(records) - 1)]


def plot_figure2(result, path, ratio=None):
    """Figure 2: two answers with different advantages. Left: E vs ||∇ log π|| (log-log). Middle: E vs the true
    ||∇ℓ||. Right: the distributions of ||∇ℓ|| with each answer's top-ρ boundary (its (1-ρ) quantile)."""
    from matplotlib.ticker import NullFormatter
    from matplotlib.figure import Figure      # no pyplot: no GUI backend needed, and a notebook's backend is untouched
    ratio = ratio if ratio is not None else result.get("summary", {}).get("ratio", 0.2)
    pair = _pick_pair(result["answers"])
    fig = Figure(figsize=(15, 4.2))
    axes = fig.subplots(1, 3)
    colors = ["tab:green", "tab:red"]
    for rec, color in zip(pair, colors):
        label = f"answer {rec['answer']} (A = {rec['advantage']:+.2f})"
        e = torch.tensor(rec["entropy"])
        for ax, key in ((axes[0], "grad_logp_norm"), (axes[1], "grad_objective_norm")):
            y = torch.tensor(rec[key])
            keep = (e > 0) & (y > 0)
            ax.scatter(e[keep], y[keep], s=12, alpha=0.7, color=color, label=label)
        g = torch.tensor(rec["grad_objective_norm"])
        g = g[g > 0]
        if g.numel():
            axes[2].hist(g.log10(), bins=20, alpha=0.5, color=color, label=label)
            axes[2].axvline(float(torch.quantile(g, 1 - ratio).log10()), color=color, linestyle="--")
    for ax, ylabel in ((axes[0], "||∇θ log π(o_t)||"), (axes[1], "||∇θ ℓ_t|| (true gradient)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())   # narrow ranges: no clutter of labels
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("entropy E_t")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
    axes[0].set_title("within an answer, entropy tracks the gradient")
    axes[1].set_title("across answers, the advantage scales it")
    axes[2].set_xlabel("log10 ||∇θ ℓ_t||")
    axes[2].set_ylabel("tokens")
    axes[2].set_title(f"true gradient norms, dashed: top-{ratio:.0%} boundary")
    if axes[2].has_data():
        axes[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def plot_figure3(result, path):
    """Figure 3: per group, Pearson(log E, log ||∇ log π||) (left) and Spearman of |E·ω| and of E with ||∇ℓ||
    (middle); the distribution of ε = 1 - p(sampled token) (right)."""
    from matplotlib.figure import Figure
    summary = result["summary"]
    groups = summary["groups"]
    fig = Figure(figsize=(15, 4.2))
    axes = fig.subplots(1, 3)
    xs = list(range(len(groups)))
    pear = [g["pearson_logE_loggrad"] for g in groups]
    axes[0].bar([x for x, v in zip(xs, pear) if v is not None], [v for v in pear if v is not None], color="tab:blue")
    axes[0].set_ylim(-1, 1)
    axes[0].set_xlabel("question (group)")
    axes[0].set_ylabel("Pearson r")
    axes[0].set_title("log E vs log ||∇θ log π||, per group")
    width = 0.4
    for offset, key, color, label in ((-width / 2, "spearman_gmts_grad", "tab:orange", "GMTS |E·ω|"),
                                      (width / 2, "spearman_entropy_grad", "tab:gray", "entropy E")):
        vals = [g[key] for g in groups]
        axes[1].bar([x + offset for x, v in zip(xs, vals) if v is not None], [v for v in vals if v is not None],
                    width=width, color=color, label=label)
    axes[1].set_ylim(-1, 1)
    axes[1].set_xlabel("question (group)")
    axes[1].set_ylabel("Spearman ρ with ||∇θ ℓ||")
    axes[1].set_title("which score ranks tokens by their true gradient")
    axes[1].legend(fontsize=8)
    hist = summary["epsilon"].get("histogram")
    if hist:
        edges, counts = hist["edges"], hist["counts"]
        axes[2].bar(edges[:-1], counts, width=[b - a for a, b in zip(edges[:-1], edges[1:])], align="edge",
                    color="tab:purple")
    axes[2].set_xlabel("ε = 1 - p(sampled token)")
    axes[2].set_ylabel("tokens")
    axes[2].set_title("ε distribution (Prop. 3.1: log G / log E -> 1 as ε -> 0)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def write_figures(result, output):
    """<output stem>_fig2.png and _fig3.png next to the JSON; [] (and a note) if matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("gmts.analyze: matplotlib not installed, no figures (pip install matplotlib)", file=sys.stderr)
        return []
    stem = os.path.splitext(output)[0]
    return [plot_figure2(result, stem + "_fig2.png"), plot_figure3(result, stem + "_fig3.png")]


# ----------------------------------------------------------------------------------------------------------------------
# Command line.

class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser():
    p = _Parser(prog="python -m gmts.analyze", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", required=True, help="hub id or local folder")
    p.add_argument("--tokenizer", default="", help="tokenizer (default: --model)")
    p.add_argument("--data", default="gsm8k", help="built-in source name or a local .jsonl/.json file")
    p.add_argument("--split", default="train", help="split of --data")
    p.add_argument("--question-field", default="", help="column holding the question in a local file")
    p.add_argument("--answer-field", default="", help="column holding the reference answer in a local file")
    p.add_argument("--template", default="", help="prompt template (default: the source's own)")
    p.add_argument("--system-prompt", default=None, help="override the template's system prompt ('' = none)")
    p.add_argument("--task-options", default="", help="JSON options for the task, as in train.py")
    p.add_argument("--prompts", type=int, default=10, help="questions (the first N of --data); one group each")
    p.add_argument("--group-size", type=int, default=16, help="answers sampled per question (G)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="completion length limit")
    p.add_argument("--max-prompt-tokens", type=int, default=1024, help="longer prompts are skipped")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature τ; the policy is softmax(z/τ)")
    p.add_argument("--seed", type=int, default=0, help="seeds sampling")
    p.add_argument("--dtype", default="auto", help="auto (bf16 on GPU, float32 on CPU) | float32 | bfloat16 | float16")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:1 ...")
    p.add_argument("--params", default="all", help="θ for the gradient norms: all | head | last:K (last K layers + "
                                                   "final norm + head; for big models)")
    p.add_argument("--max-tokens-per-answer", type=int, default=0, help="analyse only each answer's first N tokens "
                                                                        "(0 = all)")
    p.add_argument("--adv-std", default="unbiased", help="advantage std: unbiased | biased | none (as train.py)")
    p.add_argument("--eps-low", type=float, default=0.2, help="ε1 (inactive on-policy: r = 1)")
    p.add_argument("--eps-high", type=float, default=0.2, help="ε2 (inactive on-policy: r = 1)")
    p.add_argument("--beta", type=float, default=0.0, help="k3 KL weight in ℓ (its gradient is 0 unless --ref-model "
                                                           "differs from --model)")
    p.add_argument("--ref-model", default="", help="reference policy π_ref for --beta (default: --model itself)")
    p.add_argument("--ratio", type=float, default=0.2, help="ρ for the top-ρ recall and the figures' boundary")
    p.add_argument("--chunk-size", type=int, default=1024, help="tokens per chunk in the output head")
    p.add_argument("--output", default="analysis.json", help="JSON path; figures go next to it (_fig2/_fig3.png)")
    p.add_argument("--no-plots", action="store_true", help="write the JSON only")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _check_args(p, args):
    for name in ("prompts", "max_new_tokens", "chunk_size", "max_prompt_tokens"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.group_size < 2:
        p.error(f"--group-size must be >= 2 (a group of one answer has no baseline), got {args.group_size}")
    if args.max_tokens_per_answer < 0:
        p.error(f"--max-tokens-per-answer must be >= 0, got {args.max_tokens_per_answer}")
    if args.temperature <= 0:
        p.error(f"--temperature must be > 0, got {args.temperature}")
    if not 0 < args.ratio <= 1:
        p.error(f"--ratio must be in (0, 1], got {args.ratio}")
    if args.adv_std not in STD_MODES:
        p.error(f"--adv-std must be one of {STD_MODES}, got {args.adv_std!r}")
    if args.beta < 0:
        p.error(f"--beta must be >= 0, got {args.beta}")
    if not (args.params in ("all", "head") or args.params.startswith("last:")):
        p.error(f"--params must be all, head or last:K (e.g. last:2), got {args.params!r}")
    if args.task_options:
        try:
            if not isinstance(json.loads(args.task_options), dict):
                raise ValueError
        except ValueError:
            p.error(f"--task-options must be a JSON object, got {args.task_options!r}")


def load_prompt_ids(args, tokenizer):
    """The first --prompts problems of --data whose prompt fits --max-prompt-tokens, with their prompt ids."""
    import data as datasets
    kept, ids, _ = datasets.load_prompts_for_cli(args.data, args.split, tokenizer,
                                                 max_prompt_tokens=args.max_prompt_tokens,
                                                 question_field=args.question_field, answer_field=args.answer_field,
                                                 template=args.template, task_options=args.task_options,
                                                 seed=args.seed, system_prompt=args.system_prompt)
    return kept[:args.prompts], ids[:args.prompts]


def run(args):
    """Sample, reward, analyse, summarise: the result dict that main() writes as JSON."""
    import rewards as reward_lib
    from .policy import end_of_sequence_ids, load_model, load_tokenizer, resolve_device, resolve_dtype
    from .rollout import sample

    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    tokenizer = load_tokenizer(args.tokenizer or args.model)
    problems, prompt_ids = load_prompt_ids(args, tokenizer)
    reward_fns = {name: reward_lib.get_reward(name) for name in {p.reward for p in problems}}
    model = load_model(args.model, dtype=dtype, device=device).eval()
    ref_model = load_model(args.ref_model, dtype=dtype, device=device).eval() if args.ref_model else None
    eos_ids = end_of_sequence_ids(model, tokenizer)
    generator = torch.Generator(device=device).manual_seed(args.seed)

    t0 = time.time()
    G = args.group_size
    roll_parts, texts, pieces, all_rewards = [], [], [], []
    for problem, ids in zip(problems, prompt_ids):      # one group at a time: memory stays one group's
        roll = sample(model, [ids], group_size=G, max_new_tokens=args.max_new_tokens, eos_token_ids=eos_ids,
                      pad_token_id=tokenizer.pad_token_id, temperature=args.temperature, generator=generator)
        for row, mask in zip(roll.completion_ids.cpu(), roll.valid_mask.cpu()):
            toks = row[mask].tolist()
            texts.append(tokenizer.decode(toks, skip_special_tokens=True))
            pieces.append([tokenizer.decode([t]) for t in toks])
            all_rewards.append(reward_fns[problem.reward](texts[-1], problem.answer))
        roll_parts.append(roll)
    t_sample = time.time() - t0
    rollout = _concat_rollouts(roll_parts, tokenizer.pad_token_id)
    params, _ = analysis_parameters(model, args.params)
    records = analyze_groups(model, prompt_ids, rollout, all_rewards, params=args.params, adv_std=args.adv_std,
                             eps_low=args.eps_low, eps_high=args.eps_high, beta=args.beta, ref_model=ref_model,
                             temperature=args.temperature, max_tokens_per_answer=args.max_tokens_per_answer or None,
                             chunk_size=args.chunk_size, progress=not args.no_progress, texts=texts, pieces=pieces)
    summary = summarize(records, args.ratio)
    for g, problem in zip(summary["groups"], problems):
        g["problem"] = problem.id
    return {
        "config": vars(args),
        "device": str(device), "dtype": str(dtype).replace("torch.", ""),
        "params": args.params, "n_params": sum(p.numel() for p in params),
        "objective": ("on-policy: gradients at θ = θ_old, so r = 1 and no clip is active; ∇θ ℓ_it = ω_it ∇θ log π "
                      f"with ω_it = A_i" + (f" + β(π_ref/π - 1), β = {args.beta}" if args.beta > 0 else "")
                      + (" (π_ref = the model itself: the KL gradient is 0)" if args.beta > 0 and not args.ref_model
                         else "")),
        "time_sample_s": t_sample, "time_gradients_s": time.time() - t0 - t_sample,
        "summary": summary,
        "answers": records,
    }


def _concat_rollouts(parts, pad_id):
    from .rollout import Rollout
    width = max(r.completion_ids.shape[1] for r in parts)

    def pad(t, value):
        return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)
    return Rollout(prompt_ids=sum((r.prompt_ids for r in parts), []),
                   completion_ids=torch.cat([pad(r.completion_ids, pad_id) for r in parts]).cpu(),
                   valid_mask=torch.cat([pad(r.valid_mask, False) for r in parts]).cpu(),
                   logp=torch.cat([pad(r.logp, 0.0) for r in parts]).cpu(),
                   entropy=torch.cat([pad(r.entropy, 0.0) for r in parts]).cpu(),
                   finished=torch.cat([r.finished for r in parts]).cpu(), group_size=parts[0].group_size)


def format_summary(summary):
    def fmt(d):
        return "n/a" if d["mean"] is None else f"mean {d['mean']:+.3f} (min {d['min']:+.3f}, max {d['max']:+.3f})"
    rec = summary["top_recall"]
    eps = summary["epsilon"]
    lines = [
        f"Pearson(log E, log ||∇ log π||) per group : {fmt(summary['pearson_logE_loggrad'])}",
        f"Spearman(|E·ω|, ||∇ℓ||) per group         : {fmt(summary['spearman_gmts_grad'])}",
        f"Spearman(E, ||∇ℓ||) per group             : {fmt(summary['spearman_entropy_grad'])}",
        f"groups with no gradient (all rewards equal): {summary['groups_without_gradient']}",
    ]
    if rec["gmts"] is not None:
        lines.append(f"top-{summary['ratio']:.0%} by true gradient recovered: GMTS {rec['gmts']:.3f}, ETS {rec['ets']:.3f}, "
                     f"random {rec['random_expected']:.3f}")
    if eps.get("n"):
        lines.append(f"ε = 1 - p: median {eps['quantiles']['0.5']:.3f}, share < 0.1: {eps['share_below_0.1']:.3f} "
                     f"({eps['n']} tokens)")
    return "\n".join(lines)


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_args(parser, args)
    torch.manual_seed(args.seed)
    result = run(args)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as fh:
        json.dump(result, fh)
    figures = [] if args.no_plots else write_figures(result, args.output)
    print(format_summary(result["summary"]))
    print(f"gmts.analyze: {len(result['answers'])} answers, "
          f"{sum(r['n_tokens'] for r in result['answers'])} tokens in {result['time_gradients_s']:.1f}s; "
          f"wrote {args.output}" + "".join(f", {f}" for f in figures))
    return result


if __name__ == "__main__":
    main()
