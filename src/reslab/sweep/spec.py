"""A sweep spec: one TOML file declaring many runs, and its expansion into planned runs.

    name = "partial-residual"
    preset = "tiny"                      # optional: start from a built-in preset
    seeds = [1337, 42]
    baseline = "full"                    # the variant the report compares against

    [base.train]                         # overrides for every run (any RunConfig table)
    steps = 600
    [variants.full]                      # named variants, each a set of overrides ({} = the base)
    [variants.attn-only.model]
    ffn_res = false
    [scales.tiny.train]                  # optional named scales, picked with --scale
    steps = 600
    [grid]                               # optional axes: the cartesian product of their values
    "optim.lr" = [1e-3, 3e-3]            #   a dotted key and its values, or
    [grid.convention.nanogpt]            #   a named axis of named override tables
    model.tie_embeddings = true
    [grid.convention.residualgpt]
    model.tie_embeddings = false

One run = scale x variant x grid point x seed (the spec's seeds, and for the rows a
[[more_seeds]] entry selects, its seeds too: more_seeds.py). Its config is merged in this order (later wins):
preset (or the scale's own, scale_presets), base, scale, variant, grid point, overrides (--set),
then train.seed = seed. Its identity is a hash of that
fully resolved config (its display name left out), so the same run is never trained twice and
two different runs never share a folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

from ..errors import ConfigError, ReslabError
from ..fileio import read_toml
from ..train.config import RunConfig, build_run_config, canonical, preset_names, preset_path
from ..typed import Typed, deep_merge, from_dict
from .more_seeds import MoreSeeds

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")  # spec, variant and scale names become folder names


@dataclass(frozen=True)
class SlurmConfig:
    """[slurm]: how `--executor slurm` asks for resources (one array task per run)."""
    partition: Optional[str] = None
    account: Optional[str] = None
    time_min: int = 240
    gpus_per_run: int = 1              # > 1: the task launches torchrun with this many processes
    cpus_per_task: int = 8
    mem_gb: Optional[int] = None
    max_parallel: Optional[int] = None  # array parallelism (default: --jobs)


@dataclass(frozen=True)
class Published:
    """A published number shown beside ours in the report, labelled with where it comes from."""
    variant: str
    value: float
    source: str
    setup: str
    metric: str = "best val loss"


@dataclass(frozen=True)
class Sensitivity:
    """[report] sensitivity: a learning-rate grid's sensitivity per design (report/tuning.py)."""
    axis: str = "optim.lr"             # the grid axis the sensitivity is taken over
    cap: Optional[float] = None        # nats; a run's loss counts at most this (default: the corpus's unigram entropy)
    cap_reason: str = ""               # why this cap, printed beside it in the report
    metric: Literal["final_val_loss", "best_val_loss"] = "final_val_loss"


@dataclass(frozen=True)
class ReportOptions:
    """[report]: what the report needs to know about this experiment."""
    no_skip: Optional[str] = None      # the variant with no skips: the collapse rule's reference
    collapse_margin: float = 0.1       # nats: a run this close to the no-skip loss / unigram entropy collapsed
    published: list[Published] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    probe: Optional[dict] = None       # init-time probe settings to run beside the sweep (studies)
    sensitivity: Optional[Sensitivity] = None  # learning-rate sensitivity over a grid axis


@dataclass(frozen=True)
class Estimate:
    """What one scale of a built-in study cost when measured: the whole default study, `jobs` workers."""
    runs: int
    jobs: int = 2
    cpu_minutes: Optional[float] = None   # wall minutes on the 2-core CPU this was measured on
    gpu_hours: Optional[float] = None     # a planning figure for GPU scales (says how it was obtained)
    basis: str = ""                       # where the figure comes from (measured on ... / estimated from ...)


@dataclass(frozen=True)
class StudyInfo:
    """[study]: what a built-in study is for (shown by `reslab study list`)."""
    source: str                           # the paper or seed document it reproduces
    designs: list[str] = field(default_factory=list)
    seeds: dict[str, int] = field(default_factory=dict)  # scale -> how many seeds `study run` uses by default
    estimates: dict[str, Estimate] = field(default_factory=dict)  # scale -> cost


