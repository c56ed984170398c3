"""--report-to: TensorBoard (read back from the event file) and W&B offline get every metrics.jsonl
field, the logged samples with reward and advantage, and the resolved config; --eval-before
evaluates before the first step."""
import glob
import importlib.util
import json
import os

import pytest

from gmts.run import report

HAVE_TB = importlib.util.find_spec("tensorboard") is not None
HAVE_WANDB = importlib.util.find_spec("wandb") is not None


def train_args(model_dir, out, *extra):
    return ["--model", model_dir, "--data", "arithmetic", "--steps", "2", "--prompts-per-step", "2",
            "--group-size", "2", "--max-new-tokens", "3", "--micro-batch-size", "2", "--device",
            "cpu", "--output-dir", str(out), "--log-samples", "2", "--save-every", "0", *extra]


def test_scalars_and_texts_split_a_metrics_record():
    record = {"step": 3, "loss": 0.5, "valid_tokens": 12, "eval_ci95": [0.1, 0.4],
              "skipped": "no group", "ok": True}
    assert report.scalars(record) == {"loss": 0.5, "valid_tokens": 12.0, "eval_ci95_low": 0.1,
                                      "eval_ci95_high": 0.4, "ok": 1.0}
    assert report.texts(record) == {"skipped": "no group"}
    table = report.samples_markdown(
        [{"problem": "p/1", "reward": 1.0, "advantage": -0.5, "answer": "7",
                                      "completion": "a | b\nc"}])
    assert "| p/1 | 1.000 | -0.500 | 7 | a \\| b<br>c |" in table
    assert isinstance(report.open(None), report.Reporter)


@pytest.mark.skipif(not HAVE_TB, reason="tensorboard not installed (pip install tensorboard)")
def test_tensorboard_event_file_holds_metrics_samples_and_config(tiny_model_dir, tmp_path, capsys):
    import train
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    out = tmp_path / "run"
    train.main(
        train_args(tiny_model_dir, out, "--report-to", "tensorboard", "--eval-before",
                   "--eval-every", "5",
                          "--eval-data", "arithmetic:test", "--eval-limit", "3"))
    printed = capsys.readouterr().out
    assert ("held-out accuracy before training:" in printed
            and "held-out accuracy after step 2:" in printed)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    # --eval-every 5 > --steps 2: the last step is evaluated anyway; the evaluation before step 1
    # rides on step 1.
    assert "eval_accuracy" in metrics[1] and "eval_accuracy" not in metrics[0]
    assert (0 <= metrics[0]["eval_before_accuracy"] <= 1
            and metrics[0]["eval_before_data"] == "arithmetic:test")

    events = glob.glob(str(out / "tensorboard" / "events.out.tfevents.*"))
    assert len(events) == 1
    acc = EventAccumulator(events[0], size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    for record in metrics:
        for name, value in report.scalars(record).items():
            logged = {e.step: e.value for e in acc.Scalars(name)}
            # tensorboard stores scalars as float32: rounding is u = 6e-8 relative, under rel 1e-6
            # (abs for 0's)
            assert logged[record["step"]] == pytest.approx(value, rel=1e-6, abs=1e-6), name
    # before the first step, after the last
    assert {e.step for e in acc.Scalars("eval_accuracy")} == {0, 2}
    assert {"loss", "grad_norm", "reward_mean", "peak_memory_mb", "eval_ci95_low"} <= set(
        tags["scalars"])

    def text(tag):
        return {
            e.step: e.tensor_proto.string_val[0].decode() for e
            in acc.Tensors(f"{tag}/text_summary")}
    config = json.loads(text("config")[0].strip("`\n").removeprefix("json\n"))
    assert config["output_dir"] == str(out) and config["report_to"] == "tensorboard" and config[
        "steps"] == 2
    logged_samples = text("samples")
    for s in samples:
        row = f"| {s['problem']} | {s['reward']:.3f} | {s['advantage']:.3f} |"
        assert row in logged_samples[s["step"]]


@pytest.mark.skipif(not HAVE_WANDB, reason="wandb not installed (pip install wandb)")
def test_wandb_offline_run_is_written(tiny_model_dir, tmp_path, monkeypatch):
    import train
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    train.main(train_args(tiny_model_dir, out, "--report-to", "wandb"))
    runs = glob.glob(str(out / "wandb" / "offline-run-*"))
    assert len(runs) == 1 and glob.glob(os.path.join(runs[0], "*.wandb"))


def test_report_to_is_checked():
    from gmts.run.config import parse_config
    with pytest.raises(SystemExit):
        parse_config(["--report-to", "mlflow"])
    with pytest.raises(SystemExit):
        parse_config(["--eval-before", "--eval-data", ""])          # needs --eval-data
