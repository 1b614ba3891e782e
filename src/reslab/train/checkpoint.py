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

import base64
import binascii
import contextlib
import errno
import json
import math
import os
import re
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..errors import ReslabError
from ..fileio import write_json
from ..model.io import META, save_model

STEP_PREFIX, BEST_PREFIX = "step_", "best_step_"
BEST_FOLDER_RE = re.compile(r"^best_step_\d{8,}$")  # best.json may only name a folder beside it
ADAM_MOMENTS = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")  # per-parameter tensors of (fused) AdamW
GROUP_KEYS = ("lr", "betas", "eps", "weight_decay")  # AdamW's step reads these, with no default to fall back on


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


def load_optimizer_tensors(optimizer: torch.optim.Optimizer, tensors: dict, groups: list, where: str,
                           groups_where: str | None = None) -> None:
    """Restore the optimizer from checkpoint tensors and param groups, after checking both against
    it (a wrong shape or type would otherwise fail at the first step, with training under way).
    where: the optimizer tensors' file; groups_where: the file holding the groups (default where)."""
    check_param_groups(optimizer, groups, groups_where or where)
    check_optimizer_tensors(optimizer, tensors, where)
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


def _same_kind(saved, fresh) -> bool:
    """A saved hyperparameter can stand in for the optimizer's own: a flag for a flag (None: unset,
    or a flag), a finite number for a number, a list of as many numbers for a tuple (betas)."""
    if fresh is None or isinstance(fresh, bool):
        return saved is None or isinstance(saved, bool)
    if isinstance(fresh, (int, float)):
        return isinstance(saved, (int, float)) and not isinstance(saved, bool) and math.isfinite(saved)
    if isinstance(fresh, (list, tuple)):
        return isinstance(saved, list) and len(saved) == len(fresh) and all(map(_same_kind, saved, fresh))
    return True  # a kind this check does not know (a tensor lr): left to the optimizer


def check_param_groups(optimizer: torch.optim.Optimizer, groups, where: str) -> None:
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        raise ReslabError(f"{where}: param_groups: expected a list of objects")
    if [g.get("names") for g in groups] != [g["names"] for g in optimizer.param_groups]:
        raise ReslabError(f"{where}: optimizer parameter groups do not match this model")
    for i, (saved, fresh) in enumerate(zip(groups, optimizer.param_groups)):
        for key in GROUP_KEYS:
            if key in fresh and key not in saved:
                raise ReslabError(f"{where}: param_groups[{i}].{key}: missing")
        for key, value in fresh.items():
            if key in ("params", "names") or key not in saved:
                continue  # a flag added by a later torch: its optimizer fills the default in
            if not _same_kind(saved[key], value):
                raise ReslabError(f"{where}: param_groups[{i}].{key}: expected a value like {value!r}, "
                                  f"got {saved[key]!r}")


def check_optimizer_tensors(optimizer: torch.optim.Optimizer, tensors: dict, where: str) -> None:
    """Every tensor is `<parameter>/<moment>` of a parameter of this optimizer, shaped like it."""
    params = {name: p for g in optimizer.param_groups for name, p in zip(g["names"], g["params"])}
    for key, value in tensors.items():
        name, _, moment = key.rpartition("/")
        if name not in params:
            raise ReslabError(f"{where}: {key}: not a moment of any parameter of this model")
        p = params[name]
        if moment == "step":
            ok, want = value.numel() == 1 and value.is_floating_point(), "a scalar float"
        elif moment in ADAM_MOMENTS:
            ok = tuple(value.shape) == tuple(p.shape) and value.is_floating_point()
            want = f"a float tensor of shape {tuple(p.shape)}"
        else:
            raise ReslabError(f"{where}: {key}: unknown optimizer moment {moment!r}")
        if not ok:
            raise ReslabError(f"{where}: {key}: expected {want}, got {str(value.dtype).removeprefix('torch.')} "
                              f"of shape {tuple(value.shape)}")