@dataclass(frozen=True)
class TuneRow:
    """[[tune.rows]]: the values and/or tuning seeds of the rows that `match` selects (a variant
    and/or grid points, written as a claim's cell is), in place of tune.values / tune.seeds; the
    first entry that matches wins. An entry that leaves one out keeps [tune]'s."""
    match: dict
    values: Optional[list] = None
    seeds: Optional[list[int]] = None   # more tuning seeds where a row trains on some seeds only

    def __post_init__(self):
        if self.values is not None and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                           for v in self.values):
            object.__setattr__(self, "values", sorted(self.values))


@dataclass(frozen=True)
class TuneOptions:
    """[tune]: before a scale's comparison runs, each row (variant x grid point) trains at every
    value of `axis` on the tuning seeds; each row's comparison runs then use its best value
    (sweep/tune.py). Values are kept sorted ascending (the tie rule prefers the smaller)."""
    axis: str
    values: list
    seeds: list[int]
    metric: Literal["best_val_loss", "final_val_loss"] = "best_val_loss"
    scales: Optional[list[str]] = None  # the scales that tune (default: every scale)
    extend: int = 0  # a row whose best value is an end of its grid tries up to this many values beyond it
    rows: list[TuneRow] = field(default_factory=list)  # [[tune.rows]]: some rows' own values or seeds

    def __post_init__(self):
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.values):
            object.__setattr__(self, "values", sorted(self.values))  # non-numbers: check_tune reports them

    def tunes(self, scale: str) -> bool:
        return self.scales is None or scale in self.scales


@dataclass(frozen=True)
class SweepSpec(Typed):
    name: str
    seeds: list[int]
    variants: dict[str, dict]
    description: str = ""
    question: str = ""
    preset: Optional[str] = None
    scale_presets: dict[str, str] = field(default_factory=dict)  # scale -> preset it starts from instead
    base: dict = field(default_factory=dict)
    baseline: Optional[str] = None
    scales: dict[str, dict] = field(default_factory=dict)
    default_scales: Optional[list[str]] = None  # the scales run when --scale is not given (default: all)
    scale_variants: dict[str, list[str]] = field(default_factory=dict)  # scale -> the only variants it runs
    scale_grid: dict[str, dict] = field(default_factory=dict)  # scale -> the grid it runs instead of `grid`
    grid: dict = field(default_factory=dict)   # axis -> list of values, or {point name: overrides}
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    report: ReportOptions = field(default_factory=ReportOptions)
    study: Optional[StudyInfo] = None
    tune: Optional[TuneOptions] = None  # [tune]: each design's own learning rate first (sweep/tune.py)
    claims: list[dict] = field(default_factory=list)  # [[claims]]: published claims the report rules on (report/claims.py)
    more_seeds: list[MoreSeeds] = field(default_factory=list)  # [[more_seeds]]: some rows' extra seeds (sweep/more_seeds.py)
    overrides: dict = field(default_factory=dict)  # applied to every run last (`--set` on the command line)


@dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep: where it sits in the spec, its config and its identity."""
    spec: str
    variant: str
    scale: str                         # "" when the spec has no scales
    grid: dict                         # {"optim.lr": 0.001, ...}; {} without a grid
    seed: int
    config: RunConfig
    id: str

    @property
    def label(self) -> str:
        parts = [self.variant] + [f"{k.rsplit('.', 1)[-1]}={_short(v)}" for k, v in self.grid.items()]
        return "-".join(parts + ([self.scale] if self.scale else []) + [f"s{self.seed}"])

    def membership(self) -> dict:
        return {"spec": self.spec, "variant": self.variant, "scale": self.scale, "grid": self.grid,
                "seed": self.seed}


def _short(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def run_identity(config: RunConfig) -> str:
    """12 hex digits of the SHA-256 of the resolved config, without its display name, in its
    canonical form (only fields that differ from the defaults: a field added later at its default
    leaves every identity as it was)."""
    data = canonical(config.to_dict())
    data.pop("name", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def _nested(dotted: str, value) -> dict:
    out: dict = value
    for part in reversed(dotted.split(".")):
        out = {part: out}
    return out


# Fields the runner sets itself: a sweep's runs print no progress bars (the sweep shows its own view)
# and take their thread budget from the runner, so neither may change a run's identity.
RUNNER_FIXED = {"train": {"progress": "off", "threads": None}}


def _check_overrides(table: dict, where: str, errors: list[str]) -> None:
    """Unknown keys and wrong types in one override table, reported at their path in the spec."""
    at = f"{where}." if where else ""
    if "name" in table:
        errors.append(f"{at}name: a run's name is set by the sweep; remove it")
        table = {k: v for k, v in table.items() if k != "name"}
    if isinstance(table.get("train"), dict) and "seed" in table["train"]:  # expand() would overwrite it
        errors.append(f"{at}train.seed: each run's seed comes from the spec's seeds (or --seeds); remove it")
        table = dict(table, train={k: v for k, v in table["train"].items() if k != "seed"})
    try:
        from_dict(RunConfig, table, prefix=where)
    except ConfigError as e:
        errors += e.errors


def _grid_points(grid: dict) -> list[tuple[dict, dict]]:
    """(point, overrides) for every point of the grid: point names each axis's value (or value name)."""
    axes = []
    for key, values in grid.items():
        if isinstance(values, dict):  # a named axis: {name: override table}
            axes.append([(key, name, table) for name, table in values.items()])
        else:                         # a dotted key and its values
            axes.append([(key, v, _nested(key, v)) for v in values])
    points = []
    for combo in itertools.product(*axes):
        overrides: dict = {}
        for _, _, table in combo:
            overrides = deep_merge(overrides, table)
        points.append(({key: value for key, value, _ in combo}, overrides))
    return points


