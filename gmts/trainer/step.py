"""The machinery of one optimizer step, kept out of train.py's story: how a rollout batch splits into mini-batches,
the no-grad scoring pass, the run's selection, the micro-batch backward passes and the optimizer step itself.

Nothing here is method (that is advantage.py, scores.py, selection.py and loss.py); this is what makes the method's
batch-wide quantities come out right when the batch is computed in pieces: several optimizer steps per rollout
batch (gmts/METHOD.md, "Several optimizer steps per rollout batch"), gradient accumulation over micro-batches and
several processes (torchrun, FSDP).
"""
import math
import os

import torch

from gmts.trainer import distributed as dist
from gmts.trainer.policy import completion_logprobs
from gmts.method.grpo import budget, select_tokens

# Mini-batch order: a permutation of the rollout's groups seeded by (run seed, step, epoch), so a resumed run
# draws the same mini-batches without any saved state, and arms with the same seed see the same mini-batches.
_SHUFFLE_SALT = 0x6D696E69


def minibatch_rows(n_local_groups, group_size, groups_per_step, *, seed, step, epoch, device=None):
    """The rollout batch's rows for each optimizer step: a list of (rows,) long tensors, one per mini-batch.

    The batch's groups (numbered across ranks: rank 0's first, in rank order) are shuffled with (seed, step, epoch)
    and cut into mini-batches of `groups_per_step` whole groups; each mini-batch lists its groups in ascending
    order, so its rows concatenated over ranks are exactly the rows one process would hold (same ties, same sums).
    This rank's rows of a mini-batch may be empty. With groups_per_step >= the number of groups: one mini-batch,
    every row in order (the on-policy step, unshuffled).
    """
    counts = dist.gather_objects(int(n_local_groups))
    offset, total = sum(counts[:dist.rank()]), sum(counts)
    if groups_per_step >= total:
        order = torch.arange(total)
    else:
        gen = torch.Generator().manual_seed((seed * 1_000_003 + step * 7919 + epoch) % 2**63 ^ _SHUFFLE_SALT)
        order = torch.randperm(total, generator=gen)
    out = []
    for start in range(0, total, groups_per_step):
        groups = order[start:start + groups_per_step].sort().values
        mine = groups[(groups >= offset) & (groups < offset + n_local_groups)] - offset
        rows = (mine[:, None] * group_size + torch.arange(group_size)).reshape(-1)
        out.append(rows.to(device) if device is not None else rows)
    return out


