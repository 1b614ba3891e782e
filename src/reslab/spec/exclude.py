"""[[exclude]]: rows of the grid a scale leaves out.

A grid is a product, and a study's claims do not always need all of it: designs whose published
claims are about deep models need no shallow row, and at a CPU scale each row is minutes of tuning
and seeds. An entry names rows as a [[more_seeds]] entry does (a variant, or a list of them, and/or
grid points), at the scales it applies to:

    [[exclude]]                                  # their claims are at 16 layers
    match = { variant = ["gpas", "keel"], depth = "L4" }
    scales = ["cpu"]                             # optional: the scales it applies to (default: every scale)

A row an entry selects is neither tuned nor compared there, and the report's tables leave its cells
empty. Refused, one line each: an entry that selects no row, one that leaves a scale nothing to run,
a claim with a cell whose every row is left out at a scale the claim applies to (its verdict would
rest on no runs), and a claim whose cells pool an axis over different values once rows are left out
("none" pooled over 4 and 16 layers against "full" at 16 only would compare different depth mixes).
"""

from __future__ import annotations

import json

from .claims import parse_claim
from .more_seeds import check_entry_rows, selects
from .rows import cell_text, match_text, resolve_key, spec_rows
from .rows import selects as cell_selects


def excluded(spec, scale: str, variant: str, point: dict) -> bool:
    """Whether some [[exclude]] entry leaves the row (variant, grid point) out at `scale`."""
    return any(selects(entry, scale, variant, point) for entry in spec.exclude)


def describe_exclude(entries: list, scale: str | None = None) -> list[str]:
    """One line per entry (those that apply at `scale`, when given) for plans and reports:
    'left out: variant = gpas, keel; depth = L4 (scale cpu)'."""
    return [f"left out: {match_text(entry.match)}" + (f" (scale {', '.join(entry.scales)})" if entry.scales else "")
            for entry in entries if scale is None or not entry.scales or scale in entry.scales]


def check_exclude(spec, errors: list[str]) -> None:
    """Problems of the [[exclude]] entries and of the claims they would leave without runs."""
    for i, entry in enumerate(spec.exclude):
        where = f"exclude[{i}]"
        check_entry_rows(spec, entry, where, errors,
                         empty="name the rows to leave out (a variant and/or grid points, e.g. "
                               "{ variant = \"keel\", depth = \"L4\" })")
    if not spec.exclude or any(line.startswith("exclude[") for line in errors):
        return
    for scale in list(spec.scales) or [""]:
        rows = list(spec_rows(spec, [scale]))
        if rows and all(excluded(spec, *row) for row in rows):
            errors.append(f"exclude: leaves scale {scale!r} no row to run; narrow an entry's match or scales")
    for i, claim in enumerate(spec.claims):
        parsed = parse_claim(claim, f"claims[{i}]", [])
        if parsed is None or not parsed.valid:
            continue  # check_claims reports it
        cells = [c for c in parsed.cells if c is not None]
        for scale in [s for s in (parsed.scales or list(spec.scales) or [""]) if s in spec.scales or s == ""]:
            problem = _claim_problem(spec, cells, scale)
            if problem:
                errors.append(f"claims[{i}]: {problem}")
                break


def _claim_problem(spec, cells: list, scale: str) -> str | None:
    """Why the claim's cells cannot be compared at `scale` once rows are left out, or None."""
    kept, pooled = [], []
    for cell in cells:
        match = dict(cell.axes, variant=cell.variant)
        rows = [row for row in spec_rows(spec, [scale]) if cell_selects(match, row[1], row[2])]
        left = [point for *_, point in (row for row in rows if not excluded(spec, *row))]
        if rows and not left:
            return (f"its cell {cell_text(cell.variant, cell.axes)} has no row at scale {scale!r}: "
                    "[[exclude]] leaves out every row it selects")
        axes = list(rows[0][2]) if rows else []
        named = {a for key in cell.axes for a in resolve_key(key, axes)}
        kept.append(left)
        pooled.append(set(axes) - named)
    common = set.intersection(*pooled) if pooled else set()
    seen = [{json.dumps({a: p[a] for a in sorted(common)}) for p in points} for points in kept]
    if common and any(s != seen[0] for s in seen):
        shown = "; ".join(f"{cell_text(c.variant, c.axes)}: " + ", ".join(sorted(s)) for c, s in zip(cells, seen))
        return (f"its cells pool {', '.join(sorted(common))} over different values at scale {scale!r} once "
                f"[[exclude]] leaves rows out ({shown}); name the grid point in each cell")
    return None
