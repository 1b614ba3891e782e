"""The tuning sweep's planned runs: at a scale that tunes ([tune], tune.py), every row x each of
its values x each of its tuning seeds, planned as the sweep <spec>.tune with the tuned axis as one
more grid axis; and the counts a plan shows before any of them has run."""

from __future__ import annotations

import dataclasses
import json

from ..errors import ConfigError, ReslabError
from .expand import chosen_scales, expand
from .more_seeds import comparison_seeds
from .tune import (all_tuning_seeds, entry_selects, row_key, row_of, row_seeds, row_values, sets_key, tune_name,
                   value_lists)


def tuning_scales(spec, scales: list[str] | None = None) -> list[str]:
    """The chosen scales that tune ("" for a spec without scales)."""
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
    t = spec.tune
    tscales = tuning_scales(spec, scales)
    if not tscales:
        return []
    at = tscales if spec.scales else None
    if not t.rows:
        return expand(tuning_spec(spec, values), at, where=where)
    if values is not None:
        return [run for run in expand(tuning_spec(spec, values), at, where=where)
                if run.seed in row_seeds(t, *row_of(run, t.axis)[1:])]
    runs, taken = [], [0] * len(t.rows)
    for vals in value_lists(t):
        planned = expand(tuning_spec(spec, vals), at, where=where)
        for run in planned:
            _, variant, point = row_of(run, t.axis)
            if row_values(t, variant, point) == vals and run.seed in row_seeds(t, variant, point):
                runs.append(run)
    for run in runs:  # which entry took each row: one that takes none is a mistake in the spec
        _, variant, point = row_of(run, t.axis)
        hit = next((i for i, e in enumerate(t.rows) if entry_selects(e, variant, point)), None)
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
    if spec.tune is None or not sets_key(spec.overrides, spec.tune.axis) or not tuning_scales(spec, scales):
        return
    at = ", ".join(s for s in tuning_scales(spec, scales) if s) or "every run"
    raise ReslabError(f"{where} {spec.tune.axis}: conflicts with [tune] axis {spec.tune.axis}, which chooses each "
                      f"row's own value ({at}); drop the {where}, or run a scale that does not tune")



def comparison_counts(spec, scales: list[str] | None = None, runs: list | None = None) -> dict[str, int]:
    """scale -> how many comparison runs a tuning scale plans once tuned (each row's seeds: the
    spec's and its [[more_seeds]])."""
    runs = tuning_runs(spec, scales) if runs is None else runs
    rows: dict[str, set] = {}
    for run in runs:
        scale, variant, point = row_of(run, spec.tune.axis)
        rows.setdefault(scale, set()).add(json.dumps([variant, point], sort_keys=True))
    return {s: sum(len(comparison_seeds(spec, s, *json.loads(r))) for r in keys) for s, keys in rows.items()}



def most_extension_runs(spec, scales: list[str] | None = None) -> int:
    """The most tuning runs tune.extend can add: every row extending to its limit on one side (a row
    never extends both ways: see tuning_plan), on each of its tuning seeds."""
    t = spec.tune
    if t is None or not t.extend:
        return 0
    rows = {row_key(*row_of(run, t.axis)) for run in tuning_runs(spec, scales)}
    return t.extend * sum(len(row_seeds(t, variant, point)) for _, variant, point in map(json.loads, rows))


def all_planned(spec, scales: list[str] | None = None) -> tuple[list, int]:
    """(every run whose config is known before training: the tuning runs and the comparison runs of
    the scales that do not tune, number of comparison runs planned after tuning); for the checks
    and estimates that come before a sweep starts."""
    truns = tuning_runs(spec, scales)
    later = sum(comparison_counts(spec, scales, truns).values()) if truns else 0
    return truns + expand(spec, scales), later
