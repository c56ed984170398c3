"""Problems for training and evaluation: `load_problems(source, split)` -> list[Problem].

source: a built-in name (BUILTIN_SOURCES; see data/builtin.py for origins, data/arithmetic.py for
the offline task), a path to a local .jsonl / .json (optionally .gz) / .parquet file, or a data set
read with `datasets` (optional): hf:ORG/NAME[:CONFIG] from the hub, or a folder (save_to_disk, or
laid out like a hub repository). Data sets take `split` and the same field options as local files.

Local files: one problem per row. The question comes from `question_field` (default: the first of
question, problem, prompt, input; or a format over the row's fields, e.g. "{Body} {Question}"), the
reference from `answer_field` (default: answer, final_answer, target, output; for code rows: tests
/ test, with entry_point, or cases; MBPP's own rows by their test_list, as the built-in loader). A
row may set "domain" (math | code | choice), "reward" (gsm8k | math | choice | code), "choices" (a
list; the answer is then a letter, an index or the choice's text), "id" and "starter_code". Without
a domain a row is math with the gsm8k reward (last \\boxed{}, else last number). The `reward=` and
`domain=` options override every row. `split` is ignored for local files. Every problem keeps its
row's other fields in `Problem.fields` (the question as "question", the answer column left out):
what a custom reward (`--reward file.py:fn`, rewards/) is called with. A code row is checked whole
when loaded: a field it would not be judged by (both tests and cases, float_tolerance on tests, a
misspelt "entrypoint") or tests that hold no test fail with one line naming the file and row. A
public suite's own limits (Codeforces' time_limit / memory_limit, CodeContests' memory_limit_bytes)
are read in its units; evalplus' raw rows are judged as evalplus does (data/evalplus.py).

limit: the first `limit` problems in file order (no shuffling here: shuffle in the trainer, with its
seed). seed: only the arithmetic task uses it.
"""
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from . import arithmetic, builtin, evalplus, templates
from .decontam import decontamination_report, format_report
from .files import data_dir, fetch, is_dataset_source, read_dataset, read_records

BUILTIN_SOURCES = tuple(builtin.CONVERTERS) + ("arithmetic",)
DOMAINS = {"math": "gsm8k", "code": "code", "choice": "choice"}  # domain -> its default reward
LETTERS = "ABCDEFGHIJ"
ANSWER_FIELDS = ("answer", "final_answer", "target", "output")  # a local row's answer, first found


@dataclass
class Problem:
    id: str  # stable id, e.g. "gsm8k/test/17"
    question: str  # raw question text (with the lettered choices for multiple choice)
    # reference for the reward fn: str (math/gsm8k/arithmetic), letter (choice), tests (code)
    answer: Any
    domain: str  # "math" | "code" | "choice"
    reward: str  # name for rewards.get_reward: "gsm8k" | "math" | "choice" | "code"
    # chat messages (system + user) per the template
    messages: list[dict] = field(default_factory=list)
    prompt: str = ""  # plain-text prompt for tokenizers without a chat template
    fields: dict = field(default_factory=dict)  # the row's other fields + "question": **fields


