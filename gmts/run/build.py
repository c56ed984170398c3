"""Building a training run, or restoring one from a checkpoint: its state as one object (Run), the
processes, data, rewards, model and optimizer, and the output folder's first write. Saving a run is
gmts/run/checkpoint.py's, its stop signals gmts/run/signals.py's, its in-training evaluation
gmts/tools/evaluate.py's. None of this is the method (gmts/METHOD.md).

Nothing in gmts/ imports data/ or rewards/: train.py passes its data loader and reward functions to
build_run.
"""
import functools
import json
import os
from dataclasses import dataclass

import torch

from gmts.run import checkpoint as ckpt
from gmts.run import folder
from gmts.run.fingerprint import differences, fingerprint
from gmts.run.validate import UsageError
from gmts.run.config import to_dict
from gmts.trainer import distributed
from gmts.trainer.optim import build_optimizer, check_gradient_sums
from gmts.trainer.models import (add_lora, check_vocabulary, enable_gradient_checkpointing,
                                 end_of_sequence_ids, load_model, load_tokenizer, peft_quiet,
                                 resolve_device, resolve_dtype)
from gmts.trainer.compiled_decode import CompiledDecode
from gmts.trainer.rollout import EagerDecode
from gmts.tools.evaluate import check_eval_data
from gmts.trainer.batches import PromptStream


# --------------------------------------------------------------------------------------------------
# The run's state, built once and passed around as one object.

@dataclass
class Run:
    cfg: object
    model: torch.nn.Module
    # frozen π_ref for the KL term, or None (β = 0, or LoRA: adapters off)
    ref_model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    tokenizer: object
    eos_ids: list
    stream: PromptStream
    reward_fns: dict              # reward name -> fn(text, reference) -> R
    rollout_gen: torch.Generator  # sampling of this process's answers
    # the random selector's draws (apart, so arms see the same rollouts)
    select_gen: torch.Generator
    device: torch.device
    rank: int = 0
    world: int = 1
    # what the run is made of (gmts/run/fingerprint.py), saved with every checkpoint
    fingerprint: dict = None
    decode: type = EagerDecode    # the sampler's decode step: CompiledDecode with --compile

    @property
    def main_process(self):
        return self.rank == 0


def start_processes(cfg, state):
    """(rank, world size, device, dtype): one process, or this one of torchrun's."""
    rank, world, local_rank = distributed.init()          # (0, 1, 0) without torchrun
    if cfg.prompts_per_step % world:
        raise SystemExit(f"error: --prompts-per-step {cfg.prompts_per_step} does not split over "
                         f"{world} processes")
    if state is not None and len(state["rng"]) != world:
        raise SystemExit(f"error: --resume: the checkpoint was written by {len(state['rng'])} "
                         f"processes; resume with the same number (got {world})")
    device = resolve_device(cfg.device)
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", local_rank)
    dtype = resolve_dtype(cfg.dtype, device)
    check_gradient_sums(cfg, dtype)             # bf16 weights: their sums in float32, or refused
    return rank, world, device, dtype


def load_data(cfg, resume_from, load_prompts, reward_functions):
    """(tokenizer, problems, prompt ids, skipped count, reward functions). Runs before any model
    loads, so a bad file or name fails in a second. load_prompts(cfg, tokenizer) -> (problems,
    prompt ids, skipped count) and reward_functions(cfg, names) -> {name: fn(text, answer) -> R}
    come from the caller (train.py: data/, rewards/)."""
    tokenizer = load_tokenizer(cfg.tokenizer
                               or (cfg.model if os.path.isdir(cfg.model) or not resume_from
                                                 else resume_from))
    problems, prompt_ids, n_too_long = load_prompts(cfg, tokenizer)
    reward_fns = reward_functions(cfg, sorted({p.reward for p in problems}))
    if cfg.eval_every or cfg.eval_before:
        check_eval_data(cfg, tokenizer)
    return tokenizer, problems, prompt_ids, n_too_long, reward_fns


