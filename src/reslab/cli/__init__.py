"""The `reslab` command, one package (root.py: the root parser and main)."""

from .root import main

__all__ = ["main"]
