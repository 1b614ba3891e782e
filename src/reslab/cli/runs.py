"""`reslab runs [list|reindex|export]`: the runs a results store lists."""

from __future__ import annotations

import json
import sys

from ..errors import ReslabError
from .args import Parser
from .checks import check_run_folders
from .stores import add_store_arg, readable_store, store_flag, store_root, writable_store

STATUSES = ("completed", "diverged", "failed", "running", "interrupted", "pending")


def _indexed_runs(args) -> list[dict]:
    """The index rows a `runs` verb's filters select. A --status that no run can have, or a --spec
    this store never ran, is refused: an empty list would look like an answer."""
    from ..sweep.store import Store

    if args.status is not None and args.status not in STATUSES:
        raise ReslabError(f"--status {args.status!r}: not a run status; choose one of {', '.join(STATUSES)}")
    store = Store(readable_store(args))
    if not store.db_path.is_file():
        raise ReslabError(f"{store.root}: no index here (run a sweep, or `reslab runs reindex --store {store.root}`)")
    if args.spec is not None:
        known = sorted(p.stem for p in store.specs_dir.glob("*.json")) if store.specs_dir.is_dir() else []
        if args.spec not in known:
            raise ReslabError(f"--spec {args.spec!r}: no sweep of that name in {store.root} "
                              f"(it has: {', '.join(known) or 'none'})")
    return store.mark_planned(store.runs(spec=args.spec, variant=args.variant, status=args.status))


def cmd_runs(args) -> None:
    rows = _indexed_runs(args)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for r in rows:
        best = f"{r['best_val_loss']:.4f}" if r["best_val_loss"] is not None else "-"
        spec, variant, seed = r["spec"], r["variant"], r["seed"]
        if spec is None:  # a single run of `reslab train`: no sweep, its design and its own seed
            spec, variant = "(train)", r.get("design")
            seed = (json.loads(r.get("config") or "{}").get("train") or {}).get("seed")
        earlier = "  (an earlier plan's run: its sweep now plans another here)" if r["planned"] is False else ""
        print(f"{r['id']}  {r['status'] or '-':<11} {str(spec):<20} {str(variant):<18} "
              f"seed {str(seed):<6} best {best:<8} {r['path']}{earlier}")
    print(f"{len(rows)} runs", file=sys.stderr)


def cmd_runs_reindex(args) -> None:
    from ..sweep.store import Store

    root = writable_store(args)
    if not root.is_dir():  # reindexing nothing is a typo in the path, not a new empty store
        raise ReslabError(f"{store_flag(args)} {root}: no such results store folder")
    store = Store(root)
    check_run_folders(store)
    n = store.reindex()
    print(f"indexed {n} run folders into {store_root(args) / 'index.sqlite'}", file=sys.stderr)


def cmd_runs_export(args) -> None:
    from ..fileio import check_output_dir
    from ..sweep.export import export

    # OUT_DIR first: a refused export must not have opened (and so written journal files into) the store
    check_output_dir(args.out, "OUT_DIR")
    runs = _indexed_runs(args)
    for path in export(runs, args.out, args.format, curves=not args.no_curves):
        print(path)


def add_parsers(sub) -> None:
    r = sub.add_parser("runs", help="list the runs of a results store (filter by spec, variant, status)")
    add_store_arg(r)
    for p in (r,):
        p.add_argument("--spec")
        p.add_argument("--variant")
        p.add_argument("--status", help=", ".join(STATUSES))
        p.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_runs)
    rsub = r.add_subparsers(dest="runs_verb", parser_class=Parser)
    ri = rsub.add_parser("reindex", help="rebuild index.sqlite from the run folders")
    add_store_arg(ri)
    ri.set_defaults(func=cmd_runs_reindex)
    re_ = rsub.add_parser("export", help="write runs and metric curves as CSV or Parquet")
    add_store_arg(re_)
    re_.add_argument("out", help="output folder (runs.<fmt>, curves.<fmt>)")
    re_.add_argument("--format", choices=["csv", "parquet"], default="csv")
    re_.add_argument("--no-curves", action="store_true", help="only the runs table")
    re_.add_argument("--spec")
    re_.add_argument("--variant")
    re_.add_argument("--status")
    re_.set_defaults(func=cmd_runs_export)
