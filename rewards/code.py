"""Code reward: the completion's last Python code block must pass the problem's tests in the
sandbox.

The reference (Problem.answer for code problems) is one of:
- a dict {"tests": str, "entry_point": str | None, "setup": str}: MBPP (asserts; setup =
  test_setup_code), HumanEval (`def check(candidate)` plus entry_point) and KodCode (`from solution
  import f` and pytest-style `test_*` functions with @pytest.mark.parametrize).
- a dict {"cases": [{"input": str, "output": str}, ...]}: stdin/stdout programs (LiveCodeBench,
  Codeforces).
- a str (= {"tests": str}) or a list of assert strings (joined with newlines).
Optional keys "timeout" (per stdin/stdout case) and "memory_mb" override the defaults per problem
(every time limit times GMTS_CODE_TIME_SCALE, for a slower machine: time_scale);
"float_tolerance" (stdin/stdout) lets numeric tokens differ by that much, absolute or relative, and
"case_insensitive" lets them differ in case; "cases" may be a JSON string. "prompt" (HumanEval):
the judged program is the prompt followed by the answer, as HumanEval's harness runs it.

The sandbox only computes; this process judges (rewards/testplan.py). Test cases that cannot be
judged here run inside the sandbox as before: such a verdict is untrusted, counted in code_stats(),
and refused (0.0, not run) with trusted_only=True.
"""
import ast
import builtins
import functools
import math
import os
import re
import threading

from .sandbox import free_names, run_python

_LANGUAGES = ("python",)
_PYTHON = re.compile(r"(?:i?python|py)(?:\d+(?:\.\d+)*)?")  # python3, py3, python3.11, ipython
MAX_HELPERS = 64  # definitions taken from earlier blocks
_BUILTINS = frozenset(dir(builtins))
MAX_USAGE = 64  # trailing statements looked at for a usage example
MAX_EXTENSIONS = 8  # later closing fences tried when a block, cut at its first one, is not Python


def _fence(line: str):
    """(indent, fence length, info, fence char) if `line` opens or closes a fence (CommonMark: at
    least three backticks, with no backtick in the info string, or three tildes), else None. Linear
    in the line."""
    stripped = line.lstrip(" ")
    char = stripped[:1]
    if char not in ("`", "~"):
        return None
    ticks = len(stripped) - len(stripped.lstrip(char))
    if ticks < 3:
        return None
    info = stripped[ticks:].strip()
    if char == "`" and "`" in info:
        return None
    return len(line) - len(stripped), ticks, info, char


def _language(info: str) -> str:
    """The info string's language: `python`, `python:solution.py`, `python title="a.py"`,
    `{.python}`, `py3`, `python3.11`, `ipython` are all python."""
    word = info.split()[0].lower() if info else ""
    word = word.strip("{}.").split(":")[0]
    return "python" if _PYTHON.fullmatch(word) else word


def _blocks(lines: list[str]):
    """Fenced code blocks as (language, first line, end line, indent, fence length, fence char); an
    unclosed one is left out. One pass over the lines. A closing fence is of the opening's char, at
    least as long, has nothing after it and is indented at most 3 columns more (a docstring's
    indented fence does not close the block)."""
    i, n = 0, len(lines)
    while i < n:
        opening = _fence(lines[i])
        if opening is None:
            i += 1
            continue
        indent, ticks, info, char = opening
        end = i + 1
        while end < n:
            closing = _fence(lines[end])
            if (closing and closing[3] == char and closing[1] >= ticks and not closing[2]
                    and closing[0] <= indent + 3):
                break
            end += 1
        if end == n:
            return  # unclosed: cut off by the length limit
        yield _language(info), i + 1, end, indent, ticks, char
        i = end + 1


def _dedent(lines: list[str], indent: int) -> str:
    """The block's lines without the opening fence's indentation (code inside a list item)."""
    if indent:
        lines = [line[min(indent, len(line) - len(line.lstrip(" "))):] for line in lines]
    return "".join(line + "\n" for line in lines)


def _parses(source: str) -> bool:
    try:
        compile(source, "<solution>", "exec", ast.PyCF_ONLY_AST)
        return True
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False


def _defined(code: str) -> set:
    """The functions and classes the block defines at its top level."""
    try:
        body = ast.parse(code).body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return set()
    return {s.name for s in body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                   ast.ClassDef))}


