"""GRPO / DAPO with token selection (ETS, GMTS), in plain PyTorch.

    python train.py --selector gmts                  # Qwen2.5-1.5B-Instruct on GSM8K, top-20% by |E·ω|
    python train.py --preset paper-math --selector ets
    python train.py --help                           # every option (gmts/config.py)

One optimizer step is the loop of gmts/METHOD.md ("One RLVR step"), read top to bottom in `train_step`:

    rollout -> reward -> advantage -> score -> select -> masked loss -> optimizer step

Everything the method needs is a pure function in gmts/ (tested in tests/test_method.py); this file only wires them
together, logs what the reproduction notes say to log, and makes the run safe to interrupt and resume.
"""
import contextlib
import copy
import functools
import json
import os
import signal
import sys
import time
from dataclasses import dataclass

import torch
from tqdm import tqdm

import data as datasets
import rewards
import gmts
from gmts import checkpoint as ckpt
from gmts import runlog
from gmts import distributed as dist
from gmts import report
from gmts.config import to_dict, use_dynamic_sampling
from gmts.validate import prepare_training
from gmts.diagnostics import UpdateLog, counterfactual_selections
from gmts.optim import build_optimizer
from gmts.policy import (add_lora, enable_gradient_checkpointing, end_of_sequence_ids,
                         load_model, load_tokenizer, peak_memory_mb, resolve_device, resolve_dtype)
from gmts.rollout import sample_batched
from gmts.step import accumulate_gradients, minibatch_rows, optimizer_step, scoring_pass, select, selected_count


# ----------------------------------------------------------------------------------------------------------------------
# The data stream: a seeded permutation per epoch, so a run is reproducible and resumes from a single integer.

class PromptStream:
    def __init__(self, problems, prompt_ids, seed, position=0):
        self.problems, self.prompt_ids, self.seed, self.position = problems, prompt_ids, seed, position
        self._epoch, self._order = None, None

    def take(self, n):
        """The next n problem indices; each epoch is a fresh permutation seeded by (seed, epoch)."""
        out = []
        for _ in range(n):
            epoch, index = divmod(self.position, len(self.problems))
            if epoch != self._epoch:
                gen = torch.Generator().manual_seed(self.seed * 7919 + epoch)
                self._epoch, self._order = epoch, torch.randperm(len(self.problems), generator=gen).tolist()
            out.append(self._order[index])
            self.position += 1
        return out


def load_prompts(cfg, tokenizer):
    """Problems -> chat-templated prompt ids; prompts longer than --max-prompt-tokens are skipped and counted."""
    return datasets.load_prompts_for_cli(cfg.data, cfg.split, tokenizer, max_prompt_tokens=cfg.max_prompt_tokens,
                                         question_field=cfg.question_field, answer_field=cfg.answer_field,
                                         template=cfg.template, task_options=cfg.task_options,
                                         limit=cfg.limit or None, seed=cfg.seed, system_prompt=cfg.system_prompt)


# ----------------------------------------------------------------------------------------------------------------------
# A batch of answers with their rewards and advantages.

@dataclass
class Batch:
    problems: list          # Q problems
    prompt_ids: list        # Q lists of ids
    completion_ids: torch.Tensor  # (N, T)
    valid: torch.Tensor     # (N, T) bool
    logp: torch.Tensor      # (N, T) rollout-time log-probs
    entropy: torch.Tensor   # (N, T) rollout-time entropies
    texts: list             # N decoded completions
    rewards: torch.Tensor   # (N,)
    advantages: torch.Tensor  # (N,)


def pad_cat(tensors, value):
    width = max(t.shape[1] for t in tensors)
    return torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value) for t in tensors])