def check_preset(name: str) -> Path:
    """A built-in preset's file. Only its names are presets: '../studies/prores' is not one, even
    though preset_path would find a file there."""
    if name not in preset_names():
        raise ReslabError(f"unknown preset {name!r}; choose one of {', '.join(preset_names())}")
    return preset_path(name)


def _check_names(spec: SweepSpec, errors: list[str]) -> None:
    if not NAME_RE.match(spec.name):
        errors.append(f"name: {spec.name!r} must be letters, digits, '_', '.', '+' or '-' (it names folders)")
    for kind, names in (("variants", spec.variants), ("scales", spec.scales)):
        for n in names:
            if not NAME_RE.match(n):
                errors.append(f"{kind}.{n}: the name must be letters, digits, '_', '.', '+' or '-'")


def _grids(spec: SweepSpec) -> list[tuple[str, dict]]:
    """(where, grid) for the spec's grid and each scale's own grid (scale_grid)."""
    return [("grid", spec.grid)] + [(f"scale_grid.{s}", g) for s, g in spec.scale_grid.items()]


def _check_grid(grid: dict, where: str, errors: list[str]) -> None:
    for key, values in grid.items():
        if not isinstance(values, (list, dict)) or not values:
            errors.append(f"{where}.{key}: give a non-empty list of values for a dotted key, or a table of "
                          "named override tables")
        elif isinstance(values, dict):
            for name, table in values.items():
                if not NAME_RE.match(name) or not isinstance(table, dict):
                    errors.append(f"{where}.{key}.{name}: a named grid point is a table of overrides with a "
                                  "name of letters, digits, '_', '.', '+' or '-'")


def check_seed_list(seeds: list[int], where: str, example: str, errors: list[str]) -> None:
    """A list of seeds (the spec's, or [tune]'s): at least one, non-negative, none repeated."""
    if not seeds:
        errors.append(f"{where}: must list at least one seed, e.g. {where.rsplit('.', 1)[-1]} = {example}")
    if any(s < 0 for s in seeds):
        errors.append(f"{where}: must be non-negative integers, got {seeds}")
    if len(set(seeds)) != len(seeds):
        errors.append(f"{where}: {seeds} repeats a seed; each seed is one run")


def _check_structure(spec: SweepSpec, errors: list[str]) -> None:
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
    for where, grid in _grids(spec):
        _check_grid(grid, where, errors)
    _check_numbers(spec, errors)
    from ..report.claims import check_claims
    from .more_seeds import check_more_seeds
    from .tune import check_tune

    check_tune(spec, errors)
    check_more_seeds(spec, errors)
    check_claims(spec, errors)
    _check_overrides(spec.base, "base", errors)
    _check_overrides(spec.overrides, "overrides", errors)
    for kind, tables in (("variants", spec.variants), ("scales", spec.scales)):
        for n, table in tables.items():
            _check_overrides(table, f"{kind}.{n}", errors)
    for where, grid in _grids(spec):
        for key, values in grid.items():
            if isinstance(values, dict):
                for name, table in values.items():
                    if isinstance(table, dict):
                        _check_overrides(table, f"{where}.{key}.{name}", errors)
            elif isinstance(values, list):
                _check_axis_values(key, values, errors, where)


