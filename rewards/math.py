"""Math rewards: the final answer is the last \\boxed{...}; numbers are compared exactly, LaTeX with
math-verify.

gsm8k_reward(completion, gold): last \\boxed{} or, if there is none, the last number in the text.
math_reward(completion, gold):  last \\boxed{} only (the paper's template asks for one; no box, no
answer).

Comparison, cheapest first: (1) normalised strings equal; (2) both sides plain numbers (commas,
signs, $, %, trailing units, .0, simple fractions handled) -> exact Fraction equality; (3) anything
else (LaTeX fractions, roots, intervals, matrices, expressions) -> math-verify in a helper process
with a hard time limit (rewards/_math_worker.py). If math-verify is not installed, (3) is skipped
with a warning: only (1) and (2).
"""
import atexit
import json
import os
import re
import sys
import threading
import warnings
from fractions import Fraction

from ._helpers import Helper, Pool

# per comparison, wall clock, including the helper's own parsing/verify time limits
VERIFY_TIMEOUT_S = 3.0
# a longer "final answer" is not an answer: compared as a string only, never parsed
MAX_ANSWER_CHARS = 1000

# ---------------------------------------------------------------- extraction

_BOX = re.compile(r"\\(?:boxed|fbox)\s*")
_BRACES = re.compile(r"[{}]")


def last_boxed(text: str) -> str | None:
    """Content of the last well-formed \\boxed{...} (nested braces allowed) or `\\boxed 5`. A box
    cut off before its closing brace is skipped, so a truncated re-statement does not erase an
    earlier complete answer."""
    starts = [m.end() for m in _BOX.finditer(text)][-20:]  # bound the work on adversarial inputs
    for start in reversed(starts):
        if start < len(text) and text[start] == "{":
            depth = 0
            # jumps from brace to brace: fast on long answers
            for brace in _BRACES.finditer(text, start):
                depth += 1 if brace.group(0) == "{" else -1
                if depth == 0:
                    return text[start + 1:brace.start()].strip()
        else:  # "\boxed 5": one token, up to whitespace or a closing $
            token = re.match(r"[^\s$]+", text[start:])
            if token and not token.group(0).startswith("}"):
                return token.group(0)
    return None


_NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|(?<![\w.])-?\.\d+")


def last_number(text: str) -> str | None:
    """The last number written in the text ("1,234.5", "-3", ".5"); GSM8K's fallback when nothing is
    boxed."""
    last = None
    for last in _NUMBER.finditer(text):
        pass
    return last.group(0) if last else None


# ---------------------------------------------------------------- normalisation

_TEXT_CMD = re.compile(r"\\(?:text|textbf|textrm|mbox|mathrm|mathbf)\s*\{([^{}]*)\}")
_FRAC = re.compile(r"^(-?)\\[dt]?frac\{\s*(-?\d+)\s*\}\{\s*(-?\d+)\s*\}$")
_PLAIN = re.compile(r"^([-+]?)(\d{1,3}(?:,\d{3})+|\d*)(\.\d+)?(?:/(\d+))?"
                    r"(\s+[A-Za-z][A-Za-z .]*(?:\^\{?\d\}?)?)?$")
# Words that make "5 <words>" more than a number with its unit: "5 or seven", "5 and 6", "5 to 7",
# "5 plus x".
_NOT_A_UNIT = re.compile(r"\b(?:or|and|nor|but|not|to|plus|minus|times|over|divided|by|is|equals?|"
                         r"than|vs|versus|either|neither|maybe|between|from)\b", re.IGNORECASE)


def normalize(answer: str) -> str:
    """Formatting-only rewrites both sides get before any comparison (strip $, spacing commands,
    \\left, ...)."""
    s = answer.strip()
    # LaTeX thin spaces ("1\\!000"); the row break "\\\\" is kept
    s = re.sub(r"(?<!\\)\\[!,;:]", "", s)
    s = re.sub(r"(?<!\\)\\ ", " ", s)
    for old, new in (("~", " "), ("\\left", ""), ("\\right", ""), ("\\dfrac", "\\frac"),
                     ("\\tfrac", "\\frac"),
                     ("\\$", ""), ("$", ""), ("\\%", ""), ("%", ""), ("^{\\circ}", ""),
                     ("^\\circ", ""),
                     ("°", ""), ("−", "-"), ("\\displaystyle", "")):
        s = s.replace(old, new)
    s = _TEXT_CMD.sub(lambda m: " " + m.group(1).strip(), s)
    s = re.sub(r"^(?:[a-zA-Z]\w*|\\[a-zA-Z]+)\s*=\s*(?=[^=]+$)", "", s.strip())  # "x = 5" -> "5"
    s = re.sub(r"\s+", " ", s).strip().rstrip(".").strip()
    return s


