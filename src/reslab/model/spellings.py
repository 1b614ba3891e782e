"""The old spellings of some designs' own hyperparameters: [model] fields until they moved into
[model.options] (model.gate_bias is now model.options.bias), as every newer design's are.

Both directions live here:
- `upgrade(table, prefix, errors)`: a [model] table as a config file, a `--set` or a stored run
  folder's config.json (which holds every field) spelt it, with the old keys moved into options and
  one notice per key per process;
- `identity_spelling(model)`: a resolved [model] dict with those options spelt as the old fields again,
  so that a run identity (train/config.py canonical) is measured against the frozen baseline of
  train/identity_defaults.py exactly as before the move: no run changes identity or folder.
"""

from __future__ import annotations

import sys

from ..train.identity_defaults import BASELINE

# old [model] field -> (the designs that take it, its name in [model.options])
MOVED = {
    "gate_bias": (("gated",), "bias"),
    "hyper_streams": (("hyper-connections",), "streams"),
    "hyper_mixing": (("hyper-connections",), "mixing"),
    "hyper_dynamic": (("hyper-connections",), "dynamic"),
    "sinkhorn_iters": (("hyper-connections",), "sinkhorn_iters"),
    "ngpt_alpha_init": (("ngpt",), "alpha_init"),
    "norm_free": (("sas", "sas-p"), "norm_free"),
    "sas_ff_gain": (("sas", "sas-p"), "ff_gain"),
    "resi_dual_scale": (("resi-dual",), "scale"),
    "mix_ln_post_layers": (("mix-ln",), "post_layers"),
}
# Each option's default equals the old field's frozen default, so dropping an old key at that value
# (what a run folder of any other design stores) changes nothing.
OLD_DEFAULTS = {key: BASELINE["model"][key] for key in MOVED}

_told: set[str] = set()  # notices already printed by this process


def _designs(table: dict) -> set[str] | None:
    """The designs a [model] table builds (its design and per-layer designs); None if it names none."""
    if not isinstance(table.get("design"), str):
        return None
    layers = table.get("layer_designs")
    return {table["design"]} | ({v for v in layers.values() if isinstance(v, str)} if isinstance(layers, dict) else set())


def _tell(line: str) -> None:
    if line not in _told:
        _told.add(line)
        print(line, file=sys.stderr)


def upgrade(table: dict, prefix: str, errors: list[str]) -> dict:
    """`table` with the old keys moved into its options (a problem appended to `errors`)."""
    old = [key for key in table if key in MOVED]
    if not old or not isinstance(table.get("options", {}), dict):
        return table  # nothing to move, or an options value that is no table (from_dict says so)
    present = _designs(table)
    out = {key: value for key, value in table.items() if key not in MOVED}
    options = dict(table.get("options", {}))
    for key in old:
        designs, new = MOVED[key]
        value = table[key]
        owned = present is not None and bool(present & set(designs))
        if not owned and value == OLD_DEFAULTS[key]:
            continue  # the option's default: what a stored config of another design holds
        if present is not None and not owned:
            errors.append(f"{prefix}.{key}: only {' and '.join(designs)} take{'s' * (len(designs) == 1)} it "
                          f"(now {prefix}.options.{new}); not {table['design']}")
        elif new in options and options[new] != value:
            errors.append(f"{prefix}.{key}: {value!r} disagrees with {prefix}.options.{new} = {options[new]!r}; "
                          f"{prefix}.{key} is the old spelling of {prefix}.options.{new}, keep that one only")
        else:
            options[new] = value
            if owned:  # a table without its design (a sweep's override) is told when the run's config is read
                _tell(f"reslab: {prefix}.{key} is now {prefix}.options.{new}")
    if options or "options" in table:
        out["options"] = options
    return out


def identity_spelling(model: dict) -> dict:
    """A resolved [model] dict with the moved options written as their old fields."""
    options, present = model.get("options"), _designs(model) or set()
    if not isinstance(options, dict):
        return model
    back = {old: new for old, (designs, new) in MOVED.items() if present & set(designs) and new in options}
    if not back:
        return model
    out = {**model, "options": {k: v for k, v in options.items() if k not in back.values()}}
    out.update({old: options[new] for old, new in back.items()})
    return out
