"""`reslab sweep run|plan`, and the run options `reslab study run` shares."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..config_sources import parse_set
from .args import Parser, int_in
from .checks import check_run_folders, check_runs, check_spec_record
from .stores import add_store_arg, readable_store, writable_store

MAX_SEEDS = 1000   # --seeds: runs per variant; more would only make expanding the plan hang
MAX_JOBS = 10_000  # --jobs: workers (a Slurm array's parallelism at most)


def _spec(args):
    from ..spec.load import load_spec

    spec = load_spec(args.spec)
    return apply_run_options(spec, args)


def apply_run_options(spec, args):
    """--seeds N and --set KEY=VALUE (applied to every run) of `sweep run|plan` and `study run`."""
    from ..spec.expand import with_seeds
    from ..spec.grid import with_overrides

    if getattr(args, "set", None):
        spec = with_overrides(spec, parse_set(args.set))
    return with_seeds(spec, args.seeds) if args.seeds is not None else spec


def cmd_sweep_run(args) -> int:
    from ..sweep.runner import run_sweep
    from ..sweep.store import Store
    from ..spec.tune import tune_name
    from ..spec.tune_plan import all_planned, check_override_conflict

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
    from ..spec.expand import expand
    from ..spec.more_seeds import comparison_seeds
    from ..spec.tune import tune_name, values_text
    from ..spec.tune_plan import check_override_conflict, tuning_runs
    from ..sweep.store import Store
    from ..sweep.tune import plan

    spec = _spec(args)
    store = Store(readable_store(args))
    if not spec.tune:
        rows = plan_status(store, expand(spec, args.scale))
        _print_ladder(spec, args, [r for r, _, _ in rows])
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
    _print_ladder(spec, args, p.tuning + p.comparison, [c for c in p.choices if c.value is None])
    tuning, comparison = plan_status(store, p.tuning), plan_status(store, p.comparison)
    t = spec.tune
    if args.json:
        out = [dict(r.membership(), id=r.id, label=r.label, status=s, path=str(f), phase="tune")
               for r, f, s in tuning]
        out += [dict(r.membership(), id=r.id, label=r.label, status=s, path=str(f), phase="compare")
                for r, f, s in comparison]
        out += [{"spec": spec.name, "variant": c.variant, "scale": c.scale, "grid": c.grid, "seed": seed,
                 "id": None, "label": None, "status": "after tuning", "path": None, "phase": "compare"}
                for c in p.choices if c.value is None
                for seed in comparison_seeds(spec, c.scale, c.variant, c.grid)]
        print(json.dumps(out, indent=2))
        return
    values = values_text(t)
    seeds = ", ".join(map(str, t.seeds))
    at = ", ".join(sorted({r.scale for r in p.tuning} - {""}))
    grown = len(tuning) - len(tuning_runs(spec, args.scale))
    extend = (f"; tune.extend = {t.extend}: a row whose best is an end of its values tries up to {t.extend} more "
              f"beyond it ({grown} such runs so far)") if t.extend else ""
    print(f"tuning {tune_name(spec.name)}: {t.axis} in {values} x tuning seeds {seeds}"
          + (f" at scale {at}" if at else "") + f", {len(tuning)} runs{extend}")
    for run, folder, status in tuning:
        print(f"{run.id}  {status:<10} {run.label}")
    chosen = [c for c in p.choices if c.value is not None]
    if chosen:
        print(f"chosen so far ({t.metric}, mean over the tuning seeds; ties to the smaller value):")
        for c in chosen:
            row = "-".join([c.variant] + [f"{k}={v}" for k, v in c.grid.items()])
            print(f"  {(c.scale + ' ') if c.scale else ''}{row}: {t.axis} = {c.value:g}"
                  + (f" ({c.note})" if c.note else ""))
    print(f"comparison {spec.name}: {len(comparison)} runs known now")
    for run, folder, status in comparison:
        print(f"{run.id}  {status:<10} {run.label}")
    later = sum(p.after.values())
    for scale, n in p.after.items():
        rows = sum(1 for c in p.choices if c.value is None and c.scale == scale)
        seeds = f"{len(spec.seeds)} seeds" + (" and their [[more_seeds]]" if spec.more_seeds else "")
        print(f"planned after tuning: {n} comparison runs{f' at scale {scale}' if scale else ''} "
              f"({rows} rows x {seeds}), each row at its chosen {t.axis}")
    print(f"{len(tuning) + len(comparison) + later} runs: {len(tuning)} tuning, "
          f"{len(comparison) + later} comparison ({later} planned after tuning)", file=sys.stderr)


def _print_ladder(spec, args, runs: list, waiting: list | None = None) -> None:
    """The ladder's rungs, sizes, tokens and compute, on stderr (stdout keeps the run list).
    waiting: the tuning rows without a value yet, whose comparison runs are counted too."""
    from ..spec.expand import chosen_scales
    from ..spec.ladder import RUNG_AXIS, ladder_lines
    from ..spec.more_seeds import comparison_seeds

    if spec.ladder is None or args.json:
        return
    per_rung: dict = {}
    for run in runs:
        key = (run.scale, run.grid.get(RUNG_AXIS))
        per_rung[key] = per_rung.get(key, 0) + 1
    for c in waiting or []:
        key = (c.scale, c.grid.get(RUNG_AXIS))
        per_rung[key] = per_rung.get(key, 0) + len(comparison_seeds(spec, c.scale, c.variant, c.grid))
    for line in ladder_lines(spec, chosen_scales(spec, args.scale), per_rung):
        print(line, file=sys.stderr)


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


def add_parsers(sub) -> None:
    sw = sub.add_parser("sweep", help="run many runs declared in one spec file (variants x seeds x scales)")
    ssub = sw.add_subparsers(dest="sweep_verb", required=True, parser_class=Parser)
    for name, func, text in (("run", cmd_sweep_run, "train every unfinished run of a spec; rerun to resume"),
                             ("plan", cmd_sweep_plan, "list a spec's runs, their identities and status")):
        p = ssub.add_parser(name, help=text)
        p.add_argument("spec", help="sweep spec (TOML)")
        p.add_argument("--scale", action="append", help="run only this scale (repeatable)")
        add_run_options(p)
        add_store_arg(p)
        if name == "run":
            p.add_argument("--jobs", type=int_in("--jobs", 1, MAX_JOBS),
                           help="parallel workers (default: one per GPU, else one per core)")
            p.add_argument("--executor", choices=["local", "slurm", "submitit-local"], default="local",
                           help="local worker pool, a Slurm job array (submitit), or submitit's local executor")
            add_stack_options(p)
        else:
            p.add_argument("--json", action="store_true")
        p.set_defaults(func=func)
