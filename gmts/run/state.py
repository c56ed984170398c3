"""Setting up and keeping a training run: its state as one object, the model and optimizer, the
output folder, checkpoints, stop signals and in-training evaluation. train.py calls these by name so
that it can read as the story of one step; none of this is the method (gmts/METHOD.md).

Nothing in gmts/ imports data/ or rewards/: train.py passes its data loader and reward functions to
build_run.
"""
import contextlib
import copy
import json
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass

import torch

from gmts.run import checkpoint as ckpt
from gmts.run import folder
from gmts.run.fingerprint import differences, fingerprint
from gmts.run.validate import UsageError
from gmts.run.config import to_dict
from gmts.trainer import distributed
from gmts.trainer.optim import build_optimizer
from gmts.trainer.policy import (add_lora, check_vocabulary, enable_gradient_checkpointing,
                                 end_of_sequence_ids, load_model, load_tokenizer, peft_quiet,
                                 resolve_device, resolve_dtype)
from gmts.trainer.compiled_decode import CompiledDecode
from gmts.trainer.rollout import EagerDecode
from gmts.trainer.step import PromptStream


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
    return rank, world, device, resolve_dtype(cfg.dtype, device)


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


def build_policy(cfg, resume_from, device, dtype):
    """(policy, frozen reference or None, optimizer). On resume, full fine-tuning reloads the
    checkpoint's weights and LoRA the base + adapter. With FSDP the weights load in float32: the
    shards are the master weights."""
    load_dtype = torch.float32 if cfg.fsdp else dtype
    model = load_model(resume_from if resume_from and not cfg.lora_rank else cfg.model,
                       dtype=load_dtype, device=device)
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
    if cfg.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    if cfg.fsdp:
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
        cfg, resume_from, load_prompts,
                                                                        reward_functions)
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
    model, ref_model, optimizer = build_policy(cfg, resume_from, device, dtype)
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
              + f"; selector {cfg.selector} ρ={cfg.ratio}; {cfg.algo}; output {cfg.output_dir}"
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
# Checkpoints and the output folder.

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


def log_paths(cfg):
    return os.path.join(cfg.output_dir, "metrics.jsonl"), os.path.join(
        cfg.output_dir, "samples.jsonl")


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


def save(run, step):
    """A checkpoint of the whole run after `step`, written atomically. Every process's random state
    travels to the one that writes, so a resume continues each stream exactly. Call on every
    process."""
    rngs = distributed.gather_objects((ckpt.rng_state(run.rollout_gen), run.select_gen.get_state()))
    model_state, optim_state = (distributed.full_state_dicts(run.model, run.optimizer)
                                if run.cfg.fsdp
                                # FSDP: gathered on rank 0
                                else (None, run.optimizer.state_dict()))
    if run.main_process:
        trainer_state = {"step": step, "config": to_dict(run.cfg), "optimizer": optim_state,
                         "rng": [r for r, _ in rngs], "select_rng": [s for _, s in rngs],
                         "data_position": run.stream.position, "world_size": run.world,
                         "fingerprint": run.fingerprint}
        ckpt.save_checkpoint(run.cfg.output_dir, step, run.model, run.tokenizer, trainer_state,
                             keep=run.cfg.keep_checkpoints, state_dict=model_state)
    distributed.barrier()


def save_merged_lora(run, step):
    """LoRA: plain merged weights beside the checkpoints, for transformers / vLLM, written like a
    checkpoint: into .tmp-final-merged, fsynced, listed in a manifest.json (sizes and SHA-256),
    then renamed into place, with gmts_export.json (the step) inside. An earlier export is renamed
    to .old-final-merged first and removed after (a kill leaves a leftover the next start removes,
    never a half folder). A failed write (a full disk) removes the temporary folder and is one
    line: no final-merged/ without its weights. A kill leaves the run resumable: --resume at the
    last step writes the export (train.py)."""
    merged_dir = os.path.join(run.cfg.output_dir, ckpt.MERGED)
    tmp = os.path.join(run.cfg.output_dir, f".tmp-{ckpt.MERGED}")
    trash = os.path.join(run.cfg.output_dir, f".old-{ckpt.MERGED}")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        copy.deepcopy(run.model).merge_and_unload().save_pretrained(tmp, safe_serialization=True)
        run.tokenizer.save_pretrained(tmp)
        ckpt.umask_modes(tmp)
        ckpt.write_text_atomic(os.path.join(tmp, "gmts_export.json"),
                               json.dumps({"step": step}) + "\n")
        ckpt._fsync_tree(tmp)
        ckpt.write_manifest(tmp)
        if os.path.exists(merged_dir):
            shutil.rmtree(trash, ignore_errors=True)
            os.rename(merged_dir, trash)
        os.rename(tmp, merged_dir)
        shutil.rmtree(trash, ignore_errors=True)
    except Exception as err:  # noqa: BLE001 - OSError; safetensors' error on a full disk
        shutil.rmtree(tmp, ignore_errors=True)
        why = ("No space left on device" if ckpt.disk_full(err)
               else f"{type(err).__name__}: {ckpt._one_line(err)}")
        raise SystemExit(f"error: writing the merged LoRA export {merged_dir} failed ({why}); "
                         "nothing was left there, and the adapter checkpoint "
                         f"{ckpt.find_checkpoint(run.cfg.output_dir)} is intact "
                         "(PeftModel.from_pretrained + merge_and_unload exports it)") from None


