"""[tune]: each design's own learning rate, chosen on tuning seeds before the comparison runs.

    [tune]
    axis = "optim.lr"                 # a dotted config key, not also a grid axis
    values = [3e-4, 1e-3, 3e-3]       # at least 2 (kept sorted ascending)
    seeds = [9001, 9002]              # disjoint from the spec's seeds
    metric = "best_val_loss"          # or "final_val_loss"
    scales = ["cpu"]                  # optional: the scales that tune (default: every scale)
    extend = 2                        # optional: values a row may add beyond an end it chose (default 0)
    [[tune.rows]]                     # optional, repeatable: the rows `match` selects (a variant and/or
    match = { variant = "post-ln" }   #   grid points, as a claim's cell) tune over these values and/or
    values = [3e-4, 1e-3, 3e-3]       #   on these seeds instead; the first entry that selects a row wins,
    seeds = [9001, 9002, 9003]        #   and what it leaves out is [tune]'s

At a scale that tunes, a sweep runs in two phases:

    tuning      every row (variant x grid point) x each of its values x each of its tuning seeds, as
                its own sweep named <spec>.tune (the axis is one more grid axis there), resumed and
                reported like any sweep
    choice      per row, the value with the lowest mean metric over its tuning seeds; a value with a
                diverged or failed tuning run is worse than any value without; ties go to the
                smaller value; if every value failed, the smallest (and the choice says so)
    extension   with `extend = k`, a row whose choice is the largest (smallest) of its values has not
                found its best, so it also trains one geometric step beyond that end (the ratio of
                the two outermost values, rounded to 2 significant digits), then chooses again; at
                most k steps a side. Rows never extend past an interior best, and one side only (the
                other end already lost to the chosen value). Values and rounds follow from the
                finished runs alone, so a rerun replays them and trains nothing twice.
    comparison  the spec's own runs, each row at its chosen value (merged into the run's config
                after the grid point, so the value is part of the run's identity)

The choices are recorded in the spec's record (specs/<spec>.json, "tuned") for the report. They
are recomputed from the tuning runs' folders on every run of the sweep, so a rerun that finds the
tuning runs finished chooses the same values and trains nothing twice.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from pathlib import Path

from ..errors import ConfigError, ReslabError

TUNE_SUFFIX = ".tune"
NOT_CHOSEN_YET = "tuning not finished"
MAX_EXTEND = 4          # tune.extend: values a row may add beyond one end of its grid


def tune_name(spec_name: str) -> str:
    """The name of a spec's tuning sweep in the store."""
    return spec_name + TUNE_SUFFIX


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v) -> bool:
    return _number(v) and math.isfinite(v)


