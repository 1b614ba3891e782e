"""`reslab sweep run|plan` and `reslab runs [list|reindex|export]`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from .root import int_in
from ..errors import ReslabError

DEFAULT_STORE = "results"
MAX_SEEDS = 1000   # --seeds: runs per variant; more would only make expanding the plan hang
MAX_JOBS = 10_000  # --jobs: workers (a Slurm array's parallelism at most)


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


RECORD_RUN_KEYS = {"variant": str, "scale": str, "grid": dict, "seed": int, "id": str, "label": str}
MEMBER_KEYS = {"spec": str, "variant": str, "scale": str, "grid": dict, "seed": int}


def _rows_problem(rows, kinds: dict, where: str) -> str | None:
    """The first row of a JSON list that is not an object with these keys of these types, as
    'where[i].key: problem' (a bool is no int here, though Python says it is)."""
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            return f"{where}[{i}]: expected an object"
        for key, kind in kinds.items():
            value = row.get(key)
            if not isinstance(value, kind) or isinstance(value, bool):
                return f"{where}[{i}].{key}: expected {kind.__name__}, got {value!r}"
    return None


def check_spec_record(store, name: str) -> None:
    """specs/<name>.json, as a sweep wrote it (its spec and planned runs), checked before a sweep
    rewrites it or a report reads it: a hand-edited or damaged record is one line naming its key."""
    from ..errors import ConfigError
    from ..fileio import read_json
    from ..typed import from_dict
    from ..sweep.spec import SweepSpec

    path = store.specs_dir / f"{name}.json"
    if not path.exists():
        return
    record = read_json(path, "sweep record")
    problem = None
    if not isinstance(record.get("spec"), dict):
        problem = "spec: expected an object"
    elif not isinstance(record.get("runs"), list):
        problem = "runs: expected a list"
    else:
        try:
            from_dict(SweepSpec, record["spec"], prefix="spec")
        except ConfigError as e:
            problem = e.errors[0]
        problem = problem or _rows_problem(record["runs"], RECORD_RUN_KEYS, "runs")
    if problem:
        raise ReslabError(f"{path}: {problem}; the sweep record is damaged (rerun the sweep to rewrite it)")


def check_runs(runs, local: bool) -> None:
    """What the sweep's runs need before it writes anything, checked once instead of failing every
    run: their data files and cache (prepared here, before the workers start) and, for local
    workers, what this machine must offer (a CUDA device, bf16 autocast, a compiler for
    train.compile; Slurm runs are checked on their own machines)."""
    from ..train.loop import preflight

    seen = set()
    for run in runs:
        t, d = run.config.train, run.config.data
        key = (t.device, t.dtype, t.compile, d.corpus, d.path, d.tokenizer, d.tokenizer_path, d.cache_dir)
        if key in seen:
            continue
        seen.add(key)
        try:
            check_data_files(run.config)
            if local:
                preflight(run.config)
        except ReslabError as e:
            raise ReslabError(f"{run.label}: {e}") from None


def check_data_files(cfg) -> None:
    """The files a run's data preparation reads, and the cache it writes."""
    from ..data.config import cache_root
    from ..fileio import check_output_dir

    d = cfg.data
    for name, path, needed in (("data.path", d.path, d.corpus == "text"),
                               ("data.tokenizer_path", d.tokenizer_path, d.tokenizer == "hf")):
        if needed and path and not Path(path).expanduser().is_file():
            raise ReslabError(f"{name}: {path}: no such file")
    check_output_dir(cache_root(d), "data.cache_dir" if d.cache_dir else "data cache")


def _spec(args):
    from ..sweep.spec import load_spec

    spec = load_spec(args.spec)
    return apply_run_options(spec, args)


def apply_run_options(spec, args):
    """--seeds N and --set KEY=VALUE (applied to every run) of `sweep run|plan` and `study run`."""
    from .root import parse_set
    from ..sweep.spec import with_overrides, with_seeds

    if getattr(args, "set", None):
        spec = with_overrides(spec, parse_set(args.set))
    return with_seeds(spec, args.seeds) if args.seeds is not None else spec


