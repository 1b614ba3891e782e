"""[[more_seeds]]: more comparison seeds for the rows where they decide something.

A study's claims often rest on a few of its rows (the 6-layer models, say) while the others only
draw the picture. Seeds cost the same everywhere, so a spec can give just those rows more:

    seeds = [1337, 42, 123]              # every row
    [[more_seeds]]                       # the rows the claims compare: effects of 0.02 against a
    match = { n_layer = 6 }              #   seed spread of 0.02 need more than 3 seeds
    seeds = [1, 2]
    scales = ["cpu"]                     # optional: the scales it applies to (default: every scale)

`match` selects rows as a claim's cell does (a variant and/or grid points), and its `variant`
may also be a list of variants. A row trains on the spec's seeds, then on the seeds of every
entry that selects it (in the order the entries first name them). The seeds are comparison seeds
like the spec's: disjoint from them and from every tuning seed, and `--seeds N` leaves them out of
the N (it chooses the spec's part only). A claim between two rows that ran the same seeds is paired
over all of them; one between a selected row and another compares the two unpaired (Welch's t,
each on its own seeds), as report/claims.py does for any two cells whose seeds differ.
"""

from __future__ import annotations

from typing import Union

from .rows import check_row_match, claim_grid, match_text, spec_rows
from .rows import selects as cell_selects
from .schema import MoreSeeds, check_seed_list
from .tune import all_tuning_seeds


def _variant_ok(want: Union[str, list], variant: str) -> bool:
    return variant in want if isinstance(want, list) else variant == want


def selects(entry: MoreSeeds, scale: str, variant: str, point: dict) -> bool:
    """Whether the entry selects the row (variant, grid point) at `scale`."""
    if entry.scales is not None and scale not in entry.scales:
        return False
    rest = {k: v for k, v in entry.match.items() if k != "variant"}
    return ("variant" not in entry.match or _variant_ok(entry.match["variant"], variant)) \
        and cell_selects(rest, variant, point)


def extra_seeds(spec, scale: str, variant: str, point: dict) -> list[int]:
    """The seeds a row trains on beyond the spec's: every selecting entry's, once each, in the order
    the entries first name them (the sweep's seed order)."""
    chosen = {s for entry in spec.more_seeds if selects(entry, scale, variant, point) for s in entry.seeds}
    return [s for s in all_extra_seeds(spec) if s in chosen]


def comparison_seeds(spec, scale: str, variant: str, point: dict) -> list[int]:
    """Every comparison seed of a row: the spec's, then its more_seeds (disjoint: check_more_seeds)."""
    return [*spec.seeds, *extra_seeds(spec, scale, variant, point)]


def all_extra_seeds(spec) -> list[int]:
    """Every seed some [[more_seeds]] entry adds, in the order written."""
    return list(dict.fromkeys(s for entry in spec.more_seeds for s in entry.seeds))


def check_more_seeds(spec, errors: list[str]) -> None:
    """Problems of the [[more_seeds]] entries, one line each at their path: an empty or unknown
    selector, unknown scales, a bad seed list, a seed that is also a spec seed or a tuning seed."""
    tuning = set(all_tuning_seeds(spec.tune)) if spec.tune is not None else set()
    for i, entry in enumerate(spec.more_seeds):
        where = f"more_seeds[{i}]"
        check_entry_rows(spec, entry, where, errors,
                         empty="name the rows that need more seeds (a variant and/or grid points, e.g. "
                               "{ n_layer = 6 }), or add the seeds to `seeds` for every row")
        check_seed_list(entry.seeds, f"{where}.seeds", "[1, 2]", errors)
        for other, name in ((set(spec.seeds), "the spec's seeds: every row trains on them already"),
                            (tuning, "tuning seeds: the comparison would be judged on the runs that chose its values")):
            shared = sorted(set(entry.seeds) & other)
            if shared:
                errors.append(f"{where}.seeds: {shared} are also {name}")



def check_entry_rows(spec, entry, where: str, errors: list[str], empty: str) -> None:
    """The row part of an entry that selects rows by `match` at `scales` ([[more_seeds]],
    [[exclude]]): an empty or unknown selector, unknown scales, and, when those are fine, a
    selector that picks no row at its scales."""
    check_row_match(spec, entry.match, f"{where}.match", claim_grid(spec, entry.scales), errors,
                    empty=empty, lists=True)
    for s in entry.scales or []:
        if s not in spec.scales:
            errors.append(f"{where}.scales: unknown scale {s!r}; scales are "
                          f"{', '.join(sorted(spec.scales)) or 'none declared'}")
    if not _named_already(errors, where) and not any(selects(entry, *row) for row in spec_rows(spec, entry.scales)):
        errors.append(f"{where}.match: selects no row" + (f" at scale {', '.join(entry.scales)}" if entry.scales else "")
                      + "; check its variant and grid values against the rows that scale runs")


def _named_already(errors: list[str], where: str) -> bool:
    """Whether an earlier line already names this entry's match (then 'selects no row' would repeat it)."""
    return any(f"{where}.match" in line or f"{where}.scales" in line for line in errors)


def describe(entries: list[MoreSeeds], scale: str | None = None) -> list[str]:
    """One line per entry (those that apply at `scale`, when given) for plans and reports:
    'seeds 1, 2 also on n_layer = 6; variant = pre-ln, lime (scale cpu)'."""
    lines = []
    for entry in entries:
        if scale is not None and entry.scales and scale not in entry.scales:
            continue
        lines.append(f"seeds {', '.join(map(str, entry.seeds))} also on {match_text(entry.match)}"
                     + (f" (scale {', '.join(entry.scales)})" if entry.scales else ""))
    return lines
