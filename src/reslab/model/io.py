"""Model files: weights as safetensors, the resolved config as JSON. No pickle anywhere.

A model folder holds
    model.safetensors   every parameter and persistent buffer (a tied head is stored once)
    model.json          {"format": "reslab-model", "version": 1, "config": {...}, "prores_step": t,
                         "plugin": {"module": m, "version": v}}   (the last only for a plugin's design)
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .config import ModelConfig
from ..errors import ConfigError, ReslabError
from ..fileio import atomic_path, read_json, write_json
from .gpt import GPT

FORMAT, VERSION = "reslab-model", 1
WEIGHTS, META = "model.safetensors", "model.json"


def model_state(model: GPT, state: dict | None = None) -> dict[str, torch.Tensor]:
    """state_dict (or a gathered full one) without the tied head (it is wte), ready for safetensors."""
    state = dict(model.state_dict() if state is None else state)
    if model.config.tie_weights:
        state.pop("lm_head.weight", None)
    return {k: v.detach().contiguous() for k, v in state.items()}


def save_model(model: GPT, folder: str | Path, state: dict | None = None) -> Path:
    """Write the model folder; `state` is a full state dict gathered from a sharded (FSDP) model."""
    folder = Path(folder)
    with atomic_path(folder / WEIGHTS) as tmp:
        save_file(model_state(model, state), str(tmp))
    meta = {"format": FORMAT, "version": VERSION, "config": model.config.to_dict(),
            "prores_step": model.prores_step}
    if model.design.plugin is not None:  # so that loading it without the plugin can say which one
        meta["plugin"] = {"module": model.design.plugin, "version": model.design.plugin_version}
    write_json(folder / META, meta)
    return folder


def missing_plugin_line(where: str, design: object, plugin: object) -> str | None:
    """The one line for a saved design whose plugin is not loaded, from the file's "plugin" record."""
    from .registry import get_design

    if not isinstance(design, str) or not isinstance(plugin, dict) or not isinstance(plugin.get("module"), str):
        return None
    try:
        get_design(design)
        return None
    except ConfigError:
        module, version = plugin["module"], plugin.get("version")
        made = f" {version}" if isinstance(version, str) else ""
        return (f"{where}: design {design!r} comes from the plugin {module}{made}, which is not loaded; "
                f"install it, or pass --plugin {module} (or set RESLAB_PLUGINS={module})")


def read_model_config(folder: str | Path) -> tuple[ModelConfig, dict]:
    """model.json's config, typed and resolved (a config no model can be built from is refused here,
    naming the file, rather than inside GPT()), and the rest of model.json."""
    from .registry import resolve

    meta_path = Path(folder) / META
    meta = read_json(meta_path, f"a reslab model folder holds {META} and {WEIGHTS}")
    if meta.get("format") != FORMAT:
        raise ReslabError(f"{meta_path}: not a reslab model file (format must be {FORMAT!r})")
    if meta.get("version") != VERSION:
        raise ReslabError(f"{meta_path}: version {meta.get('version')!r} is not supported (expected {VERSION})")
    step = meta.get("prores_step", 0)
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ReslabError(f"{meta_path}: prores_step: expected a non-negative integer, got {step!r}")
    config = meta.get("config")
    line = missing_plugin_line(str(meta_path), config.get("design") if isinstance(config, dict) else None,
                               meta.get("plugin"))
    if line:
        raise ReslabError(line)
    try:
        cfg = resolve(ModelConfig.from_dict(config, prefix="config"))
    except ConfigError as e:  # the registry names fields model.*; in model.json they sit under config
        line = e.errors[0]
        raise ReslabError(f"{meta_path}: {'config.' + line[6:] if line.startswith('model.') else line}") from None
    return cfg, meta


def load_model(folder: str | Path, map_location: str = "cpu") -> GPT:
    """Build the model from model.json and load its weights; every mismatch is one clear error."""
    folder = Path(folder)
    cfg, meta = read_model_config(folder)
    weights = folder / WEIGHTS
    if not weights.is_file():
        raise ReslabError(f"{weights}: not found")
    try:
        state = load_file(str(weights), device=map_location)
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise ReslabError(f"{weights}: cannot be read as safetensors ({first})") from None
    model = GPT(cfg)
    load_weights(model, state, str(weights))
    model.set_step(int(meta.get("prores_step", 0)))
    return model


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def load_weights(model: GPT, state: dict[str, torch.Tensor], where: str) -> None:
    """Load `state` into `model` after checking every tensor's name, shape and dtype; `where` names
    the file in the one-line error. A float tensor of another precision (an fp16 export) is fine:
    it is converted; an integer or bool tensor where the model holds floats is not."""
    expected = model_state(model)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ReslabError(f"{where}: weights do not match the config (missing: {missing[:3]}, "
                          f"unexpected: {unexpected[:3]})")
    for k, v in expected.items():
        if state[k].shape != v.shape:
            raise ReslabError(f"{where}: {k} has shape {tuple(state[k].shape)}, config needs {tuple(v.shape)}")
        if state[k].is_floating_point() != v.is_floating_point() or \
                (not v.is_floating_point() and state[k].dtype != v.dtype):
            raise ReslabError(f"{where}: {k} has dtype {_dtype_name(state[k].dtype)}, the model holds "
                              f"{_dtype_name(v.dtype)}")
    model.load_state_dict(state, strict=False)
