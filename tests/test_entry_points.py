"""One line, never a traceback, from every entry point: train.py, eval.py, `python -m
gmts.tools.analyze`, `python -m gmts.tools.memory` and `python -m gmts.tools.plot`.

Each kind of bad input a user meets (damaged or misplaced model files, flags, data, output paths,
Ctrl-C) runs through the real command line: batched by tests/_cli_batch.py (each case exactly as
`python SCRIPT ARGS` would run, in a fork of one warm process), plus a few real subprocesses to show
the batch runner is faithful. Every case must end with a non-zero exit, exactly one line on stderr
naming the flag or file:line, no traceback, and nothing written.
"""
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
# the environment, batch runner, signal timing, one command line in a fork
from conftest import ENV, inside_start_up, run_batch, run_python

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)



def tree(folder):
    """Every path under `folder` with its size and modification time: what "nothing written" is
    checked against."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            out[os.path.relpath(path, folder)] = (os.path.getsize(path), os.stat(path).st_mtime_ns)
    return out


def one_line(rc, stderr, expected, context=""):
    assert rc != 0, (context, stderr)
    assert "Traceback" not in stderr, (context, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, (context, stderr)
    for text in expected if isinstance(expected, (list, tuple)) else [expected]:
        assert text in lines[0], (context, text, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def inputs(digit_model_dir, tmp_path_factory):
    """Bad model folders and data files, made once: copies of the tiny model with one thing wrong
    each."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from gmts.tools.toy import byte_tokenizer
    d = tmp_path_factory.mktemp("entry")
    good = d / "model"
    shutil.copytree(digit_model_dir, good)
    weights = (good / "model.safetensors").read_bytes()

    def variant(name, edit):
        folder = d / name
        shutil.copytree(good, folder)
        edit(folder)
        return str(folder)

    m = {"good": str(good)}
    m["truncated"] = variant("truncated",
                             lambda f: (f / "model.safetensors").write_bytes(
                                 weights[:len(weights) // 2]))
    m["garbage"] = variant("garbage",
                           lambda f: (f / "model.safetensors").write_bytes(
                               b"not safetensors " * 20))
    m["no-weights"] = variant("no-weights", lambda f: (f / "model.safetensors").unlink())
    m["bad-config"] = variant("bad-config",
                              lambda f: (f / "config.json").write_text('{"model_type": "qw'))
    m["bad-tokenizer"] = variant("bad-tokenizer",
                                 lambda f: (f / "tokenizer.json").write_text('{"version": '))
    (d / "empty").mkdir()
    m["empty"] = str(d / "empty")
    # A train.py run folder (what model_folder_problem recognises: checkpoints/ and metrics.jsonl).
    run = d / "run"
    (run / "checkpoints" / "step-000003").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 1, "reward_mean": 0.5}\n')
    (run / "config.json").write_text(
        json.dumps({"selector": "gmts", "output_dir": str(run), "dtype": "auto"}))
    m["run"] = str(run)
    # A tokenizer of 259 ids over an embedding of 100 rows (an IndexError at the first prompt,
    # unchecked).
    tok = byte_tokenizer()
    small = Qwen2ForCausalLM(
        Qwen2Config(vocab_size=100, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1,
                    max_position_embeddings=256,
                                         eos_token_id=None, pad_token_id=None))
    small.save_pretrained(d / "small-vocab")
    tok.save_pretrained(d / "small-vocab")
    m["small-vocab"] = str(d / "small-vocab")
    # A damaged run for the plotter: its config.json cut short.
    (d / "plot-run").mkdir()
    (d / "plot-run" / "metrics.jsonl").write_text('{"step": 1, "reward_mean": 0.5}\n')
    (d / "plot-run" / "config.json").write_text('{"selector": ')
    m["plot-run"] = str(d / "plot-run")

    import gzip
    good_line = '{"question": "Say 1", "answer": "1"}\n'
    files = {
        "list-question.jsonl": good_line + '{"question": ["Say", "1"], "answer": "1"}\n',
        "null-question.jsonl": good_line + '{"question": null, "answer": "1"}\n',
        "dict-answer.jsonl": good_line + '{"question": "Say 2", "answer": {"value": 2}}\n',
        "bool-answer.jsonl": good_line + '{"question": "Say 2", "answer": true}\n',
        "choices-text.jsonl": good_line + '{"question": "Pick", "choices": "abc", "answer": "A"}\n',
        "not-gzip.jsonl.gz": good_line,
    }
    for name, text in files.items():
        (d / name).write_text(text)
    packed = gzip.compress((good_line * 300).encode())
    (d / "cut.jsonl.gz").write_bytes(packed[:len(packed) // 2])
    (d / "folder.jsonl").mkdir()
    (d / "a-file").write_text("not a folder\n")
    (d / "out-folder").mkdir()
    # A summary in eval.py's format, for --compare A B with B a folder.
    (d / "a.json").write_text(json.dumps({"benchmarks": {"digits": {"scores": {"digits/0": 1.0}}}}))
    return d, m


def train(model, data, out, *extra):
    return ["--model", model, "--data", data, "--steps", "1", "--prompts-per-step", "2",
            "--group-size", "4", "--max-new-tokens", "3", "--micro-batch-size", "4", "--device",
            "cpu", "--output-dir", str(out), *extra]


def evaluate(model, data, out, *extra):
    return ["--model", model, "--data", data, "--max-new-tokens", "3", "--device", "cpu", "--quiet",
            "--output", str(out), *extra]


def analyze(model, data, out, *extra):
    return ["--model", model, "--data", data, "--prompts", "2", "--group-size", "4",
            "--max-new-tokens", "3", "--device", "cpu", "--no-progress", "--output", str(out),
            *extra]


MEMORY = "gmts/tools/memory.py"
ANALYZE = "gmts/tools/analyze.py"
PLOT = "gmts/tools/plot.py"


def test_every_entry_point_fails_in_one_line(inputs, digit_data, tmp_path):
    d, m = inputs
    fresh, eval_out, analysis = (tmp_path / "fresh", tmp_path / "eval" / "r.json",
                                 tmp_path / "an" / "a.json")
    f = {name: str(d / name) for name in os.listdir(d)}
    cases = []                       # (script, args, expected texts, usage error: exit status 2)

    # Model files, through each command that loads a model.
    model_cases = [
        ("truncated", ["--model", "model.safetensors is truncated"], False),
        ("garbage", ["--model", "model.safetensors"], False),
        ("no-weights", ["--model", "no weights"], False),
        ("bad-tokenizer", ["--model", "tokenizer"], False),
        ("small-vocab", ["259 token ids", "100 rows"], False),
    ]
    for name, expected, usage in model_cases:
        cases.append(("train.py", train(m[name], digit_data, fresh), expected, usage))
        cases.append(("eval.py", evaluate(m[name], digit_data, eval_out), expected, usage))
        cases.append((ANALYZE, analyze(m[name], digit_data, analysis), expected, usage))
    # ... and the ones the flag check refuses before torch loads (status 2): also in the memory
    # planner.
    before_torch = [
        ("run", ["--model", "train.py run folder", "step-000003", "--resume"]),
        ("empty", ["--model", "no config.json"]),
        ("bad-config", ["--model", "config.json does not read as JSON"]),
    ]
    for name, expected in before_torch:
        cases.append(("train.py", train(m[name], digit_data, fresh), expected, True))
        cases.append(("eval.py", evaluate(m[name], digit_data, eval_out), expected, True))
        cases.append((ANALYZE, analyze(m[name], digit_data, analysis), expected, True))
        cases.append((MEMORY, ["--model", m[name]], expected, True))
    weights_file = os.path.join(m["good"], "model.safetensors")
    cases += [
        ("train.py", train(weights_file, digit_data, fresh), ["--model", "is a file"], True),
        ("train.py", train(m["good"], digit_data, fresh, "--tokenizer", m["run"]),
         ["--tokenizer", "run folder"], True),
        ("eval.py", evaluate(m["good"], digit_data, eval_out, "--tokenizer", m["run"]),
         ["--tokenizer", "run folder"], True),
        ("eval.py", evaluate(m["good"], digit_data, eval_out, "--tokenizer", m["empty"]),
         ["--tokenizer", "no tokenizer"], False),
        (ANALYZE, analyze(m["good"], digit_data, analysis, "--ref-model", m["truncated"]),
         ["--ref-model", "truncated"], False),
    ]

    # Flags.
    two = '{"digits": "two"}'
    cases += [
        ("train.py", train(m["good"], digit_data, fresh, "--fsdp"), ["--fsdp", "torchrun"], True),
        ("train.py", train(m["good"], "arithmetic", fresh, "--task-options", two),
         ["--task-options", "'digits'"], False),
        ("train.py", train(m["good"], "arithmetic", fresh, "--task-options", '{"dgits": 2}'),
         ["--task-options", "'dgits'"], False),
        ("eval.py", evaluate(m["good"], "arithmetic", eval_out, "--task-options", two),
         ["--task-options", "'digits'"], False),
        (ANALYZE, analyze(m["good"], "arithmetic", analysis, "--task-options", two),
         ["--task-options", "'digits'"], False),
        # A message about a flag the user never typed says where its value came from.
        ("train.py",
         ["--preset", "cpu-demo", "--micro-batch-size", "3", "--output-dir", str(fresh)],
         ["--micro-batch-size 3", "--prompts-per-step 4, --group-size 8 set by --preset cpu-demo"],
         True),
        ("train.py", ["--preset", "paper-math", "--model", m["good"], "--output-dir", str(fresh)],
         ["--max-new-tokens 2048", "set by --preset paper-math"], True),
        (MEMORY, ["--preset", "cpu-demo", "--mini-batch-size", "3"],
         ["--prompts-per-step 4 set by --preset cpu-demo"], True),
        # The planner's own flags, which used to give a report with nonsense in it.
        (MEMORY, ["--model", m["good"], "--gpu-memory", "-1"], "--gpu-memory", True),
        (MEMORY, ["--model", m["good"], "--gpu-memory", "nan"], "--gpu-memory", True),
        (MEMORY, ["--model", m["good"], "--gpu-memory", "24", "0"], "--gpu-memory", True),
        (MEMORY, ["--model", m["good"], "--prompt-tokens", "-5"], "--prompt-tokens", True),
        (MEMORY, ["--model", m["good"], "--device", "tpu"], "--device", True),
        (MEMORY, ["--model", m["good"], "--fsdp"], "--fsdp", True),
        # argparse's own errors: one line, as train.py's, not a usage block.
        (MEMORY, ["--model", m["good"], "--gpu-memory", "big"], "--gpu-memory", True),
        ("eval.py", evaluate(m["good"], digit_data, eval_out, "--samples", "x"), "--samples", True),
        ("eval.py", evaluate(m["good"], digit_data, eval_out, "--no-such-flag"), "--no-such-flag",
         True),
        (ANALYZE, analyze(m["good"], digit_data, analysis, "--prompts", "x"), "--prompts", True),
        (PLOT, [m["plot-run"], "--smooth", "x"], "--smooth", True),
        (PLOT, [m["plot-run"], "--no-such-flag"], "--no-such-flag", True),
        (PLOT, [m["run"], "--metrics", "reward_mena", "--output", str(tmp_path / "p.png")],
         ["--metrics reward_mena", "reward_mean"], False),
    ]

    # Data: file:line for a row, the file for a damaged container; the same in every command that
    # reads data.
    data_cases = [
        ("list-question.jsonl", [f["list-question.jsonl"] + ":2", "must be a string", "list"]),
        ("null-question.jsonl", [f["null-question.jsonl"] + ":2", "'question' is null"]),
        ("dict-answer.jsonl", [f["dict-answer.jsonl"] + ":2", "answer"]),
        ("bool-answer.jsonl", [f["bool-answer.jsonl"] + ":2", "answer"]),
        ("choices-text.jsonl", [f["choices-text.jsonl"] + ":2", "choices"]),
        ("not-gzip.jsonl.gz", [f["not-gzip.jsonl.gz"], "not a gzip file"]),
        ("cut.jsonl.gz", [f["cut.jsonl.gz"], "truncated"]),
        ("folder.jsonl", [f["folder.jsonl"], "is a folder"]),
    ]
    for name, expected in data_cases:
        cases.append(("train.py", train(m["good"], f[name], fresh), expected, False))
        cases.append(("eval.py", evaluate(m["good"], f[name], eval_out), expected, False))
    cases.append((ANALYZE, analyze(m["good"], f["list-question.jsonl"], analysis),
                  [f["list-question.jsonl"] + ":2"], False))

    # Output paths: checked before any work, in every tool that writes.
    cases += [
        (ANALYZE, analyze(m["good"], digit_data, f["out-folder"]), ["--output", "is a folder"],
         True),
        (ANALYZE, analyze(m["good"], digit_data, os.path.join(f["a-file"], "a.json")),
         ["--output", "is a file"], True),
        (PLOT, [m["plot-run"], "--output", f["out-folder"]], ["--output", "is a folder"], True),
        (PLOT, [m["plot-run"], "--output", os.path.join(f["a-file"], "p.png")],
         ["--output", "is a file"], True),
        ("eval.py", ["--compare", f["a.json"], f["out-folder"]],
         ["--compare", f["out-folder"], "is a folder"], False),
        ("eval.py", ["--compare", f["out-folder"], f["a.json"]], ["--compare", "is a folder"],
         False),
        # Damaged input of the plotter: a run whose config.json is cut short.
        (PLOT, [m["plot-run"], "--output", str(tmp_path / "p.png")],
         [os.path.join(m["plot-run"], "config.json")], False),
    ]

    before = tree(d)
    results = run_batch([(script, args) for script, args, _, _ in cases])
    for (script, args, expected, usage), result in zip(cases, results):
        line = one_line(result["rc"], result["stderr"], expected, context=(script, args))
        # a flag: a usage error, status 2, like train.py's
        if usage:
            assert result["rc"] == 2, (script, args, line)
    assert tree(d) == before                               # no input touched
    assert not fresh.exists() and not eval_out.parent.exists() and not analysis.parent.exists()
    assert not (tmp_path / "p.png").exists()


def test_the_batch_runner_is_the_real_command_line(inputs, tmp_path):
    """The same one line from a real `python -m ...` as from tests/_cli_batch.py's fork (exit status
    included)."""
    _d, m = inputs
    cases = [(["-m", "gmts.tools.memory", "--model", m["good"], "--gpu-memory", "nan"], MEMORY),
             (
                 ["-m", "gmts.tools.analyze", "--model", m["run"], "--output",
                  str(tmp_path / "a.json")], ANALYZE)]
    batch = run_batch([(script, args[2:]) for args, script in cases])
    for (args, _), result in zip(cases, batch):
        proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=ENV,
                              cwd=ROOT, timeout=300, check=False)
        assert (proc.returncode, proc.stderr.strip()) == (result["rc"], result["stderr"].strip())
        one_line(proc.returncode, proc.stderr, "error:")


@pytest.mark.parametrize("command", ["eval", "analyze"])
def test_ctrl_c_during_start_up_is_one_line(inputs, digit_data, tmp_path, command):
    """SIGINT while the command is importing torch / loading: one line, no traceback, nothing
    written."""
    _d, m = inputs
    out = tmp_path / "out" / "r.json"
    args = ([os.path.join(ROOT, "eval.py"), *evaluate(m["good"], digit_data, out)] if command
            == "eval"
            else ["-m", "gmts.tools.analyze", *analyze(m["good"], digit_data, out)])
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV, cwd=ROOT)
    inside_start_up(proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=300)
    one_line(proc.returncode, stderr, "interrupted (Ctrl-C)")
    assert not out.parent.exists()


@pytest.mark.parametrize("command", ["eval", "analyze"])
def test_a_signal_while_sampling_ends_the_command_within_seconds(inputs, digit_data, tmp_path,
                                                                 command):
    """SIGINT in the middle of the work (the sampler, after loading): the command ends at once, not
    when the sampling would have finished, with one line, and writes nothing."""
    import time
    _d, m = inputs
    out = tmp_path / "out" / "r.json"
    argv = (evaluate(m["good"], digit_data, out) if command == "eval"
            else analyze(m["good"], digit_data, out))
    run = (f"runpy.run_path({os.path.join(ROOT, 'eval.py')!r}, run_name='__main__')"
           if command == "eval" else "runpy.run_module('gmts.tools.analyze', run_name='__main__')")
    child = f"""
import os, runpy, signal, sys, time
sys.path.insert(0, {ROOT!r})
sys.argv = ["{command}", *{argv!r}]
from gmts.tools import evaluate
from gmts.trainer import rollout
def slow(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(120)                     # sampling for minutes
rollout.sample = evaluate.sample = slow     # where eval.py's evaluation calls it (imported already)
{run}
"""
    t0 = time.time()
    proc = run_python(["-c", child], timeout=300)
    assert time.time() - t0 < 60, "waited for the sampling"
    assert proc.returncode == 128 + signal.SIGINT and "Traceback" not in proc.stderr, proc.stderr
    # after the banner (the loading's report), the one line
    assert "interrupted (Ctrl-C)" in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert not out.exists()


def test_model_folder_problem_accepts_what_loads(inputs, tmp_path):
    """The checks refuse what cannot load and nothing else: a model folder, a LoRA adapter folder
    (no config.json; peft loads it) and a hub id pass; a vocabulary smaller than the embedding
    (Qwen2.5 pads its embedding) passes."""
    from gmts.run.paths import model_folder_problem
    from gmts.trainer.models import check_vocabulary, load_model, load_tokenizer, weights_problem
    _d, m = inputs
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    assert model_folder_problem(m["good"]) is None and weights_problem(m["good"]) is None
    assert model_folder_problem(str(adapter)) is None
    assert model_folder_problem("Qwen/Qwen2.5-1.5B-Instruct") is None
    assert "run folder" in model_folder_problem(m["run"])
    assert "truncated" in weights_problem(m["truncated"])
    import torch
    model = load_model(m["good"], dtype=torch.float32, device=torch.device("cpu"))
    tok = load_tokenizer(m["good"])
    check_vocabulary(model, tok)                        # rows == ids: fine
    model.resize_token_embeddings(len(tok) + 64)         # more rows than ids: fine
    check_vocabulary(model, tok)
    model.resize_token_embeddings(len(tok) - 1)          # one id without a row: refused
    with pytest.raises(SystemExit, match="token ids"):
        check_vocabulary(model, tok)


def test_data_fields_keep_numbers_and_refuse_the_rest(tmp_path):
    """A number is a natural math answer ("answer": 42 -> "42") and a valid option passes; a list,
    an object, a bool or null is refused with file:line rather than trained on as its Python
    repr."""
    from gmts import data
    path = tmp_path / "d.jsonl"
    path.write_text('{"question": "Say 42", "answer": 42}\n{"question": "Half", "answer": 0.5}\n')
    problems = data.load_problems(str(path))
    assert [p.answer for p in problems] == ["42", "0.5"]
    assert len(data.load_problems("arithmetic", n=5, digits=1, ops="+")) == 5
    with pytest.raises(data.OptionError, match="'digits' must be an integer, got True"):
        data.load_problems("arithmetic", digits=True)
    path.write_text('{"question": "Say {x}", "answer": "1", "x": [1]}\n')
    with pytest.raises(ValueError, match=r"d\.jsonl:1: the field 'x' must be a string or a number"):
        data.load_problems(str(path), question_field="{question} {x}")
