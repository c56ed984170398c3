"""The machinery of one training step, kept out of train.py's story: the rollout batch and the data stream, how the
batch splits into mini-batches and micro-batches, the forward passes, the run's selection, the loss's inputs, the
backward passes and the optimizer step (gmts/METHOD.md, "One RLVR step" and "Several optimizer steps per rollout
batch").

Nothing here is method (that is gmts/method/grpo.py); this is what makes the method's batch-wide quantities come out
right when the batch is computed in pieces: mini-batches, micro-batches and several processes.

Several processes are a wrapper the single process's step never enters (nanoGPT's one `if`): every batch-wide sum, gather and
selection goes through a `ranks` object, ONE_PROCESS here (each sum over ranks is the value itself) or, under
torchrun, gmts/trainer/distributed.py's TORCHRUN. `processes()` picks one; nothing below asks which.
"""
import contextlib
import dataclasses
import math

import torch
import torch.distributed as dist

from gmts.method.grpo import budget, kl_relative_weight, loss_weights, mixed_groups, policy_loss, select_tokens
from gmts.method.head import head_logprobs
from gmts.trainer.rollout import left_pad, pad_cat, positions


# ----------------------------------------------------------------------------------------------------------------------
# One process, or several.

def clip_grad_norm(params, max_norm):
    """The gradient norm before clipping, and clipping to max_norm, as clip_grad_norm_ in
    torch.nn.utils; the norm summed in float32 at least (in bf16 it keeps 3 digits: the clip
    coefficient off by up to 0.4%)."""
    norms = [torch.linalg.vector_norm(p.grad, dtype=torch.promote_types(p.grad.dtype, torch.float))
             for p in params if p.grad is not None]
    total = torch.linalg.vector_norm(torch.stack(norms))
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total


class OneProcess:
    """The collectives of a single process: a sum over ranks is the value itself, a gather the one value, the
    batch-wide selection grpo.select_tokens. gmts/trainer/distributed.py's Torchrun has the same members, done over
    every rank; the step calls them without asking which it has."""
    rank, world = 0, 1
    sum = staticmethod(torch.as_tensor)                 # Σ over ranks of a tensor of counts or sums
    gather = staticmethod(lambda obj: [obj])            # [every rank's obj], in rank order
    select_tokens = staticmethod(select_tokens)         # the batch-wide top-k (gmts/method/grpo.py)
    sum_gradients = staticmethod(lambda params: None)   # Σ over ranks of the gradients: nothing to do
    layers_gathered = staticmethod(lambda model: contextlib.nullcontext())   # FSDP: layers gathered over many forwards
    even_passes = staticmethod(lambda model, passes: passes)   # FSDP: as many passes on every rank as the busiest
    clip_grad_norm = staticmethod(clip_grad_norm)       # the norm before clipping; clipped


ONE_PROCESS = OneProcess()


def processes():
    """ONE_PROCESS, or under torchrun (a process group of several) gmts/trainer/distributed.py's TORCHRUN."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return ONE_PROCESS
    from gmts.trainer.distributed import TORCHRUN      # only here: a single process's step never calls it
    return TORCHRUN


# ----------------------------------------------------------------------------------------------------------------------
# The data: a seeded stream of prompts, and the rollout batch.

class PromptStream:
    """The run's data order: a seeded permutation per epoch, so a run is reproducible and resumes from one integer."""

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