def _check_axis_values(key: str, values: list, errors: list[str], where: str = "grid") -> None:
    """Each value of a dotted grid axis, as an override. A problem of the key itself (unknown, or
    train.seed) is the same for every value: one line for the axis, not one per value."""
    lines: dict[str, list] = {}
    for i, v in enumerate(values):
        found: list[str] = []
        _check_overrides(_nested(key, v), f"{where}[{key!r}][{i}]", found)
        for line in found:
            same = line.replace(f"{where}[{key!r}][{i}]", f"{where}[{key!r}]")
            lines.setdefault(same, [line, 0])[1] += 1
    errors += [first if n == 1 else f"{same} (all {n} values)" for same, (first, n) in lines.items()]


MAX_RUNS = 100_000  # planned runs of one spec: more is a typo in a grid or seed list, and would hang planning


def planned_count(spec: SweepSpec) -> int:
    """How many runs the spec plans at most (every scale), counted without building any."""
    points = max(math.prod(len(v) if isinstance(v, (list, dict)) else 1 for v in grid.values())
                 for _, grid in _grids(spec))
    from .more_seeds import all_extra_seeds

    seeds = len(spec.seeds) + len(all_extra_seeds(spec))  # at most: as if every row took every extra seed
    return seeds * max(len(spec.scales), 1) * len(spec.variants) * points


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


def parse_spec(data: dict, where: str = "spec") -> SweepSpec:
    """A validated SweepSpec from a parsed TOML dict; every problem is reported at once with its path."""
    try:
        spec = from_dict(SweepSpec, data)
    except ConfigError as e:
        raise ConfigError([f"{where}: {line}" for line in e.errors]) from None
    missing = [k for k in ("name", "seeds", "variants") if k not in data]
    errors: list[str] = []
    _check_structure(spec, errors)
    if errors:
        raise ConfigError([f"{where}: {line}" for line in errors + [f"{k}: required" for k in missing]])
    expand(spec, where=where)  # every run's config must validate too
    if spec.tune:  # a tuning scale's comparison runs wait for tuning: its tuning runs carry every value
        from .tune import tuning_runs

        tuning_runs(spec, where=where)
    return spec


def load_spec(path: str | Path) -> SweepSpec:
    data = read_toml(path, "spec file")
    for k in ("name", "seeds", "variants"):
        if k not in data:
            raise ConfigError(f"{path}: {k}: required")
    return parse_spec(data, where=str(path))


def chosen_scales(spec: SweepSpec, scales: list[str] | None) -> list[str]:
    if not spec.scales:
        if scales:
            raise ReslabError(f"--scale: spec {spec.name!r} declares no scales")
        return [""]
    for s in scales or []:
        if s not in spec.scales:
            raise ReslabError(f"--scale {s}: unknown scale; {spec.name!r} has {', '.join(spec.scales)}")
    return list(scales or spec.default_scales or spec.scales)


def with_seeds(spec: SweepSpec, n: int) -> SweepSpec:
    """The spec with n seeds: its first n, extended by 1, 2, 3, ... (skipping used ones) if n is larger.
    [[more_seeds]] entries keep their own seeds on top of these."""
    if n < 1:
        raise ReslabError(f"--seeds: must be at least 1, got {n}")
    seeds = list(spec.seeds[:n])
    from .tune import all_tuning_seeds

    from .more_seeds import all_extra_seeds

    taken = set(all_tuning_seeds(spec.tune)) if spec.tune else set()  # tuning seeds stay disjoint from the comparison's
    taken |= set(all_extra_seeds(spec))  # and [[more_seeds]]' from the spec's
    candidate = 0
    while len(seeds) < n:
        candidate += 1
        if candidate not in seeds and candidate not in taken:
            seeds.append(candidate)
    return spec.replace(seeds=seeds)


def with_overrides(spec: SweepSpec, overrides: dict, where: str = "--set") -> SweepSpec:
    """The spec with `overrides` applied to every run, after everything else (checked here)."""
    errors: list[str] = []
    _check_overrides(overrides, "", errors)
    if errors:
        raise ConfigError([f"{where} {line}" for line in errors])
    return spec.replace(overrides=deep_merge(spec.overrides, overrides))