def cmd_sweep_run(args) -> int:
    from ..sweep.runner import run_sweep
    from ..sweep.store import Store
    from ..sweep.tune import all_planned, check_override_conflict, tune_name

    spec = _spec(args)
    check_override_conflict(spec, args.scale)
    check_runs(all_planned(spec, args.scale)[0], local=args.executor == "local")
    store = Store(writable_store(args))
    check_spec_record(store, spec.name)
    if spec.tune:
        check_spec_record(store, tune_name(spec.name))
    check_run_folders(store)  # the sweep reads every existing run folder of the store
    result = run_sweep(spec, store, jobs=args.jobs, scales=args.scale, executor=args.executor,
                       source=str(Path(args.spec).resolve()), stack=args.stack, stack_size=args.stack_size)
    store.close()
    print(f"sweep {spec.name}: {result.count('completed')} completed, {result.count('diverged')} diverged, "
          f"{result.count('failed')} failed ({result.skipped} were already finished); "
          f"{result.wall_s:.0f} s", file=sys.stderr)
    print(store.root)
    return 1 if result.count("failed") or result.count("busy") else 0


def cmd_sweep_plan(args) -> None:
    from ..sweep.runner import plan_status
    from ..sweep.spec import expand
    from ..sweep.store import Store
    from ..sweep.more_seeds import comparison_seeds
    from ..sweep.tune import check_override_conflict, plan, tune_name, tuning_runs, values_text

    spec = _spec(args)
    store = Store(readable_store(args))
    if not spec.tune:
        rows = plan_status(store, expand(spec, args.scale))
        if args.json:
            print(json.dumps([dict(r.membership(), id=r.id, label=r.label, status=s, path=str(f))
                              for r, f, s in rows], indent=2))
            return
        for run, folder, status in rows:
            print(f"{run.id}  {status:<10} {run.label}")
        print(f"{len(rows)} runs", file=sys.stderr)
        return
    # [tune]: the tuning runs first; the comparison runs of a tuning scale are known (and listed)
    # only once its tuning runs have finished, before that they are counted
    check_override_conflict(spec, args.scale)
    p = plan(spec, store, args.scale)
    tuning, comparison = plan_status(store, p["tuning"]), plan_status(store, p["comparison"])
    t = spec.tune
    if args.json:
        out = [dict(r.membership(), id=r.id, label=r.label, status=s, path=str(f), phase="tune")
               for r, f, s in tuning]
        out += [dict(r.membership(), id=r.id, label=r.label, status=s, path=str(f), phase="compare")
                for r, f, s in comparison]
        out += [{"spec": spec.name, "variant": c["variant"], "scale": c["scale"], "grid": c["grid"], "seed": seed,
                 "id": None, "label": None, "status": "after tuning", "path": None, "phase": "compare"}
                for c in p["choices"] if c["value"] is None
                for seed in comparison_seeds(spec, c["scale"], c["variant"], c["grid"])]
        print(json.dumps(out, indent=2))
        return
    values = values_text(t)
    seeds = ", ".join(map(str, t.seeds))
    at = ", ".join(sorted({r.scale for r in p["tuning"]} - {""}))
    grown = len(tuning) - len(tuning_runs(spec, args.scale))
    extend = (f"; tune.extend = {t.extend}: a row whose best is an end of its values tries up to {t.extend} more "
              f"beyond it ({grown} such runs so far)") if t.extend else ""
    print(f"tuning {tune_name(spec.name)}: {t.axis} in {values} x tuning seeds {seeds}"
          + (f" at scale {at}" if at else "") + f", {len(tuning)} runs{extend}")
    for run, folder, status in tuning:
        print(f"{run.id}  {status:<10} {run.label}")
    chosen = [c for c in p["choices"] if c["value"] is not None]
    if chosen:
        print(f"chosen so far ({t.metric}, mean over the tuning seeds; ties to the smaller value):")
        for c in chosen:
            row = "-".join([c["variant"]] + [f"{k}={v}" for k, v in c["grid"].items()])
            print(f"  {(c['scale'] + ' ') if c['scale'] else ''}{row}: {t.axis} = {c['value']:g}"
                  + (f" ({c['note']})" if c["note"] else ""))
    print(f"comparison {spec.name}: {len(comparison)} runs known now")
    for run, folder, status in comparison:
        print(f"{run.id}  {status:<10} {run.label}")
    later = sum(p["after"].values())
    for scale, n in p["after"].items():
        rows = sum(1 for c in p["choices"] if c["value"] is None and c["scale"] == scale)
        seeds = f"{len(spec.seeds)} seeds" + (" and their [[more_seeds]]" if spec.more_seeds else "")
        print(f"planned after tuning: {n} comparison runs{f' at scale {scale}' if scale else ''} "
              f"({rows} rows x {seeds}), each row at its chosen {t.axis}")
    print(f"{len(tuning) + len(comparison) + later} runs: {len(tuning)} tuning, "
          f"{len(comparison) + later} comparison ({later} planned after tuning)", file=sys.stderr)


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
    return store.runs(spec=args.spec, variant=args.variant, status=args.status)


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
        print(f"{r['id']}  {r['status'] or '-':<11} {str(spec):<20} {str(variant):<18} "
              f"seed {str(seed):<6} best {best:<8} {r['path']}")
    print(f"{len(rows)} runs", file=sys.stderr)


