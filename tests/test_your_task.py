"""Your own task (docs/your_task.md): --reward functions by reference with weights and None, scored
concurrently; data sets through `datasets` (save_to_disk and hub-layout folders, hf:'s offline
error); the page's commands end to end on a tiny model."""

import asyncio
import json
import os
import pathlib
import re
import subprocess
import sys
import threading

import pytest
from conftest import run_batch, run_python

from gmts import data
from gmts import rewards
from gmts.tools.evaluate import parse_data_spec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(ROOT, "..", "shared", "data")
ENV = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")


def write(path, text):
    path.write_text(text)
    return str(path)


def jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


ROWS = [
    {"question": "Say 1", "answer": "1", "level": 2},
    {"question": "Say 2", "answer": "2"},
    {"question": "What is 3?", "answer": "3", "level": 5},
]
REWARDS = '''
import threading
calls = []

def correct(completion, answer, **fields):
    return 1.0 if completion.split()[-1:] == [answer] else 0.0

def level(completion, answer, level=None):
    """Reads an extra field of its row; None where the row has none."""
    return None if level is None else level / 10

def every_field(completion, answer, **fields):
    calls.append(dict(fields))
    return 0.0

def in_main(completion, answer, **fields):
    calls.append(threading.current_thread() is threading.main_thread())
    return 0.0
in_main.concurrent = False
'''


@pytest.fixture
def task(tmp_path):
    problems = data.load_problems(jsonl(tmp_path / "t.jsonl", ROWS))
    return problems, write(tmp_path / "my_rewards.py", REWARDS)


def test_a_custom_reward_reads_its_rows_extra_fields(task):
    problems, path = task
    assert problems[0].fields == {
        "question": "Say 1",
        "level": 2,
    }  # the answer column is the argument
    scorer = rewards.Scorer(rewards.load_rewards([f"{path}:level", f"{path}:every_field"]))
    scores = scorer.score(["x"] * 3, problems)
    assert scores.values["level"] == [0.2, None, 0.5]
    module = rewards._MODULES[os.path.abspath(path)]
    assert sorted(map(sorted, module.calls)) == [
        ["level", "question"],
        ["level", "question"],
        ["question"],
    ]


def test_weights_and_none_make_R_and_each_rewards_figures(task):
    problems, path = task
    chosen = rewards.load_rewards([f"{path}:correct", f"{path}:level"], "1,0.5")
    scores = rewards.Scorer(chosen).score(["1", "1", "so 3"], problems)
    assert scores.values == {"correct": [1.0, 0.0, 1.0], "level": [0.2, None, 0.5]}
    assert scores.total == [1.0 + 0.5 * 0.2, 0.0, 1.0 + 0.5 * 0.5]  # None adds nothing
    figures = rewards.reward_figures(scores.figures())
    assert figures["reward_level_mean"] == pytest.approx(0.35)  # over the 2 answers it applied to
    assert figures["reward_level_none"] == pytest.approx(1 / 3)
    assert figures["reward_correct_none"] == 0.0
    none_only = rewards.Scorer(rewards.load_rewards([f"{path}:level"])).score(["x"], problems[1:2])
    assert (
        none_only.total == [0.0]
        and rewards.reward_figures(none_only.figures())["reward_level_mean"] is None
    )
    with pytest.raises(ValueError, match="2 weight"):
        rewards.load_rewards([f"{path}:correct"], "1,2")


