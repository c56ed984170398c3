"""Runs the tests the trainer cannot judge itself with the installed pytest, inside the sandbox.

Started by rewards/_sandbox_child.py as `python -I _pytest_runner.py TOKEN_FD RESULT_FD TEST_FILE`,
before the solution has run anywhere in the sandbox; the test file imports the solution. A
standalone script (no imports from this repo), bound read-only into the sandbox: the solution cannot
change it.

The run's secret token is read from TOKEN_FD (a pipe, closed at once) and kept only in the plugin's
closures. The result is lines on RESULT_FD, each `TOKEN {...}` and written when it happens (so
nothing done later in the process changes it): `{"report": [nodeid, when, outcome]}` for each
phase pytest reports, `{"error": nodeid}` for a collection error, `{"tampered": true}` when the
tamper check fails, and last, once pytest has finished, `{"collected", "errors", "exit",
"tampered", "tests": {nodeid: outcome}}`; then the process ends at once. Outcomes: "passed" (xpass
included, as pytest counts it), "xfailed" (only by an xfail mark of the tests'), "skipped" (only by
a skip/skipif mark), "failed" (anything else: a failure, an error, a skip or xfail called at run
time, by the tests or by the solution). "tampered": a function or class of pytest, pluggy, unittest
or builtins, the set of registered plugins, the test module's own functions, classes and their
code (a test swapped between collection and call), or its names and the data its tests only read
(its classes' too; _data_names: what the tests hand on may change, as pytest shares it) changed
while the tests ran, or a name the file does not bind was put in its namespace at import, or a
tracer is installed (an audit hook refuses every one: sys.settrace, setprofile, sys.monitoring).
Items whose function is not the test module's own (a `test_x` the solution defines and the tests
import) are deselected.
"""
import os
import sys


def _callables(modules):
    """(module, name) -> object for every function and class of these modules, and (class, name) ->
    attribute for each class: what a solution would replace to make pytest report a pass."""
    out = {}
    for mod in modules:
        for name, value in list(vars(mod).items()):
            if callable(value):
                out[(id(mod), name)] = value
                if isinstance(value, type):
                    for attr, item in list(vars(value).items()):
                        if not attr.startswith("__") or attr in ("__call__", "__init__", "__eq__"):
                            out[(id(value), attr)] = item
    return out


def _code(fn):
    """What a call of `fn` runs: its code, defaults and closure cells (by identity)."""
    cells = getattr(fn, "__closure__", None) or ()
    return (getattr(fn, "__code__", None), getattr(fn, "__defaults__", None),
            getattr(fn, "__kwdefaults__", None), tuple(map(id, cells)))


def _item_code(item):
    fn = getattr(item, "obj", None)
    return _code(getattr(fn, "__func__", fn))


def _tests_code(module) -> dict:
    """The test module's own functions and classes (by name and identity) and the code of each
    function and method of theirs: a solution that swaps a test's code, or rebinds a test or helper
    of the tests' between collection and call, changes it."""
    out = {}
    if module is None:
        return out
    for name, value in list(vars(module).items()):
        if getattr(value, "__module__", None) != module.__name__:
            continue
        if isinstance(value, type):
            out[name] = id(value)
            for attr, item in list(vars(value).items()):
                item = getattr(item, "__func__", item)  # staticmethod, classmethod
                if hasattr(item, "__code__"):
                    out[(name, attr)] = _code(item)
        elif hasattr(value, "__code__"):
            out[name] = _code(value)
    return out


# builtins that only read their argument (a value passed to one stays the tests'), and those that
# hand its items on (sorted(X), enumerate(X): what they return holds X's items)
_READERS = frozenset({"len", "str", "repr", "int", "float", "bool", "abs", "sum", "any", "all",
                      "isinstance", "type", "print", "round", "hash", "id"})
_ITEMS = frozenset({"sorted", "list", "tuple", "set", "frozenset", "dict", "reversed",
                    "enumerate", "zip", "iter", "min", "max"})


