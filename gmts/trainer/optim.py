"""AdamW, and AdamW with float32 master weights whose states may live in CPU memory.

Why the second one: with bf16 weights (the default on GPU) an update smaller than bf16's resolution
(~0.4% of the weight) is rounded away, and at RL learning rates (1e-6 .. 1e-5) most updates are that
small. Keeping a float32 master copy (and Adam's two float32 moments) fixes that; putting those 12
bytes/parameter in CPU memory (`--optimizer-offload`) leaves the GPU holding only the bf16 weights
and their float32 gradient sums (6 bytes/parameter): the ZeRO-offload idea in a few lines, at the
price of a host round trip per step.
"""
import torch


class MasterWeightAdamW:
    """AdamW over float32 master copies of `params` kept on `state_device`; after each step the
    (possibly lower precision) model parameters are overwritten with the rounded master values.

    The gradients of low-precision parameters are float32 (`grad_dtype`, torch >= 2.10): autograd
    adds each backward's gradient into a float32 .grad, so the micro-batches of a step are summed in
    float32, not rounded to bf16 at every addition (8 bits of mantissa: the sum of 256 micro-batches
    would be off by 1-2%). On the masters' device that .grad is the one AdamW reads (no copy)."""

    def __init__(self, params, *, state_device="cpu", **adamw_kwargs):
        self.params = [p for p in params if p.requires_grad]
        float32_gradients(self.params)
        self.state_device = torch.device(state_device)
        self.master = [
            p.detach().to(self.state_device, torch.float32, copy=True) for p in self.params]
        self.inner = torch.optim.AdamW(self.master, **adamw_kwargs)
        # so LR schedules can set param_groups[i]["lr"]
        self.param_groups = self.inner.param_groups

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None
        self.inner.zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def step(self):
        for p, m in zip(self.params, self.master):
            # the float32 sum itself on the masters' device; else copied there and freed at once
            m.grad = None if p.grad is None else p.grad.detach().to(
                self.state_device, torch.float32)
            p.grad = None
        self.inner.step()
        for p, m in zip(self.params, self.master):
            p.copy_(m.to(p.device, non_blocking=True))

    def state_dict(self):
        """The inner AdamW's state and the float32 masters, by reference (as torch's optimizers
        return theirs): no copy is made, so saving needs no second host copy of 12 bytes per
        parameter. Write it before the next step changes it."""
        return {"inner": self.inner.state_dict(), "master": list(self.master)}

    def load_state_dict(self, state):
        self.inner.load_state_dict(state["inner"])
        with torch.no_grad():
            for p, m, saved in zip(self.params, self.master, state["master"]):
                m.copy_(saved)
                p.copy_(saved.to(p.device))


def has_grad_dtype():
    """Whether this torch sums a parameter's gradients in a dtype of its own (Tensor.grad_dtype,
    torch >= 2.10)."""
    return hasattr(torch.Tensor, "grad_dtype")


def check_gradient_sums(cfg, dtype):
    """One line refusing a run whose trainable weights are narrower than float32 (--dtype
    bfloat16 / float16, `dtype` what it resolved to) where torch cannot sum their gradients in
    float32: summed in bf16, 256 micro-batches are off by 1-2%. --fsdp (float32 shards) and LoRA
    (float32 adapters) train float32 weights."""
    if dtype.itemsize >= 4 or cfg.fsdp or cfg.lora_rank or has_grad_dtype():
        return
    name = str(dtype).replace("torch.", "")
    raise SystemExit(f"error: --dtype {cfg.dtype}" + (f" ({name} here)" if cfg.dtype == "auto"
                                                      else "")
                     + f": torch {torch.__version__} sums the micro-batches' {name} gradients in "
                     f"{name} (float32 sums need Tensor.grad_dtype, torch >= 2.10); install torch "
                     ">= 2.10 or pass --dtype float32")


def float32_gradients(params):
    """Make each low-precision parameter's .grad float32 (Tensor.grad_dtype): each gradient that
    autograd delivers is then added in float32 (a bf16 one exactly, as its value; the chunked
    head's float32 one unrounded). float32 and float64 parameters keep their own dtype. A torch
    without grad_dtype is refused (check_gradient_sums says so at a run's start)."""
    low = [p for p in params if p.dtype.itemsize < 4]
    if low and not has_grad_dtype():
        raise RuntimeError(f"torch {torch.__version__} has no Tensor.grad_dtype: {low[0].dtype} "
                           "gradients cannot be summed in float32 (torch >= 2.10)")
    for p in low:
        p.grad_dtype = torch.float32


def build_optimizer(model, cfg):
    params = [p for p in model.parameters() if p.requires_grad]
    kwargs = {"lr": cfg.lr, "betas": (cfg.adam_beta1, cfg.adam_beta2),
              "weight_decay": cfg.weight_decay}
    # bf16 / fp16; float64 keeps its own precision
    low_precision = any(p.dtype.itemsize < 4 for p in params)
    if cfg.optimizer_offload or low_precision:
        return MasterWeightAdamW(params,
                                 state_device="cpu" if cfg.optimizer_offload else params[0].device,
                                 **kwargs)
    return torch.optim.AdamW(params, **kwargs)
