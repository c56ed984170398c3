"""Statistics, two kinds: evaluation (the unbiased pass@k, bootstrap intervals over problems, paired
differences) and the gradient analysis of gmts.tools.analyze (correlations, the top-ρ recall, the
summary its Figure 3 draws).

Why a bootstrap over problems: the paper's gains are 1-3 points on benchmarks of 30-500 problems.
The sampling noise of k answers per problem is only part of the uncertainty; which problems the
benchmark happens to hold is the rest, and it is the larger part when one model is compared with
another on the same problems. Resampling problems (each problem's score = the mean over its samples)
captures both, and pairing by problem id cancels the problem-difficulty term when two models are
compared (a paired bootstrap), which is what makes small differences detectable at all.
"""
import math

import numpy as np
import torch

from gmts.method.grpo import token_scores
from gmts.method.grpo import select_tokens

N_BOOTSTRAP = 10_000
# resamples drawn at a time: caps the (resamples x problems) index array at ~8 MB per 1k problems
_CHUNK = 1_000


def pass_at_k(n, c, k):
    """Unbiased pass@k for one problem with n samples of which c are correct: 1 - C(n-c, k) / C(n,
    k).

    The ratio of binomials is evaluated as a product, 1 - prod_{i=n-c+1}^{n} (1 - k/i), which never
    forms the huge factorials (C(512, 256) overflows float64) and is exact to rounding.
    """
    n, c, k = int(n), int(c), int(k)
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:               # every k-subset holds at least one correct sample
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def pass_at_k_per_problem(n_samples, n_correct, k):
    """(P,) pass@k for each problem. n_samples may be one int or one count per problem."""
    n_correct = np.asarray(n_correct)
    n_samples = np.broadcast_to(np.asarray(n_samples), n_correct.shape)
    return np.array([pass_at_k(n, c, k) for n, c in zip(n_samples, n_correct)], dtype=np.float64)


def pass_k_values(samples):
    """The k to report for `samples` answers per problem: 1, 2, 4, ... (powers of two below it) and
    samples itself."""
    ks, k = [], 1
    while k < samples:
        ks.append(k)
        k *= 2
    return ks + [samples]


def bootstrap_means(groups, *, seed=0, n_resamples=N_BOOTSTRAP):
    """Bootstrap distribution of the AVERAGE over groups of each group's mean: (n_resamples,).

    groups: a list of 1-d arrays (one per benchmark), each holding one score per problem. Every
    resample draws the problems of each benchmark with replacement, independently per benchmark (a
    stratified bootstrap), so the average over benchmarks weighs each benchmark equally, as the
    paper's "average" column does.
    """
    groups = [np.asarray(g, dtype=np.float64) for g in groups]
    if not groups or any(g.ndim != 1 or g.size == 0 for g in groups):
        raise ValueError("bootstrap needs at least one non-empty 1-d array of per-problem scores")
    rng = np.random.default_rng(seed)
    total = np.zeros(n_resamples, dtype=np.float64)
    for g in groups:
        for start in range(0, n_resamples, _CHUNK):
            rows = min(_CHUNK, n_resamples - start)
            # (rows, P) problems drawn with replacement
            idx = rng.integers(0, g.size, size=(rows, g.size))
            total[start:start + rows] += g[idx].mean(axis=1)
    return total / len(groups)


def percentile_interval(resampled, level=0.95):
    """[lo, hi]: the percentile interval of a bootstrap distribution."""
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(resampled, [tail, 100 - tail])
    return [float(lo), float(hi)]


def bootstrap_ci(scores, *, seed=0, n_resamples=N_BOOTSTRAP, level=0.95):
    """95% percentile interval of the mean of per-problem scores (or, given a list of arrays, of the
    average of their means: see bootstrap_means)."""
    groups = scores if _is_list_of_arrays(scores) else [scores]
    return percentile_interval(bootstrap_means(groups, seed=seed, n_resamples=n_resamples), level)


def paired_difference(a, b, *, seed=0, n_resamples=N_BOOTSTRAP, level=0.95):
    """Mean of b - a over problems and its paired bootstrap interval; a and b hold per-problem
    scores in the same problem order (or lists of such arrays, one per benchmark: then the average
    over benchmarks).

    Paired: each resample draws problem indices once and uses them for both a and b, so a problem
    that is hard for both models moves both scores together and cancels in the difference."""
    a_groups = a if _is_list_of_arrays(a) else [a]
    b_groups = b if _is_list_of_arrays(b) else [b]
    if len(a_groups) != len(b_groups):
        raise ValueError(f"{len(a_groups)} benchmarks against {len(b_groups)}")
    diffs = []
    for ga, gb in zip(a_groups, b_groups):
        ga, gb = np.asarray(ga, dtype=np.float64), np.asarray(gb, dtype=np.float64)
        if ga.shape != gb.shape:
            raise ValueError(f"paired scores need the same problems, got {ga.shape} and {gb.shape}")
        diffs.append(gb - ga)
    mean = float(np.mean([d.mean() for d in diffs]))
    return mean, percentile_interval(bootstrap_means(diffs, seed=seed, n_resamples=n_resamples),
                                     level)