def _runner_fixed(cfg: RunConfig) -> RunConfig:
    """The config with RUNNER_FIXED's fields (progress, threads) as the runner sets them."""
    return cfg.replace(train=dataclasses.replace(cfg.train, **RUNNER_FIXED["train"]))


def _add_once(errors: list, seen: dict, line: str, field_path: str) -> None:
    """One line per field, at its first run: an override that is wrong for every variant (a --set, a
    base value) would otherwise repeat once per run; the others are counted on that line."""
    if field_path in seen:
        errors[seen[field_path]][1] += 1
    else:
        seen[field_path] = len(errors)
        errors.append([line, 0])


def tuned_key(scale: str, variant: str, point: dict) -> tuple[str, str, str]:
    """The key of one row's tuned value: (scale, variant, grid point as sorted JSON)."""
    return scale, variant, json.dumps(point, sort_keys=True)


def expand(spec: SweepSpec, scales: list[str] | None = None, where: str = "spec",
           tuned: dict | None = None) -> list[PlannedRun]:
    """Every planned run, seed-major (all variants of the first seed first, so a partly finished
    sweep already compares every variant). Raises ConfigError with every invalid combination.

    At a scale that tunes ([tune]), a row's runs exist only once its value is chosen: `tuned` maps
    tuned_key(scale, variant, point) -> the value of tune.axis, merged after the grid point (so it
    is part of the config, hence the identity); rows without a value are left out. The tuning runs
    themselves are planned by sweep/tune.py."""
    from .more_seeds import all_extra_seeds, extra_seeds

    tuned = tuned or {}
    runs, errors, seen = [], [], {}  # seen: field path -> index of its line in errors
    for seed in [*spec.seeds, *all_extra_seeds(spec)]:  # disjoint: check_more_seeds
        for scale in chosen_scales(spec, scales):
            preset_name = spec.scale_presets.get(scale, spec.preset)
            preset = tomllib.loads(preset_path(preset_name).read_text()) if preset_name else {}
            for variant, overrides in spec.variants.items():
                if scale in spec.scale_variants and variant not in spec.scale_variants[scale]:
                    continue
                grid = spec.scale_grid.get(scale, spec.grid)
                for point, point_overrides in _grid_points(grid) if grid else [({}, {})]:
                    if seed not in spec.seeds and seed not in extra_seeds(spec, scale, variant, point):
                        continue  # a [[more_seeds]] seed: only on the rows its entries select
                    if spec.tune and spec.tune.tunes(scale):
                        key = tuned_key(scale, variant, point)
                        if key not in tuned:
                            continue  # planned after tuning
                        point_overrides = deep_merge(point_overrides, _nested(spec.tune.axis, tuned[key]))
                    data = deep_merge(deep_merge(preset, spec.base), spec.scales.get(scale, {}))
                    data = deep_merge(deep_merge(data, overrides), point_overrides)
                    data = deep_merge(data, spec.overrides)
                    data = deep_merge(data, {"train": {"seed": seed}})
                    run = PlannedRun(spec.name, variant, scale, point, seed, None, "")  # type: ignore[arg-type]
                    data["name"] = f"{spec.name}/{run.label}"
                    at = f"variant {variant}" + (f", scale {scale}" if scale else "") + \
                         (f", grid {point}" if point else "")
                    try:  # the spec's own train.threads / progress are checked, then the runner's replace them
                        cfg = _runner_fixed(build_run_config(data, where=at))
                    except ConfigError as e:
                        for line in e.errors:
                            inner = line[len(at) + 2:] if line.startswith(at + ": ") else line
                            field_path = ".".join(inner.split(": ", 1)[0].split(".")[:2])  # table.field
                            _add_once(errors, seen, f"{where}: {line}", field_path)
                        continue
                    runs.append(PlannedRun(spec.name, variant, scale, point, seed, cfg, run_identity(cfg)))
    if errors:
        raise ConfigError([line + (f" (and {n} more runs)" if n else "") for line, n in errors])
    ids = [r.id for r in runs]
    if len(set(ids)) != len(ids):  # two variants that resolve to the same config
        dupes = sorted({r.label for r in runs if ids.count(r.id) > 1})
        raise ConfigError(f"{where}: variants resolve to identical runs ({', '.join(dupes[:4])}); "
                          "give each variant a different override")
    return runs
