"""eval.py's result is one unit with one writer (issue 55, kind 2): a second evaluation into the
same --output is refused while the first holds it; the summary and the per-problem file are tied
(the summary names the rows' SHA-256, the old summary goes before new rows arrive), so no kill
leaves one evaluation's summary beside another's rows; the default name spells every setting that
changes a result; a damaged checkpoint is refused before anything loads.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

import eval as eval_cli
from gmts.run import checkpoint as ckpt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def eval_args(model, out, *extra):
    return ["--model", str(model), "--data", "arithmetic:test", "--limit", "2", "--samples", "2",
            "--temperature", "1.0", "--max-new-tokens", "3", "--bootstrap", "100", "--quiet",
            "--output", str(out), *map(str, extra)]


def sha256(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


# --------------------------------------------------------------------------------------------------
# One writer per result.

def test_a_second_evaluation_into_one_output_is_refused_while_the_first_runs(
        tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "r.json"
    # another eval.py owns the result: a process holding lock_output(out) until told to stop
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import sys; from gmts.run.folder import lock_output; "
                                f"lock_output({str(out)!r}); print('held', flush=True); "
                                "sys.stdin.read()")],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SystemExit) as err:
            eval_cli.main(eval_args(tiny_model_dir, out))
        line = capsys.readouterr().err.strip()
        assert err.value.code == 2 and "\n" not in line
        assert f"--output {out} is being written by another eval.py (pid {holder.pid} " in line
        assert not out.exists() and not (tmp_path / "r.problems.jsonl").exists()
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    # its owner gone (however it ended), the same command runs, and leaves no lock file behind
    summary = eval_cli.main(eval_args(tiny_model_dir, out))
    assert out.exists() and summary["problems_sha256"] == sha256(tmp_path / "r.problems.jsonl")
    assert sorted(os.listdir(tmp_path)) == ["r.json", "r.problems.jsonl"]


def test_a_kill_between_the_two_files_never_leaves_a_mixed_pair(tiny_model_dir, tmp_path,
                                                                 monkeypatch):
    """Evaluation A is on disk; evaluation B into the same --output dies after writing its rows,
    before its summary: what is left is B's rows and no summary (no result), never A's summary
    beside B's rows. The next evaluation removes B's temporary files and writes a whole pair."""
    out, rows = tmp_path / "r.json", tmp_path / "r.problems.jsonl"
    first = eval_cli.main(eval_args(tiny_model_dir, out, "--seed", 1))
    assert first["problems_sha256"] == sha256(rows)

    real, renamed = os.replace, []

    def dies_before_the_summary(src, dst):
        renamed.append(os.fspath(dst))
        if os.fspath(dst) == str(out):
            raise KeyboardInterrupt                  # a kill: the summary's temporary file stays
        return real(src, dst)
    monkeypatch.setattr(os, "replace", dies_before_the_summary)
    with pytest.raises(KeyboardInterrupt):
        eval_cli.main(eval_args(tiny_model_dir, out, "--seed", 2))
    monkeypatch.setattr(os, "replace", real)
    assert renamed == [str(rows), str(out)]
    assert not out.exists(), "evaluation A's summary beside evaluation B's rows"
    assert sha256(rows) != first["problems_sha256"]
    assert [n for n in os.listdir(tmp_path) if n.startswith(".r.json.")]
    second = eval_cli.main(eval_args(tiny_model_dir, out, "--seed", 2))
    assert json.loads(out.read_text())["problems_sha256"] == second["problems_sha256"] == sha256(
        rows)
    assert sorted(os.listdir(tmp_path)) == ["r.json", "r.problems.jsonl"]


def test_compare_refuses_rows_that_are_not_their_summarys(tiny_model_dir, tmp_path):
    out = tmp_path / "r.json"
    eval_cli.main(eval_args(tiny_model_dir, out))
    rows = tmp_path / "r.problems.jsonl"
    # another evaluation's rows put in their place by hand
    other = tmp_path / "o.json"
    eval_cli.main(eval_args(tiny_model_dir, other, "--seed", 5))
    shutil.copy(tmp_path / "o.problems.jsonl", rows)
    with pytest.raises(SystemExit) as err:
        eval_cli.main(["--compare", str(other), str(rows)])
    assert "not the per-problem file of" in str(err.value) and "\n" not in str(err.value)


# --------------------------------------------------------------------------------------------------
# Names.

def name_of(*flags):
    args = eval_cli.build_parser().parse_args(["--model", "Qwen/Qwen2.5-1.5B", *map(str, flags)])
    return eval_cli.default_output(args.model, args.data, args.seed, eval_cli.result_settings(args))


def test_the_default_name_spells_every_setting_that_changes_a_result():
    base = name_of()
    assert base == os.path.join("out", "eval", "Qwen-Qwen2.5-1.5B_math500_s0.json")
    sampled = name_of("--samples", 2, "--temperature", 1)
    assert sampled != base and "_k2-T1-" in sampled
    assert "_greedy-" in name_of("--temperature", 0)
    # --samples is 1 at temperature 0 whatever is asked: one result, one name
    assert name_of("--temperature", 0, "--samples", 4) == name_of("--temperature", 0)
    changed = {
        "--tokenizer": "Qwen/Qwen2.5-0.5B", "--limit": 3, "--samples": 3, "--temperature": 0.7,
        "--top-p": 0.9, "--top-k": 5, "--max-new-tokens": 64, "--max-prompt-tokens": 100,
        "--batch-size": 4, "--repeat": 2, "--data-seed": 1, "--template": "plain",
        "--system-prompt": "", "--question-field": "q", "--answer-field": "a",
        "--task-options": '{"digits": 1}', "--reward": "math", "--reward-weights": "2",
        "--device": "cpu", "--dtype": "float32", "--bootstrap": 500}
    names = {flag: name_of(flag, value) for flag, value in changed.items()}
    assert base not in names.values() and len(set(names.values())) == len(names), names
    assert name_of("--seed", 1) != base and name_of("--data", "gsm8k") != base
    # what does not change a result does not change the name
    assert name_of("--reward-workers", 3, "--quiet") == base
    assert set(eval_cli.RESULT_FLAGS) == {f[2:].replace("-", "_") for f in changed}


def test_two_settings_by_default_name_keep_both_results(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    common = ["--model", tiny_model_dir, "--data", "arithmetic:test", "--limit", "2",
              "--max-new-tokens", "3", "--bootstrap", "100", "--quiet"]
    one = eval_cli.main(common)
    sampled = eval_cli.main(common + ["--samples", "2", "--temperature", "1"])
    assert one["problems_file"] != sampled["problems_file"]
    written = sorted(os.listdir(tmp_path / "out" / "eval"))
    assert len(written) == 4 and all(n.endswith((".json", ".problems.jsonl")) for n in written)


# --------------------------------------------------------------------------------------------------
# Damaged checkpoints.

@pytest.fixture
def checkpoint(tiny_model_dir, tmp_path):
    """A checkpoint gmts wrote (save_checkpoint: weights, tokenizer, trainer_state.pt, manifest)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    return ckpt.save_checkpoint(str(tmp_path / "run"), 1, model, tokenizer, {"step": 1})


