"""The installed package: after `pip install`, the tools that read data sets and score answers work
from another folder (issue 31, kind 6), also one that holds a user's own `data/` package and
`rewards.py` (issue 56: data/ and rewards/ install as gmts.data and gmts.rewards, never as top-level
names a user's files shadow). The wheel is built from a copy of the packaging files (the worktree
gets no build/ or .egg-info), installed with --target into a throwaway folder, and run with only
that folder and the environment's site-packages on sys.path. From a clone the same holds with the
clone on PYTHONPATH.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import zipfile

from conftest import ENV, ROOT

SHIPPED = ("gmts", "data", "rewards")


def _users_folder(path):
    """A folder as a user has it: their own `data` package (data files and an __init__.py) and
    `rewards.py`, the names the project's folders have in the repository."""
    (path / "data").mkdir(parents=True)
    (path / "data" / "__init__.py").write_text("OWN = 'the user data package'\n")
    (path / "data" / "train.jsonl").write_text('{"question": "Say 1", "answer": "1"}\n')
    (path / "rewards.py").write_text("def correct(completion, answer):\n    return 1.0\n")
    return path


def _analyze(folder, env, model, problems):
    """python -m gmts.tools.analyze from `folder`, where `python -m` puts the folder first on
    sys.path."""
    out = folder / "analysis.json"
    proc = subprocess.run(
        [sys.executable, "-m", "gmts.tools.analyze", "--model", model, "--data", problems,
         "--prompts", "1", "--group-size", "4", "--max-new-tokens", "3", "--no-plots",
         "--no-progress", "--device", "cpu", "--output", str(out)],
        cwd=folder, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


WHERE = ("import gmts, gmts.data, gmts.rewards, data, rewards; "
         "print(gmts.__file__, gmts.data.__file__, gmts.rewards.__file__); "
         "print(data.OWN, rewards.correct('', '')); "
         "print(gmts.rewards.get_reward('gsm8k')('The answer is 4', '4'))")


def test_the_wheel_ships_data_and_rewards_under_gmts_and_the_tools_run_from_a_users_folder(
        digit_model_dir, digit_data, tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", *SHIPPED):
        copy = shutil.copytree if os.path.isdir(os.path.join(ROOT, name)) else shutil.copy
        copy(os.path.join(ROOT, name), source / name)
    env = dict(ENV, PYTHONPATH="", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
         str(tmp_path / "wheel"), str(source)], env=env, capture_output=True, text=True,
        check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = glob.glob(str(tmp_path / "wheel" / "*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for module in ("gmts/data/__init__.py", "gmts/data/files.py", "gmts/data/README.md",
                   "gmts/rewards/__init__.py", "gmts/rewards/math.py",
                   "gmts/rewards/_math_worker.py", "gmts/rewards/_sandbox_child.py",
                   "gmts/rewards/README.md", "gmts/tools/analyze.py", "gmts/METHOD.md"):
        assert module in names, module
    # every package of the source tree, and no top-level name but gmts
    packages = {os.path.dirname(n) for n in names if n.endswith("/__init__.py")}
    on_disk = {os.path.relpath(d, ROOT) for d, _, files in os.walk(os.path.join(ROOT, "gmts"))
               if "__init__.py" in files}
    assert packages == on_disk | {"gmts/data", "gmts/rewards"}, packages
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"gmts"}
    target = tmp_path / "installed"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         wheel], env=env, capture_output=True, text=True, check=False)
    assert installed.returncode == 0, installed.stderr[-3000:]
    elsewhere = _users_folder(tmp_path / "elsewhere")
    run_env = dict(ENV, PYTHONPATH=str(target))
    where = subprocess.run([sys.executable, "-c", WHERE], cwd=elsewhere, env=run_env,
                           capture_output=True, text=True, check=False)
    assert where.returncode == 0, where.stderr[-3000:]
    files, own, score = where.stdout.split("\n")[:3]
    # the installed copies, not the worktree; the user's own names stay the user's
    assert all(f.startswith(str(target)) for f in files.split()), files
    assert own == "the user data package 1.0" and float(score) == 1.0
    result = _analyze(elsewhere, run_env, digit_model_dir, digit_data)
    assert len(result["answers"]) == 4


def test_from_a_clone_the_tools_run_from_a_users_folder(digit_model_dir, digit_data, tmp_path):
    """The clone on PYTHONPATH and the working folder first on sys.path (`python -m`), as after
    `pip install -e .`: gmts.data and gmts.rewards are the clone's folders, the user's `data` and
    `rewards` are the user's, and analyze (which reads data and scores answers) runs."""
    folder = _users_folder(tmp_path / "mine")
    env = dict(ENV, PYTHONPATH=ROOT)
    where = subprocess.run([sys.executable, "-c", WHERE], cwd=folder, env=env,
                           capture_output=True, text=True, check=False)
    assert where.returncode == 0, where.stderr[-3000:]
    files, own, _ = where.stdout.split("\n")[:3]
    assert files.split() == [os.path.join(ROOT, "gmts", "__init__.py"),
                             os.path.join(ROOT, "data", "__init__.py"),
                             os.path.join(ROOT, "rewards", "__init__.py")], files
    assert own == "the user data package 1.0"
    result = _analyze(folder, env, digit_model_dir, digit_data)
    assert [a["group"] for a in result["answers"]] == [0] * 4


def test_no_project_file_imports_data_or_rewards_by_their_top_level_names():
    """Everything the project runs imports gmts.data / gmts.rewards: a top-level `import data` is
    the user's folder wherever the user's files come first on sys.path. (rewards/_judge_worker.py
    runs isolated, `python -I`, with the path it is given: its `rewards` is the project's.)"""
    import re
    pattern = re.compile(r"^\s*(import (data|rewards)\b|from (data|rewards)(\.\w+)* import )",
                         re.MULTILINE)
    offenders = []
    for top in ("gmts", "data", "rewards", "bench", "tests", "notebooks", "train.py", "eval.py"):
        for path in glob.glob(os.path.join(ROOT, top, "**", "*.py"), recursive=True) + (
                [os.path.join(ROOT, top)] if top.endswith(".py") else []):
            if path.endswith(os.path.join("rewards", "_judge_worker.py")):
                continue
            with open(path, encoding="utf-8") as fh:
                if pattern.search(fh.read()):
                    offenders.append(os.path.relpath(path, ROOT))
    assert offenders == [], offenders