def _code_of(lines: list[str], block) -> str:
    """A block's code; one that is not Python when cut at its first closing fence (a fence line
    inside a string literal) is extended to the first later fence line (up to MAX_EXTENSIONS) that
    makes it Python."""
    _, first, end, indent, ticks, char = block
    code = _dedent(lines[first:end], indent)
    if not _parses(code):
        tried, later = 0, end + 1
        while later < len(lines) and tried < MAX_EXTENSIONS:
            fence = _fence(lines[later])
            if fence and fence[3] == char and fence[1] >= ticks and not fence[2]:
                tried += 1
                longer = _dedent(lines[first:later], indent)
                if _parses(longer):
                    return longer
            later += 1
    return code


def extract_code(completion: str, names=frozenset()) -> str | None:
    """The solution's block: the last ```python (or ```py / ```python3, ```python:solution.py,
    ~~~python) block that defines one of `names` (what the tests call), else the last that defines
    a function or class other than a test, else the last such block; if the answer has no labelled
    block, the same among the unlabelled ones. So a usage example, a REPL session or the answer's
    own tests after the solution are not what is judged. An unclosed block (cut off by the length
    limit) does not count; an indented block (inside a list item) is dedented. names=None: the
    answer is a program (stdin/stdout), the last block."""
    lines = completion.split("\n")
    labelled, unlabelled = [], []
    for block in _blocks(lines):
        if block[0] in _LANGUAGES:
            labelled.append(block)
        elif block[0] == "":
            unlabelled.append(block)
    chosen = labelled or unlabelled
    if not chosen:
        return None
    if names is None:  # a stdin/stdout program: a script, the last block
        code = _code_of(lines, chosen[-1])
        return code if code.strip() else None
    codes = [_code_of(lines, block) for block in chosen]
    defined = [_defined(c) for c in codes]
    best = next((i for i in reversed(range(len(codes))) if defined[i] & names), None)
    if best is None:
        best = next((i for i in reversed(range(len(codes)))
                     if any(not n.startswith(("test", "Test")) for n in defined[i])), -1)
    code = _with_earlier_helpers(codes[best], codes[:best % len(codes)])
    return code if code.strip() else None


def _with_earlier_helpers(code: str, earlier: list[str]) -> str:
    """The chosen block, after the definitions and imports of earlier blocks that it (or what is
    taken) reads and does not bind: an answer written in parts ("first a helper: ..., then: ...")
    is one program. The latest definition of a name wins; nothing is taken when nothing is
    missing."""
    try:
        missing = free_names(ast.parse(code)) - _BUILTINS
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return code
    if not missing or not earlier:
        return code
    found = {}  # name -> (block index, statement index, source)
    for i, text in enumerate(earlier):
        try:
            body = ast.parse(text).body
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            continue
        for j, stmt in enumerate(body):
            for name in _binds(stmt):
                found[name] = (i, j, ast.get_source_segment(text, stmt), stmt)
    taken, todo = {}, list(missing)
    while todo and len(taken) < MAX_HELPERS:
        name = todo.pop()
        if name in found and found[name][:2] not in taken:
            i, j, source, stmt = found[name]
            taken[(i, j)] = source
            todo += list(free_names(ast.Module(body=[stmt], type_ignores=[])) - _BUILTINS)
    if not taken:
        return code
    return "\n\n".join([taken[k] for k in sorted(taken) if taken[k]] + [code])


def _binds(stmt) -> list:
    """The names a top-level definition or import binds (assignments of constants too)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*"]
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return [t.id for t in targets if isinstance(t, ast.Name)]
    return []


def _without_usage(code: str, names=frozenset()) -> str:
    """The solution without the usage example after its last definition: trailing top-level
    `print(...)` calls, asserts, an `if __name__ == "__main__":` block, and statements that use the
    solution's functions or read stdin (`result = add(2, 3)`, `main()`, `n = int(input())`, a
    `for` loop over examples) binding nothing its definitions or the tests (`names`) read: what a
    plain `import solution` would run but the tests do not ask for (it may read stdin or fail on
    its own example)."""
    try:
        body = ast.parse(code).body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return code
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    defined = {s.name for s in body if isinstance(s, kinds)}
    read = set(names).union(*(free_names(s) for s in body if isinstance(s, kinds)))
    cut = len(body)
    for start in range(len(body) - 1, max(-1, len(body) - MAX_USAGE - 1), -1):
        known = set(defined)  # the solution's names and those the example bound before
        for stmt in body[start:]:
            if not (_usage(stmt, defined) or _example(stmt, known, read)):
                break
            known |= {n.id for n in ast.walk(stmt)
                      if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        else:
            cut = start
    if cut == len(body) or not any(s.name in defined for s in body[:cut] if hasattr(s, "name")):
        return code
    return "\n".join(code.split("\n")[:body[cut].lineno - 1]) + "\n"


def _usage(stmt, defined: set) -> bool:
    """A statement of a usage example (`defined`: the solution's own names)."""
    if isinstance(stmt, ast.If):  # if __name__ == "__main__":
        test = stmt.test
        return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
                and test.left.id == "__name__")
    if isinstance(stmt, ast.Assert):
        return True
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        return isinstance(func, ast.Name) and func.id == "print"
    return False


