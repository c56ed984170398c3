"""The stability map's figure: held-out accuracy against the learning rate, one line per arm, and
the update diagnostics (n_eff, the gradient-noise ratio η) against the learning rate
(gmts/METHOD.md, "How concentrated an update is"). Drawn by bench/learning_check.py for every sweep;
also on its own from a results file:

    python bench/lr_map_figure.py bench/results/lr_map.json        # -> bench/results/lr_map_map.png

matplotlib is optional (as in gmts/tools/plot.py, whose style this follows): without it nothing is
drawn and the tables stay the results.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# One colour per arm, the same in every panel (ETS and its exclude variant share a hue, the variant
# dashed).
COLOURS = {"none": "#4c4c4c", "ets": "#1f77b4", "ets-exclude": "#1f77b4", "gmts": "#d62728",
           "random": "#2ca02c"}
DASHED = {"ets-exclude"}


def plot_map(analysis, path, title=""):
    """analysis: bench/learning_check.py's analysis (or the results JSON). Writes `path` (PNG) and
    returns it, or returns None when matplotlib is missing. Panels: the mean accuracy over seeds
    with its 95% interval (over seeds and problems where the analysis has it, else over problems;
    diverged cells as open markers, the base's interval as a band); the divergence rate with its
    Wilson 95% interval; n_eff; η when any run logged it."""
    try:
        import matplotlib
        matplotlib.use("Agg")                                   # files only: no display on a server
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    from gmts.tools.plot import nothing_to_draw
    cells = analysis.get("arms", {})
    lrs = sorted(cells, key=float)
    arms = []
    for lr in lrs:
        arms += [a for a in cells[lr] if a not in arms]
    noise = any(cells[lr][a].get("grad_noise_ratio_median") is
                not None for lr in lrs for a in cells[lr])
    rates = any("intervals" in cells[lr][a] for lr in lrs for a in cells[lr])
    panels = 2 + noise + rates
    fig, axes = plt.subplots(1, panels, figsize=(4.6 * panels, 3.8), dpi=110)
    ax_rate = axes[1] if rates else None
    ax_neff, ax_eta = axes[1 + rates], (axes[2 + rates] if noise else None)
    base = analysis.get("base")
    if base:
        lo, hi = base["ci95"]
        axes[0].axhspan(100 * lo, 100 * hi, color="#bbbbbb", alpha=0.35, lw=0,
                        label="base (95% CI)")
    for k, arm in enumerate(arms):
        style = {"color": COLOURS.get(arm, None), "ls": "--" if arm in DASHED else "-"}
        at = [lr for lr in lrs if arm in cells[lr]]
        # arms side by side around each rate (4% apart on the log axis), so equal values and
        # intervals stay visible
        x = [float(lr) * 1.04 ** (k - (len(arms) - 1) / 2) for lr in at]
        # accuracy with its interval; a cell where any seed diverged is drawn open, one without
        # accuracy is left out
        acc = [(xv, cells[lr][arm]) for xv,
               lr in zip(x, at) if cells[lr][arm].get("accuracy") is not None]
        if acc:
            xs = [a for a, _ in acc]
            ys = [100 * e["accuracy"] for _, e in acc]
            bands = [e.get("intervals", {}).get("accuracy_seeds_problems95") or e.get("ci95") or
                     [e["accuracy"]] * 2 for _, e in acc]
            err = [[100 * (e["accuracy"] - b[0]) for (_, e), b in zip(acc, bands)],
                   [100 * (b[1] - e["accuracy"]) for (_, e), b in zip(acc, bands)]]
            axes[0].errorbar(xs, ys, yerr=err, capsize=3, lw=1.5, label=arm, **style)
            for xv, yv, (_, e) in zip(xs, ys, acc):
                axes[0].plot(xv, yv, "o", ms=6, color=style["color"],
                             mfc="white" if e.get("n_diverged") else style["color"])
        div = [(xv, cells[lr][arm]["intervals"]) for xv, lr in zip(x, at)
               if "intervals" in cells[lr][arm]]
        if rates and div:
            ys = [100 * iv["rate"] for _, iv in div]
            err = [[100 * (iv["rate"] - iv["wilson95"][0]) for _, iv in div],
                   [100 * (iv["wilson95"][1] - iv["rate"]) for _, iv in div]]
            ax_rate.errorbar([a for a, _ in div], ys, yerr=err, capsize=3, lw=1.5, marker="o",
                             label=arm, **style)
        n_eff = [cells[lr][arm].get("update_answers_effective_mean") for lr in at]
        if any(v is not None for v in n_eff):
            ax_neff.plot([a for a, v in zip(x, n_eff) if v is not None],
                         [v for v in n_eff if v is not None],
                         marker="o", lw=1.5, label=arm, **style)
        if noise:
            eta = [cells[lr][arm].get("grad_noise_ratio_median") for lr in at]
            keep = [(a, v) for a, v in zip(x, eta) if v is not None and v != float("inf")]
            if keep:
                ax_eta.plot(*zip(*keep), marker="o", lw=1.5, label=arm, **style)
    labels = [("held-out accuracy (%)", "mean over seeds, 95% CI; open: a seed diverged")] + (
        [("runs diverged (%)", "divergence rate, Wilson 95% CI")] if rates else []) + [
        ("n_eff (answers per update)", "effective answers per update"),
        ("η = ‖g_a − g_b‖² / ‖g_a + g_b‖²", "gradient noise between halves"
         + ("\n(some runs summed in float32: about 1% low)" if any(
             e.get("grad_noise_float32_runs") for arms in cells.values() for e in arms.values())
            else ""))]
    for ax, (ylabel, heading) in zip(axes, labels):
        ax.set_xscale("log")
        ax.set_xticks([float(lr) for lr in lrs])
        ax.set_xticklabels(lrs, fontsize=8)
        ax.minorticks_off()
        ax.set_xlabel("learning rate")
        ax.set_ylabel(ylabel)
        ax.set_title(heading, fontsize=10)
        ax.grid(alpha=0.3)
        if not ax.has_data():
            nothing_to_draw(ax, path, f"panel {ylabel!r}", "no arm has a value at any rate")
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize=8, loc="best")
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


if __name__ == "__main__":
    if sys.argv[1:] in (["-h"], ["--help"]):
        sys.exit(print(__doc__.strip()))
    if len(sys.argv) != 2 or not sys.argv[1].endswith(".json"):
        sys.exit("usage: python bench/lr_map_figure.py RESULTS.json   (bench/learning_check.py's "
                 "output)")
    with open(sys.argv[1]) as fh:
        results = json.load(fh)
    out = plot_map(results, sys.argv[1][:-len(".json")] + "_map.png",
                   title=results.get("meta", {}).get("model_name", ""))
    print(out or "matplotlib is not installed: nothing drawn")
