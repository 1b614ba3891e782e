"""Build frozen dataclasses from plain dicts (TOML, JSON, --set), reporting every bad field.

Only the field types reslab uses are supported: bool, int, float, str, Literal[...], Optional[...],
list[T], dict[str, T], a plain dict (any table, checked elsewhere) and nested dataclasses. Each error names the dotted path of its field, so a user can find it.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Literal, Union

from .errors import ConfigError

# Integers are stored in int64 (torch, numpy, SQLite, safetensors headers): a larger one is no count,
# size or seed reslab can use, and would fail far from the config that named it.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def short_int(n: int) -> str:
    """An integer for an error line: a 400-digit one as its first digits and its length."""
    text = str(n)
    return text if len(text) <= 24 else f"{text[:12]}... ({len(text.lstrip('-'))} digits)"


def _check_value(tp: Any, value: Any, path: str, errors: list[str]) -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        arms = [a for a in args if a is not type(None)]
        if len(arms) == 1:  # Optional[T]: T's own message (TOML cannot write null anyway)
            return _check_value(arms[0], value, path, errors)
        for arg in args:
            if arg is type(None):
                continue
            trial: list[str] = []
            out = _check_value(arg, value, path, trial)
            if not trial:
                return out
        errors.append(f"{path}: expected {_describe(tp)}, got {value!r}")
        return value
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed or isinstance(value, bool) != any(isinstance(a, bool) for a in allowed):
            errors.append(f"{path}: {value!r} is not allowed; choose one of {', '.join(map(repr, allowed))}")
        return value
    if origin is list or tp is list:
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, got {value!r}")
            return value
        if tp is list:
            return value
        (item,) = typing.get_args(tp)
        return [_check_value(item, v, f"{path}[{i}]", errors) for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a table, got {value!r}")
            return value
        if tp is dict:
            return value
        _, item = typing.get_args(tp)
        return {k: _check_value(item, v, f"{path}.{k}", errors) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a table of {tp.__name__} fields, got {value!r}")
            return value
        return _build(tp, value, path, errors)
    if tp is bool:
        if not isinstance(value, bool):
            errors.append(f"{path}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append(f"{path}: expected an integer, got {value!r}")
        elif not INT_MIN <= value <= INT_MAX:
            errors.append(f"{path}: {short_int(value)} is out of range; integers must fit in 64 bits")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            errors.append(f"{path}: expected a number, got {value!r}")
            return value
        if isinstance(value, int) and not INT_MIN <= value <= INT_MAX:
            errors.append(f"{path}: {short_int(value)} is out of range; write it as a float, e.g. 1e30")
            return value
        if not math.isfinite(value):  # TOML can write nan and inf; no reslab setting means either
            errors.append(f"{path}: must be a finite number, got {value!r}")
            return value
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            errors.append(f"{path}: expected a string, got {value!r}")
        return value
    raise TypeError(f"typed.py does not support field type {tp!r}")  # a bug in reslab, not user input


def _build(cls: type, data: dict, prefix: str, errors: list[str]) -> Any:
    if hasattr(cls, "upgrade_keys"):  # keys an earlier reslab wrote, moved to where they live now
        data = cls.upgrade_keys(data, prefix, errors)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            errors.append(f"{path}: unknown key; allowed keys are {', '.join(sorted(fields))}")
            continue
        kwargs[key] = _check_value(hints[key], value, path, errors)
    for name, f in fields.items():  # a field without a default must be given (else cls() raises TypeError)
        if name not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            errors.append(f"{prefix + '.' if prefix else ''}{name}: required")
    if errors:
        return None
    return cls(**kwargs)


def from_dict(cls: type, data: dict, prefix: str = "") -> Any:
    """cls(**data) with every unknown key and wrongly typed value reported at once."""
    errors: list[str] = []
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a table, got {data!r}")
    obj = _build(cls, data, prefix, errors)
    if errors:
        raise ConfigError(errors)
    return obj


def deep_merge(base: dict, over: dict) -> dict:
    """base with over's keys on top; nested tables are merged key by key, anything else replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def to_dict(obj: Any) -> dict:
    return dataclasses.asdict(obj)


class Typed:
    """Mixin for the frozen config dataclasses: copy with changes, plain dict, checked construction.
    TABLE names the config's table in error paths (e.g. "model.n_head"). A class may define
    `upgrade_keys(data, prefix, errors) -> data` to read keys that an earlier reslab wrote."""

    TABLE = ""

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict, prefix: str | None = None):
        return from_dict(cls, data, cls.TABLE if prefix is None else prefix)