def row_prompts(prompt_ids, rows, group_size):
    """The prompt of each of `rows` (answers to one prompt are contiguous)."""
    return [prompt_ids[int(i) // group_size] for i in rows]


@torch.no_grad()
def scoring_pass(model, prompt_ids, completion_ids, valid, rows, *, group_size, micro_batch_size, temperature,
                 chunk_size, with_entropy=True):
    """log π and (optionally) E of the sampled tokens of `rows` under `model` at its CURRENT weights, no grad,
    micro-batch by micro-batch. Returns ((n, T) log-probs, (n, T) entropies or None), n = len(rows).

    Under FSDP every process must run at least one forward in each gathered region (the first forward gathers the
    layers): a process with no rows here runs one throw-away row."""
    width = completion_ids.shape[1]
    logps, ents = [], []
    chunks = [chunk for chunk in torch.split(rows, micro_batch_size) if chunk.numel()]
    if not len(rows) and dist.sharded_layers(model):
        completion_logprobs(model, row_prompts(prompt_ids, [0], group_size), completion_ids[:1], valid[:1],
                            group_size=1, temperature=temperature, chunk_size=chunk_size)
    for chunk in chunks:
        lp, ent = completion_logprobs(model, row_prompts(prompt_ids, chunk, group_size), completion_ids[chunk],
                                      valid[chunk], group_size=1, temperature=temperature, chunk_size=chunk_size,
                                      with_entropy=with_entropy)
        logps.append(_float(lp))
        ents.append(_float(ent) if with_entropy else None)
    if not logps:
        empty = torch.zeros((0, width), device=completion_ids.device)
        return empty, (empty.clone() if with_entropy else None)
    return torch.cat(logps), (torch.cat(ents) if with_entropy else None)


def _float(x):
    return x if x.dtype == torch.float64 else x.float()     # float64 models stay float64 (tests pin 1e-10)


def select(cfg, scores, valid, group_ids, exclude, ratio=None):
    """Step 5 with the run's settings: exactly k = ceil(ρ · N_valid) tokens over the WHOLE optimizer batch (across
    ranks too), or per group; never padding. `cfg` needs selector, ratio, select_scope, bottom. ratio: the run's
    (every token for selector none) unless given (what ETS / GMTS would keep, for the diagnostics)."""
    if ratio is None:
        ratio = cfg.ratio if cfg.selector != "none" else 1.0
    if cfg.select_scope == "group":       # whole groups live on one rank: per-group ranking is local
        return select_tokens(scores, valid, ratio, scope="group", group_ids=group_ids, bottom=cfg.bottom,
                             exclude=exclude)
    return dist.select_tokens_global(scores, valid, ratio, bottom=cfg.bottom, exclude=exclude)


def selected_count(cfg, valid, group_ids, exclude):
    """S: how many tokens `select` will keep in this optimizer batch (all ranks), known before any score is."""
    eligible = valid if exclude is None else valid & ~exclude[:, None]
    if cfg.selector == "none":
        return int(dist.all_reduce_sum(torch.tensor(int(eligible.sum()))))
    if cfg.select_scope == "batch":
        n_valid, n_eligible = dist.all_reduce_sum(torch.tensor([int(valid.sum()), int(eligible.sum())])).tolist()
        return budget(cfg.ratio, int(n_valid), int(n_eligible))
    local = sum(budget(cfg.ratio, int(valid[group_ids == g].sum()), int(eligible[group_ids == g].sum()))
                for g in torch.unique(group_ids))
    return int(dist.all_reduce_sum(torch.tensor(int(local))))


def accumulate_gradients(model, prompt_ids, completion_ids, valid, rows, loss_fn, *, group_size, micro_batch_size,
                         temperature, chunk_size):
    """Step 6's backward passes: loss_fn(rows, logp) for each micro-batch of `rows`, backward, summed.

    Returns (the summed loss as a float64 tensor, the number of real passes on this process). Under FSDP every
    process runs as many passes as the busiest one (each forward/backward gathers the layers from all of them);
    the extra passes are multiplied by 0."""
    passes = [(chunk, True) for chunk in torch.split(rows, micro_batch_size) if chunk.numel()]
    n_real = len(passes)
    if dist.sharded_layers(model):
        busiest = max(dist.gather_objects(n_real))
        passes += [(torch.zeros(1, dtype=torch.long, device=rows.device), False)] * (busiest - n_real)
    total = torch.zeros((), dtype=torch.float64)
    for chunk, real in passes:
        logp, _ = completion_logprobs(model, row_prompts(prompt_ids, chunk, group_size), completion_ids[chunk],
                                      valid[chunk], group_size=1, temperature=temperature, chunk_size=chunk_size)
        loss = loss_fn(chunk, logp) if real else logp.sum() * 0.0
        loss.backward()
        total += loss.detach().double().cpu()
    return total, n_real


def optimizer_step(optimizer, params, loss, n_real_passes, max_grad_norm):
    """Step 7: sum the gradients over ranks, clip, step. Returns (loss, grad norm, what happened), where what
    happened is "stepped", "non-finite" (the loss or gradient is NaN/inf: no step) or "nothing" (no process had a
    token with a gradient: no step, so AdamW's momentum cannot move the weights, exactly as with one process)."""
    if int(dist.all_reduce_sum(torch.tensor(n_real_passes))) == 0:
        optimizer.zero_grad(set_to_none=True)
        return 0.0, 0.0, "nothing"
    dist.all_reduce_gradients(params)
    loss = float(dist.all_reduce_sum(loss))
    grad_norm = float(dist.clip_grad_norm(params, max_grad_norm))
    finite = math.isfinite(loss) and math.isfinite(grad_norm)
    if finite:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss, grad_norm, "stepped" if finite else "non-finite"


class MiniBatch:
    """One optimizer batch: `rows` of the rollout batch, with the per-row tensors the step needs sliced to them."""

    def __init__(self, rows, *, valid, advantages, old_logp, ref_logp, exclude, group_size):
        self.rows, self.group_size = rows, group_size
        self.valid, self.advantages, self.old_logp = valid[rows], advantages[rows], old_logp[rows]
        self.ref_logp = None if ref_logp is None else ref_logp[rows]
        self.exclude = None if exclude is None else exclude[rows]
        self.group_ids = rows // group_size
        # where each rollout row sits in this mini-batch (-1: not in it), to slice per micro-batch
        self.position = torch.full((valid.shape[0],), -1, dtype=torch.long, device=valid.device)
        self.position[rows] = torch.arange(len(rows), device=valid.device)


def kl_weight(cfg, mb):
    """ω's KL part relative to its policy part in this mini-batch's loss (loss.kl_relative_weight)."""
    from gmts.method.grpo import kl_relative_weight
    if cfg.beta == 0:
        return 1.0
    n_valid = int(dist.all_reduce_sum(torch.tensor(int(mb.valid.sum()))))
    return kl_relative_weight(cfg.loss_norm, cfg.kl_coverage, selected_count(cfg, mb.valid, mb.group_ids, mb.exclude),
                              n_valid)


def masked_loss_weights(cfg, mb, selected):
    """Step 6's weights for the mini-batch: (policy weights w·m, KL weights or None, the rows worth a pass). The
    normalisers are the mini-batch's, over all ranks (loss.loss_weights). Rows with nothing selected, or with A = 0
    and no KL term, have exactly zero gradient: no pass."""
    from gmts.method.grpo import loss_weights
    weights = loss_weights(mb.valid, selected, cfg.loss_norm, reduce=dist.all_reduce_sum)
    kl_weights = None
    if cfg.beta > 0 and cfg.kl_coverage == "all":
        kl_weights = loss_weights(mb.valid, mb.valid, cfg.loss_norm, reduce=dist.all_reduce_sum)
    has_weight = weights.sum(1) > 0
    # GMTS_KEEP_ZERO_ADV_ROWS=1 (benchmarks only: bench/bench_step.py measures what the skip saves) keeps the passes
    if cfg.beta == 0 and os.environ.get("GMTS_KEEP_ZERO_ADV_ROWS") != "1":
        has_weight &= mb.advantages != 0
    if kl_weights is not None:
        has_weight |= kl_weights.sum(1) > 0
    return weights, kl_weights, mb.rows[has_weight]