class Interrupted(Exception):
    """A signal during StopRequest.interruptible(): what ran there is abandoned."""


class StopRequest:
    """Ctrl-C / SIGTERM during training: finish the current step, write a checkpoint, exit, without
    starting the next evaluation. train.py asks any_process() again after each save, so a signal
    that arrives during a checkpoint write stops right after it; one during an in-training
    evaluation abandons it (interruptible). A second Ctrl-C stops at once (the last checkpoint is
    still whole: checkpoints are written atomically). Made when the first step starts: before it
    nothing is trained and gmts/run/folder.py's exit_on_interrupt ends the process at once."""

    GRACE_S = 5.0          # how long a user's reward may go on scoring after a signal (overdue)

    def __init__(self):
        self.signum, self._interruptible, self._since = 0, False, 0.0
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum, _frame):
        self.signum, self._since = signum, time.monotonic()
        signal.signal(signum, signal.SIG_DFL)
        print(f"\ngmts: got signal {signum}; checkpointing after this step (again to stop now)",
              file=sys.stderr, flush=True)
        if self._interruptible:
            self._interruptible = False
            raise Interrupted

    @contextlib.contextmanager
    def interruptible(self):
        """Inside, a signal raises Interrupted (one process's own work only: no collective may run
        there)."""
        self._interruptible = not self.signum
        try:
            yield
        finally:
            self._interruptible = False

    def overdue(self):
        """The signal's number once GRACE_S have passed since it came, else 0: a user's reward
        still running then is abandoned (rewards.set_interrupt_check), so a signal stops the run
        within seconds even while a reward hangs."""
        return self.signum if self.signum and time.monotonic() - self._since > self.GRACE_S else 0

    def any_process(self):
        """True on every process once any process was signalled."""
        return bool(int(distributed.all_reduce_sum(torch.tensor(self.signum))))


# --------------------------------------------------------------------------------------------------
# In-training evaluation.

def evaluate_during_training(run, label="eval"):
    """run_eval where it must run: under FSDP every process (each holds a shard of every layer; all
    evaluate identically), else rank 0 alone. Returns the eval_* metrics on rank 0, {} on the
    others. Rank 0 shows a progress bar named `label`."""
    out = {}
    if run.cfg.fsdp:
        with distributed.layers_gathered(run.model):
            out = run_eval(run.cfg, run.model, run.tokenizer, run.eos_ids, run.device,
                           progress=run.main_process and label)
    elif run.main_process:
        out = run_eval(run.cfg, run.model, run.tokenizer, run.eos_ids, run.device, progress=label)
    distributed.barrier()
    return out if run.main_process else {}


def run_eval(cfg, model, tokenizer, eos_ids, device, progress="eval"):
    """In-training evaluation with eval.py's protocol (the same code as `python eval.py`);
    `progress` as in evaluate_model (a name: a bar on stderr that goes when done)."""
    from gmts.tools.evaluate import each_reward, evaluate_model
    was_training = model.training
    model.eval()
    rows = cfg.eval_max_rows or rollout_rows(cfg)      # answers per sampling call
    result = evaluate_model(model, tokenizer, cfg.eval_data, limit=cfg.eval_limit,
                            samples=cfg.eval_samples, temperature=cfg.eval_temperature,
                            max_new_tokens=cfg.max_new_tokens, seed=cfg.seed, eos_ids=eos_ids,
                            template=cfg.template or None, system_prompt=cfg.system_prompt,
                            batch_size=rows, max_rows=rows, progress=progress,
                            max_prompt_tokens=cfg.max_prompt_tokens,
                            task_options=json.loads(cfg.task_options) if cfg.task_options else None,
                            rewards=cfg.reward or None, reward_weights=cfg.reward_weights,
                            reward_workers=cfg.reward_workers,
                            reward_timeout=cfg.reward_timeout)
    model.train(was_training)
    # with --reward: each one's figures too, eval_reward_<label>_mean / _none
    per_reward = each_reward([c for record in result["records"] for c in record["completions"]])
    return {"eval_accuracy": result["accuracy"], "eval_ci95": result["ci95"],
            "eval_data": cfg.eval_data, **{f"eval_{k}": v for k, v in per_reward.items()}}


def rollout_rows(cfg):
    """The most rows (answers) one sampling call of this process's rollout holds:
    --rollout-batch-size prompts (0: the process's share of --prompts-per-step) x --group-size.
    Evaluation samples in calls of at most as many rows (unless --eval-max-rows says how many), so
    it never needs more KV cache than a step does."""
    share = cfg.prompts_per_step // distributed.world_size()
    return min(cfg.rollout_batch_size or share, share) * cfg.group_size


def check_eval_data(cfg, tokenizer):
    """Fail at start-up, not at the first evaluation, when --eval-data names something that cannot
    be loaded."""
    from gmts.tools.evaluate import load_benchmark, split_data_arg
    for spec in split_data_arg(cfg.eval_data):
        try:
            load_benchmark(spec, tokenizer, limit=cfg.eval_limit, template=cfg.template or None,
                           system_prompt=cfg.system_prompt, max_prompt_tokens=cfg.max_prompt_tokens,
                           task_options=json.loads(cfg.task_options) if cfg.task_options else None)
        except (FileNotFoundError, ValueError, KeyError, SystemExit) as err:
            raise SystemExit(f"error: --eval-data {spec!r}: {' '.join(str(err).split())}") from None
