"""Small generated corpora and configs for training tests (no downloads, seconds on a CPU)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from reslab.train.config import build_run_config

WORDS = ("the king queen lord speak night day love death sword crown blood heart fair sweet "
         "good noble friend enemy war peace thou thee thy art hath doth shall will come go").split()


def generated_text(n_chars: int = 60_000, seed: int = 0) -> str:
    """Pseudo-English from a seeded RNG: enough structure for a loss curve to fall."""
    rng = random.Random(seed)
    out, size = [], 0
    while size < n_chars:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 10)))
        line = line.capitalize() + rng.choice(".,;!?") + "\n"
        out.append(line)
        size += len(line)
    return "".join(out)[:n_chars]


def write_corpus(folder: Path, seed: int = 0, n_chars: int = 60_000) -> Path:
    path = folder / "corpus.txt"
    path.write_text(generated_text(n_chars, seed))
    return path


def tiny_run(corpus: Path, cache: Path, **overrides) -> dict:
    """A nested config dict for a ~1 s run; overrides are 'table.key' -> value."""
    cfg = {
        "name": "t",
        "model": {"design": "pre-ln", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32,
                  "dropout": 0.1},
        "data": {"corpus": "text", "path": str(corpus), "tokenizer": "char", "cache_dir": str(cache)},
        "optim": {"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 5},
        "train": {"steps": 30, "batch_size": 4, "eval_interval": 10, "eval_iters": 2, "threads": 1,
                  "log_interval": 1, "progress": "off", "device": "cpu"},
    }
    for key, value in overrides.items():
        table, field = key.split(".")
        cfg[table][field] = value
    return cfg


def tiny_config(corpus: Path, cache: Path, **overrides):
    return build_run_config(tiny_run(corpus, cache, **overrides))


def train_losses(run: Path) -> dict[int, float]:
    """step -> train loss, from a run folder's metrics.jsonl."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["train_loss"] for r in rows if "train_loss" in r}


def val_losses(run: Path) -> dict[int, float]:
    """step -> val loss, from a run folder's metrics.jsonl."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["val_loss"] for r in rows if "val_loss" in r}


# ---- curves in file order, and the resume line ------------------------------------------------------
# Curves are compared as lists in file order, never as dicts keyed by step: a resume that appends
# without truncating leaves duplicated steps, which a dict would silently collapse.

# The line an engine logs when it picks up a checkpoint (train/single.py `SingleEngine._resume`).
RESUME_LINE = re.compile(r"resuming (?P<folder>.+) from step (?P<step>\d+)")

# Row fields that measure the machine, not the arithmetic: left out when curves are compared.
TIMING_FIELDS = ("tokens_per_s", "mfu")


def metric_rows(run: Path) -> list[dict]:
    """Every row of a run folder's metrics.jsonl, in file order (duplicates kept)."""
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def curve_rows(run: Path) -> list[dict]:
    """metrics.jsonl rows in file order without the timing fields: two runs of the same arithmetic
    give equal lists, and a duplicated or missing row shows."""
    return [{k: v for k, v in row.items() if k not in TIMING_FIELDS} for row in metric_rows(run)]


def train_curve(run: Path) -> list[tuple[int, float]]:
    """(step, train loss) in file order."""
    return [(r["step"], r["train_loss"]) for r in metric_rows(run) if "train_loss" in r]


def val_curve(run: Path) -> list[tuple[int, float]]:
    """(step, val loss) in file order."""
    return [(r["step"], r["val_loss"]) for r in metric_rows(run) if "val_loss" in r]


def resumed_steps(lines) -> list[int]:
    """The steps named by the resume lines among `lines` (log messages or a process's output)."""
    return [int(m["step"]) for line in lines for m in RESUME_LINE.finditer(str(line))]


class LogLines(list):
    """A `log=` callable for train() that keeps every message, so a test can read the resume line."""

    def __call__(self, *parts) -> None:
        self.append(" ".join(str(p) for p in parts))


def interrupt_before_update(monkeypatch, loop_module, step: int):
    """Make train() stop as a Ctrl-C would when it starts the update after `step` completed updates
    (rows up to `step` are written, the checkpoint before it too); returns the real learning_rate,
    to put back with monkeypatch.setattr before the relaunch. Kill tests stop between checkpoints
    so that the relaunch has rows to drop: a resume that forgot to truncate shows as duplicates."""
    real = loop_module.learning_rate

    def interrupted(at, *args, **kwargs):
        if at == step:
            raise KeyboardInterrupt
        return real(at, *args, **kwargs)

    monkeypatch.setattr(loop_module, "learning_rate", interrupted)
    return real
