"""What a newcomer sees in the first hour: every long phase shows progress, an unreachable hub is
one line that says which folder to pass, --help explains and names one default per option, the
printed figures say what they are."""
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import ENV, ROOT, run_python


def test_the_in_training_evaluations_show_progress_and_print_once(
    digit_model_dir, digit_data, tmp_path, capsys):
    import train
    train.main(
        ["--model", digit_model_dir, "--data", str(digit_data), "--steps", "2",
         "--prompts-per-step", "2",
                "--group-size", "4", "--max-new-tokens", "3", "--micro-batch-size", "4", "--device",
         "cpu",
                "--output-dir", str(tmp_path / "run"), "--eval-before", "--eval-every", "1",
                "--eval-data", "arithmetic:test", "--eval-limit", "3"])
    captured = capsys.readouterr()
    # each evaluation has its bar, named, counting the problems it has answered
    for label in ("eval before training", "eval after step 1", "eval after step 2"):
        assert re.search(re.escape(label) + r":\s+\d+%.*\| \d/3 \[", captured.err), (
            label, captured.err[-2000:])
    # the save says what it is doing
    assert "writing checkpoint step-2" in captured.err
    out = captured.out.splitlines()
    assert sum("held-out accuracy before training:" in line for line in out) == 1, out
    assert sum("held-out accuracy after step 2:" in line for line in out) == 1, out
    final = out[-1]
    assert re.search(r"2 steps in [\d.]+s wall time \(from the end of loading: [\d.]+s of it "
                     r"evaluating, [\d.]+s writing checkpoints\)", final), final
    # one seconds-per-step figure on the bar (tqdm's own rate would average the evaluations in)
    assert "s/step" not in captured.err and "s_per_step=" in captured.err
    # the .lock a clean exit leaves (removing it could give a folder two owners) says what it is
    lock = (tmp_path / "run" / ".lock").read_text().splitlines()
    assert (lock[0] == f"pid {os.getpid()} on {__import__('socket').gethostname()}"
            and "means nothing" in lock[1])


def bar_lines(stream):
    """What a log shows of the bars written to `stream`: every redraw as a line of its own."""
    return [line for line in re.split(r"[\r\n]", stream) if line]


def bar_state(line):
    """A bar's line without its times and rate: its name, count and figures."""
    return re.sub(r"\[[^,\]]*(, [\d.?]+\w+/s)?", "[", line)


def repeated_states(lines):
    """Lines that write a bar's state (name, count, figures) again with nothing changed since that
    bar's previous line."""
    last, repeats = {}, []
    for line in filter(re.compile(r"(train|eval)\b[^:]*: ").match, lines):
        bar = line.split(":")[0]
        if last.get(bar) == bar_state(line):
            repeats.append(line)
        last[bar] = bar_state(line)
    return repeats


def test_in_a_log_every_bar_writes_each_state_once(digit_model_dir, digit_data, tmp_path, capsys,
                                                  monkeypatch):
    """In a log file every redraw of a bar stays as a line: the training bar is not written again
    after the last evaluation, no bar's last line twice, no line of spaces where a terminal would
    clear a bar, for every long phase's bar (train.py's, each evaluation's, eval.py's). A clock
    that moves 2 s per reading makes every update draw, as the steps of a long run do."""
    import itertools
    import torch
    import tqdm.std
    import train
    from gmts.tools.evaluate import evaluate_model
    from gmts.trainer.models import load_model, load_tokenizer
    clock = itertools.count(0.0, 2.0)
    monkeypatch.setattr(tqdm.std, "time", lambda: next(clock))
    train.main(["--model", digit_model_dir, "--data", str(digit_data), "--steps", "2",
                "--prompts-per-step", "2", "--group-size", "4", "--max-new-tokens", "3",
                "--micro-batch-size", "4", "--device", "cpu", "--output-dir", str(tmp_path / "run"),
                "--eval-before", "--eval-every", "1", "--eval-data", "arithmetic:test",
                "--eval-limit", "3"])
    lines = bar_lines(capsys.readouterr().err)
    assert not [line for line in lines if not line.strip()], lines
    assert not repeated_states(lines), (repeated_states(lines), lines)
    # each bar's last line once: training at 2/2, each evaluation at 3/3
    assert sum(bool(re.match(r"train:\s+100%.*\| 2/2 ", line)) for line in lines) == 1, lines
    for label in ("eval before training", "eval after step 1", "eval after step 2"):
        assert sum(line.startswith(f"{label}: 100%") for line in lines) == 1, (label, lines)
    # after the last evaluation the training bar says only that step 2 is done and saved
    last_eval = max(i for i, line in enumerate(lines) if line.startswith("eval after step 2"))
    after = [line for line in lines[last_eval + 1:] if line.startswith("train")]
    assert after and all("| 2/2 " in line for line in after), lines[last_eval:]
    # eval.py's bar (leave=True): its last line once
    model = load_model(digit_model_dir, dtype=torch.float32, device="cpu")
    evaluate_model(model, load_tokenizer(digit_model_dir), "arithmetic:test", limit=3,
                   max_new_tokens=3, batch_size=1, progress=True)
    lines = bar_lines(capsys.readouterr().err)
    assert not [line for line in lines if not line.strip()] and not repeated_states(lines), lines
    assert sum(line.startswith("eval: 100%") for line in lines) == 1, lines


