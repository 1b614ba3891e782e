"""A config from what a user gives: a built-in preset, a TOML file and `key=value` overrides (the
CLI's --set), merged in that order and validated as one ModelConfig or RunConfig.

Library code: the verbs of reslab.cli and scripts (bench/) read configs through here; nothing here
knows of argparse.
"""

from __future__ import annotations

import tomllib

from .errors import ConfigError, ReslabError
from .fileio import read_toml
from .typed import deep_merge


def parse_set(items: list[str]) -> dict:
    """--set a.b=value pairs as a nested dict; values are TOML literals, else plain strings. A setting
    given twice is refused rather than the last one winning: last-wins drops the earlier value without a
    word (a command line pasted onto another, or a typo for a neighbouring key), and one line costs less
    than a run trained on the value the user did not mean."""
    out: dict = {}
    given: dict[str, str] = {}  # dotted key -> the item that set it
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ReslabError(f"--set {item!r}: expected key=value, e.g. --set model.n_layer=12")
        dotted = key.strip()
        for other, earlier in given.items():
            if other == dotted or other.startswith(dotted + ".") or dotted.startswith(other + "."):
                raise ReslabError(f"--set {item!r}: {earlier!r} already sets {other}; give each setting once")
        given[dotted] = item
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        node = out
        parts = dotted.split(".")
        for part in parts[:-1]:  # a table here, never a value: a key and one inside it are refused above
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


# The config classes are imported when a config is loaded, not with this module: `reslab --help` and
# the listings import it and stay fast (tests/test_fast_start.py).
def load_model_config(config_path: str | None, sets: list[str]):
    """The resolved ModelConfig from a TOML file's [model] table plus --set model.key=value."""
    from .config import ModelConfig
    from .model.registry import resolve

    data = read_toml(config_path) if config_path is not None else {}
    data = deep_merge(data, parse_set(sets))
    unknown = sorted(set(data) - {"model"})
    if unknown:  # one line: a run config given to `reslab model` is one mistake, not one per table
        hint = "; a run config? `reslab train` reads those" if set(unknown) & {"data", "optim", "train"} else ""
        raise ConfigError(f"{', '.join(unknown)}: unknown {'tables' if len(unknown) > 1 else 'table'}; "
                          f"this command reads only [model]{hint}")
    return resolve(ModelConfig.from_dict(data.get("model", {}), prefix="model"))


def load_run_config(config_path: str | None, preset: str | None, sets: list[str]):
    """Preset, then config file, then --set overrides, validated as one RunConfig."""
    from .spec.grid import check_preset
    from .train.config import build_run_config

    data: dict = {}
    where = "config"
    if preset is not None:
        data = read_toml(str(check_preset(preset)))
        where = f"preset {preset}"
    if config_path is not None:
        data = deep_merge(data, read_toml(config_path))
        where = config_path
    if sets:
        where += " with --set"
    return build_run_config(deep_merge(data, parse_set(sets)), where=where)
