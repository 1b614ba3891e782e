"""`reslab assess`: plan the card, train its sweeps (resumable: a rerun trains only what is missing),
measure what needs no training, and write the card.

    card_plan(req, store) -> CardPlan       what will run, what the store already holds, the estimate
    assess(req, store, jobs, ...) -> (card, folder)

The card's folder is <store>/cards/<label>-<scale>/: card.md, card.html, card.json, its figures, and
the full report of each sweep under sweeps/<name>/ (the method text and every table).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..config import ModelConfig
from ..errors import ReslabError
from ..report.claims import MIN_N
from ..spec.schema import SweepSpec, is_result_scale
from ..spec.tune_plan import all_planned, most_extension_runs, tuning_runs
from .plan import (DEPTHS, INIT_BASELINES, PROBE_DEPTHS, RETUNE_SEEDS, WARM, CardRequest, card_specs,
                   settings_text)

SMOKE_PROBE_DEPTHS = (2, 4, 8)


@dataclass
class SweepPlanLine:
    name: str
    runs: int          # planned now (tuning runs, or comparison runs of scales without tuning)
    later: int         # comparison runs planned once tuning has chosen
    tuning: int
    extension: int     # at most this many tuning runs beyond the grid's ends (tune.extend)
    finished: int      # of `runs`, already finished in the store
    work_left: float = 0.0  # the runs left (later ones included), each counted as its work over the mean run's
    design_todo: dict = dataclasses.field(default_factory=dict)  # depth -> the design's share of work_left


@dataclass
class CardPlan:
    specs: list
    lines: list[SweepPlanLine]

    def text(self, req: CardRequest, jobs: int, speed: dict | None = None) -> list[str]:
        """The plan's lines. speed (depth -> the design's tokens/s over the first baseline's, from
        design_speed): the design's runs are counted at that speed in the estimate, so a design that
        trains at half pre-ln's speed is not promised in pre-ln's time."""
        # A card with --set settings is named after them (pre-ln+norm-derf); say what the name stands for,
        # so "against pre-ln" is not read as pre-ln against itself.
        what = req.label if not req.overrides else f"{req.label} ({req.design} with --set {settings_text(req)})"
        out = [f"assess {what} against {', '.join(req.baselines)}, scale {req.scale}"
               + ("" if is_result_scale(req.scale) else " (smoke: not a result)")]
        total_minutes = 0.0
        for spec, line in zip(self.specs, self.lines):
            todo = line.runs - line.finished + line.later
            est = spec.study.estimates.get(req.scale) if spec.study else None
            cost = "no estimate at this scale"
            if est is not None and est.cpu_minutes is not None:
                per_run = est.cpu_minutes / est.runs * est.jobs / jobs
                minutes = per_run * (line.work_left + _extra_runs(line.design_todo, speed))
                total_minutes += minutes
                cost = f"about {minutes:.0f} min with {jobs} workers ({est.basis.split(':')[0]})"
            elif est is not None and est.gpu_hours is not None:
                cost = f"about {est.gpu_hours / est.runs * todo:.2g} GPU-hours"
            more = f", and up to {line.extension} more where a row's best rate is an end of the grid" \
                if line.extension else ""
            out.append(f"  sweep {line.name}: {line.tuning} tuning + {line.later or line.runs - line.tuning} "
                       f"comparison runs{more}; {line.finished} already in the store; {cost}")
        if self.specs[0].tune is not None:
            out.append(f"  retune: a row whose tuned rate does not hold on most of its comparison seeds tunes once "
                       f"more on {RETUNE_SEEDS} seeds ({RETUNE_SEEDS - 1} more runs per rate it tried; not in the "
                       "estimate)")
        seeds = self._seeds()
        if seeds < MIN_N and is_result_scale(req.scale):
            out.append(f"  seeds: {seeds} per row; a verdict needs at least {MIN_N}, so this card will show "
                       f"losses and rule on nothing (leave --seeds out, or give --seeds {MIN_N} or more)")
        if not any(s.ladder for s in self.specs):
            out.append(f"  ladder: not climbed (add --ladder: the width ladder of hyper-connections-ladder"
                       f"{self._ladder_cost(req, jobs)})")
        out.append(f"  then: signal propagation at init (depths {', '.join(map(str, self._probe_depths(req)))}), "
                   "cost ratios (seconds), the card")
        if speed:
            at = " and ".join(f"{r:.2f}x at {d.lstrip('L')} layers" for d, r in speed.items())
            out.append(f"  speed: {req.label} trains at {at} {req.baselines[0]}'s tokens/s (a few steps timed "
                       "just now); the estimate counts its runs at that speed")
        if total_minutes:
            out.append(f"  estimate: about {total_minutes:.0f} min in all on a 2-core CPU")
        return out

    @staticmethod
    def _ladder_cost(req: CardRequest, jobs: int) -> str:
        """What --ladder would add, from the ladder study's own estimate (every run counted), or why
        these settings cannot climb it (a --set of what the rungs set, such as model.n_embd)."""
        try:
            ladder = card_specs(dataclasses.replace(req, ladder=True))[1]
        except ReslabError as e:
            return f"; not with these settings: {e}"
        est = ladder.study.estimates.get(req.scale) if ladder.study else None
        if est is None or est.cpu_minutes is None:
            return ""
        runs, later = all_planned(ladder, [req.scale])
        minutes = est.cpu_minutes / est.runs * est.jobs / jobs * (len(runs) + later)
        return f", {len(runs) + later} runs, about {minutes:.0f} min more on a 2-core CPU"

    def _seeds(self) -> int:
        """The comparison seeds of the card's sweep with the fewest (each row's units for the tests)."""
        return min(len(spec.seeds) for spec in self.specs)

    @staticmethod
    def _probe_depths(req: CardRequest) -> tuple:
        return PROBE_DEPTHS if is_result_scale(req.scale) else SMOKE_PROBE_DEPTHS


def card_plan(req: CardRequest, store, specs: list | None = None) -> CardPlan:
    """specs: the card's sweeps when the caller already built them (card_specs(req))."""
    from ..sweep.runner import plan_status

    specs = specs if specs is not None else card_specs(req)
    lines = []
    for spec in specs:
        runs, later = all_planned(spec, [req.scale])
        n_tuning = len(tuning_runs(spec, [req.scale]))
        status = plan_status(store, runs)
        finished = sum(s in ("completed", "diverged") for _, _, s in status)
        lines.append(SweepPlanLine(spec.name, len(runs), later, n_tuning, most_extension_runs(spec, [req.scale]),
                                   finished, *_work_left(status, later, req.label)))
    return CardPlan(specs, lines)


