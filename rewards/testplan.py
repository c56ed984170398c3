"""Split a code problem's tests into what the sandbox computes and what the trainer judges.

build_plan(tests, entry_point, setup) parses the tests (MBPP asserts, HumanEval's `def check(candidate)`, KodCode's
`from solution import f` + `test_*` functions with @pytest.mark.parametrize tables) into units, one per test case:
- unit.steps go to the sandbox: statements and call expressions whose arguments are the test's INPUTS (literals,
  or names the test bound to literals, sent as `name = <literal>`), e.g. {"eval": "add(1, 2)"};
- unit.checks stay here: the comparison with the EXPECTED value, evaluated in this process over the values the
  sandbox sent back (plain data of exact types, rebuilt by `decode`), with the test's own operators (==, `is`,
  math.isclose, pytest.approx, pytest.raises...).
The reference alone decides the plan (never the solution), so a policy cannot make a test less trusted.
What cannot be split so (loops, helpers defined by the tests, fixtures, ...) stays in `plan.harness`: the tests'
source minus the converted units, run inside the sandbox as before, so its verdict is untrusted.
"""
import ast
import builtins
import copy
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache

# Names the trainer evaluates itself (real builtins, whatever the solution redefines), and modules it knows.
SAFE_NAMES = frozenset("""abs all any bool bytes chr complex dict divmod enumerate filter float frozenset hex int
isinstance len list map max min oct ord pow range repr reversed round set sorted str sum tuple type zip""".split())
MODULES = {"math": math}
_SAFE_BUILTINS = {name: getattr(builtins, name) for name in SAFE_NAMES}


class Unconvertible(Exception):
    """This test case cannot be judged outside the sandbox: it goes to the harness."""


class _Approx:
    """pytest.approx for checks judged here: numbers (and lists/tuples/dicts of them) within rel or abs."""

    def __init__(self, expected, rel=None, abs=None, nan_ok=False):
        self.expected, self.rel, self.abs, self.nan_ok = expected, rel, abs, nan_ok

    def _close(self, actual, expected) -> bool:
        if isinstance(expected, (list, tuple)):
            return (type(actual) in (list, tuple) and len(actual) == len(expected)
                    and all(self._close(a, e) for a, e in zip(actual, expected)))
        if isinstance(expected, dict):
            return (type(actual) is dict and actual.keys() == expected.keys()
                    and all(self._close(actual[k], v) for k, v in expected.items()))
        if type(expected) in (int, float, complex) and type(actual) in (int, float, complex, bool):
            if self.nan_ok and expected != expected and actual != actual:
                return True
            if actual == expected:
                return True
            rel = 1e-6 if self.rel is None else self.rel
            tol = max(rel * builtins.abs(expected), 1e-12 if self.abs is None else self.abs)
            return builtins.abs(actual - expected) <= tol
        return actual == expected

    def __eq__(self, actual):
        return self._close(actual, self.expected)

    __hash__ = None


class _Pytest:
    approx = _Approx


_PARENT_GLOBALS = {"__builtins__": _SAFE_BUILTINS, "math": math, "pytest": _Pytest}


# ---------------------------------------------------------------- plain data across the boundary


