"""No two of the project's modules import each other, directly or round a longer circle: every
import statement of gmts/ (data/ and rewards/ as gmts.data and gmts.rewards), train.py and eval.py
is read from the source, those inside functions included (a lazy import is still a dependency)."""
import ast
import os


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# folder -> the package name it is imported as (gmts/__init__.py maps data/ and rewards/)
PACKAGES = {"gmts": "gmts", "data": "gmts.data", "rewards": "gmts.rewards"}


def project_modules(root=ROOT, folders=tuple(PACKAGES)):
    """{module name: its file} of the project's own modules (those of `folders`)."""
    modules = {"train": os.path.join(root, "train.py"), "eval": os.path.join(root, "eval.py")}
    for folder in folders:
        package = PACKAGES[folder]
        for dirpath, _dirs, files in os.walk(os.path.join(root, folder)):
            rel = os.path.relpath(dirpath, os.path.join(root, folder))
            prefix = package if rel == "." else package + "." + rel.replace(os.sep, ".")
            for name in files:
                if name.endswith(".py"):
                    module = prefix if name == "__init__.py" else f"{prefix}.{name[:-3]}"
                    modules[module] = os.path.join(dirpath, name)
    return {m: f for m, f in modules.items() if os.path.isfile(f)}


def imports(module, path, modules):
    """The project modules that `module` (its file `path`) imports: `from a.b import c` is a.b.c
    when that is a module, else a.b."""
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    found = set()
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:                                      # relative: from the package
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                         for alias in node.names)
    return {name for name in found if name in modules and name != module}


def circles(graph):
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_two_modules_import_each_other():
    modules = project_modules(folders=("gmts", "data"))
    assert {"train", "eval", "gmts.trainer.batches", "gmts.method.grpo", "gmts.data"} <= set(
        modules)
    graph = {m: imports(m, path, modules) for m, path in modules.items()}
    assert "gmts.trainer.distributed" in graph["gmts.trainer.batches"]      # the graph is read
    assert circles(graph) == [], circles(graph)


def test_no_two_modules_import_each_other_rewards_included():
    modules = project_modules()
    assert "gmts.rewards.isolated" in modules
    graph = {m: imports(m, path, modules) for m, path in modules.items()}
    assert circles(graph) == [], circles(graph)


def test_a_circle_is_found_also_through_a_lazy_import(tmp_path):
    """A circle of three modules closed by an import inside a function, and a relative import."""
    (tmp_path / "gmts" / "sub").mkdir(parents=True)
    (tmp_path / "gmts" / "__init__.py").write_text("")
    (tmp_path / "gmts" / "sub" / "__init__.py").write_text("")
    (tmp_path / "gmts" / "sub" / "a.py").write_text("from . import b\n")
    (tmp_path / "gmts" / "sub" / "b.py").write_text("import gmts.c\n")
    (tmp_path / "gmts" / "c.py").write_text("def f():\n    from gmts.sub.a import x\n")
    (tmp_path / "train.py").write_text("from gmts.sub import a\n")
    modules = project_modules(str(tmp_path))
    graph = {m: imports(m, path, modules) for m, path in modules.items()}
    assert graph["train"] == {"gmts.sub.a"} and graph["gmts.sub.a"] == {"gmts.sub.b"}
    assert circles(graph) == [["gmts.c", "gmts.sub.a", "gmts.sub.b"]]
    (tmp_path / "gmts" / "c.py").write_text("def f():\n    return 1\n")
    graph = {m: imports(m, path, modules) for m, path in modules.items()}
    assert circles(graph) == []
