"""The teaching notebooks: committed WITH their outputs (a reader on a code host sees the numbers,
the highlighted tokens and the figures), run on the real model of `--preset cpu-demo`
(SmolLM2-135M-Instruct), and every one still runs top to bottom from scratch without an error
(nbclient, python3 kernel, CPU, offline once the model is cached).

The from-scratch run executes an in-memory copy: the committed files are never rewritten by the
tests. To refresh the committed outputs after changing the code: notebooks/README.md, "Outputs". The
tests skip, with the reason, where the notebook tools (nbformat, nbclient, ipykernel:
requirements-dev.txt) are not installed. They do NOT skip when the model cannot be had: the
notebooks are about the real model, so a missing model is a failure, with the loader's message."""
import hashlib
import os
import re
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK_DIR = os.path.join(ROOT, "notebooks")
NOTEBOOKS = sorted(f for f in os.listdir(NOTEBOOK_DIR) if f.endswith(".ipynb")) if os.path.isdir(
    NOTEBOOK_DIR) else []
MAX_BYTES = 300_000          # PNG figures at modest resolution keep a notebook well under this
# What each notebook prints once it has loaded the model: the preset's hub id and SmolLM2-135M's
# parameter count (134,515,008 with the tied head). A toy model or any other checkpoint prints
# something else.
REAL_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct: 134.5M parameters"


def _read(name):
    nbformat = pytest.importorskip("nbformat", reason="nbformat not installed (pip install "
                                                      "nbformat)")
    nb = nbformat.read(os.path.join(NOTEBOOK_DIR, name), as_version=4)
    nbformat.validate(nb)
    return nb


def _printed(nb):
    """Everything the notebook's code cells printed (stream outputs), in order."""
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type
                   == "code" for o in c.get("outputs", [])
                   if o.output_type == "stream")


def _rich(nb):
    return {k for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if o.output_type in ("display_data", "execute_result") for k in o.get("data", {})}


def _children_cpu():
    """CPU seconds (user + system) of this process's finished children: the notebook's kernel, once
    execute() has shut it down. Wall time on a shared machine mostly measures the other jobs; this
    is the notebook's own cost."""
    import resource
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _check_notebook_3_story(text):
    """What notebook 3 claims, against what it printed: the trainer's update selected the tokens
    predicted from the pure functions; every Δ log π line it promises is printed (none of them is
    skipped when a set is empty); the selected tokens moved the way their advantage's sign pushes
    them; held-out accuracy rose."""
    assert "the trainer selected exactly the predicted tokens: True" in text
    deltas = {}
    for label in ("selected, A > 0", "selected, A < 0", "not selected, A != 0",
                  "A = 0 (no gradient)"):
        m = re.search(re.escape(label) + r"\s+(\d+) tokens(?:: mean Δ log π ([-+]\d+\.\d+)| in "
                                         r"this batch)", text)
        assert m, f"notebook 3 does not print its {label!r} line"
        deltas[label] = (int(m.group(1)), None if m.group(2) is None else float(m.group(2)))
    # One AdamW step on the masked loss -Σ w A log π raises the selected tokens of A > 0 answers and
    # lowers those of A < 0 answers (first order; the step is small, lr 1e-5).
    n, d = deltas["selected, A > 0"]
    assert n == 0 or d > 0, deltas
    n, d = deltas["selected, A < 0"]
    assert n == 0 or d < 0, deltas
    accuracy = dict(
        re.findall(r"held-out accuracy (before training|after step \d+): (\d+\.\d)%", text))
    assert ("before training" in accuracy and len(accuracy) == 2), f"no before/after accuracy printed: {accuracy}"
    after = next(float(v) for k, v in accuracy.items() if k.startswith("after"))
    # Six steps of the cpu-demo preset move greedy held-out accuracy by some 30-45 points on every
    # seed measured (notebooks/README.md); "rose at all" is far inside that, and it would catch an
    # update that does nothing.
    assert after > float(accuracy["before training"]), accuracy