def _example(stmt, known: set, read: set) -> bool:
    """A statement of a usage example that is not a print: it uses a function or class of the
    solution's, a name the example bound before (`known`) or `input`, and binds no name that the
    solution's definitions or the tests read (`TABLE = build()` that `f` reads stays)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import,
                         ast.ImportFrom, ast.Global, ast.Nonlocal)):
        return False
    loads, stores = set(), set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name):
            (stores if isinstance(node.ctx, ast.Store) else loads).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stores.add(node.name)
    return bool(loads & (known | {"input"})) and not stores & read


def _as_spec(reference) -> dict:
    if isinstance(reference, str):
        return {"tests": reference}
    if isinstance(reference, (list, tuple)) and all(isinstance(t, str) for t in reference):
        return {"tests": "\n".join(reference)}
    if isinstance(reference, dict) and isinstance(reference.get("cases"), str):
        import json  # LiveCodeBench's export: the cases as a JSON string
        try:
            reference = dict(reference, cases=json.loads(reference["cases"]))
        except ValueError as e:
            raise ValueError(f"code reference: cases is a string that is not JSON ({e})") from None
    if isinstance(reference, dict) and reference.get("cases") is not None:
        cases = reference["cases"]
        if not isinstance(cases, list) or not all(
                isinstance(c, dict) and isinstance(c.get("input"), str)
                and isinstance(c.get("output"), str) for c in cases):
            raise ValueError(f"code reference: cases must be a list of {{'input': str, "
                             f"'output': str}}, got {str(cases)[:200]!r}")
        return reference
    if isinstance(reference, dict) and reference.get("tests"):
        return reference
    raise ValueError(f"code reference must be a tests string, a list of asserts, or a dict with "
                     f"'tests' or 'cases'; got {type(reference).__name__}: "
                     f"{str(reference)[:200]!r}")


_STATS_KEYS = ("runs", "trusted_runs", "untrusted_runs", "refused_runs", "unjudged_runs",
               "cases_trusted",
               "cases_untrusted")
_stats = dict.fromkeys(_STATS_KEYS, 0)
_stats_lock = threading.Lock()


def code_stats(reset: bool = False) -> dict:
    """Counts since start (or the last reset) over code rewards: runs judged wholly by the trainer
    (trusted_runs), runs whose verdict came partly from tests inside the sandbox (untrusted_runs),
    runs refused by trusted_only, runs scored 0 unrun because their tests hold nothing (or a part)
    that can be judged or run (unjudged_runs: a `check` without entry point, no test case at all),
    and the test cases behind them. Which memory limit holds per run:
    rewards.sandbox.memory_limit()."""
    with _stats_lock:
        out = dict(_stats)
        if reset:
            _stats.update(dict.fromkeys(_STATS_KEYS, 0))
    return out


def _count(result):
    with _stats_lock:
        _stats["runs"] += 1
        key = ("unjudged_runs" if result.unjudged else "refused_runs" if result.refused
               else "trusted_runs" if result.trusted else "untrusted_runs")
        _stats[key] += 1
        _stats["cases_trusted"] += result.cases_trusted
        _stats["cases_untrusted"] += result.cases_untrusted


_sandbox_checked = False


def check_sandbox():
    """Run a trivially correct program once. If even that fails, the machine cannot run the sandbox
    (e.g. the interpreter is unreadable for the sandbox's uid) and every code reward would silently
    be 0: raise instead."""
    global _sandbox_checked
    if not _sandbox_checked:
        result = run_python("x = 1", tests="assert x == 1", timeout=30)
        if not result.passed:
            raise RuntimeError(f"the code sandbox cannot run even a correct program on this "
                               f"machine (returncode {result.returncode}): "
                               f"{result.stderr[-1000:]}")
        _sandbox_checked = True


DEFAULT_TIMEOUT_S = 10.0  # a run's wall clock (stdin/stdout: a case's) when the row sets none


def code_reward(completion: str, reference, *, timeout: float = DEFAULT_TIMEOUT_S,
                memory_mb: int = 2048,
                trusted_only: bool = False) -> float:
    """1.0 if the last code block passes every test within the limits, else 0.0. Never raises on a
    completion; a malformed reference (a data bug) raises ValueError, a sandbox that cannot work
    here RuntimeError. trusted_only=True: 0.0 without running when any test case could only be
    judged inside the sandbox."""
    spec = _as_spec(reference)
    check_sandbox()
    if not isinstance(completion, str):
        return 0.0
    tests = spec.get("tests") or ""
    if isinstance(tests, (list, tuple)):
        tests = "\n".join(tests)
    code = extract_code(completion, None if spec.get("cases") is not None
                        else _called(tests, spec.get("entry_point")))
    if code is None:
        return 0.0
    setup = spec.get("setup") or ""
    if spec.get("cases") is None:
        code = _program(spec.get("prompt"),
                        _without_usage(code, _called(tests, spec.get("entry_point"))))
        setup = _prompt_helpers(spec.get("prompt"), spec.get("entry_point"), setup)
    try:
        result = run_python(code, tests=tests, entry_point=spec.get("entry_point"),
                            setup=setup,
                            cases=spec.get("cases"),
                            timeout=float(spec.get("timeout", timeout)) * time_scale(),
                            memory_mb=int(spec.get("memory_mb", memory_mb)),
                            trusted_only=trusted_only,
                            float_tolerance=spec.get("float_tolerance"),
                            case_insensitive=bool(spec.get("case_insensitive")))
    # e.g. lone surrogates in the completion cannot be written out
    except (OSError, UnicodeEncodeError):
        return 0.0
    _count(result)
    return 1.0 if result.passed else 0.0


def time_scale() -> float:
    """GMTS_CODE_TIME_SCALE (default 1): how many times slower this machine runs the answers than
    the one the limits were set for (a suite's judge, the machine a row's timeout was measured on).
    Every time limit of the code reward, the default and each row's, is multiplied by it."""
    raw = os.environ.get("GMTS_CODE_TIME_SCALE", "").strip()
    try:
        value = float(raw) if raw else 1.0
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"GMTS_CODE_TIME_SCALE must be a positive number (how many times slower "
                         f"this machine is than the limits assume), got {raw!r}")
    return value


