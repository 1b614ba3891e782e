"""The row selector: how claims, [[tune.rows]] and [[more_seeds]] name rows of a spec.

A row is a variant at a grid point. A selector (a claim's cell, a `match`) is a variant name, or a
table `{ variant = "resi-dual", depth = "L16" }` whose keys other than `variant` name grid axes: by
the full dotted key ("model.n_layer") or by its last component ("n_layer"); a named axis
([grid.depth.L16]) takes a point name. A key a selector leaves out selects every value of that
axis. Grid values compare as numbers where both are numbers (16 == 16.0), never a bool as a number.
"""

from __future__ import annotations

import math
from typing import Optional

from .grid import grid_points
from .ladder import effective_grid


def flatten(table: dict, prefix: str = "") -> dict:
    """{"model": {"n_layer": 16}} -> {"model.n_layer": 16}: TOML writes `model.n_layer = 16` in an
    inline table as a nested table, and a quoted "model.n_layer" as one key; both mean the axis."""
    out = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def same_value(x, y) -> bool:
    """Grid values equal: 16 == 16.0, but a bool is not a number and a name is not a number."""
    if isinstance(x, bool) or isinstance(y, bool):
        return isinstance(x, bool) and isinstance(y, bool) and x == y
    if is_number(x) and is_number(y):
        return math.isclose(float(x), float(y), rel_tol=1e-12, abs_tol=0.0)
    return type(x) is type(y) and x == y



def resolve_key(key: str, axes: list[str]) -> list[str]:
    """The grid axes a selector key names: its full dotted key, or the axis's last component."""
    if key in axes:
        return [key]
    return [a for a in axes if a.rsplit(".", 1)[-1] == key]


def complete_cells(resolved: list[dict]) -> tuple[list[dict], str | None]:
    """Give every cell the axes other cells name when those agree (an axis one cell names and the
    other leaves out means the same point for both); a disagreement is a problem to report."""
    named = list(dict.fromkeys(a for cell in resolved for a in cell))
    out = [dict(cell) for cell in resolved]
    for axis in named:
        values = [cell[axis] for cell in resolved if axis in cell]
        if len(values) == len(resolved):
            continue
        if all(same_value(v, values[0]) for v in values):
            for cell in out:
                cell.setdefault(axis, values[0])
        else:
            shown = ", ".join(dict.fromkeys(str(v) for v in values))
            return out, (f"some cells name {axis} with different values ({shown}) and others leave it "
                         f"out; name {axis} in every cell")
    return out, None



def _named_point_hint(key: str, value, grid: dict) -> str:
    """For a key set inside named grid points (depth.L16 sets model.n_layer): which point to name."""
    for axis, points in grid.items():
        if not isinstance(points, dict):
            continue
        hits = [name for name, table in points.items() if isinstance(table, dict)
                and any((k == key or k.rsplit(".", 1)[-1] == key) and same_value(v, value)
                        for k, v in flatten(table).items())]
        setters = [name for name, table in points.items() if isinstance(table, dict)
                   and any(k == key or k.rsplit(".", 1)[-1] == key for k in flatten(table))]
        if hits:
            return f" ({key} is set by the named axis {axis}: write {axis} = \"{hits[0]}\")"
        if setters:
            return f" ({key} is set by the named axis {axis}, whose points are {', '.join(points)})"
    return ""


def claim_grid(spec, scales: list | None) -> dict:
    """The grid a claim's cells name values of: the union of the grids of the scales it applies to
    (a scale's [scale_grid] replaces [grid] there), so a claim for `scales = ["paper"]` may name a
    depth only the paper scale runs."""
    base = spec.grid if isinstance(spec.grid, dict) else {}
    scale_grid = getattr(spec, "scale_grid", None) or {}
    chosen = [s for s in (scales or list(spec.scales or {})) if s in (spec.scales or {})] or [None]
    out: dict = {}
    for s in chosen:
        grid = scale_grid.get(s, base) if s is not None else base
        if getattr(spec, "ladder", None) is not None:  # the rung axis (ladder.py), at this scale's rungs
            grid = effective_grid(spec, s or "")
        for axis, points in grid.items():
            if isinstance(points, dict):
                merged = out.setdefault(axis, {})
                if isinstance(merged, dict):
                    merged.update(points)
            elif isinstance(points, list):
                merged = out.setdefault(axis, [])
                if isinstance(merged, list):
                    merged.extend(v for v in points if not any(same_value(v, w) for w in merged))
    return out