def test_a_built_in_reward_mixed_with_a_custom_one_and_a_module_spec(task, tmp_path, monkeypatch):
    problems, path = task
    package = tmp_path / "pkg_rewards"
    package.mkdir()
    write(package / "__init__.py", "")
    write(
        package / "judge.py",
        "def loud(completion, answer, question):\n    return float(question.isupper())\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    chosen = rewards.load_rewards(["gsm8k", f"{path}:level", "pkg_rewards.judge:loud"], [1, 2, 1])
    assert [r.label for r, _ in chosen] == ["gsm8k", "level", "loud"]
    scores = rewards.Scorer(chosen).score(["\\boxed{1}", "2", "the answer is 4"], problems)
    assert scores.values["gsm8k"] == [1.0, 1.0, 0.0]  # built-in: fn(completion, answer)
    assert scores.total == [1.0 + 0.4, 1.0, 1.0]
    other = write(tmp_path / "other.py", REWARDS)
    again = rewards.load_rewards([f"{path}:correct", f"{other}:correct"])
    assert [r.label for r, _ in again] == ["correct", "other_correct"]  # one name per metric


def test_without_reward_each_row_keeps_its_own_built_in_reward(tmp_path):
    """Per-row mode, scored concurrently, on real GSM8K golds (right, wrong, adversarial answers)
    and a choice row: the same values as each row's reward called one by one."""
    gold = [json.loads(line) for line
            in pathlib.Path(SHARED, "gsm8k", "test.jsonl").read_text().splitlines()][:40]
    rows = [
        {"question": g["question"], "answer": g["answer"].rsplit("####", 1)[1].strip()}
        for g in gold
    ]
    rows += [{"question": "Pick", "choices": ["x", "y"], "answer": "B"}]
    problems = data.load_problems(jsonl(tmp_path / "gold.jsonl", rows))
    right = [f"so \\boxed{{{p.answer}}}" if p.reward == "gsm8k" else "(B)" for p in problems]
    wrong = [
        f"\\boxed{{{p.answer}1}} then {p.answer}" if p.reward == "gsm8k" else "(A)"
        for p in problems
    ]
    adversarial = ["", "\x00" * 50, "\\boxed{" * 100, "9" * 5000, "\ud800", None]
    completions = (
        right + wrong + [adversarial[i % len(adversarial)] or "" for i in range(len(problems))]
    )
    everyone = problems * 3
    scorer = rewards.Scorer(workers=4)
    concurrent = scorer.score(completions, everyone).total
    one_by_one = [rewards.get_reward(p.reward)(c, p.answer) for c, p in zip(completions, everyone)]
    assert concurrent == one_by_one == scorer.score(completions, everyone, concurrent=False).total
    n = len(problems)
    assert concurrent[:n] == [1.0] * n and sum(concurrent[n : 2 * n]) == 0.0
    assert problems[-1].reward == "choice"


def test_rewards_run_concurrently_and_an_opt_out_runs_in_the_main_thread(tmp_path, task):
    problems, path = task
    barrier = threading.Barrier(4, timeout=20)
    code = "def meet(completion, answer, **fields):\n    BARRIER.wait()\n    return 1.0\n"
    write(tmp_path / "meet.py", code)
    chosen = rewards.load_rewards([f"{tmp_path / 'meet.py'}:meet"])
    rewards._MODULES[os.path.abspath(tmp_path / "meet.py")].BARRIER = barrier
    assert (
        rewards.Scorer(chosen, workers=4).score(["a"] * 4, problems[:1] * 4).total == [1.0] * 4
    )  # 4 at once
    with pytest.raises(rewards.RewardError, match="BrokenBarrierError"):
        barrier.reset()
        barrier._timeout = 0.5
        rewards.Scorer(chosen, workers=4).score(["a"] * 4, problems[:1] * 4, concurrent=False)
    in_main = rewards.load_rewards([f"{path}:in_main"])
    module = rewards._MODULES[os.path.abspath(path)]
    module.calls.clear()
    rewards.Scorer(in_main, workers=4).score(["a"] * 6, problems * 2)
    assert module.calls == [True] * 6

    write(
        tmp_path / "judge.py",
        "import asyncio\nasync def judge(completion, answer, **fields):\n"
        "    await asyncio.wait_for(GATE.wait(), 20)\n    return 0.5\n",
    )
    chosen = rewards.load_rewards([f"{tmp_path / 'judge.py'}:judge"])
    judge = rewards._MODULES[os.path.abspath(tmp_path / "judge.py")]

    class Gate:  # opens when all 5 calls are waiting at once: awaited together
        def __init__(self):
            self.n, self.event = 0, None

        async def wait(self):
            self.event = self.event or asyncio.Event()
            self.n += 1
            if self.n == 5:
                self.event.set()
            await self.event.wait()

    judge.GATE = Gate()
    assert chosen[0][0].is_async
    assert rewards.Scorer(chosen).score(["a"] * 5, problems[:1] * 5).total == [0.5] * 5


@pytest.mark.parametrize(
    "returned, message",
    [("'yes'", "returned str 'yes'"), ("float('nan')", "returned nan"), ("[1.0]", "returned list")],
)
def test_a_value_that_is_not_a_number_or_none_names_the_reward(tmp_path, task, returned, message):
    problems, _ = task
    write(tmp_path / "bad.py", f"def bad(completion, answer, **fields):\n    return {returned}\n")
    with pytest.raises(rewards.RewardError, match=re.escape(message)) as err:
        rewards.Scorer(rewards.load_rewards([f"{tmp_path / 'bad.py'}:bad"])).score(
            ["a"], problems[:1]
        )
    assert str(err.value).startswith(f"--reward {tmp_path / 'bad.py'}:bad: bad returned")


def test_numpy_and_bool_values_are_numbers(tmp_path, task):
    problems, _ = task
    write(
        tmp_path / "np_r.py",
        "import numpy as np\ndef a(c, r, **f):\n    return np.float32(0.5)\n"
        "def b(c, r, **f):\n    return True\ndef z(c, r, **f):\n    return np.array(2.0)\n",
    )
    chosen = rewards.load_rewards([f"{tmp_path / 'np_r.py'}:{n}" for n in "abz"])
    assert rewards.Scorer(chosen).score(["a"], problems[:1]).values == {
        "a": [0.5],
        "b": [1.0],
        "z": [2.0],
    }


# --------------------------------------------------------------------------------------------------
# Start-up failures: one line naming the reward, the user's traceback below, nothing written or
# deleted.

STARTUP = {
    "missing file": (
        "nothere.py:correct",
        "--reward nothere.py:correct: no such file nothere.py",
        None,
    ),
    "missing function": (
        "{r}:corect",
        "has no function 'corect' (it defines correct, every_field, in_main, level)",
        None,
    ),
    "no module": ("no_such_pkg.mod:fn", "no module named 'no_such_pkg'", None),
    "wrong signature": (
        "{bad}:one_arg",
        "one_arg(completion) must take (completion, answer, **fields)",
        None,
    ),
    "raises on the first batch": (
        "{bad}:raises",
        "raises raised IndexError: list index out of range on problem",
        "    return completion.split()[0] == answer",
    ),
    "raises on import": (
        "{broken}:f",
        "importing {broken} raised ZeroDivisionError: division by zero",
        "    1 / 0",
    ),
    "a field no row has": (
        "{bad}:wants_unit",
        "wants_unit takes the field 'unit', which problem",
        None,
    ),
    "returns a string": ("{bad}:text", "text returned str 'ok' for problem", None),
}
BAD = """
def one_arg(completion):
    return 0.0

def raises(completion, answer, **fields):
    return completion.split()[0] == answer

def wants_unit(completion, answer, unit):
    return 0.0

def text(completion, answer, **fields):
    return "ok"
"""


def test_startup_failures_are_one_line_naming_the_reward(digit_model_dir, tmp_path, task):
    _, path = task
    paths = {
        "r": path,
        "bad": write(tmp_path / "bad.py", BAD),
        "broken": write(tmp_path / "broken.py", "x = 1\n1 / 0\n"),
    }
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text(
        '{"step": 1}\n'
    )  # an earlier run that --overwrite would replace
    data_file = jsonl(tmp_path / "d.jsonl", ROWS)
    common = [
        "--model",
        digit_model_dir,
        "--data",
        data_file,
        "--steps",
        "1",
        "--prompts-per-step",
        "2",
        "--group-size",
        "2",
        "--max-new-tokens",
        "2",
        "--micro-batch-size",
        "4",
        "--device",
        "cpu",
    ]
    cases = [
        [
            "train.py",
            [*common, "--reward", spec.format(**paths), "--output-dir", str(out), "--overwrite"],
        ]
        for spec, _, _ in STARTUP.values()
    ]
    cases += [
        [
            "eval.py",
            [
                "--model",
                digit_model_dir,
                "--data",
                data_file,
                "--device",
                "cpu",
                "--quiet",
                "--max-new-tokens",
                "2",
                "--output",
                str(tmp_path / "e.json"),
                "--reward",
                spec.format(**paths),
            ],
        ]
        for spec, _, _ in STARTUP.values()
    ]
    results = run_batch(cases)
    for (name, (spec, message, user_line)), train, evaluation in zip(
        STARTUP.items(), results, results[len(STARTUP) :]
    ):
        for result in (train, evaluation):
            assert result["rc"] != 0, (name, result)
            lines = result["stderr"].strip().splitlines()
            assert lines[0].startswith(f"error: --reward {spec.format(**paths)}: "), (name, lines)
            assert message.format(**paths) in lines[0], (name, lines[0])
            if user_line:  # the user's own frames, and none of ours
                assert user_line in lines and lines[1] == "Traceback (most recent call last):", (
                    name,
                    lines,
                )
                assert not any("rewards/__init__.py" in line for line in lines), lines
            else:
                assert len(lines) == 1, (name, lines)
    assert (
        sorted(os.listdir(out)) == ["metrics.jsonl"]
        and (out / "metrics.jsonl").read_text() == '{"step": 1}\n'
    )
    assert not (tmp_path / "e.json").exists()


def test_bad_reward_weights_are_one_line():
    cases = [
        ["train.py", ["--reward", "gsm8k", "--reward-weights", "1,2"]],
        ["train.py", ["--reward-weights", "1"]],
        ["eval.py", ["--model", "x/y", "--reward", "gsm8k", "--reward-weights", "nan"]],
    ]
    messages = [
        "--reward-weights gives 2 weight(s) for 1 --reward(s)",
        "--reward-weights needs --reward",
        "--reward-weights must be finite numbers",
    ]
    for result, message in zip(run_batch(cases), messages):
        assert (
            result["rc"] == 2
            and message in result["stderr"]
            and len(result["stderr"].splitlines()) == 1
        )


# --------------------------------------------------------------------------------------------------
# Data sets through `datasets`.


def test_save_to_disk_and_hub_layout_folders_load_like_files(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [{"problem": f"Say {i}", "answer": str(i), "level": i} for i in range(5)]
    one = datasets.Dataset.from_list(rows)
    one.save_to_disk(str(tmp_path / "one"))
    datasets.DatasetDict({"train": one, "test": one.select(range(2))}).save_to_disk(
        str(tmp_path / "two")
    )
    (tmp_path / "hub" / "data").mkdir(parents=True)
    one.to_parquet(str(tmp_path / "hub" / "data" / "train-00000-of-00001.parquet"))
    one.select(range(3)).to_parquet(str(tmp_path / "hub" / "data" / "test-00000-of-00001.parquet"))
    for folder, split, n in (
        ("one", "train", 5),
        ("two", "test", 2),
        ("hub", "test", 3),
        ("hub", "train", 5),
    ):
        problems = data.load_problems(str(tmp_path / folder), split)
        assert len(problems) == n
        assert (
            problems[1].question == "Say 1"
            and problems[1].answer == "1"
            and problems[1].reward == "gsm8k"
        )
        assert problems[1].fields == {"problem": "Say 1", "level": 1, "question": "Say 1"}
        assert problems[0].id == f"{folder}/{split}/0"
    with pytest.raises(ValueError, match=r"has splits \['test', 'train'\], got split='validation'"):
        data.load_problems(str(tmp_path / "two"), "validation")
    renamed = data.load_problems(
        str(tmp_path / "one"), question_field="{problem}?", answer_field="level"
    )
    assert (
        renamed[2].question == "Say 2?"
        and renamed[2].answer == "2"
        and "level" not in renamed[2].fields
    )


def test_missing_datasets_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "d").mkdir()
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(
        ImportError,
        match="^hf:a/b is read with the `datasets` library, which is not installed: "
        "pip install datasets$",
    ):
        data.load_problems("hf:a/b")


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("hf:o/n", ("hf:o/n", "test")),
        ("hf:o/n:main", ("hf:o/n:main", "test")),
        ("hf:o/n:main:train", ("hf:o/n:main", "train")),
        ("hf:o/n::train", ("hf:o/n", "train")),
    ],
)
def test_eval_specs_of_hub_data_sets(spec, expected):
    assert parse_data_spec(spec) == expected