def _work_left(status: list, later: int, design: str) -> tuple[float, dict[str, float]]:
    """The runs left, each counted as its work over the sweep's mean run's (sweep/eta.py: a 16-layer
    run is about 4 of a 4-layer one), and by depth point the design's part of them: the unfinished
    planned runs, and the comparison runs planned once tuning has chosen (as many per row as any
    other row's, at the row's work)."""
    from ..sweep.eta import run_work

    if not status:
        return float(later), {}
    work = {r.id: run_work(r.config) for r, _, _ in status}
    mean = sum(work.values()) / len(work)
    rows = {(r.variant, r.grid.get("depth")): work[r.id] / mean for r, _, _ in status}
    per_row = later / len(rows)
    total = per_row * sum(rows.values())
    design_left: dict[str, float] = {}
    for run, _, state in status:
        left = (state not in ("completed", "diverged")) * work[run.id] / mean
        total += left
        depth = run.grid.get("depth")
        if run.variant == design and depth is not None:
            design_left[depth] = design_left.get(depth, per_row * rows[(design, depth)]) + left
    return total, design_left


def _extra_runs(design_todo: dict[str, float], speed: dict | None) -> float:
    """What the design's slower (or faster) runs add to the count of runs left at the baseline's speed:
    a run at speed 0.5 counts as two, so it adds one."""
    if not speed:
        return 0.0
    return sum(n * (1 / speed[d] - 1) for d, n in design_todo.items() if speed.get(d))


