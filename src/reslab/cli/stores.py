"""The results store a verb reads or writes: --store, else $RESLAB_STORE, else ./results. A store
that cannot be written (or read) is refused before the verb does anything."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_STORE = "results"


def _store_text(args) -> str:
    return args.store if args.store is not None else os.environ.get("RESLAB_STORE") or DEFAULT_STORE


def store_root(args) -> Path:
    return Path(_store_text(args))


def store_flag(args) -> str:
    """How the user named the store, for error lines: --store, $RESLAB_STORE or the default."""
    if args.store is not None:
        return "--store"
    return "$RESLAB_STORE" if os.environ.get("RESLAB_STORE") else "results store"


def writable_store(args) -> Path:
    """The store a verb will write into, refused before anything is written if it cannot be."""
    from ..fileio import check_output_dir

    return check_output_dir(_store_text(args), store_flag(args))


def readable_store(args) -> Path:
    """The store a verb only reads: it may be missing (nothing in it yet), never a file."""
    from ..fileio import check_not_a_file

    return check_not_a_file(_store_text(args), store_flag(args))


def add_store_arg(p) -> None:
    """--store of `sweep` and `runs`."""
    p.add_argument("--store", help=f"results store folder (default: $RESLAB_STORE or ./{DEFAULT_STORE})")
