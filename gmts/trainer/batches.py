"""The rollout batch, its mini-batches and micro-batches, and the passes over them: what train.py's
step (train_step, update_policy) uses to cut its batch and run the model on it (gmts/METHOD.md,
"One RLVR step", "Several optimizer steps per rollout batch").

Batch-wide quantities (k, the loss's normaliser, the gradient) are sums over the whole batch. Under
torchrun each process holds a share of it; the functions that need the whole take it from
gmts/trainer/distributed.py behind `if several_processes()`, a line a single-process reader skips.
"""
import contextlib
import dataclasses
import math

import torch
import torch.distributed as dist

from gmts.method.grpo import budget, policy_loss, select_tokens
from gmts.method.head import head_logprobs
from gmts.trainer import distributed
from gmts.trainer.rollout import Rollout, left_pad, positions


# --------------------------------------------------------------------------------------------------
# The whole batch: every process's share of it under torchrun, the values themselves on one process.

def several_processes():
    """Whether this process is one of several (torchrun)."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def batch_sum(x):
    """Σ of x (a number, or counts / sums) over the whole batch: x itself on one process."""
    return distributed.all_reduce_sum(x) if several_processes() else torch.as_tensor(x)


def batch_select(scores, valid_mask, ratio, *, scope="batch", group_ids=None, **kw):
    """grpo.select_tokens over the whole batch, (N, T) bool; kw: its bottom and exclude. scope
    "batch" ranks every process's rows; "group" ranks each group where it lives (whole groups stay
    on one process)."""
    if scope == "batch" and several_processes():
        return distributed.select_tokens_global(scores, valid_mask, ratio, **kw)
    return select_tokens(scores, valid_mask, ratio, scope=scope, group_ids=group_ids, **kw)


def selection_counts(valid_mask, exclude, ratio, scope, group_ids):
    """(S, N_valid) of this optimizer batch (every process's): S, how many tokens batch_select
    keeps, known before any score is (k = ceil(ρ · N_valid) per ranking, capped at its eligible
    count); N_valid its valid tokens."""
    eligible = valid_mask if exclude is None else valid_mask & ~exclude[:, None]     # (N, T)
    n_valid = int(batch_sum(int(valid_mask.sum())))
    if scope == "batch":
        return budget(ratio, n_valid, int(batch_sum(int(eligible.sum())))), n_valid
    local = sum(budget(ratio, int(valid_mask[group_ids == g].sum()),
                       int(eligible[group_ids == g].sum())) for g in torch.unique(group_ids))
    return int(batch_sum(int(local))), n_valid


def all_finite(tensors, where=True):
    """Whether every tensor (a parameter: this process's shard of it) is finite where `where` (a
    mask broadcasting to it), on every process."""
    bad = 0
    for t in tensors:                           # a DTensor (FSDP): this process's shard, to_local
        bad += int((~torch.isfinite(getattr(t, "to_local", t.detach)()) & where).sum())
    return int(batch_sum(bad)) == 0


# --------------------------------------------------------------------------------------------------
# The data: a seeded stream of prompts, and the rollout batch.

class PromptStream:
    """The run's data order: a seeded permutation per epoch (a run resumes from one integer)."""

    def __init__(self, problems, prompt_ids, seed, position=0, shard=slice(None)):
        self.problems, self.prompt_ids, self.seed = problems, prompt_ids, seed
        self.position = position      # prompts taken so far
        self.shard = shard            # this process's slice of each step's prompts (torchrun)

    def take(self, n):
        """This process's share (`shard`) of the next n problem indices; each epoch is a fresh
        permutation seeded by (seed, epoch)."""
        size, start, self.position = len(self.problems), self.position, self.position + n
        order = torch.zeros(0, dtype=torch.long)        # (epochs x size,) the epochs they fall in
        for epoch in range(start // size, (start + n) // size + 1):
            gen = torch.Generator().manual_seed(self.seed * 7919 + epoch)
            order = torch.cat([order, torch.randperm(size, generator=gen)])
        return order[start % size:start % size + n].tolist()[self.shard]


@dataclasses.dataclass(kw_only=True)
class Batch(Rollout):
    """A Rollout (gmts/trainer/rollout.py) with its problems, texts, rewards R (N,) and
    advantages A (N,)."""
    problems: list            # Q problems
    texts: list               # N decoded completions
    rewards: torch.Tensor     # (N,) R, the checker's rewards
    advantages: torch.Tensor  # (N,) A

    def to(self, device):
        """The same batch with its tensors on `device`."""
        moved = dataclasses.replace(self)
        for name, value in vars(self).items():
            if torch.is_tensor(value):
                setattr(moved, name, value.to(device))
        return moved

    def groups(self, keep, group_size):
        """The groups where keep (Q,) is True (dynamic sampling keeps the mixed ones)."""
        rows = keep.repeat_interleave(group_size)
        on = rows.to(self.valid_mask.device)
        return Batch(problems=[p for p, k in zip(self.problems, keep) if k],
                     prompt_ids=[p for p, k in zip(self.prompt_ids, keep) if k],
                     completion_ids=self.completion_ids[on], valid_mask=self.valid_mask[on],
                     old_logp=self.old_logp[on], entropy=self.entropy[on],
                     finished=None if self.finished is None else self.finished[on],
                     group_size=self.group_size, texts=[t for t, k in zip(self.texts, rows) if k],
                     rewards=self.rewards[rows], advantages=self.advantages[on])


# --------------------------------------------------------------------------------------------------
# Mini-batches.

# Mini-batch order: a permutation of the rollout's groups seeded by (run seed, step, epoch), so a
# resumed run draws the same mini-batches without any saved state, and arms with the same seed see
# the same ones.
_SHUFFLE_SALT = 0x6D696E69


def minibatch_rows(n_local_groups, group_size, groups_per_step, *, seed, step, epoch, device=None):
    """The rollout batch's rows for each optimizer step: one (rows,) long tensor per mini-batch of
    `groups_per_step` whole groups. One mini-batch: every row, in order (the on-policy step)."""
    if groups_per_step >= int(batch_sum(n_local_groups)):
        return [torch.arange(n_local_groups * group_size, device=device)]
    return shuffled_minibatches(**locals())                       # (minibatch_rows' arguments)


def shuffled_minibatches(n_local_groups, group_size, groups_per_step, *, seed, step, epoch, device):
    """minibatch_rows with several mini-batches: the groups (numbered over the processes in order)
    shuffled with (seed, step, epoch) and cut in order, each mini-batch listing its groups in
    ascending order (its rows over the processes are the rows one process would hold)."""
    counts = distributed.gather_objects(int(n_local_groups))
    offset, total = sum(counts[:distributed.rank()]), sum(counts)
    gen = torch.Generator().manual_seed((seed * 1_000_003 + step * 7919
                                         + epoch) % 2**63 ^ _SHUFFLE_SALT)
    order = torch.randperm(total, generator=gen)
    out = []
    for start in range(0, total, groups_per_step):
        groups = order[start:start + groups_per_step].sort().values
        mine = groups[(groups >= offset) & (groups < offset + n_local_groups)] - offset
        rows = (mine[:, None] * group_size + torch.arange(group_size)).reshape(-1)
        out.append(rows.to(device) if device is not None else rows)
    return out


class MiniBatch:
    """One optimizer batch: `rows` of the rollout batch, the per-row tensors sliced to them."""

    def __init__(self, batch, rows, group_size, *, ref_logp=None, exclude=None):
        self.rows, self.group_ids = rows, rows // group_size
        self.valid_mask, self.advantages = batch.valid_mask[rows], batch.advantages[rows]
        self.old_logp, self.entropy = batch.old_logp[rows], batch.entropy[rows]   # at θ_old
        self.ref_logp = None if ref_logp is None else ref_logp[rows]     # ref_logp: (N, T) π_ref
        self.exclude = None if exclude is None else exclude[rows]        # exclude: (N,) left out
        self.position = torch.full((len(batch.valid_mask),), -1, device=rows.device)
        self.position[rows] = torch.arange(len(rows), device=rows.device)   # rollout row -> its row


# --------------------------------------------------------------------------------------------------
# Forward passes: log π (and E) of the sampled tokens.

def completion_logprobs(model, prompt_ids, completion_ids, valid_mask, *, group_size=1,
                        temperature=1.0, chunk_size=1024, with_entropy=False):
    """log π_θ(o_it | q, o_i,<t) (N, T) float32 (float64 for a float64 model), differentiable, 0 at
    padding; and the entropies (N, T) (no grad), or None. prompt_ids: N / group_size lists of
    ids."""
    prompts = prompt_ids if group_size == 1 else [p for p in prompt_ids for _ in range(group_size)]
    if len(prompts) != completion_ids.shape[0]:
        raise ValueError(f"{len(prompt_ids)} prompts x {group_size} != {len(completion_ids)} rows")
    return row_logprobs(model, prompts, completion_ids, valid_mask, temperature, chunk_size,
                        with_entropy)


def row_logprobs(model, prompts, completion_ids, valid_mask, temperature, chunk_size, with_entropy):
    """completion_logprobs with a prompt per row (N lists of ids), every argument given, unchecked
    (micro_batch_logprobs: the batch's own rows)."""
    ids, prompt_mask = left_pad(prompts, pad_id=0, device=completion_ids.device)
    attention = torch.cat([prompt_mask, valid_mask.long()], dim=1)                  # (N, P + T)
    hidden = model.get_decoder()(input_ids=torch.cat([ids, completion_ids], dim=1), use_cache=False,
        attention_mask=attention, position_ids=positions(attention)).last_hidden_state
    h = hidden[:, ids.shape[1] - 1:-1][valid_mask]     # (n_valid, H): P-1+t predicts token t
    head = model.get_output_embeddings()
    logp, entropy = head_logprobs(h, head.weight, completion_ids[valid_mask], head.bias,
                                  temperature, chunk_size, with_entropy)    # (n_valid,) each
    logp = logp.new_zeros(valid_mask.shape).masked_scatter(valid_mask, logp)    # (N, T), 0 at pad
    if with_entropy:
        entropy = entropy.new_zeros(valid_mask.shape).masked_scatter(valid_mask, entropy)  # (N, T)
    return logp, entropy


def micro_batches(batch, rows, cfg):
    """`rows` in micro-batches, longest answers first, so that each is trimmed to its own width.

    Any split gives the same gradient (the loss weights carry the mini-batch's normaliser).
    --micro-batch-size rows each; with --micro-batch-tokens, as many rows as fit that many padded
    tokens (rows x (widest prompt + widest answer)), a row alone if it is longer."""
    valid = batch.valid_mask[rows]                                      # (n, T)
    widths = valid.int().cumsum(1).argmax(1) + valid.any(1)   # (n,) one past the last valid, or 0
    widths, order = torch.sort(widths.cpu(), descending=True, stable=True)
    rows = rows[order.to(rows.device)]                       # ties in rollout order
    if cfg.micro_batch_tokens:
        return token_budget_chunks(batch, rows, widths.tolist(), cfg)
    return list(torch.split(rows, cfg.micro_batch_size)) if len(rows) else []


def token_budget_chunks(batch, rows, widths, cfg):
    """micro_batches with --micro-batch-tokens: `rows` (longest answers first) cut in order."""
    chunks, start, prompt_width = [], 0, 0
    for j, row in enumerate(rows.tolist()):
        prompt = len(batch.prompt_ids[row // cfg.group_size])
        if j > start and (j + 1 - start) * (max(prompt_width, prompt)
                                            + widths[start]) > cfg.micro_batch_tokens:
            chunks.append(rows[start:j])
            start, prompt_width = j, 0
        prompt_width = max(prompt_width, prompt)
    return chunks + ([rows[start:]] if len(rows) > start else [])


def micro_batch_logprobs(model, batch, rows, cfg, with_entropy=False):
    """completion_logprobs of the batch's `rows`, trimmed to their widest answer: (n, w), w <= T.
    Under FSDP, the decoder and then the chunked head as one pass of the whole model, the root's
    parameters gathered (distributed.shard_model's run_forward)."""
    width = int(batch.valid_mask[rows].any(0).int().cumsum(0).argmax()) + 1  # widest, 1 at least
    prompts = [batch.prompt_ids[i // cfg.group_size] for i in rows.tolist()]  # G answers a prompt
    args = (model, prompts, batch.completion_ids[rows, :width], batch.valid_mask[rows, :width],
            cfg.temperature, cfg.chunk_size, with_entropy)
    return model.run_forward(row_logprobs, *args) if hasattr(model, "run_forward") else \
        row_logprobs(*args)


@torch.no_grad()
def scoring_pass(model, batch, rows, cfg, with_entropy=True):
    """log π and E of `rows` at the model's CURRENT weights, no grad, per micro-batch: ((n, T), (n,
    T) or None) in the order of `rows`, 0 at padding, float32 (float64 for a float64 model)."""
    T = batch.valid_mask.shape[1]
    logp = torch.zeros((0, T), device=batch.completion_ids.device)
    entropy = logp.clone() if with_entropy else None
    where = torch.full((batch.valid_mask.shape[0],), -1, dtype=torch.long, device=rows.device)
    where[rows] = torch.arange(len(rows), device=rows.device)          # each row's place in `rows`
    chunks = micro_batches(batch, rows, cfg)
    passes = (distributed.even_passes(model, len(chunks), backward=False) if several_processes()
              else contextlib.nullcontext())           # FSDP: as many passes on every process
    gathered = (distributed.layers_gathered(model) if several_processes()
                else contextlib.nullcontext())                  # FSDP: the layers kept gathered
    with gathered, passes:
        for k, chunk in enumerate(chunks):
            lp, ent = micro_batch_logprobs(model, batch, chunk, cfg, with_entropy)
            if k == 0:
                dtype = torch.float64 if lp.dtype == torch.float64 else torch.float32
                logp = torch.zeros((len(rows), T), dtype=dtype, device=lp.device)
                entropy = torch.zeros_like(logp) if with_entropy else None
            logp[where[chunk], :lp.shape[1]] = lp.to(logp.dtype)
            if with_entropy:
                entropy[where[chunk], :ent.shape[1]] = ent.to(entropy.dtype)
    return logp, entropy


# --------------------------------------------------------------------------------------------------
# Step 6: the backward passes; step 7: the optimizer step.

def accumulate_gradients(model, batch, mb, rows, weights, cfg, *, kl_weights=None, on_policy=False):
    """Step 6's backward passes over the rollout `rows` of the mini-batch `mb`, per micro-batch:
    -J = grpo.policy_loss with the mini-batch's weights (n, T) (and kl_weights) sliced to it, so
    the micro-batches' losses sum to the mini-batch's. on_policy: θ = θ_old still, r = 1 exactly
    (π_old := this forward's log π). Returns (the summed loss, a float64 tensor; the passes)."""
    chunks = micro_batches(batch, rows, cfg)
    total = torch.zeros((), dtype=torch.float64)
    with distributed.even_passes(model, len(chunks)) if several_processes() else \
            contextlib.nullcontext(torch.Tensor.backward) as backward:   # FSDP: as many passes
        for chunk in chunks:
            logp = micro_batch_logprobs(model, batch, chunk, cfg)[0]    # (n, w) log π_θ, w <= T
            i, w = mb.position[chunk], logp.shape[1]                    # (n,) its rows in mb
            loss = policy_loss(logp, logp.detach() if on_policy else mb.old_logp[i, :w],
                mb.advantages[i], weights[i, :w], eps_low=cfg.eps_low, eps_high=cfg.eps_high,
                beta=cfg.beta, ref_logp=None if mb.ref_logp is None else mb.ref_logp[i, :w],
                kl_weights=None if kl_weights is None else kl_weights[i, :w])       # -J, a number
            backward(loss)
            total += loss.detach().double().cpu()
    return total, len(chunks)


def clip_grad_norm(params, max_norm):
    """clip_grad_norm_ of torch.nn.utils, the norm summed in float32 at least (bf16 keeps 3
    digits)."""
    norms = [torch.linalg.vector_norm(p.grad, dtype=torch.promote_types(p.grad.dtype, torch.float))
             for p in params if p.grad is not None]      # each gradient's, float32 at least
    total = torch.linalg.vector_norm(torch.stack(norms))
    torch.nn.utils.clip_grads_with_norm_(params, max_norm if max_norm > 0 else math.inf, total)
    return total


STEPPED, NOTHING, NON_FINITE = "stepped", "nothing", "non-finite"     # what an optimizer step did


def optimizer_step(model, optimizer, loss, n_passes, max_grad_norm):
    """Step 7: sum the gradients over the batch, clip, step. Returns (loss, grad norm, STEPPED, or
    NOTHING when no row had a gradient, or NON_FINITE when the loss or gradient is NaN/inf: no
    step)."""
    if several_processes():     # the gradients summed over the processes (FSDP: theirs sharded)
        n_passes, grad_norm = distributed.sum_and_clip_gradients(model, n_passes, max_grad_norm,
                                                                 clip_grad_norm)
    else:                       # every parameter; a frozen one (LoRA's base) has no gradient
        grad_norm = clip_grad_norm(list(model.parameters()), max_grad_norm) if n_passes else 0.0
    loss, grad_norm = float(batch_sum(loss)), float(grad_norm)
    finite = math.isfinite(loss) and math.isfinite(grad_norm)
    if n_passes and finite:   # no pass anywhere: no step (AdamW's momentum would move the weights)
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss, grad_norm, NOTHING if not n_passes else STEPPED if finite else NON_FINITE