@pytest.mark.parametrize("how", ["flip", "truncate", "remove"])
def test_a_damaged_checkpoint_is_refused_in_one_line(checkpoint, tmp_path, capsys, how):
    weights = os.path.join(checkpoint, "model.safetensors")
    if how == "remove":
        os.remove(os.path.join(checkpoint, "tokenizer_config.json"))
    else:
        with open(weights, "r+b") as fh:
            if how == "flip":
                fh.seek(-3, os.SEEK_END)
                byte = fh.read(1)
                fh.seek(-3, os.SEEK_END)
                fh.write(bytes([byte[0] ^ 0xFF]))
            else:
                fh.truncate(os.path.getsize(weights) - 8)
    out = tmp_path / "res" / "r.json"
    with pytest.raises(SystemExit) as err:
        eval_cli.main(eval_args(checkpoint, out))
    line = capsys.readouterr().err.strip()
    assert err.value.code == 2 and "\n" not in line
    assert line.startswith(f"eval.py: error: --model {checkpoint}: the checkpoint is damaged (")
    assert {"flip": "model.safetensors is damaged", "truncate": "model.safetensors is truncated",
            "remove": "tokenizer_config.json is missing"}[how] in line
    assert not (tmp_path / "res").exists()


def test_an_export_with_a_manifest_is_checked_and_an_intact_one_evaluated(checkpoint, tmp_path):
    # final-merged/ carries a manifest without a trainer_state.pt (checkpoint.save_merged_lora)
    export = tmp_path / "final-merged"
    shutil.copytree(checkpoint, export)
    os.remove(export / ckpt.STATE_FILE)
    ckpt.write_manifest(str(export))
    assert eval_cli.main(eval_args(export, tmp_path / "a.json"))["n_problems"] == 2
    assert eval_cli.main(eval_args(checkpoint, tmp_path / "b.json"))["n_problems"] == 2
    with open(export / "config.json", "a") as fh:
        fh.write(" ")
    with pytest.raises(SystemExit) as err:
        eval_cli.main(eval_args(export, tmp_path / "c.json"))
    assert err.value.code == 2 and "config.json is truncated or changed" in str(err.value)
