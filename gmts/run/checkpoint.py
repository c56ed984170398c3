"""Checkpoints that survive crashes: an ordinary transformers folder (safetensors + tokenizer +
config) that transformers and vLLM load as is, plus trainer_state.pt (optimizer, RNG states, data
position, step).

Atomic: everything is written into a hidden temporary folder next to the target, flushed, then
renamed into place (rename is atomic on POSIX), and only then does `latest` (a small text file,
replaced atomically) point at it. A crash or Ctrl-C at any moment leaves the previous checkpoint and
`latest` intact; a failed write (a full disk) is one line.

Verified: the last file written into a checkpoint is manifest.json, every other file's size and
SHA-256. A checkpoint is trusted only when every file it lists is there with that size and hash
(checkpoint_problem), so a truncated config.json, generation_config.json, tokenizer file or a
flipped byte in the weights is found before anything loads. Checkpoints written before manifests
existed are checked by structure instead (every .safetensors ends where its header says, every .json
parses, trainer_state.pt loads) and said so in one line: the text files of those
(chat_template.jinja, ...) cannot be verified.

Resume (find_resumable) takes the newest checkpoint that is whole: a damaged one is reported in one
line and skipped, never deleted (gmts/run/folder.py moves it aside as damaged-step-N once it owns
the folder). clean_leftovers removes what interrupted writes and prunes leave behind (.tmp-step-*,
.old-step-*, .tmp-final-merged, .old-final-merged, *.tmp files).

`latest` names a new checkpoint before its folder is renamed into place: a kill between the two
leaves `latest` naming no folder (a resume takes the newest intact one before it, and the step is
done again), never an intact checkpoint that is not in the run's history.
"""
import contextlib
import copy
import errno
import hashlib
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time

import numpy as np
import torch

from gmts.run.config import to_dict
from gmts.trainer import distributed

STATE_FILE = "trainer_state.pt"
# RUN/abandoned/after-step-N: what a rewind to step N set aside (gmts/run/folder.py)
ABANDONED = "abandoned"
MERGED = "final-merged"         # LoRA: the merged export at the end of a run (save_merged_lora)
# a checkpoint folder's whole name; 'step-000001 copy' is not one
STEP_NAME = re.compile(r"step-(\d+)")


def step_of(name):
    """The step of a checkpoint folder name (step-000012 -> 12), or None for any other name."""
    match = STEP_NAME.fullmatch(name)
    return int(match.group(1)) if match else None
# {"files": {relative path: {"bytes": n, "sha256": hex}}}, written last
MANIFEST = "manifest.json"


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def deterministic_kernels():
    """PyTorch's deterministic algorithms for this process (train.py --deterministic), before its
    first CUDA matrix product: cuBLAS with a fixed workspace, no atomic-add reductions (embedding
    and index backward), cuDNN without autotuning. Uninitialised memory is then filled with NaN."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = False, True


def rng_state(generator):
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "sampler": generator.get_state()}


def set_rng_state(state, generator):
    """Every random stream of rng_state, also on another device or on fewer GPUs: the CUDA states
    of the GPUs there are now (a process uses its own), the sampler's via restore_generator."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    cuda = (state.get("cuda") or [])[:gpus]
    for index, saved in enumerate(cuda):
        torch.cuda.set_rng_state(saved, index)
    restore_generator(generator, state["sampler"])


def restore_generator(generator, saved):
    """Set `generator` to a saved state. A state of another device type (a CPU run resumed on CUDA
    or back: the CPU's Mersenne Twister state and CUDA's Philox seed and offset differ in size) is
    carried across as a stream seeded from the saved state's bytes: another stream than the old
    device's, but the same one at every resume."""
    if generator.get_state().numel() == saved.numel():
        generator.set_state(saved)
    else:
        digest = hashlib.sha256(saved.numpy().tobytes()).digest()
        generator.manual_seed(int.from_bytes(digest[:8], "little"))
        print(f"resume: a random stream was saved on another device type than {generator.device}; "
              "it continues as a new stream seeded from the saved one (samples differ from the "
              "uninterrupted run)", flush=True)


