"""The reading path: how much of the project's code a reader must read to follow ONE default step.

Runs train.py's main() for one step (--selector gmts, one process, on-policy: 2 prompts x 4 answers,
8 new tokens) on a tiny model, with a tracer switched on only inside train.train_step, and counts
the project's files and the lines of the distinct functions the step called, by their source spans,
docstrings not counted (comments are). rewards/ and data/ are left out (a reader takes
`reward(text, answer)` on trust); torch and transformers are not the project's. A "plumbing" line is
a code line of those functions (not a docstring or comment) that names several processes, FSDP or
compilation (PLUMBING). "functions" counts code objects, as the shared reading-path tool does: a
comprehension, a generator expression or a lambda the step runs is one, a function and its own
comprehension two (Python 3.11). Two differences from that tool: a line is counted once (the shared
tool counts a comprehension's line again; its count is printed too, "per code object", and is the
one GOAL's lines hold), and the characters of the code lines (stripped) are counted too, which
wrapping does not change.

The lines also split by what the step did with them (kinds): statements it ran (of those, the
argument checks: calls of `check`, `_check` or a `check_<name>` / `_check_<name>` function, and such
functions' own lines), comments, branches it did not run, blanks. Ran minus checks is what no
regrouping of the same code can take off the path: moving every branch not taken out of the
functions called and deleting every comment and check would leave that many.

    python bench/reading_path.py            # builds the tiny model and data in a temp folder
    python bench/reading_path.py MODEL DATA [TRAIN_FLAGS...] [--json]

The issue's goal (issue 54): at most 5 files, 50 functions, 400 lines (per code object, as the
shared tool counts them), 5 plumbing lines (GOAL).
"""
import ast
import contextlib
import io
import json
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOAL = {"files": 5, "functions": 50, "lines": 400, "plumbing": 5}
PLUMBING = re.compile(r"\b(ranks?|world_size|torchrun|distributed|fsdp|FSDP|all_reduce|compiled?"
                      r"|torch\.compile)\b")


def trace_step(model, data_path, extra=()):
    """({(file, first line, name): lines in its span} of every project function train_step calls,
    {file: the line numbers that ran})."""
    sys.path.insert(0, ROOT)
    import train
    seen, ran = {}, {}

    def trace(frame, event, _arg):      # a function's first call: its span; then its lines run
        code = frame.f_code
        if event != "call" or code.co_filename.startswith("<"):
            return None
        path = os.path.abspath(code.co_filename)
        if not path.startswith(ROOT
                               + os.sep) or any(p in path for p in ("/tests/", "/.venv",
                                                                    "site-packages")):
            return None
        rel = os.path.relpath(path, ROOT)
        if rel.startswith(("rewards/", "data/")):
            return None
        key = (rel, code.co_firstlineno, code.co_name)
        if key not in seen:
            last = max((line for _, _, line in code.co_lines() if line is not None),
                       default=code.co_firstlineno)
            seen[key] = last - code.co_firstlineno + 1
        lines = ran.setdefault(rel, set())

        def line(frame, event, _arg):
            if event == "line":
                lines.add(frame.f_lineno)
            return line
        return line

    step = train.train_step

    def traced(*args, **kwargs):
        sys.settrace(trace)
        try:
            return step(*args, **kwargs)
        finally:
            sys.settrace(None)

    train.train_step = traced
    out = tempfile.mkdtemp()
    argv = ["--model", model, "--data", data_path, "--group-size", "4", "--prompts-per-step", "2",
            "--max-new-tokens", "8", "--device", "cpu", "--steps", "1", "--selector", "gmts",
            "--output-dir", os.path.join(out, "run"), *extra]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            train.main(argv)
    finally:
        train.train_step = step
    return seen, ran


