"""Checkpoints that survive crashes: an ordinary transformers folder (safetensors + tokenizer + config) that
transformers and vLLM load as is, plus trainer_state.pt (optimizer, RNG states, data position, step).

Atomic: everything is written into a hidden temporary folder next to the target, flushed, then renamed into place
(rename is atomic on POSIX), and only then does `latest` (a small text file, replaced atomically) point at it. A crash
or Ctrl-C at any moment leaves the previous checkpoint and `latest` intact; a failed write (a full disk) is one line.

Resume (find_resumable) takes the newest checkpoint whose files are whole (every .safetensors ends where its header
says, trainer_state.pt loads): a damaged one is reported in one line and skipped, never deleted. clean_leftovers
removes what interrupted writes and prunes leave behind (.tmp-step-*, .old-step-*).
"""
import contextlib
import json
import os
import random
import shutil
import sys

import numpy as np
import torch

STATE_FILE = "trainer_state.pt"


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state(generator):
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "sampler": generator.get_state()}


def set_rng_state(state, generator):
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    generator.set_state(state["sampler"])


def _fsync_tree(path):
    for root, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb") as fh:
                os.fsync(fh.fileno())


def write_text_atomic(path, text):
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


class CheckpointError(Exception):
    """A checkpoint that cannot be written or resumed from; its text is one line."""


def save_checkpoint(run_dir, step, model, tokenizer, trainer_state, keep=2, state_dict=None):
    """Write run_dir/checkpoints/step-XXXXXX atomically and point run_dir/checkpoints/latest at it.
    state_dict: the full weights when the model itself holds only shards (FSDP).

    A failed write (a full disk) removes its temporary folder and raises SystemExit with one line; the previous
    checkpoints and `latest` are untouched. Folders being replaced or pruned are first renamed to .old-step-*
    (atomic), so a kill mid-delete leaves a leftover that clean_leftovers removes, never a half checkpoint. A
    damaged checkpoint at the same step (one a resume skipped) is renamed to damaged-step-* and kept."""
    root = os.path.join(run_dir, "checkpoints")
    name = f"step-{step:06d}"
    final = os.path.join(root, name)
    tmp = os.path.join(root, f".tmp-{name}")
    try:
        os.makedirs(root, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        # With LoRA (peft) this writes the adapter (adapter_config.json names the base model; transformers loads it
        # with peft installed); train.py also exports merged weights at the end of a run.
        model.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)
        tokenizer.save_pretrained(tmp)
        torch.save(trainer_state, os.path.join(tmp, STATE_FILE))
        _fsync_tree(tmp)
        if os.path.exists(final):                    # re-saving the same step (e.g. after a resume): replace it
            if checkpoint_problem(final):            # ... but a damaged one is kept aside, never deleted
                os.rename(final, _free_name(os.path.join(root, f"damaged-{name}")))
            else:
                _discard(root, name)
        os.rename(tmp, final)
        write_text_atomic(os.path.join(root, "latest"), name + "\n")
    except (OSError, RuntimeError) as err:          # torch.save reports a full disk as RuntimeError
        shutil.rmtree(tmp, ignore_errors=True)
        kept = list_checkpoints(run_dir)
        raise SystemExit(f"error: writing checkpoint {final} failed ({_one_line(err)}); "
                         + (f"the last checkpoint {os.path.join(root, kept[-1])} is intact" if kept
                            else "no earlier checkpoint")) from None
    for old in list_checkpoints(run_dir)[:-keep]:
        _discard(root, old)
    return final


def _one_line(err):
    return " ".join(str(getattr(err, "strerror", None) or err).split()) + (
        f": {err.filename}" if getattr(err, "filename", None) else "")


def _free_name(path):
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


def list_checkpoints(run_dir):
    root = os.path.join(run_dir, "checkpoints")
    if not os.path.isdir(root):
        return []
    return sorted(d for d in os.listdir(root) if d.startswith("step-") and os.path.isfile(os.path.join(root, d, STATE_FILE)))


def find_checkpoint(path):
    """A checkpoint folder, or a run directory (its `latest`). Raises SystemExit with a clear message otherwise."""
    if os.path.isfile(os.path.join(path, STATE_FILE)):
        return path
    latest = os.path.join(path, "checkpoints", "latest")
    if os.path.isfile(latest):
        with open(latest) as fh:
            candidate = os.path.join(path, "checkpoints", fh.read().strip())
        if os.path.isfile(os.path.join(candidate, STATE_FILE)):
            return candidate
    found = list_checkpoints(path)
    if found:
        return os.path.join(path, "checkpoints", found[-1])
    raise SystemExit(f"error: --resume {path!r}: no checkpoint there (expected {STATE_FILE} in it or in "
                     f"{os.path.join(path, 'checkpoints', 'step-*')})")