@functools.lru_cache(maxsize=4096)
def _called(tests: str, entry_point) -> frozenset:
    """The names the tests read from the solution (and the entry point)."""
    try:
        names = free_names(ast.parse(tests)) if tests else set()
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        names = set()
    return frozenset(names | ({entry_point} if isinstance(entry_point, str) else set()))


def _program(prompt, code: str) -> str:
    """HumanEval's program: the prompt, then the completion (its helpers, `poly`, `encode_cyclic`,
    and imports are there); an answer that restates the function replaces the prompt's, one that
    is only the body continues it. Without a prompt, the code alone."""
    if not isinstance(prompt, str) or not prompt.strip():
        return code
    first = next((line for line in code.split("\n") if line.strip()), "")
    if first[:1] in (" ", "\t"):  # the body only
        joined = prompt + code
    else:
        joined = prompt.rstrip("\n") + "\n    pass\n\n\n" + code
    return joined if _parses(joined) else code


def _prompt_helpers(prompt, entry_point, setup: str) -> str:
    """The setup, then the prompt's own definitions but the entry point (HumanEval/32's `poly`,
    /38's `encode_cyclic`) and its imports, run again after the answer: the tests call them on the
    expected side, and an answer that redefines them (`def poly(*a): return 0`) changes nothing
    there. The answer's own calls of them meet the prompt's too."""
    if not isinstance(prompt, str) or not prompt.strip():
        return setup
    try:
        body = ast.parse(prompt).body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return setup
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
    helpers = [ast.get_source_segment(prompt, s) for s in body
               if isinstance(s, kinds) and getattr(s, "name", None) != entry_point]
    helpers = [h for h in helpers if h]
    return "\n\n".join([setup] + helpers if setup.strip() else helpers)


def has_code_block(completion: str) -> bool:
    return isinstance(completion, str) and extract_code(completion) is not None
