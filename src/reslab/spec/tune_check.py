"""[tune]'s checks against the rest of the spec: its axis, values, seeds, scales and
[[tune.rows]], and [report] sensitivity (the other table over a learning-rate axis)."""

from __future__ import annotations

from .expand import MAX_RUNS, planned_count
from .grid import check_overrides, grids, nested
from .rows import check_row_match, claim_grid
from .schema import NAME_RE, check_seed_list
from .tune import MAX_EXTEND, axis_problem, finite, seed_lists, sets_key, tune_name, value_lists


def check_tune(spec, errors: list[str]) -> None:
    """Problems of the spec's [tune] table (and of [report] sensitivity), appended to errors at
    their path, one line each."""
    _check_sensitivity(spec, errors)
    t = spec.tune
    if t is None:
        return
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
    for where, grid in grids(spec):
        if t.axis in grid:
            errors.append(f"tune.axis: {t.axis} is also the grid axis {where}[{t.axis!r}]; a row's value "
                          "comes from tuning, so remove one of them")
        for key, points in grid.items():
            if isinstance(points, dict):
                for name, table in points.items():
                    if isinstance(table, dict) and sets_key(table, t.axis):
                        errors.append(f"{where}.{key}.{name}: sets {t.axis}, which tune.axis chooses for each row; "
                                      "remove it")
    if sets_key(spec.overrides, t.axis):
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
    if len(values) < 2:
        errors.append(f"{where}: give at least 2 values to choose from, got {values}")
    bad = [v for v in values if not finite(v)]
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
            check_overrides(nested(t.axis, v), "", found)
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
    t = spec.tune
    grid = claim_grid(spec, t.scales)
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
            check_seed_list(entry.seeds, f"{where}.seeds", "[9001, 9002, 9003]", errors)
            _check_disjoint(entry.seeds, spec.seeds, f"{where}.seeds", errors)



def _check_sensitivity(spec, errors: list[str]) -> None:
    s = spec.report.sensitivity
    if s is None:
        return
    axes = [(where, grid[s.axis]) for where, grid in grids(spec) if s.axis in grid]
    if not axes:
        errors.append(f"report.sensitivity.axis: {s.axis!r} is not a grid axis of this spec; the "
                      "sensitivity is taken over a grid of values, e.g. grid.\"optim.lr\" = [1e-3, 3e-3, 1e-2]")
    for where, values in axes:
        if not isinstance(values, list) or len(values) < 2 or not all(finite(v) and v > 0 for v in values):
            errors.append(f"report.sensitivity.axis: {where}[{s.axis!r}] must list at least 2 positive "
                          "numbers (they are plotted on a log axis)")
    if s.cap is not None and s.cap <= 0:
        errors.append(f"report.sensitivity.cap: must be > 0 nats, got {s.cap}")
