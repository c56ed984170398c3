"""Every teaching notebook runs top to bottom without an error (nbclient, python3 kernel, CPU, offline), and is
committed with its outputs stripped. Skips (with the reason) where the optional notebook tools are not installed."""
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK_DIR = os.path.join(ROOT, "notebooks")
NOTEBOOKS = sorted(f for f in os.listdir(NOTEBOOK_DIR) if f.endswith(".ipynb")) if os.path.isdir(NOTEBOOK_DIR) else []


def test_the_three_notebooks_exist_with_outputs_stripped():
    nbformat = pytest.importorskip("nbformat", reason="nbformat not installed (pip install nbformat)")
    assert NOTEBOOKS == ["01_entropy_and_gradient.ipynb", "02_ets_vs_gmts.ipynb", "03_one_training_step.ipynb"]
    for name in NOTEBOOKS:
        nb = nbformat.read(os.path.join(NOTEBOOK_DIR, name), as_version=4)
        nbformat.validate(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{name}: outputs not stripped"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_top_to_bottom(name, monkeypatch):
    nbformat = pytest.importorskip("nbformat", reason="nbformat not installed (pip install nbformat)")
    nbclient = pytest.importorskip("nbclient", reason="nbclient not installed (pip install nbclient ipykernel)")
    pytest.importorskip("ipykernel", reason="ipykernel not installed (pip install ipykernel)")
    # The kernel is a child process: it inherits these (offline, and one thread per op on a shared 2-core machine).
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(os.path.join(NOTEBOOK_DIR, name), as_version=4)
    client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                                     resources={"metadata": {"path": NOTEBOOK_DIR}})
    try:
        client.execute()       # raises CellExecutionError (with the cell and traceback) if any cell errors
    except nbclient.exceptions.CellExecutionError as err:
        pytest.fail(f"{name}: a cell failed:\n{err}")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code")   # it really ran
