"""`reslab report SPEC_OR_STORE`: tables, statistics and figures of one sweep; `reslab compare RUNS`:
the same report for any runs."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import ReslabError
from .checks import check_spec_record
from .stores import readable_store, writable_store


def resolve_target(target: str, spec: str | None, store: str | None) -> tuple[Path, str]:
    """(store root, spec name) from a spec file (its store: --store, $RESLAB_STORE or ./results) or a
    store folder (its only sweep, or --spec)."""
    from ..fileio import check_path_text
    from ..spec.schema import NAME_RE

    path = check_path_text(target, "SPEC_OR_STORE")
    if path.is_file():
        from ..spec.load import load_spec

        from types import SimpleNamespace

        return readable_store(SimpleNamespace(store=store)), load_spec(path).name
    if spec is not None and not NAME_RE.match(spec):  # it names specs/<spec>.json: no paths
        raise ReslabError(f"--spec {spec!r}: not a sweep name (letters, digits, '_', '.', '+', '-')")
    if path.is_dir():
        names = sorted(p.stem for p in (path / "specs").glob("*.json"))
        if spec is not None:
            return path, spec
        if len(names) == 1:
            return path, names[0]
        if not names:
            raise ReslabError(f"{target}: no sweep has been run into this store")
        raise ReslabError(f"{target}: holds several sweeps ({', '.join(names)}); pick one with --spec")
    raise ReslabError(f"{target}: neither a spec file nor a results store folder")


def cmd_report(args) -> None:
    from ..fileio import check_output_dir
    from ..report.build import build_report
    from ..report.render import render_markdown, write_report
    from ..sweep.store import Store

    root, name = resolve_target(args.target, args.spec, args.store)
    store = Store(root)
    if not store.db_path.is_file():
        raise ReslabError(f"{root}: no index here; run the sweep first (or `reslab runs reindex --store {root}`)")
    store.load_spec_record(name)  # an unknown --spec: one line listing the store's sweeps
    check_spec_record(store, name)
    check_output_dir(args.out if args.out is not None else root / "reports", "--out" if args.out is not None
                     else "report folder")
    report, out = build_report(store, name, scale=args.scale, out_dir=args.out, probe=not args.no_probe)
    paths = write_report(report, out)
    if args.format == "json":
        print(paths["json"].read_text(), end="")  # the strict JSON write_report wrote
        return
    if args.format == "md":
        print(render_markdown(report))
    print(out, file=sys.stdout if args.format == "path" else sys.stderr)


def cmd_compare(args) -> None:
    from ..fileio import check_output_dir
    from ..report.compare import compare
    from ..report.render import render_markdown, write_report
    from ..sweep.store import Store

    store = Store(writable_store(args))
    if args.out is not None:
        check_output_dir(args.out, "--out")
    try:
        report, out = compare(args.runs, store, by=args.by, baseline=args.baseline, out_dir=args.out)
        paths = write_report(report, out)
    finally:
        store.close()
    if args.format == "json":
        print(paths["json"].read_text(), end="")
        return
    if args.format == "md":
        print(render_markdown(report))
    print(out, file=sys.stdout if args.format == "path" else sys.stderr)


def add_parsers(sub) -> None:
    r = sub.add_parser("report", help="tables, statistics and figures of a sweep (report.md, report.html)")
    r.add_argument("target", help="a sweep spec file, or a results store folder")
    r.add_argument("--spec", help="which sweep of a store folder")
    r.add_argument("--store", help="the store a spec file ran into (default: $RESLAB_STORE or ./results)")
    r.add_argument("--scale", help="which scale, when the sweep ran several")
    r.add_argument("--out", help="report folder (default: <store>/reports/<spec>[-<scale>])")
    r.add_argument("--format", choices=["path", "md", "json"], default="path",
                   help="print the report folder (default), the Markdown, or the JSON for machines")
    r.add_argument("--no-probe", action="store_true", help="skip the init-time probe a study asks for")
    r.set_defaults(func=cmd_report)

    c = sub.add_parser("compare", help="the same report for any runs (folders or identities), grouped by a config field")
    c.add_argument("runs", nargs="+", help="run folders, or run identities (or their first digits) in the store")
    c.add_argument("--by", default="model.design", help="config field whose value names a row (default model.design)")
    c.add_argument("--baseline", help="the row the others are tested against (default pre-ln, else the first)")
    c.add_argument("--store", help="the store that records the comparison (default: $RESLAB_STORE or ./results)")
    c.add_argument("--out", help="report folder (default: <store>/reports/compare-<hash>-compare)")
    c.add_argument("--format", choices=["path", "md", "json"], default="path")
    c.set_defaults(func=cmd_compare)
