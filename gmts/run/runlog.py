"""The run's logs (metrics.jsonl, samples.jsonl): every line written whole or not at all.

    append_jsonl(path, rows)     # one write of all the rows' bytes; on failure the file is
                                 # cut back as it was
    log = RunLog(cfg, ...)       # train.py's: each step's lines, --report-to, the final line

A full disk (or any write error) ends the run with one line naming the file, and the file keeps only
whole lines, so a later --resume reads it as is (gmts/checkpoint.truncate_jsonl also drops a torn
line an older version left). The checkpoints are written separately and atomically: the last one is
intact whatever happens here.
"""
import errno
import json
import os
import time

from gmts.run import checkpoint, report


def append_jsonl(path, rows):
    """Append `rows` (dicts) to the JSON-lines file `path` as one unit. Raises SystemExit with one
    line on failure, after truncating the file back to its previous length."""
    # json.dumps escapes non-ASCII
    data = "".join(json.dumps(row) + "\n" for row in rows).encode("ascii")
    fd = None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            # os.write may write part of it (a nearly full disk)
            while view:
                written = os.write(fd, view)
                if not written:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
                view = view[written:]
        except OSError:
            os.ftruncate(fd, size)                       # cutting back needs no space
            raise
    except OSError as err:
        run_dir = os.path.dirname(os.path.abspath(path))
        kept = checkpoint.list_checkpoints(run_dir)
        raise SystemExit(f"error: could not write {path} ({err.strerror or err}); it keeps only "
                         "whole lines, and "
                         + (f"the last checkpoint {os.path.join(run_dir, 'checkpoints', kept[-1])} "
                            f"is intact: resume with --resume {run_dir} once there is room" if kept
                            else "no checkpoint was written yet")
                         ) from None
    finally:
        if fd is not None:
            os.close(fd)


def log_paths(cfg):
    return os.path.join(cfg.output_dir, "metrics.jsonl"), os.path.join(
        cfg.output_dir, "samples.jsonl")


class RunLog:
    """What a training run writes and keeps as it goes: each step's metrics.jsonl line and
    samples.jsonl lines and the same to --report-to (main process), the held-out accuracy before
    training, the first and last metrics, the time spent evaluating and saving and the step of the
    last checkpoint: what the run's final line reports. overlap: train.py's eval_overlap label."""

    def __init__(self, cfg, main_process, start_step, overlap=""):
        self.cfg, self.main_process, self.start_step, self.overlap = (cfg, main_process,
                                                                      start_step, overlap)
        self.reporter = report.open(cfg if main_process else None)
        self.metrics_path, self.samples_path = log_paths(cfg)
        self.eval_before, self.first, self.last, self.last_saved = {}, None, None, start_step
        # the wall time the final line reports, and its parts
        self.t_start, self.spent = time.time(), {"eval": 0.0, "save": 0.0}

    def evaluated_before(self, figures):
        """The evaluation before training (its eval_* metrics): reported as step 0, and logged
        with the first step as eval_before_*."""
        self.eval_before = figures
        if figures:
            self.reporter.log(0, figures)

    def write(self, step, metrics, samples):
        """One step's metrics line and samples (None: none): whole lines or none; a full disk is
        one line."""
        if step == self.start_step + 1 and self.eval_before:
            metrics.update({"eval_before_" + k[len("eval_"):]: v
                            for k, v in self.eval_before.items()})
        if self.main_process:
            append_jsonl(self.metrics_path, [metrics])
            if samples:
                append_jsonl(self.samples_path, samples)
            self.reporter.log(step, metrics, samples)
        self.first, self.last = self.first or metrics, metrics

    def close(self):
        self.reporter.close()

    def final_line(self, exported):
        """The run's last line: its figures from the first step to the last, or, for a --resume
        at the last step, that the run is complete (exported: LoRA's merged export written now)."""
        cfg, found = self.cfg, checkpoint.find_checkpoint(self.cfg.output_dir)
        if self.last is None:
            return (f"gmts: the run in {cfg.output_dir} is complete at step {cfg.steps} "
                    f"(checkpoint {found}"
                    + (f"; wrote {os.path.join(cfg.output_dir, checkpoint.MERGED)}" if exported
                       else "")
                    + f"); pass --steps > {cfg.steps} to train further")
        first, last, overlap = self.first, self.last, self.overlap
        held_out = [f"{100 * r['eval_accuracy']:.1f}%" for r in (self.eval_before, last)
                    if "eval_accuracy" in r]
        return (f"gmts: {cfg.steps - self.start_step} steps in {time.time() - self.t_start:.1f}s "
                f"wall time (from the end of loading: {self.spent['eval']:.1f}s of it evaluating, "
                f"{self.spent['save']:.1f}s writing checkpoints); reward "
                f"{first['reward_mean']:.3f} -> {last['reward_mean']:.3f}, accuracy "
                f"{first['accuracy']:.3f} -> {last['accuracy']:.3f}"
                + (f", {'eval' if overlap else 'held-out'} accuracy {' -> '.join(held_out)}"
                   + (f" ({overlap})" if overlap else "") if held_out else "")
                + f"; checkpoint {found}")
