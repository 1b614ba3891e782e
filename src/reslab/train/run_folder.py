"""A run folder, the unit of truth for every result:

    config.json      the resolved RunConfig (and reslab's version)
    status.json      status (running / completed / diverged / failed), step, best and final val loss
    metrics.jsonl    one JSON object per line: {"step", "train_loss", "lr", "grad_norm", ...} and
                     {"step", "val_loss", ...} at evaluations
    tokenizer.json   the tokenizer, for sampling
    checkpoints/     see checkpoint.py

metrics.jsonl is appended line by line (flushed); on resume it is cut back atomically to the
checkpoint's step, so lines written after the last checkpoint of a killed run are not kept twice.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import filelock

from ..errors import ReslabError
from ..fileio import JsonlLog, write_json


class FolderBusy(ReslabError):
    """Another process holds the run folder's lock."""


class RunFolder:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.config_path = self.path / "config.json"
        self.status_path = self.path / "status.json"
        self.metrics_path = self.path / "metrics.jsonl"
        self.ckpt_dir = self.path / "checkpoints"
        self._metrics = JsonlLog(self.metrics_path)
        self._lock: filelock.BaseFileLock | None = None

    # ---- one writer at a time ----
    def lock(self) -> None:
        """Hold an exclusive lock on the folder for this process's life, so two processes never
        train the same run at once. The lock is the operating system's (flock on Linux and macOS,
        LockFileEx on Windows, through `filelock`), so the OS releases it when the process ends,
        even by SIGKILL. Then delete what a killed writer left half-written."""
        self.path.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(self.path / ".lock", timeout=0, thread_local=False)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise FolderBusy(f"{self.path}: another process is training this run; wait for it to finish") from None
        self._lock = lock
        self.remove_partial_files()

    def remove_partial_files(self) -> int:
        """Delete atomic-write temporaries (.NAME.XXXX.tmp) and half-written checkpoint folders
        (.tmp-step_*) left by a killed writer. Only safe while holding the lock."""
        removed = 0
        for p in list(self.path.rglob(".*")):
            if p.is_file() and p.name.endswith(".tmp"):
                p.unlink(missing_ok=True)
                removed += 1
            elif p.is_dir() and p.name.startswith(".tmp-"):
                shutil.rmtree(p, ignore_errors=True)
                removed += 1
        return removed

    # ---- config ----
    def claim(self, config: dict) -> bool:
        """Write config.json for a new run, or check an existing run has the same config.
        Returns True when the folder already held this run (resume)."""
        if self.config_path.is_file():
            try:
                existing = json.loads(self.config_path.read_text())
            except json.JSONDecodeError:
                raise ReslabError(f"{self.config_path}: not valid JSON; move the folder away or repair it") from None
            from .config import canonical  # a field added by a later reslab, at its default, is no change

            held = existing.get("config")
            if not isinstance(held, dict) or canonical(held) != canonical(config):
                differs = _differences(canonical(held), canonical(config)) if isinstance(held, dict) else ""
                raise ReslabError(f"{self.path}: holds a run with a different config{differs}; choose another "
                                  "--out folder (or delete this one) to start a new run")
            return True
        self.path.mkdir(parents=True, exist_ok=True)
        from .._version import __version__
        from ..model.registry import plugin_of_design

        record = {"reslab_version": __version__, "config": config}
        module, version = plugin_of_design(config.get("model", {}).get("design"))
        if module is not None:  # a plugin's design: say which plugin, for whoever reads the run later
            record["plugin"] = {"module": module, "version": version}
        write_json(self.config_path, record)
        return False

    # ---- tokenizer (so `reslab sample` needs nothing but the run folder) ----
    def save_tokenizer(self, tokenizer) -> None:
        from ..data.tokenizers import to_json

        write_json(self.path / "tokenizer.json", to_json(tokenizer))

    # ---- status ----
    def read_status(self) -> dict:
        if not self.status_path.is_file():
            return {}
        try:
            return json.loads(self.status_path.read_text())
        except json.JSONDecodeError:
            return {}

    def write_status(self, **fields) -> None:
        status = self.read_status()
        status.update(fields, updated_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        write_json(self.status_path, status)

    # ---- metrics ----
    def read_metrics(self) -> list[dict]:
        return self._metrics.read()

    def truncate_metrics(self, step: int) -> None:
        """Keep the rows of updates and evaluations up to `step` completed updates."""
        self._metrics.keep_only(lambda r: r.get("step", -1) <= step)

    def log(self, row: dict) -> None:
        self._metrics.log(row)

    def close(self) -> None:
        self._metrics.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None


_DEFAULT = object()


def _differences(held: dict, asked: dict, most: int = 3) -> str:
    """" (train.steps: 6 in the folder, 9 asked; ...)": the first fields where two canonical configs
    differ, so the refusal says what changed (a field at its default is absent from both forms)."""
    def flat(d: dict, prefix: str = "") -> dict:
        out = {}
        for k, v in d.items():
            if isinstance(v, dict) and v:
                out.update(flat(v, f"{prefix}{k}."))
            else:
                out[f"{prefix}{k}"] = v
        return out

    a, b = flat(held), flat(asked)
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k, _DEFAULT) != b.get(k, _DEFAULT)]
    if not keys:
        return ""

    def text(d: dict, k: str) -> str:
        return "its default" if k not in d else repr(d[k])
    shown = "; ".join(f"{k}: {text(a, k)} in the folder, {text(b, k)} asked" for k in keys[:most])
    return f" ({shown}{f'; {len(keys) - most} more' if len(keys) > most else ''})"
