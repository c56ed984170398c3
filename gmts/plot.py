"""Compare training runs at a glance: one PNG, one panel per metric, one line per run.

    python -m gmts.plot runs/ets runs/gmts runs/random --output runs.png
    python -m gmts.plot runs/* --smooth 5 --metrics reward_mean,grad_norm,selection_overlap_ets_gmts

Reads each RUN_DIR's metrics.jsonl (one JSON object per step, written by train.py) and config.json (the label:
selector, ρ, seed, and the run directory's name when labels would collide). Needs matplotlib (optional: the trainer
itself does not).
"""
import argparse
import json
import os
import sys

# Panels in order: (metrics.jsonl key, axis label). What each means: notes/README, "Selection diagnostics".
DEFAULT_METRICS = (
    ("reward_mean", "reward (mean over sampled answers)"),
    ("accuracy", "accuracy (share with reward >= 1)"),
    ("entropy_mean", "entropy (mean over valid tokens)"),
    ("grad_norm", "grad norm (before clipping)"),
    ("response_len_mean", "response length (tokens)"),
    ("selection_overlap_ets_gmts", "ETS/GMTS selection overlap"),
)


def read_run(run_dir):
    """(config dict, list of per-step metric dicts). Clear errors for a directory that is not a run."""
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(metrics_path):
        raise ValueError(f"{run_dir}: no metrics.jsonl (is this a train.py --output-dir?)")
    rows = []
    with open(metrics_path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{metrics_path}:{lineno}: not JSON ({err.msg})") from None
    config = {}
    config_path = os.path.join(run_dir, "config.json")
    if os.path.isfile(config_path):
        with open(config_path) as fh:
            config = json.load(fh)
    return config, rows


def run_label(config, run_dir):
    """'gmts ρ=0.2 seed 3' from config.json; the directory name when there is no config."""
    if not config:
        return os.path.basename(os.path.normpath(run_dir))
    selector = config.get("selector", "?")
    label = selector + (f" ρ={config['ratio']:g}" if selector not in ("none", "?") and "ratio" in config else "")
    if config.get("bottom"):
        label += " bottom"
    return label + f" seed {config.get('seed', '?')}"


def moving_average(values, window):
    if window <= 1:
        return list(values)
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def series(rows, key):
    """(steps, values) for the steps that logged a finite number under `key` (skipped steps log no diagnostics)."""
    steps, values = [], []
    for row in rows:
        value = row.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) != float("inf"):
            steps.append(row.get("step", len(steps) + 1))
            values.append(float(value))
    return steps, values


def plot_runs(run_dirs, output, *, metrics=None, smooth=1, title=None):
    """Write the comparison figure to `output` (PNG); returns the path."""
    from matplotlib.figure import Figure      # no pyplot: works without a display and leaves notebooks alone
    if not run_dirs:
        raise ValueError("give at least one run directory")
    panels = list(DEFAULT_METRICS) if metrics is None else [(m, m) for m in metrics]
    runs = [(d, *read_run(d)) for d in run_dirs]
    labels = [run_label(cfg, d) for d, cfg, _ in runs]
    if len(set(labels)) < len(labels):         # two runs with the same selector and seed: say which directory
        labels = [f"{label} ({os.path.basename(os.path.normpath(d))})" for label, (d, _, _) in zip(labels, runs)]
    cols = 3 if len(panels) > 4 else len(panels)
    n_rows = -(-len(panels) // cols)
    fig = Figure(figsize=(5 * cols, 3.4 * n_rows))
    axes = fig.subplots(n_rows, cols, squeeze=False).reshape(-1)
    for ax, (key, label) in zip(axes, panels):
        drawn = False
        for (run_dir, _, rows), run_name in zip(runs, labels):
            steps, values = series(rows, key)
            if steps:
                ax.plot(steps, moving_average(values, smooth), label=run_name, marker="." if len(steps) < 30 else None)
                drawn = True
        ax.set_title(label + (f" (moving avg {smooth})" if smooth > 1 else ""), fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if not drawn:
            ax.text(0.5, 0.5, f"no run logged {key}", ha="center", va="center", transform=ax.transAxes, color="gray")
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    handles, names = [], []
    for ax in axes:
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in names:
                handles.append(h)
                names.append(n)
    if handles:
        fig.legend(handles, names, loc="lower center", ncol=min(len(names), 4), fontsize=9, frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.06 if handles else 0, 1, 0.96 if title else 1))
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    fig.savefig(output, dpi=110)
    return output


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m gmts.plot", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="train.py output directories")
    parser.add_argument("--output", default="runs.png", help="PNG to write")
    parser.add_argument("--metrics", default="", help="comma-separated metrics.jsonl keys (default: reward, "
                                                      "accuracy, entropy, grad norm, response length, overlap)")
    parser.add_argument("--smooth", type=int, default=1, help="moving-average window in steps (1 = raw)")
    parser.add_argument("--title", default="", help="figure title")
    args = parser.parse_args(argv)
    if args.smooth < 1:
        parser.error(f"--smooth must be >= 1, got {args.smooth}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit("error: gmts.plot needs matplotlib: pip install matplotlib") from None
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] or None
    try:
        path = plot_runs(args.runs, args.output, metrics=metrics, smooth=args.smooth, title=args.title or None)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    print(f"gmts.plot: {len(args.runs)} run(s) -> {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