def verdict(interval):
    """Plain words for a difference b - a with interval [lo, hi]."""
    lo, hi = interval
    if lo > 0:
        return "better"
    if hi < 0:
        return "worse"
    return "indistinguishable"


def spread(values):
    """Summary of one figure measured R times (R runs with different seeds): the noise floor of a
    single run.

    noise_floor_95 = 1.96 * sqrt(2) * std: two single runs of the SAME model differ by more than
    this about 5% of the time (normal approximation), so a difference between two single runs
    smaller than it is not evidence of anything. With few runs the std itself is uncertain: read it
    as an order of magnitude."""
    v = np.asarray(values, dtype=np.float64)
    std = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return {"values": [float(x) for x in v], "mean": float(v.mean()), "std": std,
            "min": float(v.min()), "max": float(v.max()),
            "noise_floor_95": 1.96 * math.sqrt(2) * std}


def _is_list_of_arrays(x):
    return isinstance(x, (list, tuple)) and len(x) > 0 and np.ndim(x[0]) == 1 and not np.isscalar(
        x[0])


# --------------------------------------------------------------------------------------------------
# The gradient analysis (gmts.tools.analyze): correlations without scipy, and the numbers of the
# paper's Figure 3.

def pearson(x, y):
    """Pearson correlation of two 1-D sequences; None when fewer than 3 points or either is
    constant."""
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


def log_pairs(x, y, floor=1e-30):
    """log x, log y where both are > floor (entropy 0 or a zero gradient has no logarithm)."""
    x, y = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
    keep = (x > floor) & (y > floor)
    return x[keep].log(), y[keep].log()


def describe(values):
    """n, mean, median, min, max of the values that are not None (all None when none is left)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"n": 0, "mean": None, "median": None, "min": None, "max": None}
    t = torch.tensor(vals, dtype=torch.float64)
    return {"n": len(vals), "mean": float(t.mean()), "median": float(t.median()),
            "min": float(t.min()), "max": float(t.max())}


def _padded(records, key):
    """(N, T_max) float64 of a per-token list in each record, and the (N, T_max) mask of real
    tokens."""
    width = max((r["n_tokens"] for r in records), default=0)
    out = torch.zeros(len(records), width, dtype=torch.float64)
    valid = torch.zeros(len(records), width, dtype=torch.bool)
    for i, r in enumerate(records):
        out[i, :r["n_tokens"]] = torch.tensor(r[key], dtype=torch.float64)
        valid[i, :r["n_tokens"]] = True
    return out, valid


def top_recall(records, ratio=0.2):
    """Of the top-ρ tokens by TRUE gradient norm ||∇θ ℓ|| (batch-wide, exact top-k), the share that
    ETS (entropy) and GMTS (|E·ω|) would select with the same budget. None when no token has a
    gradient (every advantage 0)."""
    true, valid = _padded(records, "grad_objective_norm")
    if not (true[valid] > 0).any():
        return {"ets": None, "gmts": None, "random_expected": ratio}
    entropy, _ = _padded(records, "entropy")
    gscore, _ = _padded(records, "gmts_score")
    target = select_tokens(true, valid, ratio)
    k = int(target.sum())
    return {
        "ets": float((select_tokens(token_scores("ets", entropy), valid, ratio)
                      & target).sum()) / k,
        "gmts": float((select_tokens(gscore, valid, ratio) & target).sum()) / k,
        "random_expected": ratio}


def epsilon_distribution(records, bins=20):
    """Quantiles, small-ε shares and a histogram of ε = 1 - p(sampled token) over every analysed
    token."""
    eps = torch.tensor([e for r in records for e in r["epsilon"]], dtype=torch.float64)
    if eps.numel() == 0:
        return {"n": 0}
    qs = [0.1, 0.25, 0.5, 0.75, 0.9]
    counts = torch.histc(eps.clamp(0, 1), bins=bins, min=0.0, max=1.0)
    return {"n": int(eps.numel()), "mean": float(eps.mean()),
            "quantiles": {str(q): float(torch.quantile(eps, q)) for q in qs},
            "share_below_0.1": float((eps < 0.1).double().mean()),
            "share_below_0.01": float((eps < 0.01).double().mean()),
            "histogram": {"edges": torch.linspace(0, 1, bins + 1).tolist(),
                          "counts": [int(c) for c in counts]}}


def ratio_statistics(records):
    """How far θ is from the policy that sampled: the share of tokens whose clip is active (I = 0)
    and the mean |r - 1| (both 0 on-policy, and for records without per-token ratios)."""
    ratio = [v for r in records for v in r.get("ratio", [1.0] * r["n_tokens"])]
    clipped = [c for r in records for c in r.get("clip_active", [False] * r["n_tokens"])]
    if not ratio:
        return {"clip_active_share": None, "ratio_abs_dev_mean": None}
    return {"clip_active_share": sum(clipped) / len(clipped),
            "ratio_abs_dev_mean": float(
                torch.tensor(ratio, dtype=torch.float64).sub(1).abs().mean())}


def summarize(records, ratio=0.2):
    """The numbers the paper reports (Figure 3), per group and over all groups, from
    gmts.tools.analyze's records."""
    groups = []
    for g in sorted({r["group"] for r in records}):
        rows = [r for r in records if r["group"] == g]
        ent = [e for r in rows for e in r["entropy"]]
        glp = [v for r in rows for v in r["grad_logp_norm"]]
        gobj = [v for r in rows for v in r["grad_objective_norm"]]
        score = [v for r in rows for v in r["gmts_score"]]
        has_gradient = any(v > 0 for v in gobj)
        groups.append({
            "group": g, "rewards": [r["reward"] for r in rows],
            "advantages": [r["advantage"] for r in rows], "n_tokens": len(ent),
            "pearson_logE_loggrad": pearson(*log_pairs(ent, glp)),
            # Across answers: undefined when every advantage is 0 (all-equal rewards: no token has a
            # gradient).
            "spearman_gmts_grad": spearman(score, gobj) if has_gradient else None,
            "spearman_entropy_grad": spearman(ent, gobj) if has_gradient else None,
        })
    within = [pearson(*log_pairs(r["entropy"], r["grad_logp_norm"])) for r in records]
    return {
        "groups": groups,
        "pearson_logE_loggrad": describe([g["pearson_logE_loggrad"] for g in groups]),
        "pearson_logE_loggrad_within_answer": describe(within),
        "spearman_gmts_grad": describe([g["spearman_gmts_grad"] for g in groups]),
        "spearman_entropy_grad": describe([g["spearman_entropy_grad"] for g in groups]),
        "groups_without_gradient": sum(g["spearman_gmts_grad"] is None for g in groups),
        "top_recall": top_recall(records, ratio),
        "ratio": ratio,
        "epsilon": epsilon_distribution(records),
        **ratio_statistics(records),
    }


