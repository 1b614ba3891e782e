"""`reslab study list | spec NAME | run NAME [--scale S] [--seeds N] [--jobs N]`."""

from __future__ import annotations

import copy
import functools
import sys

from ..errors import ReslabError
from ..studies import load_study, study_names, study_path
from .args import Parser, int_in
from .checks import check_run_folders, check_runs, check_spec_record
from .stores import writable_store
from .sweep import MAX_JOBS, add_run_options, add_stack_options, apply_run_options


def _estimate_line(spec, scale: str, runs: int, jobs: int, tuning: int = 0, extension: int = 0) -> str:
    """The study's cost before it starts. `runs`: its comparison runs, `tuning`: its [tune] runs
    (an estimate's `runs` counts both, as the whole study trains both), `extension`: the most
    tuning runs tune.extend may add (rows whose best is an end of the grid; not in the estimate)."""
    total = runs + tuning
    count = f"{total} runs ({tuning} tuning, {runs} comparison)" if tuning else f"{runs} runs"
    more = ""
    if extension:
        count += f" and up to {extension} more"
        more = (f"; up to {extension} more tuning runs if rows' best values sit at an end of the grid "
                f"(tune.extend = {spec.tune.extend}), at about the same cost each")
    est = spec.study.estimates.get(scale) if spec.study else None
    if est is None:
        return f"{count}; no cost estimate for scale {scale!r}{more}"
    if est.cpu_minutes is not None:
        minutes = est.cpu_minutes * total / est.runs * est.jobs / jobs
        return (f"{count}, {jobs} workers: about {minutes:.0f} min on a 2-core CPU "
                f"({est.basis}: {est.cpu_minutes:g} min for {est.runs} runs with {est.jobs} workers){more}")
    if est.gpu_hours is None:  # a scale whose cost is yet to be measured
        return f"{count}: cost not measured yet ({est.basis or 'no figure'})"
    hours = est.gpu_hours * total / est.runs
    return f"{count}: about {hours:.3g} GPU-hours ({est.basis})"


