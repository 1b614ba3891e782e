"""Plugins: Python modules that register designs of their own (reslab.register_design).

They are found in three places, in this order, and each module is imported once per process:
    entry points   an installed package's pyproject declares
                       [project.entry-points."reslab.designs"]
                       my_design = "my_package.designs"        (a module, or "module:function")
    RESLAB_PLUGINS comma-separated module names, e.g. RESLAB_PLUGINS=my_designs,lab.blocks
    --plugin M     on any `reslab` verb (added to RESLAB_PLUGINS, so that the sweep workers a verb
                   starts in fresh processes load it too)

Loading is lazy: the registry loads the plugins the first time it meets a design name it does not
know, and the listings (`reslab variants`, reslab.designs()) load them first. A plugin that cannot
be imported is one line naming it.
"""

from __future__ import annotations

import importlib
import os

from .errors import ReslabError

ENTRY_POINT_GROUP = "reslab.designs"
ENV = "RESLAB_PLUGINS"

_loaded: set[str] = set()
_entry_points_done = False


def _import(name: str, where: str) -> None:
    module, _, attr = name.partition(":")
    if not module.strip() or not all(part.isidentifier() for part in module.strip().split(".")):
        raise ReslabError(f"{where}: {name!r} is not a Python module name")
    module = module.strip()
    try:
        obj = importlib.import_module(module)
        if attr:
            getattr(obj, attr.strip())()
    except ReslabError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure inside a user's module is one line naming it
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise ReslabError(f"{where}: plugin {name!r} cannot be loaded ({type(e).__name__}: {first})") from None


def env_modules() -> list[str]:
    return [m.strip() for m in os.environ.get(ENV, "").split(",") if m.strip()]


def load_plugins(modules: list[str] | tuple = ()) -> list[str]:
    """Import the entry-point plugins, RESLAB_PLUGINS and `modules` (each once); returns those imported now."""
    global _entry_points_done
    done = []
    if not _entry_points_done:
        _entry_points_done = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.value not in _loaded:
                _loaded.add(ep.value)
                _import(ep.value, f"entry point {ep.name!r} ({ENTRY_POINT_GROUP})")
                done.append(ep.value)
    for where, names in ((ENV, env_modules()), ("--plugin", list(modules))):
        for name in names:
            if name not in _loaded:
                _loaded.add(name)
                try:
                    _import(name, where)
                except ReslabError:
                    _loaded.discard(name)  # a fixed module can be retried in the same process
                    raise
                done.append(name)
    return done


def add_to_environment(modules: list[str]) -> None:
    """Put --plugin modules into RESLAB_PLUGINS, so that child processes (sweep workers) load them."""
    names = env_modules()
    names += [m for m in modules if m not in names]
    if names:
        os.environ[ENV] = ",".join(names)


def take_plugin_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """argv without its `--plugin M` / `--plugin=M` pairs (allowed before or after the verb), and the Ms."""
    rest, modules = [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest += argv[i:]
            break
        if arg == "--plugin":
            if i + 1 >= len(argv):
                raise ReslabError("--plugin: expected a module name, e.g. --plugin my_designs")
            modules.append(argv[i + 1])
            i += 2
            continue
        if arg.startswith("--plugin="):
            modules.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
        i += 1
    return rest, modules