def build_policy(cfg, resume_from, device, dtype, checkpointing=None):
    """(policy, frozen reference or None, optimizer). On resume, full fine-tuning reloads the
    checkpoint's weights and LoRA the base + adapter. With FSDP the weights load in float32: the
    shards are the master weights. checkpointing: whether to recompute activations (None:
    --gradient-checkpointing's decision for prompts of --max-prompt-tokens)."""
    source = resume_from if resume_from and not cfg.lora_rank else cfg.model
    if checkpointing is None:
        from gmts.tools.memory import decide_checkpointing
        checkpointing = decide_checkpointing(cfg, source, device, cfg.max_prompt_tokens)[0]
    load_dtype = torch.float32 if cfg.fsdp else dtype
    prepare = enable_gradient_checkpointing if checkpointing else lambda _: None
    # FSDP: built on the meta device, each process reading only its shards of the weights
    shard = cfg.fsdp and functools.partial(distributed.load_sharded, compute_dtype=dtype,
                                           device=device, prepare=prepare)
    model = load_model(source, dtype=load_dtype, device=device, shard=shard or None)
    sharded = bool(distributed.sharded_layers(model))
    ref_model = None
    if cfg.beta > 0 and not cfg.lora_rank:
        # frozen π_ref = the STARTING model, loaded as a fresh policy is (--model, also on resume):
        # a cast copy would round RoPE's float32 inv_freq to bf16, a different π
        ref_model = load_model(cfg.model, dtype=dtype, device=device).eval().requires_grad_(False)
    if cfg.lora_rank:
        if resume_from:
            from peft import PeftModel
            with peft_quiet():
                model = PeftModel.from_pretrained(model, resume_from, is_trainable=True)
        else:
            model = add_lora(model, rank=cfg.lora_rank, alpha=cfg.lora_alpha, seed=cfg.seed)
    if not sharded:
        prepare(model)
    if cfg.fsdp and not sharded:
        distributed.shard_model(model, dtype)
    return model, ref_model, build_optimizer(model, cfg)


def build_run(cfg, resume_from, state, *, load_prompts, reward_functions):
    """Everything a step needs, and the step to start after (0, or the checkpoint's). load_prompts
    and reward_functions: see load_data (train.py passes its own, over data/ and rewards/)."""
    rank, world, device, dtype = start_processes(cfg, state)
    ckpt.seed_everything(cfg.seed)
    if cfg.deterministic:
        ckpt.deterministic_kernels()
    tokenizer, problems, prompt_ids, n_too_long, reward_fns = load_data(
        cfg, resume_from, load_prompts, reward_functions)
    made_of = fingerprint(cfg, problems, prompt_ids, tokenizer)
    # before the model loads or anything is written: refuse another run's parts
    if state is not None:
        saved = state.get("fingerprint")
        problem = differences(saved, made_of, cfg) if saved else None
        if problem:
            raise UsageError("train.py", f"--resume {cfg.resume}: {problem}")
        if saved is None and rank == 0:
            folder._note(f"{resume_from} was written by an older gmts without a fingerprint: the "
                         "data, tokenizer and base model cannot be compared with the run's")
    # --gradient-checkpointing auto: the memory planner's decision for this device
    from gmts.tools.memory import decide_checkpointing
    checkpointing, said = decide_checkpointing(
        cfg, resume_from if resume_from and not cfg.lora_rank else cfg.model, device,
        max(map(len, prompt_ids), default=0), world)
    model, ref_model, optimizer = build_policy(cfg, resume_from, device, dtype, checkpointing)
    # not an IndexError later
    check_vocabulary(model, tokenizer, flag="--tokenizer" if cfg.tokenizer else "--model")
    # Each process samples its own answers; the data order is shared.
    run = Run(cfg=cfg, model=model, ref_model=ref_model, optimizer=optimizer, tokenizer=tokenizer,
              eos_ids=end_of_sequence_ids(model, tokenizer),
              stream=PromptStream(problems, prompt_ids, cfg.seed,
                                  shard=distributed.my_share(cfg.prompts_per_step)),
              reward_fns=reward_fns,
              rollout_gen=torch.Generator(device=device).manual_seed(cfg.seed + 1_000_003 * rank),
              select_gen=torch.Generator(device=device).manual_seed(
                  cfg.seed + 1 + 1_000_003 * rank),
              device=device, rank=rank, world=world, fingerprint=made_of,
              decode=CompiledDecode if cfg.compile else EagerDecode)
    start_step = restore(run, state) if state is not None else 0
    if run.main_process:
        open_output_dir(run, start_step)
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in model.parameters())
        print(f"gmts: {cfg.model} ({count_text(trainable)} of {count_text(total)} parameters "
              f"trainable) on {device} "
              f"{str(dtype).replace('torch.', '')}"
              + (f" x {world} processes" if world > 1 else "")
              + f"; {len(problems)} problems from {cfg.data}"
              + (f" ({n_too_long} skipped: prompt too long)" if n_too_long else "")
              + f"; selector {cfg.selector} ρ={cfg.ratio}; {cfg.algo}; {said}"
              + f"; output {cfg.output_dir}"
              + (f"; resuming from {resume_from} at step {start_step}" if resume_from else ""),
              flush=True)
    return run, start_step