def entry_points():
    """Every command a user runs: train.py, eval.py, and each file of bench/ and gmts/tools/ that
    runs as a script."""
    found = ["train.py", "eval.py"]
    for folder, as_module in (("bench", False), (os.path.join("gmts", "tools"), True)):
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            path = os.path.join(folder, name)
            source = pathlib.Path(ROOT, path).read_text() if name.endswith(".py") else ""
            if '__name__ == "__main__"' in source:
                found.append(f"-m gmts.tools.{name[:-3]}" if as_module else path)
    return found


# Runs each entry point's --help in one interpreter (one torch import for all): {command: [exit
# status, stdout]}.
HELP_CHILD = """
import contextlib, io, json, runpy, sys
commands, out = sys.argv[1:], {}
for command in commands:
    sys.argv, text, code = [command.split()[-1], "--help"], io.StringIO(), 0
    with contextlib.redirect_stdout(text):
        try:
            if command.startswith("-m "):
                runpy.run_module(command[3:], run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(command, run_name="__main__")
        except SystemExit as err:
            code = err.code
    out[command] = [code, text.getvalue()]
print(json.dumps(out))
"""


def test_every_option_of_every_entry_point_names_one_default():
    commands = entry_points()
    assert {"train.py", "eval.py", "-m gmts.tools.memory", "bench/learning_check.py",
            "bench/gpu_check.py"} <= set(commands)
    proc = run_python(["-c", HELP_CHILD, *commands], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    helps = json.loads(proc.stdout.splitlines()[-1])
    for script, (code, text) in helps.items():
        assert code in (0, None) and text.strip(), (script, code, text[-500:])
        if "options:" not in text:         # a script of positional arguments: its docstring
            assert len(text.strip().splitlines()) > 3, (script, text)
            continue
        head = text.split("options:")[0]
        # the first screen explains: a description of more than a line, not only a synopsis of
        # bracketed flags
        assert len(head.splitlines()) <= 30 and len(re.findall(r"\[--", head)) <= 3, (script, head)
        assert "None" not in text, script
        options = [o for o in re.split(r"\n  (?=-)", text.split("options:", 1)[1]) if o.strip()]
        assert options, script
        for option in options:
            name = option.split()[0].rstrip(",")
            if name in ("-h", "--print-config"):                 # commands, not settings
                continue
            n = len(re.findall(r"\bdefault\b", option))
            assert n == 1, f"{script} {name}: {n} defaults in {' '.join(option.split())!r}"


@pytest.fixture(scope="module")
def unreachable_hub(tmp_path_factory):
    """The environment of a machine where the hub cannot be reached: HF_HUB_OFFLINE NOT set, the
    endpoint a local port where nothing listens (connection refused), an empty hub cache."""
    env = {k: v for k, v in ENV.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path_factory.mktemp("hf-home")))
    return env


@pytest.mark.parametrize("command", [
    "train.py --selector gmts --output-dir {tmp}/run",
    "eval.py --model Qwen/Qwen2.5-1.5B-Instruct --data gsm8k --limit 2",
    "-m gmts.tools.memory --model Qwen/Qwen2.5-1.5B-Instruct --gpu-memory 24",
])
def test_a_hub_id_with_the_hub_unreachable_is_one_line_naming_the_folder_to_pass(
    command, unreachable_hub,
                                                                                 tmp_path):
    args = command.format(tmp=tmp_path).split()
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          env=unreachable_hub, cwd=ROOT, timeout=300, check=False)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    # no hub retry lines before it
    assert proc.returncode != 0 and len(lines) == 1, lines[:12]
    line = lines[0]
    assert line.startswith("error: --model: could not load 'Qwen/Qwen2.5-1.5B-Instruct'"), line
    assert ("http://127.0.0.1:9 cannot be reached" in line
            and "--model /path/to/folder" in line), line
    assert ("config.json" in line
            and "hf download Qwen/Qwen2.5-1.5B-Instruct --local-dir" in line), line


def test_a_cached_hub_id_loads_from_the_cache_with_the_hub_unreachable(
    tiny_model_dir, tmp_path, monkeypatch):
    """Unreachable hub, but the id is in the local hub cache: the cached folder, without a download
    attempt."""
    from gmts.trainer import models, smollm2
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(smollm2, "_hub_reachable", None)
    import huggingface_hub
    seen = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        lambda repo,
                        **kw: seen.append((repo, kw.get("local_files_only"))) or tiny_model_dir)
    assert models.hub_source("org/cached-model") == tiny_model_dir
    assert seen == [("org/cached-model", True)]
    # a folder is left alone
    assert models.hub_source(tiny_model_dir) == tiny_model_dir
    assert json.loads(pathlib.Path(tiny_model_dir, "config.json").read_text())["hidden_size"] == 32
