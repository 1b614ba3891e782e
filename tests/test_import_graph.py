"""The import graph of src/reslab, read statically: which layer may import which.

Every import counts, at module level and inside functions alike: an import moved into a function
still ties the two modules together, it only hides the tie from the interpreter's start-up.

    spec/     what an experiment is: imports neither sweep/ nor report/, and no torch
    sweep/    runs a spec: never imports report/
    report/   reads results and the typed spec

Circles (strongly connected components of more than one module) are listed; none may contain a
module of sweep/, report/ or spec/. The verbs' modules sweep/cli.py and report/cli.py are left out
of that rule: they are moving into the reslab.cli package, whose circle is removed there.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "reslab"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def _imported(node: ast.AST, name: str, is_package: bool) -> list[str]:
    """The absolute names one import statement of module `name` imports; graph() maps each to a
    module of the package (X.y, or X when y is a name inside it) or to an outside package."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        here = name.split(".") if is_package else name.split(".")[:-1]
        base = here[:len(here) - (node.level - 1)] if node.level > 1 else here
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    # `from X import y`: the module X.y when there is one (X is then only its package), else X
    return [f"{target}.{alias.name}" for alias in node.names]


def graph() -> dict[str, set[str]]:
    """module -> the modules of the package it imports anywhere in its text, plus the outside
    packages it imports, by their top-level name (torch, numpy, ...)."""
    known = modules()
    edges: dict[str, set[str]] = {}
    for name, path in known.items():
        out: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            for target in _imported(node, name, path.name == "__init__.py"):
                if target.split(".")[0] != PACKAGE:
                    out.add(target.split(".")[0])
                elif target in known:
                    out.add(target)
                elif target.rsplit(".", 1)[0] in known:  # from reslab.x import some_function
                    out.add(target.rsplit(".", 1)[0])
        out.discard(name)
        edges[name] = out
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        # recursion depth is the longest import chain: a few dozen modules
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
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
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def _in(module: str, layer: str) -> bool:
    prefix = f"{PACKAGE}.{layer}"
    return module == prefix or module.startswith(prefix + ".")


def _offending(edges, source: str, targets: tuple[str, ...]) -> list[str]:
    return sorted(f"{m} -> {t}" for m, out in edges.items() if _in(m, source)
                  for t in out if any(_in(t, x) if x != "torch" else t == "torch" for x in targets))


def test_graph_sees_imports_inside_functions(tmp_path, monkeypatch):
    """The reader is not blind to the imports that matter most here: ones inside functions, and
    relative ones of every level."""
    pkg = tmp_path / PACKAGE / "a"
    pkg.mkdir(parents=True)
    (tmp_path / PACKAGE / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from ..c import g\n    import torch\n")
    (tmp_path / PACKAGE / "c.py").write_text("from .a.b import f\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    edges = graph()
    assert edges["reslab.a.b"] == {"reslab.c", "torch"}
    assert edges["reslab.a"] == {"reslab.a.b"}
    assert circles(edges) == [["reslab.a.b", "reslab.c"]]


def test_sweep_never_imports_report():
    assert _offending(graph(), "sweep", ("report",)) == []


def test_spec_imports_neither_sweep_nor_report_nor_torch():
    edges = graph()
    assert any(_in(m, "spec") for m in edges), "no reslab.spec package"
    assert _offending(edges, "spec", ("sweep", "report", "torch")) == []


def test_no_circle_through_the_experiment_layers():
    through = [c for c in circles(graph()) if any(_in(m, x) for m in c for x in ("sweep", "report", "spec"))]
    assert through == []


@pytest.mark.parametrize("module", ["reslab.spec"])
def test_spec_loads_no_torch(module):
    """Planning a sweep, checking a spec and listing studies never wait for torch to load."""
    code = (f"import sys, importlib, pkgutil; import {module} as m; "
            "[importlib.import_module(i.name) for i in pkgutil.walk_packages(m.__path__, m.__name__ + '.')]; "
            "print(sorted(n for n in ('torch', 'scipy', 'matplotlib') if n in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC)})
    assert out.stdout.strip() == "[]"


# The one circle the package keeps: the zoo's designs register themselves with the registry, which
# imports the zoo so that every built-in design exists once the registry is loaded. Any other fails here.
KNOWN_CIRCLES = [["reslab.model.registry", "reslab.model.zoo"]]


def test_the_only_circle_is_the_registrys_self_registration():
    assert [c for c in circles(graph()) if c not in KNOWN_CIRCLES] == []
