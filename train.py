"""GRPO / DAPO with token selection (ETS, GMTS), in plain PyTorch.

    python train.py --preset cpu-demo --selector gmts    # a CPU run that learns (SmolLM2-135M, 0..30 sums)
    python train.py --selector gmts                      # Qwen2.5-1.5B-Instruct on GSM8K, top-20% by |E·ω|
    python train.py --preset paper-math --selector ets   # the paper's settings (README, "Presets")
    python train.py --help                               # every option (gmts/run/config.py)

One step, top to bottom (gmts/METHOD.md, "One RLVR step"):

    collect_batch:  1. rollout -> 2. reward -> 3. advantage
    update_policy:  4. score -> 5. select -> 6. masked loss -> 7. optimizer step  (once per mini-batch)

Everything the method needs is a pure function in gmts/ (tested in tests/test_method.py and, against an independent
reference, tests/test_update_reference.py); this file wires them together. The machinery that makes the batch-wide
quantities right when the batch is computed in pieces (mini-batches, micro-batches, several processes, FSDP) lives
in gmts/trainer/step.py; setting up, checkpoints and signals in gmts/run/state.py.
"""
import sys

if __name__ == "__main__":
    # Every flag against gmts/run/validate.py's table before torch loads (~3 s): a bad one is one line, exit 2, at once.
    from gmts.run.config import parse_config
    parse_config(sys.argv[1:])

import contextlib  # noqa: E402
import functools  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from tqdm import tqdm

import gmts
from gmts.run import checkpoint as ckpt
from gmts.trainer import distributed
from gmts.run import report, runlog
from gmts.run.config import use_dynamic_sampling
from gmts.trainer.diagnostics import UpdateLog, counterfactual_selections
from gmts.trainer.policy import peak_memory_mb
from gmts.trainer.rollout import pad_cat, sample_batched
from gmts.run.state import Batch, PromptStream, StopRequest, build_run, evaluate, load_prompts, log_paths, save, \
    save_merged_lora  # noqa: F401  (Batch, PromptStream, load_prompts: train.X for notebooks and tests)
from gmts.trainer.step import (MiniBatch, accumulate_gradients, kl_weight, masked_loss_weights, minibatch_rows,
                       optimizer_step, scoring_pass, select)
from gmts.run.validate import prepare_training


# ----------------------------------------------------------------------------------------------------------------------
# Stages 1-3: rollout, reward, advantage.

def collect_batch(cfg, model, tokenizer, stream, eos_ids, generator, reward_fns):
    """Rollout + reward + advantage for this process's share of the step's prompts (all of them without torchrun).

    With dynamic sampling (DAPO), groups whose answers all got the same reward carry no signal (A = 0): drop them and
    sample more prompts, at most --max-sampling-tries rollouts per step. Every rank takes the same prompts from the
    stream on every try (and uses its own slice), so the data position stays identical across ranks."""
    G, dynamic = cfg.group_size, use_dynamic_sampling(cfg)
    share = cfg.prompts_per_step // distributed.world_size()
    parts, sampled_rewards, tries, kept_groups = [], [], 0, 0
    while tries < (cfg.max_sampling_tries if dynamic else 1):
        still_needed = int(distributed.all_reduce_sum(torch.tensor(int(kept_groups < share))))
        if not still_needed:
            break
        tries += 1
        idx = stream.take(cfg.prompts_per_step)[distributed.rank() * share:(distributed.rank() + 1) * share]
        if kept_groups >= share:
            continue
        problems = [stream.problems[i] for i in idx]
        prompt_ids = [stream.prompt_ids[i] for i in idx]
        # 1. Rollout: G answers per prompt, with their log-probs and entropies (gmts/trainer/rollout.py).
        roll = sample_batched(model, prompt_ids, prompts_per_call=cfg.rollout_batch_size, group_size=G,
                              max_new_tokens=cfg.max_new_tokens, eos_token_ids=eos_ids,
                              pad_token_id=tokenizer.pad_token_id, temperature=cfg.temperature, generator=generator,
                              compile=cfg.compile)
        texts = [tokenizer.decode(row[mask], skip_special_tokens=True)
                 for row, mask in zip(roll.completion_ids.cpu(), roll.valid_mask.cpu())]
        # 2. Reward: a program checks each answer (rewards/).
        r = torch.tensor([reward_fns[p.reward](text, p.answer) for p, text in
                          zip((p for p in problems for _ in range(G)), texts)], dtype=torch.float32)
        sampled_rewards.append(r)
        # 3. Advantage, per group: A_i = (R_i - mean) / (std + eps) (gmts/method/grpo.py). With --overlong-buffer, R
        # first pays DAPO's length penalty; which groups count as mixed is still decided by the checker's R alone.
        shaped = r + gmts.overlong_penalty(roll.valid_mask.sum(dim=1).cpu(), cfg.max_new_tokens, cfg.overlong_buffer,
                                           cfg.overlong_penalty)
        adv = gmts.group_advantages(shaped, G, std=cfg.adv_std)
        keep = torch.ones(len(problems), dtype=torch.bool)
        if dynamic:
            keep = gmts.mixed_groups(r, G)                               # mixed groups only
        keep = keep & (torch.cumsum(keep.long(), 0) + kept_groups <= share)
        rows = keep.repeat_interleave(G)
        if keep.any():
            on = rows.to(roll.completion_ids.device)
            parts.append(dict(problems=[p for p, k in zip(problems, keep) if k],
                              prompt_ids=[p for p, k in zip(prompt_ids, keep) if k],
                              completion_ids=roll.completion_ids[on], valid=roll.valid_mask[on], logp=roll.logp[on],
                              entropy=roll.entropy[on], texts=[t for t, k in zip(texts, rows) if k],
                              rewards=r[rows], advantages=adv[rows]))
            kept_groups += int(keep.sum())
    all_rewards = torch.cat(sampled_rewards) if sampled_rewards else torch.zeros(0)
    if not parts:
        return None, all_rewards, tries
    batch = Batch(problems=sum((p["problems"] for p in parts), []),
                  prompt_ids=sum((p["prompt_ids"] for p in parts), []),
                  completion_ids=pad_cat([p["completion_ids"] for p in parts], tokenizer.pad_token_id),
                  valid=pad_cat([p["valid"] for p in parts], False),
                  logp=pad_cat([p["logp"] for p in parts], 0.0), entropy=pad_cat([p["entropy"] for p in parts], 0.0),
                  texts=sum((p["texts"] for p in parts), []), rewards=torch.cat([p["rewards"] for p in parts]),
                  advantages=torch.cat([p["advantages"] for p in parts]))
    return batch, all_rewards, tries