def collect_batch(cfg, model, tokenizer, stream, eos_ids, generator, reward_fns):
    """Rollout + reward + advantage for this process's share of the step's prompts (all of them without torchrun).

    With dynamic sampling (DAPO), groups whose answers all got the same reward carry no signal (A = 0): drop them and
    sample more prompts, at most --max-sampling-tries rollouts per step. Every rank takes the same prompts from the
    stream on every try (and uses its own slice), so the data position stays identical across ranks."""
    G, dynamic = cfg.group_size, use_dynamic_sampling(cfg)
    share = cfg.prompts_per_step // dist.world_size()
    parts, sampled_rewards, tries, kept_groups = [], [], 0, 0
    while tries < (cfg.max_sampling_tries if dynamic else 1):
        still_needed = int(dist.all_reduce_sum(torch.tensor(int(kept_groups < share))))
        if not still_needed:
            break
        tries += 1
        idx = stream.take(cfg.prompts_per_step)[dist.rank() * share:(dist.rank() + 1) * share]
        if kept_groups >= share:
            continue
        problems = [stream.problems[i] for i in idx]
        prompt_ids = [stream.prompt_ids[i] for i in idx]
        # 1. Rollout: G answers per prompt, with their log-probs and entropies (gmts/rollout.py).
        roll = sample_batched(model, prompt_ids, prompts_per_call=cfg.rollout_batch_size, group_size=G,
                              max_new_tokens=cfg.max_new_tokens, eos_token_ids=eos_ids,
                              pad_token_id=tokenizer.pad_token_id, temperature=cfg.temperature, generator=generator)
        texts = [tokenizer.decode(row[mask], skip_special_tokens=True)
                 for row, mask in zip(roll.completion_ids.cpu(), roll.valid_mask.cpu())]
        # 2. Reward: a program checks each answer (rewards/).
        r = torch.tensor([reward_fns[p.reward](text, p.answer) for p, text in
                          zip((p for p in problems for _ in range(G)), texts)], dtype=torch.float32)
        sampled_rewards.append(r)
        # 3. Advantage, per group: A_i = (R_i - mean) / (std + eps) (gmts/advantage.py). With --overlong-buffer, R
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
    mini-batch by default: the on-policy step), --ppo-epochs passes over the rollout batch. Every mini-batch is one
    optimizer batch: scored at the CURRENT θ, ranked and normalised on its own (gmts/METHOD.md, "Several optimizer
    steps per rollout batch"). Returns the metrics and the first pass's selection (N, T)."""
    valid, adv = batch.valid.to(device), batch.advantages.to(device)
    old_logp = batch.logp.to(device)                   # log π_old: the policy that sampled the batch
    group_ids = torch.arange(valid.shape[0], device=device) // cfg.group_size
    exclude = (adv == 0) if cfg.exclude_zero_adv else None          # exact: all-equal groups get A = 0 exactly
    ref_logp = reference_logprobs(cfg, model, ref_model, batch) if cfg.beta > 0 else None
    params = [p for p in model.parameters() if p.requires_grad]
    passes = dict(group_size=cfg.group_size, micro_batch_size=cfg.micro_batch_size, temperature=cfg.temperature,
                  chunk_size=cfg.chunk_size)
    log, moved, time_select = UpdateLog(valid, adv), False, 0.0
    for epoch in range(cfg.ppo_epochs):
        for rows in minibatch_rows(len(batch.prompt_ids), cfg.group_size, cfg.mini_batch_size, seed=cfg.seed,
                                   step=step, epoch=epoch, device=device):
            mb_valid, mb_adv, mb_old = valid[rows], adv[rows], old_logp[rows]
            mb_ref = None if ref_logp is None else ref_logp[rows]
            mb_exclude = None if exclude is None else exclude[rows]
            # 4. Score at the current θ: log π_θ and E of every sampled token, r = π_θ / π_old, ω and the score.
            #    Until the first optimizer step θ = θ_old: the rollout's own values are exact and r = 1, so no
            #    forward pass is needed (gmts/METHOD.md, "Where E and ω come from"). After it, a no-grad pass.
            if not moved:
                logp_now, entropy = mb_old, batch.entropy.to(device)[rows]
            else:
                with dist.layers_gathered(model):
                    logp_now, entropy = scoring_pass(model, batch.prompt_ids, batch.completion_ids, valid, rows,
                                                     **passes)
            t_select = time.time()
            weight = gmts.relative_token_weight(mb_valid, cfg.loss_norm)     # w_it: 1/|o_i| under per-answer means
            n_selected = selected_count(cfg, mb_valid, group_ids[rows], mb_exclude)
            n_valid = int(dist.all_reduce_sum(torch.tensor(int(mb_valid.sum()))))
            omega = gmts.token_omega(logp_now, mb_old, mb_adv, eps_low=cfg.eps_low, eps_high=cfg.eps_high,
                                     beta=cfg.beta, ref_logp=mb_ref,
                                     kl_weight=gmts.kl_relative_weight(cfg.loss_norm, cfg.kl_coverage, n_selected,
                                                                       n_valid))
            scores = gmts.token_scores(cfg.selector, entropy, omega, weight=weight, generator=select_gen)

            # 5. Select: exactly k = ceil(ρ · N_valid) tokens of THIS mini-batch, across micro-batches and ranks.
            choose = functools.partial(select, cfg, valid=mb_valid, group_ids=group_ids[rows], exclude=mb_exclude)
            selected = choose(scores)
            time_select += time.time() - t_select
            ratio = torch.exp(logp_now - mb_old)
            log.scored_tokens(rows, mb_valid, ratio, gmts.clip_active(ratio, mb_adv, cfg.eps_low, cfg.eps_high))
            log.selection(rows, entropy, omega, weight, selected,
                          *counterfactual_selections(choose, entropy, omega, weight))

            # 6. Masked loss. The weights carry the mini-batch's normaliser (all ranks), so the micro-batch gradients
            #    sum to the mini-batch's gradient. Rows with nothing selected, or with A = 0 and no KL term, have
            #    exactly zero gradient and are skipped.
            weights = gmts.loss_weights(mb_valid, selected, cfg.loss_norm, reduce=dist.all_reduce_sum)
            kl_weights = None
            if cfg.beta > 0 and cfg.kl_coverage == "all":
                kl_weights = gmts.loss_weights(mb_valid, mb_valid, cfg.loss_norm, reduce=dist.all_reduce_sum)
            has_weight = weights.sum(1) > 0
            if cfg.beta == 0:
                has_weight &= mb_adv != 0
            if kl_weights is not None:
                has_weight |= kl_weights.sum(1) > 0
            local = has_weight.nonzero().squeeze(1)                  # positions within the mini-batch
            position = torch.full((valid.shape[0],), -1, dtype=torch.long, device=device)
            position[rows] = torch.arange(len(rows), device=device)

            def loss_fn(batch_rows, logp, on_policy=not moved):
                i = position[batch_rows]
                return gmts.policy_loss(logp, logp.detach() if on_policy else mb_old[i], mb_adv[i], weights[i],
                                        eps_low=cfg.eps_low, eps_high=cfg.eps_high, beta=cfg.beta,
                                        ref_logp=None if mb_ref is None else mb_ref[i],
                                        kl_weights=None if kl_weights is None else kl_weights[i])
            model.train()
            optimizer.zero_grad(set_to_none=True)
            loss, n_passes = accumulate_gradients(model, batch.prompt_ids, batch.completion_ids, valid, rows[local],
                                                  loss_fn, **passes)

            # 7. Optimizer step (gradients summed over ranks first), unless the loss or gradient is not finite.
            loss, grad_norm, outcome = optimizer_step(optimizer, params, loss, n_passes, cfg.max_grad_norm)
            log.update(loss, grad_norm, outcome)
            moved |= outcome == "stepped"
    metrics = log.metrics(cfg.ratio)
    metrics["time_score_select_s"] = time_select        # ω, scores and the top-k (not the diagnostics)
    return metrics, log.selected


def reference_logprobs(cfg, model, ref_model, batch):
    """log π_ref of the sampled tokens, for the k3 KL term (β > 0): the frozen starting model, or with LoRA the
    same model with its adapters switched off (no second copy in memory)."""
    rows = torch.arange(batch.completion_ids.shape[0], device=batch.completion_ids.device)
    with dist.layers_gathered(model), (model.disable_adapter() if ref_model is None else contextlib.nullcontext()):
        return scoring_pass(ref_model or model, batch.prompt_ids, batch.completion_ids, batch.valid, rows,
                            group_size=cfg.group_size, micro_batch_size=cfg.micro_batch_size,
                            temperature=cfg.temperature, chunk_size=cfg.chunk_size, with_entropy=False)[0]


def train_step(cfg, step, model, ref_model, optimizer, tokenizer, stream, eos_ids, sampler, select_gen, reward_fns,
               device):
    metrics = {"step": step}
    t_start = time.time()

    # 1-3. Rollout, reward, advantage (dynamic sampling inside for DAPO).
    model.eval()
    with dist.layers_gathered(model):
        batch, sampled_rewards, tries = collect_batch(cfg, model, tokenizer, stream, eos_ids, sampler, reward_fns)
    n_sampled, reward_sum, correct = dist.all_reduce_sum(torch.tensor(
        [sampled_rewards.numel(), float(sampled_rewards.sum()), float((sampled_rewards >= 1.0).sum())],
        dtype=torch.float64)).tolist()
    metrics.update(reward_mean=reward_sum / max(n_sampled, 1), accuracy=correct / max(n_sampled, 1),
                   sampling_tries=tries)
    t_rollout = time.time() - t_start
    have_batch = int(dist.all_reduce_sum(torch.tensor(int(batch is not None))))
    if have_batch < dist.world_size():   # every group was all-equal in every try (on some rank): nothing to learn
        metrics.update(skipped="no group with mixed rewards", time_rollout_s=t_rollout, time_train_s=0.0)
        return metrics, None
    n_groups, n_mixed, len_sum, n_answers = dist.all_reduce_sum(torch.tensor(
        [len(batch.problems), int(gmts.mixed_groups(batch.rewards, cfg.group_size).sum()),
         int(batch.valid.sum()), batch.valid.shape[0]], dtype=torch.float64)).tolist()
    metrics.update(groups=int(n_groups), response_len_mean=len_sum / n_answers, mixed_groups=int(n_mixed))

    # 4-7. Score, select, masked loss, optimizer step.
    metrics.update(update_policy(cfg, model, ref_model, optimizer, batch, select_gen, device, step)[0])

    t_total = time.time() - t_start
    metrics.update(time_rollout_s=t_rollout, time_train_s=t_total - t_rollout,
                   tokens_per_s=metrics["valid_tokens"] / t_total, peak_memory_mb=peak_memory_mb(device))
    samples = [{"step": step, "problem": p.id, "completion": batch.texts[i * cfg.group_size], "answer": str(p.answer),
                "reward": float(batch.rewards[i * cfg.group_size]), "advantage": float(batch.advantages[i * cfg.group_size])}
               for i, p in enumerate(batch.problems[:cfg.log_samples])]
    return metrics, samples


# ----------------------------------------------------------------------------------------------------------------------
# Setting up: config (and resume), seeds, model, optimizer, data.

def setup(argv):
    """(cfg, checkpoint to resume or None, its trainer state or None). Every flag, the checkpoint (the newest that
    loads), the output folder and the model's context are checked here, before anything loads; a problem is one
    line and exit status 2 (gmts/validate.py)."""
    return prepare_training(argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    cfg, resume_from, state = setup(argv)
    rank, world, local_rank = dist.init()          # (0, 1, 0) without torchrun
    main_process = rank == 0
    if cfg.prompts_per_step % world:
        raise SystemExit(f"error: --prompts-per-step {cfg.prompts_per_step} does not split over {world} processes")
    if state is not None and len(state["rng"]) != world:
        raise SystemExit(f"error: --resume: the checkpoint was written by {len(state['rng'])} processes; "
                         f"resume with the same number (got {world})")
    device = resolve_device(cfg.device)
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", local_rank)
    dtype = resolve_dtype(cfg.dtype, device)
    ckpt.seed_everything(cfg.seed)

    # Data and rewards first: a bad file or name fails in a second, before any model is loaded.
    if cfg.tokenizer:
        tokenizer = load_tokenizer(cfg.tokenizer)
    elif os.path.isdir(cfg.model) or not resume_from:
        tokenizer = load_tokenizer(cfg.model)
    else:
        tokenizer = load_tokenizer(resume_from)
    problems, prompt_ids, n_too_long = load_prompts(cfg, tokenizer)
    reward_fns = {name: rewards.get_reward(name, trusted_only=cfg.code_trusted_only) for name in {p.reward for p in problems}}
    if cfg.eval_every:
        check_eval_data(cfg, tokenizer)

    # The policy. On resume, full fine-tuning reloads the checkpoint's weights; LoRA reloads base + adapter.
    # With FSDP the weights load in float32: the shards are the master weights, computation runs in `dtype`.
    load_dtype = torch.float32 if cfg.fsdp else dtype
    if resume_from and not cfg.lora_rank:
        model = load_model(resume_from, dtype=load_dtype, device=device)
    else:
        model = load_model(cfg.model, dtype=load_dtype, device=device)
    ref_model = None
    if cfg.beta > 0 and not cfg.lora_rank:
        # frozen π_ref = the STARTING model (on resume: --model again, not the checkpoint's weights)
        start = load_model(cfg.model, dtype=dtype, device=device) if resume_from else copy.deepcopy(model).to(dtype)
        ref_model = start.eval().requires_grad_(False)
    if cfg.lora_rank:
        if resume_from:
            from peft import PeftModel
            model = PeftModel.from_pretrained(model, resume_from, is_trainable=True)
        else:
            model = add_lora(model, rank=cfg.lora_rank, alpha=cfg.lora_alpha, seed=cfg.seed)
    if cfg.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    if cfg.fsdp:
        dist.shard_layers(model, dtype)
    eos_ids = end_of_sequence_ids(model, tokenizer)
    optimizer = build_optimizer(model, cfg)

    # Random streams: rollouts, and the random selector apart from them (so arms see the same rollouts). Each
    # process samples its own answers; the data order is shared.
    sampler = torch.Generator(device=device).manual_seed(cfg.seed + 1_000_003 * rank)
    select_gen = torch.Generator(device=device).manual_seed(cfg.seed + 1 + 1_000_003 * rank)
    stream = PromptStream(problems, prompt_ids, cfg.seed)
    start_step = 0
    run_dir = cfg.output_dir
    metrics_path, samples_path = os.path.join(run_dir, "metrics.jsonl"), os.path.join(run_dir, "samples.jsonl")
    if state is not None:
        if cfg.fsdp:
            dist.load_full_optimizer_state(model, optimizer, state["optimizer"])
        else:
            optimizer.load_state_dict(state["optimizer"])
        ckpt.set_rng_state(state["rng"][rank], sampler)
        select_gen.set_state(state["select_rng"][rank])
        stream.position = state["data_position"]
        start_step = state["step"]
    if main_process:
        os.makedirs(run_dir, exist_ok=True)
        # A fresh run found no run here (or --overwrite removed it: gmts/validate.py). A resumed one drops the lines
        # logged after its checkpoint (a crash between the two) and any torn line.
        for path in (metrics_path, samples_path) if state is not None else ():
            ckpt.truncate_jsonl(path, start_step)
        ckpt.write_text_atomic(os.path.join(run_dir, "config.json"), json.dumps(to_dict(cfg), indent=2) + "\n")
        n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
        print(f"gmts: {cfg.model} ({n_params / 1e6:.1f}M trainable) on {device} {str(dtype).replace('torch.', '')}"
              + (f" x {world} processes" if world > 1 else "") + f"; {len(problems)} problems from {cfg.data}"
              + (f" ({n_too_long} skipped: prompt too long)" if n_too_long else "")
              + f"; selector {cfg.selector} ρ={cfg.ratio}; {cfg.algo}; output {run_dir}"
              + (f"; resuming from {resume_from} at step {start_step}" if resume_from else ""), flush=True)

    # Ctrl-C / SIGTERM: finish the current step, write a checkpoint, exit. A second Ctrl-C stops at once (the last
    # checkpoint is still whole: checkpoints are written atomically).
    stop = {"signal": 0}

    def request_stop(signum, _frame):
        stop["signal"] = signum
        signal.signal(signum, signal.SIG_DFL)
        print(f"\ngmts: got signal {signum}; checkpointing after this step (again to stop now)", file=sys.stderr)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, request_stop)
    reporter = report.open(cfg if main_process else None)     # --report-to tensorboard | wandb (gmts/report.py)
    eval_before = {}
    if cfg.eval_before and start_step == 0:
        eval_before = evaluate(cfg, model, tokenizer, eos_ids, device, main_process)
        if main_process:
            print(report.eval_line("before training", eval_before), flush=True)
            reporter.log(0, eval_before)

    def save(step):
        # Every process's random state travels to the one that writes, so a resume continues each stream exactly.
        rngs = dist.gather_objects((ckpt.rng_state(sampler), select_gen.get_state()))
        model_state, optim_state = (dist.full_state_dicts(model, optimizer) if cfg.fsdp     # gathered on rank 0
                                    else (None, optimizer.state_dict()))
        if main_process:
            trainer_state = {"step": step, "config": to_dict(cfg), "optimizer": optim_state,
                             "rng": [r for r, _ in rngs], "select_rng": [s for _, s in rngs],
                             "data_position": stream.position, "world_size": world}
            ckpt.save_checkpoint(run_dir, step, model, tokenizer, trainer_state, keep=cfg.keep_checkpoints,
                                 state_dict=model_state)
        dist.barrier()

    bad_in_a_row, last_saved, first, last = 0, start_step, None, None
    t_run = time.time()
    bar = tqdm(range(start_step + 1, cfg.steps + 1), initial=start_step, total=cfg.steps, desc="train", unit="step",
               dynamic_ncols=True, mininterval=1.0, disable=not main_process)
    for step in bar:
        lr = cfg.lr * min(1.0, step / cfg.warmup_steps) if cfg.warmup_steps else cfg.lr
        for group in optimizer.param_groups:
            group["lr"] = lr
        metrics, samples = train_step(cfg, step, model, ref_model, optimizer, tokenizer, stream, eos_ids, sampler,
                                      select_gen, reward_fns, device)
        metrics["lr"] = lr
        if cfg.eval_every and (step % cfg.eval_every == 0 or step == cfg.steps):
            metrics.update(evaluate(cfg, model, tokenizer, eos_ids, device, main_process))
        if step == start_step + 1 and eval_before:
            metrics.update({"eval_before_" + k[len("eval_"):]: v for k, v in eval_before.items()})
        if main_process:
            runlog.append_jsonl(metrics_path, [metrics])        # whole lines or none; a full disk is one line
            if samples:
                runlog.append_jsonl(samples_path, samples)
            reporter.log(step, metrics, samples)
        first = first or metrics
        last = metrics
        bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}", acc=f"{metrics['accuracy']:.3f}",
                        s_per_step=f"{metrics['time_rollout_s'] + metrics['time_train_s']:.1f}")
        bad_in_a_row = bad_in_a_row + 1 if "non-finite" in str(metrics.get("skipped", "")) else 0
        if bad_in_a_row >= cfg.max_bad_steps:
            bar.close()
            raise SystemExit(f"error: {bad_in_a_row} steps in a row with a non-finite loss or gradient (last at step "
                             f"{step}); the last good checkpoint is {ckpt.find_checkpoint(run_dir) if last_saved else 'none'}. "
                             "Lower --lr or check the data.")
        stopping = int(dist.all_reduce_sum(torch.tensor(stop["signal"])))   # any process signalled: all stop
        if (cfg.save_every and step % cfg.save_every == 0) or step == cfg.steps or stopping:
            save(step)
            last_saved = step
        if stopping:
            bar.close()
            signum = stop["signal"] or signal.SIGTERM
            if main_process:
                print(f"gmts: stopped by signal {signum} after step {step}; resume with --resume {run_dir}")
            sys.exit(128 + signum)
    bar.close()
    reporter.close()
    if cfg.lora_rank and last_saved == cfg.steps and main_process:
        merged_dir = os.path.join(run_dir, "final-merged")        # plain weights for transformers / vLLM
        copy.deepcopy(model).merge_and_unload().save_pretrained(merged_dir, safe_serialization=True)
        tokenizer.save_pretrained(merged_dir)
    if last is not None and main_process:
        print(f"gmts: {cfg.steps - start_step} steps in {time.time() - t_run:.1f}s; reward {first['reward_mean']:.3f} -> "
              f"{last['reward_mean']:.3f}, accuracy {first['accuracy']:.3f} -> {last['accuracy']:.3f}; "
              f"checkpoint {ckpt.find_checkpoint(run_dir)}")
        if eval_before:
            print(report.eval_line("before training", eval_before))
        if "eval_accuracy" in last:
            print(report.eval_line(f"after step {last['step']}", last))