def decode(value):
    """The child's tagged JSON back to the exact Python value (see _sandbox_child.encode). Only plain types can
    come out of json.loads, so no object with its own __eq__ can reach a comparison here."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if len(value) != 1:
            raise ValueError(f"malformed result {str(value)[:100]}")
        (tag, inner), = value.items()
        if tag in ("tuple", "set", "frozenset"):
            return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](decode(v) for v in inner)
        if tag == "dict":
            return {decode(k): decode(v) for k, v in inner}
        if tag == "float" and inner in ("inf", "-inf", "nan"):
            return float(inner)
        if tag == "bytes":
            return bytes.fromhex(inner)
        if tag == "complex":
            return complex(decode(inner[0]), decode(inner[1]))
        raise ValueError(f"unknown result tag {tag!r}")
    if type(value) in (type(None), bool, int, float, str):
        return value
    raise ValueError(f"malformed result of type {type(value).__name__}")


def render(value) -> str:
    """A plain value as Python source the child can evaluate (an INPUT the tests bound to a name)."""
    kind = type(value)
    if kind in (type(None), bool, int, str, bytes, complex):
        return repr(value)
    if kind is float:
        return repr(value) if math.isfinite(value) else f"float({repr(value)!r})"
    if kind is list:
        return "[" + ", ".join(map(render, value)) + "]"
    if kind is tuple:
        return "(" + "".join(render(v) + ", " for v in value) + ")"
    if kind is dict:
        return "{" + ", ".join(f"{render(k)}: {render(v)}" for k, v in value.items()) + "}"
    if kind in (set, frozenset):
        return f"{kind.__name__}([" + ", ".join(map(render, value)) + "])"
    raise Unconvertible(f"input of type {kind.__name__} cannot be sent as a literal")


# ---------------------------------------------------------------- plan


@dataclass
class Check:
    kind: str  # "assert": expr over placeholders | "raises": step `step` raised `exceptions` (names), re `match`
    expr: object = None
    env: dict = field(default_factory=dict)
    step: int = -1
    exceptions: tuple = ()
    match: str | None = None


@dataclass
class Unit:
    steps: list  # sent to the child
    checks: list  # kept here
    name: str = ""


@dataclass
class Plan:
    units: list
    harness: str | None  # tests source still to run inside (untrusted), or None
    trusted: int  # test cases judged here
    untrusted: int  # test cases left to the harness


def _names(node) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _bound_inside(node) -> set:
    """Names bound by comprehensions and lambdas inside an expression (local to it)."""
    bound = set()
    for n in ast.walk(node):
        if isinstance(n, ast.comprehension):
            bound |= _names(n.target)
        elif isinstance(n, ast.Lambda):
            bound |= {a.arg for a in n.args.args + n.args.kwonlyargs}
    return bound


class _Unit:
    """Converts one test case's statements; raises Unconvertible at the first thing it cannot judge outside."""

    def __init__(self, env: dict, child: set, prelude: list):
        self.env, self.child = dict(env), set(child)
        self.steps = [{"run": s} for s in prelude]
        self.checks = []

    def uses_child(self, node) -> bool:
        return bool(_names(node) & self.child)

    def send_inputs(self, node):
        """Every parent-side name the child expression reads becomes a child binding `name = <literal>`."""
        for name in sorted(_names(node) - _bound_inside(node)):
            if name in self.child or name in SAFE_NAMES:
                continue
            if name in MODULES:
                self.steps.append({"run": f"import {name}"})
                self.child.add(name)
            elif name in self.env:
                self.steps.append({"run": f"{name} = {render(self.env.pop(name))}"})
                self.child.add(name)
            else:
                raise Unconvertible(f"name {name!r} is defined by the tests")

    def child_rooted(self, node) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.child
        if isinstance(node, ast.Attribute):
            return self.child_rooted(node.value)
        if isinstance(node, ast.Call):
            return self.child_rooted(node.func)
        return False

    def split(self, node):
        """`node` with each child-computed part replaced by a placeholder __rN (N = its step)."""
        if not self.uses_child(node):
            return node
        if self.child_rooted(node):
            self.send_inputs(node)
            self.steps.append({"eval": ast.unparse(node)})
            return ast.Name(id=f"__r{len(self.steps) - 1}", ctx=ast.Load())
        if isinstance(node, (ast.Lambda, ast.comprehension, ast.NamedExpr, ast.Starred)):
            raise Unconvertible("child value inside a lambda or comprehension")
        for name, value in ast.iter_fields(node):
            if isinstance(value, ast.AST):
                setattr(node, name, self.split(value))
            elif isinstance(value, list):
                setattr(node, name, [self.split(v) if isinstance(v, ast.AST) else v for v in value])
        return node

    def parent_expr(self, node, placeholders=()):
        """Validate an expression the trainer will evaluate: known names only, no private attributes."""
        allowed = set(self.env) | SAFE_NAMES | set(MODULES) | {"pytest"} | set(placeholders) | _bound_inside(node)
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id not in allowed:
                raise Unconvertible(f"name {n.id!r} is defined by the tests")
            if isinstance(n, ast.Attribute) and n.attr.startswith("_"):
                raise Unconvertible("private attribute")
            if isinstance(n, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
                raise Unconvertible(type(n).__name__)
        return compile(ast.fix_missing_locations(ast.Expression(node)), "<check>", "eval")

    def statement(self, stmt):
        stmt = copy.deepcopy(stmt)  # split() rewrites it; the same test body serves every parametrize row
        if isinstance(stmt, ast.Assert):
            expr = self.split(stmt.test)
            holders = [f"__r{i}" for i, s in enumerate(self.steps) if "eval" in s]
            self.checks.append(Check("assert", expr=self.parent_expr(expr, holders), env=dict(self.env)))
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            value = stmt.value
            if value is None:
                return
            simple = all(isinstance(t, (ast.Name, ast.Tuple)) and all(isinstance(e, ast.Name) for e in
                         (t.elts if isinstance(t, ast.Tuple) else [t])) for t in targets)
            if simple and isinstance(stmt, ast.Assign) and not self.uses_child(value):
                result = eval(self.parent_expr(value), dict(_PARENT_GLOBALS), dict(self.env))
                for target in targets:
                    if isinstance(target, ast.Tuple):
                        for t, v in zip(target.elts, result, strict=True):
                            self.env[t.id] = v
                            self.child.discard(t.id)
                    else:
                        self.env[target.id] = result
                        self.child.discard(target.id)
                return
            self.run(stmt)
            for target in targets:
                for name in _names(target):
                    self.env.pop(name, None)
                    self.child.add(name)
        elif isinstance(stmt, ast.Expr):
            if isinstance(stmt.value, ast.Constant):
                return  # a docstring
            if not self.uses_child(stmt.value):
                raise Unconvertible("statement that computes nothing of the solution's")
            self.run(stmt)
        elif isinstance(stmt, ast.With):
            self.raises_block(stmt)
        elif not isinstance(stmt, ast.Pass):
            raise Unconvertible(type(stmt).__name__)

    def run(self, stmt, raises=False):
        self.send_inputs(stmt)
        step = {"run": ast.unparse(stmt)}
        if raises:
            step["raises"] = True
        self.steps.append(step)

    def raises_block(self, stmt):
        """`with pytest.raises(E[, match=...]): body`: the body runs in the child; E is checked here."""
        item = stmt.items[0] if len(stmt.items) == 1 else None
        call = item.context_expr if item else None
        if not (isinstance(call, ast.Call) and ast.unparse(call.func) == "pytest.raises" and call.args
                and item.optional_vars is None):
            raise Unconvertible("with-statement other than pytest.raises")
        exc = call.args[0]
        names = [e for e in (exc.elts if isinstance(exc, ast.Tuple) else [exc])]
        if not all(isinstance(e, ast.Name) and (isinstance(getattr(builtins, e.id, None), type) or e.id in self.child)
                   for e in names):
            raise Unconvertible("exception class defined by the tests")
        match = None
        for kw in call.keywords:
            if kw.arg != "match":
                raise Unconvertible(f"pytest.raises({kw.arg}=...)")
            match = ast.literal_eval(kw.value) if not isinstance(kw.value, ast.Name) else self.env.get(kw.value.id)
        body = ast.Module(body=stmt.body, type_ignores=[])
        if not self.uses_child(body):
            raise Unconvertible("pytest.raises around code that is not the solution's")
        self.run(body, raises=True)
        self.checks.append(Check("raises", step=len(self.steps) - 1, exceptions=tuple(e.id for e in names),
                                 match=match))


def _count_cases(node) -> int:
    return max(1, sum(isinstance(n, ast.Assert) or (isinstance(n, ast.With) and "raises" in ast.unparse(n.items[0]))
                      for n in ast.walk(node)))


def _param_rows(fn: ast.FunctionDef, env: dict) -> list[dict]:
    """The parametrize tables of a test function as keyword dicts (cartesian product over decorators)."""
    rows = [{}]
    for deco in fn.decorator_list:
        if not (isinstance(deco, ast.Call) and ast.unparse(deco.func) in ("pytest.mark.parametrize",
                                                                             "mark.parametrize")):
            raise Unconvertible(f"decorator {ast.unparse(deco)[:60]}")
        try:
            names = ast.literal_eval(deco.args[0])
            values = (ast.literal_eval(deco.args[1]) if not isinstance(deco.args[1], ast.Name)
                      else env[deco.args[1].id])
        except (ValueError, TypeError, SyntaxError, KeyError, IndexError):
            raise Unconvertible("parametrize table that is not a literal") from None
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        values = [v if len(names) > 1 else (v,) for v in values]
        rows = [dict(r, **dict(zip(names, v, strict=True))) for r in rows for v in values]
    params = [a.arg for a in fn.args.args]
    if any(set(params) != set(r) for r in rows):
        raise Unconvertible("test function with fixtures")
    return rows


def _defined_names(stmts) -> set:
    names = set()
    for stmt in stmts:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
        else:
            names |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return names


@lru_cache(maxsize=4096)
def build_plan(tests: str, entry_point: str | None = None, setup: str = "") -> Plan:
    """The plan for one problem's tests (cached: the same reference comes back every epoch). A tests string
    that is not Python raises ValueError (a data bug)."""
    try:
        module = ast.parse(tests)
        setup_names = _defined_names(ast.parse(setup).body) if setup else set()
    except SyntaxError as e:
        raise ValueError(f"code tests are not valid Python ({e}): {tests[:200]!r}") from None
    env, prelude, from_solution = {}, [], set()
    for stmt in module.body:  # literal constants and imports from the solution, in order
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "solution":
            prelude.append(ast.unparse(stmt))
            from_solution |= {a.asname or a.name for a in stmt.names if a.name != "*"}
        elif isinstance(stmt, ast.Import) and any(a.name == "solution" for a in stmt.names):
            prelude.append(ast.unparse(stmt))
            from_solution |= {a.asname or a.name for a in stmt.names}
        elif (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            try:
                env[stmt.targets[0].id] = ast.literal_eval(stmt.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                pass
    imported = _defined_names(s for s in module.body if isinstance(s, (ast.Import, ast.ImportFrom)))
    defined = _defined_names(s for s in module.body if not (isinstance(s, ast.ImportFrom) and s.module == "solution"))
    # Names the tests define themselves (helpers, non-literal variables, other modules) make a case unconvertible;
    # every other free name is the solution's (MBPP names no entry point; KodCode imports them).
    foreign = (defined - set(env) - {"check"} - {n for n in defined if n.startswith("test")}) | (imported - set(MODULES))
    foreign -= from_solution | setup_names
    foreign.discard("pytest")

    def child_names(node) -> set:
        return (_names(node) - SAFE_NAMES - set(MODULES) - {"pytest"} - set(env) - foreign) | from_solution | setup_names

    units, kept, trusted, untrusted = [], [], 0, 0
    for stmt in module.body:
        try:
            if isinstance(stmt, ast.Assert):
                u = _Unit(env, child_names(stmt), prelude)
                u.statement(stmt)
                units.append(Unit(u.steps, u.checks, ast.unparse(stmt)[:80]))
                trusted += 1
                continue
            if isinstance(stmt, ast.FunctionDef) and stmt.name == "check" and entry_point:
                arg = stmt.args.args[0].arg if len(stmt.args.args) == 1 else None
                if arg is None or stmt.decorator_list:
                    raise Unconvertible("check() signature")
                u = _Unit(env, child_names(stmt) | {arg}, prelude + [f"{arg} = {entry_point}"])
                for s in stmt.body:
                    u.statement(s)
                units.append(Unit(u.steps, u.checks, "check"))
                trusted += _count_cases(stmt)
                continue
            if isinstance(stmt, ast.FunctionDef) and stmt.name.startswith("test"):
                rows = _param_rows(stmt, env)
                converted = []
                for row in rows:
                    u = _Unit({**env, **row}, child_names(stmt) - set(row), prelude)
                    for s in stmt.body:
                        u.statement(s)
                    converted.append(Unit(u.steps, u.checks, stmt.name))
                units += converted
                trusted += len(rows) * _count_cases(stmt)
                continue
        except Unconvertible:
            untrusted += _count_cases(stmt) * (len(_safe_rows(stmt, env)) if isinstance(stmt, ast.FunctionDef) else 1)
        except (ValueError, TypeError, SyntaxError, ArithmeticError, LookupError, RecursionError):
            untrusted += 1  # a table or constant the trainer could not evaluate: leave it to the harness
        kept.append(stmt)
    harness = None
    if any(_is_test(s, entry_point) for s in kept):
        harness = ast.unparse(ast.Module(body=kept, type_ignores=[]))
    return Plan(units=units, harness=harness, trusted=trusted, untrusted=untrusted)


def _safe_rows(fn, env) -> list:
    try:
        return _param_rows(fn, env) or [{}]
    except Unconvertible:
        return [{}]


def _is_test(stmt, entry_point) -> bool:
    """Does this leftover statement test anything (else the harness need not run at all)?"""
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.ClassDef, ast.Pass)):
        return False
    if isinstance(stmt, ast.FunctionDef):
        return stmt.name.startswith("test") or (stmt.name == "check" and bool(entry_point))
    if isinstance(stmt, ast.Assign):
        return False
    return not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))