def render_prompt(problem: Problem, tokenizer) -> str:
    """The text to feed the model: the tokenizer's chat template with the generation prompt when it
    has one, else the plain prompt."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(problem.messages, tokenize=False,
                                             add_generation_prompt=True)
    return problem.prompt


def prompt_token_ids(problems, tokenizer, max_tokens=None):
    """(kept problems, their prompt ids): each problem rendered with render_prompt and tokenized;
    problems whose prompt is longer than `max_tokens` are left out (the caller reports how many)."""
    from gmts.run.progress import Progress
    kept, ids, chunk = [], [], 1024      # one tokenizer call per chunk: its batch runs in parallel
    # a bar on stderr for a large set (200k rows take minutes on 2 cores), gone when done
    bar = Progress(total=len(problems), desc="tokenizing prompts", unit="prompt", leave=False,
                   mininterval=1.0, disable=len(problems) < 20 * chunk)
    for start in range(0, len(problems), chunk):
        part = problems[start:start + chunk]
        texts = [render_prompt(problem, tokenizer) for problem in part]
        for problem, tokens in zip(part, tokenizer(texts, add_special_tokens=False)["input_ids"]):
            if max_tokens is None or len(tokens) <= max_tokens:
                kept.append(problem)
                ids.append(tokens)
        bar.update(len(part))
    bar.close()
    return kept, ids


def load_prompts_for_cli(source, split, tokenizer, *, max_prompt_tokens=None, question_field="",
                         answer_field="", template="", task_options="", **options):
    """What train.py and `python -m gmts.analyze` do with their data flags: load_problems, then
    prompt_token_ids. Returns (problems, prompt ids, how many were skipped as too long); a problem
    with the data is a one-line SystemExit naming --data."""
    import json
    try:
        problems = load_problems(source, split, question_field=question_field or None,
                                 answer_field=answer_field or None, template=template or None,
                                 **options, **(json.loads(task_options) if task_options else {}))
    except OptionError as err:
        raise SystemExit(f"error: --task-options {task_options}: {err}") from None
    except (FileNotFoundError, ValueError, KeyError, ImportError) as err:
        raise SystemExit(f"error: --data {source!r}: {err}") from None
    kept, ids = prompt_token_ids(problems, tokenizer, max_prompt_tokens)
    if not kept:
        raise SystemExit(f"error: --data {source!r}: no problem fits --max-prompt-tokens "
                         f"{max_prompt_tokens}")
    return kept, ids, len(problems) - len(kept)


class OptionError(ValueError):
    """A bad task option (--task-options on the command line), apart from problems with the data
    itself."""


def check_options(fn, options: dict, what: str, skip=("split", "seed")) -> None:
    """Each option's name and type against `fn`'s signature (e.g. arithmetic.generate's `digits: int
    | None`), so '{"digits": "two"}' is a one-line ValueError naming the option, not a TypeError
    deep in the generator."""
    import inspect
    import types
    import typing
    params = {name: p for name, p in inspect.signature(fn).parameters.items() if name not in skip}
    hints = typing.get_type_hints(fn)
    for name, value in options.items():
        if name not in params:
            raise OptionError(f"{what} has no option {name!r} (it takes {', '.join(params)})")
        hint = hints.get(name)
        allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        if value is None and type(None) in allowed:
            continue
        kinds = [k for k in allowed if k is not type(None)]
        ok = any(isinstance(value, k) and not (k is int and isinstance(value, bool)) for k in kinds)
        if not ok:
            names = " or ".join(
                {int: "an integer", str: "a string", float: "a number"}.get(k, k.__name__)
                                for k in kinds)
            raise OptionError(f"{what} option {name!r} must be {names}, got {value!r}")


def _choice_letter(answer, choices: list, where: str) -> str:
    text = str(answer).strip()
    if isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < len(choices):
        return LETTERS[answer]
    if len(text.strip("()")) == 1 and text.strip("()").upper() in LETTERS[:len(choices)]:
        return text.strip("()").upper()
    matches = [i for i, c in enumerate(choices) if str(c).strip().lower() == text.lower()]
    if len(matches) == 1:
        return LETTERS[matches[0]]
    raise ValueError(f"{where}: answer {answer!r} is not a letter, an index or the text of one of "
                     "the choices")


def _first(row: dict, names, where: str, what: str, option: str):
    for name in names:
        if name in row and row[name] is not None:
            return row[name]
    nulls = [name for name in names if name in row]
    # the field is there, empty: say so, not "no field"
    if nulls:
        raise ValueError(f"{where}: the {what} field {nulls[0]!r} is null")
    raise ValueError(f"{where}: no {what} field (tried {', '.join(names)}; fields: {sorted(row)}); "
                     f"pass {option}=<field name>")


def _text(value, where: str, what: str, numbers: bool = False):
    """A question (or a math answer) as text. A list or an object is refused rather than trained on
    as its Python repr ("['Say', '1']"); numbers pass where they are a natural answer (GSM8K-style
    "answer": 42)."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: the {what} is {value} (JSON's NaN or Infinity, what json.dumps "
                         "writes for a missing pandas value); give it a value or leave the row out")
    if numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"{where}: the {what} must be a string{' or a number' if numbers else ''}, "
                     f"got {type(value).__name__} {_short(value)}")


def _short(value, n=60):
    text = repr(value)
    return text if len(text) <= n else text[:n] + "..."


def _format_fields(fmt: str, row: dict, where: str) -> str:
    """question_field = "{Body} {Question}": str.format over the row's fields (each a plain name; {{
    }} for braces)."""
    import string
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(fmt) if name is not None]
    except ValueError as e:
        raise ValueError(f"question_field {fmt!r} is not a valid format ({e}); write fields as "
                         "{name}") from None
    for name in names:
        if not name.isidentifier() and name not in row:
            raise ValueError(f"question_field {fmt!r}: {{{name}}} is not a plain field name; write "
                             "fields as {name}")
        if name in row and row[name] is None:
            raise ValueError(f"{where}: the field {name!r} of question_field {fmt!r} is null")
        if name not in row:
            raise ValueError(f"{where}: no field {name!r} for question_field {fmt!r} (fields: "
                             f"{sorted(row)})")
    return fmt.format_map(
        {name: _text(row[name], where, f"field {name!r}", numbers=True) for name in names})


def _local_row(row, where, question_field, answer_field, domain, reward):
    # evalplus' own rows (HumanEval+: base_input, plus_input, canonical_solution): judged as
    # evalplus judges them, by the canonical solution's values (data/evalplus.py)
    plus_row = evalplus.is_evalplus_row(row) and not answer_field
    mbpp_row = "test_list" in row and not plus_row and not any(
        k in row for k in ("tests", "test", "cases"))
    domain = domain or row.get("domain") or ("code" if plus_row or mbpp_row or any(
        k in row for k in ("tests", "test", "cases")) else "choice" if "choices" in row else "math")
    if domain not in DOMAINS:
        raise ValueError(f"{where}: domain must be one of {sorted(DOMAINS)}, got {domain!r}")
    # a format over the row's fields, e.g. "{Body} {Question}"
    if question_field and "{" in question_field:
        question = _format_fields(question_field, row, where)
    elif mbpp_row and domain == "code" and not answer_field:
        # MBPP's own rows (the original's text / sanitized's prompt): shown and judged as the
        # built-in loader does (builtin.mbpp), sanitized's test_imports as the setup
        question = _field_text(row, question_field, ["text", "prompt"], where)
        converted = builtin.mbpp(dict(row, text=question, test_setup_code="\n".join(
            filter(None, [row.get("test_setup_code")] + list(row.get("test_imports") or [])))),
            where)
        question = converted["question"]
    else:
        question = _field_text(row, question_field, ["question", "problem", "prompt", "input"],
                               where)
    if plus_row and domain == "code":
        from gmts.rewards.code import DEFAULT_TIMEOUT_S
        judged = evalplus.reference(row, where, DEFAULT_TIMEOUT_S)
        answer = _code_reference(dict(row, prompt=judged.get("prompt")), judged["tests"], where)
        if "timeout" in judged and "timeout" not in answer:
            answer["timeout"] = judged["timeout"]
    elif mbpp_row and domain == "code" and not answer_field:
        answer = _code_reference(dict(row, setup=converted["answer"]["setup"]),
                                 converted["answer"]["tests"], where)
    elif domain == "code":
        keys = [answer_field] if answer_field else list(CODE_REFERENCES)
        given = [k for k in keys if row.get(k) is not None]
        if len(given) > 1:  # one would be judged, the other dropped unread
            raise ValueError(f"{where}: the row has both {given[0]!r} and {given[1]!r}, and one "
                             f"reference is judged ({CODE_REFERENCES[given[0]]} or "
                             f"{CODE_REFERENCES[given[1]]}, not both): keep one, or pass "
                             "answer_field=<field name>")
        tests = _first(row, keys, where, "tests", "answer_field")
        # a field named by answer_field holding stdin/stdout cases is read as cases: a list of
        # {"input", "output"} (CodeContests' public_tests as a list; LiveCodeBench's
        # public_test_cases, a JSON string of it), {"input": [...], "output": [...]}
        # (CodeContests through datasets), {"inputs": [...], "outputs": [...]} (APPS / TACO's
        # input_output, a JSON string)
        if isinstance(tests, str) and tests.lstrip()[:1] in ("[", "{"):
            try:
                parsed = json.loads(tests)
            except ValueError:
                parsed = None
            tests = parsed if _as_cases(parsed) else tests
        elif isinstance(tests, str) and _PACKED.fullmatch(tests):
            tests = _unpacked_cases(tests, where)
        stdin = next(k for k in keys if row.get(k) is not None) == "cases" or _as_cases(tests)
        if not stdin and not (isinstance(tests, str) or isinstance(tests, list)
                and all(isinstance(t, str) for t in tests)):
            raise ValueError(f"{where}: the tests must be a string or a list of strings, got "
                             f"{_short(tests)}")
        answer = _code_reference(row, tests, where, str(question), stdin)
    else:
        answer = _first(row, [answer_field] if answer_field else list(ANSWER_FIELDS),
                        where, "answer", "answer_field")
    if row.get("starter_code") is not None and not isinstance(row["starter_code"], str):
        raise ValueError(f"{where}: starter_code must be a string, got "
                         f"{_short(row['starter_code'])}")
    out = {"question": str(question), "answer": answer, "domain": domain,
               "reward": reward or row.get("reward") or
               DOMAINS[domain], "starter_code": row.get("starter_code"), "id": row.get("id"),
               "fields": _fields(row, question, answer_field or next(
                   (k for k in ANSWER_FIELDS if row.get(k) is not None), None))}
    if domain == "choice":
        if "choices" in row:
            if not isinstance(row["choices"], list) or not row["choices"] or not all(
                    isinstance(c, (str, int, float)) and
                    not isinstance(c, bool) for c in row["choices"]):
                raise ValueError(f"{where}: choices must be a non-empty list of strings, got "
                                 f"{_short(row['choices'])}")
            if len(row["choices"]) > len(LETTERS):
                raise ValueError(f"{where}: {len(row['choices'])} choices, at most {len(LETTERS)} "
                                 "(A-J) are supported")
            out["choices"] = list(row["choices"])
            out["answer"] = _choice_letter(answer, out["choices"], where)
        else:  # the question already lists its options
            out["answer"] = _choice_letter(answer, list(LETTERS), where)
    elif domain == "math":
        out["answer"] = _text(answer, where, "answer", numbers=True).strip()
    return out


CODE_LIMITS = {"float_tolerance": float, "timeout": float, "memory_mb": int}  # a row's own
# a code row's reference fields, first found judged (what each one is)
CODE_REFERENCES = {"tests": "tests", "test": "tests", "cases": "stdin/stdout cases"}
# fields that only one kind of reference reads: refused on the other, never dropped unread
CASES_ONLY = ("float_tolerance", "case_insensitive")
TESTS_ONLY = ("entry_point", "setup")
# past these a limit is a unit slip (milliseconds read as seconds, bytes as MB), not a limit
LIMIT_BOUNDS = {"timeout": 3600.0, "memory_mb": float(1 << 20)}
LIMIT_UNITS = {"timeout": "seconds", "memory_mb": "MB"}
# a public suite's own limit fields -> the quantity they set (Codeforces / TACO: time_limit,
# memory_limit; CodeContests: time_limit {seconds, nanos}, memory_limit_bytes)
SUITE_LIMITS = {"time_limit": "timeout", "memory_limit": "memory_mb",
                "memory_limit_bytes": "memory_mb", "time-limit": "timeout",
                "memory-limit": "memory_mb"}  # the last two: Codeforces-Python-Submissions
# no judge sets a test past a minute: a bare 2000 is milliseconds, not seconds
SUITE_BOUNDS = {"timeout": 60.0}
# a unit written after the number ("2 seconds", "256 megabytes", "1000 ms"), in seconds or MB (a
# suite's "megabyte" is 2**20 bytes, as memory_mb's); a bare number is in seconds or MB
TIME_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
              "ms": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3}
MEMORY_UNITS = {"": 1.0, "mb": 1.0, "mib": 1.0, "megabyte": 1.0, "megabytes": 1.0,
                "kb": 2.0 ** -10, "kib": 2.0 ** -10, "kilobyte": 2.0 ** -10,
                "kilobytes": 2.0 ** -10, "gb": 1024.0, "gib": 1024.0, "gigabyte": 1024.0,
                "gigabytes": 1024.0}
CODE_FIELDS = (*CODE_REFERENCES, *CODE_LIMITS, *SUITE_LIMITS, *CASES_ONLY, *TESTS_ONLY,
               "prompt", "starter_code", "domain", "reward", "choices", "id")


# a statement that accepts "Yes"/"YES"/"yes" alike (Codeforces: "You can output the answer in any
# case")
ANY_CASE = re.compile(r"\bin any (?:letter )?case\b|\bcase[- ]insensitive|\bany register\b",
                      re.IGNORECASE)


# LiveCodeBench's private_test_cases: base64 of zlib of a pickled JSON string of the cases (no
# Python test is one unbroken run of base64 characters)
_PACKED = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}")
PACKED_MAX_BYTES = 1 << 30      # what the cases may inflate to


def _unpacked_cases(text: str, where: str) -> list:
    """LiveCodeBench's private_test_cases as its own loader reads them
    (json.loads(pickle.loads(zlib.decompress(base64.b64decode(text))))), with two bounds: the
    pickle may only hold plain values (an unpickler that loads no class or function: nothing of
    the file runs), and the inflated bytes are at most PACKED_MAX_BYTES."""
    import base64
    import binascii
    import io
    import pickle
    import zlib

    class PlainValues(pickle.Unpickler):
        def find_class(self, module, name):
            raise pickle.UnpicklingError(f"it names {module}.{name}, which is not a plain value")

    try:
        inflate = zlib.decompressobj()
        packed = inflate.decompress(base64.b64decode(text, validate=True), PACKED_MAX_BYTES)
        if inflate.unconsumed_tail:
            raise ValueError(f"it inflates past {PACKED_MAX_BYTES:,} bytes")
        cases = PlainValues(io.BytesIO(packed)).load()
        cases = json.loads(cases) if isinstance(cases, (str, bytes)) else cases
    except (ValueError, binascii.Error, zlib.error, pickle.UnpicklingError, EOFError,
            TypeError) as e:
        raise ValueError(f"{where}: the tests look like LiveCodeBench's packed private_test_cases "
                         f"(base64 of zlib of a pickle) but do not unpack to cases: {e}") from None
    if not _as_cases(cases):
        raise ValueError(f"{where}: LiveCodeBench's packed private_test_cases unpack to "
                         f"{_short(cases)}, not a list of {{input, output}} cases")
    return cases


def _as_cases(value) -> bool:
    """Is `value` stdin/stdout cases in one of the suites' shapes (see _code_reference)?"""
    if isinstance(value, list):
        return bool(value) and all(isinstance(v, dict) for v in value)
    return isinstance(value, dict) and (set(value) == {"input", "output"}
                                        or {"inputs", "outputs"} <= set(value))


def _field_text(row, question_field, names, where) -> str:
    return _text(_first(row, [question_field] if question_field else names, where, "question",
                        "question_field"), where, "question")


def _code_reference(row: dict, tests, where: str, question: str = "",
                    stdin: bool = False) -> dict:
    """A code row's reference for rewards.code, checked whole here (a bad row fails at loading with
    one line, never at scoring): tests (+ entry_point, setup, HumanEval's prompt) or stdin/stdout
    cases (a list of {"input", "output"}, or that list as a JSON string: LiveCodeBench's export;
    case_insensitive where the row or its statement says so), and the row's own float_tolerance,
    timeout (seconds) and memory_mb."""
    import json
    if stdin:
        cases = tests
        if isinstance(cases, str):
            try:
                cases = json.loads(cases)
            except ValueError as e:
                raise ValueError(f"{where}: cases is a string that is not JSON ({e})") from None
        if isinstance(cases, dict) and cases.get("fn_name"):
            raise ValueError(f"{where}: cases with fn_name {_short(cases['fn_name'])} call a "
                             "function (APPS / TACO call-based), not stdin/stdout: give them as "
                             "tests")
        if isinstance(cases, dict) and (set(cases) == {"input", "output"} or set(cases) == {
                "inputs", "outputs"}) and all(isinstance(v, list) for v in cases.values()):
            # CodeContests' public_tests / private_tests: {"input": [...], "output": [...]};
            # APPS / TACO's input_output: {"inputs": [...], "outputs": [...]}, an output
            # sometimes a list of its lines
            ins, outs = (cases["input"], cases["output"]) if "input" in cases else (
                cases["inputs"], [o if not isinstance(o, list) or not all(
                    isinstance(x, str) for x in o) else "\n".join(o) for o in cases["outputs"]])
            if len(ins) != len(outs):
                raise ValueError(f"{where}: cases hold {len(ins)} inputs and {len(outs)} "
                                 "outputs: each input needs its output")
            cases = [{"input": i, "output": o} for i, o in zip(ins, outs)]
        if not isinstance(cases, list) or not all(
                isinstance(c, dict) and isinstance(c.get("input"), str)
                and isinstance(c.get("output"), str) for c in cases):
            raise ValueError(f"{where}: cases must be a list of {{\"input\": str, \"output\": "
                             f"str}}, got {_short(cases)}")
        out = {"cases": cases}
        fold = row.get("case_insensitive")
        if fold is not None and not isinstance(fold, bool):
            raise ValueError(f"{where}: case_insensitive must be true or false, got "
                             f"{_short(fold)}")
        if fold or (fold is None and ANY_CASE.search(question)):
            out["case_insensitive"] = True
        for key in TESTS_ONLY:
            if row.get(key) not in (None, ""):
                raise ValueError(f"{where}: {key} is read with tests, not with stdin/stdout "
                                 f"cases: give tests, or leave {key} out")
        for key, why in NOT_STDIN.items():
            value = row.get(key)
            if value not in (None, "", "stdio"):
                raise ValueError(f"{where}: the problem {why.format(v=_short(value))}: leave the "
                                 f"row out (filter on {key})")
    else:
        for key in CASES_ONLY:
            if row.get(key) is not None:
                raise ValueError(f"{where}: {key} applies to stdin/stdout cases, not to tests "
                                 "(their asserts say how values compare): leave it out")
        out = {"tests": tests if isinstance(tests, str) else "\n".join(tests),
               "entry_point": row.get("entry_point"), "setup": row.get("setup") or ""}
        for key in ("entry_point", "setup", "prompt"):
            if row.get(key) is not None and not isinstance(row[key], str):
                raise ValueError(f"{where}: {key} must be a string, got {_short(row[key])}")
        if row.get("prompt") is not None and row.get("entry_point"):
            out["prompt"] = row["prompt"]  # HumanEval: the program is prompt + completion
    for key, kind in CODE_LIMITS.items():
        value = row.get(key)
        if value is None:
            continue
        number = not isinstance(value, bool) and isinstance(value, (int, float))
        if not (number and math.isfinite(value) and (kind is float or float(value).is_integer())
                and (value >= 0 if key == "float_tolerance" else value > 0)):
            sign = "non-negative" if key == "float_tolerance" else "positive"
            raise ValueError(f"{where}: {key} must be a {sign} {kind.__name__}, got "
                             f"{_short(value)}")
        if value > LIMIT_BOUNDS.get(key, math.inf):
            raise ValueError(f"{where}: {key} {value} is past {LIMIT_BOUNDS[key]:.0f} "
                             f"({LIMIT_UNITS[key]}): a unit slip?")
        out[key] = kind(value)
    out.update(_suite_limits(row, where, stdin))
    _check_field_names(row, where)
    _check_judgeable(out, where)
    return out


def _suite_limits(row: dict, where: str, stdin: bool) -> dict:
    """A public suite's own limits as the row's timeout (seconds) / memory_mb (MiB): Codeforces'
    time_limit (seconds) and memory_limit (MB), TACO's "2 seconds" / "256 megabytes" (its "None":
    no limit), CodeContests' time_limit {"seconds", "nanos"} and memory_limit_bytes (0: none given,
    protobuf's unset). A suite's time limit is per test, one run of the program on one input: a
    stdin/stdout case here, whose `timeout` is per case; on tests (one run for every test) it is
    refused. Malformed, zero, negative or absurd: one line naming the field."""
    out, read = {}, {}
    for key, quantity in SUITE_LIMITS.items():
        value = row.get(key)
        if value is None or value == "None" or (key == "memory_limit_bytes" and value == 0
                                                and not isinstance(value, bool)):
            continue
        if quantity in out or row.get(quantity) is not None:
            other = quantity if row.get(quantity) is not None else read[quantity]
            raise ValueError(f"{where}: both {other!r} and {key!r} set the {quantity}: keep one")
        read[quantity] = key
        if quantity == "timeout" and not stdin:
            raise ValueError(f"{where}: {key} is a suite's limit per test (one run of the "
                             "program on one input), read with stdin/stdout cases; tests run in "
                             "one process: give their limit as timeout (seconds for the run)")
        amount = _limit_amount(value, key)
        if amount is None or not 0 < amount <= SUITE_BOUNDS.get(quantity, LIMIT_BOUNDS[quantity]):
            unit = "bytes" if key == "memory_limit_bytes" else LIMIT_UNITS[quantity]
            why = ("past the bound for a unit slip" if amount and amount > 0
                   else "not a positive amount")
            raise ValueError(f"{where}: {key} must be a positive amount of {unit} (e.g. "
                             f"{EXAMPLES[key]}), got {_short(value)}: {why}")
        out[quantity] = amount if quantity == "timeout" else math.ceil(amount)
    return out


EXAMPLES = {"time_limit": '2, "2 seconds" or {"seconds": 2, "nanos": 0}',
            "memory_limit": '256 or "256 megabytes"', "memory_limit_bytes": "268435456"}
EXAMPLES.update({"time-limit": EXAMPLES["time_limit"], "memory-limit": EXAMPLES["memory_limit"]})
# open-r1/codeforces: rows whose cases a token comparison of stdout cannot judge
NOT_STDIN = {
    "input_mode": "reads and writes files (input_mode {v}), not stdin/stdout",
    "interaction_format": "is interactive (interaction_format): its judge answers the program as "
                          "it runs, no fixed output to compare",
    "generated_checker": "has a checker (generated_checker): several outputs are right, and a "
                         "right one that is not the expected text would score 0",
}


def _limit_amount(value, key: str) -> float | None:
    """`value` of a suite's limit field in seconds or MiB, or None if it is not an amount."""
    if isinstance(value, bool):
        return None
    if key == "memory_limit_bytes":
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        return value / 2 ** 20 if whole else None
    if isinstance(value, dict) and SUITE_LIMITS[key] == "timeout":  # CodeContests' Duration
        parts = [value.get("seconds") or 0, value.get("nanos") or 0]
        if set(value) - {"seconds", "nanos"} or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts):
            return None
        return parts[0] + parts[1] / 1e9
    units = TIME_UNITS if SUITE_LIMITS[key] == "timeout" else MEMORY_UNITS
    if isinstance(value, str):
        found = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*", value)
        if not found or found[2].lower() not in units:
            return None
        return float(found[1]) * units[found[2].lower()]
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _check_field_names(row: dict, where: str) -> None:
    """A field that looks like a misspelt code field ("entrypoint", "timeOut", "memory_MB",
    "float_tolerence"): refused, rather than kept unread while the default applies."""
    def norm(name):
        return re.sub(r"[^a-z0-9]", "", name.lower())
    known = {}
    for k in CODE_FIELDS:  # the first spelling of a field is the one to suggest
        known.setdefault(norm(k), k)
    for name in row:
        if not isinstance(name, str) or name in CODE_FIELDS:
            continue
        near = known.get(norm(name)) or next(
            (k for n, k in known.items() if len(n) >= 7 and _one_edit(norm(name), n)), None)
        if near:
            raise ValueError(f"{where}: unknown field {name!r}: did you mean {near!r}? (rename "
                             "it; as it is, it would be ignored)")


def _one_edit(a: str, b: str) -> bool:
    """a and b differ by one insertion, deletion, substitution or swap of neighbours."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return (a[i + 1:] == b[i + 1:] or a[i:] == b[i + 1:] or a[i + 1:] == b[i:]
            or (a[i:i + 2] == b[i:i + 2][::-1] and a[i + 2:] == b[i + 2:]))


def _check_judgeable(answer: dict, where: str) -> None:
    """What would otherwise fail only when the row is scored (a ValueError ending a training step)
    or score 0 whatever the answer: tests, setup or prompt that are not Python, an entry point that
    is not a name, nothing to judge, cases that call a function rather than read stdin."""
    import ast
    import keyword
    if "cases" in answer:
        if not answer["cases"]:
            raise ValueError(f"{where}: cases is empty: nothing to judge")
        kinds = sorted({repr(c["testtype"]) for c in answer["cases"] if "testtype" in c}
                       - {"'stdin'"})
        if kinds:
            raise ValueError(f"{where}: cases of testtype {kinds[0]} call a function (LeetCode "
                             "style), not stdin/stdout: give them as tests")
        return
    if not answer["tests"].strip():
        raise ValueError(f"{where}: the tests are empty: nothing to judge")
    trees = {}
    for key in ("tests", "setup", "prompt"):
        if answer.get(key):
            try:
                trees[key] = compile(answer[key], key, "exec", ast.PyCF_ONLY_AST)
            except (SyntaxError, ValueError) as e:
                at = f" (line {e.lineno})" if getattr(e, "lineno", None) else ""
                msg = getattr(e, "msg", None) or str(e)
                raise ValueError(f"{where}: {key} is not valid Python: {msg}{at}") from None
    entry = answer.get("entry_point")
    if entry is not None and not (entry.isidentifier() and not keyword.iskeyword(entry)):
        raise ValueError(f"{where}: entry_point must be a Python name, got {_short(entry)}")
    body = trees["tests"].body
    check = [s for s in body if isinstance(s, ast.FunctionDef) and s.name == "check"]
    if entry and not check and not re.search(rf"\b{entry}\b", answer["tests"] + "\n"
                                             + answer.get("setup", "")):
        raise ValueError(f"{where}: entry_point {entry!r} is neither named by the tests nor passed "
                         "to a check(candidate): the tests judge other names")
    called = any(isinstance(n, ast.Name) and n.id == "check" and isinstance(n.ctx, ast.Load)
                 for n in ast.walk(ast.Module(body=body, type_ignores=[])))
    defined = {s.name for s in body + list(trees.get("setup", ast.Module(body=[])).body)
               if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    if not any(_tests_something(s, bool(entry) or called, defined) for s in body):
        raise ValueError(f"{where}: the tests hold no test (no assert, no test function or "
                         "TestCase method, no check that runs, no entry_point for check; a bare "
                         "call or print of the answer judges nothing)")


def _tests_something(stmt, check_runs: bool, defined=frozenset()) -> bool:
    """Could this statement of a test module judge an answer? False only for what never does: an
    import, a docstring, pass, an assignment, a helper function, a class without test methods, a
    check(candidate) nothing calls (rewards/testplan.py counts none of them a test case), and a
    statement that only calls or prints (`f(1)`, `print(f(1))`, a loop of them): it holds no
    assert or raise and calls nothing the tests define (`defined`: their functions and classes) or
    that checks (a name with assert, check, raises, fail or main in it: `np.testing.assert_equal`,
    `self.fail`, `unittest.main()`)."""
    import ast
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Pass, ast.Assign, ast.AnnAssign)) or (
            isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
        return False
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return stmt.name.startswith("test") or (stmt.name == "check" and check_runs)
    if isinstance(stmt, ast.ClassDef):  # its tests may come from a base defined elsewhere
        return any(ast.unparse(b) not in ("object", "TestCase", "unittest.TestCase")
                   for b in stmt.bases) or any(
            isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (s.name.startswith("test") or s.name == "runTest") for s in stmt.body)
    for node in ast.walk(stmt):  # an assert, a raise, or a call that may check: it judges
        callee = getattr(node, "func", None) if isinstance(node, ast.Call) else None
        name = getattr(callee, "id", None) or getattr(callee, "attr", "")
        if isinstance(node, (ast.Assert, ast.Raise)) or name in defined or (
                callee is not None and not isinstance(callee, (ast.Name, ast.Attribute))) or any(
                word in name.lower() for word in ("assert", "check", "raises", "fail", "main")):
            return True
    return False


def _check_reward_fits(row: dict, where: str) -> None:
    """The reward can read the row's answer: code's tests only with the code reward (math's
    rewards raise on them, and the code reward reads a math answer as tests that judge nothing),
    the choice reward only a letter A-J."""
    reward, domain = row["reward"], row["domain"]
    if (reward == "code") != (domain == "code"):
        what = "tests" if domain == "code" else "not tests"
        raise ValueError(f"{where}: the {reward} reward cannot judge a {domain} row (its answer "
                         f"is {what}): a code row takes the code reward, and only it")
    if reward == "choice" and not re.fullmatch(r"[A-J]", str(row["answer"])):
        raise ValueError(f"{where}: the choice reward needs a letter A-J as the answer, got "
                         f"{_short(row['answer'])} (give the row choices, or domain='choice')")


def _fields(row: dict, question: str, answer_key) -> dict:
    """A custom reward's **fields: the row's fields but the answer's own (the reward gets the answer
    as its second argument) and "completion", plus "question", the question text."""
    out = {k: v for k, v in row.items() if k not in (answer_key, "completion")}
    out["question"] = str(question)
    return out


def _builtin_records(source: str, split: str):
    files = builtin.FILES[source]
    if split not in files:
        raise ValueError(f"{source} has splits {sorted(files)}, got split={split!r}")
    remote = files[split]
    # a converted parquet
    jsonl_copy = os.path.join(data_dir(), remote.name.rsplit(".", 1)[0] + ".jsonl")
    if remote.name.endswith(".parquet") and os.path.exists(jsonl_copy):
        path = jsonl_copy
    else:
        try:
            path = fetch(remote)
        except FileNotFoundError as e:
            if not remote.name.endswith(".parquet"):
                raise
            raise FileNotFoundError(
                f"{e} Or place the same rows as JSON lines at {jsonl_copy}.") from None
    records = read_records(path)
    if source == "mbpp":  # one file, split by task_id
        records = [(where, row) for where,
                   row in records if row.get("task_id") in builtin.MBPP_TASK_IDS[split]]
    convert = builtin.CONVERTERS[source]
    out = []
    for i, (where, row) in enumerate(records):
        problem = convert(row, where)
        if problem["domain"] == "code":
            _check_judgeable(problem["answer"], where)
        problem["fields"] = _fields(row, problem["question"], "answer")
        out.append((f"{source}/{split}/{i}", where, problem))
    return out


def _local_records(path: str, question_field, answer_field, domain=None, reward=None, split=None):
    """Rows of a local file, or (split given) of a data set read with `datasets` (hf:, a folder)."""
    if split is None:
        stem, records = os.path.basename(path).split(".")[0], read_records(path)
    else:
        name = path[3:].partition(":")[0] if path.startswith("hf:") else os.path.normpath(path)
        stem, records = f"{os.path.basename(name)}/{split}", read_dataset(path, split)
    return [
        (f"{stem}/{i}", where, _local_row(row, where, question_field, answer_field, domain, reward))
            for i, (where, row) in enumerate(records)]


def load_problems(source: str, split: str = "train", *, limit: int | None = None, seed: int = 0,
                  question_field: str | None = None, answer_field: str | None = None,
                  template: str | None = None, system_prompt: str | None = None,
                  **task_options) -> list[Problem]:
    """Problems of `source`/`split`, prompts built with `template` (data/templates.py; default per
    domain). task_options: arithmetic knobs (n, digits, min_digits, max_operand, terms, ops); for
    local files `reward=` / `domain=`."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if source in BUILTIN_SOURCES and (question_field or answer_field):
        raise ValueError("question_field / answer_field apply to local files, not to built-in "
                         "sources")
    if source == "arithmetic":
        check_options(arithmetic.generate, task_options, "the arithmetic task")
        # generate just what is asked (the first `limit` are the same)
        if limit and "n" not in task_options:
            task_options = dict(task_options, n=limit)
        rows = arithmetic.generate(split, seed, **task_options)
        records = [(r["id"], r["id"], dict(r, domain="math", reward="gsm8k",
                                           fields=_fields(r, r["question"], "answer")))
                   for r in rows]
    elif source in builtin.CONVERTERS:
        if task_options:
            raise OptionError(f"{source} takes no options, got {sorted(task_options)}")
        records = _builtin_records(source, split)
    elif os.path.exists(source) or source.endswith((".jsonl", ".json", ".gz", ".parquet")) or \
            source.startswith("hf:"):
        if set(task_options) - {"domain", "reward"}:
            raise OptionError("local files take the options domain= and reward=, got "
                              f"{sorted(task_options)}")
        for name, value in task_options.items():
            if value is not None and not isinstance(value, str):
                raise OptionError(f"the option {name!r} must be a string, got {value!r}")
        records = _local_records(source, question_field, answer_field, **task_options,
                                 split=split if is_dataset_source(source) else None)
    else:
        raise ValueError(f"unknown source {source!r}: use one of {BUILTIN_SOURCES}, a path to a "
                         ".jsonl/.json file, a data set folder or hf:ORG/NAME")
    problems = []
    for default_id, where, row in records[:limit] if limit is not None else records:
        if row["reward"] not in ("gsm8k", "math", "choice", "code"):
            raise ValueError(f"{where}: unknown reward {row['reward']!r}")
        _check_reward_fits(row, where)
        question = str(row["question"])
        if not question.strip():
            raise ValueError(f"{where}: empty question")
        for what, text in (("question", question), ("answer", row["answer"])):
            # JSON can hold a lone surrogate ("\ud800"), which no tokenizer takes
            try:
                str(text).encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"{where}: the {what} is not valid Unicode text (a lone surrogate "
                                 f"{str(text)[e.start]!r} at character {e.start})") from None
        if row.get("choices"):
            question = templates.format_choices(question, row["choices"])
        messages, prompt = templates.build(question, row["domain"], template, system_prompt,
                                           row.get("starter_code"))
        problems.append(
            Problem(id=str(row.get("id") or default_id), question=question, answer=row["answer"],
                                domain=row["domain"], reward=row["reward"], messages=messages,
                                prompt=prompt, fields=row.get("fields") or {}))
    return problems


__all__ = ["BUILTIN_SOURCES", "OptionError", "Problem", "decontamination_report", "format_report",
           "load_problems", "render_prompt"]
