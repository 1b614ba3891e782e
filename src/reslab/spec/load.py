"""A sweep spec from a TOML file or a parsed dict: typed (schema.py), checked (check.py), and its
runs' configs validated by planning them (expand.py, tune_plan.py)."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from ..fileio import read_toml
from ..typed import from_dict
from .check import check_spec
from .expand import expand
from .schema import SweepSpec
from .tune_plan import tuning_runs


def parse_spec(data: dict, where: str = "spec") -> SweepSpec:
    """A validated SweepSpec from a parsed TOML dict; every problem is reported at once with its path."""
    try:
        spec = from_dict(SweepSpec, data)
    except ConfigError as e:
        raise ConfigError([f"{where}: {line}" for line in e.errors]) from None
    missing = [k for k in ("name", "seeds", "variants") if k not in data]
    errors: list[str] = []
    check_spec(spec, errors)
    if errors:
        raise ConfigError([f"{where}: {line}" for line in errors + [f"{k}: required" for k in missing]])
    expand(spec, where=where)  # every run's config must validate too
    if spec.tune:  # a tuning scale's comparison runs wait for tuning: its tuning runs carry every value
        tuning_runs(spec, where=where)
    return spec


def load_spec(path: str | Path) -> SweepSpec:
    data = read_toml(path, "spec file")
    for k in ("name", "seeds", "variants"):
        if k not in data:
            raise ConfigError(f"{path}: {k}: required")
    return parse_spec(data, where=str(path))