def _patched_by_tests(tree) -> set:
    """(module, name) of each function the test file replaces for a while itself, named by a
    dotted string or by a module it imports (`monkeypatch.setattr('builtins.input', ...)`,
    `monkeypatch.setattr(builtins, 'open', ...)`, `setattr(builtins, 'print', ...)`,
    `patch('builtins.input')`, `patch.object(builtins, 'input')`): pytest's monkeypatch undoes its
    changes only at teardown, after the call phase's tamper check, which leaves these names alone
    (a solution replacing one of them too changes nothing the tests' own replacement did not).
    tree: the test file, parsed."""
    import ast
    imported = {}  # a module's name in the file -> its path
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update((a.asname, a.name) if a.asname else (a.name.split(".")[0],
                                                                  a.name.split(".")[0])
                            for a in node.names)
    out = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "object" and not isinstance(func, ast.Attribute) or name not in (
                "setattr", "delattr", "patch", "object"):
            continue
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and name != "object":
            module, _, attr = first.value.rpartition(".")
            out.add((module, attr))
        elif len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and isinstance(
                node.args[1].value, str):
            parts = []
            while isinstance(first, ast.Attribute):
                parts.insert(0, first.attr)
                first = first.value
            if isinstance(first, ast.Name) and first.id in imported:
                out.add((".".join([imported[first.id], *parts]), node.args[1].value))
    return out


def _data_names(tree):
    """What the test file lets change in its module's namespace, from its source: (bound, free,
    shared, items, copied, classes). bound: the names it binds at module level; free: those a
    function of its declares `global` (rebinding them is the tests' own); shared: the values its
    code hands to something that may change them (the solution, a fixture, a method of their own)
    or that a call made (the solution's): pytest shares them; items: the values whose items (not
    the value itself) it hands on (`for x in X`, `f(X[0])`, `sorted(X)`); copied: the solution's
    names the file imports. Every other value the tests only read (compare, index, len). A test
    class's data (`class TestX: CASES = [...]`, read as `self.CASES`, `cls.CASES`, `TestX.CASES`
    or `CASES` in its body) is named `.CASES` in these sets; attributes the tests assign are free.
    classes: each class of the file -> the names its body binds. tree: the test file, parsed."""
    import ast
    bound, free, shared, items, copied = set(), set(), set(), set(), set()
    classes = {node.name: {name.id for a in node.body if isinstance(a, (ast.Assign, ast.AnnAssign))
                           for target in (a.targets if isinstance(a, ast.Assign) else [a.target])
                           for name in ast.walk(target) if isinstance(name, ast.Name)}
               for node in tree.body if isinstance(node, ast.ClassDef)}
    attrs = set().union(*classes.values())
    receivers = {"self", "cls", *classes}
    if any(isinstance(n, ast.Name) and n.id in ("setattr", "delattr") for n in ast.walk(tree)):
        free.update("." + a for a in attrs)  # the tests set attributes by name: theirs to change
    for node in tree.body:
        if isinstance(node, ast.For) and getattr(node.target, "id", "") == "__gmts_name":
            copied.update(ast.literal_eval(node.iter))  # the solution's names, as imported
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef,
                                                          ast.AsyncFunctionDef)) else ():
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                bound.add(sub.id)
    parents = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
        if isinstance(node, ast.Global):
            free.update(node.names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in attrs and not isinstance(
                node.ctx, ast.Load):
            free.add("." + node.attr)  # self.X = ..., cls.X = ...: the tests' own rebinding
        if isinstance(node, ast.Attribute) and node.attr in attrs and isinstance(
                node.value, ast.Name) and node.value.id in receivers:
            keys = {"." + node.attr}  # self.X, cls.X, TestX.X: the class's data
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            keys = {node.id} | ({"." + node.id} if node.id in attrs else set())
        else:
            continue
        top = node  # the chain X, X[i], X.a, X[i][j] rooted at this name
        while isinstance(parents.get(top), (ast.Subscript, ast.Attribute)) and (
                parents[top].value is top):
            top = parents[top]
        first = parents.get(node)  # the chain's first link: X itself changed or handed on?
        up = parents.get(top)
        called = isinstance(up, ast.Call) and top in up.args and isinstance(
            up.func, ast.Name) and up.func.id not in bound and up.func.id
        if (isinstance(up, (ast.Compare, ast.UnaryOp, ast.FormattedValue))
                or (isinstance(up, (ast.Assert, ast.If, ast.While)) and up.test is top)
                or (isinstance(up, ast.Subscript) and up.slice is top)
                or called in _READERS):
            continue  # read only
        if isinstance(first, ast.Attribute) or (isinstance(first, ast.Subscript)
                                                and not isinstance(first.ctx, ast.Load)):
            shared.update(keys)  # X.append(...), X[0] = 1, X.a = 1: X itself may change
        elif (top is not node or called in _ITEMS or isinstance(up, (ast.BinOp, ast.Starred))
              or isinstance(up, (ast.For, ast.comprehension)) and up.iter is top):
            items.update(keys)  # f(X[0]), for x in X, sorted(X), X + Y: X's items handed on
        else:
            shared.update(keys)  # f(X), y = X, return X, a default, a decorator's argument
    assigns = [n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))]
    assigns += [ast.Assign(targets=[ast.Name("." + t.id) for t in ast.walk(
        ast.Tuple(n.targets if isinstance(n, ast.Assign) else [n.target]))
        if isinstance(t, ast.Name)], value=n.value)
        for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body
        if isinstance(n, (ast.Assign, ast.AnnAssign))]  # a class's data, as `.X = value`
    while True:  # a value a call made (the solution's), or one holding a shared value
        grown = set(shared)
        for node in assigns:
            if any((isinstance(n, ast.Call) and not (isinstance(n.func, ast.Name)
                                                     and n.func.id in _READERS | _ITEMS))
                   or (isinstance(n, ast.Name) and n.id in grown)
                   for n in ast.walk(node.value or ast.Constant(None))):
                for target in getattr(node, "targets", [getattr(node, "target", None)]):
                    grown.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        if grown == shared:
            break
        shared = grown
    return bound, free, shared | copied, items, copied - bound, classes