def cmd_study_list(args) -> None:
    from ..spec.ladder import rung_sizes
    from ..spec.tune_plan import most_extension_runs

    for name in study_names():
        spec = _load(name)
        info = spec.study
        print(name)
        print(f"  question: {spec.question}")
        if info:
            print(f"  source:   {info.source}")
            print(f"  designs:  {', '.join(info.designs)}")
        if spec.ladder:
            print(f"  ladder:   {spec.ladder.over or 'rungs'} (a scale ladder: its report rules on trends over size)")
        for scale in spec.scales:
            est = info.estimates.get(scale) if info else None
            cost = "no estimate"
            if est and est.cpu_minutes is not None:
                cost = f"~{est.cpu_minutes:g} CPU min ({est.runs} runs, {est.jobs} workers on 2 cores)"
                if not est.basis.startswith("measured"):  # say when a figure is not a measurement
                    cost += f"; {est.basis}"
            elif est and est.gpu_hours is not None:
                cost = f"~{est.gpu_hours:g} GPU h ({est.runs} runs)"
            more = most_extension_runs(spec, [scale]) if spec.tune and spec.tune.tunes(scale) else 0
            if more:
                cost += f"; up to {more} more tuning runs where a row's best is an end of the grid (tune.extend)"
            print(f"  scale {scale:<11} {cost}")
            sizes = rung_sizes(spec, scale) if spec.ladder else {}
            if sizes:
                print(f"  {'':<17} rungs " + ", ".join(f"{r} ({n:,} weights)" for r, n in sizes.items()))


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
    from ..sweep.runner import default_jobs, run_sweep
    from ..sweep.store import Store
    from ..spec.tune import tune_name
    from ..spec.tune_plan import all_planned, check_override_conflict, most_extension_runs, tuning_runs

    spec = _load(args.name)
    scale = args.scale if args.scale is not None else (spec.default_scales or list(spec.scales))[0]
    if scale not in spec.scales:
        raise ReslabError(f"--scale {scale}: study {args.name!r} has scales {', '.join(spec.scales)}")
    if args.seeds is None and spec.study and spec.study.seeds.get(scale):
        args.seeds = spec.study.seeds[scale]
    spec = apply_run_options(spec, args)
    check_override_conflict(spec, [scale])
    runs, later = all_planned(spec, [scale])  # later: comparison runs planned once tuning has chosen
    n_tuning = len(tuning_runs(spec, [scale]))
    check_runs(runs, local=True)
    root = writable_store(args)  # before the estimate line: a refused study prints one line only
    jobs = args.jobs or default_jobs(runs)
    line = _estimate_line(spec, scale, len(runs) - n_tuning + later, jobs, tuning=n_tuning,
                          extension=most_extension_runs(spec, [scale]))
    print(f"study {args.name}, scale {scale}: {line}", file=sys.stderr)
    store = Store(root)
    check_spec_record(store, spec.name)
    if spec.tune:
        check_spec_record(store, tune_name(spec.name))
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
    """The report's main table as plain text for the terminal (the full report is in its folder).
    below bigram = bigram reference level - mean best val loss; "(not beyond bigram)" marks a row
    at or above it. A report at the smoke scale says first that it is not a result."""
    from ..report.stats import is_result
    from ..spec.schema import NOT_A_RESULT

    def loss(x):
        return "-" if x is None else f"{x:.4f}"
    rows = [("variant", "seeds", "best val loss", "below bigram", "vs baseline", "collapsed", "diverged")]
    for t in report["table"]:
        best = t["best"]
        spread = f" +- {best['std']:.4f}" if best.get("std") is not None else ""
        diff = "baseline" if t["is_baseline"] else (f"{t['diff']:+.4f}" if t["diff"] is not None else "-")
        below = t.get("below_bigram")
        below = "-" if below is None else f"{below:+.4f}" + (" (not beyond bigram)"
                                                             if t.get("not_learned_beyond_bigram") else "")
        rows.append((t["variant"], f"{t['n']}/{t['n_planned']}", loss(best["mean"]) + spread, below, diff,
                     str(t["collapsed"]), str(t["diverged"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    head = [report["title"]]
    if not is_result(report) and NOT_A_RESULT not in report["title"]:
        head = [f"{report['title']} — {NOT_A_RESULT}"]
    ref = report.get("reference") or {}
    if ref.get("bigram") is not None and ref.get("unigram") is not None:
        head.append(f"reference levels: unigram {ref['unigram']:.4f}, bigram {ref['bigram']:.4f} nats "
                    "(count models of the training split)")
    elif "reference" in report:
        head.append(f"reference levels: not available ({report.get('reference_error') or 'not computed'})")
    return (head + ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
            + verdict_lines(report))


def verdict_lines(report: dict) -> list[str]:
    """One line per published claim: its verdict, estimate with 95% interval and Holm p, and id."""
    claims = report.get("claims") or []
    if not claims:
        return []

    def num(x):
        return "-" if x is None else f"{x:+.4f}"
    lines = ["verdicts on the published claims (rules and reasons in the report):"]
    width = max(len(c.get("verdict") or "") for c in claims)
    for c in claims:
        interval = (f" [{num(c.get('ci_low'))}, {num(c.get('ci_high'))}]"
                    if c.get("ci_low") is not None and c.get("ci_high") is not None else "")
        p = f", p (Holm) {c['p_holm']:.3g}" if c.get("p_holm") is not None else ""
        lines.append(f"  {(c.get('verdict') or '-').ljust(width)}  {c.get('id')}: estimate "
                     f"{num(c.get('estimate'))}{interval}{p}")
    return lines


def add_parsers(sub) -> None:
    st = sub.add_parser("study", help="the built-in studies: list them, print a spec, run one with its report")
    ssub = st.add_subparsers(dest="study_verb", required=True, parser_class=Parser)
    ls = ssub.add_parser("list", help="each study's question, designs, scales and estimated cost")
    ls.set_defaults(func=cmd_study_list, needs_torch=False)
    sp = ssub.add_parser("spec", help="print a study's sweep spec (copy it to change it; run with `reslab sweep run`)")
    sp.add_argument("name")
    sp.set_defaults(func=cmd_study_spec)
    run = ssub.add_parser("run", help="run a study's sweep and write its report; prints the report folder last")
    run.add_argument("name")
    run.add_argument("--scale", help="smoke (the pipeline in seconds, never a result), cpu (answers on a "
                     "2-core CPU) or paper (the published setup, GPUs); default: the study's default scale, "
                     "cpu for every built-in study (`reslab study list` gives each scale's estimate)")
    add_run_options(run)
    run.add_argument("--jobs", type=int_in("--jobs", 1, MAX_JOBS),
                     help="parallel workers (default: one per GPU, else one per core)")
    add_stack_options(run)
    run.add_argument("--store", help="results store (default: $RESLAB_STORE or ./results)")
    run.set_defaults(func=cmd_study_run)