def _fsync_tree(path):
    for root, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb") as fh:
                os.fsync(fh.fileno())


def write_text_atomic(path, text, unique=False):
    """Write `path` whole or not at all: a temporary file beside it (PATH.tmp, or with unique=True
    a name no other process uses: .NAME.<random>.tmp), fsynced, then renamed into place."""
    if unique:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)),
                                   prefix=f".{os.path.basename(path)}.", suffix=".tmp")
        os.close(fd)
    else:
        tmp = f"{path}.tmp"
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def umask_modes(folder):
    """Give every file under `folder` the mode a plain open() would (0o666 less the umask):
    save_pretrained writes model.safetensors 0600 through a private temporary file, the other
    files 0644, and a checkpoint or export others may read should not differ by file."""
    mask = os.umask(0)
    os.umask(mask)
    for root, _, files in os.walk(folder):
        for name in files:
            os.chmod(os.path.join(root, name), 0o666 & ~mask)


class CheckpointError(Exception):
    """A checkpoint that cannot be written or resumed from; its text is one line."""


def save_checkpoint(run_dir, step, model, tokenizer, trainer_state, keep=2, state_dict=None):
    """Write run_dir/checkpoints/step-XXXXXX atomically and point run_dir/checkpoints/latest at it.
    state_dict: the full weights when the model itself holds only shards (FSDP).

    Order: weights, tokenizer, trainer_state.pt, fsync, then manifest.json (sizes and hashes of all
    of them, fsynced), then one rename into place. A failed write (a full disk) removes its
    temporary folder and raises SystemExit with one line naming the last intact checkpoint; the
    previous checkpoints and `latest` are untouched. A folder being replaced or pruned is first
    renamed to .old-step-* (atomic), so a kill mid-delete leaves a leftover that clean_leftovers
    removes, never a half checkpoint. A damaged checkpoint at the same step (one a resume skipped)
    is renamed to a free damaged-step-* name and kept."""
    root = os.path.join(run_dir, "checkpoints")
    name = f"step-{step:06d}"
    final = os.path.join(root, name)
    tmp = os.path.join(root, f".tmp-{name}")
    try:
        os.makedirs(root, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        # With LoRA (peft) this writes the adapter (adapter_config.json names the base model;
        # transformers loads it with peft installed); train.py also exports merged weights at the
        # end of a run.
        model.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)
        tokenizer.save_pretrained(tmp)
        write_state(trainer_state, os.path.join(tmp, STATE_FILE))
        umask_modes(tmp)
        _fsync_tree(tmp)
        write_manifest(tmp)
        trash = None
        # re-saving the same step (e.g. after a resume): replace it
        if os.path.exists(final):
            # ... but a damaged one is kept aside, never deleted
            if checkpoint_problem(final, report=lambda _: None):
                os.rename(final, free_name(os.path.join(root, f"damaged-{name}")))
            else:
                trash = os.path.join(root, f".old-{name}")
                shutil.rmtree(trash, ignore_errors=True)
                os.rename(final, trash)
        # `latest` first: a kill before the rename leaves it naming no folder (the step is done
        # again), never an intact step-N outside the run's history
        write_text_atomic(os.path.join(root, "latest"), name + "\n")
        os.rename(tmp, final)
        if trash:
            shutil.rmtree(trash, ignore_errors=True)
    # OSError; safetensors' SafetensorError and torch.save's RuntimeError on a full disk
    except Exception as err:  # noqa: BLE001
        shutil.rmtree(tmp, ignore_errors=True)
        kept = list_checkpoints(run_dir)
        last = (f"{kept[-1]} is intact ({os.path.join(root, kept[-1])})" if kept
                else "no earlier checkpoint")
        if disk_full(err):
            raise SystemExit(f"error: No space left on device while writing checkpoint {final}; "
                             f"{last}; resume with --resume {run_dir} once there is room") from None
        raise SystemExit(f"error: writing checkpoint {final} failed ({type(err).__name__}: "
                         f"{_one_line(err)}); {last}") from None
    prune(run_dir, step, keep)
    return final


