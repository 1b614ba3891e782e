"""Package attributes imported on first use (PEP 562), so that importing a package costs nothing
until one of its names is needed (`reslab --help` imports no torch, numpy or matplotlib)."""

from __future__ import annotations

import importlib


def lazy_getattr(package: str, where: dict[str, str]):
    """A module __getattr__ for `package`: name -> the submodule (relative) that defines it."""
    def __getattr__(name: str):
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{where[name]}", package), name)
        setattr(importlib.import_module(package), name, value)
        return value
    return __getattr__