@dataclasses.dataclass
class Batch:
    """A rollout batch of answers with their rewards and advantages (this process's share of it)."""
    problems: list            # Q problems
    prompt_ids: list          # Q lists of ids
    completion_ids: torch.Tensor  # (N, T), N = Q * G, the G answers to a prompt contiguous
    valid: torch.Tensor       # (N, T) bool: real completion tokens
    logp: torch.Tensor        # (N, T) rollout-time log-probs: log π_old
    entropy: torch.Tensor     # (N, T) rollout-time entropies
    texts: list               # N decoded completions
    rewards: torch.Tensor     # (N,) R, the checker's rewards
    advantages: torch.Tensor  # (N,) A

    def to(self, device):
        """The same batch with its tensors on `device` (the model's)."""
        return dataclasses.replace(self, **{k: v.to(device) for k, v in vars(self).items() if torch.is_tensor(v)})

    def groups(self, keep, group_size):
        """The groups where keep (Q,) is True (dynamic sampling keeps the mixed ones)."""
        rows = keep.repeat_interleave(group_size)
        on = rows.to(self.valid.device)
        return Batch(problems=[p for p, k in zip(self.problems, keep) if k],
                     prompt_ids=[p for p, k in zip(self.prompt_ids, keep) if k],
                     completion_ids=self.completion_ids[on], valid=self.valid[on], logp=self.logp[on],
                     entropy=self.entropy[on], texts=[t for t, k in zip(self.texts, rows) if k],
                     rewards=self.rewards[rows], advantages=self.advantages[rows])

    @staticmethod
    def cat(parts, pad_id):
        """One batch from several tries of dynamic sampling, rows in order, right-padded to the longest answer."""
        return Batch(problems=sum((p.problems for p in parts), []), prompt_ids=sum((p.prompt_ids for p in parts), []),
                     completion_ids=pad_cat([p.completion_ids for p in parts], pad_id),
                     valid=pad_cat([p.valid for p in parts], False), logp=pad_cat([p.logp for p in parts], 0.0),
                     entropy=pad_cat([p.entropy for p in parts], 0.0), texts=sum((p.texts for p in parts), []),
                     rewards=torch.cat([p.rewards for p in parts]), advantages=torch.cat([p.advantages for p in parts]))


def my_prompts(cfg, stream, ranks):
    """The next --prompts-per-step prompts of the stream (indices), this process's share of them: every rank takes
    the same prompts from the stream (and keeps its own slice), so the data position stays identical across ranks."""
    share = cfg.prompts_per_step // ranks.world                   # whole groups per process
    return stream.take(cfg.prompts_per_step)[ranks.rank * share:(ranks.rank + 1) * share]


def use_dynamic_sampling(cfg):
    """DAPO's dynamic sampling (drop all-equal groups, sample more): --dynamic-sampling on, or auto with --algo dapo."""
    return cfg.dynamic_sampling == "on" or (cfg.dynamic_sampling == "auto" and cfg.algo == "dapo")


def dynamic_sampling(cfg, stream, answer, pad_id, ranks):
    """DAPO's dynamic sampling: groups whose answers all got the same reward carry no signal (A = 0); keep only the
    mixed ones and sample more prompts, at most --max-sampling-tries rollouts per step, until this process has its
    share. answer(prompt indices) -> Batch (train.py's answer_prompts: stages 1-3). Returns (the Batch of the kept
    groups or None, every sampled answer's R, how many rollouts it took). A rank that has its share still takes
    the prompts of every further try, so the data position stays identical across ranks."""
    share = cfg.prompts_per_step // ranks.world
    parts, sampled_rewards, tries, kept_groups = [], [], 0, 0
    while tries < cfg.max_sampling_tries and int(ranks.sum(torch.tensor(int(kept_groups < share)))):
        tries += 1
        idx = my_prompts(cfg, stream, ranks)
        if kept_groups >= share:                                  # done here; another rank still samples
            continue
        batch = answer(idx)
        sampled_rewards.append(batch.rewards)
        keep = mixed_groups(batch.rewards, cfg.group_size)        # the mixed groups, no more than still needed
        part = batch.groups(keep & (torch.cumsum(keep.long(), 0) + kept_groups <= share), cfg.group_size)
        if part.problems:
            parts.append(part)
        kept_groups += len(part.problems)
    batch = Batch.cat(parts, pad_id) if parts else None
    return batch, torch.cat(sampled_rewards) if sampled_rewards else torch.zeros(0), tries