def _member_problem(meta) -> str | None:
    """What is wrong with a run folder's sweep.json for the index, as 'key: problem', or None."""
    if not isinstance(meta.get("id"), str):
        return f"id: expected a string, got {meta.get('id')!r}"
    if not isinstance(meta.get("config", {}), dict):
        return "config: expected an object"
    members = meta.get("members", [])
    if not isinstance(members, list):
        return "members: expected a list"
    return _rows_problem(members, MEMBER_KEYS, "members")


def check_run_folders(store) -> None:
    """Every run folder the index is rebuilt from, checked first: a damaged sweep.json or status.json
    is one line naming it, and the old index stays as it was."""
    from ..fileio import read_json

    for run_dir in sorted(store.runs_dir.glob("*")) if store.runs_dir.is_dir() else []:
        sweep_file, status_file = run_dir / "sweep.json", run_dir / "status.json"
        if not sweep_file.is_file():
            continue  # not a sweep's run: the index leaves it out
        problem = _member_problem(read_json(sweep_file, "sweep membership"))
        if problem:
            raise ReslabError(f"{sweep_file}: {problem}; repair it or move the run folder out of the store")
        if status_file.exists():
            try:
                status = json.loads(status_file.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                continue  # the index reads an unreadable status as "pending"
            if not isinstance(status, dict):
                raise ReslabError(f"{status_file}: expected a JSON object, got {type(status).__name__}")


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

    runs = _indexed_runs(args)
    check_output_dir(args.out, "OUT_DIR")
    for path in export(runs, args.out, args.format, curves=not args.no_curves):
        print(path)


def add_stack_options(p) -> None:
    p.add_argument("--stack", choices=["auto", "always", "never"], default="auto",
                   help="train the seeds of one design stacked in one worker process: auto = on GPUs only")
    p.add_argument("--stack-size", type=int_in("--stack-size", 1, 1024), default=8, metavar="K",
                   help="at most K seeds per stack (default 8)")


def add_run_options(p) -> None:
    p.add_argument("--seeds", type=int_in("--seeds", 1, MAX_SEEDS),
                   help="use N seeds (the spec's first N, extended if N is larger)")
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
            p.add_argument("--jobs", type=int_in("--jobs", 1, MAX_JOBS),
                           help="parallel workers (default: one per GPU, else one per core)")
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
        p.add_argument("--status", help=", ".join(STATUSES))
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
