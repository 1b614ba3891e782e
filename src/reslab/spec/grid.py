"""Override tables and grids: a dotted key as a nested table, the checks of one override table, the
points of a grid, the presets a spec starts from, and the fields the sweep runner sets itself."""

from __future__ import annotations

import dataclasses
import itertools
import tomllib
from pathlib import Path

from ..errors import ConfigError, ReslabError
from ..train.config import RunConfig, preset_names, preset_path
from ..typed import deep_merge, from_dict
from .schema import NAME_RE, SweepSpec


def nested(dotted: str, value) -> dict:
    """("optim.lr", 1e-3) -> {"optim": {"lr": 1e-3}}: a grid axis's value as an override table."""
    out: dict = value
    for part in reversed(dotted.split(".")):
        out = {part: out}
    return out


# Fields the runner sets itself: a sweep's runs print no progress bars (the sweep shows its own view)
# and take their thread budget from the runner, so neither may change a run's identity.
RUNNER_FIXED = {"train": {"progress": "off", "threads": None}}


def check_overrides(table: dict, where: str, errors: list[str]) -> None:
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


def grid_points(grid: dict) -> list[tuple[dict, dict]]:
    """(point, overrides) for every point of the grid: point names each axis's value (or value name)."""
    axes = []
    for key, values in grid.items():
        if isinstance(values, dict):  # a named axis: {name: override table}
            axes.append([(key, name, table) for name, table in values.items()])
        else:                         # a dotted key and its values
            axes.append([(key, v, nested(key, v)) for v in values])
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


def scale_base(spec: SweepSpec, scale: str) -> dict:
    """What every run of a scale starts from: its preset (the scale's own or the spec's), then the
    spec's base, then the scale's overrides."""
    preset_name = spec.scale_presets.get(scale, spec.preset)
    preset = tomllib.loads(preset_path(preset_name).read_text()) if preset_name else {}
    return deep_merge(deep_merge(preset, spec.base), spec.scales.get(scale, {}))


def grids(spec: SweepSpec) -> list[tuple[str, dict]]:
    """(where, grid) for the spec's grid and each scale's own grid (scale_grid)."""
    return [("grid", spec.grid)] + [(f"scale_grid.{s}", g) for s, g in spec.scale_grid.items()]


def check_grid(grid: dict, where: str, errors: list[str]) -> None:
    for key, values in grid.items():
        if not isinstance(values, (list, dict)) or not values:
            errors.append(f"{where}.{key}: give a non-empty list of values for a dotted key, or a table of "
                          "named override tables")
        elif isinstance(values, dict):
            for name, table in values.items():
                if not NAME_RE.match(name) or not isinstance(table, dict):
                    errors.append(f"{where}.{key}.{name}: a named grid point is a table of overrides with a "
                                  "name of letters, digits, '_', '.', '+' or '-'")


def check_axis_values(key: str, values: list, errors: list[str], where: str = "grid") -> None:
    """Each value of a dotted grid axis, as an override. A problem of the key itself (unknown, or
    train.seed) is the same for every value: one line for the axis, not one per value."""
    lines: dict[str, list] = {}
    for i, v in enumerate(values):
        found: list[str] = []
        check_overrides(nested(key, v), f"{where}[{key!r}][{i}]", found)
        for line in found:
            same = line.replace(f"{where}[{key!r}][{i}]", f"{where}[{key!r}]")
            lines.setdefault(same, [line, 0])[1] += 1
    errors += [first if n == 1 else f"{same} (all {n} values)" for same, (first, n) in lines.items()]


def with_overrides(spec: SweepSpec, overrides: dict, where: str = "--set") -> SweepSpec:
    """The spec with `overrides` applied to every run, after everything else (checked here)."""
    errors: list[str] = []
    check_overrides(overrides, "", errors)
    if errors:
        raise ConfigError([f"{where} {line}" for line in errors])
    return spec.replace(overrides=deep_merge(spec.overrides, overrides))


def runner_fixed(cfg: RunConfig) -> RunConfig:
    """The config with RUNNER_FIXED's fields (progress, threads) as the runner sets them."""
    return cfg.replace(train=dataclasses.replace(cfg.train, **RUNNER_FIXED["train"]))