# ----------------------------------------------------------------------------------------------------------------------
# Mini-batches.

# Mini-batch order: a permutation of the rollout's groups seeded by (run seed, step, epoch), so a resumed run
# draws the same mini-batches without any saved state, and arms with the same seed see the same mini-batches.
_SHUFFLE_SALT = 0x6D696E69


def minibatch_rows(n_local_groups, group_size, groups_per_step, *, seed, step, epoch, device=None, ranks=None):
    """The rollout batch's rows for each optimizer step: a list of (rows,) long tensors, one per mini-batch.

    The batch's groups (numbered across ranks: rank 0's first, in rank order) are shuffled with (seed, step, epoch)
    and cut into mini-batches of `groups_per_step` whole groups; each mini-batch lists its groups in ascending
    order, so its rows concatenated over ranks are exactly the rows one process would hold (same ties, same sums).
    This rank's rows of a mini-batch may be empty. With groups_per_step >= the number of groups: one mini-batch,
    every row in order (the on-policy step, unshuffled). ranks: OneProcess / Torchrun (default: processes()).
    """
    ranks = ranks or processes()
    counts = ranks.gather(int(n_local_groups))
    if groups_per_step >= sum(counts):                   # one mini-batch: every row, in order
        return [torch.arange(n_local_groups * group_size, device=device)]
    return _shuffled_minibatches(counts, ranks.rank, n_local_groups, group_size, groups_per_step, seed, step, epoch,
                                 device)


def _shuffled_minibatches(counts, rank, n_local_groups, group_size, groups_per_step, seed, step, epoch, device):
    """minibatch_rows with several mini-batches: the groups shuffled with (seed, step, epoch), cut in order."""
    offset, total = sum(counts[:rank]), sum(counts)
    gen = torch.Generator().manual_seed((seed * 1_000_003 + step * 7919 + epoch) % 2**63 ^ _SHUFFLE_SALT)
    order = torch.randperm(total, generator=gen)
    out = []
    for start in range(0, total, groups_per_step):
        groups = order[start:start + groups_per_step].sort().values
        mine = groups[(groups >= offset) & (groups < offset + n_local_groups)] - offset
        rows = (mine[:, None] * group_size + torch.arange(group_size)).reshape(-1)
        out.append(rows.to(device) if device is not None else rows)
    return out


class MiniBatch:
    """One optimizer batch: `rows` of the rollout batch, with the per-row tensors the step needs sliced to them."""

    def __init__(self, rows, *, valid, advantages, old_logp, entropy, ref_logp, exclude, group_size):
        self.rows, self.group_size = rows, group_size      # old_logp, entropy: the sampler's (π_old, E at θ_old)
        self.valid, self.advantages = valid[rows], advantages[rows]
        self.old_logp, self.entropy = old_logp[rows], entropy[rows]
        self.ref_logp = None if ref_logp is None else ref_logp[rows]
        self.exclude = None if exclude is None else exclude[rows]
        self.group_ids = rows // group_size
        # where each rollout row sits in this mini-batch (-1: not in it), to slice per micro-batch
        self.position = torch.full((valid.shape[0],), -1, dtype=torch.long, device=valid.device)
        self.position[rows] = torch.arange(len(rows), device=valid.device)


# ----------------------------------------------------------------------------------------------------------------------
# Forward passes: log π (and E) of the sampled tokens.

def completion_logprobs(model, prompt_ids, completion_ids, valid_mask, *, group_size, temperature=1.0,
                        chunk_size=1024, with_entropy=False):
    """log π_θ(o_it | q, o_i,<t) (N, T) float32, differentiable; and the entropies (N, T) (no grad) if asked.

    prompt_ids: Q lists of ids; completion_ids, valid_mask: (N, T) with N = Q * group_size (or any N when prompt_ids
    already has one prompt per row and group_size = 1). The output head runs only on valid completion positions and
    in chunks (gmts/method/head.py), so no (tokens x vocab) logits are ever held. Padding positions get 0.
    """
    prompt_ids_rows = [p for p in prompt_ids for _ in range(group_size)]
    if len(prompt_ids_rows) != completion_ids.shape[0]:
        raise ValueError(f"{len(prompt_ids)} prompts x {group_size} != {completion_ids.shape[0]} completion rows")
    return rows_logprobs(model, prompt_ids_rows, completion_ids, valid_mask, temperature=temperature,
                         chunk_size=chunk_size, with_entropy=with_entropy)