def docstrings(rel):
    """{a function's first line (its def and its first decorator): its docstring's line range}."""
    spans = {}
    for node in ast.walk(ast.parse(Path(ROOT, rel).read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            doc = range(0)
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
                    isinstance(first.value.value, str):
                doc = range(first.lineno, first.end_lineno + 1)
            spans[node.lineno] = doc
            spans[node.decorator_list[0].lineno if node.decorator_list else node.lineno] = doc
    return spans


def lines_read(seen):
    """{file: the set of its line numbers on the path}: each function's span less its docstring.
    A set, so a line is counted once: a comprehension or a nested function is a code object of its
    own inside its function's span (Python 3.11; 3.12 inlines comprehensions)."""
    read, docs = {}, {}
    for (rel, first, _name), n in seen.items():
        doc = docs.setdefault(rel, docstrings(rel)).get(first, range(0))
        read.setdefault(rel, set()).update(i for i in range(first, first + n) if i not in doc)
    return read


CHECK = re.compile(r"_?check(_\w+)?$")   # an argument check: _check, check_ratio (not checkpoint)


def ran_statements(lines, ran):
    """(the line numbers of the statements of a file (`lines`, its text) that ran, those of them
    that check arguments): a simple statement's whole span; a compound one's header (a function's:
    its decorators and def, when its body ran); `else:` / `try:` / `finally:` when the line after
    them ran."""
    run, checks = set(), set()
    for node in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(node, ast.stmt):
            continue
        body = getattr(node, "body", None)
        first = node.decorator_list[0].lineno if getattr(node, "decorator_list", None) else \
            node.lineno
        last = body[0].lineno - 1 if isinstance(body, list) and body else node.end_lineno
        is_def = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        if is_def and ran & set(range(node.lineno, node.end_lineno + 1)):
            run.update(range(first, last + 1))
            if CHECK.match(node.name):
                checks.update(range(first, node.end_lineno + 1))
        elif not is_def and node.lineno in ran:
            run.update(range(first, last + 1))
            call = node.value if isinstance(node, ast.Expr) else None
            if isinstance(call, ast.Call) and CHECK.match(getattr(call.func, "id", "")):
                checks.update(range(first, last + 1))
    run.update(i for i, text in enumerate(lines, 1)
               if text.split("#")[0].strip() in ("else:", "try:", "finally:") and i + 1 in run)
    return run, checks


def kinds(lines, numbers, ran):
    """How the path's lines `numbers` of a file (`lines`, its text) split: {"ran": lines of
    statements the step ran, "checks": those of them checking arguments, "comments", "not_run":
    branches it did not take, "blank"}; ran + comments + not_run + blank = len(numbers)."""
    run, checks = ran_statements(lines, ran)
    out = dict.fromkeys(("ran", "checks", "comments", "not_run", "blank"), 0)
    for i in numbers:
        text = lines[i - 1].strip() if i <= len(lines) else ""
        kind = "blank" if not text else "comments" if text.startswith("#") else \
            "ran" if i in run else "not_run"
        out[kind] += 1
        out["checks"] += kind == "ran" and i in checks
    return out


def measure(model, data_path, extra=()):
    """{"files": {file: lines}, "functions", "lines", "lines_per_code_object": the lines as the
    shared tool counts them (each code object's span, a comprehension's line again), "chars",
    "plumbing", "kinds": how the lines split (kinds)} of one default step."""
    seen, ran = trace_step(model, data_path, extra)
    files, plumbing, chars, split = {}, 0, 0, {}
    per_code_object = sum(n - len(docstrings(rel).get(first, range(0)))
                          for (rel, first, _name), n in seen.items())
    for rel, numbers in lines_read(seen).items():
        lines = Path(ROOT, rel).read_text().splitlines()
        for kind, n in kinds(lines, numbers, ran.get(rel, set())).items():
            split[kind] = split.get(kind, 0) + n
        code = [lines[i - 1] for i in sorted(numbers) if i <= len(lines)]
        files[rel] = len(code)
        plumbing += sum(1 for line in code if PLUMBING.search(line.split("#")[0]))
        chars += sum(len(line.strip()) for line in code)    # the same text, whatever its wrapping
    return {"files": dict(sorted(files.items(), key=lambda kv: -kv[1])), "functions": len(seen),
            "lines": sum(files.values()), "lines_per_code_object": per_code_object, "chars": chars,
            "plumbing": plumbing, "kinds": split}


def tiny_model_and_data(folder):
    """The tiny model (its groups mixed at --lr 1e-3) and 16 digit problems, written to `folder`."""
    sys.path.insert(0, ROOT)
    from gmts.tools.toy import save_tiny_model, write_digit_data
    save_tiny_model(os.path.join(folder, "m"), favour="12 ")
    write_digit_data(os.path.join(folder, "d.jsonl"), 16)
    return os.path.join(folder, "m"), os.path.join(folder, "d.jsonl")


def main(argv):
    if "-h" in argv or "--help" in argv:
        print(__doc__.strip())
        return
    as_json = "--json" in argv
    argv = [a for a in argv if a != "--json"]
    if len(argv) < 2 or argv[0].startswith("-"):
        model, data_path = tiny_model_and_data(tempfile.mkdtemp())
        extra = ["--lr", "1e-3", *argv]
    else:
        model, data_path, extra = argv[0], argv[1], argv[2:]
    with contextlib.redirect_stderr(io.StringIO()):
        result = measure(model, data_path, extra)
    if as_json:
        print(json.dumps(result))
        return
    for rel, n in result["files"].items():
        print(f"{n:5d}  {rel}")
    lines, chars = result["lines"], result["chars"]
    print(f"reading path of one default step: {len(result['files'])} files, {result['functions']} "
          f"functions, {lines} lines (docstrings not counted; {chars} characters of code, "
          f"{chars / lines:.1f} per line); {result['plumbing']} lines "
          f"name several processes, FSDP or compilation (goal: {GOAL['files']} files, "
          f"{GOAL['functions']} functions, {GOAL['lines']} lines per code object, "
          f"{GOAL['plumbing']} plumbing lines)")
    k = result["kinds"]
    print(f"of those lines: {k['ran']} of statements the step ran ({k['checks']} of them argument "
          f"checks), {k['comments']} comments, {k['not_run']} of branches it did not run, "
          f"{k['blank']} blank")
    print(f"counted per code object, as the shared tool counts (a comprehension's line again): "
          f"{result['lines_per_code_object']} lines")


if __name__ == "__main__":
    main(sys.argv[1:])