def _unwrap(tp):
    """Optional[T] -> T (the config's nested tables are never unions otherwise)."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1 else tp


def axis_problem(axis: str) -> str | None:
    """Why `axis` is not a dotted key of one value in a run config (None: it is one)."""
    from ..train.config import RunConfig
    from .spec import RUNNER_FIXED

    parts = axis.split(".")
    if len(parts) < 2 or not all(parts):
        return f"{axis!r} is not a dotted config key such as 'optim.lr'"
    cls = RunConfig
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(cls):
            return f"{axis!r}: {'.'.join(parts[:i])} is a value, not a table"
        names = [f.name for f in dataclasses.fields(cls) if f.init]
        if part not in names:
            table = ".".join(parts[:i]) or "the config"
            return f"{axis!r}: {part!r} is not a key of {table}; it has {', '.join(names)}"
        cls = _unwrap(typing.get_type_hints(cls)[part])
    if dataclasses.is_dataclass(cls):
        return f"{axis!r} is a table; tune one of its keys, e.g. '{axis}.{dataclasses.fields(cls)[0].name}'"
    if axis == "train.seed":
        return "'train.seed': the tuning seeds are tune.seeds; tune another key"
    table, _, key = axis.partition(".")
    if key in RUNNER_FIXED.get(table, {}):
        return f"{axis!r} is set by the sweep runner for every run; tune another key"
    return None


def _sets(table: dict, axis: str) -> bool:
    """Whether an override table sets the dotted key."""
    node = table
    for part in axis.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def check_tune(spec, errors: list[str]) -> None:
    """Problems of the spec's [tune] table (and of [report] sensitivity), appended to errors at
    their path, one line each."""
    _check_sensitivity(spec, errors)
    t = spec.tune
    if t is None:
        return
    from .spec import MAX_RUNS, NAME_RE, _check_overrides, _nested, planned_count

    if not NAME_RE.match(tune_name(spec.name)):
        errors.append(f"name: the tuning sweep's name {tune_name(spec.name)!r} must be letters, digits, "
                      "'_', '.', '+' or '-' (it names folders)")
    problem = axis_problem(t.axis)
    if problem:
        errors.append(f"tune.axis: {problem}")
    if not 0 <= t.extend <= MAX_EXTEND:
        errors.append(f"tune.extend: the values a row may add beyond an end of its grid must be 0 to "
                      f"{MAX_EXTEND}, got {t.extend}")
    _check_values(t, t.values, "tune.values", problem is None, errors)
    _check_rows(spec, problem is None, errors)
    from .spec import check_seed_list

    check_seed_list(t.seeds, "tune.seeds", "[9001, 9002]", errors)
    _check_disjoint(t.seeds, spec.seeds, "tune.seeds", errors)
    if t.scales is not None:
        if not spec.scales:
            errors.append("tune.scales: the spec declares no scales; remove tune.scales to tune the runs")
        elif not t.scales:
            errors.append("tune.scales: empty; list the scales that tune, or remove it to tune every scale")
        for s in t.scales:
            if spec.scales and s not in spec.scales:
                errors.append(f"tune.scales: unknown scale {s!r}; scales are {', '.join(sorted(spec.scales))}")
    from .spec import _grids

    for where, grid in _grids(spec):
        if t.axis in grid:
            errors.append(f"tune.axis: {t.axis} is also the grid axis {where}[{t.axis!r}]; a row's value "
                          "comes from tuning, so remove one of them")
        for key, points in grid.items():
            if isinstance(points, dict):
                for name, table in points.items():
                    if isinstance(table, dict) and _sets(table, t.axis):
                        errors.append(f"{where}.{key}.{name}: sets {t.axis}, which tune.axis chooses for each row; "
                                      "remove it")
    if _sets(spec.overrides, t.axis):
        errors.append(f"overrides: sets {t.axis}, which tune.axis chooses for each row; remove it")
    per_seed = planned_count(spec) // max(len(spec.seeds), 1)
    most = per_seed * (max(map(len, value_lists(t))) + max(t.extend, 0)) * max(map(len, seed_lists(t)))
    if most > MAX_RUNS:
        errors.append(f"tune: plans up to {most:,} tuning runs (rows x (values + extend) x seeds), more than "
                      f"{MAX_RUNS:,}; shorten its values, extend or seeds")


def _check_disjoint(seeds: list[int], spec_seeds: list[int], where: str, errors: list[str]) -> None:
    shared = sorted(set(seeds) & set(spec_seeds))
    if shared:
        errors.append(f"{where}: {shared} are also the spec's seeds; tuning seeds must be disjoint from "
                      "them, or the comparison would be judged on the runs that chose its values")


def _check_values(t, values: list, where: str, axis_ok: bool, errors: list[str]) -> None:
    """Problems of one list of values to choose from (tune.values or a tune.rows entry's)."""
    from .spec import _check_overrides, _nested

    if len(values) < 2:
        errors.append(f"{where}: give at least 2 values to choose from, got {values}")
    bad = [v for v in values if not _finite(v)]
    if bad:
        errors.append(f"{where}: must be finite numbers, got {bad[0]!r}")
    elif len(set(values)) != len(values):
        errors.append(f"{where}: {values} repeats a value")
    elif t.axis == "optim.lr" and any(v <= 0 for v in values):
        errors.append(f"{where}: learning rates must be > 0, got {min(values)!r}")
    elif axis_ok:
        lines: dict[str, str] = {}
        for i, v in enumerate(values):
            found: list[str] = []
            _check_overrides(_nested(t.axis, v), "", found)
            for line in found:
                lines.setdefault(line, f"{where}[{i}]: {line}")
        errors += list(lines.values())
    if 0 < t.extend <= MAX_EXTEND and not bad and any(v <= 0 for v in values):
        errors.append(f"tune.extend: extends the grid in geometric steps, so every value must be > 0, got "
                      f"{min(values)!r}" + ("" if where == "tune.values" else f" in {where}")
                      + "; set extend = 0 or give positive values")


def _check_rows(spec, axis_ok: bool, errors: list[str]) -> None:
    """Problems of [[tune.rows]]: each match must name a known variant and grid points of the
    tuning scales (as a claim's cell does), and bring its own valid values and/or tuning seeds."""
    from ..report.claims import _claim_grid
    from .more_seeds import check_row_match

    t = spec.tune
    grid = _claim_grid(spec, t.scales)
    for i, entry in enumerate(t.rows):
        where = f"tune.rows[{i}]"
        check_row_match(spec, entry.match, f"{where}.match", grid, errors,
                        empty="name a variant and/or grid points, e.g. { variant = \"post-ln\", n_layer = 16 }, "
                              "or use tune.values for every row")
        if entry.values is None and entry.seeds is None:
            errors.append(f"{where}: give the selected rows their own values, seeds or both, e.g. "
                          "seeds = [9001, 9002, 9003]")
        if entry.values is not None:
            _check_values(t, entry.values, f"{where}.values", axis_ok, errors)
        if entry.seeds is not None:
            from .spec import check_seed_list

            check_seed_list(entry.seeds, f"{where}.seeds", "[9001, 9002, 9003]", errors)
            _check_disjoint(entry.seeds, spec.seeds, f"{where}.seeds", errors)


# ---- each row's values ---------------------------------------------------------------------------
def _selects(entry, variant: str, point: dict) -> bool:
    from ..report.claims import selects

    return selects(entry.match, variant, point)


def _entry(t, variant: str, point: dict):
    """The first [[tune.rows]] entry that selects the row, or None."""
    return next((entry for entry in t.rows if _selects(entry, variant, point)), None)


def row_values(t, variant: str, point: dict) -> list:
    """The values a row (variant, grid point without the axis) tunes over: those of the first
    [[tune.rows]] entry that selects it, else (or where that entry gives none) tune.values."""
    entry = _entry(t, variant, point)
    return list(entry.values if entry is not None and entry.values is not None else t.values)


def row_seeds(t, variant: str, point: dict) -> list[int]:
    """The tuning seeds a row trains on: those of the first [[tune.rows]] entry that selects it,
    else (or where that entry gives none) tune.seeds."""
    entry = _entry(t, variant, point)
    return list(entry.seeds if entry is not None and entry.seeds is not None else t.seeds)


def _distinct(t, key: str) -> list[list]:
    """The distinct lists of `key` ("values" or "seeds") rows use: [tune]'s first, then the rows
    entries' that give one."""
    out: list[list] = []
    for own in [getattr(t, key)] + [getattr(entry, key) for entry in t.rows if getattr(entry, key) is not None]:
        if list(own) not in out:
            out.append(list(own))
    return out


def value_lists(t) -> list[list]:
    """The distinct lists of values rows tune over: tune.values first, then the rows entries'."""
    return _distinct(t, "values")


def seed_lists(t) -> list[list[int]]:
    """The distinct lists of tuning seeds rows train on: tune.seeds first, then the rows entries'."""
    return _distinct(t, "seeds")


def all_tuning_seeds(t) -> list[int]:
    """Every tuning seed some row trains on, tune.seeds first (the tuning sweep's seed order)."""
    return list(dict.fromkeys(s for seeds in seed_lists(t) for s in seeds))


def values_text(t) -> str:
    """tune.values, and the rows entries' values and seeds with their selectors, for a log line."""
    def fmt(values):
        return "[" + ", ".join(f"{v:g}" for v in values) + "]"

    def own(e):
        parts = ([fmt(e.values)] if e.values is not None else []) + \
                ([f"seeds {', '.join(map(str, e.seeds))}"] if e.seeds is not None else [])
        return ", ".join(f"{k} = {v}" for k, v in e.match.items()) + ": " + ", ".join(parts)
    rows = "; ".join(own(e) for e in t.rows)
    return fmt(t.values) + (f" ({rows})" if rows else "")


def _check_sensitivity(spec, errors: list[str]) -> None:
    s = spec.report.sensitivity
    if s is None:
        return
    from .spec import _grids

    axes = [(where, grid[s.axis]) for where, grid in _grids(spec) if s.axis in grid]
    if not axes:
        errors.append(f"report.sensitivity.axis: {s.axis!r} is not a grid axis of this spec; the "
                      "sensitivity is taken over a grid of values, e.g. grid.\"optim.lr\" = [1e-3, 3e-3, 1e-2]")
    for where, values in axes:
        if not isinstance(values, list) or len(values) < 2 or not all(_finite(v) and v > 0 for v in values):
            errors.append(f"report.sensitivity.axis: {where}[{s.axis!r}] must list at least 2 positive "
                          "numbers (they are plotted on a log axis)")
    if s.cap is not None and s.cap <= 0:
        errors.append(f"report.sensitivity.cap: must be > 0 nats, got {s.cap}")


# ---- planning ------------------------------------------------------------------------------------
def tuning_scales(spec, scales: list[str] | None = None) -> list[str]:
    """The chosen scales that tune ("" for a spec without scales)."""
    from .spec import chosen_scales

    if spec.tune is None:
        return []
    return [s for s in chosen_scales(spec, scales) if spec.tune.tunes(s)]


def tuning_spec(spec, values: list | None = None):
    """The tuning sweep: the spec's rows with the axis as one more grid axis, on the tuning seeds
    ([[more_seeds]] are comparison seeds: none here).
    `values`: the axis's values there (default: every value some row tunes over, tune.values and
    [[tune.rows]]'; an extension plans its runs with its own)."""
    t = spec.tune
    values = sorted({v for vs in value_lists(t) for v in vs}) if values is None else list(values)
    return spec.replace(
        name=tune_name(spec.name), seeds=all_tuning_seeds(t), tune=None, study=None, claims=[], more_seeds=[],
        grid=dict(spec.grid, **{t.axis: values}),
        **({"scale_grid": {s: dict(g, **{t.axis: values}) for s, g in spec.scale_grid.items()}}
           if getattr(spec, "scale_grid", None) else {}),
        report=dataclasses.replace(spec.report, published=[], sensitivity=None),
        description=(f"tuning {t.axis} for {spec.name}" + (f": {spec.description}" if spec.description else "")))


def tuning_runs(spec, scales: list[str] | None = None, where: str = "spec", values: list | None = None) -> list:
    """The planned tuning runs of the chosen scales that tune ([] when none does): each row's at its
    own values (row_values), or every row's runs at `values` (an extension's), on the row's own
    tuning seeds (row_seeds).

    Each distinct list of values is planned for the variants of the rows that tune over it, so a
    value is checked only against the rows that train it; runs keep expand()'s seed-major order."""
    from .spec import expand

    t = spec.tune
    tscales = tuning_scales(spec, scales)
    if not tscales:
        return []
    at = tscales if spec.scales else None
    if not t.rows:
        return expand(tuning_spec(spec, values), at, where=where)
    if values is not None:
        return [run for run in expand(tuning_spec(spec, values), at, where=where)
                if run.seed in row_seeds(t, *_row_of(run, t.axis)[1:])]
    runs, taken = [], [0] * len(t.rows)
    for vals in value_lists(t):
        planned = expand(tuning_spec(spec, vals), at, where=where)
        for run in planned:
            _, variant, point = _row_of(run, t.axis)
            if row_values(t, variant, point) == vals and run.seed in row_seeds(t, variant, point):
                runs.append(run)
    for run in runs:  # which entry took each row: one that takes none is a mistake in the spec
        _, variant, point = _row_of(run, t.axis)
        hit = next((i for i, e in enumerate(t.rows) if _selects(e, variant, point)), None)
        if hit is not None:
            taken[hit] += 1
    idle = [i for i, n in enumerate(taken) if not n]
    if idle and scales is None:
        raise ConfigError(f"{where}: tune.rows[{idle[0]}].match selects no row that an earlier entry has not "
                          "taken; remove it or name another variant or grid point")
    order = {s: i for i, s in enumerate(all_tuning_seeds(t))}
    return sorted(runs, key=lambda r: order.get(r.seed, len(order)))


def check_override_conflict(spec, scales: list[str] | None = None, where: str = "--set") -> None:
    """--set of the tuned key at a scale that tunes: one line, refused (the value is the tuning's)."""
    if spec.tune is None or not _sets(spec.overrides, spec.tune.axis) or not tuning_scales(spec, scales):
        return
    at = ", ".join(s for s in tuning_scales(spec, scales) if s) or "every run"
    raise ReslabError(f"{where} {spec.tune.axis}: conflicts with [tune] axis {spec.tune.axis}, which chooses each "
                      f"row's own value ({at}); drop the {where}, or run a scale that does not tune")


def _row_of(run, axis: str) -> tuple[str, str, dict]:
    return run.scale, run.variant, {k: v for k, v in run.grid.items() if k != axis}


def _status(store, run) -> dict:
    from ..train.run_folder import RunFolder

    folder = store.folder_for(run.id, run.label)
    return RunFolder(folder).read_status() if folder.is_dir() else {}


# ---- the choice ----------------------------------------------------------------------------------
def pick(values: list, results: dict, n_seeds: int) -> tuple[object, list[dict], str | None]:
    """The rule, on one row: results maps value -> [(status, metric)] of its tuning runs.

    Returns (chosen value or None while a run is unfinished, one summary per value, a note or None).
    A value is eligible when each of its n_seeds runs completed with a finite metric; the eligible
    value with the lowest mean wins, ties to the smaller value (values are scanned ascending, and
    only a strictly lower mean replaces the best). No eligible value: the smallest, with a note."""
    table, best, best_mean, unfinished = [], None, math.inf, False
    for v in sorted(values):
        res = results.get(v, [])
        done = [m for st, m in res if st == "completed" and _finite(m)]
        diverged = sum(st == "diverged" for st, _ in res)
        failed = sum(st == "failed" or (st == "completed" and not _finite(m)) for st, m in res)
        waiting = n_seeds - len(done) - diverged - failed
        unfinished |= waiting > 0
        mean = math.fsum(done) / len(done) if done else None
        table.append({"value": v, "mean": mean, "n": len(done), "diverged": diverged, "failed": failed,
                      "unfinished": max(waiting, 0)})
        if not waiting and not diverged and not failed and mean < best_mean:
            best, best_mean = v, mean
    if unfinished:
        return None, table, NOT_CHOSEN_YET
    if best is None:
        return min(values), table, "every value diverged or failed; took the smallest"
    return best, table, None


def grid_edge(chosen, values: list) -> str | None:
    """"top" or "bottom" when the chosen value is the largest or smallest of a row's values (2 or
    more): its best may lie beyond them, so it may not be the row's own best value."""
    if chosen is None or len(values) < 2:
        return None
    return "top" if chosen == max(values) else "bottom" if chosen == min(values) else None


def next_value(values: list, side: str):
    """One geometric step beyond the `side` end of the sorted values: that end times (top) or divided
    by (bottom) the ratio of the two outermost values there, rounded to 2 significant digits, so that
    every machine plans the same value (and run identity). An integer axis stays integer. None when
    the step gives no new positive value."""
    lo, hi = (values[0], values[1]) if side == "bottom" else (values[-2], values[-1])
    if not (_finite(lo) and _finite(hi)) or lo <= 0 or hi <= lo:
        return None
    end = values[-1] if side == "top" else values[0]
    value = float(f"{(end * hi / lo if side == 'top' else end * lo / hi):.2g}")
    if all(isinstance(v, int) for v in values):
        value = int(round(value))
    return value if value > 0 and value not in values else None


def _row_key(scale: str, variant: str, point: dict) -> str:
    return json.dumps([scale, variant, point], sort_keys=True)


def tuning_plan(spec, store, scales: list[str] | None = None, runs: list | None = None) -> tuple[list, list[dict]]:
    """(every tuning run known now, each row's choice), from the tuning runs' folders (the truth,
    not the index). Without `extend` the runs are the grid's (`runs`, default tuning_runs(spec,
    scales)). With it, a row whose choice sits at an end of its values gains the next value's runs
    (next_value), and chooses again once they finish, up to tune.extend values a side; the plan
    therefore grows as runs finish, and a sweep trains it until it stops growing.

    A choice: {"scale", "variant", "grid", "axis", "metric", "seeds" (the row's tuning seeds), "value" (None while a run is
    unfinished), "values": [{value, mean, n, diverged, failed, unfinished}] over the row's values,
    "edge": "top" | "bottom" | None, "extended": {"top": k, "bottom": k}, "note"}, in the plan's
    row order."""
    t = spec.tune
    runs = list(tuning_runs(spec, scales) if runs is None else runs)
    rows: dict[str, dict] = {}
    for run in runs:
        scale, variant, point = _row_of(run, t.axis)
        row = rows.setdefault(_row_key(scale, variant, point),
                              {"scale": scale, "variant": variant, "grid": point, "runs": {}})
        row["runs"].setdefault(run.grid[t.axis], []).append(run)
    at_value: dict = {}  # value -> every row's runs at it (an extension's, planned once)
    statuses: dict[str, tuple] = {}

    def result(run) -> tuple:
        if run.id not in statuses:
            st = _status(store, run)
            statuses[run.id] = (st.get("status", "pending"), st.get(t.metric))
        return statuses[run.id]

    choices = []
    for key, row in rows.items():
        extended = {"top": 0, "bottom": 0}
        seeds = row_seeds(t, row["variant"], row["grid"])
        while True:
            values = sorted(row["runs"])
            value, table, note = pick(values, {v: [result(r) for r in rs] for v, rs in row["runs"].items()},
                                      len(seeds))
            edge = grid_edge(value, values)
            if value is None or edge is None or extended[edge] >= t.extend:
                break
            new = next_value(values, edge)
            if new is None:
                break
            if new not in at_value:
                try:
                    at_value[new] = tuning_runs(spec, scales, values=[new])
                except ConfigError as e:  # e.g. a learning rate below optim.min_lr: the grid ends here
                    at_value[new] = e
            if isinstance(at_value[new], ConfigError):
                reason = at_value[new].errors[0].rsplit("}: ", 1)[-1]
                note = "; ".join(filter(None, [note, f"cannot try {new:g} beyond the {edge}: {reason}"]))
                break
            added = [r for r in at_value[new] if _row_key(*_row_of(r, t.axis)) == key]
            row["runs"][new] = added
            runs += added
            extended[edge] += 1
        choices.append({"scale": row["scale"], "variant": row["variant"], "grid": row["grid"], "axis": t.axis,
                        "metric": t.metric, "seeds": seeds, "value": value, "values": table,
                        "edge": edge, "extended": extended, "note": note})
    return runs, choices


def choose(spec, store, scales: list[str] | None = None, runs: list | None = None) -> list[dict]:
    """Each tuning row's choice (tuning_plan's second half)."""
    return tuning_plan(spec, store, scales, runs)[1]


def tuned_values(choices: list[dict]) -> dict:
    """tuned_key -> value for expand(), from the rows that have a value."""
    from .spec import tuned_key

    return {tuned_key(c["scale"], c["variant"], c["grid"]): c["value"] for c in choices if c["value"] is not None}


def choice_line(spec_name: str, c: dict) -> str:
    """One line per row for the sweep's log: the chosen value and each value's mean."""
    def cell(e):
        if e["diverged"] or e["failed"]:
            return f"{e['value']:g} {e['diverged']} diverged/{e['failed']} failed"
        return f"{e['value']:g} {e['mean']:.4f}" if e["mean"] is not None else f"{e['value']:g} -"
    row = "-".join([c["variant"]] + [f"{k}={v}" for k, v in c["grid"].items()])
    head = f"tuned {spec_name} {(c['scale'] + ' ') if c['scale'] else ''}{row}: {c['axis']} = "
    head += "(none yet)" if c["value"] is None else f"{c['value']:g}"
    notes = [c["note"]] if c["note"] else []
    ext = c.get("extended") or {}
    if c.get("edge"):
        notes.append(f"the {c['edge']} of its values" + (f", {ext[c['edge']]} of them beyond the grid"
                                                        if ext.get(c["edge"]) else "") + ": its best may lie beyond")
    elif any(ext.values()):
        side = "top" if ext.get("top") else "bottom"
        notes.append(f"the grid extended by {ext[side]} at the {side}")
    tail = f" [{'; '.join(notes)}]" if notes else ""
    return f"{head}  ({c['metric']} mean over {len(c['seeds'])} tuning seeds: " + \
        ", ".join(cell(e) for e in c["values"]) + ")" + tail


def extension_line(spec_name: str, c: dict, extend: int) -> str:
    """The log line of a row that tries values beyond an end of its grid (tune.extend = `extend`)."""
    row = "-".join([c["variant"]] + [f"{k}={v}" for k, v in c["grid"].items()])
    side = "top" if c["extended"]["top"] else "bottom"
    waiting = [e["value"] for e in c["values"] if e["unfinished"]]
    return (f"tuned {spec_name} {(c['scale'] + ' ') if c['scale'] else ''}{row}: its best so far is the {side} "
            f"of its values; trying {', '.join(f'{v:g}' for v in waiting)} ({c['extended'][side]} of at most "
            f"{extend} beyond the grid)")


def comparison_counts(spec, scales: list[str] | None = None, runs: list | None = None) -> dict[str, int]:
    """scale -> how many comparison runs a tuning scale plans once tuned (each row's seeds: the
    spec's and its [[more_seeds]])."""
    from .more_seeds import comparison_seeds

    runs = tuning_runs(spec, scales) if runs is None else runs
    rows: dict[str, set] = {}
    for run in runs:
        scale, variant, point = _row_of(run, spec.tune.axis)
        rows.setdefault(scale, set()).add(json.dumps([variant, point], sort_keys=True))
    return {s: sum(len(comparison_seeds(spec, s, *json.loads(r))) for r in keys) for s, keys in rows.items()}


def plan(spec, store, scales: list[str] | None = None) -> dict:
    """What a sweep of `spec` would do now, without writing anything: {"tuning": tuning runs,
    "choices": rows' choices so far, "comparison": the comparison runs known now (every scale that
    does not tune, and the tuned rows), "after": {scale: comparison runs that wait for tuning}}."""
    from .more_seeds import comparison_seeds
    from .spec import expand

    truns, choices = tuning_plan(spec, store, scales) if tuning_scales(spec, scales) else ([], [])
    comparison = expand(spec, scales, tuned=tuned_values(choices))
    after: dict[str, int] = {}
    for c in choices:
        if c["value"] is None:
            after[c["scale"]] = after.get(c["scale"], 0) + len(comparison_seeds(spec, c["scale"], c["variant"], c["grid"]))
    return {"tuning": truns, "choices": choices, "comparison": comparison, "after": after}


def most_extension_runs(spec, scales: list[str] | None = None) -> int:
    """The most tuning runs tune.extend can add: every row extending to its limit on one side (a row
    never extends both ways: see tuning_plan), on each of its tuning seeds."""
    t = spec.tune
    if t is None or not t.extend:
        return 0
    rows = {_row_key(*_row_of(run, t.axis)) for run in tuning_runs(spec, scales)}
    return t.extend * sum(len(row_seeds(t, variant, point)) for _, variant, point in map(json.loads, rows))


def all_planned(spec, scales: list[str] | None = None) -> tuple[list, int]:
    """(every run whose config is known before training: the tuning runs and the comparison runs of
    the scales that do not tune, number of comparison runs planned after tuning); for the checks
    and estimates that come before a sweep starts."""
    from .spec import expand

    truns = tuning_runs(spec, scales)
    later = sum(comparison_counts(spec, scales, truns).values()) if truns else 0
    return truns + expand(spec, scales), later


def folder_config(path) -> dict | None:
    """A run folder's planned config (sweep.json), or None."""
    from ..fileio import read_json

    try:
        return read_json(Path(path) / "sweep.json", "sweep membership").get("config")
    except (ReslabError, OSError, AttributeError, TypeError):
        return None
