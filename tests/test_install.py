"""The installed package: after `pip install`, the tools that read data sets and score answers work
from another folder (issue 31, kind 6). The wheel is built from a copy of the packaging files (the
worktree gets no build/ or .egg-info), installed with --target into a throwaway folder, and run with
only that folder and the environment's site-packages on sys.path, from a folder that holds no
project files.
"""
import glob
import os
import shutil
import subprocess
import sys
import zipfile

from conftest import ENV, ROOT

SHIPPED = ("gmts", "data", "rewards")


def test_the_wheel_ships_data_and_rewards_and_the_tools_run_from_another_folder(
    digit_model_dir, digit_data,
                                                                                tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", *SHIPPED):
        copy = shutil.copytree if os.path.isdir(os.path.join(ROOT, name)) else shutil.copy
        copy(os.path.join(ROOT, name), source / name)
    env = dict(ENV, PYTHONPATH="", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                            str(tmp_path / "wheel"), str(source)], env=env, capture_output=True,
                            text=True, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = glob.glob(str(tmp_path / "wheel" / "*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for module in ("data/__init__.py", "data/files.py", "rewards/__init__.py", "rewards/math.py",
                   "rewards/_math_worker.py", "rewards/_sandbox_child.py", "gmts/tools/analyze.py"):
        assert module in names, module
    target = tmp_path / "installed"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                                wheel], env=env, capture_output=True, text=True, check=False)
    assert installed.returncode == 0, installed.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_env = dict(ENV, PYTHONPATH=str(target))
    where = subprocess.run([sys.executable, "-c", ("import data, gmts, rewards; "
                                                   "print(gmts.__file__, data.__file__, "
                             "rewards.__file__); print(rewards.get_reward('gsm8k')('The answer is "
                             "4', '4'))")],
                           cwd=elsewhere, env=run_env, capture_output=True, text=True, check=False)
    assert where.returncode == 0, where.stderr[-3000:]
    files, score = where.stdout.split("\n")[:2]
    # the installed copies, not the worktree
    assert all(f.startswith(str(target)) for f in files.split()), files
    assert float(score) == 1.0
    out = elsewhere / "analysis.json"
    analyze = subprocess.run(
        [sys.executable, "-m", "gmts.tools.analyze", "--model", digit_model_dir, "--data",
                              digit_data, "--prompts", "1", "--group-size", "4", "--max-new-tokens",
         "3",
                              "--no-plots", "--no-progress", "--device", "cpu", "--output",
         str(out)],
                             cwd=elsewhere, env=run_env, capture_output=True, text=True,
                             check=False)
    assert analyze.returncode == 0, analyze.stderr[-3000:]
    assert out.is_file()
