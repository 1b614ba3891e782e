"""Small sweep specs over a generated corpus (no downloads; each run a few seconds on a CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import tomli_w

from tests.train_helpers import tiny_run, write_corpus


def spec_dict(tmp: Path, variants: dict | None = None, seeds=(1, 2), name: str = "demo", **train) -> dict:
    corpus = tmp / "corpus.txt"
    if not corpus.is_file():
        write_corpus(tmp)
    base = tiny_run(corpus, tmp / "cache")
    base.pop("name")
    base["model"]["dropout"] = 0.0
    base["train"].update(train)
    return {"name": name, "seeds": list(seeds), "baseline": "full", "base": base,
            "variants": variants if variants is not None else
            {"full": {}, "none": {"model": {"attn_res": False, "ffn_res": False}}}}


def write_spec(tmp: Path, data: dict, file: str = "spec.toml") -> Path:
    path = tmp / file
    path.write_text(tomli_w.dumps(data))
    return path


def curves(run_dir: Path) -> list[tuple]:
    """Every metrics row as (step, train_loss or None, val_loss or None), in file order."""
    rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r.get("train_loss"), r.get("val_loss")) for r in rows]