# ----------------------------------------------------------------------------------------------------------------------
# Stages 4-7: score, select, masked loss, optimizer step.

def update_policy(cfg, model, ref_model, optimizer, batch, select_gen, device, step=0):
    """Score -> select -> masked loss -> optimizer step, once per mini-batch of --mini-batch-size whole groups (one
    mini-batch by default: the on-policy step), --ppo-epochs passes over the rollout batch. Each mini-batch is one
    optimizer batch: scored at the CURRENT θ, ranked and normalised on its own (gmts/METHOD.md, "Several optimizer
    steps per rollout batch"). Returns the metrics and the first pass's selection (N, T)."""
    valid, adv = batch.valid.to(device), batch.advantages.to(device)
    old_logp, rollout_entropy = batch.logp.to(device), batch.entropy.to(device)    # π_old: the sampling policy
    ref_logp = reference_logprobs(cfg, model, ref_model, batch) if cfg.beta > 0 else None
    exclude = (adv == 0) if cfg.exclude_zero_adv else None          # exact: all-equal groups get A = 0 exactly
    params = [p for p in model.parameters() if p.requires_grad]
    passes = dict(group_size=cfg.group_size, micro_batch_size=cfg.micro_batch_size, temperature=cfg.temperature,
                  chunk_size=cfg.chunk_size)
    log, moved, time_select = UpdateLog(valid, adv), False, 0.0
    for epoch in range(cfg.ppo_epochs):
        for rows in minibatch_rows(len(batch.prompt_ids), cfg.group_size, cfg.mini_batch_size, seed=cfg.seed,
                                   step=step, epoch=epoch, device=device):
            mb = MiniBatch(rows, valid=valid, advantages=adv, old_logp=old_logp, ref_logp=ref_logp, exclude=exclude,
                           group_size=cfg.group_size)
            # 4. Score at the current θ: log π_θ and E of every sampled token, r = π_θ / π_old, ω, the score.
            #    Until the first optimizer step θ = θ_old: the rollout's own values are exact and r = 1, with no
            #    forward pass (gmts/METHOD.md, "Where E and ω come from"). After it, a no-grad scoring pass.
            if not moved:
                logp, entropy = mb.old_logp, rollout_entropy[rows]
            else:
                with distributed.layers_gathered(model):
                    logp, entropy = scoring_pass(model, batch.prompt_ids, batch.completion_ids, valid, rows, **passes)
            t_select = time.time()
            omega = gmts.token_omega(logp, mb.old_logp, mb.advantages, eps_low=cfg.eps_low, eps_high=cfg.eps_high,
                                     beta=cfg.beta, ref_logp=mb.ref_logp, kl_weight=kl_weight(cfg, mb))
            weight = gmts.relative_token_weight(mb.valid, cfg.loss_norm)     # w_it: 1/|o_i| under per-answer means
            scores = gmts.token_scores(cfg.selector, entropy, omega, weight=weight, generator=select_gen)

            # 5. Select: exactly k = ceil(ρ · N_valid) tokens of THIS mini-batch, across micro-batches and ranks.
            choose = functools.partial(select, cfg, valid=mb.valid, group_ids=mb.group_ids, exclude=mb.exclude)
            selected = choose(scores)
            time_select += time.time() - t_select
            ratio = torch.exp(logp - mb.old_logp)
            log.scored_tokens(rows, mb.valid, ratio, gmts.clip_active(ratio, mb.advantages, cfg.eps_low, cfg.eps_high))
            log.selection(rows, entropy, omega, weight, selected,      # + what ETS and GMTS would keep at ρ
                          *counterfactual_selections(functools.partial(choose, ratio=cfg.ratio), entropy, omega,
                                                     weight))

            # 6. Masked loss, normalised over the mini-batch: its micro-batches' gradients sum to its gradient.
            weights, kl_weights, active = masked_loss_weights(cfg, mb, selected)

            def loss(batch_rows, logp, on_policy=not moved):
                i = mb.position[batch_rows]
                return gmts.policy_loss(logp, logp.detach() if on_policy else mb.old_logp[i], mb.advantages[i],
                                        weights[i], eps_low=cfg.eps_low, eps_high=cfg.eps_high, beta=cfg.beta,
                                        ref_logp=None if mb.ref_logp is None else mb.ref_logp[i],
                                        kl_weights=None if kl_weights is None else kl_weights[i])
            model.train()
            optimizer.zero_grad(set_to_none=True)
            total, n_passes = accumulate_gradients(model, batch.prompt_ids, batch.completion_ids, valid, active, loss,
                                                   **passes)

            # 7. Optimizer step (gradients summed over ranks first), unless the loss or gradient is not finite.
            total, grad_norm, outcome = optimizer_step(optimizer, params, total, n_passes, cfg.max_grad_norm)
            log.update(total, grad_norm, outcome)
            moved |= outcome == "stepped"
    metrics = log.metrics(cfg.ratio)
    metrics["time_score_select_s"] = time_select        # ω, scores and the top-k (not the diagnostics)
    return metrics, log.selected


