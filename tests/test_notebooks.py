"""The teaching notebooks: committed WITH their outputs (a reader on a code host sees the numbers and figures), and
every one still runs top to bottom from scratch without an error (nbclient, python3 kernel, CPU, offline).

The from-scratch run executes an in-memory copy: the committed files are never rewritten by the tests. To refresh
the committed outputs after changing the code: notebooks/README.md, "Outputs". Skips (with the reason) where the
optional notebook tools are not installed."""
import hashlib
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK_DIR = os.path.join(ROOT, "notebooks")
NOTEBOOKS = sorted(f for f in os.listdir(NOTEBOOK_DIR) if f.endswith(".ipynb")) if os.path.isdir(NOTEBOOK_DIR) else []
MAX_BYTES = 300_000          # PNG figures at modest resolution keep a notebook well under this


def _read(name):
    nbformat = pytest.importorskip("nbformat", reason="nbformat not installed (pip install nbformat)")
    nb = nbformat.read(os.path.join(NOTEBOOK_DIR, name), as_version=4)
    nbformat.validate(nb)
    return nb


def test_the_three_notebooks_exist():
    assert NOTEBOOKS == ["01_entropy_and_gradient.ipynb", "02_ets_vs_gmts.ipynb", "03_one_training_step.ipynb"]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebook_carries_its_outputs(name):
    nb = _read(name)
    code = [c for c in nb.cells if c.cell_type == "code"]
    # Run top to bottom in one session: execution counts 1, 2, 3, ... with no cell skipped or re-run.
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), f"{name}: not executed top to bottom"
    outputs = [o for c in code for o in c.outputs]
    assert outputs, f"{name}: committed without outputs"
    assert not [o for o in outputs if o.output_type == "error"], f"{name}: committed with an error output"
    # Something a reader can see: printed numbers, and a figure or highlighted text.
    assert any(o.output_type == "stream" and o.text.strip() for o in outputs), f"{name}: no printed output"
    rich = {k for o in outputs if o.output_type in ("display_data", "execute_result") for k in o.get("data", {})}
    assert rich & {"image/png", "text/html"}, f"{name}: no figure or highlighted text among the outputs"
    size = os.path.getsize(os.path.join(NOTEBOOK_DIR, name))
    assert size < MAX_BYTES, f"{name}: {size} bytes; lower the figures' dpi/size"


def test_notebook_3_ends_with_a_learning_curve_per_selector():
    nb = _read("03_one_training_step.ipynb")
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    for arm in ("none", "ets", "gmts"):
        assert f"{arm:>5}: 40 steps" in text, f"no 40-step run of {arm} in the committed outputs"
    last_code = [c for c in nb.cells if c.cell_type == "code"][-1]
    assert any("image/png" in o.get("data", {}) for o in last_code.outputs), "the learning curve figure is missing"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_top_to_bottom(name, monkeypatch):
    nbformat = pytest.importorskip("nbformat", reason="nbformat not installed (pip install nbformat)")
    nbclient = pytest.importorskip("nbclient", reason="nbclient not installed (pip install nbclient ipykernel)")
    pytest.importorskip("ipykernel", reason="ipykernel not installed (pip install ipykernel)")
    # The kernel is a child process: it inherits these (offline, and one thread per op on a shared 2-core machine).
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
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
    try:
        client.execute()       # raises CellExecutionError (with the cell and traceback) if any cell errors
    except nbclient.exceptions.CellExecutionError as err:
        pytest.fail(f"{name}: a cell failed:\n{err}")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code")   # it really ran
    with open(path, "rb") as fh:
        assert hashlib.sha256(fh.read()).hexdigest() == committed, f"{name}: the test rewrote the committed file"