def rows_logprobs(model, prompt_ids_rows, completion_ids, valid_mask, *, temperature, chunk_size, with_entropy):
    """completion_logprobs with one prompt per row already (prompt_ids_rows: N lists of ids): one forward of the
    decoder over prompt + completion, then the chunked head on the valid completion positions only."""
    ids, prompt_mask = left_pad(prompt_ids_rows, pad_id=0, device=completion_ids.device)
    input_ids = torch.cat([ids, completion_ids], dim=1)
    attention = torch.cat([prompt_mask, valid_mask.long()], dim=1)
    hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention, position_ids=positions(attention),
                                 use_cache=False).last_hidden_state                   # (N, P + T, H)
    # Position P-1+t predicts completion token t; only the valid ones go through the head.
    h = hidden[:, ids.shape[1] - 1: ids.shape[1] - 1 + completion_ids.shape[1]][valid_mask]     # (n_valid, H)
    head = model.get_output_embeddings()
    logp, entropy = head_logprobs(h, head.weight, completion_ids[valid_mask], head_bias=getattr(head, "bias", None),
                                  temperature=temperature, chunk_size=chunk_size, with_entropy=with_entropy)  # (n_valid,)
    # Scatter back to (N, T), 0 at padding; float32 (float64 for a float64 model: tests check identities at 1e-10).
    logp = torch.zeros(completion_ids.shape, dtype=logp.dtype, device=h.device).masked_scatter(valid_mask, logp)
    if entropy is not None:
        entropy = torch.zeros_like(logp, dtype=entropy.dtype).masked_scatter(valid_mask, entropy)
    return logp, entropy


def answer_widths(valid):
    """(N,) each row's width: one past its last valid completion position (0 for a row with none)."""
    last = valid.shape[1] - valid.flip(1).int().argmax(1)
    return torch.where(valid.any(1), last, torch.zeros_like(last))