def count_text(n):
    """A parameter count with 3-4 significant digits: 812, 30.21k, 134.5M, 1.544B."""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.4g}{unit}"
    return str(n)


# --------------------------------------------------------------------------------------------------
# Restoring a run from its checkpoint, and the output folder.

def restore(run, state):
    """Optimizer, every random stream and the data position from a checkpoint (state: its
    trainer_state.pt, memory-mapped: checkpoint.load_trainer_state); returns its step. Consumes
    `state`: the optimizer's CPU tensors are copied out of the mapping and the dict is emptied, so
    nothing keeps the file mapped (a prune that deletes that checkpoint frees its disk space)."""
    if run.cfg.fsdp:
        # each process keeps its shards of the mapped full tensors (rank 0's are scattered)
        distributed.load_full_optimizer_state(run.model, run.optimizer, state["optimizer"])
    else:
        run.optimizer.load_state_dict(state["optimizer"])
    own_copies(run.optimizer)
    ckpt.set_rng_state(state["rng"][run.rank], run.rollout_gen)
    ckpt.restore_generator(run.select_gen, state["select_rng"][run.rank])
    run.stream.position, step = state["data_position"], state["step"]
    state.clear()
    return step


def own_copies(optimizer):
    """Replace the optimizer state's CPU tensors by copies of their own: loaded ones may be views
    of the mapped trainer_state.pt (torch's load_state_dict keeps a tensor of the right dtype and
    device as it is). The copies are the private memory the first step would make anyway."""
    inner = getattr(optimizer, "inner", optimizer)      # MasterWeightAdamW's AdamW
    for per_param in inner.state.values():
        for key, value in per_param.items():
            if torch.is_tensor(value) and value.device.type == "cpu":
                per_param[key] = value.clone()


def open_output_dir(run, start_step):
    """The first write into --output-dir: claim it (its owner's lock, then under the lock:
    --overwrite's deletion, leftovers removed, damaged checkpoints moved aside, the logs cut back to
    the checkpoint; gmts/run/folder.py), then the resolved config. Main process only."""
    folder.claim(run.cfg, start_step)
    try:
        ckpt.write_text_atomic(os.path.join(run.cfg.output_dir, "config.json"),
                               json.dumps(to_dict(run.cfg), indent=2) + "\n")
    except OSError as err:
        raise SystemExit(f"error: could not write {run.cfg.output_dir}/config.json "
                         f"({err.strerror or err})") from None