def prune(run_dir, step, keep):
    """Delete the oldest checkpoints before `step` so that `keep` remain with step-N itself; never
    step-N nor anything after it (a rewind has moved those aside). Returns the names deleted."""
    older = [d for d in list_checkpoints(run_dir) if step_of(d) < step]
    doomed = older[:max(0, len(older) - (keep - 1))]
    for old in doomed:
        _discard(os.path.join(run_dir, "checkpoints"), old)
    return doomed


class _RecordingWriter:
    """A file object for torch.save that remembers the OSError of a failed write: torch.save itself
    reports a full disk as RuntimeError("unexpected pos ..."), which does not say why."""

    def __init__(self, fh):
        self.fh, self.error = fh, None

    def write(self, data):
        try:
            return self.fh.write(data)
        except OSError as err:
            self.error = self.error or err
            raise

    def flush(self):
        try:
            return self.fh.flush()
        except OSError as err:
            self.error = self.error or err
            raise


def write_state(trainer_state, path):
    """torch.save(trainer_state, path), raising the OSError (e.g. ENOSPC) itself when the disk
    refused a write."""
    with open(path, "wb") as fh:
        writer = _RecordingWriter(fh)
        try:
            torch.save(trainer_state, writer)
        except RuntimeError:
            if writer.error is not None:
                raise writer.error from None
            raise


FULL_DISK = (errno.ENOSPC, errno.EDQUOT)


def disk_full(err):
    """Whether `err` (or what caused it) is a full disk or quota: an OSError's errno, or the text
    safetensors' Rust writer gives it ("No space left on device (os error 28)")."""
    while err is not None:
        if isinstance(err, OSError) and err.errno in FULL_DISK:
            return True
        if any(f"os error {n})" in str(err) for n in FULL_DISK) or os.strerror(errno.ENOSPC) in str(
            err):
            return True
        err = err.__cause__ or err.__context__
    return False


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(folder):
    out = []
    for root, _, names in os.walk(folder):
        for n in names:
            rel = os.path.relpath(os.path.join(root, n), folder)
            if rel not in (MANIFEST, MANIFEST + ".tmp"):
                out.append(rel)
    return sorted(out)


def write_manifest(folder):
    """manifest.json: every file of `folder` with its size and SHA-256, written atomically and
    last (a checkpoint's, a final-merged/ export's)."""
    files = {
        rel: {"bytes": os.path.getsize(os.path.join(folder, rel)),
              "sha256": _sha256(os.path.join(folder, rel))}
             for rel in _files(folder)}
    write_text_atomic(os.path.join(folder, MANIFEST), json.dumps({"files": files}, indent=1) + "\n")


