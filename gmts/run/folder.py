"""The run folder: one owner, one run, nothing lost or mixed.

    exit_on_interrupt("train.py")                  # Ctrl-C / SIGTERM during start-up: one line, not
                                                   # a traceback
    cfg, resume_from, state = check_start(argv)    # every check, before anything loads or is
                                                   # written
    claim(cfg, start_step)                         # the first write into --output-dir
                                                   # (gmts/run/build.py)

check_start reads and never writes: every flag (gmts/run/validate.py, via parse_config), the
checkpoint to resume (the newest intact one: gmts/run/checkpoint.py), the flags a resume may not
change, and the output folder: creatable and writable, not owned by a live process, holding no run
unless the command continues that very run or passes --overwrite. Then train.py loads data and
model, and only then does claim() write anything.

Ownership. claim() takes an exclusive flock on DIR/.lock (its pid and host written inside) and keeps
it until the process ends. The kernel releases a flock when its process dies, however it dies (kill
-9 included), so a crash never leaves a stale lock; the .lock file itself stays and means nothing
without a live holder. Every check on what the folder holds is made again under the lock, so that of
two processes started into one empty folder exactly one proceeds and the other ends in one line
naming the first's pid. Under torchrun only rank 0 claims (build_run calls claim on the main process
only). Deleting a run (--overwrite), cleaning leftovers of interrupted writes, moving a damaged
checkpoint aside and cutting the logs back to the checkpoint all happen under the lock, never
before.

What counts as a run: metrics.jsonl, samples.jsonl, checkpoints/ or final-merged/. A lone
config.json (train.py's) is the trace of a start that stopped before its first step (an
out-of-memory step 1, Ctrl-C, a bad --report-to backend): the next start replaces it, so the
corrected command is never refused for it. A folder that holds something else train.py would
overwrite (a model's config.json, weights) is not a run folder and is refused.

A run's history is one line. `latest` is its head; `--resume RUN` continues from it. `--resume
RUN/checkpoints/ step-N` in place is a rewind: what the run holds after step N (the later
checkpoints, their metrics.jsonl and samples.jsonl lines, a final-merged/ export) is moved, under
the lock, to RUN/abandoned/after-step-N/ (.1, .2 ... when taken), so checkpoints, `latest`, the logs
and the exports all end at step N and nothing is deleted. To keep both futures, branch instead:
--resume RUN/checkpoints/step-N --output-dir NEW.
"""
import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import sys
import time

from gmts.run.machine import code_reward_env_problem, launcher_problem, main_process
from gmts.run.paths import context_problem, output_path_problem
from gmts.run.validate import UsageError

LOCK = ".lock"
LOCK_NOTE = ("That process owns this run folder while it runs: it holds an flock on this file, "
             "which the system releases when the process ends, however it ends. Once it has ended "
             "the file means nothing (keep it or delete it); never delete it while the process "
             "runs.\n")

# Flags a resumed run may change: how the batch is computed, how long the run goes, what is logged
# and kept. Every other flag defines the experiment (model, data and its order, the method, the
# optimiser): changing one mid-run would make one run out of two experiments, so resume refuses it.
RESUMABLE = {"steps", "micro_batch_size", "micro_batch_tokens", "rollout_batch_size", "chunk_size",
             "gradient_checkpointing", "device",
             "dtype", "save_every", "keep_checkpoints", "log_samples", "eval_every", "eval_data",
             "eval_limit", "eval_samples", "eval_temperature", "eval_max_rows", "max_bad_steps",
             "output_dir",
             "resume", "overwrite", "report_to", "compile", "deterministic", "log_grad_noise"}

# The files of a run in its folder; a fresh run must not mix its files with these.
RUN_FILES = ("metrics.jsonl", "samples.jsonl", "config.json", "checkpoints", "final-merged")

# What a model folder holds (and a run folder never does at its top): train.py would overwrite or
# mix with it.
MODEL_FILES = (".safetensors", ".bin", ".gguf", "tokenizer.json", "tokenizer_config.json",
               "adapter_config.json")