def design_speed(plan: CardPlan, req: CardRequest, jobs: int) -> dict[str, float] | None:
    """Depth -> the design's training tokens/s over the first baseline's, from a few steps of each
    timed now with the threads a worker gets (cores / jobs): for the plan's estimate only, not the
    card's cost section (which times 66 steps). None where it would not change the estimate (a scale
    with no CPU estimate, or the design's runs all finished)."""
    from ..sweep.runner import cpu_count
    from .cost import measure_cost

    main = plan.specs[0]
    est = main.study.estimates.get(req.scale) if main.study else None
    if not is_result_scale(req.scale) or est is None or est.cpu_minutes is None \
            or not any(n for line in plan.lines for n in line.design_todo.values()):
        return None
    out = {}
    for depth in DEPTHS:
        models = _models(main, req, depth)
        pair = {k: dataclasses.asdict(models[k]) for k in (req.label, req.baselines[0])}
        cost = measure_cost(pair, baseline=req.baselines[0], batch_size=_batch(main, req), steps=2, rounds=2,
                            warmup=1, threads=max(1, cpu_count() // jobs))
        out[depth] = cost["rows"][req.label]["ratios"]["tokens_per_s_same_round"]
    return out


def _planned(spec: SweepSpec, req: CardRequest) -> list:
    """The runs known before training: at a tuning scale its tuning runs (every row at every rate),
    else the comparison runs; either way one or more of every (design, depth, warmup) row."""
    return all_planned(spec, [req.scale])[0]


def _models(spec: SweepSpec, req: CardRequest, depth: str) -> dict[str, ModelConfig]:
    """Each design's model config as the card trains it at one depth point (with warmup)."""
    out = {}
    for r in _planned(spec, req):
        if r.grid.get("depth") == depth and r.grid.get("warmup") == WARM and r.variant not in out:
            out[r.variant] = r.config.model
    return out


def probe_models(spec: SweepSpec, req: CardRequest) -> dict[str, ModelConfig]:
    """The design, its baselines and pre-ln / post-ln (always beside it at initialisation)."""
    models = _models(spec, req, DEPTHS[0])
    template = models[req.baselines[0]]
    for name in INIT_BASELINES:
        if name not in models:
            models[name] = dataclasses.replace(template, design=name)
    return models


def assess(req: CardRequest, store, jobs: int | None = None, stack: str = "auto", stack_size: int = 8,
           log=None, specs: list | None = None) -> tuple[dict, Path]:
    from ..probe.settings import own_inits
    from ..report.build import build_report
    from ..report.render import write_report
    from ..sweep.runner import default_jobs, run_sweep
    from .card import build_card
    from .cost import measure_cost
    from .render import write_card
    from .signal import MODES, probe_designs
    from .stability import stability

    log = log or (lambda m: print(m, file=sys.stderr))
    t0 = time.time()
    plan = card_plan(req, store, specs)
    jobs = jobs or default_jobs(all_planned(plan.specs[0], [req.scale])[0])
    for line in plan.text(req, jobs, design_speed(plan, req, jobs)):
        log(line)
    folder = store.root / "cards" / f"{req.label}-{req.scale}"
    folder.mkdir(parents=True, exist_ok=True)
    results: dict = {}  # sweep name -> its SweepResult over this call (a retuned main sweep runs twice)

    def sweep(spec):
        result = run_sweep(spec, store, jobs=jobs, scales=[req.scale], log=log,
                           source=f"reslab assess {req.label} (scale {req.scale})", stack=stack, stack_size=stack_size)
        if spec.name in results:  # its second pass finds the first pass's runs finished: they were not in the store
            first = results[spec.name]
            result.skipped, result.statuses = first.skipped, {**first.statuses, **result.statuses}
        results[spec.name] = result
        report, out = build_report(store, spec.name, scale=req.scale, out_dir=folder / "sweeps" / spec.name,
                                   probe=False)
        write_report(report, out)
        return report

    specs = list(plan.specs)
    req, specs[0], main_report, retuned = main_sweep(req, specs[0], sweep, log)
    reports = [main_report] + [sweep(spec) for spec in specs[1:]]
    plan = dataclasses.replace(plan, specs=specs)
    main = plan.specs[0]
    log("assess: signal propagation at initialisation")
    models = probe_models(main, req)
    signal = {mode: probe_designs(models, CardPlan._probe_depths(req), seeds=3 if is_result_scale(req.scale) else 1,
                                  mode=mode, out_dir=folder / "signal") for mode in MODES}
    log("assess: cost against the first baseline, measured in one process")
    cost = {depth: measure_cost({k: dataclasses.asdict(v) for k, v in _models(main, req, depth).items()},
                                baseline=req.baselines[0], batch_size=_batch(main, req), **cost_timing(req))
            for depth in DEPTHS}
    unigram = (reports[0].get("reference") or {}).get("unigram")
    stab = stability(store, main.name, req.scale, unigram)
    card = build_card(req, plan.specs, reports, signal, cost, stab, folder,
                      wall_s=time.time() - t0, results=list(results.values()), own_inits=own_inits(models),
                      retuned=retuned)
    write_card(card, folder)
    return card, folder


def main_sweep(req: CardRequest, spec: SweepSpec, sweep, log) -> tuple[CardRequest, SweepSpec, dict, dict]:
    """Train the main sweep (sweep(spec) -> its report), then once more if some rows' tuned rates did not
    hold on their comparison seeds: those rows tune again on RETUNE_SEEDS seeds (plan.retune_entries)
    and train their comparison seeds at the rate the mean over them picks. Once only: a row whose new
    rate does not hold either is reported as such (its claims stay without a verdict).
    Returns (the request with its retuned rows, the main spec as last trained, its report,
    {"rows": {row name: why}, "seeds": {row name: tuning seeds}} of the rows tuned again)."""
    report = sweep(spec)
    unheld = unheld_rows(report)
    if not unheld:
        return req, spec, report, {}
    again = dataclasses.replace(req, retune=tuple(sorted(set(req.retune) | set(unheld))))
    respec = card_specs(again)[0]
    before, after = _row_seeds(spec, unheld), _row_seeds(respec, unheld)
    changed = {r: why for r, why in unheld.items() if before[r] != after[r]}  # not rows already on several seeds
    if not changed:
        return req, spec, report, {}
    for why in changed.values():
        log(f"assess: {why}; tuning that row again on {RETUNE_SEEDS} seeds")
    retuned = {"rows": {_row(r): why for r, why in changed.items()}, "seeds": {_row(r): after[r] for r in changed}}
    return again, respec, sweep(respec), retuned


def unheld_rows(report: dict) -> dict[tuple, str]:
    """(variant, depth, warmup) -> why, for each row of the main sweep whose tuned rate did not hold:
    its tuning seeds learned beyond the bigram level there, most of its comparison runs did not
    (report/tuning.check_held's rule, the one that makes its claims inconclusive)."""
    tuning = (report.get("lr") or {}).get("tuning") or {}
    out = {}
    for r in tuning.get("rows") or []:
        grid = r.get("grid") or {}
        if r.get("held") is False and "depth" in grid and "warmup" in grid:
            comp, seeds = r.get("comparison") or {}, len(r.get("seeds") or tuning.get("seeds") or [])
            out[(r["variant"], grid["depth"], grid["warmup"])] = (
                f"{r['name']}'s tuned rate {r['chosen']:g} did not hold: its {seeds} tuning seed(s) learned "
                f"beyond the bigram level there, {comp.get('not_beyond')} of its {comp.get('n')} comparison runs "
                "did not")
    return out


def _row(row: tuple) -> str:
    """(variant, depth, warmup) -> the row's name in the report (sas-depth=L16-warmup=w100)."""
    from ..spec.rows import row_name

    return row_name(row[0], {"depth": row[1], "warmup": row[2]})


def _row_seeds(spec: SweepSpec, rows) -> dict[tuple, list[int]]:
    from ..spec.tune import row_seeds

    return {r: row_seeds(spec.tune, r[0], {"depth": r[1], "warmup": r[2]}) for r in rows}


def cost_timing(req: CardRequest) -> dict:  # public: bench/bench_cost_noise.py measures with it
    """Enough rounds that the speed ratio, taken round by round, has a median and a spread worth
    reading (11 rounds of 6 steps after 3 untimed ones: about the 50 timed steps of 5 rounds of 10 that
    it replaced, whose ratio moved by 0.15 between two renders of one card); the smoke scale only
    checks that the section is written."""
    if not is_result_scale(req.scale):
        return {"steps": 2, "rounds": 2, "warmup": 1}
    return {"steps": 6, "rounds": 11, "warmup": 3}


def _batch(spec: SweepSpec, req: CardRequest) -> int:
    return _planned(spec, req)[0].config.train.batch_size
