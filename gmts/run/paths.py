"""What a path given on the command line is, read without loading anything: an output folder or
file that can be written, a model folder (not a run folder, not a damaged config.json), and a
model's context length from its config.json."""
import errno
import json
import os
import tempfile


def utf8_problem(value):
    """Why a flag's text cannot be written out (a byte that is not UTF-8, e.g. a Latin-1 file name,
    arrives as a lone surrogate: the checkpoint writers, the JSON records and the summaries would
    fail on it), or None."""
    for text in value if isinstance(value, (list, tuple)) else [value]:
        try:
            str(text).encode("utf-8")
        except UnicodeEncodeError as err:
            return ("holds bytes that are not UTF-8 "
                    f"({os.fsencode(str(text)[err.start:err.end])!r} at character {err.start}), "
                    "which the run's records cannot hold: rename it with UTF-8 characters only")
    return None



def output_path_problem(path, kind):
    """Why `path` (kind "folder" or "file") could not be created or written, or None. Tries a real
    write in the nearest existing folder, so read-only file systems are caught as well as
    permissions."""
    full = os.path.abspath(os.path.expanduser(path))
    problem = _name_problem(full)
    if problem:
        return problem
    if kind == "folder" and os.path.exists(full) and not os.path.isdir(full):
        return "is a file, not a folder"
    if kind == "file" and os.path.isdir(full):
        return "is a folder; give a file name such as results.json"
    probe = full if kind == "folder" else os.path.dirname(full)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return f"{probe} is a file, so nothing can be created under it"
    try:
        _write_test(probe)
    except OSError as err:
        return f"{probe} is not writable ({err.strerror or err})"
    if kind == "file" and os.path.exists(full) and not os.access(full, os.W_OK):
        return "is not writable"
    return None


def _write_test(folder):
    """Create a file in `folder` and remove it (OSError when that fails): an unnamed one
    (O_TMPFILE) where the file system has them, so that a kill leaves nothing behind; else a
    .gmts-write-test-* file, which gmts/run/checkpoint.py's clean_leftovers removes from a run
    folder."""
    try:
        os.close(os.open(folder, getattr(os, "O_TMPFILE", 0) | os.O_WRONLY, 0o600))
        return
    except OSError as err:
        if not hasattr(os, "O_TMPFILE") or err.errno not in (errno.EOPNOTSUPP, errno.EISDIR,
                                                             errno.EINVAL):
            raise
    fd, name = tempfile.mkstemp(dir=folder, prefix=".gmts-write-test-")
    os.close(fd)
    os.unlink(name)


def _name_problem(full):
    """A name the file system cannot hold: bytes that are not UTF-8 (the checkpoint writers and the
    JSON files need text), a component longer than its NAME_MAX, or the whole over PATH_MAX."""
    problem = utf8_problem(full)
    if problem:
        return "the path " + problem
    probe = full
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    try:
        name_max, path_max = os.pathconf(probe, "PC_NAME_MAX"), os.pathconf(probe, "PC_PATH_MAX")
    except (OSError, ValueError):
        return None
    for part in full.split(os.sep):
        if len(os.fsencode(part)) > name_max:
            return (f"the name {part[:40]}... is {len(os.fsencode(part))} bytes, longer than this "
                    f"file system allows ({name_max})")
    if len(os.fsencode(full)) >= path_max:
        return (f"the path is {len(os.fsencode(full))} bytes, longer than this system allows "
                f"({path_max - 1})")
    return None


def run_folder_problem(name_or_path):
    """'is a train.py run folder, ...' when `name_or_path` is one (it has checkpoints/ or
    metrics.jsonl), else None: a run folder passed where a model or tokenizer is expected."""
    path = os.path.expanduser(str(name_or_path))
    if not (os.path.isdir(os.path.join(path, "checkpoints"))
            or os.path.isfile(os.path.join(path, "metrics.jsonl"))):
        return None
    root = os.path.join(path, "checkpoints")
    steps = (sorted(d for d in os.listdir(root) if d.startswith("step-")) if os.path.isdir(root)
             else [])
    return ("is a train.py run folder, not a model: pass one of its checkpoints"
            + (f" (the newest is {os.path.join(path, 'checkpoints', steps[-1])})" if steps else "")
            + f", or continue the run with train.py --resume {path}")


def model_folder_problem(name_or_path):
    """Why the local folder `name_or_path` cannot be a model (a train.py run folder, no config.json,
    a damaged config.json), or None; None too for a hub id or a path that does not exist (load_model
    names those). Reads file names and config.json only: no torch, so the command line says it
    before anything loads. The weights themselves are checked by gmts.trainer.models.load_model (a
    tool such as gmts.tools.memory needs config.json alone)."""
    path = os.path.expanduser(str(name_or_path))
    if os.path.isfile(path):
        return ("is a file, not a model folder: pass the folder that holds config.json and the "
                "weights")
    if not os.path.isdir(path):
        return None
    if run_folder_problem(path):
        return run_folder_problem(path)
    config = os.path.join(path, "config.json")
    if not os.path.isfile(config):
        # a LoRA checkpoint: peft loads it
        if os.path.isfile(os.path.join(path, "adapter_config.json")):
            return None
        return ("no config.json in this folder (a model folder holds config.json and the weights, "
                "*.safetensors, as save_pretrained writes them)")
    try:
        with open(config, encoding="utf-8") as fh:
            fields = json.load(fh)
    except (OSError, ValueError) as err:
        return f"{config} does not read as JSON ({' '.join(str(err).split())}): the file is damaged"
    if not isinstance(fields, dict):
        return f"{config} is not a JSON object: the file is damaged"
    # train.py's config.json, copied alone
    if "selector" in fields and "output_dir" in fields:
        return f"{config} is a train.py run configuration, not a model's: pass a checkpoint folder"
    return None


CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def model_context(name_or_path):
    """The model's context length from its config.json (a local folder, or the hub cache), or None
    when it cannot be read without a download."""
    path = os.path.join(os.path.expanduser(name_or_path), "config.json")
    if not os.path.isfile(path):
        try:
            from huggingface_hub import try_to_load_from_cache
            path = try_to_load_from_cache(name_or_path, "config.json")
        except Exception:  # noqa: BLE001 - not a valid repo id, no cache: nothing to read cheaply
            return None
        if not isinstance(path, str) or not os.path.isfile(path):
            return None
    try:
        with open(path) as fh:
            config = json.load(fh)
    except (OSError, ValueError):
        return None
    for section in (config, config.get("text_config") or {}):
        for key in CONTEXT_KEYS:
            if isinstance(section.get(key), int) and section[key] > 0:
                return section[key], key, path
    return None


def context_problem(max_new_tokens, name_or_path):
    found = model_context(name_or_path)
    if found and max_new_tokens >= found[0]:
        return (f"--max-new-tokens {max_new_tokens} does not fit the model's context ({found[1]} = "
                f"{found[0]} in {found[2]}), which also holds the prompt")
    return None