def reference_logprobs(cfg, model, ref_model, batch):
    """log π_ref of the sampled tokens, for the k3 KL term (β > 0): the frozen starting model, or with LoRA the
    same model with its adapters switched off (no second copy in memory)."""
    rows = torch.arange(batch.completion_ids.shape[0], device=batch.completion_ids.device)
    with distributed.layers_gathered(model), (model.disable_adapter() if ref_model is None
                                              else contextlib.nullcontext()):
        return scoring_pass(ref_model or model, batch.prompt_ids, batch.completion_ids, batch.valid, rows,
                            group_size=cfg.group_size, micro_batch_size=cfg.micro_batch_size,
                            temperature=cfg.temperature, chunk_size=cfg.chunk_size, with_entropy=False)[0]


# ----------------------------------------------------------------------------------------------------------------------
# One step, and the run.

def train_step(run, step):
    """Stages 1-7 on one rollout batch; returns (metrics, sample completions to log)."""
    cfg, metrics, t_start = run.cfg, {"step": step}, time.time()
    run.model.eval()
    with distributed.layers_gathered(run.model):
        batch, sampled_rewards, tries = collect_batch(cfg, run.model, run.tokenizer, run.stream, run.eos_ids,
                                                      run.rollout_gen, run.reward_fns)
    n_sampled, reward_sum, correct = distributed.all_reduce_sum(torch.tensor(
        [sampled_rewards.numel(), float(sampled_rewards.sum()), float((sampled_rewards >= 1.0).sum())],
        dtype=torch.float64)).tolist()
    metrics.update(reward_mean=reward_sum / max(n_sampled, 1), accuracy=correct / max(n_sampled, 1),
                   sampling_tries=tries)
    t_rollout = time.time() - t_start
    if int(distributed.all_reduce_sum(torch.tensor(int(batch is not None)))) < run.world:
        # every group was all-equal in every try (on some rank): nothing to learn
        metrics.update(skipped="no group with mixed rewards", time_rollout_s=t_rollout, time_train_s=0.0)
        return metrics, None
    n_groups, n_mixed, len_sum, n_answers = distributed.all_reduce_sum(torch.tensor(
        [len(batch.problems), int(gmts.mixed_groups(batch.rewards, cfg.group_size).sum()),
         int(batch.valid.sum()), batch.valid.shape[0]], dtype=torch.float64)).tolist()
    metrics.update(groups=int(n_groups), response_len_mean=len_sum / n_answers, mixed_groups=int(n_mixed))

    metrics.update(update_policy(cfg, run.model, run.ref_model, run.optimizer, batch, run.select_gen, run.device,
                                 step)[0])

    t_total = time.time() - t_start
    metrics.update(time_rollout_s=t_rollout, time_train_s=t_total - t_rollout,
                   tokens_per_s=metrics["valid_tokens"] / t_total, peak_memory_mb=peak_memory_mb(run.device))
    G = cfg.group_size
    samples = [{"step": step, "problem": p.id, "completion": batch.texts[i * G], "answer": str(p.answer),
                "reward": float(batch.rewards[i * G]), "advantage": float(batch.advantages[i * G])}
               for i, p in enumerate(batch.problems[:cfg.log_samples])]
    return metrics, samples


