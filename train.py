"""GRPO / DAPO with token selection (ETS, GMTS), in plain PyTorch.

    python train.py --preset cpu-demo --selector gmts   # a CPU run that learns (SmolLM2-135M, sums)
    python train.py --selector gmts           # Qwen2.5-1.5B-Instruct on GSM8K, top-20% by |E·ω|
    python train.py --preset paper-math --selector ets  # the paper's settings (README, "Presets")
    python train.py --help                              # every option (gmts/run/config.py)

One step, top to bottom (gmts/METHOD.md, "One RLVR step"):

    collect_batch:  1. rollout -> 2. reward -> 3. advantage
    update_policy:  4. score -> 5. select -> 6. masked loss -> 7. optimizer step (per mini-batch)

Everything the method needs is a pure function in gmts/method/ (tested in tests/test_method.py and,
against an independent reference, tests/test_update_reference.py); this file wires them together.
The batch, its mini-batches and micro-batches and the passes over them (the batch-wide quantities
right when the batch is computed in pieces, on several processes, under FSDP) live in
gmts/trainer/batches.py; its batch_sum and the like are the values themselves on one process.
What a step logs comes from gmts/trainer/metrics.py, from update_policy's records, after the
step. Setting up a run: gmts/run/build.py, which gets the data loader and the reward functions
from here (gmts/ never imports data/ or rewards/); saving it: gmts/run/checkpoint.py; signals:
gmts/run/signals.py; in-training evaluation: gmts/tools/evaluate.py.
"""
import sys

if __name__ == "__main__":
    from gmts.run.folder import WatchedStdout, exit_on_interrupt
    # Ctrl-C during start-up: one line, not a traceback (gmts/run/folder.py)
    exit_on_interrupt("train.py", "during start-up, before training began: nothing was trained, "
                                  "and the same command starts again")
    # a failed write to stdout (a full disk): one line, at the end
    sys.stdout = WatchedStdout(sys.stdout)
    # Every flag against gmts/run/validate.py's table before torch loads (~3 s): a bad one is one
    # line, exit 2, at once; the imports below come after it on purpose. So is a `ulimit -v` too
    # small to import torch.
    from gmts.run.config import parse_config
    from gmts.run.machine import address_space_problem
    from gmts.run.validate import UsageError
    if address_space_problem("train.py"):
        raise UsageError("train.py", address_space_problem("train.py"))
    parse_config(sys.argv[1:])

import contextlib
import dataclasses
import json
import math
import os
import time

import torch
from tqdm import tqdm

from gmts import data
from gmts import rewards
from gmts.method.grpo import (
    group_advantages, kl_share, loss_weights, mixed_groups, overlong_penalty,
    relative_token_weight, token_omega, token_scores)
from gmts.run import checkpoint as ckpt, report
from gmts.run.build import build_run
from gmts.run.checkpoint import save, save_merged_lora
from gmts.run.folder import check_start, export_step
from gmts.run.progress import Progress
from gmts.run.runlog import RunLog
from gmts.run.signals import Interrupted, StopRequest
from gmts.run.machine import memory_line
from gmts.trainer import distributed
from gmts.trainer.metrics import GradNoise, UpdateLog, rollout_figures
from gmts.trainer.models import peak_memory_mb
from gmts.trainer.rollout import concat_rollouts, sample
from gmts.tools.evaluate import evaluate_during_training
from gmts.trainer.batches import (
    NON_FINITE, STEPPED, Batch, MiniBatch, accumulate_gradients, all_finite, batch_select,
    batch_sum, minibatch_rows, optimizer_step, scoring_pass, selection_counts, several_processes)


# --------------------------------------------------------------------------------------------------
# The data and the rewards (data/, rewards/), handed to gmts/run/build.py's build_run.