def read_manifest(folder):
    """{relative path: (bytes, sha256)} of `folder`'s manifest.json; ValueError when it is
    damaged."""
    try:
        with open(os.path.join(folder, MANIFEST)) as fh:
            files = json.load(fh)["files"]
        return {rel: (int(v["bytes"]), str(v["sha256"])) for rel, v in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise ValueError(f"{MANIFEST} is damaged") from None


def manifest_problem(folder, required=STATE_FILE):
    """Why `folder` does not match its manifest.json (a file missing, of another size or hash), or
    None. required: a file the manifest must list (a checkpoint's trainer_state.pt; None: any).
    Sizes first (cheap: a truncation is found without reading), then hashes."""
    try:
        listed = read_manifest(folder)
    except ValueError as err:
        return str(err)
    if required and required not in listed:
        return f"{MANIFEST} does not list {required}"
    for rel, (size, _) in sorted(listed.items()):
        path = os.path.join(folder, rel)
        if not os.path.isfile(path):
            return f"{rel} is missing"
        if os.path.getsize(path) == 0 and size:
            return f"{rel} is empty"
        if os.path.getsize(path) != size:
            return (f"{rel} is truncated or changed ({os.path.getsize(path)} bytes, the manifest "
                    f"says {size})")
    for rel, (_, digest) in sorted(listed.items()):
        if _sha256(os.path.join(folder, rel)) != digest:
            return f"{rel} is damaged (its SHA-256 differs from the manifest's)"
    return None


def _one_line(err):
    return " ".join(str(getattr(err, "strerror", None) or err).split()) + (
        f": {err.filename}" if getattr(err, "filename", None) else "")


def free_name(path):
    """`path`, or path.1, path.2 ... : the first that does not exist (a damaged checkpoint never
    replaces another)."""
    candidate, n = path, 1
    while os.path.exists(candidate):
        candidate, n = f"{path}.{n}", n + 1
    return candidate


def _discard(root, name):
    """Delete a checkpoint folder: rename first (atomic), then remove."""
    trash = os.path.join(root, f".old-{name}")
    shutil.rmtree(trash, ignore_errors=True)
    os.rename(os.path.join(root, name), trash)
    shutil.rmtree(trash, ignore_errors=True)


def step_folders(run_dir):
    """The names of run_dir/checkpoints' folders named step-N, by step (other names are not
    checkpoints)."""
    root = os.path.join(run_dir, "checkpoints")
    if not os.path.isdir(root):
        return []
    return sorted(
        (d for d in os.listdir(root) if step_of(d) is not None
         and os.path.isdir(os.path.join(root, d))),
                  key=step_of)


def list_checkpoints(run_dir):
    """The checkpoints of run_dir (step-N folders with a trainer_state.pt), oldest first."""
    return [d for d in step_folders(run_dir)
            if os.path.isfile(os.path.join(run_dir, "checkpoints", d, STATE_FILE))]


def latest_name(run_dir):
    """The checkpoint name run_dir/checkpoints/latest holds, or None (missing, unreadable, not a
    step-N name)."""
    try:
        with open(os.path.join(run_dir, "checkpoints", "latest"), encoding="utf-8") as fh:
            name = fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return name if step_of(name) is not None else None


def find_checkpoint(path):
    """A checkpoint folder, or a run directory (its `latest`). Raises SystemExit with a clear
    message otherwise."""
    if os.path.isfile(os.path.join(path, STATE_FILE)):
        return path
    latest = latest_name(path)
    if latest and os.path.isfile(os.path.join(path, "checkpoints", latest, STATE_FILE)):
        return os.path.join(path, "checkpoints", latest)
    found = list_checkpoints(path)
    if found:
        return os.path.join(path, "checkpoints", found[-1])
    raise SystemExit(f"error: --resume {path!r}: no checkpoint there (expected {STATE_FILE} in it "
                     f"or in {os.path.join(path, 'checkpoints', 'step-*')})")


def load_trainer_state(checkpoint_dir):
    """trainer_state.pt, memory-mapped: a tensor's bytes are read from the file (MAP_PRIVATE: a
    write changes this process's copy, never the file) only when touched, so each process of a
    torchrun resume reads just its own part of the optimizer state, and the page cache holds the
    file once for all of them."""
    return torch.load(os.path.join(checkpoint_dir, STATE_FILE), map_location="cpu",
                      weights_only=False, mmap=True)


def safetensors_problem(path):
    """Why the .safetensors file at `path` is not whole (empty, truncated, a bad header), or None.
    Reads the header only: 8 bytes of length, the JSON header, then every tensor's bytes, which must
    end where the file does."""
    size = os.path.getsize(path)
    if size < 8:
        return (f"{os.path.basename(path)} is empty" if size == 0
                else f"{os.path.basename(path)} is truncated")
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        if n > size - 8:
            return (f"{os.path.basename(path)} is truncated ({size} bytes, header alone says "
                    f"{n + 8})")
        try:
            header = json.loads(fh.read(n))
        except ValueError:
            return f"{os.path.basename(path)} has a damaged header"
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    if size != 8 + n + end:
        return f"{os.path.basename(path)} is truncated ({size} of {8 + n + end} bytes)"
    return None


def checkpoint_problem(folder, report=print):
    """Why `folder` cannot be trusted (missing or damaged files), or None. With a manifest.json:
    every file it lists, by size and SHA-256. Without one (an older gmts): by structure, and
    `report` says so in one line."""
    if not os.path.isfile(os.path.join(folder, STATE_FILE)):
        return f"no {STATE_FILE}"
    if os.path.isfile(os.path.join(folder, MANIFEST)):
        return manifest_problem(folder)
    problem = structure_problem(folder)
    if problem is None:
        report(f"{folder} has no {MANIFEST} (written by an older gmts): checked by structure only "
               f"(safetensors sizes, JSON files parse, {STATE_FILE} loads); its text files cannot "
               "be verified")
    return problem


def structure_problem(folder):
    """The checks a checkpoint without a manifest allows, reading headers only: trainer_state.pt not
    empty, every .json parses, every .safetensors ends where its header says, every shard the index
    names is there."""
    if os.path.getsize(os.path.join(folder, STATE_FILE)) == 0:
        return f"{STATE_FILE} is empty"
    for name in sorted(f for f in os.listdir(folder) if f.endswith(".json")):
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                json.load(fh)
        except (OSError, ValueError):
            return f"{name} is damaged (not valid JSON: truncated?)"
    weights = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        try:
            with open(index) as fh:
                shards = set(json.load(fh)["weight_map"].values())
        except (ValueError, KeyError, OSError):
            return "model.safetensors.index.json is damaged"
        missing = sorted(shards - set(weights))
        if missing:
            return f"missing weight shard {missing[0]}"
    if not weights:
        return "no *.safetensors weights"
    for name in weights:
        problem = safetensors_problem(os.path.join(folder, name))
        if problem:
            return problem
    return None


def find_resumable(path, report=print):
    """(checkpoint folder, trainer state) to resume from: `path` itself when it is a checkpoint
    folder, else the run directory's head: the checkpoint `latest` names, or the newest one before
    it that loads (checkpoints after `latest` are not the run's history: gmts/run/folder.py sets
    them aside). A damaged checkpoint of a run directory is reported (one line through `report`) and
    skipped, never deleted. Raises CheckpointError when there is nothing to load."""
    if os.path.isfile(os.path.join(path, STATE_FILE)):
        candidates, run = [path], False
    else:
        root = os.path.join(path, "checkpoints")
        names = step_folders(path)[::-1]
        head = latest_name(path)
        if head in names:
            names = names[names.index(head):]
        candidates, run = [os.path.join(root, d) for d in names], True
        if not candidates:
            raise CheckpointError(f"no checkpoint there (expected {STATE_FILE} in it or in "
                                  f"{os.path.join(root, 'step-*')})")
    skipped = []
    for folder in candidates:
        problem = checkpoint_problem(folder, report=report)
        if problem is None:
            try:
                return folder, load_trainer_state(folder)
            # a damaged pickle / zip raises many kinds of errors
            except Exception as err:  # noqa: BLE001
                problem = (f"{STATE_FILE} does not load ({type(err).__name__}: "
                           f"{' '.join(str(err).split())[:200]})")
        if not run:
            raise CheckpointError(f"the checkpoint is damaged: {problem}")
        report(f"skipping damaged checkpoint {folder}: {problem}")
        skipped.append(os.path.basename(folder))
    raise CheckpointError(f"no checkpoint there loads ({', '.join(skipped)} are damaged)")


def newer_checkpoints(run_dir, step):
    """The step-N folders of run_dir after `step` (those a resume from `step` does not continue),
    oldest first."""
    return [d for d in step_folders(run_dir) if step_of(d) > step]


def move_aside(run_dir, name):
    """checkpoints/step-N -> checkpoints/damaged-step-N (or .1, .2 ... when taken): kept, never
    resumed or pruned."""
    root = os.path.join(run_dir, "checkpoints")
    target = free_name(os.path.join(root, f"damaged-{name}"))
    os.rename(os.path.join(root, name), target)
    return target


# what interrupted writes leave at the top of a run folder: an export's temporary or replaced
# folder, config.json's temporary file, a start-up write test (gmts/run/paths.py)
TOP_LEFTOVERS = (f".tmp-{MERGED}", f".old-{MERGED}", "config.json.tmp", ".gmts-write-test-")


def clean_leftovers(run_dir):
    """Remove what interrupted writes and prunes leave in run_dir and run_dir/checkpoints
    (.tmp-step-*, .old-step-*, latest.tmp, TOP_LEFTOVERS); never a step-* folder. Call only while
    owning the folder (gmts/run/folder.py's lock). Returns the names removed."""
    root = os.path.join(run_dir, "checkpoints")
    removed = []
    for name in sorted(os.listdir(run_dir)) if os.path.isdir(run_dir) else []:
        if name.startswith(TOP_LEFTOVERS):
            _remove(os.path.join(run_dir, name))
            removed.append(name)
    if not os.path.isdir(root):
        return removed
    for name in sorted(os.listdir(root)):
        if name.startswith((".tmp-step-", ".old-step-")) or name == "latest.tmp":
            _remove(os.path.join(root, name))
            removed.append(name)
    return removed


def _remove(target):
    if os.path.isdir(target):
        shutil.rmtree(target, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.remove(target)


def remove_run(run_dir):
    """--overwrite: delete the run files of run_dir (logs, config, checkpoints, and the --report-to
    folders, whose event files would otherwise mix two runs in one plot), nothing else in it."""
    for name in ("metrics.jsonl", "samples.jsonl", "config.json"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(run_dir, name))
    for name in ("checkpoints", "tensorboard", "wandb", MERGED, ABANDONED, f".tmp-{MERGED}",
                 f".old-{MERGED}"):
        shutil.rmtree(os.path.join(run_dir, name), ignore_errors=True)


def _stderr(message):
    print(message, file=sys.stderr, flush=True)


def _step_field(row):
    """A log record's step: an int, None for a record without one (kept as it is), or False when it
    is not an int (a hand-edited line: "3", 2.5, true)."""
    if not isinstance(row, dict) or "step" not in row:
        return None
    step = row["step"]
    return step if isinstance(step, int) and not isinstance(step, bool) else False


def truncate_jsonl(path, last_step, note=_stderr, dropped_to=None):
    """Drop lines logged after `last_step` (a crash after logging but before checkpointing), so a
    resumed run's metrics.jsonl reads exactly like an uninterrupted one. dropped_to: a file that
    receives those lines (a rewind keeps them, gmts/run/folder.py) instead of dropping them.

    A torn LAST line (a write cut short by a crash or a full disk) is dropped and reported. A line
    that is not JSON, or whose step is not an integer, anywhere else is not a torn write: the file
    as it was is first copied to PATH.bad-<time> (kept), then that line is dropped from the log and
    reported by its number. Nothing is ever deleted unseen."""
    if not os.path.exists(path):
        return
    with open(path, "rb") as fh:
        raw = fh.read()
    lines = raw.decode("utf-8", errors="replace").splitlines(keepends=True)
    numbered = [(i + 1, line) for i, line in enumerate(lines) if line.strip()]
    kept, torn, bad, later = [], [], [], []
    for n, (lineno, line) in enumerate(numbered):
        try:
            step = _step_field(json.loads(line))
        except ValueError:
            (torn if n == len(numbered) - 1 else bad).append(lineno)
            continue
        if step is False:
            bad.append(lineno)
            continue
        if not line.endswith("\n"):
            line += "\n"
        (kept if step is None or step <= last_step else later).append(line)
    if bad:
        copy = free_name(f"{path}.bad-{time.strftime('%Y%m%dT%H%M%S')}")
        try:
            with open(copy, "wb") as fh:
                fh.write(raw)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as err:
            raise SystemExit(f"error: {path}:{bad[0]} is not JSON, and keeping a copy as {copy} "
                             f"failed ({_one_line(err)}); {path} is unchanged") from None
        note(f"gmts: {path}:{', '.join(map(str, bad))}: not JSON or no integer step (a damaged "
             f"line, not a torn last write); the file as it was is kept in {copy}, and the line is "
             f"left out of {os.path.basename(path)}")
    if torn:
        note(f"gmts: {path}:{torn[0]}: dropped a torn line (the last one, left by an interrupted "
             "write)")
    try:
        if dropped_to and later:
            write_text_atomic(dropped_to, "".join(later))
        write_text_atomic(path, "".join(kept))
    except OSError as err:
        raise SystemExit(f"error: could not rewrite {path} ({_one_line(err)}); "
                         "it is unchanged") from None


# --------------------------------------------------------------------------------------------------
# Saving a run: train.py's checkpoint after a step, and LoRA's merged export at the end.

def save(run, step):
    """A checkpoint of the whole run after `step`, written atomically. Every process's random state
    travels to the one that writes, so a resume continues each stream exactly. Call on every
    process."""
    rngs = distributed.gather_objects((rng_state(run.rollout_gen), run.select_gen.get_state()))
    model_state, optim_state = (distributed.full_state_dicts(run.model, run.optimizer)
                                if run.cfg.fsdp
                                # FSDP: gathered on rank 0
                                else (None, run.optimizer.state_dict()))
    if run.main_process:
        trainer_state = {"step": step, "config": to_dict(run.cfg), "optimizer": optim_state,
                         "rng": [r for r, _ in rngs], "select_rng": [s for _, s in rngs],
                         "data_position": run.stream.position, "world_size": run.world,
                         "fingerprint": run.fingerprint}
        save_checkpoint(run.cfg.output_dir, step, run.model, run.tokenizer, trainer_state,
                             keep=run.cfg.keep_checkpoints, state_dict=model_state)
    distributed.barrier()


def save_merged_lora(run, step):
    """LoRA: plain merged weights beside the checkpoints, for transformers / vLLM, written like a
    checkpoint: into .tmp-final-merged, fsynced, listed in a manifest.json (sizes and SHA-256),
    then renamed into place, with gmts_export.json (the step) inside. An earlier export is renamed
    to .old-final-merged first and removed after (a kill leaves a leftover the next start removes,
    never a half folder). A failed write (a full disk) removes the temporary folder and is one
    line: no final-merged/ without its weights. A kill leaves the run resumable: --resume at the
    last step writes the export (train.py)."""
    merged_dir = os.path.join(run.cfg.output_dir, MERGED)
    tmp = os.path.join(run.cfg.output_dir, f".tmp-{MERGED}")
    trash = os.path.join(run.cfg.output_dir, f".old-{MERGED}")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        copy.deepcopy(run.model).merge_and_unload().save_pretrained(tmp, safe_serialization=True)
        run.tokenizer.save_pretrained(tmp)
        umask_modes(tmp)
        write_text_atomic(os.path.join(tmp, "gmts_export.json"),
                               json.dumps({"step": step}) + "\n")
        _fsync_tree(tmp)
        write_manifest(tmp)
        if os.path.exists(merged_dir):
            shutil.rmtree(trash, ignore_errors=True)
            os.rename(merged_dir, trash)
        os.rename(tmp, merged_dir)
        shutil.rmtree(trash, ignore_errors=True)
    except Exception as err:  # noqa: BLE001 - OSError; safetensors' error on a full disk
        shutil.rmtree(tmp, ignore_errors=True)
        why = ("No space left on device" if disk_full(err)
               else f"{type(err).__name__}: {_one_line(err)}")
        raise SystemExit(f"error: writing the merged LoRA export {merged_dir} failed ({why}); "
                         "nothing was left there, and the adapter checkpoint "
                         f"{find_checkpoint(run.cfg.output_dir)} is intact "
                         "(PeftModel.from_pretrained + merge_and_unload exports it)") from None
