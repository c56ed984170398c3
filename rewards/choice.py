"""Multiple-choice reward (CommonsenseQA 1 and 2): the letter the answer settles on must be the
reference letter.

Where the letter is looked for, most explicit first; within each, the LAST occurrence wins (models
restate and correct themselves):
  1. \\boxed{B}, \\boxed{(B)}, \\boxed{\\text{B}}
  2. "the answer is (B)", "Answer: B", "answer is **B**", "correct option: B)"
  3. a marked letter anywhere: "(B)", "B)", "**B**", "[B]", or a line that is just "B" / "B." / "B:
  text"
A bare capital letter inside prose ("A dog ...") never counts. Letters A-J are recognised.
"""
import re

_L = r"([A-J])"
# Every repeat is bounded or anchored on a literal, so matching stays linear on adversarial text (a
# pattern with several adjacent \s* backtracks polynomially on a long run of spaces).
_BOXED = re.compile(r"\\boxed\s{0,3}\{\s{0,3}(?:\\text(?:bf)?\s{0,3}\{)?\s{0,3}\(?\s{0,3}" + _L +
                    r"\s{0,3}\)?\s{0,3}\}?\s{0,3}\}")
_STATED = re.compile(r"(?i:answer|option|choice)(?:\s{1,3}(?i:is|would be|will be))?"
                     r"(?:\s{0,3}(?i:option|choice))?"
                     r"[\s:\-\*\(\[]{0,8}" + _L + r"(?![A-Za-z0-9'])")
_MARKED = re.compile(r"\(" + _L + r"\)|(?<![A-Za-z0-9])" + _L + r"\)|\*\*" + _L + r"\*\*|\[" + _L
                     + r"\]"
                     r"|^[ \t]*" + _L + r"(?:[.:](?:[ \t].*)?)?[ \t]*$", re.MULTILINE)


def extract_choice(text: str) -> str | None:
    """The chosen letter, upper case, or None."""
    for pattern in (_BOXED, _STATED, _MARKED):
        last = None
        for last in pattern.finditer(text):
            pass
        if last is not None:
            return next(g for g in last.groups() if g)
    return None


def normalize_reference(reference) -> str:
    letter = str(reference).strip().strip("()").strip().upper()
    if not re.fullmatch(r"[A-J]", letter):
        raise ValueError(f"choice reference must be one letter A-J, got {reference!r}")
    return letter


def choice_reward(completion: str, reference) -> float:
    gold = normalize_reference(reference)
    if not isinstance(completion, str):
        return 0.0
    try:
        return 1.0 if extract_choice(completion) == gold else 0.0
    except Exception:  # noqa: BLE001
        return 0.0


def has_choice(completion: str) -> bool:
    return isinstance(completion, str) and extract_choice(completion) is not None