def evaluate(cfg, model, tokenizer, eos_ids, device, main_process):
    """run_eval where it must run: under FSDP every process (each holds a shard of every layer; all evaluate
    identically), else rank 0 alone. Returns the eval_* metrics on rank 0, {} on the others."""
    out = {}
    if cfg.fsdp:
        with dist.layers_gathered(model):
            out = run_eval(cfg, model, tokenizer, eos_ids, device)
    elif main_process:
        out = run_eval(cfg, model, tokenizer, eos_ids, device)
    dist.barrier()
    return out if main_process else {}


def run_eval(cfg, model, tokenizer, eos_ids, device):
    """In-training evaluation with eval.py's protocol (the same code as `python eval.py`)."""
    from gmts.evaluate import evaluate_model
    was_training = model.training
    model.eval()
    # As many rows per generation batch as a training rollout has (each prompt brings --eval-samples rows).
    batch_size = max(1, cfg.prompts_per_step * cfg.group_size // max(cfg.eval_samples, 1))
    result = evaluate_model(model, tokenizer, cfg.eval_data, limit=cfg.eval_limit, samples=cfg.eval_samples,
                            temperature=cfg.eval_temperature, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed,
                            eos_ids=eos_ids, template=cfg.template or None, system_prompt=cfg.system_prompt,
                            batch_size=batch_size, progress=False, max_prompt_tokens=cfg.max_prompt_tokens,
                            task_options=json.loads(cfg.task_options) if cfg.task_options else None)
    model.train(was_training)
    return {"eval_accuracy": result["accuracy"], "eval_ci95": result["ci95"], "eval_data": cfg.eval_data}


def check_eval_data(cfg, tokenizer):
    """Fail at start-up, not at the first evaluation, when --eval-data names something that cannot be loaded."""
    from gmts.evaluate import load_benchmark, split_data_arg
    for spec in split_data_arg(cfg.eval_data):
        try:
            load_benchmark(spec, tokenizer, limit=cfg.eval_limit, template=cfg.template or None,
                           system_prompt=cfg.system_prompt, max_prompt_tokens=cfg.max_prompt_tokens,
                           task_options=json.loads(cfg.task_options) if cfg.task_options else None)
        except (FileNotFoundError, ValueError, KeyError, SystemExit) as err:
            raise SystemExit(f"error: --eval-data {spec!r}: {' '.join(str(err).split())}") from None


if __name__ == "__main__":
    try:
        main()
    finally:
        dist.shutdown()     # a clean exit for every process under torchrun (gloo aborts without it)
