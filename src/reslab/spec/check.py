"""The whole-spec check: names, cross-references between tables (baseline, scales, presets,
variants), every override table, each table's own check ([tune], [[more_seeds]], [[exclude]], [[claims]]) and
the spec's size. Every problem is one line at its path; the caller raises them together."""

from __future__ import annotations

from ..errors import ReslabError
from .claims import check_claims
from .expand import MAX_RUNS, planned_count
from .grid import check_axis_values, check_grid, check_overrides, check_preset, grids
from .ladder import check_ladder
from .exclude import check_exclude
from .more_seeds import check_more_seeds
from .schema import NAME_RE, SweepSpec, check_seed_list
from .tune_check import check_tune


def _check_names(spec: SweepSpec, errors: list[str]) -> None:
    if not NAME_RE.match(spec.name):
        errors.append(f"name: {spec.name!r} must be letters, digits, '_', '.', '+' or '-' (it names folders)")
    for kind, names in (("variants", spec.variants), ("scales", spec.scales)):
        for n in names:
            if not NAME_RE.match(n):
                errors.append(f"{kind}.{n}: the name must be letters, digits, '_', '.', '+' or '-'")



def check_spec(spec: SweepSpec, errors: list[str]) -> None:
    """Every problem of a parsed spec, appended to errors (its runs' configs are expand()'s to check)."""
    _check_names(spec, errors)
    check_seed_list(spec.seeds, "seeds", "[1337, 42, 123]", errors)
    if not spec.variants:
        errors.append("variants: declare at least one variant, e.g. [variants.baseline] (an empty table is the base)")
    known = ", ".join(sorted(spec.variants)) or "none declared"
    if spec.baseline is not None and spec.baseline not in spec.variants:
        errors.append(f"baseline: unknown variant {spec.baseline!r}; variants are {known}")
    if spec.report.no_skip is not None and spec.report.no_skip not in spec.variants:
        errors.append(f"report.no_skip: unknown variant {spec.report.no_skip!r}; variants are {known}")
    for i, p in enumerate(spec.report.published):
        if p.variant not in spec.variants:
            errors.append(f"report.published[{i}].variant: unknown variant {p.variant!r}; variants are {known}")
    for s in spec.default_scales or []:
        if s not in spec.scales:
            errors.append(f"default_scales: unknown scale {s!r}; scales are "
                          f"{', '.join(sorted(spec.scales)) or 'none declared'}")
    for where, preset in [("preset", spec.preset)] + [(f"scale_presets.{k}", v) for k, v in spec.scale_presets.items()]:
        if preset is not None:
            try:
                check_preset(preset)
            except ReslabError as e:
                errors.append(f"{where}: {e}")
    for scale, names in spec.scale_variants.items():
        if scale not in spec.scales:
            errors.append(f"scale_variants.{scale}: unknown scale; scales are {', '.join(sorted(spec.scales)) or 'none'}")
        for n in names:
            if n not in spec.variants:
                errors.append(f"scale_variants.{scale}: unknown variant {n!r}; variants are {known}")
    for s in spec.scale_presets:
        if s not in spec.scales:
            errors.append(f"scale_presets.{s}: unknown scale; scales are {', '.join(sorted(spec.scales)) or 'none'}")
    for s in spec.scale_grid:
        if s not in spec.scales:
            errors.append(f"scale_grid.{s}: unknown scale; scales are {', '.join(sorted(spec.scales)) or 'none'}")
    for where, grid in grids(spec):
        check_grid(grid, where, errors)
    _check_numbers(spec, errors)
    check_tune(spec, errors)
    check_more_seeds(spec, errors)
    check_exclude(spec, errors)
    check_ladder(spec, errors)
    check_claims(spec, errors)
    check_overrides(spec.base, "base", errors)
    check_overrides(spec.overrides, "overrides", errors)
    for kind, tables in (("variants", spec.variants), ("scales", spec.scales)):
        for n, table in tables.items():
            check_overrides(table, f"{kind}.{n}", errors)
    for where, grid in grids(spec):
        for key, values in grid.items():
            if isinstance(values, dict):
                for name, table in values.items():
                    if isinstance(table, dict):
                        check_overrides(table, f"{where}.{key}.{name}", errors)
            elif isinstance(values, list):
                check_axis_values(key, values, errors, where)



def _check_numbers(spec: SweepSpec, errors: list[str]) -> None:
    """Counts and amounts of [slurm], [report] and [study] that only a positive (or non-negative)
    value makes meaningful, and the spec's size."""
    sl = spec.slurm
    for name, value, least in (("time_min", sl.time_min, 1), ("gpus_per_run", sl.gpus_per_run, 0),
                               ("cpus_per_task", sl.cpus_per_task, 1), ("mem_gb", sl.mem_gb, 1),
                               ("max_parallel", sl.max_parallel, 1)):
        if value is not None and value < least:
            errors.append(f"slurm.{name}: must be >= {least}, got {value}")
    if spec.report.collapse_margin < 0:
        errors.append(f"report.collapse_margin: must be >= 0, got {spec.report.collapse_margin}")
    if spec.study:
        for scale, n in spec.study.seeds.items():
            if not 1 <= n <= 1000:
                errors.append(f"study.seeds.{scale}: must be in 1..1000, got {n}")
        for scale, est in spec.study.estimates.items():
            for name, value, least in (("runs", est.runs, 1), ("jobs", est.jobs, 1),
                                       ("cpu_minutes", est.cpu_minutes, 0), ("gpu_hours", est.gpu_hours, 0)):
                if value is not None and value < least:
                    errors.append(f"study.estimates.{scale}.{name}: must be >= {least}, got {value}")
    if planned_count(spec) > MAX_RUNS:
        errors.append(f"the spec plans {planned_count(spec):,} runs (seeds x scales x variants x grid "
                      f"points), more than {MAX_RUNS:,}; shorten its seeds, variants or grid")
