"""Small generated corpora and configs for training tests (no downloads, seconds on a CPU)."""

from __future__ import annotations

import json
import random
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