_PLAIN = (list, tuple, dict, set, frozenset)
_ATOMS = (int, float, complex, str, bytes, bool, type(None))


def _fingerprint(value, skip: set, budget: list, depth: int = 0):
    """A bounded deep fingerprint of a module-level value: plain containers by identity and items,
    atoms by type and value, anything else (and what `skip` holds) by identity; no code of the
    solution's runs."""
    if budget[0] <= 0 or depth > 50:
        return "..."
    budget[0] -= 1
    kind = type(value)
    if id(value) in skip or kind not in _PLAIN:
        return (id(kind), id(value), value if kind in _ATOMS else None)
    return (id(kind), id(value), tuple(_fingerprint(v, skip, budget, depth + 1)
                                       for v in _children(value)))


def _children(value):
    return (*value.keys(), *value.values()) if type(value) is dict else tuple(value)


def _reachable(values, budget: int = 100_000) -> set:
    """ids of the plain containers reachable from these values (what the tests may hand on)."""
    seen, stack = set(), list(values)
    while stack and len(seen) < budget:
        value = stack.pop()
        if type(value) in _PLAIN and id(value) not in seen:
            seen.add(id(value))
            stack.extend(_children(value))
    return seen


def _module_data(module, names) -> dict:
    """The test module's namespace: each name's binding (by identity) and a fingerprint of its
    value, where what the tests hand on (a shared value, an item of one whose items they hand on)
    is compared by identity only; and each of its classes' data as `Class.X`."""
    free, shared, items, classes = names
    space = {n: v for n, v in vars(module).items()
             if n not in free and (not n.startswith("__") or n == "__builtins__")}
    shared, items = set(shared), set(items)
    for cls, data in classes.items():
        own = vars(space[cls]) if isinstance(space.get(cls), type) else {}
        for name in data & own.keys() - {n[1:] for n in free}:
            space[f"{cls}.{name}"] = own[name]
            shared.update([f"{cls}.{name}"] if "." + name in shared else [])
            items.update([f"{cls}.{name}"] if "." + name in items else [])
    handed = [v for n, v in space.items() if n in shared or n == "__builtins__"]
    handed += [c for n, v in space.items() if n in items and type(v) in _PLAIN
               for c in _children(v)]
    skip, budget = _reachable(handed), [100_000]
    return {n: _fingerprint(v, skip, budget) for n, v in sorted(space.items())}


