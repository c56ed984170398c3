"""The project's width and length limits, on every tracked file they apply to.

ruff (pyproject.toml, run by .ci/run) checks Python lines at 100 columns, but E501 exempts a line
whose excess is a pragma comment (`# noqa: ...` and what follows it) or a single word; neither
exemption applies to a reader's screen. This test holds every line of code to 100 characters:
Python files, the notebooks' code cells, the CI script and the configuration files. Markdown prose
and tables are not code and are left out; the README's own limit is its number of lines.
"""
import json
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDTH = 100                 # pyproject.toml, [tool.ruff] line-length
README_LINES = 250
CODE = (".py", ".ipynb", ".toml", ".txt", ".ini", ".cfg", ".sh")


def tracked_files():
    """The repository's tracked files (relative paths), from git."""
    if shutil.which("git") is None or not os.path.exists(os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [p for p in out.stdout.decode().split("\0") if p]


def code_lines(path):
    """(line number, text) of a file's code: a notebook's code cells (numbered across them), else
    every line."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        if not path.endswith(".ipynb"):
            return list(enumerate(f.read().splitlines(), 1))
        cells = json.load(f)["cells"]
    source = [line.rstrip("\n") for cell in cells if cell["cell_type"] == "code"
              for line in (cell["source"] if isinstance(cell["source"], list)
                           else cell["source"].splitlines())]
    return list(enumerate(source, 1))


def test_every_code_line_is_at_most_100_characters():
    files = [p for p in tracked_files() if p.endswith(CODE) or p.startswith(".ci/")]
    assert "train.py" in files and ".ci/run" in files and any(p.endswith(".ipynb") for p in files)
    long = [f"{path}:{i}: {len(text)} characters" for path in files
            for i, text in code_lines(path) if len(text) > WIDTH]
    assert not long, "\n".join(long)


def test_the_width_is_ruffs_and_the_readme_fits_its_length():
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        assert f"line-length = {WIDTH}\n" in f.read()
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        n = len(f.read().splitlines())
    assert n <= README_LINES, f"README.md has {n} lines, more than {README_LINES}"


def test_the_readme_names_no_developers_folder():
    """A newcomer's clone has no ../shared: the README points at GMTS_TEST_DATA, not at it."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    assert "../shared" not in text and "shared/data" not in text
