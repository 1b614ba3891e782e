"""Training checkpoints: safetensors for tensors, JSON for everything else. No pickle.

    checkpoints/step_00000500/
        model.safetensors  model.json       the model folder (loadable by reslab.load_model)
        optimizer.safetensors               AdamW moments per parameter name
        state.json                          step, RNG states, data cursor, param groups, scaler
    checkpoints/best.json                   {"step": ..., "val_loss": ...} -> best_step_XXXXXXXX/

A checkpoint is written into a hidden temporary folder and renamed into place, so a folder named
step_* is always complete; older ones are pruned to the newest `keep`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..errors import ReslabError
from ..fileio import write_json
from ..model.io import META, save_model

STEP_PREFIX, BEST_PREFIX = "step_", "best_step_"


def _folder_name(prefix: str, step: int) -> str:
    return f"{prefix}{step:08d}"


def optimizer_tensors(optimizer: torch.optim.Optimizer, member: int | None = None) -> tuple[dict, list]:
    """(name/moment -> tensor, param groups without tensors), keyed by parameter names.
    member=k: seed k's slice of an optimizer over stacked parameters (see stacked.py)."""
    tensors = {}
    for group in optimizer.param_groups:
        for name, p in zip(group["names"], group["params"]):
            for key, value in optimizer.state.get(p, {}).items():
                if member is not None and key != "step":  # the step count is shared by every seed
                    value = value[member]
                tensors[f"{name}/{key}"] = value.detach().contiguous().cpu()
    groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.state_dict()["param_groups"]]
    return tensors, groups


def load_optimizer_tensors(optimizer: torch.optim.Optimizer, tensors: dict, groups: list, where: str) -> None:
    if [g["names"] for g in groups] != [g["names"] for g in optimizer.param_groups]:
        raise ReslabError(f"{where}: optimizer parameter groups do not match this model")
    state, index, params = {}, 0, []
    for group in optimizer.param_groups:
        ids = []
        for name, p in zip(group["names"], group["params"]):
            moments = {k.split("/", 1)[1]: v for k, v in tensors.items() if k.split("/", 1)[0] == name}
            if moments:
                state[index] = {k: v.to(p.device) if k != "step" else v for k, v in moments.items()}
            ids.append(index)
            index += 1
        params.append(ids)
    saved_groups = [dict(g, params=ids) for g, ids in zip(groups, params)]
    optimizer.load_state_dict({"state": state, "param_groups": saved_groups})


def save_checkpoint(ckpt_dir: Path, step: int, model, optimizer, state: dict, keep: int,
                    gathered: tuple | None = None, member: int | None = None) -> Path:
    """gathered: (model state dict, optimizer tensors) of a sharded model, collected on every rank.
    member: the seed whose optimizer slice to save, when the optimizer holds stacked seeds."""
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    final = ckpt_dir / _folder_name(STEP_PREFIX, step)
    tmp = ckpt_dir / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    save_model(model, tmp, state=gathered[0] if gathered else None)
    tensors, groups = optimizer_tensors(optimizer, member)
    if gathered:
        tensors = gathered[1]
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    write_json(tmp / "state.json", dict(state, step=step, param_groups=groups))
    if final.exists():  # the same step saved again (e.g. final step == an interval step)
        shutil.rmtree(final)
    os.replace(tmp, final)
    _prune(ckpt_dir, keep)
    return final


def _prune(ckpt_dir: Path, keep: int) -> None:
    for old in complete_checkpoints(ckpt_dir)[:-keep]:
        (old / "state.json").unlink(missing_ok=True)  # incomplete from here on, even if rmtree dies
        shutil.rmtree(old, ignore_errors=True)
    for tmp in ckpt_dir.glob(".tmp-*"):
        shutil.rmtree(tmp, ignore_errors=True)


def complete_checkpoints(ckpt_dir: Path) -> list[Path]:
    """step_* folders that hold state.json, oldest first."""
    if not ckpt_dir.is_dir():
        return []
    return sorted(p for p in ckpt_dir.glob(f"{STEP_PREFIX}*") if (p / "state.json").is_file())


def save_best(ckpt_dir: Path, step: int, model, val_loss: float, state: dict | None = None) -> None:
    """Keep the model of the best evaluation so far apart from the rolling checkpoints."""
    folder = ckpt_dir / _folder_name(BEST_PREFIX, step)
    save_model(model, folder, state=state)
    previous = read_best(ckpt_dir)
    write_json(ckpt_dir / "best.json", {"step": step, "val_loss": val_loss, "folder": folder.name})
    if previous and previous["folder"] != folder.name:
        shutil.rmtree(ckpt_dir / previous["folder"], ignore_errors=True)


def read_best(ckpt_dir: Path) -> dict | None:
    path = ckpt_dir / "best.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


def read_checkpoint(folder: Path) -> tuple[dict, dict, dict]:
    """(state.json, model tensors, optimizer tensors) of a complete checkpoint folder."""
    try:
        state = json.loads((folder / "state.json").read_text())
        weights = load_file(str(folder / "model.safetensors"))
        tensors = load_file(str(folder / "optimizer.safetensors"))
    except (OSError, json.JSONDecodeError, SafetensorError) as e:
        raise ReslabError(f"{folder}: checkpoint cannot be read ({e})") from None
    return state, weights, tensors


def model_folder_of(path: Path, which: str = "best") -> tuple[Path, Path]:
    """(model folder, run folder) for a run folder (its best or last checkpoint) or a model folder
    (returned twice)."""
    if (path / META).is_file():
        return path, path
    ckpt = path / "checkpoints"
    best = read_best(ckpt)
    if which == "best" and best and (ckpt / best["folder"] / META).is_file():
        return ckpt / best["folder"], path
    steps = complete_checkpoints(ckpt)
    if not steps:
        raise ReslabError(f"{path}: neither a model folder nor a run folder with a checkpoint")
    return steps[-1], path
