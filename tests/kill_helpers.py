"""Kills driven by observed progress, never by the clock: wait until a run folder shows a given
step, checkpoint or half-written checkpoint, then SIGKILL. The kill points are drawn from a seed
(RESLAB_TEST_SEED, else fresh) that every failure message names, so a failure can be replayed."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

SAFETY_NET_S = 1800.0  # only a hung process reaches this (tests/*: the one hang guard); progress, not time, decides every kill and wait


def kill_seed() -> int:
    return int(os.environ.get("RESLAB_TEST_SEED") or random.SystemRandom().randrange(2**31))


def wait_until(condition, what: str, seed: int, poll_s: float = 0.002):
    """Poll `condition()` until it returns something truthy; return it."""
    deadline = time.monotonic() + SAFETY_NET_S
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"never saw {what} (RESLAB_TEST_SEED={seed})")
        time.sleep(poll_s)


def last_step(folder: Path) -> int:
    """The highest training step in a run folder's metrics.jsonl (0 when none yet). A line being
    written may be incomplete: it is ignored."""
    try:
        text = (folder / "metrics.jsonl").read_text()
    except FileNotFoundError:
        return 0
    step = 0
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "train_loss" in row:
            step = max(step, row["step"])
    return step


def checkpoint_steps(folder: Path) -> list[int]:
    """Steps of the complete checkpoints (step_* folders holding state.json)."""
    ckpts = folder / "checkpoints"
    if not ckpts.is_dir():
        return []
    return sorted(int(p.name.split("_")[1]) for p in ckpts.glob("step_*") if (p / "state.json").is_file())


def checkpoint_writes(folder: Path) -> set[str]:
    """Names of the checkpoints' temporary folders: each is a write in progress, or one a killed
    process left behind (the next process removes those when it locks the folder)."""
    ckpts = folder / "checkpoints"
    try:
        return {entry.name for entry in os.scandir(ckpts) if entry.name.startswith(".tmp-")}
    except FileNotFoundError:
        return set()


def writing_checkpoint(folder: Path, stale: set[str] = frozenset()) -> bool:
    """A checkpoint is being written: a temporary folder exists that is not one of `stale` (left by
    an earlier, killed process)."""
    return bool(checkpoint_writes(folder) - stale)


def status(folder: Path) -> str | None:
    try:
        return json.loads((folder / "status.json").read_text()).get("status")
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def lock_is_free(folder: Path) -> bool:
    """No process holds the run folder's lock (a killed trainer's lock is released by the OS)."""
    import filelock

    lock = filelock.FileLock(folder / ".lock", timeout=0, thread_local=False)
    try:
        lock.acquire()
    except filelock.Timeout:
        return False
    lock.release()
    return True