def load_trainer_state(checkpoint_dir):
    return torch.load(os.path.join(checkpoint_dir, STATE_FILE), map_location="cpu", weights_only=False)


def safetensors_problem(path):
    """Why the .safetensors file at `path` is not whole (empty, truncated, a bad header), or None. Reads the
    header only: 8 bytes of length, the JSON header, then every tensor's bytes, which must end where the file does."""
    size = os.path.getsize(path)
    if size < 8:
        return f"{os.path.basename(path)} is empty" if size == 0 else f"{os.path.basename(path)} is truncated"
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        if n > size - 8:
            return f"{os.path.basename(path)} is truncated ({size} bytes, header alone says {n + 8})"
        try:
            header = json.loads(fh.read(n))
        except ValueError:
            return f"{os.path.basename(path)} has a damaged header"
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    if size != 8 + n + end:
        return f"{os.path.basename(path)} is truncated ({size} of {8 + n + end} bytes)"
    return None


def checkpoint_problem(folder):
    """Why `folder` cannot be resumed from (missing or damaged files), or None; reads headers only."""
    if not os.path.isfile(os.path.join(folder, STATE_FILE)):
        return f"no {STATE_FILE}"
    if os.path.getsize(os.path.join(folder, STATE_FILE)) == 0:
        return f"{STATE_FILE} is empty"
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
    """(checkpoint folder, trainer state) to resume from: `path` itself when it is a checkpoint folder, else the
    newest checkpoint of the run directory `path` that loads. A damaged checkpoint of a run directory is reported
    (one line through `report`) and skipped, never deleted. Raises CheckpointError when there is nothing to load."""
    if os.path.isfile(os.path.join(path, STATE_FILE)):
        candidates, run = [path], False
    else:
        root = os.path.join(path, "checkpoints")
        names = sorted((d for d in os.listdir(root) if d.startswith("step-")), reverse=True) \
            if os.path.isdir(root) else []
        candidates, run = [os.path.join(root, d) for d in names], True
        if not candidates:
            raise CheckpointError(f"no checkpoint there (expected {STATE_FILE} in it or in "
                                  f"{os.path.join(root, 'step-*')})")
    skipped = []
    for folder in candidates:
        problem = checkpoint_problem(folder)
        if problem is None:
            try:
                return folder, load_trainer_state(folder)
            except Exception as err:         # a damaged pickle/zip raises many kinds of errors
                problem = f"{STATE_FILE} does not load ({type(err).__name__}: {' '.join(str(err).split())[:200]})"
        if not run:
            raise CheckpointError(f"the checkpoint is damaged: {problem}")
        report(f"skipping damaged checkpoint {folder}: {problem}")
        skipped.append(os.path.basename(folder))
    raise CheckpointError(f"no checkpoint there loads ({', '.join(skipped)} are damaged)")


def clean_leftovers(run_dir):
    """Remove what interrupted writes and prunes leave in run_dir/checkpoints (.tmp-step-*, .old-step-*,
    latest.tmp); never a step-* folder. Returns the names removed."""
    root = os.path.join(run_dir, "checkpoints")
    if not os.path.isdir(root):
        return []
    removed = []
    for name in sorted(os.listdir(root)):
        if name.startswith((".tmp-step-", ".old-step-")) or name == "latest.tmp":
            target = os.path.join(root, name)
            if os.path.isdir(target):
                shutil.rmtree(target, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.remove(target)
            removed.append(name)
    return removed


def remove_run(run_dir):
    """--overwrite: delete the run files of run_dir (logs, config, checkpoints), nothing else in it."""
    for name in ("metrics.jsonl", "samples.jsonl", "config.json"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(run_dir, name))
    shutil.rmtree(os.path.join(run_dir, "checkpoints"), ignore_errors=True)


def truncate_jsonl(path, last_step):
    """Drop lines logged after `last_step` (a crash after logging but before checkpointing), so a resumed run's
    metrics.jsonl reads exactly like an uninterrupted one. A torn line (a write cut short by a crash or a full disk)
    is dropped too, and reported."""
    if not os.path.exists(path):
        return
    kept, torn = [], 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                torn += 1
                continue
            if not line.endswith("\n"):
                line += "\n"
            if not isinstance(row, dict) or row.get("step", 0) <= last_step:
                kept.append(line)
    if torn:
        print(f"gmts: {path}: dropped {torn} torn line(s) left by an interrupted write", file=sys.stderr)
    try:
        write_text_atomic(path, "".join(kept))
    except OSError as err:
        raise SystemExit(f"error: could not rewrite {path} ({_one_line(err)}); it is unchanged") from None
