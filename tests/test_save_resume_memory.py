"""Host memory of a checkpoint save and of a resume: MasterWeightAdamW.state_dict hands out its
float32 masters by reference (a save makes no second copy of them), trainer_state.pt loads
memory-mapped (a process reads only the tensors it touches) and the resumed run does not keep the
loaded optimizer state alive. Peaks measured at ~93M parameters, against the planner:
bench/save_resume_memory.py (bench/results/save_resume_memory.json)."""
import io
from types import SimpleNamespace

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gmts.run import checkpoint as ckpt
from gmts.run.config import parse_config
from gmts.trainer.optim import MasterWeightAdamW

from conftest import tiny_qwen2


def stepped(optimizer, params, seed):
    gen = torch.Generator().manual_seed(seed)
    for p in params:
        # the dtype MasterWeightAdamW gives the gradient (float32 sums for bf16 weights)
        p.grad = torch.randn(p.shape, generator=gen).to(getattr(p, "grad_dtype", None) or p.dtype)
    optimizer.step()


def test_master_weight_state_dict_shares_the_masters_and_round_trips():
    """No clone: the state dict's masters are the optimizer's own tensors; saved and loaded into a
    fresh optimizer, the next step is bit for bit the one the original takes."""
    model = tiny_qwen2(dtype=torch.bfloat16)
    params = list(model.parameters())
    opt = MasterWeightAdamW(params, lr=1e-2)
    stepped(opt, params, 0)
    state = opt.state_dict()
    assert [m.data_ptr() for m in state["master"]] == [m.data_ptr() for m in opt.master]
    buffer = io.BytesIO()
    torch.save(state, buffer)
    other = tiny_qwen2(dtype=torch.bfloat16, seed=5)
    fresh = MasterWeightAdamW(list(other.parameters()), lr=1e-2)
    buffer.seek(0)
    fresh.load_state_dict(torch.load(buffer, weights_only=False))
    stepped(opt, params, 1)
    stepped(fresh, list(other.parameters()), 1)
    for a, b in zip(opt.master + params, fresh.master + list(other.parameters())):
        assert torch.equal(a, b)


class Allocations(TorchDispatchMode):
    """Bytes of the new memory (a storage none of its inputs has) of every tensor an aten op
    returns while active: copies count, views and detached aliases do not."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in torch.utils._pytree.tree_leaves(
            (args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.bytes += t.untyped_storage().nbytes()
        return out


def test_a_save_makes_no_copy_of_the_optimizer_state(tiny_model_dir, tmp_path):
    """gmts.run.checkpoint.save (what train.py calls) with --optimizer-offload: the tensors made
    while saving add up to less than one float32 copy of the parameters (the masters' clone was
    that)."""
    from gmts.trainer.optim import build_optimizer
    from gmts.trainer.models import load_model, load_tokenizer
    cfg = parse_config(["--model", tiny_model_dir, "--device", "cpu", "--optimizer-offload",
                        "--output-dir", str(tmp_path / "run")])
    model = load_model(tiny_model_dir, dtype=torch.float32, device="cpu")
    params = list(model.parameters())
    opt = build_optimizer(model, cfg)
    assert isinstance(opt, MasterWeightAdamW)
    stepped(opt, params, 0)
    run = SimpleNamespace(cfg=cfg, model=model, optimizer=opt,
                          tokenizer=load_tokenizer(tiny_model_dir), rollout_gen=torch.Generator(),
                          select_gen=torch.Generator(), stream=SimpleNamespace(position=3),
                          fingerprint={}, main_process=True, world=1)
    with Allocations() as seen:
        ckpt.save(run, 1)
    masters = sum(4 * p.numel() for p in params)
    assert seen.bytes < masters / 4, (seen.bytes, masters)
    saved = ckpt.load_trainer_state(ckpt.find_checkpoint(str(tmp_path / "run")))
    assert all(torch.equal(a, b) for a, b in zip(saved["optimizer"]["master"], opt.master))


def rss_anon():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("RssAnon:"))


def test_trainer_state_loads_memory_mapped_and_restore_lets_it_go(tmp_path):
    """load_trainer_state maps the file: loading 64 MiB of optimizer state adds next to nothing to
    the process's private memory (torch.load without mmap adds all 64 MiB), and its values are the
    saved ones. restore copies what the optimizer keeps out of the mapping and empties the dict, so
    the file is no longer mapped afterwards (a prune deleting it frees its disk space)."""
    import gc
    from gmts.run.build import restore
    big = torch.arange(16 * 2 ** 20, dtype=torch.float32)            # 64 MiB
    folder = tmp_path / "step-000001"
    folder.mkdir()
    param = torch.nn.Parameter(torch.zeros(big.numel()))
    opt = torch.optim.AdamW([param], lr=0.1)
    saved = {"optimizer": {"state": {0: {"step": torch.tensor(1.0), "exp_avg": big,
                                         "exp_avg_sq": big.clone()}},
                           "param_groups": opt.state_dict()["param_groups"]},
             "rng": [ckpt.rng_state(torch.Generator())],
             "select_rng": [torch.Generator().get_state()], "data_position": 7, "step": 1}
    path = str(folder / ckpt.STATE_FILE)
    torch.save(saved, path)
    del saved
    before = rss_anon()
    loaded = ckpt.load_trainer_state(str(folder))
    grew = rss_anon() - before
    assert grew < 8 * 2 ** 20, grew
    with open("/proc/self/maps") as fh:
        assert path in fh.read()
    mapped = loaded["optimizer"]["state"][0]["exp_avg"]
    assert torch.equal(mapped, big)
    run = SimpleNamespace(cfg=SimpleNamespace(fsdp=False), optimizer=opt, rank=0,
                          rollout_gen=torch.Generator(), select_gen=torch.Generator(),
                          stream=SimpleNamespace(position=0))
    assert restore(run, loaded) == 1 and loaded == {} and run.stream.position == 7
    kept = opt.state[param]
    assert torch.equal(kept["exp_avg"], big) and torch.equal(kept["exp_avg_sq"], big)
    assert kept["exp_avg"].untyped_storage().data_ptr() != mapped.untyped_storage().data_ptr()
    del mapped
    gc.collect()
    with open("/proc/self/maps") as fh:
        assert path not in fh.read()
