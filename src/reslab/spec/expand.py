"""A spec's expansion into planned runs: one run = scale x variant x grid point x seed, its config
merged in the order schema.py's docstring gives, its identity a hash of that config.

The identity names the run's folder in every store: nothing here may change one (the planned
identities of every built-in study are recorded in tests/golden/study_identities.json)."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

from ..errors import ConfigError, ReslabError
from ..train.config import RunConfig, build_run_config, canonical
from ..typed import deep_merge
from .grid import grid_points, grids, nested, runner_fixed, scale_base
from .ladder import RUNG_AXIS, budget, effective_grid, rung_tokens
from .exclude import excluded
from .more_seeds import all_extra_seeds, extra_seeds
from .schema import SweepSpec
from .tune import all_tuning_seeds


class IdenticalRunsError(ConfigError):
    """Two variants of a spec resolve to the same runs (a caller that made one of them, such as a
    design card, can say why in its own terms)."""


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



MAX_RUNS = 100_000  # planned runs of one spec: more is a typo in a grid or seed list, and would hang planning


def planned_count(spec: SweepSpec) -> int:
    """How many runs the spec plans at most (every scale), counted without building any."""
    points = max(math.prod(len(v) if isinstance(v, (list, dict)) else 1 for v in grid.values())
                 for _, grid in grids(spec))
    seeds = len(spec.seeds) + len(all_extra_seeds(spec))  # at most: as if every row took every extra seed
    rungs = len(spec.ladder.rungs) if spec.ladder and isinstance(spec.ladder.rungs, dict) else 1
    return seeds * max(len(spec.scales), 1) * len(spec.variants) * points * rungs



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
    taken = set(all_tuning_seeds(spec.tune)) if spec.tune else set()  # tuning seeds stay disjoint from the comparison's
    taken |= set(all_extra_seeds(spec))  # and [[more_seeds]]' from the spec's
    candidate = 0
    while len(seeds) < n:
        candidate += 1
        if candidate not in seeds and candidate not in taken:
            seeds.append(candidate)
    return spec.replace(seeds=seeds)



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
    themselves are planned by tune_plan.py."""
    tuned = tuned or {}
    runs, errors, seen = [], [], {}  # seen: field path -> index of its line in errors
    at_scale = {s: (scale_base(spec, s), rung_tokens(spec, s) if spec.ladder else {})
                for s in chosen_scales(spec, scales)}
    for seed in [*spec.seeds, *all_extra_seeds(spec)]:  # disjoint: check_more_seeds
        for scale in chosen_scales(spec, scales):
            start, tokens = at_scale[scale]
            for variant, overrides in spec.variants.items():
                if scale in spec.scale_variants and variant not in spec.scale_variants[scale]:
                    continue
                grid = effective_grid(spec, scale)
                for point, point_overrides in grid_points(grid) if grid else [({}, {})]:
                    if excluded(spec, scale, variant, point):
                        continue  # an [[exclude]] entry leaves the row out (tuning and comparison)
                    if seed not in spec.seeds and seed not in extra_seeds(spec, scale, variant, point):
                        continue  # a [[more_seeds]] seed: only on the rows its entries select
                    if spec.tune and spec.tune.tunes(scale):
                        key = tuned_key(scale, variant, point)
                        if key not in tuned:
                            continue  # planned after tuning
                        point_overrides = deep_merge(point_overrides, nested(spec.tune.axis, tuned[key]))
                    data = deep_merge(deep_merge(start, overrides), point_overrides)
                    data = deep_merge(data, spec.overrides)
                    if RUNG_AXIS in point and spec.ladder:  # the rung's token budget, on this run's batch
                        try:
                            cfg = build_run_config(data, where="")
                        except ConfigError:
                            pass  # its own problems are reported below, with the run's name
                        else:  # then --set again: a --set train.steps wins over the budget
                            data = deep_merge(data, budget(spec, scale, point[RUNG_AXIS], cfg, tokens[point[RUNG_AXIS]]))
                            data = deep_merge(data, spec.overrides)
                    data = deep_merge(data, {"train": {"seed": seed}})
                    run = PlannedRun(spec.name, variant, scale, point, seed, None, "")  # type: ignore[arg-type]
                    data["name"] = f"{spec.name}/{run.label}"
                    at = f"variant {variant}" + (f", scale {scale}" if scale else "") + \
                         (f", grid {point}" if point else "")
                    try:  # the spec's own train.threads / progress are checked, then the runner's replace them
                        cfg = runner_fixed(build_run_config(data, where=at))
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
        raise IdenticalRunsError(f"{where}: variants resolve to identical runs ({', '.join(dupes[:4])}); "
                                 "give each variant a different override")
    return runs