# flock's errors on a file system without locks (NFS without lockd, some FUSE mounts).
NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)

# Flags that may name a local file or folder (or else a hub id / built-in source). A fresh run
# stores them as absolute paths, so a resume from another working directory reads the same files,
# and a resume compares them resolved: --data ./d.jsonl and --data d.jsonl are one file.
PATH_FLAGS = ("model", "tokenizer", "data")


def _note(message):
    if main_process():
        print(f"gmts: {message}", file=sys.stderr, flush=True)


def exit_on_interrupt(prog, note=""):
    """SIGINT (Ctrl-C) or SIGTERM ends the process with one line,
    `prog: interrupted (Ctrl-C); note`, and status 128 + signal, instead of a traceback through
    whatever was importing or loading.
    train.py's note: nothing was trained, and what a start writes before step 1 (the lock,
    config.json) never blocks the same command run again; gmts/run/signals.py's StopRequest takes
    the signals over when training starts. eval.py and gmts.tools write their results last and
    atomically, so what is on disk is whole or absent."""
    def stop(signum, _frame):
        # a second signal: the default, at once
        signal.signal(signum, signal.SIG_DFL)
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        print(f"\n{prog}: interrupted ({name}){'; ' + note if note else ''}", file=sys.stderr,
              flush=True)
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        # os._exit, not SystemExit: code that catches everything (transformers' lazy import turns
        # a SystemExit into a ModuleNotFoundError) would go on to print a second, false error
        os._exit(128 + signum)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)


class WatchedStdout:
    """sys.stdout, remembering the OSError of a failed write (a full disk behind `> log`, a closed
    pipe), so that train.py can tell that error from any other and end in one line
    (stdout_failed)."""

    def __init__(self, stream):
        self.stream, self.error = stream, None

    def write(self, text):
        try:
            return self.stream.write(text)
        except OSError as err:
            self.error = self.error or err
            raise

    def flush(self):
        try:
            return self.stream.flush()
        except OSError as err:
            self.error = self.error or err
            raise

    def __getattr__(self, name):
        return getattr(self.stream, name)


def stdout_failed(err, prog="train.py"):
    """When `err` came from writing to stdout (sys.stdout a WatchedStdout), print one line on stderr
    and return True; stdout is pointed at /dev/null, so the interpreter's last flush says nothing
    more. Checkpoints and the run's logs are written apart from stdout and stay whole."""
    if getattr(sys.stdout, "error", None) is not err:
        return False
    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.stdout = sys.stdout.stream
    print(f"{prog}: error: writing to stdout failed ({err.strerror or err}); the run folder's "
          "checkpoints and logs are whole: once stdout can be written, run again (--resume "
          "--output-dir's folder if it holds a checkpoint)", file=sys.stderr, flush=True)
    return True


# --------------------------------------------------------------------------------------------------
# What a folder holds, and who owns it.

def run_files(path):
    return [f for f in RUN_FILES if os.path.exists(os.path.join(path, f))]


# what checkpoints/ may hold in a run that never completed a checkpoint: an interrupted first
# write (gmts/run/checkpoint.py's order: `latest` is written before the folder's rename)
NO_CHECKPOINT_YET = ("latest", "latest.tmp", ".tmp-step-", ".old-step-")


def restartable(path, cfg):
    """Whether the run in `path` stopped before its first checkpoint (logs, config.json and at most
    an interrupted first checkpoint write; no export, nothing set aside) and config.json records
    this very command's configuration: the same command starts it over, dropping the log lines of
    the steps it does again. A folder without config.json, or recording another run, is not."""
    from gmts.run.config import to_dict
    root = os.path.join(path, "checkpoints")
    if os.path.isdir(root) and any(not n.startswith(NO_CHECKPOINT_YET) for n in os.listdir(root)):
        return False
    if any(os.path.exists(os.path.join(path, n)) for n in ("final-merged", "abandoned")):
        return False
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as fh:
            written = json.load(fh)
    except (OSError, ValueError):
        return False
    ours = json.loads(json.dumps(to_dict(cfg)))
    return isinstance(written, dict) and all(
        written.get(k) == ours.get(k) for k in set(written) | set(ours) if k not in NOT_RECORDED)


