"""Export the index as tables: runs (one row per membership) and metric curves (one row per logged step)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from ..errors import ReslabError
from ..fileio import JsonlLog, atomic_path, write_text

RUN_FIELDS = ("spec", "variant", "scale", "grid", "seed", "id", "status", "design", "step", "steps",
              "best_val_loss", "final_val_loss", "last_train_loss", "spike_score_loss", "params",
              "tokens_per_s", "wall_s", "error", "path", "planned")
CURVE_FIELDS = ("spec", "variant", "scale", "seed", "id", "step", "train_loss", "val_loss", "lr", "grad_norm",
                "tokens_per_s")


def curve_rows(runs: list[dict]) -> list[dict]:
    out = []
    for run in runs:
        for row in JsonlLog(Path(run["path"]) / "metrics.jsonl").read():
            out.append({**{k: run.get(k) for k in ("spec", "variant", "scale", "seed", "id")},
                        **{k: row.get(k) for k in CURVE_FIELDS[5:]}})
    return out


def _write_csv(path: Path, rows: list[dict], fields: tuple) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, buf.getvalue())


def _write_parquet(path: Path, rows: list[dict], fields: tuple) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ReslabError("--format parquet: needs pyarrow (pip install 'reslab[parquet]'), or use --format csv") from None
    table = pa.table({f: [r.get(f) for r in rows] for f in fields})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def export(runs: list[dict], out_dir: str | Path, fmt: str = "csv", curves: bool = True) -> list[Path]:
    """Write runs.<fmt> (and curves.<fmt>) into out_dir; returns the files written."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ReslabError(f"{out_dir}: exists and is not a folder")
    rows = [dict(r, grid=json.dumps(json.loads(r["grid"])) if r.get("grid") else None) for r in runs]
    write = _write_csv if fmt == "csv" else _write_parquet
    written = [out_dir / f"runs.{fmt}"]
    write(written[0], rows, RUN_FIELDS)
    if curves:
        written.append(out_dir / f"curves.{fmt}")
        write(written[1], curve_rows(runs), CURVE_FIELDS)
    return written
