"""Checkpoints that survive crashes: an ordinary transformers folder (safetensors + tokenizer + config) that
transformers and vLLM load as is, plus trainer_state.pt (optimizer, RNG states, data position, step).

Atomic: everything is written into a hidden temporary folder next to the target, flushed, then renamed into place
(rename is atomic on POSIX), and only then does `latest` (a small text file, replaced atomically) point at it. A crash
or Ctrl-C at any moment leaves the previous checkpoint and `latest` intact.
"""
import json
import os
import random
import shutil

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
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def save_checkpoint(run_dir, step, model, tokenizer, trainer_state, keep=2, state_dict=None):
    """Write run_dir/checkpoints/step-XXXXXX atomically and point run_dir/checkpoints/latest at it.
    state_dict: the full weights when the model itself holds only shards (FSDP)."""
    root = os.path.join(run_dir, "checkpoints")
    os.makedirs(root, exist_ok=True)
    name = f"step-{step:06d}"
    final = os.path.join(root, name)
    tmp = os.path.join(root, f".tmp-{name}")
    shutil.rmtree(tmp, ignore_errors=True)
    # With LoRA (peft) this writes the adapter (adapter_config.json names the base model; transformers loads it
    # with peft installed); train.py also exports merged weights at the end of a run.
    model.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)
    tokenizer.save_pretrained(tmp)
    torch.save(trainer_state, os.path.join(tmp, STATE_FILE))
    _fsync_tree(tmp)
    if os.path.exists(final):                    # re-saving the same step (e.g. after a resume): replace it
        shutil.rmtree(final)
    os.rename(tmp, final)
    write_text_atomic(os.path.join(root, "latest"), name + "\n")
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(os.path.join(root, old), ignore_errors=True)
    return final


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


def truncate_jsonl(path, last_step):
    """Drop lines logged after `last_step` (a crash after logging but before checkpointing), so a resumed run's
    metrics.jsonl reads exactly like an uninterrupted one."""
    if not os.path.exists(path):
        return
    with open(path) as fh:
        kept = [line for line in fh if line.strip() and json.loads(line).get("step", 0) <= last_step]
    write_text_atomic(path, "".join(kept))