def resolve_cell_axes(cell_axes: dict, grid: dict, at: str, errors: list[str]) -> dict | None:
    """A cell's axes ({key as written: value}) as {full grid axis: value}, each key resolved against
    `grid` and each value checked to be one of its values or point names; None (its problems
    appended to errors at `at`) when any is not."""
    axes, named, ok = list(grid), {}, True
    for key, value in cell_axes.items():
        hit = resolve_key(key, axes)
        if not hit:
            known = ", ".join(axes) or "none (this spec has no grid)"
            errors.append(f"{at}.{key}: unknown grid axis; axes are {known}" + _named_point_hint(key, value, grid))
            ok = False
            continue
        if len(hit) > 1:
            errors.append(f"{at}.{key}: ambiguous: grid axes {' and '.join(hit)} both end in {key}; write the full key")
            ok = False
            continue
        axis = hit[0]
        if axis in named:
            errors.append(f"{at}.{key}: grid axis {axis} is named twice")
            ok = False
            continue
        points = grid[axis]
        if isinstance(points, dict):
            if not isinstance(value, str) or value not in points:
                errors.append(f"{at}.{key}: {value!r} is not a point of the named grid axis {axis}; "
                              f"points are {', '.join(points)}")
                ok = False
                continue
        elif isinstance(points, list) and not any(same_value(value, v) for v in points):
            errors.append(f"{at}.{key}: {value!r} is not a value of grid axis {axis}; values are "
                          f"{', '.join(str(v) for v in points)}")
            ok = False
            continue
        named[axis] = value
    return named if ok else None


def selects(match: dict, variant: str, point: dict) -> bool:
    """Whether a selector written as a claim's cell ({variant = ..., <axis> = <value>}, every key
    optional) selects the row (variant, grid point {full axis: value or point name})."""
    for key, want in flatten(match).items():
        if key == "variant":
            if variant != want:
                return False
            continue
        hit = resolve_key(key, list(point))
        if len(hit) != 1 or not same_value(point[hit[0]], want):
            return False
    return True



def row_name(variant: str, point: dict) -> str:
    """A report row's name: the variant, then each grid axis's last key part and value
    ('pre-ln-n_layer=16-lr=0.001')."""
    def short(v):
        return f"{v:g}" if isinstance(v, float) else str(v)
    return "-".join([variant] + [f"{k.rsplit('.', 1)[-1]}={short(v)}" for k, v in point.items()])


def match_text(match: dict) -> str:
    """A row selector as plans and reports show it: 'variant = pre-ln, lime; n_layer = 6'."""
    return "; ".join(f"{k} = {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in match.items())


def cell_text(variant: str, axes: dict) -> str:
    if not axes:
        return variant
    return f"{variant} (" + ", ".join(f"{k.rsplit('.', 1)[-1]} = {v}" for k, v in axes.items()) + ")"



def check_row_match(spec, match: dict, where: str, grid: dict, errors: list[str], empty: str,
                    lists: bool = False) -> None:
    """Problems of a row selector (a [[more_seeds]] or [[tune.rows]] entry's match), written as a
    claim's cell: empty, an unknown variant (or, with `lists`, an empty list of them), grid axes or
    values that `grid` does not have."""
    if not match:
        errors.append(f"{where}: empty; {empty}")
    want = match.get("variant")
    if isinstance(want, list) and not lists:
        errors.append(f"{where}.variant: name one variant here (one entry per variant), got a list")
    else:
        known = ", ".join(sorted(spec.variants)) or "none declared"
        for name in (want if isinstance(want, list) else [] if want is None else [want]):
            if not isinstance(name, str) or name not in spec.variants:
                errors.append(f"{where}.variant: unknown variant {name!r}; variants are {known}")
        if isinstance(want, list) and not want:
            errors.append(f"{where}.variant: an empty list selects no row; name at least one variant")
    resolve_cell_axes({k: v for k, v in match.items() if k != "variant"}, grid, where, errors)


def spec_rows(spec, scales: Optional[list[str]] = None):
    """(scale, variant, grid point) of every row of the grid at `scales` (default: every scale), the
    left-out rows included: the rows scale_variants lets a scale run."""
    for scale in scales or list(spec.scales) or [""]:
        for variant in spec.variants:
            if scale in spec.scale_variants and variant not in spec.scale_variants[scale]:
                continue
            grid = effective_grid(spec, scale)
            for point, _ in grid_points(grid) if grid else [({}, {})]:
                yield scale, variant, point
