"""The run's logs (metrics.jsonl, samples.jsonl): every line written whole or not at all.

    append_jsonl(path, rows)     # one write of all the rows' bytes; on failure the file is
                                 # cut back as it was

A full disk (or any write error) ends the run with one line naming the file, and the file keeps only
whole lines, so a later --resume reads it as is (gmts/checkpoint.truncate_jsonl also drops a torn
line an older version left). The checkpoints are written separately and atomically: the last one is
intact whatever happens here.
"""
import errno
import json
import os

from gmts.run import checkpoint


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