# A full disk is the machine's state, not a fault in reslab. Python reports it as OSError(ENOSPC) (or
# EDQUOT, a quota), safetensors as a SafetensorError whose text carries the system's message.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def _disk_full(e: BaseException) -> int | None:
    """The errno of a full disk behind `e`, or None."""
    if isinstance(e, OSError):
        return e.errno if e.errno in DISK_FULL else None
    if isinstance(e, SafetensorError):
        return next((n for n in DISK_FULL if os.strerror(n) in str(e)), None)
    return None


@contextlib.contextmanager
def _disk_full_is_one_line(what: str, target: Path, partial: Path):
    """A full disk while saving `target` is one ReslabError naming it and the cause; `partial` (what
    was half written) is removed, so the space comes back and the run resumes from its last
    complete checkpoint."""
    try:
        yield
    except (OSError, SafetensorError) as e:
        code = _disk_full(e)
        if code is None:
            raise
        shutil.rmtree(partial, ignore_errors=True)
        raise ReslabError(f"{target}: cannot save {what}: {os.strerror(code)}; free some space, then run the "
                          "same command again: it resumes from the last complete checkpoint") from None


def save_checkpoint(ckpt_dir: Path, step: int, model, optimizer, state: dict, keep: int,
                    gathered: tuple | None = None, member: int | None = None) -> Path:
    """gathered: (model state dict, optimizer tensors) of a sharded model, collected on every rank.
    member: the seed whose optimizer slice to save, when the optimizer holds stacked seeds."""
    final = ckpt_dir / _folder_name(STEP_PREFIX, step)
    tmp = ckpt_dir / f".tmp-{final.name}-{os.getpid()}"
    with _disk_full_is_one_line(f"the checkpoint of step {step}", final, tmp):
        ckpt_dir.mkdir(parents=True, exist_ok=True)
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
    with _disk_full_is_one_line(f"the best model (step {step})", folder, folder):
        save_model(model, folder, state=state)
        previous = read_best(ckpt_dir)
        write_json(ckpt_dir / "best.json", {"step": step, "val_loss": val_loss, "folder": folder.name})
    if previous and previous["folder"] != folder.name:
        shutil.rmtree(ckpt_dir / previous["folder"], ignore_errors=True)


def read_best(ckpt_dir: Path, strict: bool = False) -> dict | None:
    """best.json, or None when there is none. A malformed one is None too (training rewrites it),
    unless strict: then it is one ReslabError naming the file and its bad key."""
    path = ckpt_dir / "best.json"
    if not path.is_file():
        return None
    try:
        best = json.loads(path.read_text())
        problem = _best_problem(best)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        problem = f"not valid JSON ({e})"
    if problem is None:
        return best
    if strict:
        raise ReslabError(f"{path}: {problem}; repair it, or use --checkpoint last")
    return None


def _best_problem(best) -> str | None:
    if not isinstance(best, dict):
        return f"expected a JSON object, got {type(best).__name__}"
    folder = best.get("folder")
    if not isinstance(folder, str) or not BEST_FOLDER_RE.match(folder):  # never a path out of checkpoints/
        return f"folder: expected a name like 'best_step_00000500', got {folder!r}"
    if not _is_int(best.get("step")) or best["step"] < 0:
        return f"step: expected a non-negative integer, got {best.get('step')!r}"
    return None


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _rng_problem(rngs) -> str | None:
    """rng: one {"torch_cpu": base64 state, "cuda": [...]} per process (see determinism.py)."""
    size = torch.get_rng_state().numel()
    if not isinstance(rngs, list) or not rngs:
        return f"rng: expected a non-empty list of RNG states, got {rngs!r:.60}"
    for i, r in enumerate(rngs):
        if not isinstance(r, dict) or not isinstance(r.get("torch_cpu"), str):
            return f"rng[{i}].torch_cpu: expected a base64 string"
        try:
            raw = base64.b64decode(r["torch_cpu"], validate=True)
        except (binascii.Error, ValueError):
            return f"rng[{i}].torch_cpu: not valid base64"
        if len(raw) != size:
            return f"rng[{i}].torch_cpu: holds {len(raw)} bytes, a CPU generator state is {size}"
        if "cuda" in r and (not isinstance(r["cuda"], list) or not all(isinstance(c, str) for c in r["cuda"])):
            return f"rng[{i}].cuda: expected a list of base64 strings"
    return None