def _tracing() -> bool:
    """A tracer or profiler is installed (sys.settrace/setprofile, threading's, sys.monitoring):
    the runner has none, and one of the solution's can rewrite a test's frame or code between two
    checks. A thread of the solution's is no tampering by itself (an idle daemon thread is honest):
    what one could do is bounded by the checks before each test's call and at each report, each
    outcome written out when reported, and the process ending once the last line is written."""
    import threading
    if sys.gettrace() is not None or sys.getprofile() is not None:
        return True
    if getattr(threading, "_trace_hook", None) or getattr(threading, "_profile_hook", None):
        return True
    monitoring = getattr(sys, "monitoring", None)
    return monitoring is not None and any(monitoring.get_tool(i) is not None for i in range(6))


def make_plugin(token: bytes, fd: int, test_file: str):
    import ast
    import json

    import pytest
    from _pytest.skipping import evaluate_skip_marks, xfailed_key

    write, dumps = os.write, json.dumps
    test_module = os.path.splitext(os.path.basename(test_file))[0]
    with open(test_file, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    bound, free, shared, iterated, copied, classes = _data_names(tree)
    patched = _patched_by_tests(tree)
    names = (free, shared, iterated, classes)

    def freeze(record: dict):
        """One line out now: once written, nothing the solution does later in this process (a
        thread rewriting the plugin's records after a report) changes it."""
        write(fd, token + b" " + dumps(record).encode() + b"\n")

    xfail_exc = pytest.xfail.Exception
    state = {"tests": {}, "errors": 0, "collected": None, "tampered": False}
    watched = {}

    def modules():
        return [m for n, m in list(sys.modules.items()) if m is not None and (
            n in ("pytest", "builtins", "unittest")
            or n.startswith(("_pytest.", "pluggy", "unittest.")))]

    tests = {}  # the test module's functions and classes, and their code, as collected
    items_code = {}  # each collected test item -> the code its call runs
    data = {}  # the test module's namespace and the values it only reads, as collected

    def tampered(config, data_too: bool = True) -> bool:
        """data_too: the test module's data too (before and after each test's call, and at the
        end: a change is compared with the collected state, so one made in setup or teardown is
        seen at the next call unless undone before it runs)."""
        if _tracing():
            return True
        now = _callables([m for m in modules() if (id(m), None) in watched])
        theirs = {(id(sys.modules[m]), a) for m, a in patched if sys.modules.get(m) is not None}
        for key, value in watched.items():
            if key[1] is not None and key not in theirs and now.get(key, key) is not value:
                return True
        if tests and _tests_code(sys.modules.get(test_module)) != tests:
            return True
        module = sys.modules.get(test_module)
        if data_too and data and _module_data(module, names) != data:
            return True
        if any(_item_code(item) != code for item, code in items_code.items()):
            return True
        return set(map(id, config.pluginmanager.get_plugins())) != watched[("plugins", None)]

    phases = {}  # nodeid -> {when: outcome}

    def explain(rep):
        """What failed, for the run's stderr (diagnostics only; the verdict is the result line)."""
        text = f"{rep.nodeid} {getattr(rep, 'when', 'collect')}: {rep.longreprtext[-1500:]}\n"
        os.write(2, text.encode(errors="replace"))

    def final(seen) -> str:
        if "failed" in seen.values():
            return "failed"
        if seen.get("setup", "passed") != "passed":
            return seen["setup"]  # skipped or xfailed by a mark before the test ran
        return seen.get("call", "failed")  # a test without a call phase did not run

    class Plugin:
        @pytest.hookimpl(tryfirst=True)
        def pytest_collection(self, session):
            mods = modules()
            watched.update(_callables(mods))
            watched.update({(id(m), None): None for m in mods})
            watched[("plugins", None)] = set(map(id, session.config.pluginmanager.get_plugins()))

        @pytest.hookimpl(trylast=True)
        def pytest_collection_modifyitems(self, session, config, items):
            keep = [i for i in items
                    if getattr(getattr(i, "obj", None), "__module__", None) == test_module]
            dropped = [i for i in items if i not in keep]
            items[:] = keep
            module = sys.modules.get(test_module)
            tests.update(_tests_code(module))
            if module is not None:
                data.update(_module_data(module, names))
                # a name the file does not bind, put in its namespace by the solution's import
                solution = vars(sys.modules.get("solution", sys))
                if any(n not in bound and (n not in copied or solution.get(n, n) is not value)
                       for n, value in vars(module).items()
                       if n.isidentifier() and not n.startswith("__")):  # not @py_builtins
                    state["tampered"] = True
                    freeze({"tampered": True})
            items_code.update({i: _item_code(i) for i in keep})
            if dropped:
                config.hook.pytest_deselected(items=dropped)
            state["collected"] = len(keep)

        def pytest_collectreport(self, report):
            if report.failed:
                state["errors"] += 1
                freeze({"error": report.nodeid})
                explain(report)

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_call(self, item):
            # a test swapped since the last report (by a thread of the solution's) is caught
            # before it runs
            if tampered(item.config):
                state["tampered"] = True
                freeze({"tampered": True})
            return (yield)

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_makereport(self, item, call):
            rep = yield
            if tampered(item.config, rep.when == "call"):
                state["tampered"] = True
                freeze({"tampered": True})
            if rep.passed:
                outcome = "passed"
            elif rep.failed:
                outcome = "failed"
            elif hasattr(rep, "wasxfail"):  # xfailed: only by the tests' own xfail mark
                mark = item.stash.get(xfailed_key, None)
                raised = call.excinfo is not None and call.excinfo.errisinstance(xfail_exc)
                # run=False: the mark's own xfail, raised in setup
                by_mark = mark and (not raised or (rep.when == "setup" and not mark.run))
                outcome = "xfailed" if by_mark else "failed"
            else:  # skipped: only by the tests' own skip/skipif mark, before any fixture ran
                by_mark = rep.when == "setup" and evaluate_skip_marks(item)
                outcome = "skipped" if by_mark else "failed"
            phases.setdefault(item.nodeid, {})[rep.when] = outcome
            freeze({"report": [item.nodeid, rep.when, outcome]})
            if rep.failed:
                explain(rep)
            return rep

        @pytest.hookimpl(trylast=True)
        def pytest_sessionfinish(self, session, exitstatus):
            if tampered(session.config):
                state["tampered"] = True
            state["tests"] = {nodeid: final(seen) for nodeid, seen in phases.items()}
            freeze(dict(state, exit=int(exitstatus)))
            # the verdict is out: the process ends here, so no thread of the solution's acts
            # after it
            sys.stdout.flush()
            os._exit(int(exitstatus) if int(exitstatus) < 256 else 1)

    return Plugin()


def _no_tracers(event, args):
    """An audit hook (it cannot be removed): no tracer, profiler or monitoring callback can be
    installed in this process (sys.settrace, threading.settrace in a new thread, PyEval_SetTrace
    through ctypes), so nothing of the solution's runs between a test's lines to rewrite its frame
    or swap its code."""
    if event in ("sys.settrace", "sys.setprofile") or event.startswith("sys.monitoring"):
        raise RuntimeError(f"{event} is not allowed in the tests' process")


def main():
    sys.addaudithook(_no_tracers)
    token_fd, fd, test_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    token = os.read(token_fd, 256).strip()
    os.close(token_fd)
    del sys.argv[1:]
    import pytest
    plugin = make_plugin(token, fd, test_file)
    del token
    # Output as in a plain run: what the tests and the solution print goes to the run's stdout
    # (capsys and capfd still capture inside their tests); pytest's own report is off, and each
    # failure goes to the run's stderr (explain).
    code = pytest.main(["-p", "no:cacheprovider", "-p", "no:stepwise", "-p", "no:doctest",
                        "-p", "no:terminal", "--capture=no", "--rootdir", os.getcwd(), test_file],
                       plugins=[plugin])
    sys.stdout.flush()
    os._exit(int(code) if int(code) < 256 else 1)


if __name__ == "__main__":
    main()
