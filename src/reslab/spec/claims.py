"""[[claims]]: the published claims a study tests, as typed Claim records, and their checks
against the spec. The report's verdict on each is report/claims.py's.

A study spec lists the claims of its papers as checkable statements about the runs it plans, so
that the report says, claim by claim and with the numbers, whether this sweep reproduced it.

Format. Every claim is one [[claims]] table with

    id         letters, digits, '_', '.', '+', '-'; unique in the spec
    statement  the claim as a sentence a human reads
    source     where it comes from (paper or seed document, and its number)
    kind       "difference" | "level" | "spread" | "fails" | "trains" | "trend"
    metric     optional: "best_val_loss" (default) or "final_val_loss"
    scales     optional: the scales it applies to (default: every scale)

and, by kind, its cells and its test. A cell is a variant, optionally at a grid point: a string
(`a = "attn-only"`) or a table with `variant` and grid axes (`a = { variant = "resi-dual",
depth = "L16" }`). An axis is named by its full dotted key ("model.n_layer") or by its last
component ("n_layer"); a named axis ([grid.depth.L16]) takes a point name. Axes a cell leaves out
are pooled over: the unit of a test is then (those axes' values, seed). An axis that some cells of
a claim name and others do not is taken to be the same for all of them (write it in every cell to
compare different points).

    # difference: mean(a - b) <op> threshold
    [[claims]]
    id = "attn-only-small-cost"
    statement = "Removing the MLP skip costs less than 0.15 nats"
    source = "seed 000, ResidualGPT 10M table: attn-only 1.5999 vs full 1.5017"
    kind = "difference"
    a = "attn-only"
    b = "full"
    op = "<"
    threshold = 0.15

    # equivalence: op "within" tests |mean(a - b)| < threshold (two one-sided tests, TOST)
    [[claims]]
    id = "gated-matches-pre-ln"
    statement = "The gated block ends within 0.02 nats of Pre-LN"
    source = "a design card's equivalence verdict"
    kind = "difference"
    a = "gated"
    b = "pre-ln"
    op = "within"
    threshold = 0.02

    # the same variant at two grid points
    [[claims]]
    id = "post-ln-needs-warmup"
    statement = "Post-LN at 16 layers without warmup is worse than with warmup"
    source = "seed 002: Xiong et al. 2020, section 3"
    kind = "difference"
    a = { variant = "post-ln", depth = "L16", warmup = "none" }
    b = { variant = "post-ln", depth = "L16", warmup = "w100" }
    op = ">"
    threshold = 0.0

    # level: mean(a - reference) <op> threshold; reference "unigram", "bigram" or a number (nats)
    [[claims]]
    id = "ffn-only-collapses"
    statement = "Without the attention skip, training collapses to the unigram level"
    source = "seed 000, table 1: ffn-only 3.3493 vs unigram 3.35"
    kind = "level"
    a = "ffn-only"
    reference = "unigram"
    op = ">"
    threshold = -0.1

    # spread: max - min of the cells' means <op> threshold
    [[claims]]
    id = "runtime-gains-overlap"
    statement = "Runtime branch gains 0.25-4 give overlapping curves"
    source = "seed 000, section 5.1"
    kind = "spread"
    cells = ["runtime-0.25", "runtime-0.5", "g1", "runtime-2", "runtime-4"]
    op = "<"
    threshold = 0.002

    # fails / trains: every run of the cell fails (trains)
    [[claims]]
    id = "post-ln-deep-fails"
    statement = "Post-LN at 24 layers without warmup fails"
    source = "seed 002: Xiong et al. 2020"
    kind = "fails"
    a = { variant = "post-ln", n_layer = 24 }
    scales = ["paper"]

    # trend (a spec with [ladder]): the slope of a - b per doubling of the rungs' parameters
    # <op> threshold, from every rung's per-seed differences; op "within": |slope| < threshold.
    # published (optional): the sign of a - b the paper reports, so the report can say whether
    # the published effect grows or shrinks with size
    [[claims]]
    id = "resi-dual-gain-grows"
    statement = "ResiDual's gain over Pre-LN grows with width"
    source = "seed 003"
    kind = "trend"
    a = "resi-dual"
    b = "pre-ln"
    op = "<"
    threshold = 0.0
    published = "<"

parse_claim reads one table into a Claim (the spec check and the report's evaluation read them
the same way); check_claims checks every claim against the spec's variants, grids and scales.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Optional, Union

from .rows import cell_text, claim_grid, complete_cells, flatten, is_number, resolve_cell_axes, same_value
from .ladder import RUNG_AXIS
from .schema import NAME_RE

__all__ = ["KINDS", "Cell", "Claim", "check_claims", "parse_claim"]

KINDS = ("difference", "level", "spread", "fails", "trains", "trend")
OPS = ("<", ">")
TREND_OPS = ("<", ">", "within")
METRICS = ("best_val_loss", "final_val_loss")
REFERENCES = ("unigram", "bigram")

COMMON = ("id", "statement", "source", "kind", "metric", "scales")
KIND_KEYS = {  # kind -> keys it requires (beyond id, statement, source, kind)
    "difference": ("a", "b", "op", "threshold"),
    "level": ("a", "reference", "op", "threshold"),
    "spread": ("cells", "op", "threshold"),
    "fails": ("a",),
    "trains": ("a",),
    "trend": ("a", "b", "op", "threshold"),
}
OPTIONAL_KEYS = {"trend": ("published",)}


@dataclass(frozen=True)
class Cell:
    """One cell of a claim: a variant, optionally at a grid point ({axis key as written: value})."""
    variant: str
    axes: dict


@dataclass(frozen=True)
class Claim:
    """One [[claims]] table, read. A claim with problems is still read (valid = False, the problems
    in the caller's errors), so that the spec check can look at its cells and scales too and report
    every problem at once; only a valid one is evaluated. A cell that could not be read is None."""
    id: Optional[str]
    statement: Optional[str]
    source: Optional[str]
    kind: Optional[str]
    metric: str
    scales: Optional[list[str]]
    op: Optional[str]
    threshold: Union[int, float, None]
    reference: Union[str, int, float, None]
    cells: tuple[Optional[Cell], ...]
    valid: bool
    published: Optional[str] = None  # trend: the sign of a - b the paper reports ("<" or ">")

    def header(self) -> dict:
        """What every verdict of this claim repeats."""
        return {"id": self.id, "statement": self.statement, "source": self.source, "kind": self.kind,
                "metric": self.metric}


def _parse_cell(value, where: str, errors: list[str]) -> Cell | None:
    """A cell as written: a variant name, or a table with `variant` and grid axes."""
    if isinstance(value, str):
        return Cell(value, {})
    if not isinstance(value, dict):
        errors.append(f"{where}: a cell is a variant name or a table {{ variant = \"...\", <axis> = <value> }}, "
                      f"got {value!r}")
        return None
    variant = value.get("variant")
    if not isinstance(variant, str):
        errors.append(f"{where}.variant: required: the variant's name" if variant is None
                      else f"{where}.variant: expected a variant name, got {variant!r}")
        return None
    axes = flatten({k: v for k, v in value.items() if k != "variant"})
    ok = True
    for k, v in axes.items():
        if not isinstance(v, (str, int, float, bool)) or (isinstance(v, float) and not math.isfinite(v)):
            errors.append(f"{where}.{k}: a grid value is a number, a string or a point name, got {v!r}")
            ok = False
    return Cell(variant, axes) if ok else None


def parse_claim(claim, where: str, errors: list[str]) -> Claim | None:
    """A claim in normal form, or None (its problems appended to errors). Needs no spec."""
    if not isinstance(claim, dict):
        errors.append(f"{where}: expected a table, got {claim!r}")
        return None
    n_before = len(errors)
    kind = claim.get("kind")
    if kind is None:
        errors.append(f"{where}.kind: required; one of {', '.join(KINDS)}")
    elif kind not in KINDS:
        errors.append(f"{where}.kind: unknown kind {kind!r}; kinds are {', '.join(KINDS)}")
    for key in ("id", "statement", "source"):
        v = claim.get(key)
        if v is None:
            errors.append(f"{where}.{key}: required")
        elif not isinstance(v, str) or not v.strip():
            errors.append(f"{where}.{key}: expected a non-empty string, got {v!r}")
    cid = claim.get("id")
    if isinstance(cid, str) and cid.strip() and not NAME_RE.match(cid):
        errors.append(f"{where}.id: {cid!r} must be letters, digits, '_', '.', '+' or '-'")
    metric = claim.get("metric", "best_val_loss")
    if metric not in METRICS:
        errors.append(f"{where}.metric: {metric!r} is not allowed; choose one of {', '.join(METRICS)}")
    scales = claim.get("scales")
    if scales is not None and (not isinstance(scales, list) or not scales
                               or not all(isinstance(s, str) for s in scales)):
        errors.append(f"{where}.scales: expected a non-empty list of scale names, got {scales!r}")
        scales = None
    if kind not in KINDS:
        return None
    needed = KIND_KEYS[kind]
    allowed = COMMON + needed + OPTIONAL_KEYS.get(kind, ())
    for key in claim:
        if key not in allowed:
            errors.append(f"{where}.{key}: unknown key for kind {kind!r}; allowed keys are "
                          f"{', '.join(sorted(allowed))}")
    for key in needed:
        if key not in claim:
            errors.append(f"{where}.{key}: required for kind {kind!r}")
    op = claim.get("op")
    if kind == "trend" and op is not None and op not in TREND_OPS:
        errors.append(f"{where}.op: expected \"<\", \">\" or \"within\" (|slope| < threshold), got {op!r}")
    elif kind == "difference" and op is not None and op not in TREND_OPS:
        errors.append(f"{where}.op: expected \"<\", \">\" or \"within\" (|a - b| < threshold), got {op!r}")
    elif kind not in ("trend", "difference") and "op" in needed and op is not None and op not in OPS:
        errors.append(f"{where}.op: expected \"<\" or \">\", got {op!r} (with a continuous loss, "
                      "<= and >= test the same thing)")
    published = claim.get("published")
    if kind == "trend" and published is not None and published not in OPS:
        errors.append(f"{where}.published: expected \"<\" or \">\" (the sign of a - b the paper reports), "
                      f"got {published!r}")
    threshold = claim.get("threshold")
    if "threshold" in needed and threshold is not None and (
            not is_number(threshold) or not math.isfinite(threshold)):
        errors.append(f"{where}.threshold: expected a finite number (nats), got {threshold!r}")
    if kind == "spread" and threshold is not None and is_number(threshold) and threshold < 0:
        errors.append(f"{where}.threshold: a spread is >= 0; got {threshold}")
    if op == "within" and kind in ("trend", "difference") and is_number(threshold) and threshold <= 0:
        unit = "nats per doubling" if kind == "trend" else "nats"
        errors.append(f"{where}.threshold: \"within\" needs a positive bound ({unit}), got {threshold}")
    reference = claim.get("reference")
    if kind == "level" and reference is not None and not (
            reference in REFERENCES or (is_number(reference) and math.isfinite(reference))):
        errors.append(f"{where}.reference: expected \"unigram\", \"bigram\" or a number (nats), "
                      f"got {reference!r}")
    cells: list = []
    if kind == "spread":
        raw = claim.get("cells")
        if raw is not None and (not isinstance(raw, list) or len(raw) < 2):
            errors.append(f"{where}.cells: a spread needs a list of at least 2 cells, got {raw!r}")
        elif raw is not None:
            cells = [_parse_cell(c, f"{where}.cells[{i}]", errors) for i, c in enumerate(raw)]
    else:
        names = ("a", "b") if kind in ("difference", "trend") else ("a",)
        cells = [_parse_cell(claim[k], f"{where}.{k}", errors) for k in names if k in claim]
    # a claim with problems still goes back, marked invalid, so that the spec check can also look
    # at its cells and scales and report every problem at once; only a valid one is evaluated
    return Claim(id=cid, statement=claim.get("statement"), source=claim.get("source"), kind=kind,
                 metric=metric, scales=scales, op=op, threshold=threshold, reference=reference,
                 cells=tuple(cells), valid=len(errors) == n_before,
                 published=published if kind == "trend" else None)



def check_claims(spec, errors: list[str]) -> None:
    """Problems of the spec's [[claims]] entries, appended to errors at their path: unknown kinds,
    missing or unknown fields, cells naming unknown variants, grid axes or values, unknown scales,
    duplicate ids."""
    claims = getattr(spec, "claims", None) or []
    variants = ", ".join(sorted(spec.variants)) or "none declared"
    seen: dict[str, int] = {}
    for i, claim in enumerate(claims):
        where = f"claims[{i}]"
        cid = claim.get("id") if isinstance(claim, dict) else None
        if isinstance(cid, str):
            if cid in seen:
                errors.append(f"{where}.id: duplicate id {cid!r} (also claims[{seen[cid]}])")
            else:
                seen[cid] = i
        parsed = parse_claim(claim, where, errors)
        if parsed is None:
            continue
        for j, s in enumerate(parsed.scales or []):
            if spec.scales and s not in spec.scales:
                errors.append(f"{where}.scales[{j}]: unknown scale {s!r}; scales are {', '.join(sorted(spec.scales))}")
            elif not spec.scales:
                errors.append(f"{where}.scales: this spec declares no scales; remove it")
                break
        grid = claim_grid(spec, parsed.scales)
        if parsed.kind == "trend":
            if getattr(spec, "ladder", None) is None:
                errors.append(f"{where}.kind: a trend claim needs a [ladder] (its rungs are the sizes it spans)")
                continue
            for path in ("a", "b"):
                cell = claim.get(path)
                if isinstance(cell, dict) and RUNG_AXIS in cell:
                    errors.append(f"{where}.{path}.{RUNG_AXIS}: a trend spans every rung; name no rung")
                    parsed = None
            if parsed is None:
                continue
        if parsed.kind == "spread":
            paths = [f"cells[{j}]" for j in range(len(parsed.cells))]
        else:
            paths = [k for k in ("a", "b") if k in claim]
        resolved, ok = [], parsed.valid
        for path, cell in zip(paths, parsed.cells):
            at = f"{where}.{path}"
            if cell is None:  # its problem is reported already
                continue
            if cell.variant not in spec.variants:
                errors.append(f"{at}.variant: unknown variant {cell.variant!r}; variants are {variants}")
                ok = False
            named = resolve_cell_axes(cell.axes, grid, at, errors)
            ok = ok and named is not None
            resolved.append(named or {})
        if not ok:
            continue
        completed, problem = complete_cells(resolved)
        if problem:
            errors.append(f"{where}: {problem}")
            continue
        for (pi, ci), (pj, cj) in itertools.combinations(zip(paths, zip(parsed.cells, completed)), 2):
            if ci[0].variant == cj[0].variant and set(ci[1]) == set(cj[1]) and all(
                    same_value(ci[1][k], cj[1][k]) for k in ci[1]):
                errors.append(f"{where}.{pj}: the same cell as {pi} ({cell_text(cj[0].variant, cj[1])}); "
                              "a claim compares different cells")

