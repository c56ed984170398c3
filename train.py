"""GRPO / DAPO with token selection (ETS, GMTS), in plain PyTorch.

    python train.py --preset cpu-demo --selector gmts    # a CPU run that learns (SmolLM2-135M, 0..30 sums)
    python train.py --selector gmts                      # Qwen2.5-1.5B-Instruct on GSM8K, top-20% by |E·ω|
    python train.py --preset paper-math --selector ets   # the paper's settings (README, "Presets")
    python train.py --help                               # every option (gmts/run/config.py)

One step, top to bottom (gmts/METHOD.md, "One RLVR step"):

    collect_batch:  1. rollout -> 2. reward -> 3. advantage
    update_policy:  4. score -> 5. select -> 6. masked loss -> 7. optimizer step  (once per mini-batch)

Everything the method needs is a pure function in gmts/method/ (tested in tests/test_method.py and, against an
independent reference, tests/test_update_reference.py); this file wires them together. The machinery that makes the
batch-wide quantities right when the batch is computed in pieces (mini-batches, micro-batches, several processes,
FSDP) lives in gmts/trainer/step.py: the step asks it for `ranks = processes()`, one process's sums (the values
themselves) or torchrun's (gmts/trainer/distributed.py, which a single process's step never enters). What a step logs comes
from gmts/trainer/diagnostics.py, one `log.record(...)` per optimizer step. Setting up, checkpoints and signals:
gmts/run/state.py, which gets the data loader and the reward functions from here (gmts/ never imports data/ or
rewards/).
"""
import sys

if __name__ == "__main__":
    from gmts.run.folder import WatchedStdout, exit_on_interrupt
    exit_on_interrupt("train.py")      # Ctrl-C during start-up: one line, not a traceback (gmts/run/folder.py)
    sys.stdout = WatchedStdout(sys.stdout)     # a failed write to stdout (a full disk): one line, at the end
    # Every flag against gmts/run/validate.py's table before torch loads (~3 s): a bad one is one line, exit 2, at once.
    from gmts.run.config import parse_config
    parse_config(sys.argv[1:])

import contextlib  # noqa: E402
import functools  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

import data  # noqa: E402
import rewards  # noqa: E402
from gmts.method.grpo import (group_advantages, overlong_penalty, relative_token_weight, token_omega,  # noqa: E402
                              token_scores)
from gmts.run import checkpoint as ckpt, report, runlog  # noqa: E402
from gmts.run.state import (StopRequest, build_run, evaluate_during_training, log_paths, save,  # noqa: E402
                            save_merged_lora)
from gmts.run.folder import check_start  # noqa: E402
from gmts.trainer import distributed  # noqa: E402
from gmts.trainer.diagnostics import UpdateLog, rollout_figures  # noqa: E402
from gmts.trainer.policy import peak_memory_mb  # noqa: E402
from gmts.trainer.rollout import sample_batched  # noqa: E402
from gmts.trainer.step import (Batch, MiniBatch, PromptStream, accumulate_gradients,  # noqa: E402,F401
                               dynamic_sampling, finite_on, kl_share, masked_loss_inputs, minibatch_rows,
                               my_prompts, optimizer_step, processes, scoring_pass, select,
                               use_dynamic_sampling, weights_finite)   # (PromptStream: train.PromptStream for notebooks and tests)


# ----------------------------------------------------------------------------------------------------------------------
# The data and the rewards (data/, rewards/), handed to gmts/run/state.py's build_run.

def load_prompts(cfg, tokenizer):
    """Problems -> chat-templated prompt ids (data/); prompts longer than --max-prompt-tokens are skipped and counted.
    Returns (problems, prompt ids, how many were skipped). The --reward functions are loaded and
    tried on the first rows here, before any model loads: a problem is one line naming the reward,
    then the user's traceback."""
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


def reward_functions(cfg, names):
    """The step's scorer (rewards.Scorer, scoring a batch concurrently): --reward's functions with
    --reward-weights for every problem, or without --reward each problem's own built-in reward
    (`names`: those the problems use)."""
    trusted = cfg.code_trusted_only
    try:
        chosen = rewards.load_rewards(cfg.reward, cfg.reward_weights, trusted_only=trusted) or None
    except rewards.RewardError as err:
        raise SystemExit(err.for_cli()) from None
    return rewards.Scorer(chosen, workers=cfg.reward_workers or None, trusted_only=trusted)