def micro_batches(batch, rows, cfg):
    """The micro-batches of `rows`, longest answers first, so that each holds answers of similar length and
    row_logprobs trims it to its own width: the passes compute (almost) no padding. Free in exactness: the loss
    weights carry the whole mini-batch's normaliser, so any split of the rows sums to the same gradient (to float
    error). --micro-batch-size rows each; with --micro-batch-tokens, as many rows as fit that many padded tokens
    (rows x (widest prompt + widest answer)), a row alone if it is longer."""
    widths, order = torch.sort(answer_widths(batch.valid[rows]).cpu(), descending=True, stable=True)
    rows = rows[order.to(rows.device)]                       # longest answers first, ties in rollout order
    if not cfg.micro_batch_tokens:
        return [chunk for chunk in torch.split(rows, cfg.micro_batch_size) if chunk.numel()]
    widths = widths.tolist()
    chunks, start, prompt_width = [], 0, 0
    for j, row in enumerate(rows.tolist()):
        prompt = len(batch.prompt_ids[row // cfg.group_size])
        if j > start and (j + 1 - start) * (max(prompt_width, prompt) + widths[start]) > cfg.micro_batch_tokens:
            chunks.append(rows[start:j])
            start, prompt_width = j, 0
        prompt_width = max(prompt_width, prompt)
    return chunks + ([rows[start:]] if len(rows) > start else [])


def row_logprobs(model, batch, rows, cfg, with_entropy=False):
    """rows_logprobs of the rollout batch's `rows` (one micro-batch), each row with its own prompt, trimmed to the
    micro-batch's widest answer: (n, w) log-probs (and entropies), w <= T."""
    prompts = [batch.prompt_ids[int(i) // cfg.group_size] for i in rows]       # answers to a prompt are contiguous
    width = max(1, int(answer_widths(batch.valid[rows]).max()))
    return rows_logprobs(model, prompts, batch.completion_ids[rows, :width], batch.valid[rows, :width],
                         temperature=cfg.temperature, chunk_size=cfg.chunk_size, with_entropy=with_entropy)


@torch.no_grad()
def scoring_pass(model, batch, rows, cfg, ranks, with_entropy=True):
    """log π and (optionally) E of the sampled tokens of `rows` under `model` at its CURRENT weights, no grad,
    micro-batch by micro-batch (micro_batches). Returns ((n, T) log-probs, (n, T) entropies or None) in the order of
    `rows`, 0 at padding; float32 (float64 for a float64 model: tests pin identities at 1e-10)."""
    logp = entropy = None
    where = torch.full((batch.valid.shape[0],), -1, dtype=torch.long, device=rows.device)
    where[rows] = torch.arange(len(rows), device=rows.device)          # each rollout row's place in `rows`
    with ranks.layers_gathered(model):
        for chunk, real in ranks.even_passes(model, [(chunk, True) for chunk in micro_batches(batch, rows, cfg)]):
            lp, ent = row_logprobs(model, batch, chunk, cfg, with_entropy)
            if not real:                                # FSDP's throw-away passes only keep the ranks in step
                continue
            if logp is None:
                dtype = torch.float64 if lp.dtype == torch.float64 else torch.float32
                logp = torch.zeros((len(rows), batch.valid.shape[1]), dtype=dtype, device=lp.device)
                entropy = torch.zeros_like(logp) if with_entropy else None
            logp[where[chunk], :lp.shape[1]] = lp.to(logp.dtype)
            if with_entropy:
                entropy[where[chunk], :ent.shape[1]] = ent.to(entropy.dtype)
    if logp is None:
        logp = torch.zeros((0, batch.valid.shape[1]), device=batch.completion_ids.device)
        entropy = logp.clone() if with_entropy else None
    return logp, entropy


# ----------------------------------------------------------------------------------------------------------------------
# Step 5 with the run's settings, and what step 6 needs before any score is known.

def select(cfg, scores, valid, group_ids, exclude, ratio=None, *, ranks=None):
    """Step 5 with the run's settings: exactly k = ceil(ρ · N_valid) tokens over the WHOLE optimizer batch (across
    ranks too), or per group; never padding. `cfg` needs selector, ratio, select_scope, bottom. ratio: the run's
    (every token for selector none) unless given (what ETS / GMTS would keep, for the diagnostics).

    The three selection names: grpo.select_tokens is the method's top-k on one batch; ranks.select_tokens the same
    over every rank's batch (distributed.select_tokens_global under torchrun); select (this) applies the run's
    flags to them."""
    if ratio is None:
        ratio = cfg.ratio if cfg.selector != "none" else 1.0
    if cfg.select_scope == "group":       # whole groups live on one rank: per-group ranking is local
        return select_tokens(scores, valid, ratio, scope="group", group_ids=group_ids, bottom=cfg.bottom,
                             exclude=exclude)
    return (ranks or processes()).select_tokens(scores, valid, ratio, bottom=cfg.bottom, exclude=exclude)


def selected_count(cfg, valid, group_ids, exclude, ranks):
    """S: how many tokens `select` will keep in this optimizer batch (all ranks), known before any score is."""
    eligible = valid if exclude is None else valid & ~exclude[:, None]
    if cfg.selector == "none":
        return int(ranks.sum(torch.tensor(int(eligible.sum()))))
    if cfg.select_scope == "batch":
        n_valid, n_eligible = ranks.sum(torch.tensor([int(valid.sum()), int(eligible.sum())])).tolist()
        return budget(cfg.ratio, int(n_valid), int(n_eligible))
    local = sum(budget(cfg.ratio, int(valid[group_ids == g].sum()), int(eligible[group_ids == g].sum()))
                for g in torch.unique(group_ids))
    return int(ranks.sum(torch.tensor(int(local))))


def kl_share(cfg, mb, ranks):
    """ω's KL part relative to its policy part in this mini-batch's loss, for β > 0 (grpo.kl_relative_weight)."""
    n_valid = int(ranks.sum(torch.tensor(int(mb.valid.sum()))))
    return kl_relative_weight(cfg.loss_norm, cfg.kl_coverage,
                              selected_count(cfg, mb.valid, mb.group_ids, mb.exclude, ranks), n_valid)


# ----------------------------------------------------------------------------------------------------------------------
# Step 6: the loss's inputs, the micro-batch backward passes; step 7: the optimizer step.

# Rows whose every token has zero gradient get no forward/backward pass: A = 0 (an all-equal group) with β = 0.
# bench/bench_step.py sets this to False to measure what the skip saves (its side `ours-noskip`).
SKIP_ZERO_ADVANTAGE_ROWS = True


@dataclasses.dataclass
class LossInputs:
    """Everything step 6's loss needs for one mini-batch besides log π_θ: its tensors, its weights and the rows worth
    a pass. Built once per mini-batch (masked_loss_inputs), sliced per micro-batch (micro_batch_loss)."""
    mb: MiniBatch
    weights: torch.Tensor             # (n, T) w·m of the policy term: the normaliser of the whole mini-batch
    kl_weights: torch.Tensor | None   # (n, T) of the KL term when it covers every valid token, else None (= weights)
    rows: torch.Tensor                # the rollout rows with a non-zero gradient: the only ones that get a pass
    on_policy: bool                   # θ = θ_old still: r = 1 exactly (π_old := this forward's log π, detached)
    eps_low: float
    eps_high: float
    beta: float


def masked_loss_inputs(cfg, mb, selected, on_policy, ranks):
    """Step 6's weights for the mini-batch (grpo.loss_weights): their normalisers are the mini-batch's, over all
    ranks. Rows with nothing selected, or with A = 0 and no KL term, have exactly zero gradient: no pass."""
    weights = loss_weights(mb.valid, selected, cfg.loss_norm, reduce=ranks.sum)
    kl_all = cfg.beta > 0 and cfg.kl_coverage == "all"      # the KL term on every valid token, with its own weights
    kl_weights = loss_weights(mb.valid, mb.valid, cfg.loss_norm, reduce=ranks.sum) if kl_all else None
    has_gradient = weights.sum(1) > 0
    if cfg.beta == 0 and SKIP_ZERO_ADVANTAGE_ROWS:
        has_gradient &= mb.advantages != 0
    if kl_weights is not None:
        has_gradient |= kl_weights.sum(1) > 0
    return LossInputs(mb, weights, kl_weights, mb.rows[has_gradient], on_policy, cfg.eps_low, cfg.eps_high, cfg.beta)


def micro_batch_loss(inputs, rows, logp):
    """-J of the rollout `rows` (one micro-batch) with their log π_θ (n, w), w <= T its trimmed width:
    grpo.policy_loss on the mini-batch's slices. Summed over the micro-batches it is the mini-batch's loss (the
    weights carry its normaliser)."""
    mb, i, w = inputs.mb, inputs.mb.position[rows], logp.shape[1]      # w: the micro-batch's trimmed width
    return policy_loss(logp, logp.detach() if inputs.on_policy else mb.old_logp[i, :w], mb.advantages[i],
                       inputs.weights[i, :w], eps_low=inputs.eps_low, eps_high=inputs.eps_high, beta=inputs.beta,
                       ref_logp=None if mb.ref_logp is None else mb.ref_logp[i, :w],
                       kl_weights=None if inputs.kl_weights is None else inputs.kl_weights[i, :w])


def accumulate_gradients(model, batch, inputs, cfg, ranks, noise=None):
    """Step 6's backward passes: micro_batch_loss for each micro-batch of the rows worth a pass (micro_batches:
    grouped by length, trimmed), backward, summed.

    Returns (the summed loss as a float64 tensor, the number of real passes on this process). With --log-grad-noise,
    `noise` is the diagnostics' GradNoiseProbe: the same passes run in two halves of whole groups, the gradient copied
    in between (accumulate_in_halves)."""
    if noise is not None:
        return accumulate_in_halves(model, batch, inputs, cfg, ranks, noise)
    passes = [(chunk, True) for chunk in micro_batches(batch, inputs.rows, cfg)]
    total = torch.zeros((), dtype=torch.float64)
    for chunk, real in ranks.even_passes(model, passes):
        logp, _ = row_logprobs(model, batch, chunk, cfg)
        loss = micro_batch_loss(inputs, chunk, logp) if real else logp.sum() * 0.0    # FSDP: a pass that adds 0
        loss.backward()
        total += loss.detach().double().cpu()
    return total, len(passes)          # the real passes: even_passes returns a new list, `passes` stays as it was


def accumulate_in_halves(model, batch, inputs, cfg, ranks, noise):
    """accumulate_gradients for --log-grad-noise (gmts/METHOD.md, "How concentrated an update is"): half a's rows,
    a copy of the gradient so far (g_a), half b's rows, then g_b = g - g_a, all before the gradients are summed over
    ranks and clipped. The sum of the two halves' passes is the whole mini-batch's gradient, as without the probe."""
    rows_a, _ = noise.split(inputs.mb.rows, cfg.group_size, reduce=ranks.sum if ranks.world > 1 else None,
                            rank=ranks.rank)
    in_a = torch.isin(inputs.rows, rows_a)
    loss_a, passes_a = accumulate_gradients(model, batch, dataclasses.replace(inputs, rows=inputs.rows[in_a]), cfg,
                                            ranks)
    noise.snapshot()
    loss_b, passes_b = accumulate_gradients(model, batch, dataclasses.replace(inputs, rows=inputs.rows[~in_a]), cfg,
                                            ranks)
    noise.finish(reduce=ranks.sum if ranks.world > 1 else None)
    return loss_a + loss_b, passes_a + passes_b

def optimizer_step(optimizer, params, loss, n_real_passes, max_grad_norm, ranks):
    """Step 7: sum the gradients over ranks, clip, step. Returns (loss, grad norm, what happened), where what
    happened is "stepped", "non-finite" (the loss or gradient is NaN/inf: no step) or "nothing" (no process had a
    token with a gradient: no step, so AdamW's momentum cannot move the weights, exactly as with one process)."""
    if int(ranks.sum(torch.tensor(n_real_passes))) == 0:
        optimizer.zero_grad(set_to_none=True)
        return 0.0, 0.0, "nothing"
    ranks.sum_gradients(params)
    loss = float(ranks.sum(loss))
    grad_norm = float(ranks.clip_grad_norm(params, max_grad_norm if max_grad_norm > 0 else math.inf))  # 0 = off
    finite = math.isfinite(loss) and math.isfinite(grad_norm)
    if finite:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss, grad_norm, "stepped" if finite else "non-finite"


def finite_on(valid, tensors, ranks):
    """Whether every tensor (n, T) is finite at every valid position, on every rank (one answer for all of them:
    a rank that skips a step alone would leave the others waiting in a collective)."""
    bad = sum(int((~torch.isfinite(t) & valid).sum()) for t in tensors)
    return int(ranks.sum(torch.tensor(bad))) == 0


def weights_finite(params, ranks):
    """Whether every parameter (or this rank's shard of it) holds finite values, on every rank."""
    bad = sum(int((~torch.isfinite(p.to_local() if hasattr(p, "to_local") else p.detach())).sum()) for p in params)
    return int(ranks.sum(torch.tensor(bad))) == 0
