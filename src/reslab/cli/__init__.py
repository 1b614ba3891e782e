"""The `reslab` command, one package: root.py (the root parser, main and its error handling),
args.py (the parser class and flag types the verbs share), stores.py (--store), checks.py (what a
verb checks before it writes), and one module per verb family. Only this file and __main__.py
import root; the verb modules import args, stores, checks and each other, never root."""

from .root import main

__all__ = ["main"]
