"""Results as data frames: every run of a store, and every logged step, for a notebook.

    import reslab
    runs = reslab.load_runs("results", spec="partial-residual", status="completed")
    runs.groupby("variant")["best_val_loss"].agg(["mean", "std", "count"])
    curves = reslab.load_curves("results", spec="partial-residual", metric="val_loss")

load_runs: one row per (run, sweep membership); a run trained by `reslab train` has spec None.
    columns  spec, variant, scale, seed, grid (JSON text), id, status, design, step, steps,
             best_val_loss, final_val_loss, last_train_loss, spike_score_loss, params, tokens_per_s,
             wall_s, started_at, finished_at, error, path, planned; then every config field flattened,
             e.g. "model.n_layer", "optim.lr" (run identities, not display names: "name" is left out)
    planned  True when the sweep's current plan names the run, False when an earlier plan of the
             sweep trained it (its spec was edited, a row re-tuned) and the run now planned in its
             slot has not trained yet, None for a run in no sweep. Reports read planned runs only;
             load_runs(store, spec=..., planned=True) gives what a report would.
    filters  spec, variant, scale, status, design, seed, planned, and any flattened config field
             given as a dict: load_runs(store, **{"model.n_layer": 16}) (or model__n_layer=16)
load_curves: long format, one row per (run, step, metric): spec, variant, scale, seed, id, design,
    step, metric, value; the same filters, plus metric= (one name or a list).

The store is `store`, else $RESLAB_STORE, else ./results. pandas is an optional extra
(pip install 'reslab[frames]'); without it both say so in one line.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from .errors import ReslabError

INDEX_COLUMNS = ("spec", "variant", "scale", "seed", "grid", "id", "status", "design", "step", "steps",
                 "best_val_loss", "final_val_loss", "last_train_loss", "spike_score_loss", "params",
                 "tokens_per_s", "wall_s", "started_at", "finished_at", "error", "path")
FRAME_COLUMNS = INDEX_COLUMNS + ("planned",)  # planned: from the sweep's record, not the index
CURVE_METRICS = ("train_loss", "val_loss", "lr", "grad_norm", "tokens_per_s")
_INDEX_FILTERS = ("spec", "variant", "scale", "status", "design", "seed", "planned")


def _pandas():
    try:
        import pandas
    except ImportError:
        raise ReslabError("load_runs / load_curves: need pandas (pip install 'reslab[frames]')") from None
    return pandas


def store_root(store: str | Path | None) -> Path:
    root = Path(store if store is not None else os.environ.get("RESLAB_STORE") or "results")
    if not (root / "index.sqlite").is_file():
        raise ReslabError(f"{root}: not a results store (no index.sqlite); give the folder a sweep or "
                          "`reslab train` wrote, or set RESLAB_STORE")
    return root


def flatten(config: dict, prefix: str = "") -> dict:
    """{"model": {"n_layer": 4}} -> {"model.n_layer": 4}; tables inside fields stay JSON text."""
    out = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and prefix == "":
            out.update(flatten(value, path + "."))
        elif isinstance(value, (dict, list)):
            out[path] = json.dumps(value, sort_keys=True)
        else:
            out[path] = value
    return out


def _rows(store, filters: dict) -> list[dict]:
    from .sweep.store import Store

    config_filters = {k.replace("__", "."): v for k, v in filters.items() if k not in _INDEX_FILTERS}
    index = {k: filters[k] for k in ("spec", "variant", "scale", "status") if k in filters}
    if filters.get("planned", True) not in (True, False, None):
        raise ReslabError(f"planned: expected True, False or None, got {filters['planned']!r}")
    rows, fields_seen = [], set()
    db = Store(store_root(store))
    try:
        for r in db.mark_planned(db.runs(**index)):
            if "design" in filters and r.get("design") != filters["design"]:
                continue
            if "seed" in filters and r.get("seed") != filters["seed"]:
                continue
            config = flatten(json.loads(r["config"] or "{}"))
            config.pop("name", None)
            fields_seen.update(config)
            if any(config.get(k, _MISSING) != v for k, v in config_filters.items()):
                continue
            row = {c: r.get(c) for c in FRAME_COLUMNS}
            if "planned" in filters and row["planned"] != filters["planned"]:
                continue
            if row["seed"] is None:  # a run in no sweep: its own seed
                row["seed"] = config.get("train.seed")
            row.update(config)
            rows.append(row)
    finally:
        db.close()
    typos = [k for k in config_filters if fields_seen and k not in fields_seen]
    if typos:
        raise ReslabError(f"{', '.join(typos)}: no run in the store has this config field "
                          "(filters are flattened names such as model.n_layer or optim.lr)")
    return rows


_MISSING = object()


def load_runs(store: str | Path | None = None, **filters):
    """A pandas DataFrame with one row per run (per sweep membership); see the module docstring."""
    pandas = _pandas()
    rows = _rows(store, filters)
    frame = pandas.DataFrame(rows)
    if frame.empty:
        return pandas.DataFrame(columns=list(FRAME_COLUMNS))
    return frame


def load_curves(store: str | Path | None = None, metric: str | list[str] | None = None, **filters):
    """A pandas DataFrame in long format: one row per (run, step, metric)."""
    from .fileio import JsonlLog

    pandas = _pandas()
    metrics = (metric,) if isinstance(metric, str) else tuple(metric or CURVE_METRICS)
    unknown = [m for m in metrics if m not in CURVE_METRICS]
    if unknown:
        raise ReslabError(f"metric: {', '.join(unknown)} is not logged; choose from {', '.join(CURVE_METRICS)}")
    out = []
    seen = set()
    for r in _rows(store, filters):
        key = (r["id"], r["spec"], r["variant"], r["scale"], r["seed"])
        if key in seen or not r.get("path"):
            continue
        seen.add(key)
        for entry in JsonlLog(Path(r["path"]) / "metrics.jsonl").read():
            if not isinstance(entry, dict) or not isinstance(entry.get("step"), int):
                continue
            for m in metrics:
                value = entry.get(m)
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    out.append({"spec": r["spec"], "variant": r["variant"], "scale": r["scale"],
                                "seed": r["seed"], "id": r["id"], "design": r["design"],
                                "step": entry["step"], "metric": m, "value": float(value)})
    return pandas.DataFrame(out, columns=["spec", "variant", "scale", "seed", "id", "design", "step",
                                          "metric", "value"])