def main(argv=None):
    cfg, resume_from, state = prepare_training(sys.argv[1:] if argv is None else argv)   # flags checked: one line
    run, start_step = build_run(cfg, resume_from, state)
    stop, reporter = StopRequest(), report.open(cfg if run.main_process else None)   # --report-to (gmts/run/report.py)
    metrics_path, samples_path = log_paths(cfg)
    eval_before = evaluate(run) if cfg.eval_before and start_step == 0 else {}
    if eval_before:
        print(report.eval_line("before training", eval_before), flush=True)
        reporter.log(0, eval_before)

    bad_in_a_row, last_saved, first, last, t_run = 0, start_step, None, None, time.time()
    bar = tqdm(range(start_step + 1, cfg.steps + 1), initial=start_step, total=cfg.steps, desc="train", unit="step",
               dynamic_ncols=True, mininterval=1.0, disable=not run.main_process)
    for step in bar:
        lr = cfg.lr * min(1.0, step / cfg.warmup_steps) if cfg.warmup_steps else cfg.lr
        for group in run.optimizer.param_groups:
            group["lr"] = lr
        metrics, samples = train_step(run, step)
        metrics["lr"] = lr
        if cfg.eval_every and (step % cfg.eval_every == 0 or step == cfg.steps):
            metrics.update(evaluate(run))
        if step == start_step + 1 and eval_before:
            metrics.update({"eval_before_" + k[len("eval_"):]: v for k, v in eval_before.items()})
        if run.main_process:
            runlog.append_jsonl(metrics_path, [metrics])        # whole lines or none; a full disk is one line
            if samples:
                runlog.append_jsonl(samples_path, samples)
            reporter.log(step, metrics, samples)
        first, last = first or metrics, metrics
        bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}", acc=f"{metrics['accuracy']:.3f}",
                        s_per_step=f"{metrics['time_rollout_s'] + metrics['time_train_s']:.1f}")
        bad_in_a_row = bad_in_a_row + 1 if "non-finite" in str(metrics.get("skipped", "")) else 0
        if bad_in_a_row >= cfg.max_bad_steps:
            bar.close()
            raise SystemExit(f"error: {bad_in_a_row} steps in a row with a non-finite loss or gradient (last at step "
                             f"{step}); the last good checkpoint is "
                             f"{ckpt.find_checkpoint(cfg.output_dir) if last_saved else 'none'}. Lower --lr or check the data.")
        stopping = stop.any_process()
        if (cfg.save_every and step % cfg.save_every == 0) or step == cfg.steps or stopping:
            save(run, step)
            last_saved = step
        if stopping:
            bar.close()
            signum = stop.signum or 15                          # another process was signalled: SIGTERM's code
            if run.main_process:
                print(f"gmts: stopped by signal {signum} after step {step}; resume with --resume {cfg.output_dir}")
            sys.exit(128 + signum)
    bar.close()
    reporter.close()
    if cfg.lora_rank and last_saved == cfg.steps and run.main_process:
        save_merged_lora(run)
    if last is not None and run.main_process:
        print(f"gmts: {cfg.steps - start_step} steps in {time.time() - t_run:.1f}s; reward {first['reward_mean']:.3f}"
              f" -> {last['reward_mean']:.3f}, accuracy {first['accuracy']:.3f} -> {last['accuracy']:.3f}; "
              f"checkpoint {ckpt.find_checkpoint(cfg.output_dir)}")
        for label, result in (("before training", eval_before), (f"after step {last['step']}", last)):
            if "eval_accuracy" in result:
                print(report.eval_line(label, result))


if __name__ == "__main__":
    try:
        main()
    finally:
        distributed.shutdown()     # a clean exit for every process under torchrun (gloo aborts without it)
