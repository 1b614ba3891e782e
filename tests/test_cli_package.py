"""The CLI is one package that only its entry points import, read from the source (ast), not by running it:
- no module of reslab.cli but root.py (and the package's __init__/__main__, which expose its main)
  imports reslab.cli.root, or the package itself (whose __init__ imports root);
- no module outside reslab.cli imports it: library code, bench/ and examples/ call library
  functions, never the CLI (reslab/__main__.py, the `python -m reslab` entry point, is the exception);
- pyproject's console script is reslab.cli.main.
That neither the CLI nor plugins.py sits in an import circle is tests/test_import_graph.py's rule
(the one circle left is the registry's self-registration)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
CLI = "reslab.cli"
ENTRY_POINTS = {"reslab.cli", "reslab.cli.__main__", "reslab.cli.root", "reslab.__main__"}


def _name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p, SRC): p for p in (SRC / "reslab").rglob("*.py")}


def imported(path: Path, module: str) -> set[str]:
    """What a file imports, as reslab module names: `from X import n` is X.n when that is a module,
    else X (a name out of X's namespace runs X, a package's __init__ included)."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[:len(module.split(".")) - node.level + (1 if is_package else 0)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for a in node.names:
                out.add(f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source)
    return {m for m in out if m == "reslab" or m.startswith("reslab.")}


def _is_cli(name: str) -> bool:
    return name == CLI or name.startswith(CLI + ".")


def test_the_names_are_read_right():
    """The reader's own check: root's relative imports of its verbs and args resolve to their modules."""
    found = imported(MODULES["reslab.cli.root"], "reslab.cli.root")
    assert {"reslab.cli.sweep", "reslab.cli.args", "reslab.errors"} <= found
    assert imported(MODULES["reslab.cli"], "reslab.cli") == {"reslab.cli.root"}


def test_no_module_of_the_cli_but_its_entry_points_imports_root():
    offenders = {name: sorted(found & {CLI, CLI + ".root"})
                 for name, path in MODULES.items() if _is_cli(name) and name not in ENTRY_POINTS
                 for found in [imported(path, name)] if found & {CLI, CLI + ".root"}}
    assert offenders == {}


def test_nothing_outside_the_cli_imports_it():
    files = {name: path for name, path in MODULES.items() if not _is_cli(name) and name not in ENTRY_POINTS}
    for folder in ("bench", "examples"):
        files |= {str(p.relative_to(ROOT)): p for p in (ROOT / folder).rglob("*.py")}
    offenders = {name: sorted(m for m in imported(path, name) if _is_cli(m))
                 for name, path in files.items() if any(_is_cli(m) for m in imported(path, name))}
    assert offenders == {}


def test_the_console_script_is_the_cli_main():
    import importlib
    import tomllib

    import reslab.cli

    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["reslab"]
    module, _, attr = target.partition(":")
    assert getattr(importlib.import_module(module), attr) is reslab.cli.main