# --------------------------------------------------------------------------------------------------
# Rates (how many of n runs diverged) and the stability map's bootstrap over seeds and problems
# (bench/learning_check.py).

def _z(level):
    from statistics import NormalDist
    return NormalDist().inv_cdf(0.5 + level / 2)


def wilson_interval(k, n, level=0.95):
    """Wilson score interval [lo, hi] of a rate of k events in n trials (float64)."""
    k, n = int(k), int(n)
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"a rate needs 0 <= k <= n and n >= 1, got k={k}, n={n}")
    z, p = _z(level), k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # k = 0 and k = n have a closed end exactly at 0 or 1; the formula gives it up to rounding
    return [0.0 if k == 0 else centre - half, 1.0 if k == n else centre + half]


def binomial_cdf(k, n, p):
    """P(X <= k) for X ~ Binomial(n, p), summed exactly term by term (float64; n up to ~1000)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return math.fsum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k + 1))


def clopper_pearson_interval(k, n, level=0.95):
    """Exact (Clopper-Pearson) interval [lo, hi] of a rate of k in n: lo solves P(X >= k | lo) =
    α/2, hi solves P(X <= k | hi) = α/2; each by bisection on the exact binomial tail to float64
    resolution."""
    k, n = int(k), int(n)
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"a rate needs 0 <= k <= n and n >= 1, got k={k}, n={n}")
    tail = (1 - level) / 2

    def solve(f):                   # f increasing in p on [0, 1], f(0) < 0 < f(1)
        lo, hi = 0.0, 1.0
        for _ in range(200):
            mid = (lo + hi) / 2
            if mid in (lo, hi):
                break
            lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
        return (lo + hi) / 2

    lower = 0.0 if k == 0 else solve(lambda p: (1 - binomial_cdf(k - 1, n, p)) - tail)
    upper = 1.0 if k == n else solve(lambda p: tail - binomial_cdf(k, n, p))
    return [lower, upper]


def rate_difference(k_a, n_a, k_b, n_b, level=0.95):
    """Difference of two independent rates, k_b/n_b - k_a/n_a, and Newcombe's hybrid score interval
    (his method 10, Stat. Med. 1998; 17:873): each rate's Wilson interval combined in quadrature."""
    pa, pb = k_a / n_a, k_b / n_b
    la, ua = wilson_interval(k_a, n_a, level)
    lb, ub = wilson_interval(k_b, n_b, level)
    d = pb - pa
    lower = math.sqrt((pb - lb) ** 2 + (ua - pa) ** 2)
    upper = math.sqrt((ub - pb) ** 2 + (pa - la) ** 2)
    return d, [d - lower, d + upper]


