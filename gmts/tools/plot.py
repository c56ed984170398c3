"""Figures. Compare training runs at a glance: one PNG, one panel per metric, one line per run.

    python -m gmts.tools.plot runs/ets runs/gmts runs/random --output runs.png
    python -m gmts.tools.plot runs/* --smooth 5 \
        --metrics reward_mean,grad_norm,selection_overlap_ets_gmts

Reads each RUN_DIR's metrics.jsonl (one JSON object per step, written by train.py) and config.json
(the label: selector, ρ, seed, and the run directory's name when labels would collide). And the
paper's Figures 2 and 3 from gmts.tools.analyze's measurements (plot_figure2, plot_figure3,
write_figures). Needs matplotlib (optional: the trainer itself does not).
"""
import itertools
import json
import math
import os
import sys
import textwrap

# Ctrl-C while torch loads (the next line) or later: one line, not a traceback
if __name__ == "__main__":
    from gmts.run.folder import exit_on_interrupt
    exit_on_interrupt("gmts.tools.plot")

import torch

# Panels in order: (metrics.jsonl key, axis label). What each means: docs/training.md, "Selection
# diagnostics".
DEFAULT_METRICS = (
    ("reward_mean", "reward (mean over sampled answers)"),
    ("accuracy", "accuracy (share with reward >= 1)"),
    ("entropy_mean", "entropy (mean over valid tokens)"),
    ("grad_norm", "grad norm (before clipping)"),
    ("response_len_mean", "response length (tokens)"),
    ("selection_overlap_ets_gmts", "ETS/GMTS selection overlap"),
)


def read_run(run_dir):
    """(config dict, list of per-step metric dicts). Clear errors for a directory that is not a
    run."""
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(metrics_path):
        raise ValueError(f"{run_dir}: no metrics.jsonl (is this a train.py --output-dir?)")
    rows = []
    with open(metrics_path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:                   # UnicodeDecodeError and JSONDecodeError are both ValueErrors
                row = json.loads(raw.decode("utf-8"))
            except ValueError as err:
                raise ValueError(f"{metrics_path}:{lineno}: not a JSON line "
                                 f"({getattr(err, 'msg', err)})") from None
            if not isinstance(row, dict):
                raise ValueError(  # noqa: TRY004 - bad data, not a bad argument type
                    f"{metrics_path}:{lineno}: not a JSON object of metrics")
            rows.append(row)
    config = {}
    config_path = os.path.join(run_dir, "config.json")
    if os.path.isfile(config_path):
        try:
            with open(config_path, encoding="utf-8") as fh:
                config = json.load(fh)
        except ValueError as err:
            raise ValueError(f"{config_path}: damaged, not JSON "
                             f"({getattr(err, 'msg', err)})") from None
        if not isinstance(config, dict):
            raise ValueError(f"{config_path}: damaged, not a JSON object")
    return config, rows


def run_label(config, run_dir):
    """'gmts ρ=0.2 seed 3' from config.json; the directory name when there is no config."""
    if not config:
        return os.path.basename(os.path.normpath(run_dir))
    selector = config.get("selector", "?")
    label = selector + (f" ρ={config['ratio']:g}" if selector not in ("none", "?")
                        and "ratio" in config else "")
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
    """(steps, values) for the steps that logged a finite number under `key` (skipped steps log no
    diagnostics)."""
    steps, values = [], []
    for row in rows:
        value = row.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            steps.append(row.get("step", len(steps) + 1))
            values.append(float(value))
    return steps, values


def plot_runs(run_dirs, output, *, metrics=None, smooth=1, title=None):
    """Write the comparison figure to `output` (PNG); returns the path."""
    # no pyplot: works without a display and leaves notebooks alone
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator
    if not run_dirs:
        raise ValueError("give at least one run directory")
    panels = list(DEFAULT_METRICS) if metrics is None else [(m, m) for m in metrics]
    runs = [(d, *read_run(d)) for d in run_dirs]
    # asked for by name: a key no run logged is a typo, not an empty panel
    if metrics is not None:
        logged = {k for _, _, rows in runs for row in rows for k in row}
        unknown = [m for m in metrics if m not in logged]
        if unknown:
            raise ValueError(f"--metrics {unknown[0]}: no run logged it (keys: "
                             f"{', '.join(sorted(logged))})")
    labels = [run_label(cfg, d) for d, cfg, _ in runs]
    # two runs with the same selector and seed: say which directory
    if len(set(labels)) < len(labels):
        labels = [f"{label} ({os.path.basename(os.path.normpath(d))})" for label,
                  (d, _, _) in zip(labels, runs)]
    cols = 3 if len(panels) > 4 else len(panels)
    n_rows = -(-len(panels) // cols)
    fig = Figure(figsize=(5 * cols, 3.4 * n_rows))
    axes = fig.subplots(n_rows, cols, squeeze=False).reshape(-1)
    for ax, (key, label) in zip(axes, panels):
        drawn = False
        for (run_dir, _, rows), run_name in zip(runs, labels):
            steps, values = series(rows, key)
            if steps:
                ax.plot(steps, moving_average(values, smooth), label=run_name,
                        marker="." if len(steps) < 30 else None)
                drawn = True
        ax.set_title(label + (f" (moving avg {smooth})" if smooth > 1 else ""), fontsize=10)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))     # steps are whole numbers
        ax.grid(alpha=0.3)
        if not drawn:
            nothing_to_draw(ax, output, f"panel {key}", f"no run logged {key} (as a number)")
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    handles, names = [], []
    for ax in axes:
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in names:
                handles.append(h)
                names.append(n)
    if handles:
        fig.legend(handles, names, loc="lower center", ncol=min(len(names), 4), fontsize=9,
                   frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.06 if handles else 0, 1, 0.96 if title else 1))
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    fig.savefig(output, dpi=110)
    return output


