"""What a run is made of, as hashes: the data it trains on, the tokenizer, the base model.

    fp = fingerprint(cfg, problems, prompt_ids, tokenizer)   # {"data": ..., "prompts": ..., ...}
    problem = differences(saved_fp, fp, cfg)    # one line naming what differs, or None

Every checkpoint's trainer_state.pt holds the fingerprint of the run that wrote it
(gmts/run/build.py). A resume computes it again from what it loaded, before anything is written, and
refuses a run whose data, tokenizer or base model is not the one the checkpoint was trained on (a
data file that grew, a base model folder replaced): the run would otherwise continue on another data
order or another model without a word.

- data: SHA-256 of the problems as loaded (question, reference answer, reward, in file order, after
  --limit), so a path that names other contents differs and a moved file with the same contents does
  not.
- prompts: SHA-256 of the chat-templated prompt ids (the template, the system prompt and the
  tokenizer together).
- tokenizer: SHA-256 of the vocabulary and the special tokens.
- model: the base model's files (a local folder: name, size and SHA-256 of each file up to 64 MiB;
  for larger weight files their size, first and last MiB and 62 more MiB spread evenly, which every
  retrained or replaced model changes), or the hub snapshot's commit for a hub id found in the local
  cache. Compared where the resume loads the base model again (LoRA, or a KL term's frozen
  reference); a full fine-tuning checkpoint holds its own weights, verified by its manifest.
"""
import hashlib
import json
import os

WHOLE = 64 << 20          # files up to this size are hashed whole
BLOCK = 1 << 20


def _sha(value):
    return hashlib.sha256(json.dumps(value, ensure_ascii=True, default=str).encode()).hexdigest()


def data_hash(problems):
    return _sha([[p.question, p.answer, p.reward] for p in problems])


def tokenizer_hash(tokenizer):
    vocab = sorted(tokenizer.get_vocab().items())
    return _sha([vocab, sorted(str(t) for t in getattr(tokenizer, "all_special_tokens", []))])


def file_hash(path):
    """SHA-256 of a file: whole up to 64 MiB; beyond, its size and 64 blocks of 1 MiB (first, last,
    evenly spread)."""
    size = os.path.getsize(path)
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as fh:
        if size <= WHOLE:
            for block in iter(lambda: fh.read(BLOCK), b""):
                digest.update(block)
        else:
            for i in range(64):
                fh.seek((size - BLOCK) * i // 63)
                digest.update(fh.read(BLOCK))
    return digest.hexdigest()


def model_hash(name_or_path):
    """The fingerprint of a base model: its local folder's files, a cached hub snapshot's commit, or
    None."""
    path = os.path.expanduser(name_or_path)
    if os.path.isdir(path):
        files = sorted(f for f in os.listdir(path) if not f.startswith(".")
                       and os.path.isfile(os.path.join(path, f)))
        return _sha([[f, file_hash(os.path.join(path, f))] for f in files])
    try:
        from huggingface_hub import try_to_load_from_cache
        found = try_to_load_from_cache(name_or_path, "config.json")
    except Exception:  # noqa: BLE001 - not a repo id, no cache: nothing to read without a download
        return None
    if isinstance(found, str) and os.sep + "snapshots" + os.sep in found:
        return "hub:" + found.split(os.sep + "snapshots" + os.sep)[1].split(os.sep)[0]
    return None


def fingerprint(cfg, problems, prompt_ids, tokenizer):
    return {"data": data_hash(problems), "prompts": _sha(prompt_ids),
            "tokenizer": tokenizer_hash(tokenizer), "model": model_hash(cfg.model),
            "problems": len(problems)}


WHAT = {"data": "the training data (--data {c.data}: {n} problems now, {m} when the run started)",
        "prompts": "the prompts (template, system prompt or tokenizer: --template, "
                   "--system-prompt, --tokenizer)",
        "tokenizer": "the tokenizer (--tokenizer / --model {c.model})",
        "model": "the base model (--model {c.model}: its files changed)"}


def differences(saved, now, cfg):
    """One line naming the first part of the run that differs from the checkpoint's fingerprint, or
    None. The base model is compared only where a resume loads it (LoRA, or β > 0)."""
    parts = ["data", "tokenizer", "prompts"] + (["model"] if cfg.lora_rank or cfg.beta > 0 else [])
    for part in parts:
        if saved.get(part) is not None and now.get(part) is not None and saved[part] != now[part]:
            what = WHAT[part].format(c=cfg, n=now.get("problems"), m=saved.get("problems"))
            return (f"{what} is not what the run was trained on (fingerprint {now[part][:12]} now, "
                    f"{saved[part][:12]} in the checkpoint); restore it, or start a new run in a "
                    "new --output-dir")
    return None