def load_prompts(cfg, tokenizer):
    """Problems -> chat-templated prompt ids (data/); prompts longer than --max-prompt-tokens are
    skipped and counted. Returns (problems, prompt ids, how many were skipped). The --reward
    functions are loaded and tried on the first rows here, before any model loads: a problem is one
    line naming the reward, then the user's traceback."""
    problems, prompt_ids, skipped = data.load_prompts_for_cli(
        cfg.data, cfg.split, tokenizer, max_prompt_tokens=cfg.max_prompt_tokens,
        question_field=cfg.question_field, answer_field=cfg.answer_field, template=cfg.template,
        task_options=cfg.task_options, limit=cfg.limit or None, seed=cfg.seed,
        system_prompt=cfg.system_prompt)
    if cfg.reward:
        scorer = reward_functions(cfg, [])
        try:
            scorer.check(problems, first=cfg.prompts_per_step)
        except rewards.RewardError as err:
            raise SystemExit(err.for_cli()) from None
        finally:
            scorer.close()
    return problems, prompt_ids, skipped


def eval_overlap(cfg, problems):
    """The --eval-data problems that share a 13-word run (or the whole of a shorter question) with a
    training problem (data/decontam.py): said once at the start, and the final line then does not
    call their accuracy held-out. A warning, not a refusal: evaluating on the training problems is a
    fair measurement (does the policy fit them?) once it is named as such. Returns '' or the
    label."""
    if not cfg.eval_data or not (cfg.eval_every or cfg.eval_before):
        return ""
    from gmts.tools.evaluate import parse_data_spec, split_data_arg
    evaluation = []
    for spec in split_data_arg(cfg.eval_data):
        try:                           # the problem set the evaluation reads (its limit, seed 0)
            evaluation += data.load_problems(
                *parse_data_spec(spec), limit=cfg.eval_limit or None, seed=0,
                **(json.loads(cfg.task_options) if cfg.task_options else {}))
        except (FileNotFoundError, KeyError, ValueError, ImportError, data.OptionError):
            return ""                  # the evaluation names what is wrong with it
    found = data.decontamination_report(problems, evaluation, max_examples=1)
    if not found["overlapping_eval"]:
        return ""
    first = found["examples"][0]
    label = (f"not held-out: {found['overlapping_eval']} of {found['eval']} eval problems overlap "
             "the training data")
    print(f"gmts: --eval-data {cfg.eval_data}: {found['overlapping_eval']} of {found['eval']} "
          f"problems share a {found['n']}-word run with training problems (e.g. "
          f"{first['eval_id']} ~ {first['train_id']}), so its accuracy is {label.split(':')[0]}",
          file=sys.stderr, flush=True)
    return label


def reward_functions(cfg, names):
    """The step's scorer (rewards.Scorer, scoring a batch concurrently): --reward's functions with
    --reward-weights for every problem, or without --reward each problem's own built-in reward
    (`names`: those the problems use). Functions of one's own run in a process of their own, each
    call within --reward-timeout (rewards/isolated.py)."""
    try:
        return rewards.scorer_for(cfg.reward, cfg.reward_weights, workers=cfg.reward_workers,
                                  trusted_only=cfg.code_trusted_only, timeout=cfg.reward_timeout)
    except rewards.RewardError as err:
        raise SystemExit(err.for_cli()) from None


# --------------------------------------------------------------------------------------------------
# Stages 1-3: rollout, reward, advantage.

def collect_batch(run):
    """Rollout + reward + advantage for the step's prompts (this process's share under torchrun),
    with the run's model, tokenizer, generator and rewards (gmts/run/build.py's Run). Returns (the
    Batch, or None when no group has mixed rewards; every sampled answer's R (n,); rollouts)."""
    if {"on": True, "off": False, "auto": run.cfg.algo == "dapo"}[run.cfg.dynamic_sampling]:
        return dynamic_sampling(run)                                               # DAPO's
    batch = answer_prompts(run, run.stream.take(run.cfg.prompts_per_step))
    return batch, batch.rewards, 1


