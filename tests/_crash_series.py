"""SIGKILL a train.py run at each of its writes, recover it the way a user would, and report how it
ended: for tests/test_crash_series.py.

Reads {"command": [train.py args], "run": folder, "points": [N, ...] or null} as JSON on stdin.
Imports the heavy modules once, then runs every command line in a forked child (as
tests/_cli_batch.py does). With "points" null it runs the command once uncut and counts its write
events; otherwise, for each N, the command in a fresh `run` folder, SIGKILLed by itself just before
its N-th write event (or, for a log line, after half its bytes), then the recovery: the same command
again while the folder holds no checkpoint, else `--resume RUN`, until one exits 0 (at most 4
tries). Writes one record per point as JSON on stdout: whether the kill happened, each recovery's
status and stderr tail, and the folder's digest (digest()).

A write event is a call, under the run folder, of open() for writing, os.open with O_CREAT,
os.rename / os.replace / os.remove / os.unlink / os.rmdir / os.makedirs / shutil.rmtree, os.fsync,
os.ftruncate, or os.write to a file (a log line): every step of a checkpoint, of `latest`, of the
logs, of the LoRA export and of the folder's preparation.
"""
import builtins
import contextlib
import hashlib
import json
import os
import runpy
import shutil
import signal
import sys
import tempfile
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: F401  (imported once, before the forks)
import transformers  # noqa: F401
import peft  # noqa: F401
import train  # noqa: F401

# files whose bytes differ between two identical runs: the owner's pid, wall-clock figures
UNSTABLE = {".lock"}
TIMING = ("time_", "tokens_per_s", "peak_memory_mb", "s_per_step")


class Counter:
    """Counts write events under `run`; at event number `kill_at` the process SIGKILLs itself."""

    def __init__(self, run, kill_at):
        self.run, self.kill_at, self.count = os.path.realpath(run), kill_at, 0

    def under(self, path):
        if isinstance(path, int):
            return True
        try:
            full = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return full == self.run or full.startswith(self.run + os.sep)

    def event(self, path=0):
        if not self.under(path):
            return False
        self.count += 1
        return self.count == self.kill_at

    @staticmethod
    def die():
        os.kill(os.getpid(), signal.SIGKILL)


