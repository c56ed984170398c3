"""Logging a run to TensorBoard or Weights & Biases (`--report-to`), besides metrics.jsonl and
samples.jsonl.

    reporter = report.open(cfg)                 # cfg.report_to: none | tensorboard | wandb
    reporter.log(step, metrics, samples)        # one metrics.jsonl record, that step's samples
    reporter.close()

What is logged: every numeric metrics.jsonl field as a scalar under its own name (a [low, high]
interval such as eval_ci95 as <name>_low / <name>_high; text fields such as `skipped` as text), the
logged sample completions as a text table (problem, reward, advantage, answer, completion), and the
resolved configuration (once, at the start). The backends are optional installs, imported only when
asked: `pip install tensorboard` (written to <output-dir>/tensorboard, read with `tensorboard
--logdir <output-dir>`) or `pip install wandb` (works without a network with WANDB_MODE=offline;
files under <output-dir>/wandb, `wandb sync` uploads them later).
"""
import json
import math
import os

from gmts.run.config import to_dict


def open(cfg):  # the interface reads report.open / log / close, shadowing the builtin
    """The reporter that --report-to asks for; `none` (or cfg None, e.g. on ranks > 0) logs
    nothing."""
    kind = getattr(cfg, "report_to", "none") if cfg is not None else "none"
    if kind == "none":
        return Reporter()
    if kind == "tensorboard":
        return TensorBoardReporter(cfg)
    if kind == "wandb":
        return WandbReporter(cfg)
    raise ValueError(f"--report-to must be none, tensorboard or wandb, got {kind!r}")


def scalars(metrics):
    """The numeric fields of one metrics record, {name: float}: intervals split into _low / _high,
    `step` left out (it is the x axis), booleans as 0/1, non-finite values kept (backends show them
    as gaps)."""
    out = {}
    for name, value in metrics.items():
        if name == "step":
            continue
        if isinstance(value, (int, float)):  # bool included
            out[name] = float(value)
        elif isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(v, (int, float)) for v in value):
            out[f"{name}_low"], out[f"{name}_high"] = float(value[0]), float(value[1])
    return out


def texts(metrics):
    """The text fields of one metrics record (e.g. `skipped`, `eval_data`), {name: str}."""
    return {name: value for name, value in metrics.items() if isinstance(value, str)}


def samples_markdown(samples):
    """A step's logged completions as one markdown table (reward and advantage per answer)."""
    rows = ["| problem | reward | advantage | reference | completion |", "|---|---|---|---|---|"]
    for s in samples:
        cells = [str(s.get("problem", "")), f"{s.get('reward', math.nan):.3f}",
                 f"{s.get('advantage', math.nan):.3f}", str(s.get("answer", "")),
                 str(s.get("completion", ""))]
        rows.append("| "
                    + " | ".join(c.replace("|", "\\|").replace("\n", "<br>") for c in cells) + " |")
    return "\n".join(rows)


def eval_line(label, metrics, overlap=""):
    """One printed line for an in-training evaluation: 'held-out accuracy before training: 21.2%
    [15.5, 27.3] ...'; with `overlap` (eval problems that are training problems too) 'eval
    accuracy' and the overlap instead."""
    low, high = metrics["eval_ci95"]
    return (f"gmts: {'eval' if overlap else 'held-out'} accuracy {label}: "
            f"{100 * metrics['eval_accuracy']:.1f}% [95% CI {100 * low:.1f}, {100 * high:.1f}] on "
            f"{metrics['eval_data']}" + (f" ({overlap})" if overlap else ""))


class Reporter:
    """--report-to none: every call is a no-op (metrics.jsonl and samples.jsonl are written by
    train.py anyway)."""

    def log(self, step, metrics, samples=None):
        pass

    def close(self):
        pass


class TensorBoardReporter(Reporter):
    def __init__(self, cfg):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise SystemExit("error: --report-to tensorboard needs tensorboard: pip install "
                             "tensorboard") from None
        self.path = os.path.join(cfg.output_dir, "tensorboard")
        self.writer = SummaryWriter(log_dir=self.path)
        self.writer.add_text("config", "```json\n" + json.dumps(to_dict(cfg), indent=2) + "\n```",
                             0)

    def log(self, step, metrics, samples=None):
        for name, value in scalars(metrics).items():
            self.writer.add_scalar(name, value, step)
        for name, value in texts(metrics).items():
            self.writer.add_text(name, value, step)
        if samples:
            self.writer.add_text("samples", samples_markdown(samples), step)
        self.writer.flush()

    def close(self):
        self.writer.close()


class WandbReporter(Reporter):
    def __init__(self, cfg):
        try:
            import wandb
        except ImportError:
            raise SystemExit("error: --report-to wandb needs wandb: pip install wandb (offline: "
                             "WANDB_MODE=offline)") from None
        self.wandb = wandb
        os.makedirs(cfg.output_dir, exist_ok=True)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "gmts"), config=to_dict(cfg),
                              dir=cfg.output_dir,
                              name=os.path.basename(os.path.abspath(cfg.output_dir)))
        self.columns = ["step", "problem", "reward", "advantage", "answer", "completion"]
        self.rows = []

    def log(self, step, metrics, samples=None):
        record = dict(scalars(metrics))
        record.update(texts(metrics))
        if samples:
            # One growing table (wandb shows the latest version of a key): every logged completion
            # so far.
            self.rows += [[step, str(s.get("problem", "")), float(s.get("reward", math.nan)),
                           float(s.get("advantage", math.nan)), str(s.get("answer", "")),
                           str(s.get("completion", ""))]
                          for s in samples]
            record["samples"] = self.wandb.Table(columns=self.columns, data=list(self.rows))
        self.run.log(record, step=step)

    def close(self):
        self.run.finish()
