"""The package's modules, read as source (ast): no import cycle among them, and no module
reaching into another's privates (only _lib's, the ctypes declarations, are shared).

Imports under `if TYPE_CHECKING:` are left out: they never run, so they cannot form a cycle
at import time. Imports inside functions are counted: they run, later."""
import ast
import os

import pytest

PKG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gllm")
PKG = "gllm"


def _sources(pkg_dir=PKG_DIR):
    return {name[:-3]: open(os.path.join(pkg_dir, name)).read()
            for name in sorted(os.listdir(pkg_dir)) if name.endswith(".py")}


def _is_type_checking(test):
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk_runtime(node):
    """ast.walk, skipping the bodies of `if TYPE_CHECKING:`."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        for child in ast.iter_child_nodes(n):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                todo.extend(child.orelse)
                continue
            todo.append(child)


def _is_private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _imports(tree, modules):
    """(imported module, names bound to package modules here, private names imported)."""
    deps, module_aliases, private_names = set(), {}, []
    for n in _walk_runtime(tree):
        if isinstance(n, ast.ImportFrom):
            if n.level == 1:
                base = n.module
            elif n.level == 0 and n.module and (n.module == PKG or n.module.startswith(PKG + ".")):
                base = n.module[len(PKG) + 1:] or None
            else:
                continue
            if base is None:             # from . import x: x is a module, or a name of __init__
                for a in n.names:
                    if a.name in modules:
                        deps.add(a.name)
                        module_aliases[a.asname or a.name] = a.name
                    else:
                        deps.add("__init__")
            else:
                deps.add(base.split(".")[0])
                for a in n.names:
                    if _is_private(a.name) and base != "_lib":
                        private_names.append((n.lineno, f"from .{base} import {a.name}"))
        elif isinstance(n, ast.Import):
            for a in n.names:
                if a.name.startswith(PKG + "."):
                    mod = a.name.split(".")[1]
                    deps.add(mod)
                    if a.asname:
                        module_aliases[a.asname] = mod
    return deps, module_aliases, private_names


def _defined_privates(tree):
    """Private names this module defines: its functions, classes, globals and class
    attributes, and every attribute it assigns (self._x = ..., or a stash on another
    object, which is this module's to read)."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            out.add(n.attr)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
    return {x for x in out if _is_private(x)}


def graph_and_violations(sources):
    """The import graph of the package's modules, and every private access across modules."""
    trees = {m: ast.parse(src, filename=m + ".py") for m, src in sources.items()}
    modules = set(trees)
    graph, violations = {}, []
    defined = {m: _defined_privates(t) for m, t in trees.items()}
    for m, tree in trees.items():
        deps, aliases, private_imports = _imports(tree, modules)
        graph[m] = deps - {m}
        violations += [f"{m}.py:{line}: {what}" for line, what in private_imports]
        if m == "__init__":
            continue
        for n in ast.walk(tree):
            attr = None
            if isinstance(n, ast.Attribute):
                attr, base = n.attr, n.value
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and \
                    n.func.id in ("getattr", "setattr", "hasattr", "delattr") and \
                    len(n.args) >= 2 and isinstance(n.args[1], ast.Constant) and \
                    isinstance(n.args[1].value, str):
                attr, base = n.args[1].value, n.args[0]
            if attr is None or not _is_private(attr):
                continue
            if isinstance(base, ast.Name) and base.id in aliases:
                # a private name of a package module: only _lib's may be used
                if aliases[base.id] != "_lib":
                    violations.append(f"{m}.py:{n.lineno}: {base.id}.{attr}")
                continue
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            # Another object's private attribute: fine where this module alone defines the
            # name (one of its own classes, or its own stash); not where another module
            # defines it too, or only another does.
            owners = {o for o, names in defined.items() if attr in names}
            if owners != {m}:
                where = ", ".join(sorted(owners)) or "no module"
                violations.append(f"{m}.py:{n.lineno}: .{attr} (defined in {where})")
    return graph, violations


def find_cycle(graph):
    """One import cycle as a list of modules (first repeated last), or None."""
    state = {}
    stack = []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if d not in graph:
                continue
            if state.get(d) == "open":
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_no_import_cycles():
    graph, _ = graph_and_violations(_sources())
    assert "client" in graph and "memory" in graph, sorted(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_no_private_access_across_modules():
    _, violations = graph_and_violations(_sources())
    assert not violations, "\n".join(violations)


def test_the_checks_can_fail():
    """The checks find what they look for: a cycle through a function-level import, a
    private method of another module's class, a private import, a shared private name."""
    sources = {
        "_lib": "X = 1\n",
        "a": "from . import b, _lib\n"
             "class A:\n    def _hidden(self):\n        return _lib._lib\n",
        "b": "from typing import TYPE_CHECKING\n"
             "if TYPE_CHECKING:\n    from .c import C\n"
             "def f(x):\n    from .a import A, _helper\n    return x._hidden()\n",
        "c": "from .b import f\nclass C:\n    def __init__(self):\n        self._n = 1\n",
        "d": "class D:\n    def __init__(self, c):\n        self._n = c._n\n"
             "def g(c):\n    return getattr(c, '_n')\n",
    }
    graph, violations = graph_and_violations(sources)
    assert find_cycle(graph) in (["a", "b", "a"], ["b", "a", "b"])
    assert "c" not in graph["b"]                  # a TYPE_CHECKING import: no edge
    text = "\n".join(violations)
    assert "b.py:5: from .a import _helper" in text
    assert "b.py:6: ._hidden (defined in a)" in text
    assert "d.py:3: ._n (defined in c, d)" in text
    assert "d.py:5: ._n (defined in c, d)" in text
    assert "_lib" not in text                     # _lib's privates are the shared ones
    assert len(violations) == 4, text


@pytest.mark.parametrize("name", ["Caps", "Limits", "DeviceInfo", "ClientInfo", "Status",
                                  "JobResult", "Job", "PagedKV", "Client", "attention",
                                  "connect", "find_client"])
def test_names_still_importable_from_client(name):
    """The split kept gllm.client's public names where user code imports them from."""
    import gllm.client
    import gllm
    assert getattr(gllm.client, name) is getattr(gllm, name)