def install(counter):
    """Wrap every writer of the run folder (module attributes: the code looks them up at call)."""
    def before(fn, name_arg=0):
        def wrapped(*args, **kwargs):
            path = kwargs.get("dir_fd") if "dir_fd" in kwargs and kwargs["dir_fd"] is not None \
                else (args[name_arg] if len(args) > name_arg else kwargs.get("path", ""))
            if counter.event(path):
                counter.die()
            return fn(*args, **kwargs)
        return wrapped
    for name in ("rename", "replace", "remove", "unlink", "rmdir", "makedirs"):
        setattr(os, name, before(getattr(os, name)))
    shutil.rmtree = before(shutil.rmtree)
    fsync, ftruncate, write, os_open, real_open = (os.fsync, os.ftruncate, os.write, os.open,
                                                   builtins.open)
    files = set()                                   # fds of the run folder's files, open now

    def fd_event(fd):
        return fd in files and counter.event()

    def w_fsync(fd):
        if counter.event():                          # only the run's writers fsync
            counter.die()
        return fsync(fd)

    def w_ftruncate(fd, length):
        if fd_event(fd):
            counter.die()
        return ftruncate(fd, length)

    def w_write(fd, data):
        if fd_event(fd):                             # a torn write: half its bytes, then the kill
            write(fd, bytes(data[:max(1, len(data) // 2)]))
            counter.die()
        return write(fd, data)

    def w_os_open(path, flags, *args, **kwargs):
        creating = flags & os.O_CREAT
        if creating and counter.event(path):
            counter.die()
        fd = os_open(path, flags, *args, **kwargs)
        if (flags & (os.O_WRONLY | os.O_RDWR)) and counter.under(path) and not str(
                path).endswith(".lock"):
            files.add(fd)
        return fd

    def w_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        if isinstance(file, (str, bytes, os.PathLike)) and any(c in mode for c in "wax+") and \
                counter.event(file):
            counter.die()                            # the file exists, empty
        return handle

    os.fsync, os.ftruncate, os.write, os.open, builtins.open = (w_fsync, w_ftruncate, w_write,
                                                                 w_os_open, w_open)
    original_close = os.close

    def w_close(fd):
        files.discard(fd)
        return original_close(fd)
    os.close = w_close


def run_child(args, run, kill_at, err_path):
    """train.py `args` in a forked child; returns (exit status, events counted, killed)."""
    count_path = err_path + ".count"
    pid = os.fork()
    if pid == 0:
        err = os.open(err_path, os.O_WRONLY | os.O_TRUNC)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(err, 2)
        counter = Counter(run, kill_at)
        code = 0
        try:
            if kill_at is not None:
                install(counter)
            sys.argv = [os.path.join(ROOT, "train.py"), *args]
            runpy.run_path(sys.argv[0], run_name="__main__")
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            if not isinstance(exit_.code, int) and exit_.code is not None:
                print(exit_.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - a traceback, as in its own process
            traceback.print_exc()
            code = 1
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        fd = os.open(count_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.write(fd, str(counter.count).encode())
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    count = None
    if os.path.exists(count_path):
        with open(count_path) as fh:
            count = int(fh.read())
        os.remove(count_path)
    return os.waitstatus_to_exitcode(status), count, killed


def digest(run):
    """What a finished run folder holds: every file's path with the SHA-256 of its bytes (the
    metrics log without its timing figures, trainer_state.pt by its tensors and step, .lock by
    name only), so two runs compare equal exactly when they hold the same files and results."""
    out = {}
    for root, dirs, files in os.walk(run):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, run)
            if name in UNSTABLE:
                out[rel] = "present"
            elif name in ("metrics.jsonl", "samples.jsonl"):
                with open(path) as fh:
                    lines = [line for line in fh if line.strip()]
                try:
                    rows = [json.loads(line) for line in lines]
                except ValueError:
                    out[rel] = "damaged: " + "".join(lines)[-200:]
                    continue
                out[rel] = [{k: v for k, v in r.items() if not k.startswith(TIMING)} for r in rows]
            elif name == "manifest.json" or rel == "config.json" or (
                    name in ("trainer_state.pt", "config.json")
                    and "checkpoints" in rel.split(os.sep)):
                out[rel] = "present"             # holds the command's --resume; weights compared
            elif name == "adapter_config.json":  # peft writes target_modules from a set
                with open(path) as fh:
                    fields = json.load(fh)
                fields["target_modules"] = sorted(fields.get("target_modules") or [])
                out[rel] = fields
            else:
                with open(path, "rb") as fh:
                    out[rel] = hashlib.sha256(fh.read()).hexdigest()
    return out


def main():
    spec = json.load(sys.stdin)
    command, run = spec["command"], spec["run"]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        err_path = os.path.join(tmp, "err")
        open(err_path, "w").close()
        if spec["points"] is None:
            rc, count, _ = run_child(command, run, 0, err_path)
            with open(err_path) as fh:
                results.append({"rc": rc, "events": count, "stderr": fh.read()[-3000:],
                                "digest": digest(run)})
            json.dump(results, sys.__stdout__)
            return
        for point in spec["points"]:
            shutil.rmtree(run, ignore_errors=True)
            rc, _, killed = run_child(command, run, point, err_path)
            record = {"point": point, "killed": killed, "first_rc": rc, "recovery": []}
            for _ in range(4 if killed else 0):
                has_checkpoint = os.path.isdir(os.path.join(run, "checkpoints")) and any(
                    n.startswith("step-") for n in os.listdir(os.path.join(run, "checkpoints")))
                args = ["--resume", run] if has_checkpoint else command
                rc, _, _ = run_child(args, run, None, err_path)
                with open(err_path) as fh:
                    record["recovery"].append({"resume": has_checkpoint, "rc": rc,
                                               "stderr": fh.read()[-2000:]})
                if rc == 0:
                    break
            record["digest"] = digest(run) if os.path.isdir(run) else {}
            results.append(record)
    json.dump(results, sys.__stdout__)


if __name__ == "__main__":
    main()