def paired_rate_difference(a, b, level=0.95):
    """Difference of two rates measured on the same units (seeds): mean(b) - mean(a) of 0/1 outcomes
    paired by position, and Newcombe's interval for paired data (his method 10, Stat. Med. 1998;
    17:2635): the two Wilson intervals combined with the correlation φ of the 2x2 table (φ = 0 when
    a margin is empty)."""
    a, b = [bool(x) for x in a], [bool(x) for x in b]
    if len(a) != len(b) or not a:
        raise ValueError(f"paired rates need the same number (>= 1) of units, got {len(a)} and "
                         f"{len(b)}")
    n = len(a)
    both = sum(x and y for x, y in zip(a, b))
    only_a = sum(x and not y for x, y in zip(a, b))
    only_b = sum(y and not x for x, y in zip(a, b))
    neither = n - both - only_a - only_b
    ka, kb = both + only_a, both + only_b
    pa, pb = ka / n, kb / n
    la, ua = wilson_interval(ka, n, level)
    lb, ub = wilson_interval(kb, n, level)
    margins = ka * (n - ka) * kb * (n - kb)
    phi = (both * neither - only_a * only_b) / math.sqrt(margins) if margins else 0.0
    d = pb - pa
    lower = math.sqrt(max(0.0, (pb - lb) ** 2 - 2 * phi * (pb - lb) * (ua - pa) + (ua - pa) ** 2))
    upper = math.sqrt(max(0.0, (ub - pb) ** 2 - 2 * phi * (ub - pb) * (pa - la) + (pa - la) ** 2))
    return d, [d - lower, d + upper]


def problem_counts(n_problems, *, seed=0, n_resamples=N_BOOTSTRAP):
    """(n_resamples, n_problems) float64: how often each problem is drawn in each bootstrap
    resample. Shared by every quantity of one analysis, so that differences are paired by problem.
    """
    rng = np.random.default_rng(seed)
    out = np.zeros((n_resamples, n_problems), dtype=np.float64)
    for start in range(0, n_resamples, _CHUNK):
        rows = min(_CHUNK, n_resamples - start)
        idx = rng.integers(0, n_problems, size=(rows, n_problems))
        np.add.at(out, (np.arange(start, start + rows)[:, None], idx), 1.0)
    return out


def seed_problem_replicates(accuracies, profiles=None, counts=None):
    """(S, n_resamples): each seed's accuracy under each problem resample (counts from
    problem_counts).

    accuracies: (S,) each seed's accuracy; profiles: per seed its (P,) per-problem scores, or None
    where they were not kept. A seed without a profile moves with the mean profile of the seeds that
    have one (the problem term is which problems the benchmark holds, shared by the seeds; its own
    sampling noise is in its accuracy already). With no profile at all (or counts None) the
    accuracies do not move: the bootstrap is over seeds only."""
    acc = np.asarray(accuracies, dtype=np.float64)
    profiles = list(profiles) if profiles is not None else [None] * acc.size
    known = [np.asarray(p, dtype=np.float64) for p in profiles if p is not None]
    if counts is None or not known:
        return np.repeat(acc[:, None], 1 if counts is None else counts.shape[0], axis=1)
    n_problems = counts.shape[1]
    mean_profile = np.mean(known, axis=0)
    shift = counts @ mean_profile / n_problems - mean_profile.mean()            # (B,)
    rows = [counts @ np.asarray(p, dtype=np.float64) / n_problems if p is not None else a + shift
            for a, p in zip(acc, profiles)]
    return np.stack(rows)


def seed_draws(n_seeds, *, seed=0, n_resamples=N_BOOTSTRAP):
    """(n_resamples, n_seeds) seed indices drawn with replacement (a bootstrap over seeds)."""
    return np.random.default_rng(seed).integers(0, n_seeds, size=(n_resamples, n_seeds))


def resample_seed_means(replicates, draws):
    """(n_resamples,): the mean over the drawn seeds of their replicate. replicates (S, B) from
    seed_problem_replicates (B = 1: seeds only), draws (n_resamples, S') from seed_draws."""
    replicates = np.asarray(replicates, dtype=np.float64)
    cols = np.arange(draws.shape[0]) % replicates.shape[1]
    return replicates[draws, cols[:, None]].mean(axis=1)


def first_below(means_by_rate, threshold):
    """means_by_rate: (R, B) resampled mean accuracy at R rates in ascending order. Returns (B,) the
    index of the first rate whose mean is below threshold in each resample (R where none is)."""
    below = np.asarray(means_by_rate) < threshold
    return np.where(below.any(axis=0), below.argmax(axis=0), below.shape[0])
