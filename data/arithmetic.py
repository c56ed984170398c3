"""A procedurally generated task that needs no download: multi-step integer arithmetic, e.g. "What
is 37 - 12 * 4?".

Knobs (load_problems("arithmetic", split, seed=..., **options)):
    n       number of problems (default: up to 1000 for train, 200 for other splits, fewer if fewer
            exist; an n you give is exact, or an error)
    digits  digits per operand (default 2); `min_digits` (default 1) lets operands be shorter
    terms   operands per expression (default 3)
    ops     operators to draw from (default "+-"; add "*" for precedence, which is harder)
    max_operand  draw every operand uniformly from 0..max_operand instead of by digits (e.g. 30: "17
                 + 24"), a
            difficulty between digits=1 and digits=2; it replaces digits and min_digits, which must
            then be left out
Difficulty grows with digits, terms and "*". For a 135M model, digits=1, terms=2 is easy and
digits=2, terms=3 is hard; pick the knobs that put the starting success rate in the range you want.

Deterministic given (seed, split, knobs). Train and test never share a problem: every expression
belongs to one split by a hash of its text (1 in 10 to test/validation, the rest to train), whatever
the seed or n.
"""
import hashlib
import random


def _evaluate(operands: list[int], operators: list[str]) -> int:
    """Usual precedence: multiplications first, then + and - from left to right."""
    sums, signs = [operands[0]], []
    for op, value in zip(operators, operands[1:]):
        if op == "*":
            sums[-1] *= value
        else:
            sums.append(value)
            signs.append(op)
    total = sums[0]
    for op, value in zip(signs, sums[1:]):
        total = total + value if op == "+" else total - value
    return total


def _split_of(text: str) -> str:
    return "test" if hashlib.sha256(text.encode()).digest()[0] % 10 == 0 else "train"


def generate(split: str = "train", seed: int = 0, n: int | None = None, digits: int | None = None,
             terms: int = 3, ops: str = "+-", min_digits: int | None = None,
             max_operand: int | None = None) -> list[dict]:
    """[{"id", "question", "answer"}]; answer is the integer as a string."""
    if split not in ("train", "test", "validation"):
        raise ValueError(f"arithmetic splits are train, test, validation; got {split!r}")
    # a default n is a ceiling: a small space (max_operand=30) gives what it has
    asked = n is not None
    n = n if asked else (1000 if split == "train" else 200)
    if max_operand is not None:
        if digits is not None or min_digits is not None:
            raise ValueError(f"bad arithmetic options: max_operand={max_operand} replaces digits "
                             f"and min_digits; give one or the other (got digits={digits}, "
                             f"min_digits={min_digits})")
        if isinstance(max_operand, bool) or not isinstance(max_operand, int) or max_operand < 1:
            raise ValueError("bad arithmetic options: max_operand must be an integer >= 1, got "
                             f"{max_operand!r}")
    digits = 2 if digits is None else digits
    min_digits = 1 if min_digits is None else min_digits
    if not (1 <= min_digits <= digits <= 18) or terms < 2 or n < 0 or not ops or set(ops) - set(
        "+-*"):
        raise ValueError(f"bad arithmetic options: n={n} digits={digits} min_digits={min_digits} "
                         f"terms={terms} ops={ops!r} (need 1 <= min_digits <= digits <= 18, terms "
                         ">= 2, ops from '+-*')")
    want = "test" if split in ("test", "validation") else "train"
    # validation and test draw from the same held-out pool with different streams, so they may
    # overlap each other but never train
    stream = f"arithmetic/{split}/{seed}/{digits}/{min_digits}/{terms}/{ops}"
    rng = random.Random(stream if max_operand is None else f"{stream}/max{max_operand}")
    seen, problems = set(), []
    for _ in range(200 * n + 1000):
        if len(problems) == n:
            break
        if max_operand is None:
            sizes = [rng.randint(min_digits, digits) for _ in range(terms)]
            operands = [rng.randint(0 if d == 1 else 10 ** (d - 1), 10 ** d - 1) for d in sizes]
        else:
            operands = [rng.randint(0, max_operand) for _ in range(terms)]
        operators = [rng.choice(ops) for _ in range(terms - 1)]
        expression = (
            " ".join(f"{a} {op}" for a, op in zip(operands, operators)) + f" {operands[-1]}")
        if expression in seen or _split_of(expression) != want:
            continue
        seen.add(expression)
        problems.append(
            {"id": f"arithmetic/{split}/{len(problems)}", "question": f"What is {expression}?",
                         "answer": str(_evaluate(operands, operators))})
    if len(problems) < n and (asked or not problems):
        size = f"max_operand={max_operand}" if max_operand is not None else f"digits={digits}"
        raise ValueError(f"only {len(problems)} distinct {split} problems exist for {size} "
                         f"terms={terms} ops={ops!r}; ask for fewer (n={n}) or make them harder")
    return problems
