"""Evaluation statistics: the unbiased pass@k, bootstrap intervals over problems, paired differences.

Why a bootstrap over problems: the paper's gains are 1-3 points on benchmarks of 30-500 problems. The sampling noise
of k answers per problem is only part of the uncertainty; which problems the benchmark happens to hold is the rest,
and it is the larger part when one model is compared with another on the same problems. Resampling problems (each
problem's score = the mean over its samples) captures both, and pairing by problem id cancels the problem-difficulty
term when two models are compared (a paired bootstrap), which is what makes small differences detectable at all.
"""
import math

import numpy as np

N_BOOTSTRAP = 10_000
_CHUNK = 1_000          # resamples drawn at a time: caps the (resamples x problems) index array at ~8 MB per 1k problems


def pass_at_k(n, c, k):
    """Unbiased pass@k for one problem with n samples of which c are correct: 1 - C(n-c, k) / C(n, k).

    The ratio of binomials is evaluated as a product, 1 - prod_{i=n-c+1}^{n} (1 - k/i), which never forms the huge
    factorials (C(512, 256) overflows float64) and is exact to rounding.
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
    """The k to report for `samples` answers per problem: 1, 2, 4, ... (powers of two below it) and samples itself."""
    ks, k = [], 1
    while k < samples:
        ks.append(k)
        k *= 2
    return ks + [samples]


def bootstrap_means(groups, *, seed=0, n_resamples=N_BOOTSTRAP):
    """Bootstrap distribution of the AVERAGE over groups of each group's mean: (n_resamples,).

    groups: a list of 1-d arrays (one per benchmark), each holding one score per problem. Every resample draws the
    problems of each benchmark with replacement, independently per benchmark (a stratified bootstrap), so the average
    over benchmarks weighs each benchmark equally, as the paper's "average" column does.
    """
    groups = [np.asarray(g, dtype=np.float64) for g in groups]
    if not groups or any(g.ndim != 1 or g.size == 0 for g in groups):
        raise ValueError("bootstrap needs at least one non-empty 1-d array of per-problem scores")
    rng = np.random.default_rng(seed)
    total = np.zeros(n_resamples, dtype=np.float64)
    for g in groups:
        for start in range(0, n_resamples, _CHUNK):
            rows = min(_CHUNK, n_resamples - start)
            idx = rng.integers(0, g.size, size=(rows, g.size))           # (rows, P) problems drawn with replacement
            total[start:start + rows] += g[idx].mean(axis=1)
    return total / len(groups)


def percentile_interval(resampled, level=0.95):
    """[lo, hi]: the percentile interval of a bootstrap distribution."""
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(resampled, [tail, 100 - tail])
    return [float(lo), float(hi)]


def bootstrap_ci(scores, *, seed=0, n_resamples=N_BOOTSTRAP, level=0.95):
    """95% percentile interval of the mean of per-problem scores (or, given a list of arrays, of the average of
    their means: see bootstrap_means)."""
    groups = scores if _is_list_of_arrays(scores) else [scores]
    return percentile_interval(bootstrap_means(groups, seed=seed, n_resamples=n_resamples), level)


def paired_difference(a, b, *, seed=0, n_resamples=N_BOOTSTRAP, level=0.95):
    """Mean of b - a over problems and its paired bootstrap interval; a and b hold per-problem scores in the same
    problem order (or lists of such arrays, one per benchmark: then the average over benchmarks).

    Paired: each resample draws problem indices once and uses them for both a and b, so a problem that is hard for
    both models moves both scores together and cancels in the difference."""
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
    return mean, percentile_interval(bootstrap_means(diffs, seed=seed, n_resamples=n_resamples), level)


def verdict(interval):
    """Plain words for a difference b - a with interval [lo, hi]."""
    lo, hi = interval
    if lo > 0:
        return "better"
    if hi < 0:
        return "worse"
    return "indistinguishable"


def spread(values):
    """Summary of one figure measured R times (R runs with different seeds): the noise floor of a single run.

    noise_floor_95 = 1.96 * sqrt(2) * std: two single runs of the SAME model differ by more than this about 5% of the
    time (normal approximation), so a difference between two single runs smaller than it is not evidence of anything.
    With few runs the std itself is uncertain: read it as an order of magnitude."""
    v = np.asarray(values, dtype=np.float64)
    std = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return {"values": [float(x) for x in v], "mean": float(v.mean()), "std": std, "min": float(v.min()),
            "max": float(v.max()), "noise_floor_95": 1.96 * math.sqrt(2) * std}


def _is_list_of_arrays(x):
    return isinstance(x, (list, tuple)) and len(x) > 0 and np.ndim(x[0]) == 1 and not np.isscalar(x[0])
