"""`reslab sweep run|plan` and `reslab runs [list|reindex|export]`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..errors import ReslabError

DEFAULT_STORE = "results"


def store_root(args) -> Path:
    return Path(args.store or os.environ.get("RESLAB_STORE") or DEFAULT_STORE)


def _spec(args):
    from .spec import load_spec

    spec = load_spec(args.spec)
    return apply_run_options(spec, args)


def apply_run_options(spec, args):
    """--seeds N and --set KEY=VALUE (applied to every run) of `sweep run|plan` and `study run`."""
    from ..cli import parse_set
    from .spec import with_overrides, with_seeds

    if getattr(args, "set", None):
        spec = with_overrides(spec, parse_set(args.set))
    return with_seeds(spec, args.seeds) if args.seeds is not None else spec


def cmd_sweep_run(args) -> int:
    from .runner import run_sweep
    from .store import Store

    spec = _spec(args)
    store = Store(store_root(args))
    result = run_sweep(spec, store, jobs=args.jobs, scales=args.scale, executor=args.executor,
                       source=str(Path(args.spec).resolve()), stack=args.stack, stack_size=args.stack_size)
    store.close()
    print(f"sweep {spec.name}: {result.count('completed')} completed, {result.count('diverged')} diverged, "
          f"{result.count('failed')} failed ({result.skipped} were already finished); "
          f"{result.wall_s:.0f} s", file=sys.stderr)
    print(store.root)
    return 1 if result.count("failed") or result.count("busy") else 0


def cmd_sweep_plan(args) -> None:
    from .runner import plan_status
    from .spec import expand
    from .store import Store

    spec = _spec(args)
    rows = plan_status(Store(store_root(args)), expand(spec, args.scale))
    if args.json:
        print(json.dumps([dict(r.membership(), id=r.id, label=r.label, status=s, path=str(f))
                          for r, f, s in rows], indent=2))
        return
    for run, folder, status in rows:
        print(f"{run.id}  {status:<10} {run.label}")
    print(f"{len(rows)} runs", file=sys.stderr)


def _indexed_runs(args) -> list[dict]:
    """The index rows a `runs` verb's filters select."""
    from .store import Store

    store = Store(store_root(args))
    if not store.db_path.is_file():
        raise ReslabError(f"{store.root}: no index here (run a sweep, or `reslab runs reindex --store {store.root}`)")
    return store.runs(spec=args.spec, variant=args.variant, status=args.status)


def cmd_runs(args) -> None:
    rows = _indexed_runs(args)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for r in rows:
        best = f"{r['best_val_loss']:.4f}" if r["best_val_loss"] is not None else "-"
        print(f"{r['id']}  {r['status'] or '-':<11} {str(r['spec']):<20} {str(r['variant']):<18} "
              f"seed {str(r['seed']):<6} best {best:<8} {r['path']}")
    print(f"{len(rows)} runs", file=sys.stderr)


def cmd_runs_reindex(args) -> None:
    from .store import Store

    n = Store(store_root(args)).reindex()
    print(f"indexed {n} run folders into {store_root(args) / 'index.sqlite'}", file=sys.stderr)


def cmd_runs_export(args) -> None:
    from .export import export

    for path in export(_indexed_runs(args), args.out, args.format, curves=not args.no_curves):
        print(path)


def add_stack_options(p) -> None:
    p.add_argument("--stack", choices=["auto", "always", "never"], default="auto",
                   help="train the seeds of one design stacked in one worker process: auto = on GPUs only")
    p.add_argument("--stack-size", type=int, default=8, metavar="K", help="at most K seeds per stack (default 8)")


def add_run_options(p) -> None:
    p.add_argument("--seeds", type=int, help="use N seeds (the spec's first N, extended if N is larger)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override every run's config, applied last, e.g. --set train.device=cuda (repeatable)")


def add_parsers(sub, parser_class) -> None:
    def store_arg(p):
        p.add_argument("--store", help=f"results store folder (default: $RESLAB_STORE or ./{DEFAULT_STORE})")

    sw = sub.add_parser("sweep", help="run many runs declared in one spec file (variants x seeds x scales)")
    ssub = sw.add_subparsers(dest="sweep_verb", required=True, parser_class=parser_class)
    for name, func, text in (("run", cmd_sweep_run, "train every unfinished run of a spec; rerun to resume"),
                             ("plan", cmd_sweep_plan, "list a spec's runs, their identities and status")):
        p = ssub.add_parser(name, help=text)
        p.add_argument("spec", help="sweep spec (TOML)")
        p.add_argument("--scale", action="append", help="run only this scale (repeatable)")
        add_run_options(p)
        store_arg(p)
        if name == "run":
            p.add_argument("--jobs", type=int, help="parallel workers (default: one per GPU, else one per core)")
            p.add_argument("--executor", choices=["local", "slurm", "submitit-local"], default="local",
                           help="local worker pool, a Slurm job array (submitit), or submitit's local executor")
            add_stack_options(p)
        else:
            p.add_argument("--json", action="store_true")
        p.set_defaults(func=func)

    r = sub.add_parser("runs", help="list the runs of a results store (filter by spec, variant, status)")
    store_arg(r)
    for p in (r,):
        p.add_argument("--spec")
        p.add_argument("--variant")
        p.add_argument("--status", help="completed, diverged, failed, running, interrupted, pending")
        p.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_runs)
    rsub = r.add_subparsers(dest="runs_verb", parser_class=parser_class)
    ri = rsub.add_parser("reindex", help="rebuild index.sqlite from the run folders")
    store_arg(ri)
    ri.set_defaults(func=cmd_runs_reindex)
    re_ = rsub.add_parser("export", help="write runs and metric curves as CSV or Parquet")
    store_arg(re_)
    re_.add_argument("out", help="output folder (runs.<fmt>, curves.<fmt>)")
    re_.add_argument("--format", choices=["csv", "parquet"], default="csv")
    re_.add_argument("--no-curves", action="store_true", help="only the runs table")
    re_.add_argument("--spec")
    re_.add_argument("--variant")
    re_.add_argument("--status")
    re_.set_defaults(func=cmd_runs_export)