# --------------------------------------------------------------------------------------------------
# The paper's Figures 2 and 3 from a gmts.tools.analyze result (its JSON, loaded, or the dict run()
# returns).

def _pick_pair(records):
    """Two answers of one group with different advantages (Figure 2): the first mixed group's
    extremes."""
    for g in sorted({r["group"] for r in records}):
        rows = [r for r in records if r["group"] == g]
        hi, lo = max(rows, key=lambda r: r["advantage"]), min(rows, key=lambda r: r["advantage"])
        if hi["advantage"] != lo["advantage"]:
            return hi, lo
    return records[0], records[min(1, len(records) - 1)]


def plot_figure2(result, path, ratio=None, dpi=110):
    """Figure 2: two answers with different advantages. Left: E vs ||∇ log π|| (log-log). Middle: E
    vs the true ||∇ℓ||. Right: the distributions of ||∇ℓ|| with each answer's top-ρ boundary (its
    (1-ρ) quantile). A panel with nothing to draw says so in the panel and in one line on stderr."""
    from matplotlib.ticker import NullFormatter
    # no pyplot: no GUI backend needed, and a notebook's backend is untouched
    from matplotlib.figure import Figure
    ratio = ratio if ratio is not None else result.get("summary", {}).get("ratio", 0.2)
    pair = _pick_pair(result["answers"]) if result["answers"] else ()
    mixed = len(pair) == 2 and pair[0]["advantage"] != pair[1]["advantage"]
    fig = Figure(figsize=(15, 4.2))
    axes = fig.subplots(1, 3)
    colors = ["tab:green", "tab:red"]
    for rec, color in zip(pair, colors):
        label = f"answer {rec['answer']} (A = {rec['advantage']:+.2f})"
        e = torch.tensor(rec["entropy"], dtype=torch.float64)
        for ax, key in ((axes[0], "grad_logp_norm"), (axes[1], "grad_objective_norm")):
            y = torch.tensor(rec[key], dtype=torch.float64)
            keep = (e > 0) & (y > 0)                    # a log-log panel: positive values only
            if keep.any():
                ax.scatter(e[keep], y[keep], s=12, alpha=0.7, color=color, label=label)
        g = torch.tensor(rec["grad_objective_norm"], dtype=torch.float64)
        g = g[g > 0]
        if g.numel():
            axes[2].hist(g.log10(), bins=20, alpha=0.5, color=color, label=label)
            axes[2].axvline(float(torch.quantile(g, 1 - ratio).log10()), color=color,
                            linestyle="--")
    why_empty = ("no answer analysed" if not pair else
                 "no token has a gradient: every answer's advantage is 0 (no group with mixed "
                 "rewards)" if not mixed else "no token with E > 0 and a gradient > 0")
    panels = (("left", "E vs ||∇θ log π||", "no token with E > 0 and ||∇θ log π|| > 0"),
              ("middle", "E vs ||∇θ ℓ_t||", why_empty), ("right", "||∇θ ℓ_t|| histogram",
                                                         why_empty))
    for ax, ylabel in ((axes[0], "||∇θ log π(o_t)||"), (axes[1], "||∇θ ℓ_t|| (true gradient)")):
        if ax.has_data():                               # log axes need a positive value
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())   # narrow ranges: no clutter of labels
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.legend(fontsize=8)
        ax.set_xlabel("entropy E_t")
        ax.set_ylabel(ylabel)
    axes[0].set_title("within an answer, entropy tracks the gradient")
    axes[1].set_title("across answers, the advantage scales it")
    axes[2].set_xlabel("log10 ||∇θ ℓ_t||")
    axes[2].set_ylabel("tokens")
    axes[2].set_title(f"true gradient norms, dashed: top-{ratio:.0%} boundary")
    if axes[2].has_data():
        axes[2].legend(fontsize=8)
    for ax, (where, what, why) in zip(axes, panels):
        if not ax.has_data():
            nothing_to_draw(ax, path, f"{where} panel ({what})",
                             "no answer analysed" if not pair else why)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    return path