def _state_problem(state, folder: Path) -> str | None:
    """The first thing wrong with a checkpoint's state.json, as 'key: problem', or None."""
    if not isinstance(state, dict):
        return f"expected a JSON object, got {type(state).__name__}"
    for key in ("step", "rng", "param_groups"):
        if key not in state:
            return f"{key}: missing"
    step = state["step"]
    if not _is_int(step) or step < 0:
        return f"step: expected a non-negative integer, got {step!r}"
    if folder.name.startswith(STEP_PREFIX) and folder.name != _folder_name(STEP_PREFIX, step):
        return f"step: {step} does not match the folder {folder.name}"
    problem = _rng_problem(state["rng"])
    if problem:
        return problem
    groups = state["param_groups"]
    if not isinstance(groups, list) or not all(isinstance(g, dict) and isinstance(g.get("names"), list)
                                               and all(isinstance(n, str) for n in g["names"]) for g in groups):
        return "param_groups: expected a list of objects, each with a list of parameter names"
    best = state.get("best_val_loss")
    if best is not None and (isinstance(best, bool) or not isinstance(best, (int, float))):
        return f"best_val_loss: expected a number or null, got {best!r}"
    scaler = state.get("scaler")
    if scaler is not None:
        keys = ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")
        if not isinstance(scaler, dict) or not all(isinstance(scaler.get(k), (int, float)) and
                                                   not isinstance(scaler.get(k), bool) for k in keys):
            return f"scaler: expected null or an object with numbers {', '.join(keys)}"
    return None


def read_checkpoint(folder: Path) -> tuple[dict, dict, dict]:
    """(state.json, model tensors, optimizer tensors) of a complete checkpoint folder; state.json is
    checked key by key (the tensors are checked against the model when they are loaded). A file that
    cannot be read is one ReslabError naming it and the older checkpoint a resume could start from."""
    files = {"state": folder / "state.json", "model": folder / "model.safetensors",
             "optimizer": folder / "optimizer.safetensors"}
    try:
        state = json.loads(files["state"].read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReslabError(f"{files['state']}: cannot be read ({e}){_damaged(folder)}") from None
    problem = _state_problem(state, folder)
    if problem:
        raise ReslabError(f"{files['state']}: {problem}{_damaged(folder)}")
    tensors = {}
    for kind in ("model", "optimizer"):
        try:
            tensors[kind] = load_file(str(files[kind]))
        except (OSError, SafetensorError, ValueError, RuntimeError) as e:
            first = (str(e).splitlines() or [type(e).__name__])[0]
            raise ReslabError(f"{files[kind]}: cannot be read as safetensors ({first}){_damaged(folder)}") from None
    return state, tensors["model"], tensors["optimizer"]


def _damaged(folder: Path) -> str:
    """What to do about a damaged checkpoint: checkpoints are written whole and renamed into place, so
    damage came from outside, and the run may resume from the newest complete one before it."""
    older = [p for p in complete_checkpoints(folder.parent) if p.name < folder.name]
    then = f"resume from {older[-1].name}" if older else "start the run afresh"
    return f"; the checkpoint is damaged (move {folder.name} out of {folder.parent} to {then})"


def model_folder_of(path: Path, which: str = "best") -> tuple[Path, Path]:
    """(model folder, run folder) for a run folder (its best or last checkpoint) or a model folder
    (returned twice)."""
    if (path / META).is_file():
        return path, path
    if not path.is_dir():
        raise ReslabError(f"{path}: {'is a file, not' if path.exists() else 'no such'} run folder or model folder")
    ckpt = path / "checkpoints"
    best = read_best(ckpt, strict=which == "best")
    if which == "best" and best and (ckpt / best["folder"] / META).is_file():
        return ckpt / best["folder"], path
    steps = complete_checkpoints(ckpt)
    if not steps:
        raise ReslabError(f"{path}: neither a model folder nor a run folder with a checkpoint")
    return steps[-1], path
