"""`reslab study list | spec NAME | run NAME [--scale S] [--seeds N] [--jobs N]`."""

from __future__ import annotations

import copy
import functools
import sys

from ..errors import ReslabError
from . import load_study, study_names, study_path


def _estimate_line(spec, scale: str, runs: int, jobs: int) -> str:
    est = spec.study.estimates.get(scale) if spec.study else None
    if est is None:
        return f"{runs} runs; no cost estimate for scale {scale!r}"
    if est.cpu_minutes is not None:
        minutes = est.cpu_minutes * runs / est.runs * est.jobs / jobs
        return (f"{runs} runs, {jobs} workers: about {minutes:.0f} min on a 2-core CPU "
                f"({est.basis}: {est.cpu_minutes:g} min for {est.runs} runs with {est.jobs} workers)")
    hours = (est.gpu_hours or 0) * runs / est.runs
    return f"{runs} runs: about {hours:.3g} GPU-hours ({est.basis})"


def cmd_study_list(args) -> None:
    for name in study_names():
        spec = _load(name)
        info = spec.study
        print(name)
        print(f"  question: {spec.question}")
        if info:
            print(f"  source:   {info.source}")
            print(f"  designs:  {', '.join(info.designs)}")
        for scale in spec.scales:
            est = info.estimates.get(scale) if info else None
            cost = "no estimate"
            if est and est.cpu_minutes is not None:
                cost = f"~{est.cpu_minutes:g} CPU min ({est.runs} runs, {est.jobs} workers on 2 cores)"
            elif est and est.gpu_hours is not None:
                cost = f"~{est.gpu_hours:g} GPU h ({est.runs} runs)"
            print(f"  scale {scale:<11} {cost}")


@functools.lru_cache(maxsize=None)
def _parsed(name: str):
    return load_study(name)


def _load(name: str):
    """A built-in study's spec. Studies are package files, so each is parsed (and all its runs
    validated) once per process; callers get their own copy."""
    return copy.deepcopy(_parsed(_known(name)))


def _known(name: str) -> str:
    """A built-in study's name; a path (../presets/tiny) is no study, even if such a file exists."""
    if name not in study_names():
        raise ReslabError(f"unknown study {name!r}; choose one of {', '.join(study_names())} "
                          "(see `reslab study list`)")
    return name


def cmd_study_spec(args) -> None:
    sys.stdout.write(study_path(_known(args.name)).read_text())


def cmd_study_run(args) -> int:
    from ..report.build import build_report
    from ..report.render import write_report
    from ..sweep.cli import apply_run_options, check_run_folders, check_runs, check_spec_record, writable_store
    from ..sweep.runner import default_jobs, run_sweep
    from ..sweep.spec import expand
    from ..sweep.store import Store

    spec = _load(args.name)
    scale = args.scale if args.scale is not None else (spec.default_scales or list(spec.scales))[0]
    if scale not in spec.scales:
        raise ReslabError(f"--scale {scale}: study {args.name!r} has scales {', '.join(spec.scales)}")
    if args.seeds is None and spec.study and spec.study.seeds.get(scale):
        args.seeds = spec.study.seeds[scale]
    spec = apply_run_options(spec, args)
    runs = expand(spec, [scale])
    check_runs(runs, local=True)
    root = writable_store(args)  # before the estimate line: a refused study prints one line only
    jobs = args.jobs or default_jobs(runs)
    print(f"study {args.name}, scale {scale}: {_estimate_line(spec, scale, len(runs), jobs)}", file=sys.stderr)
    store = Store(root)
    check_spec_record(store, spec.name)
    check_run_folders(store)
    result = run_sweep(spec, store, jobs=jobs, scales=[scale], source=f"built-in study {args.name}",
                       stack=args.stack, stack_size=args.stack_size)
    report, out = build_report(store, spec.name, scale=scale)
    write_report(report, out)
    store.close()
    for line in summary_lines(report):
        print(line, file=sys.stderr)
    print(f"study {args.name}: {result.count('completed')} completed, {result.count('diverged')} diverged, "
          f"{result.count('failed')} failed; {result.wall_s / 60:.1f} min; report in {out}", file=sys.stderr)
    print(out)
    return 1 if result.count("failed") else 0


def summary_lines(report: dict) -> list[str]:
    """The report's main table as plain text for the terminal (the full report is in its folder)."""
    def loss(x):
        return "-" if x is None else f"{x:.4f}"
    rows = [("variant", "seeds", "best val loss", "vs baseline", "collapsed", "diverged")]
    for t in report["table"]:
        best = t["best"]
        spread = f" +- {best['std']:.4f}" if best.get("std") is not None else ""
        diff = "baseline" if t["is_baseline"] else (f"{t['diff']:+.4f}" if t["diff"] is not None else "-")
        rows.append((t["variant"], f"{t['n']}/{t['n_planned']}", loss(best["mean"]) + spread, diff,
                     str(t["collapsed"]), str(t["diverged"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [report["title"]] + ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def add_parsers(sub, parser_class) -> None:
    from ..sweep.cli import MAX_JOBS, add_run_options, add_stack_options, int_in

    st = sub.add_parser("study", help="the built-in studies: list them, print a spec, run one with its report")
    ssub = st.add_subparsers(dest="study_verb", required=True, parser_class=parser_class)
    ls = ssub.add_parser("list", help="each study's question, designs, scales and estimated cost")
    ls.set_defaults(func=cmd_study_list)
    sp = ssub.add_parser("spec", help="print a study's sweep spec (copy it to change it; run with `reslab sweep run`)")
    sp.add_argument("name")
    sp.set_defaults(func=cmd_study_spec)
    run = ssub.add_parser("run", help="run a study's sweep and write its report; prints the report folder last")
    run.add_argument("name")
    run.add_argument("--scale", help="tiny (CPU minutes) or paper (published setup, GPUs); default tiny")
    add_run_options(run)
    run.add_argument("--jobs", type=int_in("--jobs", 1, MAX_JOBS),
                     help="parallel workers (default: one per GPU, else one per core)")
    add_stack_options(run)
    run.add_argument("--store", help="results store (default: $RESLAB_STORE or ./results)")
    run.set_defaults(func=cmd_study_run)