def to_number(answer: str) -> Fraction | None:
    """An exact value for a plain number, or None if it is anything else (then LaTeX comparison
    decides)."""
    s = normalize(answer)
    if s.startswith("(") and s.endswith(")") and s.count("(") == 1:
        s = s[1:-1].strip()
    frac = _FRAC.match(s.replace(" ", ""))
    if frac:
        sign, num, den = frac.groups()
        return None if int(den) == 0 else Fraction(int(num), int(den)) * (-1 if sign else 1)
    plain = _PLAIN.match(s)
    if not plain or not (plain.group(2) or plain.group(3)):
        return None
    sign, whole, decimals, denominator, unit = plain.groups()
    if unit and _NOT_A_UNIT.search(unit):
        return None
    value = Fraction((whole or "0").replace(",", "") + (decimals or ""))
    if denominator is not None:
        if int(denominator) == 0 or decimals:
            return None
        value /= int(denominator)
    return -value if sign == "-" else value


# ---------------------------------------------------------------- LaTeX equivalence (math-verify,
# out of process)


def _math_helper() -> Helper:
    # -I keeps rewards/ off sys.path (rewards/math.py would shadow the stdlib's math); the parent's
    # sys.path is handed over instead, so a math-verify installed in a user site or a venv path is
    # still found.
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [p for p in sys.path if p and os.path.isdir(p) and os.path.abspath(p) != here]
    env = dict(os.environ, GMTS_PARENT_SYS_PATH=json.dumps(paths))
    argv = [sys.executable, "-I", os.path.join(here, "_math_worker.py"),
            str(max(1, int(VERIFY_TIMEOUT_S) - 1))]
    return Helper(argv, env, "the math-verify helper")


class _Verifier:
    """math-verify in a pool of helper processes (rewards/_helpers.py), one per concurrent caller up
    to `max_workers`, so verdicts asked from several threads at once run side by side instead of
    queueing behind one slow answer. Thread-safe."""

    def __init__(self, max_workers: int = 8):
        self.lock, self.available = threading.Lock(), None
        self.pool = Pool(_math_helper, max_workers)

    def _check_installed(self) -> bool:
        with self.lock:
            if self.available is None:
                import importlib.util
                self.available = importlib.util.find_spec("math_verify") is not None
                if not self.available:
                    warnings.warn("math-verify is not installed (pip install math-verify==0.9.0): "
                                  "LaTeX answers are compared as normalised strings only, so equal "
                                  "values written differently (\\frac{1}{2} vs 0.5, intervals, "
                                  "matrices) will score 0.", stacklevel=4)
            return self.available

    def equal(self, gold: str, predicted: str) -> bool | None:
        """True/False, or None if math-verify is not installed or its helper cannot start. A
        comparison past VERIFY_TIMEOUT_S is False."""
        if not self._check_installed():
            return None
        line = json.dumps([f"\\boxed{{{gold}}}", f"\\boxed{{{predicted}}}"]) + "\n"
        try:
            return self.pool.ask(line, VERIFY_TIMEOUT_S) == "1"
        except (OSError, RuntimeError) as e:
            with self.lock:
                if self.available:
                    warnings.warn(f"the math-verify helper process failed to start; LaTeX answers "
                                  f"are compared as normalised strings from now on. Its error: {e}",
                                  stacklevel=3)
                self.available = False
            return None

    def _stop(self):
        self.pool.stop()


_verifier = _Verifier()
atexit.register(lambda: _verifier._stop())  # no orphaned helper when the trainer exits


def answers_equal(predicted: str, gold: str) -> bool:
    """Is `predicted` (an extracted final answer) the same as `gold`? Never raises."""
    try:
        if len(predicted) > MAX_ANSWER_CHARS:
            return predicted.strip() == gold.strip()
        p, g = normalize(predicted), normalize(gold)
        if p == g and p:
            return True
        if not p:
            return False
        p_num, g_num = to_number(p), to_number(g)
        if p_num is not None and g_num is not None:
            return p_num == g_num
        # math-verify normalises on its own
        verdict = _verifier.equal(gold.strip(), predicted.strip())
        return p.replace(" ", "") == g.replace(" ", "") if verdict is None else verdict
    except Exception:  # noqa: BLE001 - a reward must not crash training on a strange string
        return False


# ---------------------------------------------------------------- rewards


def gold_answer(reference) -> str:
    """GSM8K's answer field ends in '#### 72'; take what follows. A bare answer (str or number) is
    returned as is. Anything else, None included, or an empty answer is a data bug: ValueError (else
    `\\boxed{None}` scores)."""
    if isinstance(reference, bool) or not isinstance(reference, (str, int, float, Fraction)):
        raise ValueError(f"math reference must be a string or a number, got "  # noqa: TRY004
                         f"{type(reference).__name__}: {str(reference)[:200]!r}")
    text = str(reference)
    gold = text.rsplit("####", 1)[1].strip() if "####" in text else text.strip()
    if not gold:
        raise ValueError(f"math reference has no answer: {text[:200]!r}")
    return gold


def gsm8k_reward(completion: str, reference) -> float:
    if not isinstance(completion, str):
        return 0.0
    boxed = last_boxed(completion)
    predicted = boxed if boxed is not None else last_number(completion)
    return 1.0 if predicted is not None and answers_equal(predicted,
                                                          gold_answer(reference)) else 0.0


def math_reward(completion: str, reference) -> float:
    if not isinstance(completion, str):
        return 0.0
    boxed = last_boxed(completion)
    return 1.0 if boxed is not None and answers_equal(boxed, gold_answer(reference)) else 0.0


def has_boxed(completion: str) -> bool:
    return isinstance(completion, str) and last_boxed(completion) is not None
