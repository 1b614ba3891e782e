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


def assert_same_curves(ours: list[tuple], ref: list[tuple], rel: float) -> None:
    """Two curves() row by row: the same steps with the same losses present, each loss within rel."""
    import pytest

    assert len(ours) == len(ref)
    for a, b in zip(ours, ref):
        assert a[0] == b[0] and [v is None for v in a] == [v is None for v in b], (a, b)
        assert [v for v in a[1:] if v is not None] == pytest.approx([v for v in b[1:] if v is not None], rel=rel), (a, b)