def answer_prompts(run, idx):
    """Stages 1-3 for the stream's prompts `idx`: G answers each, their rewards R and advantages A.

    1. Rollout: G answers per prompt, with their log-probs and entropies (gmts/trainer/rollout.py).
    2. Reward R_i: programs check each answer (rewards/), on a thread pool.
    3. Advantage per group: A_i = (R_i - mean) / (std + eps), R after --overlong-buffer's cost; on
       the rollout's device, with the rest of the batch (R stays on the CPU)."""
    cfg, G, stream, tokenizer = run.cfg, run.cfg.group_size, run.stream, run.tokenizer
    problems, prompt_ids = [stream.problems[i] for i in idx], [stream.prompt_ids[i] for i in idx]
    roll = sample(run.model, prompt_ids, group_size=G, eos_token_ids=run.eos_ids, decode=run.decode,
        temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, generator=run.rollout_gen,
        pad_token_id=tokenizer.pad_token_id, prompts_per_call=cfg.rollout_batch_size)  # 1. Rollout
    texts, answered = [], []                     # answer i's text, the problem it answers (i // G)
    for i, (row, mask) in enumerate(zip(roll.completion_ids.cpu(), roll.valid_mask.cpu())):
        texts.append(tokenizer.decode(row[mask], skip_special_tokens=True))
        answered.append(problems[i // G])
    R = torch.tensor(rewards.as_scorer(run.reward_fns).score(texts, answered, log=True).total,
                     dtype=torch.float32)                        # 2. Reward R_i of each answer (N,)
    shaped = R if not cfg.overlong_buffer else R + overlong_penalty(
        roll.lengths.cpu(), cfg.max_new_tokens, cfg.overlong_buffer, cfg.overlong_penalty)
    A = group_advantages(shaped, G, std=cfg.adv_std).to(roll.valid_mask.device)  # 3. Advantage (N,)
    return Batch(**vars(roll), problems=problems, texts=texts, rewards=R, advantages=A)


def dynamic_sampling(run):
    """DAPO's dynamic sampling: groups whose answers all got the same reward carry no signal (A =
    0); keep the mixed ones and sample more prompts, at most --max-sampling-tries rollouts, until
    this process has its share. A process that has it still takes every further try's prompts (the
    data position stays the same everywhere). Returns what collect_batch does."""
    cfg = run.cfg
    share = cfg.prompts_per_step // distributed.world_size()          # whole groups per process
    parts, sampled_rewards, tries, kept = [], [], 0, 0
    while tries < cfg.max_sampling_tries and int(batch_sum(int(kept < share))):
        tries += 1
        idx = run.stream.take(cfg.prompts_per_step)
        if kept >= share:                                 # done here; another process still samples
            continue
        batch = answer_prompts(run, idx)
        sampled_rewards.append(batch.rewards)
        keep = mixed_groups(batch.rewards, cfg.group_size)   # the mixed groups, no more than needed
        part = batch.groups(keep & (torch.cumsum(keep.long(), 0) + kept <= share), cfg.group_size)
        if part.problems:
            parts.append(part)
        kept += len(part.problems)
    batch = concat_rollouts(parts, run.tokenizer.pad_token_id) if parts else None
    return batch, torch.cat(sampled_rewards) if sampled_rewards else torch.zeros(0), tries


# --------------------------------------------------------------------------------------------------
# Stages 4-7: score, select, masked loss, optimizer step.

def update_policy(cfg, model, ref_model, optimizer, batch, select_gen, device, step=0, probe=None):
    """Score -> select -> masked loss -> optimizer step, once per mini-batch of --mini-batch-size
    whole groups (one by default: the on-policy step), --ppo-epochs passes over the batch
    (gmts/METHOD.md, "Several optimizer steps per rollout batch"). batch: its tensors (R aside)
    on `device`, where answer_prompts builds them. Returns one record (a dict) per optimizer step,
    for gmts/trainer/metrics.py's UpdateLog. probe: --log-grad-noise's.

    4. Score at θ: log π_θ, E (n, T) (on-policy, θ = θ_old: the rollout's own), ω (n, T).
    5. Select exactly k = ceil(ρ · N_valid) tokens of THIS mini-batch (or of each group).
    6. Masked loss: weights w·m (n, T), normalised over the mini-batch (all processes); the rows
       with w > 0 and A != 0 or β != 0 (or a KL term) are the only ones with a gradient.
    7. Optimizer step, unless the loss or the gradient is not finite."""
    ref_logp = reference_logprobs(cfg, model, ref_model, batch) if cfg.beta > 0 else None  # (N, T)
    exclude = (batch.advantages == 0) if cfg.exclude_zero_adv else None   # (N,) A = 0: left out
    ratio = cfg.ratio if cfg.selector != "none" else 1.0        # ρ; "none" keeps every token
    kl_all = cfg.beta > 0 and cfg.kl_coverage == "all"          # the KL term on every valid token
    records, on_policy = [], True
    for epoch in range(cfg.ppo_epochs):
        for rows in minibatch_rows(len(batch.prompt_ids), cfg.group_size, cfg.mini_batch_size,
                                   seed=cfg.seed, step=step, epoch=epoch, device=device):
            mb = MiniBatch(batch, rows, cfg.group_size, ref_logp=ref_logp, exclude=exclude)
            valid = mb.valid_mask                                                     # (n, T)
            logp, entropy = ((mb.old_logp, mb.entropy) if on_policy                  # 4. Score
                             else scoring_pass(model, batch, rows, cfg))
            counts = selection_counts(valid, mb.exclude, ratio, cfg.select_scope,
                                      mb.group_ids) if cfg.beta else None      # (S, N_valid)
            share = kl_share(cfg.loss_norm, cfg.kl_coverage, *counts) if cfg.beta else 1.0
            omega = token_omega(logp, mb.old_logp, mb.advantages, eps_low=cfg.eps_low,   # (n, T)
                eps_high=cfg.eps_high, beta=cfg.beta, ref_logp=mb.ref_logp, kl_share=share)
            length_weight = relative_token_weight(valid, cfg.loss_norm)  # (n, T) 1/|o_i| or None
            finite = all_finite((logp, entropy, omega), valid)   # NaN/inf: no step, zeros to rank
            if not finite:
                logp, entropy, omega = (x.nan_to_num(0.0, 0.0, 0.0) for x in (logp, entropy, omega))
            scores = token_scores(cfg.selector, entropy, omega, length_weight, select_gen)  # (n, T)
            selected = batch_select(scores, valid, ratio, scope=cfg.select_scope,     # 5. Select
                                    group_ids=mb.group_ids, bottom=cfg.bottom, exclude=mb.exclude)
            weights = loss_weights(valid, selected, cfg.loss_norm, batch_sum)      # 6. (n, T) >= 0
            kl_weights = loss_weights(valid, valid, cfg.loss_norm, batch_sum) if kl_all else None
            live = weights.any(1) & ((mb.advantages != 0) | bool(cfg.beta)) | kl_all & valid.any(1)
            model.train()             # (the gradients: None, as every optimizer step leaves them)
            loss, grad_norm, outcome = math.nan, math.nan, NON_FINITE
            if finite:                               # 6. the backward passes; 7. the optimizer step
                accumulate = probe.accumulate if probe else accumulate_gradients
                loss, passes = accumulate(model, batch, mb, rows[live], weights, cfg,
                                          kl_weights=kl_weights, on_policy=on_policy)
                loss, grad_norm, outcome = optimizer_step(
                    model, optimizer, loss, passes, cfg.max_grad_norm)
            on_policy &= outcome != STEPPED
            records.append({"mb": mb, "logp": logp, "entropy": entropy, "omega": omega,
                            "length_weight": length_weight, "selected": selected, "loss": loss,
                            "loss_weights": weights, "grad_norm": grad_norm, "outcome": outcome,
                            "noise": probe.figures(grad_norm, outcome) if probe else {}})
    return records


def reference_logprobs(cfg, model, ref_model, batch):
    """log π_ref of the sampled tokens (β > 0): the frozen starting model, or with LoRA the same
    model with its adapters switched off (no second copy in memory)."""
    rows = torch.arange(batch.completion_ids.shape[0], device=batch.completion_ids.device)
    with model.disable_adapter() if ref_model is None else contextlib.nullcontext():
        return scoring_pass(ref_model or model, batch, rows, cfg, with_entropy=False)[0]


# --------------------------------------------------------------------------------------------------
# One step, and the run.

TRAINED, NO_SIGNAL, BAD_WEIGHTS = "trained", "no group with mixed rewards", "non-finite weights"


@dataclasses.dataclass
class StepDone:
    """What one train_step did, for the log."""
    outcome: str                   # TRAINED, NO_SIGNAL (no group with mixed rewards) or BAD_WEIGHTS
    batch: Batch = None            # the training batch (None: none)
    sampled_rewards: torch.Tensor = None   # (n,) R of every answer sampled in the step
    tries: int = 0                 # rollouts taken (dynamic sampling: several)
    records: list = ()             # update_policy's, one per optimizer step
    time_rollout_s: float = 0.0
    time_train_s: float = 0.0


def train_step(run, step):
    """Stages 1-7 on one rollout batch: a StepDone."""
    cfg, model, t_start = run.cfg, run.model, time.time()
    if not all_finite(model.parameters()):   # NaN/inf weights: no rollout to trust, no step
        return StepDone(BAD_WEIGHTS)
    gathered = distributed.layers_gathered if several_processes() else contextlib.nullcontext
    with gathered(model.eval()):             # FSDP: the layers kept gathered over the rollout
        batch = collect_batch(run)
    done = StepDone(NO_SIGNAL, *batch, time_rollout_s=time.time() - t_start)
    if int(batch_sum(int(done.batch is None))):      # no group anywhere (no process may step alone)
        return done
    done.records = update_policy(cfg, model, run.ref_model, run.optimizer, done.batch,
        run.select_gen, run.device, step, probe=GradNoise(model) if cfg.log_grad_noise else None)
    done.outcome, done.time_train_s = TRAINED, time.time() - t_start - done.time_rollout_s
    return done


def step_memory_advice(cfg):
    """The flags that lower a step's memory: the rollout's, then the update's."""
    return (f"lower --group-size ({cfg.group_size}) or --max-new-tokens ({cfg.max_new_tokens}) or "
            f"--rollout-batch-size ({cfg.rollout_batch_size or cfg.prompts_per_step}) for the "
            f"rollout; --micro-batch-size ({cfg.micro_batch_size}), --micro-batch-tokens or "
            "--gradient-checkpointing for the update")


def train_bar(run, start_step):
    """The run's progress bar, on the main process. No tqdm rate: it would average evaluations and
    checkpoints into s/step; s_per_step (its postfix) is the step's own time."""
    return Progress(total=run.cfg.steps, initial=start_step, desc="train", unit="step",
                    dynamic_ncols=True, mininterval=1.0, disable=not run.main_process,
                    bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]")


def step_metrics(run, step, done, lr):
    """The step's metrics line and its samples.jsonl lines (None: none): step_figures, then the
    update's figures (gmts/trainer/metrics.py), the learning rate and the peak memory so far."""
    metrics, samples = step_figures(run, step, done), None
    if done.records:
        log = UpdateLog(run.cfg, done.batch, done.records)
        metrics.update(log.metrics())
        metrics["tokens_per_s"] = metrics["valid_tokens"] / (metrics["time_rollout_s"]
                                                             + metrics["time_train_s"])
        samples = log.samples(step)
    # the peak so far, this step included
    metrics.update(lr=lr, peak_memory_mb=peak_memory_mb(run.device))
    return metrics, samples


def step_figures(run, step, done):
    """The step's metrics line, before the update's figures: the rollout's, each reward's, the
    times."""
    if done.outcome == BAD_WEIGHTS:
        return {"step": step, "reward_mean": math.nan, "accuracy": math.nan,
                "skipped": BAD_WEIGHTS, "time_rollout_s": 0.0, "time_train_s": 0.0}
    return dict(step=step, **rollout_figures(run.cfg, done.batch, done.sampled_rewards),
                sampling_tries=done.tries, **each_reward(run.reward_fns),
                time_rollout_s=done.time_rollout_s,
                time_train_s=done.time_train_s)


def each_reward(scorer):
    """Each --reward's figures over every answer sampled this step (all processes):
    reward_<name>_mean over the answers it applied to, reward_<name>_none the share where it
    returned None. {} without --reward."""
    counts = rewards.as_scorer(scorer).take_counts()
    if not counts:
        return {}
    flat = [c for label in counts for c in counts[label]]        # (applied, sum, None) per reward
    summed = batch_sum(torch.tensor(flat, dtype=torch.float64)).tolist()
    return rewards.reward_figures({
        label: summed[3 * k:3 * k + 3] for k, label in enumerate(counts)})


def stopped_note(cfg, step, last_saved):
    """What a run stopped by a signal after `step` leaves to do, and the command that does it."""
    if step < cfg.steps or last_saved != cfg.steps:
        return f"resume with --resume {cfg.output_dir}"
    if cfg.lora_rank:                     # the last checkpoint is written, the merged export not
        return (f"training is complete, but {ckpt.MERGED}/ was not written: --resume "
                f"{cfg.output_dir} writes it")
    return f"that was the last step: the run is complete ({ckpt.find_checkpoint(cfg.output_dir)})"


@contextlib.contextmanager
def reward_failures(cfg, step):
    """A reward that failed during step `step` (or its evaluation): one line naming it, the user's
    traceback, and where the run stands; a signal that came while rewards were scoring: the run
    stops at once. Nothing of the step is kept, so --resume continues as if it had not begun."""
    try:
        yield
    except rewards.RewardError as err:
        raise SystemExit(err.for_cli(f"; the run stopped in step {step}, which is not kept: "
                                     f"{resume_hint(cfg)}")) from None
    except rewards.ScoringStopped as err:
        print(f"gmts: stopped by signal {err.signum} in step {step}, while rewards were scoring "
              f"(the step is not kept); {resume_hint(cfg)}", file=sys.stderr, flush=True)
        sys.exit(128 + err.signum)


def resume_hint(cfg):
    """How to go on from what the run folder holds."""
    if ckpt.list_checkpoints(cfg.output_dir):
        return f"resume with --resume {cfg.output_dir}"
    return "no checkpoint was written yet: the same command starts again"


def evaluate(run, log, label, step, stop=None):
    """An in-training evaluation (gmts/tools/evaluate.py): a progress bar, then its line, timed.
    With `stop` (from the first step on) a signal abandons it, except under FSDP, where every
    process evaluates in step; before, a signal ends the process. Returns its eval_* metrics."""
    t = time.time()
    abandon = stop.interruptible() if stop and not run.cfg.fsdp else contextlib.nullcontext()
    with reward_failures(run.cfg, step), abandon, memory_line(
            "train.py", f"evaluating {label}",
            "lower --eval-max-rows (the rows one evaluation call samples; 0: the rollout's, "
            "--rollout-batch-size x --group-size) or --eval-samples"):
        try:
            out = evaluate_during_training(run, "eval " + label)
        except (Interrupted, rewards.ScoringStopped):
            out = {}
    log.spent["eval"] += time.time() - t
    if out:
        tqdm.write(report.eval_line(label, out, log.overlap))
    return out


def non_finite(done):
    """Whether the step met NaN/inf: in the weights, or in a loss, gradient or model output."""
    return done.outcome == BAD_WEIGHTS or any(r["outcome"] == NON_FINITE for r in done.records)


def diverged(cfg, step, bad_in_a_row, last_saved):
    """The line that ends a run after --max-bad-steps non-finite steps in a row."""
    return (f"error: {bad_in_a_row} steps in a row with a non-finite loss, gradient or model "
            f"output (NaN/inf; last at step {step}); the last checkpoint is "
            f"{last_checkpoint(cfg, last_saved)}. Lower "
            "--lr or check the data.")


def last_checkpoint(cfg, last_saved):
    """The run folder's newest checkpoint, or "none" when this run has saved none yet."""
    return ckpt.find_checkpoint(cfg.output_dir) if last_saved else "none"


def save_if_finite(run, step, bar, log, say):
    """A checkpoint after `step` (gmts/run/checkpoint.py), unless the weights hold NaN/inf: never
    saved, so the last checkpoint stays the last good one (said once per run of bad steps: `say`).
    Returns whether it saved."""
    if not all_finite(run.model.parameters()):
        if run.main_process and say:
            print(f"gmts: no checkpoint after step {step}: the weights hold NaN/inf (the last "
                  f"checkpoint, {last_checkpoint(run.cfg, log.last_saved)}, is the last good one)",
                  file=sys.stderr, flush=True)
        return False
    t = time.time()
    with bar.doing(f"writing checkpoint step-{step}"):
        save(run, step)
    log.spent["save"] += time.time() - t
    log.last_saved = step
    return True


def exit_stopped(run, stop, step, last_saved):
    """A signal came: the step is done (and saved); one line on what is left to do, then exit."""
    signum = stop.signum or 15               # another process was signalled: SIGTERM's code
    if run.main_process:
        print(f"gmts: stopped by signal {signum} after step {step}; "
              + stopped_note(run.cfg, step, last_saved))
    sys.exit(128 + signum)


def finish(run, log):
    """The end of a run that reached --steps: LoRA's merged export of the last step, unless a
    resume at the end finds it written, then the run's final line."""
    cfg, exported = run.cfg, False
    if cfg.lora_rank and log.last_saved == cfg.steps and run.main_process and export_step(
            os.path.join(cfg.output_dir, ckpt.MERGED)) != cfg.steps:
        save_merged_lora(run, cfg.steps)
        exported = True
    if run.main_process:
        print(log.final_line(exported))


def main(argv=None):
    """The run: every check, then the model and data, then --steps steps, each trained, logged,
    evaluated and saved as the flags say; a signal ends the run after the current step's save."""
    cfg, resume_from, state = check_start(sys.argv[1:] if argv is None else argv)  # one line each
    with memory_line("train.py", "loading the model",
                     "use --dtype bfloat16, --lora-rank, a smaller --model or a larger machine"):
        run, start_step = build_run(cfg, resume_from, state, load_prompts=load_prompts,
                                    reward_functions=reward_functions)
    overlap = eval_overlap(cfg, run.stream.problems) if run.main_process else ""
    log = RunLog(cfg, run.main_process, start_step, overlap)   # metrics.jsonl, --report-to, times
    # Before the first step nothing is trained: a signal still ends the process at once, and the
    # folder holds nothing that keeps the same command from starting (gmts/run/folder.py).
    if cfg.eval_before and start_step == 0:
        log.evaluated_before(evaluate(run, log, "before training", 0))
    stop = StopRequest()          # from the first step: finish the step, save, exit
    # a user's reward still scoring a few seconds after a signal is abandoned, with its step
    rewards.set_interrupt_check(stop.overdue)
    bar, bad_in_a_row = train_bar(run, start_step), 0
    for step in range(start_step + 1, cfg.steps + 1):
        lr = cfg.lr * min(1.0, step / cfg.warmup_steps) if cfg.warmup_steps else cfg.lr
        for group in run.optimizer.param_groups:
            group["lr"] = lr
        with reward_failures(cfg, step), memory_line("train.py", f"in step {step}",
                                                      step_memory_advice(cfg)):
            done = train_step(run, step)
        metrics, samples = step_metrics(run, step, done, lr)
        bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}", acc=f"{metrics['accuracy']:.3f}",
                        s_per_step=f"{metrics['time_rollout_s'] + metrics['time_train_s']:.1f}",
                        refresh=False)
        bar.update()                      # the step done, before its evaluation and save
        stopping = stop.any_process()     # a signal during the step: no evaluation after it
        if cfg.eval_every and (step % cfg.eval_every == 0 or step == cfg.steps) and not stopping:
            metrics.update(evaluate(run, log, f"after step {step}", step, stop))
        log.write(step, metrics, samples)
        bad_in_a_row = bad_in_a_row + 1 if non_finite(done) else 0
        if bad_in_a_row >= cfg.max_bad_steps:
            bar.close()
            raise SystemExit(diverged(cfg, step, bad_in_a_row, log.last_saved))
        stopping = stop.any_process()
        if ((cfg.save_every and step % cfg.save_every == 0) or step == cfg.steps or stopping) \
                and save_if_finite(run, step, bar, log, say=bad_in_a_row <= 1):
            stopping = stop.any_process()       # also a signal during the save: stop right after it
        if stopping:
            bar.close()
            exit_stopped(run, stop, step, log.last_saved)
    bar.close()
    log.close()
    finish(run, log)


if __name__ == "__main__":
    try:
        main()
    except (MemoryError, RuntimeError, ImportError) as err:    # out of memory anywhere else
        from gmts.run.machine import out_of_memory
        if out_of_memory(err) is None:
            raise
        sys.exit(f"error: out of memory ({out_of_memory(err)}); lower the batch's flags "
                 "(--group-size, --rollout-batch-size, --micro-batch-size) or the model's size")
    except OSError as err:          # stdout on a full disk (`> log`): one line (gmts/run/folder.py)
        from gmts.run.folder import stdout_failed
        if not stdout_failed(err):
            raise
        sys.exit(1)
    finally:
        # a clean exit for every process under torchrun (gloo aborts without it), also when the
        # run ends by an exception (its traceback holds the model)
        distributed.shutdown(sys.exc_info()[1])