def test_hub_data_set_not_in_the_cache_is_one_line_offline_and_unreachable(
    digit_model_dir, tmp_path
):
    """Offline (HF_HUB_OFFLINE=1), and with the hub unreachable (a closed port; HF_HUB_OFFLINE
    unset): one line, exit != 0, for train.py --data and --eval-data and eval.py --data."""
    pytest.importorskip("datasets")
    common = ["--model", digit_model_dir, "--device", "cpu", "--output-dir", str(tmp_path / "r")]
    for env in (
        dict(ENV, HF_HOME=str(tmp_path / "hf")),
        {
            **{k: v for k, v in ENV.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")},
            "HF_HOME": str(tmp_path / "hf"),
            "HF_ENDPOINT": "http://127.0.0.1:9",
        },
    ):
        runs = [
            [sys.executable, "train.py", *common, "--data", "hf:no/such-dataset"],
            [
                sys.executable,
                "train.py",
                *common,
                "--data",
                jsonl(tmp_path / "d.jsonl", ROWS),
                "--eval-data",
                "hf:no/such-dataset:main:test",
                "--eval-every",
                "1",
            ],
            [
                sys.executable,
                "eval.py",
                "--model",
                digit_model_dir,
                "--device",
                "cpu",
                "--max-new-tokens",
                "4",
                "--data",
                "hf:no/such-dataset:main:test",
                "--output",
                str(tmp_path / "e.json"),
            ],
        ]
        for argv in runs:
            proc = subprocess.run(
                argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False
            )
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode != 0 and len(lines) == 1, proc.stderr
            assert (
                "hf:no/such-dataset" in lines[0] and "is not in the datasets cache" in lines[0]
            ), lines
            why = "downloads are off" if "HF_HUB_OFFLINE" in env else "the hub is unreachable"
            assert why in lines[0], lines
    assert not (tmp_path / "r").exists()


# --------------------------------------------------------------------------------------------------
# docs/your_task.md, end to end.


def test_the_your_task_page_runs_end_to_end(tmp_path):
    """Every ```bash block of docs/your_task.md, as written, in a folder where the repository's
    entry points are linked: a JSONL and a save_to_disk copy, the reward file, a run on the toy
    model, an evaluation and a plot."""
    pytest.importorskip("datasets")
    pytest.importorskip("matplotlib")
    page = pathlib.Path(ROOT, "docs", "your_task.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", page, flags=re.DOTALL)
    assert len(blocks) == 6
    for name in ("train.py", "eval.py", "gmts", "data", "rewards"):
        os.symlink(os.path.join(ROOT, name), tmp_path / name)
    for block in blocks:
        proc = subprocess.run(
            ["bash", "-e", "-c", block],
            cwd=tmp_path,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=600, check=False
        )
        assert proc.returncode == 0, f"{block}\n{proc.stdout}\n{proc.stderr}"
    metrics = [json.loads(line) for line
               in (tmp_path / "runs" / "my-task" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    for m in metrics:
        assert {
            "reward_correct_mean",
            "reward_correct_none",
            "reward_short_mean",
            "reward_short_none",
        } <= set(m)
        assert m["reward_correct_none"] == 0.0 and 0 <= m["reward_short_none"] <= 1
    summary = json.loads((tmp_path / "runs" / "my-task" / "eval.json").read_text())
    assert summary["rewards"] == ["my_rewards.py:correct"] and summary["n_problems"] == 6
    assert os.path.getsize(tmp_path / "my-task.png") > 1000


def test_training_logs_each_reward_and_evaluates_with_the_runs_rewards(digit_model_dir, tmp_path):
    """train.py --reward ... --eval-every: each reward's figures per step in metrics.jsonl, and the
    in-training evaluation scored by the run's rewards (an always-1 reward: accuracy 1, where the
    rows' own gsm8k reward gives the tiny model far less)."""
    path = write(tmp_path / "always.py", "def one(completion, answer, **fields):\n    return 1.0\n")
    data_file = jsonl(tmp_path / "d.jsonl", ROWS)
    argv = [sys.executable, "train.py", "--model", digit_model_dir, "--data", data_file, "--steps",
            "1", "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "2",
            "--micro-batch-size", "4", "--device", "cpu", "--reward", f"{path}:one", "--reward",
            "gsm8k", "--reward-weights", "1,0", "--eval-data", data_file, "--eval-every", "1",
            "--output-dir", str(tmp_path / "run")]
    proc = run_python(argv[1:], timeout=600)
    assert proc.returncode == 0, proc.stderr
    (m,) = [json.loads(line)
            for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert m["reward_one_mean"] == 1.0 and m["reward_one_none"] == 0.0 and m["reward_mean"] == 1.0
    assert 0.0 <= m["reward_gsm8k_mean"] < 1.0 and m["eval_accuracy"] == 1.0
    # the evaluation's own figures per reward
    assert m["eval_reward_one_mean"] == 1.0 and m["eval_reward_one_none"] == 0.0
    assert 0.0 <= m["eval_reward_gsm8k_mean"] < 1.0 and m["eval_reward_gsm8k_none"] == 0.0