# ---------------------------------------------------------------- judging


def _raised(result: dict, expected: tuple, match: str | None) -> bool:
    if "exc" not in result:
        return False
    for name in expected:
        cls = getattr(builtins, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            # a builtin expectation: the reported class must be a builtin too, and a subclass of it, as decided
            # here, so a child cannot claim to have raised "everything"
            got = getattr(builtins, result["exc"], None)
            ok = isinstance(got, type) and issubclass(got, cls)
        else:
            ok = result["exc"] == name
        if ok:
            return match is None or re.search(match, str(result.get("msg", ""))) is not None
    return False


def judge_unit(unit: Unit, results) -> bool:
    """Did the child's results for this unit pass every check? Any malformed or missing result: no."""
    if not isinstance(results, list) or len(results) != len(unit.steps):
        return False
    raises_steps = {c.step for c in unit.checks if c.kind == "raises"}
    values = {}
    for i, result in enumerate(results):
        if not isinstance(result, dict):
            return False
        if i in raises_steps:
            continue
        if "ok" not in result:
            return False
        if "eval" in unit.steps[i]:
            values[f"__r{i}"] = decode(result["ok"])
    for check in unit.checks:
        if check.kind == "raises":
            if not _raised(results[check.step], check.exceptions, check.match):
                return False
        elif not eval(check.expr, dict(_PARENT_GLOBALS), {**check.env, **values}):
            return False
    return True


def judge(plan: Plan, unit_results) -> bool:
    """Every unit passed. Exceptions while judging (a result of the wrong shape for the check) are failures."""
    if not isinstance(unit_results, list) or len(unit_results) != len(plan.units):
        return False
    try:
        return all(judge_unit(u, r) for u, r in zip(plan.units, unit_results))
    except Exception:  # noqa: BLE001 - the child's data is untrusted: anything odd is a failure
        return False