def holds_run(files):
    """Whether these RUN_FILES make a run (a lone config.json is a start that never completed a
    step)."""
    return bool(files) and files != ["config.json"]


def same_folder(a, b):
    return bool(a and b) and os.path.realpath(os.path.expanduser(a)) == os.path.realpath(
        os.path.expanduser(b))


def run_of(checkpoint):
    """The run folder a checkpoint folder belongs to (RUN/checkpoints/step-N -> RUN), or None
    outside a run."""
    parent = os.path.dirname(os.path.abspath(checkpoint))
    return os.path.dirname(parent) if os.path.basename(parent) == "checkpoints" else None


def resumed_run(resume):
    """The run folder `--resume X` continues: X itself (a run folder), or the run its checkpoint
    folder lies in."""
    from gmts.run.checkpoint import STATE_FILE
    return run_of(resume) if os.path.isfile(os.path.join(resume, STATE_FILE)) else resume


def foreign_files_problem(path):
    """Why the folder `path` is not a run folder train.py may write into (a model's config.json,
    weights or tokenizer files at its top), or None."""
    if not os.path.isdir(path):
        return None
    config = os.path.join(path, "config.json")
    if os.path.isfile(config) and _model_config(config):
        return ("holds a model's config.json (model_type / architectures), not a train.py run's: "
                "train.py would overwrite it; choose another --output-dir")
    found = sorted(n for n in os.listdir(path) if n.endswith(MODEL_FILES))
    if found:
        return (f"holds {found[0]}, a model's file, not a run's (a model folder?); choose another "
                "--output-dir")
    return None


def _model_config(path):
    """Whether the JSON file at `path` is a model's config.json (transformers writes model_type and
    architectures; train.py's never holds either)."""
    try:
        with open(path, encoding="utf-8") as fh:
            fields = json.load(fh)
    except (OSError, ValueError):
        return False
    return isinstance(fields, dict) and ("model_type" in fields or "architectures" in fields)


def _holder(fd):
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 200).decode("utf-8", "replace").strip().split("\n")[0]      # line 1: who
    return text or "a process that has not written its pid yet"


