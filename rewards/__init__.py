"""Verifiable rewards: `get_reward(name)` -> fn(completion: str, reference) -> float.

    gsm8k   last \\boxed{} or else the last number, compared as a number with the gold   (rewards/math.py)
    math    last \\boxed{}, compared with the gold by value / math-verify                  (rewards/math.py)
    choice  the chosen letter equals the reference letter                                 (rewards/choice.py)
    code    the last ```python block passes the tests: computed in a sandbox, judged here   (rewards/code.py)

By default a reward is the binary outcome, 1.0 or 0.0, as in the paper. `format_bonus=b` opts in to adding b
when the answer has the expected form (a box, a letter, a code block) whatever its correctness; it makes the
reward non-binary and changes every group's advantages, so log it with the run's config. Reward functions never
raise on a completion string: anything unparseable scores 0.0. A malformed *reference* raises ValueError.
"""
import os
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from .choice import choice_reward, extract_choice, has_choice
from .code import code_reward, code_stats, extract_code, has_code_block
from .math import answers_equal, gsm8k_reward, has_boxed, last_boxed, last_number, math_reward

_REWARDS = {
    "gsm8k": (gsm8k_reward, has_boxed),
    "math": (math_reward, has_boxed),
    "choice": (choice_reward, has_choice),
    "code": (code_reward, has_code_block),
}
REWARD_NAMES = tuple(_REWARDS)


def get_reward(name: str, *, format_bonus: float = 0.0, trusted_only: bool = False, **options):
    """options go to the reward (code: timeout=, memory_mb=). trusted_only=True (any reward; train.py's
    --code-trusted-only) refuses verdicts this process did not make itself: a code problem whose tests could only
    run inside the sandbox scores 0.0 without running. Math and choice verdicts are always made here."""
    if name not in _REWARDS:
        raise ValueError(f"unknown reward {name!r}; choose one of {REWARD_NAMES}")
    outcome, has_format = _REWARDS[name]
    if trusted_only and name == "code":
        options = dict(options, trusted_only=True)
    if options:
        if name != "code":
            raise ValueError(f"reward {name!r} takes no options, got {sorted(options)}")
        outcome = partial(outcome, **options)
    if not format_bonus:
        return outcome

    def with_format_bonus(completion: str, reference) -> float:
        return outcome(completion, reference) + format_bonus * float(has_format(completion))

    return with_format_bonus


def score_batch(names: list[str], completions: list[str], references: list, *, workers: int | None = None,
                **options) -> list[float]:
    """Rewards for a batch, names[i] being the reward of completion i. Code rewards run `workers` sandboxes at
    a time (default: the number of CPUs), since each one mostly waits on a subprocess; the rest run inline."""
    if not len(names) == len(completions) == len(references):
        raise ValueError(f"lengths differ: {len(names)} names, {len(completions)} completions, "
                         f"{len(references)} references")
    fns = {name: get_reward(name, **(options if name == "code" else
                                     {k: v for k, v in options.items() if k == "trusted_only"}))
           for name in set(names)}
    scores = [0.0] * len(names)
    code_items = [i for i, name in enumerate(names) if name == "code"]
    for i, name in enumerate(names):
        if name != "code":
            scores[i] = fns[name](completions[i], references[i])
    if code_items:
        with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
            for i, score in zip(code_items, pool.map(lambda j: fns["code"](completions[j], references[j]),
                                                     code_items)):
                scores[i] = score
    return scores


__all__ = ["get_reward", "score_batch", "code_stats", "REWARD_NAMES", "answers_equal", "last_boxed", "last_number", "extract_choice",
           "extract_code", "gsm8k_reward", "math_reward", "choice_reward", "code_reward"]