def nothing_to_draw(ax, path, panel, why):
    """An empty panel: the reason written in it, and one line on stderr naming the file and the
    panel."""
    ax.text(0.5, 0.5, "nothing to draw:\n" + textwrap.fill(why, 40), ha="center", va="center",
            transform=ax.transAxes, color="gray", fontsize=9)
    print(f"{path}, {panel}: nothing to draw, {why}", file=sys.stderr)


def plot_figure3(result, path, dpi=110):
    """Figure 3: per group, Pearson(log E, log ||∇ log π||) (left) and Spearman of |E·ω| and of E
    with ||∇ℓ|| (middle); the distribution of ε = 1 - p(sampled token) (right). A panel with nothing
    to draw says so in the panel and in one line on stderr."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator
    summary = result["summary"]
    groups = summary["groups"]
    fig = Figure(figsize=(15, 4.2))
    axes = fig.subplots(1, 3)
    xs = list(range(len(groups)))
    pear = [g["pearson_logE_loggrad"] for g in groups]
    if any(v is not None for v in pear):
        axes[0].bar([x for x, v in zip(xs, pear) if v is not None],
                    [v for v in pear if v is not None], color="tab:blue")
    else:
        nothing_to_draw(axes[0], path, "left panel (Pearson per group)",
                         "no group has 3 tokens with E > 0 and ||∇θ log π|| > 0")
    for ax in axes[:2]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))     # groups are whole numbers
    axes[0].set_ylim(-1, 1)
    axes[0].set_xlabel("question (group)")
    axes[0].set_ylabel("Pearson r")
    axes[0].set_title("log E vs log ||∇θ log π||, per group")
    width = 0.4
    for offset, key, color, label in (
        (-width / 2, "spearman_gmts_grad", "tab:orange", "GMTS |E·ω|"),
        (width / 2, "spearman_entropy_grad", "tab:gray", "entropy E")):
        vals = [g[key] for g in groups]
        if any(v is not None for v in vals):
            axes[1].bar([x + offset for x, v in zip(xs, vals) if v is not None],
                        [v for v in vals if v is not None], width=width, color=color, label=label)
    if axes[1].has_data():
        axes[1].legend(fontsize=8)
    else:
        nothing_to_draw(axes[1], path, "middle panel (Spearman per group)",
                         "no group with mixed rewards: no token has a gradient"
                         if groups and summary.get("groups_without_gradient") == len(groups)
                         else "no group has 3 tokens with a gradient")
    axes[1].set_ylim(-1, 1)
    axes[1].set_xlabel("question (group)")
    axes[1].set_ylabel("Spearman ρ with ||∇θ ℓ||")
    axes[1].set_title("which score ranks tokens by their true gradient")
    hist = summary["epsilon"].get("histogram")
    if hist:
        edges, counts = hist["edges"], hist["counts"]
        axes[2].bar(edges[:-1], counts, width=[b - a for a, b in itertools.pairwise(edges)],
                    align="edge", color="tab:purple")
    else:
        nothing_to_draw(axes[2], path, "right panel (ε distribution)", "no token analysed")
    axes[2].set_xlabel("ε = 1 - p(sampled token)")
    axes[2].set_ylabel("tokens")
    axes[2].set_title("ε distribution (Prop. 3.1: log G / log E -> 1 as ε -> 0)")
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    return path


def write_figures(result, output, dpi=110):
    """<output stem>_fig2.png and _fig3.png next to the JSON; [] (and a note) if matplotlib is not
    installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("gmts.tools.analyze: matplotlib not installed, no figures (pip install matplotlib)",
              file=sys.stderr)
        return []
    stem = os.path.splitext(output)[0]
    return [plot_figure2(result, stem + "_fig2.png", dpi=dpi),
            plot_figure3(result, stem + "_fig3.png", dpi=dpi)]


def main(argv=None):
    from gmts.run.config import Parser                  # a bad flag is one line, not a usage block
    parser = Parser(prog="python -m gmts.tools.plot", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="train.py output directories")
    parser.add_argument("--output", default="runs.png", help="PNG to write")
    parser.add_argument("--metrics", default="", help="comma-separated metrics.jsonl keys "
                                                      "(default: reward, accuracy, entropy, grad "
                                                      "norm, response length, overlap)")
    parser.add_argument("--smooth", type=int, default=1, help="moving-average window in steps (1 = "
                                                              "raw)")
    parser.add_argument("--title", default="", help="figure title")
    args = parser.parse_args(argv)
    if args.smooth < 1:
        parser.error(f"--smooth must be >= 1, got {args.smooth}")
    # before reading every run, not at savefig
    from gmts.run.paths import output_path_problem
    problem = output_path_problem(args.output, "file")
    if problem:
        parser.error(f"--output {args.output}: {problem}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit("error: gmts.tools.plot needs matplotlib: "
                         "pip install matplotlib") from None
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] or None
    try:
        path = plot_runs(args.runs, args.output, metrics=metrics, smooth=args.smooth,
                         title=args.title or None)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    print(f"gmts.tools.plot: {len(args.runs)} run(s) -> {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