def owner(path):
    """'pid N on HOST' of the live process that owns the run folder `path`, or None. A shared flock
    for an instant (it conflicts with the owner's exclusive one), then released: looking writes
    nothing."""
    # this process owns it (train.main called again)
    if os.path.realpath(path) in _HELD:
        return None
    try:
        fd = os.open(os.path.join(path, LOCK), os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder(fd)
        except OSError as err:
            raise _no_locks(path, err) from None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _no_locks(path, err, prog="train.py"):
    if err.errno in NO_LOCKS:
        return UsageError(prog, f"--output-dir {path}: its file system does not support file locks "
                                f"(flock: {err.strerror or err}; NFS without lockd?), and a run "
                                "folder needs one to have one owner: choose a folder on a local "
                                "disk")
    return UsageError(prog, f"--output-dir {path}: cannot lock {LOCK} ({err.strerror or err})")


def _in_use(prog, path, who):
    return UsageError(prog, f"--output-dir {path} is in use by another train.py ({who}); a run "
                            "folder has one owner: wait for it to finish or stop it, then "
                            "--resume, or choose another --output-dir")


def _local_path(name, value):
    """Whether the flag's value names what its loader would read from the disk: a folder for --model
    / --tokenizer (transformers prefers a local folder to a hub id), a file with a suffix or a
    folder in its name for --data (the built-in names, gsm8k, math ..., win over a file of that name
    in data/)."""
    if not isinstance(value, str) or not value:
        return False
    full = os.path.expanduser(value)
    if name == "data":
        return os.path.isfile(full) and (os.sep in value or "." in os.path.basename(value))
    return os.path.isdir(full)


def _resolved(value):
    full = os.path.expanduser(value) if isinstance(value, str) and value else value
    return os.path.realpath(full) if full and os.path.exists(full) else value


# --------------------------------------------------------------------------------------------------
# Before anything loads: check_start.

def check_start(argv, prog="train.py"):
    """The config train.py runs with, checked whole before anything loads or is written. Returns
    (cfg, checkpoint folder or None, trainer state or None); any problem is a UsageError (one line,
    exit 2)."""
    from gmts.run import checkpoint as ckpt
    from gmts.run.config import (Config, build_parser, parse_config, preset_data_settings,
                                  preset_note, resolve, to_dict)
    # WORLD_SIZE without torchrun, a bad GMTS_CODE_TIME_SCALE or GMTS_SANDBOX_UIDS: one line, not a
    # traceback later
    problem = launcher_problem() or code_reward_env_problem()
    if problem:
        raise UsageError(prog, problem)
    cfg = parse_config(argv)
    explicit = set(vars(build_parser().parse_args(argv)))
    # (parse_config printed it already, unless --resume)
    show = "print_config" in explicit
    explicit.discard("print_config")
    resume_from, state = None, None
    # continuing in place: is the run's owner still at work?
    if cfg.resume and "output_dir" not in explicit:
        who = resumed_run(cfg.resume) and owner(resumed_run(cfg.resume))
        if who:
            raise _in_use(prog, resumed_run(cfg.resume), who)
    if cfg.resume:
        if "overwrite" in explicit and cfg.overwrite:
            raise UsageError(prog, "--overwrite deletes the run in --output-dir and --resume "
                                   "continues one: pass one of them")
        try:
            resume_from, state = ckpt.find_resumable(cfg.resume, report=_note)
        except ckpt.CheckpointError as err:
            hint = ("; the run stopped before its first checkpoint: run its first command again "
                    "(it starts the run over in this folder)"
                    if os.path.isfile(os.path.join(cfg.resume, "config.json")) else "")
            raise UsageError(prog, f"--resume {cfg.resume}: {err}{hint}") from None
        saved = dict(state["config"])
        problem = unknown_settings(saved, f"{resume_from}'s configuration")
        if problem:
            raise UsageError(prog, f"--resume {cfg.resume}: {problem}")
        # a checkpoint outside a run folder has no run record beside it
        if run_of(resume_from):
            record_problem(run_of(resume_from), saved, explicit, prog)
        for name in sorted(explicit - RESUMABLE):
            value = getattr(cfg, name)
            if name in saved and saved[name] != value and not (name in PATH_FLAGS
                                                               and _local_path(name, value)
                                                               and _resolved(saved[name])
                                                               == _resolved(value)):
                raise UsageError(prog, f"--{name.replace('_', '-')} {value!r}: the run in "
                                       f"{cfg.resume} used {saved[name]!r}, and "
                                       f"--{name.replace('_', '-')} cannot change on resume (it "
                                       "defines the experiment); start a new run in a new "
                                       "--output-dir instead")
        # The saved value of a path flag stays (absolute since this version): the explicit one named
        # the same file.
        saved.update({k: getattr(cfg, k) for k in explicit if k in RESUMABLE or k not in saved})
        # an older gmts saved the cpu-demo preset's overwrite=True: never here
        saved["overwrite"] = False
        saved["resume"] = cfg.resume
        if "output_dir" not in explicit:
            if run_of(resume_from) is None:
                raise UsageError(prog, f"--resume {cfg.resume}: this checkpoint is not inside a "
                                       "run folder (RUN/checkpoints/step-N), so there is no run to "
                                       "continue in place; pass --output-dir for the continued run")
            saved["output_dir"] = run_of(resume_from)
        known = set(Config.__dataclass_fields__)
        try:
            cfg = resolve(Config(**{k: v for k, v in saved.items() if k in known}))
        except ValueError as err:
            raise UsageError(prog, err) from None
        # at the run's last step in place: the resume finishes the run (leftovers, the LoRA
        # export: train.py), and trains nothing
        at_end = cfg.steps == state["step"] and same_folder(cfg.output_dir, run_of(resume_from))
        if cfg.steps < state["step"] or (cfg.steps == state["step"] and not at_end):
            raise UsageError(prog, f"--steps {cfg.steps}: {resume_from} is already at step "
                                   f"{state['step']}; pass --steps > {state['step']} to train "
                                   "further")
        # --resume RUN --print-config: what this resume will run, then exit
        if show:
            print(f"# --resume {cfg.resume}: {resume_from}'s configuration with this command's "
                  "flags")
            print(json.dumps(to_dict(cfg), indent=2))
            raise SystemExit(0)
    else:
        # local paths as absolute ones: a resume from anywhere reads them
        for name in PATH_FLAGS:
            value = getattr(cfg, name)
            if _local_path(name, value):
                setattr(cfg, name, os.path.abspath(os.path.expanduser(value)))
    problem = output_path_problem(cfg.output_dir, "folder") or foreign_files_problem(cfg.output_dir)
    if problem:
        raise UsageError(prog, f"--output-dir {cfg.output_dir}: {problem}")
    who = owner(cfg.output_dir)
    if who:
        raise _in_use(prog, cfg.output_dir, who)
    existing = run_files(cfg.output_dir)
    if holds_run(existing) and not cfg.resume and not cfg.overwrite and not restartable(
            cfg.output_dir, cfg):
        raise UsageError(prog, f"--output-dir {cfg.output_dir} already holds a run "
                               f"({', '.join(existing)}); continue it with --resume "
                               f"{cfg.output_dir}, choose a new folder, or pass --overwrite to "
                               "replace it")
    if holds_run(existing) and cfg.resume and not same_folder(cfg.output_dir,
                                                              resumed_run(cfg.resume)):
        raise UsageError(prog, f"--output-dir {cfg.output_dir} holds another run "
                               f"({', '.join(existing)}), and --resume {cfg.resume} would mix the "
                               "two; leave out --output-dir to continue in place, or choose an "
                               "empty folder to branch the run there")
    model_source = resume_from if resume_from and not cfg.lora_rank else cfg.model
    problem = context_problem(cfg.max_new_tokens, model_source)
    if problem:                          # a flag the preset set, not the user, is named as such
        raise UsageError(prog, problem + preset_note(problem, cfg.preset, explicit))
    dropped = [] if cfg.resume else preset_data_settings(cfg.preset, explicit, cfg.data)
    if dropped:                          # said once every check has passed
        _note(f"--data {cfg.data}: --preset {cfg.preset}'s settings for its own data set ("
              + ", ".join("--" + n.replace("_", "-") for n in dropped) + ") are left out; pass "
              "them to use them with it")
    return cfg, resume_from, state


# --------------------------------------------------------------------------------------------------
# The first write: claim.

# {real path of a run folder: its lock's file descriptor}: open, and so the folder owned, until the
# process ends. One process may start several runs in one folder in turn (train.main called twice,
# e.g. bench/gpu_check.py's run and resume): it already owns the folder and keeps its lock.
_HELD = {}


def claim(cfg, start_step, prog="train.py"):
    """Own cfg.output_dir, then make it ready under the lock: the checks of check_start again (the
    folder may have changed while the model loaded), --overwrite's deletion, leftovers of
    interrupted writes removed, damaged checkpoints a resume skipped moved aside as damaged-step-N,
    the logs cut back to the checkpoint's step. Raises UsageError / SystemExit with one line."""
    from gmts.run import checkpoint as ckpt
    path = cfg.output_dir
    if os.path.realpath(path) not in _HELD:
        _lock(path, prog)
    try:
        _prepare(cfg, start_step, path, prog, ckpt)
    except OSError as err:
        raise SystemExit(f"error: --output-dir {path}: {ckpt._one_line(err)} while preparing the "
                         "folder") from None


class Busy(Exception):
    """The lock is held by a live process; its text: 'pid N on HOST'."""


def take_lock(lock_path):
    """An exclusive flock on the file `lock_path` (created if missing) for as long as the returned
    file descriptor stays open, with 'pid N on HOST' written inside. Raises Busy naming the holder,
    or the OSError of a file system without locks. A lock file deleted by its owner while this
    process waited is not a lock: it is opened again (take_lock then holds the file that is
    there)."""
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        # owner() holds a shared lock for an instant, an owner holds its exclusive one for good:
        # retry for ~1 s.
        for _ in range(20):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(0.05)
            except OSError:
                os.close(fd)
                raise
        else:
            who = _holder(fd)
            os.close(fd)
            raise Busy(who)
        try:
            same = os.fstat(fd).st_ino == os.stat(lock_path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)                                 # its owner removed it: take the new one
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n{LOCK_NOTE}".encode(), 0)
    return fd


def _lock(path, prog):
    """Take DIR/.lock's exclusive flock for the rest of this process's life and write the owner
    inside."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise UsageError(prog, f"--output-dir {path}: cannot create it "
                               f"({err.strerror or err})") from None
    try:
        fd = take_lock(os.path.join(path, LOCK))
    except Busy as busy:
        raise _in_use(prog, path, str(busy)) from None
    except OSError as err:
        if err.errno in NO_LOCKS:
            raise _no_locks(path, err, prog) from None
        raise SystemExit(f"error: --output-dir {path}: cannot create or write {LOCK} "
                         f"({err.strerror or err})") from None
    _HELD[os.path.realpath(path)] = fd


def lock_output(output, prog="eval.py"):
    """eval.py: own the result `output` (its summary and per-problem file) through an flock on
    OUTPUT.lock (take_lock) until the returned release() (which removes the file) or the end of the
    process, however it ends. A second evaluation into the same --output is refused in one line
    naming the first's pid."""
    lock_path = output + ".lock"
    # the folders this creates, innermost first: removed again if nothing was written into them
    created, parent = [], os.path.dirname(os.path.abspath(output))
    while parent and not os.path.exists(parent):
        created.append(parent)
        parent = os.path.dirname(parent)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        fd = take_lock(lock_path)
    except Busy as busy:
        raise UsageError(prog, f"--output {output} is being written by another eval.py ({busy}); "
                               "one evaluation per result file: wait for it to finish, or choose "
                               "another --output") from None
    except OSError as err:
        if err.errno in NO_LOCKS:
            raise UsageError(prog, f"--output {output}: its file system does not support file "
                                   f"locks (flock: {err.strerror or err}); choose a folder on a "
                                   "local disk") from None
        raise UsageError(prog, f"--output {output}: cannot create {lock_path} "
                               f"({err.strerror or err})") from None

    def release():
        # removed while held: a process waiting on this file takes the new one (take_lock)
        with contextlib.suppress(OSError):
            os.remove(lock_path)
        os.close(fd)
        with contextlib.suppress(OSError):
            for folder in created:
                os.rmdir(folder)                     # only while empty
    return release


# config.json records the run; the checkpoints hold what it runs. Flags that say nothing about the
# experiment.
NOT_RECORDED = {"resume", "overwrite", "output_dir"}


def unknown_settings(settings, where):
    """None, or why a saved configuration cannot be resumed here: it holds a setting this gmts's
    Config does not have (a newer version's), which a resume would silently drop and config.json
    would be rewritten without."""
    from gmts.run.config import Config
    unknown = sorted(set(settings) - set(Config.__dataclass_fields__))
    if not unknown:
        return None
    name = unknown[0]
    return (f"{where} sets {name} = {settings[name]!r}"
            + (f" (and {len(unknown) - 1} more unknown setting(s))" if len(unknown) > 1 else "")
            + ", a setting this gmts does not know (written by a newer version?); resume it with "
              "the gmts that wrote it, whose run would change without it")


def record_problem(run_dir, saved, explicit, prog="train.py"):
    """config.json against the checkpoint's config (`saved`) before a resume: config.json is what
    gmts wrote, never an input, so a hand edit is not silently dropped. An edit to a flag that
    defines the experiment is refused; one to a flag that may change on resume is said in one line
    (the checkpoint's value stays: pass the flag to change it). A config.json that does not parse is
    refused (the run's record would be lost)."""
    path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(path):
        return
    try:
        with open(path, encoding="utf-8") as fh:
            written = json.load(fh)
        if not isinstance(written, dict):
            raise ValueError(  # noqa: TRY004 - bad data, not a bad argument type
                "not a JSON object")
    except (OSError, ValueError) as err:
        raise UsageError(prog, f"--resume: {path} does not read as the run's configuration "
                               f"({' '.join(str(err).split())}); a resume takes the configuration "
                               "from the checkpoint: restore the file or remove it") from None
    problem = unknown_settings(written, path)
    if problem:
        raise UsageError(prog, f"--resume: {problem}")
    differ = sorted(k for k in written if k in saved and k not in NOT_RECORDED and k not in explicit
                    and written[k] != saved[k]
                    and not (k in PATH_FLAGS and _resolved(written[k]) == _resolved(saved[k])))
    fixed = [k for k in differ if k not in RESUMABLE]
    if fixed:
        name = fixed[0]
        raise UsageError(prog, f"--resume: {path} says {name} = {written[name]!r}, the checkpoint "
                               f"{saved[name]!r}; config.json records the run and is not read back "
                               f"(hand-edited?), and --{name.replace('_', '-')} defines the "
                               "experiment: restore config.json, or start a new run with the new "
                               "value")
    if differ:
        _note(f"{path} differs from the checkpoint's configuration in "
              + ", ".join(
                  f"{k} ({written[k]!r} there, {saved[k]!r} in the checkpoint)" for k in differ)
              + "; the resume runs the checkpoint's values (config.json is rewritten): pass "
              + ", ".join(f"--{k.replace('_', '-')}" for k in differ) + " to change them")


def _prepare(cfg, start_step, path, prog, ckpt):
    """Under the lock: what the folder holds now (not what it held when check_start looked), then
    the changes."""
    problem = foreign_files_problem(path)
    if problem:
        raise UsageError(prog, f"--output-dir {path}: {problem}")
    existing = run_files(path)
    if not cfg.resume:
        if holds_run(existing) and not cfg.overwrite and restartable(path, cfg):
            # this command's own run, stopped before its first checkpoint: start it over
            for name in ("metrics.jsonl", "samples.jsonl"):
                ckpt.truncate_jsonl(os.path.join(path, name), 0)
            latest = os.path.join(path, "checkpoints", "latest")
            if os.path.exists(latest):
                os.remove(latest)
            _note(f"{path} holds this command's run, stopped before its first checkpoint: it "
                  "starts over (its log lines are written again)")
        # another start got here first and has finished
        elif holds_run(existing) and not cfg.overwrite:
            raise UsageError(prog, f"--output-dir {path} already holds a run "
                                   f"({', '.join(existing)}), written while this start was "
                                   "loading; continue it with --resume, or choose a new folder")
        elif holds_run(existing):
            ckpt.remove_run(path)
            _note(f"--overwrite: removed the previous run's {', '.join(existing)} from {path}")
        elif existing:
            _note(f"replacing {path}/config.json, left by a start that never completed a step")
    else:
        run = resumed_run(cfg.resume)
        if not same_folder(path, run):
            if holds_run(existing):
                raise UsageError(prog, f"--output-dir {path} holds another run "
                                       f"({', '.join(existing)}), written while this start was "
                                       f"loading; --resume {cfg.resume} would mix the two")
        else:
            _cut_history(cfg, start_step, path, prog, ckpt)
            # checkpoints beyond --keep-checkpoints (a kill before a save's prune)
            removed = ckpt.prune(path, start_step, cfg.keep_checkpoints)
            if removed:
                _note(f"removed {', '.join(removed)}: older than the {cfg.keep_checkpoints} "
                      "checkpoint(s) --keep-checkpoints keeps")
    removed = [n for n in ckpt.clean_leftovers(path) if n != "config.json.tmp"]
    if removed:
        _note(f"removed leftovers of an interrupted write or prune: {', '.join(removed)}")
    if start_step and not (cfg.resume and same_folder(path, resumed_run(cfg.resume))):
        # a branch into an empty folder: nothing to cut
        for name in ("metrics.jsonl", "samples.jsonl"):
            ckpt.truncate_jsonl(os.path.join(path, name), start_step)


def _cut_history(cfg, start_step, path, prog, ckpt):
    """A resume in place: the run's history ends at start_step. Damaged checkpoints after it are
    moved aside as damaged-step-N; intact ones (a rewind, or a checkpoint renamed in place but not
    yet in `latest` by a crash) and a final-merged/ exported after it go to
    RUN/abandoned/after-step-N/ with their metrics and samples lines; `latest` names the checkpoint
    resumed."""
    # --resume RUN: follows latest
    in_place = not os.path.isfile(os.path.join(cfg.resume, ckpt.STATE_FILE))
    head = ckpt.step_of(ckpt.latest_name(path) or "")
    later = []
    for name in ckpt.newer_checkpoints(path, start_step):
        problem = ckpt.checkpoint_problem(os.path.join(path, "checkpoints", name),
                                          report=lambda _: None)
        if problem:
            target = ckpt.move_aside(path, name)
            _note(f"kept the damaged checkpoint {name} aside as {os.path.basename(target)} "
                  f"({problem})")
        elif in_place and (head is None or ckpt.step_of(name) <= head):
            # latest moved past the checkpoint check_start chose: another start ran meanwhile
            raise UsageError(prog, f"--resume {cfg.resume}: {name} was written while this start "
                                   "was loading; run the command again to continue from it")
        elif _kept_in_abandoned(path, name, ckpt):
            # the same weights are set aside already: one copy of a step, not one per rewind
            ckpt._discard(os.path.join(path, "checkpoints"), name)
            _note(f"removed {name}: abandoned/ keeps a copy with the same weights")
        else:
            later.append(name)
    merged = os.path.join(path, ckpt.MERGED)
    export_later = os.path.isdir(merged) and export_step(merged) != start_step
    name = f"step-{start_step:06d}"
    if later or export_later:
        target = ckpt.free_name(os.path.join(path, ckpt.ABANDONED, f"after-{name}"))
        os.makedirs(os.path.join(target, "checkpoints"))
        for later_name in later:
            os.rename(os.path.join(path, "checkpoints", later_name),
                      os.path.join(target, "checkpoints", later_name))
        if export_later:
            os.rename(merged, os.path.join(target, ckpt.MERGED))
        for log in ("metrics.jsonl", "samples.jsonl"):
            ckpt.truncate_jsonl(os.path.join(path, log), start_step,
                                dropped_to=os.path.join(target, log))
        _note(f"rewound to {name}: moved what the run held after it ("
              + ", ".join(later + ([ckpt.MERGED] if export_later else []) + ["their log lines"])
              + f") to {target}; the run continues from {name}")
    else:
        for log in ("metrics.jsonl", "samples.jsonl"):
            ckpt.truncate_jsonl(os.path.join(path, log), start_step)
    if os.path.isdir(os.path.join(path, "checkpoints", name)) and ckpt.latest_name(path) != name:
        ckpt.write_text_atomic(os.path.join(path, "checkpoints", "latest"), name + "\n")


def _kept_in_abandoned(path, name, ckpt):
    """Whether RUN/abandoned/*/checkpoints/ holds checkpoint `name` with the same weight files
    (their sizes and SHA-256 in both manifests)."""
    def weights(folder):
        try:
            listed = ckpt.read_manifest(folder)
        except ValueError:
            return None
        return {rel: v for rel, v in listed.items() if rel.endswith(".safetensors")} or None
    ours = weights(os.path.join(path, "checkpoints", name))
    root = os.path.join(path, ckpt.ABANDONED)
    return ours is not None and os.path.isdir(root) and any(
        weights(os.path.join(root, d, "checkpoints", name)) == ours for d in os.listdir(root))


def export_step(merged):
    """The step a final-merged/ export was made at (its gmts_export.json), or None (unknown: an
    older gmts)."""
    try:
        with open(os.path.join(merged, "gmts_export.json"), encoding="utf-8") as fh:
            step = json.load(fh).get("step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) else None