# ----------------------------------------------------------------------------------------------------------------------
# Stages 1-3: rollout, reward, advantage.

def collect_batch(cfg, model, tokenizer, stream, eos_ids, generator, reward_fns):
    """Rollout + reward + advantage for this process's share of the step's prompts (all of them without torchrun).
    Returns (the Batch or None, every sampled answer's R (n,), how many rollouts it took).

    With dynamic sampling (DAPO), groups whose answers all got the same reward carry no signal (A = 0): they are
    dropped and more prompts sampled (gmts/trainer/step.py, dynamic_sampling)."""
    answer = functools.partial(answer_prompts, cfg, model, tokenizer, stream, eos_ids=eos_ids, generator=generator,
                               reward_fns=reward_fns)
    ranks = processes()
    if use_dynamic_sampling(cfg):
        return dynamic_sampling(cfg, stream, answer, tokenizer.pad_token_id, ranks)
    batch = answer(my_prompts(cfg, stream, ranks))
    return batch, batch.rewards, 1


def answer_prompts(cfg, model, tokenizer, stream, idx, *, eos_ids, generator, reward_fns):
    """Stages 1-3 for the stream's prompts `idx`: G answers each, their rewards R and advantages A, as a Batch."""
    G = cfg.group_size
    problems, prompt_ids = [stream.problems[i] for i in idx], [stream.prompt_ids[i] for i in idx]
    # 1. Rollout: G answers per prompt, with their log-probs and entropies (gmts/trainer/rollout.py).
    roll = sample_batched(model, prompt_ids, prompts_per_call=cfg.rollout_batch_size, group_size=G,
                          max_new_tokens=cfg.max_new_tokens, eos_token_ids=eos_ids,
                          pad_token_id=tokenizer.pad_token_id, temperature=cfg.temperature, generator=generator,
                          compile=cfg.compile)
    texts = [tokenizer.decode(row[mask], skip_special_tokens=True)
             for row, mask in zip(roll.completion_ids.cpu(), roll.valid_mask.cpu())]
    # 2. Reward: programs check each answer (rewards/), all at once on a thread pool: R_i, the
    #    weighted sum of the --reward functions (or each row's own reward).
    answered = [problems[i // G] for i in range(len(texts))]
    try:
        R = torch.tensor(rewards.as_scorer(reward_fns).score(texts, answered, log=True).total,
                         dtype=torch.float32)
    except rewards.RewardError as err:
        raise SystemExit(err.for_cli()) from None
    # 3. Advantage, per group: A_i = (R_i - mean) / (std + eps) (gmts/method/grpo.py). With --overlong-buffer, R
    # first pays DAPO's length penalty; which groups count as mixed is still decided by the checker's R alone.
    shaped = R if not cfg.overlong_buffer else R + overlong_penalty(
        roll.valid_mask.sum(dim=1).cpu(), cfg.max_new_tokens, cfg.overlong_buffer, cfg.overlong_penalty)
    return Batch(problems=problems, prompt_ids=prompt_ids, completion_ids=roll.completion_ids, valid=roll.valid_mask,
                 logp=roll.logp, entropy=roll.entropy, texts=texts, rewards=R,
                 advantages=group_advantages(shaped, G, std=cfg.adv_std))


# ----------------------------------------------------------------------------------------------------------------------
# Stages 4-7: score, select, masked loss, optimizer step.

def update_policy(cfg, model, ref_model, optimizer, batch, select_gen, device, step=0):
    """Stages 4-7 (policy_steps) and their figures: (the metrics, the first pass's selection (N, T) bool: which
    tokens trained). What notebooks and tests call; train_step calls policy_steps and leaves the figures to main()."""
    log = policy_steps(cfg, model, ref_model, optimizer, batch, select_gen, device, step)
    return log.metrics(), log.selected


def policy_steps(cfg, model, ref_model, optimizer, batch, select_gen, device, step=0):
    """Score -> select -> masked loss -> optimizer step, once per mini-batch of --mini-batch-size whole groups (one
    mini-batch by default: the on-policy step), --ppo-epochs passes over the rollout batch. Each mini-batch is one
    optimizer batch: scored at the CURRENT θ, ranked and normalised on its own (gmts/METHOD.md, "Several optimizer
    steps per rollout batch"). Returns the UpdateLog of its optimizer steps (gmts/trainer/diagnostics.py): .selected
    is the first pass's selection, .metrics() the figures."""
    ranks, batch = processes(), batch.to(device)
    ref_logp = reference_logprobs(cfg, model, ref_model, batch, ranks) if cfg.beta > 0 else None   # log π_ref
    exclude = (batch.advantages == 0) if cfg.exclude_zero_adv else None   # exact: all-equal groups get A = 0 exactly
    params = [p for p in model.parameters() if p.requires_grad]
    log, moved = UpdateLog(cfg, batch, ranks, params), False
    for epoch in range(cfg.ppo_epochs):
        for rows in minibatch_rows(len(batch.prompt_ids), cfg.group_size, cfg.mini_batch_size, seed=cfg.seed,
                                   step=step, epoch=epoch, device=device, ranks=ranks):
            mb = MiniBatch(rows, valid=batch.valid, advantages=batch.advantages, old_logp=batch.logp,
                           entropy=batch.entropy, ref_logp=ref_logp, exclude=exclude, group_size=cfg.group_size)
            # 4. Score at the current θ: log π_θ and E of every sampled token, ω, the score. Until the first
            #    optimizer step θ = θ_old: the rollout's own values are exact and r = π_θ / π_old = 1, with no
            #    forward pass (gmts/METHOD.md, "Where E and ω come from"). After it, a no-grad scoring pass.
            logp, entropy = (mb.old_logp, mb.entropy) if not moved else scoring_pass(model, batch, rows, cfg, ranks)
            omega = token_omega(logp, mb.old_logp, mb.advantages, eps_low=cfg.eps_low, eps_high=cfg.eps_high,
                                beta=cfg.beta, ref_logp=mb.ref_logp,
                                kl_weight=kl_share(cfg, mb, ranks) if cfg.beta else 1.0)   # ω's KL share (β > 0)
            length_weight = relative_token_weight(mb.valid, cfg.loss_norm)   # w_it: 1/|o_i| under per-answer means
            # NaN/inf in log π, E or ω (a NaN weight, an update that drove weights to inf): nothing to rank and no
            # step; counted as a non-finite step (--max-bad-steps in a row stop the run), never a traceback.
            finite = finite_on(mb.valid, (logp, entropy, omega), ranks)
            if not finite:
                logp, entropy, omega = (torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
                                        for x in (logp, entropy, omega))
            scores = token_scores(cfg.selector, entropy, omega, weight=length_weight, generator=select_gen)
            # 5. Select: exactly k = ceil(ρ · N_valid) tokens of THIS mini-batch, across micro-batches and ranks.
            selected = select(cfg, scores, mb.valid, mb.group_ids, mb.exclude, ranks=ranks)
            # 6. Masked loss, normalised over the mini-batch: its micro-batches' gradients sum to its gradient.
            loss_inputs = masked_loss_inputs(cfg, mb, selected, on_policy=not moved, ranks=ranks)
            model.train()
            optimizer.zero_grad(set_to_none=True)
            if finite:
                loss, n_passes = accumulate_gradients(model, batch, loss_inputs, cfg, ranks, noise=log.noise)
                # 7. Optimizer step (gradients summed over ranks first), unless the loss or gradient is not finite.
                loss, grad_norm, outcome = optimizer_step(optimizer, params, loss, n_passes, cfg.max_grad_norm, ranks)
            else:
                loss, grad_norm, outcome = math.nan, math.nan, "non-finite"
            moved |= outcome == "stepped"
            log.record(mb, logp=logp, entropy=entropy, omega=omega, length_weight=length_weight, selected=selected,
                       loss_weights=loss_inputs.weights, loss=loss, grad_norm=grad_norm, outcome=outcome)
    return log


def reference_logprobs(cfg, model, ref_model, batch, ranks):
    """log π_ref of the sampled tokens, for the k3 KL term (β > 0): the frozen starting model, or with LoRA the
    same model with its adapters switched off (no second copy in memory)."""
    rows = torch.arange(batch.completion_ids.shape[0], device=batch.completion_ids.device)
    with model.disable_adapter() if ref_model is None else contextlib.nullcontext():
        return scoring_pass(ref_model or model, batch, rows, cfg, ranks, with_entropy=False)[0]


# ----------------------------------------------------------------------------------------------------------------------
# One step, and the run.

def train_step(run, step):
    """Stages 1-7 on one rollout batch. Returns (the step's metrics so far, the UpdateLog of its optimizer steps, or
    None when there was nothing to learn): main() adds the log's figures and samples when it writes the step's line."""
    cfg, ranks, t_start = run.cfg, processes(), time.time()
    if not weights_finite(run.model.parameters(), ranks):   # NaN/inf weights: no rollout to trust, no step
        return dict(step=step, reward_mean=math.nan, accuracy=math.nan, skipped="non-finite weights",
                    time_rollout_s=0.0, time_train_s=0.0), None
    run.model.eval()
    with ranks.layers_gathered(run.model):
        batch, sampled_rewards, tries = collect_batch(cfg, run.model, run.tokenizer, run.stream, run.eos_ids,
                                                      run.rollout_gen, run.reward_fns)
    metrics = dict(step=step, **rollout_figures(cfg, batch, sampled_rewards, ranks), sampling_tries=tries,
                   **each_reward(run.reward_fns, ranks), time_rollout_s=time.time() - t_start)
    if "skipped" in metrics:              # every group was all-equal in every try (on some rank): nothing to learn
        return dict(metrics, time_train_s=0.0), None
    log = policy_steps(cfg, run.model, run.ref_model, run.optimizer, batch, run.select_gen, run.device, step)
    return dict(metrics, time_train_s=time.time() - t_start - metrics["time_rollout_s"]), log


def each_reward(scorer, ranks):
    """Each --reward's figures over every answer sampled this step (all ranks): reward_<name>_mean
    over the answers it applied to, reward_<name>_none the share where it returned None. {} without
    --reward."""
    counts = rewards.as_scorer(scorer).take_counts()
    if not counts:
        return {}
    flat = [c for label in counts for c in counts[label]]        # (applied, sum, None) per reward
    summed = ranks.sum(torch.tensor(flat, dtype=torch.float64)).tolist()
    return rewards.reward_figures({
        label: summed[3 * k:3 * k + 3] for k, label in enumerate(counts)})


def main(argv=None):
    cfg, resume_from, state = check_start(sys.argv[1:] if argv is None else argv)   # every check: one line
    run, start_step = build_run(cfg, resume_from, state, load_prompts=load_prompts, reward_functions=reward_functions)
    stop, reporter = StopRequest(), report.open(cfg if run.main_process else None)   # --report-to (gmts/run/report.py)
    metrics_path, samples_path = log_paths(cfg)
    t_run, spent = time.time(), {"eval": 0.0, "save": 0.0}       # the wall time the final line reports, and its parts

    def evaluate(label):                 # an in-training evaluation: a progress bar, then its line, timed
        t = time.time()
        out = evaluate_during_training(run, "eval " + label)
        spent["eval"] += time.time() - t
        if out:
            tqdm.write(report.eval_line(label, out))
        return out

    eval_before = evaluate("before training") if cfg.eval_before and start_step == 0 else {}
    if eval_before:
        reporter.log(0, eval_before)

    bad_in_a_row, last_saved, first, last = 0, start_step, None, None
    # No tqdm rate: it would average evaluations and checkpoints into s/step; s_per_step is the step's own time.
    bar = tqdm(range(start_step + 1, cfg.steps + 1), initial=start_step, total=cfg.steps, desc="train", unit="step",
               dynamic_ncols=True, mininterval=1.0, disable=not run.main_process,
               bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]")
    for step in bar:
        lr = cfg.lr * min(1.0, step / cfg.warmup_steps) if cfg.warmup_steps else cfg.lr
        for group in run.optimizer.param_groups:
            group["lr"] = lr
        metrics, log = train_step(run, step)
        samples = None
        if log is not None:              # the update's figures (gmts/trainer/diagnostics.py), computed for the log
            metrics.update(log.metrics())
            metrics["tokens_per_s"] = metrics["valid_tokens"] / (metrics["time_rollout_s"] + metrics["time_train_s"])
            samples = log.samples(step)
        metrics.update(lr=lr, peak_memory_mb=peak_memory_mb(run.device))     # the peak so far, this step included
        if cfg.eval_every and (step % cfg.eval_every == 0 or step == cfg.steps):
            metrics.update(evaluate(f"after step {step}"))
        if step == start_step + 1 and eval_before:
            metrics.update({"eval_before_" + k[len("eval_"):]: v for k, v in eval_before.items()})
        if run.main_process:
            runlog.append_jsonl(metrics_path, [metrics])        # whole lines or none; a full disk is one line
            if samples:
                runlog.append_jsonl(samples_path, samples)
            reporter.log(step, metrics, samples)
        first, last = first or metrics, metrics
        bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}", acc=f"{metrics['accuracy']:.3f}",
                        s_per_step=f"{metrics['time_rollout_s'] + metrics['time_train_s']:.1f}",
                        refresh=False)            # shown with the step count it belongs to (the bar's next update)
        bad_in_a_row = bad_in_a_row + 1 if "non-finite" in str(metrics.get("skipped", "")) else 0
        if bad_in_a_row >= cfg.max_bad_steps:
            bar.close()
            raise SystemExit(f"error: {bad_in_a_row} steps in a row with a non-finite loss, gradient or model output "
                             f"(NaN/inf; last at step "
                             f"{step}); the last checkpoint is "
                             f"{ckpt.find_checkpoint(cfg.output_dir) if last_saved else 'none'}. Lower --lr or check the data.")
        stopping = stop.any_process()
        if ((cfg.save_every and step % cfg.save_every == 0) or step == cfg.steps or stopping) and \
                not weights_finite(run.model.parameters(), processes()):
            if run.main_process and bad_in_a_row <= 1:                  # said once per run of bad steps
                    print(f"gmts: no checkpoint after step {step}: the weights hold NaN/inf (the last checkpoint, "
                      f"{ckpt.find_checkpoint(cfg.output_dir) if last_saved else 'none'}, is the last good one)",
                      file=sys.stderr, flush=True)
        elif (cfg.save_every and step % cfg.save_every == 0) or step == cfg.steps or stopping:
            t = time.time()
            bar.set_description_str(f"train: writing checkpoint step-{step}")
            save(run, step)
            bar.set_description_str("train")
            spent["save"] += time.time() - t
            last_saved = step
            stopping = stop.any_process()                       # also a signal during the save: stop right after it
        if stopping:
            bar.close()
            signum = stop.signum or 15                          # another process was signalled: SIGTERM's code
            if run.main_process:
                print(f"gmts: stopped by signal {signum} after step {step}; resume with --resume {cfg.output_dir}")
            sys.exit(128 + signum)
    bar.close()
    reporter.close()
    if cfg.lora_rank and last_saved == cfg.steps and run.main_process:
        save_merged_lora(run, cfg.steps)
    if last is not None and run.main_process:
        held_out = [f"{100 * r['eval_accuracy']:.1f}%" for r in (eval_before, last) if "eval_accuracy" in r]
        print(f"gmts: {cfg.steps - start_step} steps in {time.time() - t_run:.1f}s wall time (from the end of "
              f"loading: {spent['eval']:.1f}s of it evaluating, {spent['save']:.1f}s writing checkpoints); reward "
              f"{first['reward_mean']:.3f} -> {last['reward_mean']:.3f}, accuracy {first['accuracy']:.3f} -> "
              f"{last['accuracy']:.3f}" + (f", held-out accuracy {' -> '.join(held_out)}" if held_out else "")
              + f"; checkpoint {ckpt.find_checkpoint(cfg.output_dir)}")


if __name__ == "__main__":
    try:
        main()
    except OSError as err:           # stdout on a full disk (`> log`): one line (gmts/run/folder.py)
        from gmts.run.folder import stdout_failed
        if not stdout_failed(err):
            raise
        sys.exit(1)
    finally:
        distributed.shutdown()     # a clean exit for every process under torchrun (gloo aborts without it)
