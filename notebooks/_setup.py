"""The notebooks' shared set-up: `from _setup import *` in their first cell.

Puts the repository on sys.path (the notebooks live in notebooks/, Jupyter starts their kernel there), stays offline,
uses one torch thread (tiny models; polite on a shared machine), prints tensors briefly, and draws figures as small
PNGs so that a notebook committed with its outputs stays small. Exports torch, gmts, math, os, ROOT and plt
(None when matplotlib is not installed: the notebooks then run without figures).
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
    matplotlib.rcParams.update({"figure.dpi": 72, "savefig.dpi": 72, "figure.figsize": (5, 3.2)})
except ImportError:
    plt = None

__all__ = ["math", "os", "torch", "gmts", "plt", "ROOT"]
