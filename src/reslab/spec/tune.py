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

This module holds the table's rules: names, each row's values and seeds, the pick rule and the
extension step. tune_check.py checks the table against the spec, tune_plan.py plans the tuning
runs, and sweep/tune.py reads their results from the store and records the choices.

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
from dataclasses import dataclass, field
from typing import Literal, Optional, Union

from ..train.config import RunConfig
from ..typed import Typed
from .grid import RUNNER_FIXED
from .rows import selects

TUNE_SUFFIX = ".tune"
NOT_CHOSEN_YET = "tuning not finished"
MAX_EXTEND = 4          # tune.extend: values a row may add beyond one end of its grid


def tune_name(spec_name: str) -> str:
    """The name of a spec's tuning sweep in the store."""
    return spec_name + TUNE_SUFFIX


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def finite(v) -> bool:
    return _number(v) and math.isfinite(v)


def _unwrap(tp):
    """Optional[T] -> T (the config's nested tables are never unions otherwise)."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1 else tp



def axis_problem(axis: str) -> str | None:
    """Why `axis` is not a dotted key of one value in a run config (None: it is one)."""
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


def sets_key(table: dict, axis: str) -> bool:
    """Whether an override table sets the dotted key."""
    node = table
    for part in axis.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


# ---- each row's values ---------------------------------------------------------------------------
def entry_selects(entry, variant: str, point: dict) -> bool:
    """Whether a [[tune.rows]] entry selects the row (variant, grid point without the axis)."""
    return selects(entry.match, variant, point)


def _entry(t, variant: str, point: dict):
    """The first [[tune.rows]] entry that selects the row, or None."""
    return next((entry for entry in t.rows if entry_selects(entry, variant, point)), None)


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


# ---- the choice ----------------------------------------------------------------------------------
Number = Union[int, float]  # an int axis (e.g. optim.warmup_steps) stays int in records and configs


@dataclass(frozen=True)
class ValueResult(Typed):
    """One value of a row's tuning: its tuning runs' mean metric and how many completed, diverged,
    failed or have not finished."""
    value: Number
    mean: Optional[float]
    n: int
    diverged: int
    failed: int
    unfinished: int


@dataclass(frozen=True)
class TuningChoice(Typed):
    """One tuning row's choice, as a sweep records it (specs/<spec>.json, "tuned") and a report
    reads it back: the row (scale, variant, grid point without the tuned axis), the rule it was
    chosen by, the value (None while a tuning run is unfinished) and every value's result."""
    scale: str
    variant: str
    grid: dict
    axis: str
    metric: Literal["best_val_loss", "final_val_loss"]
    seeds: list[int]                  # the row's tuning seeds
    value: Optional[Number]
    values: list[ValueResult]         # ascending, over the row's values (an extension's included)
    edge: Optional[Literal["top", "bottom"]] = None  # the chosen value is this end of its values
    extended: dict[str, int] = field(default_factory=lambda: {"top": 0, "bottom": 0})  # values added a side
    note: Optional[str] = None

    @classmethod
    def from_record(cls, data: dict, where: str = "tuned") -> "TuningChoice":
        """A recorded choice (ConfigError naming the key when the record is damaged)."""
        return cls.from_dict(data, prefix=where)


def pick(values: list, results: dict, n_seeds: int) -> tuple[object, list[dict], str | None]:
    """The rule, on one row: results maps value -> [(status, metric)] of its tuning runs.

    Returns (chosen value or None while a run is unfinished, one summary per value, a note or None).
    A value is eligible when each of its n_seeds runs completed with a finite metric; the eligible
    value with the lowest mean wins, ties to the smaller value (values are scanned ascending, and
    only a strictly lower mean replaces the best). No eligible value: the smallest, with a note."""
    table, best, best_mean, unfinished = [], None, math.inf, False
    for v in sorted(values):
        res = results.get(v, [])
        done = [m for st, m in res if st == "completed" and finite(m)]
        diverged = sum(st == "diverged" for st, _ in res)
        failed = sum(st == "failed" or (st == "completed" and not finite(m)) for st, m in res)
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
    if not (finite(lo) and finite(hi)) or lo <= 0 or hi <= lo:
        return None
    end = values[-1] if side == "top" else values[0]
    value = float(f"{(end * hi / lo if side == 'top' else end * lo / hi):.2g}")
    if all(isinstance(v, int) for v in values):
        value = int(round(value))
    return value if value > 0 and value not in values else None


def row_key(scale: str, variant: str, point: dict) -> str:
    return json.dumps([scale, variant, point], sort_keys=True)




def row_of(run, axis: str) -> tuple[str, str, dict]:
    """(scale, variant, grid point without the tuned axis) of a tuning run: the row it tunes."""
    return run.scale, run.variant, {k: v for k, v in run.grid.items() if k != axis}