def test_the_three_notebooks_exist():
    assert NOTEBOOKS == ["01_entropy_and_gradient.ipynb", "02_ets_vs_gmts.ipynb",
                         "03_one_training_step.ipynb"]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebook_carries_its_outputs(name):
    nb = _read(name)
    code = [c for c in nb.cells if c.cell_type == "code"]
    # Run top to bottom in one session: execution counts 1, 2, 3, ... with no cell skipped or
    # re-run.
    assert ([c.execution_count for c in code] == list(range(1, len(code) + 1))), f"{name}: not executed top to bottom"
    outputs = [o for c in code for o in c.outputs]
    assert outputs, f"{name}: committed without outputs"
    assert (not [o for o in outputs if o.output_type == "error"]), f"{name}: committed with an error output"
    assert REAL_MODEL in _printed(nb), f"{name}: its outputs do not come from SmolLM2-135M-Instruct"
    # Something a reader can see: a figure or highlighted text.
    assert _rich(nb) & {"image/png", "text/html"}, (f"{name}: no figure or highlighted text among "
                                                    "the outputs")
    size = os.path.getsize(os.path.join(NOTEBOOK_DIR, name))
    assert size < MAX_BYTES, f"{name}: {size} bytes; lower the figures' dpi/size"


def test_committed_notebook_2_highlights_both_selections():
    nb = _read("02_ets_vs_gmts.ipynb")
    html = "".join(o["data"]["text/html"] for c in nb.cells if c.cell_type
                   == "code" for o in c.outputs
                   if "text/html" in o.get("data", {}))
    # ETS only, GMTS only, both: all three occur
    for color in ("#9cc3ff", "#ffc27a", "#9be39b"):
        # a token's span carries its entropy as a title; the legend's spans do not
        assert re.search(f'<span title="E=[^"]*" style="background:{color}">', html), f"no token highlighted {color}"


def test_committed_notebook_3_steps_the_trainer_and_learns():
    nb = _read("03_one_training_step.ipynb")
    source = "".join(c.source for c in nb.cells if c.cell_type == "code")
    # The trainer's own functions, not a copy of them.
    for call in ("train.collect_batch(", "train.update_policy(", "train.train_step("):
        assert call in source, f"notebook 3 no longer calls {call}"
    _check_notebook_3_story(_printed(nb))
    last_code = [c for c in nb.cells if c.cell_type == "code"][-1]
    assert any("image/png" in o.get("data", {}) for o in last_code.outputs), "the learning figure is missing"


@pytest.fixture(scope="module")
def real_model():
    """The notebooks' model, fetched (or found cached) BEFORE any notebook runs: a failure here
    names the cause once, instead of as a traceback inside each notebook. No skip: the notebooks
    exist to show this model."""
    from gmts.trainer import smollm2
    try:
        return smollm2.source(smollm2.HUB_ID)
    except SystemExit as err:
        pytest.fail(f"the notebooks' model {smollm2.HUB_ID} cannot be loaded (neither the hub nor "
                    f"the PyPI wheel {smollm2.WHEEL}): {err}")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_top_to_bottom(name, real_model, monkeypatch, capsys):
    nbformat = pytest.importorskip("nbformat", reason="nbformat not installed (pip install "
                                                      "nbformat)")
    nbclient = pytest.importorskip("nbclient", reason="nbclient not installed (pip install "
                                                      "nbclient ipykernel)")
    pytest.importorskip("ipykernel", reason="ipykernel not installed (pip install ipykernel)")
    # The kernel is a child process: it inherits these (offline, and one thread per op on a shared
    # 2-core machine).
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # no display; notebooks/_setup.py still draws figures inline
    monkeypatch.setenv("MPLBACKEND", "Agg")
    path = os.path.join(NOTEBOOK_DIR, name)
    with open(path, "rb") as fh:
        committed = hashlib.sha256(fh.read()).hexdigest()
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:                      # from scratch: drop the committed outputs first
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": NOTEBOOK_DIR}})
    t0, cpu0 = time.time(), _children_cpu()
    try:
        # raises CellExecutionError (with the cell and traceback) if any cell errors
        client.execute()
    except nbclient.exceptions.CellExecutionError as err:
        pytest.fail(f"{name}: a cell failed:\n{err}")
    with capsys.disabled():    # the run time, for notebooks/README.md (measured, never asserted)
        print(f"\n{name}: executed from scratch in {time.time() - t0:.0f} s wall, "
              f"{_children_cpu() - cpu0:.0f} s CPU of its kernel")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.output_type == "error"]
    assert not errors
    text = _printed(nb)
    assert REAL_MODEL in text, f"{name}: did not run on SmolLM2-135M-Instruct"
    assert _rich(nb) & {"image/png", "text/html"}, f"{name}: drew no figure and no highlighted text"
    if name.startswith("03_"):
        _check_notebook_3_story(text)
    with open(path, "rb") as fh:
        assert (hashlib.sha256(fh.read()).hexdigest() == committed), f"{name}: the test rewrote the committed file"
