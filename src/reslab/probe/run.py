"""Run probes over designs x depths x seeds, collect rows, fit log-log slopes, write the CSV.

Rows: one per (design, depth, seed, layer) with kind = "layer", and one per (design, depth, seed)
with kind = "model" (layer empty) carrying the per-model scalars (last_w2_grad_norm, loss).
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np

from ..errors import ReslabError
from ..fileio import write_text
from .measure import probe_model, random_batch
from .settings import build, check_design, check_mode, linear_ln_sim

LAYER_METRICS = ("grad_norm", "act_norm", "adj_change", "cos_sim",
                 "act_norm_dual", "adj_change_dual", "cos_sim_dual")
SIM_METRICS = ("grad_norm", "grad_var", "act_grad_norm")
MODEL_METRICS = ("last_w2_grad_norm", "loss")
COLUMNS = ("mode", "design", "depth", "seed", "kind", "layer") + tuple(
    dict.fromkeys(LAYER_METRICS + SIM_METRICS + MODEL_METRICS))


def fit_slope(xs, ys) -> float:
    """Least-squares slope of log(y) on log(x): the exponent p of y ~ x^p. Non-positive y are dropped."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y is not None and y > 0
           and math.isfinite(y)]
    if len(pts) < 2:
        return float("nan")
    lx, ly = np.array(pts).T
    return float(np.polyfit(lx, ly, 1)[0])


def check_args(designs, depths, seeds, mode) -> None:
    check_mode(mode)
    if not designs:
        raise ReslabError("--designs: give at least one design")
    for d in designs:
        check_design(d, mode)
    if not depths:
        raise ReslabError("--depths: give at least one depth")
    for L in depths:
        if not isinstance(L, int) or L < 1:
            raise ReslabError(f"--depths: every depth must be an integer >= 1, got {L!r}")
    if seeds < 1:
        raise ReslabError(f"--seeds: must be >= 1, got {seeds}")


def run_probe(designs, depths, seeds: int = 3, mode: str = "default", width: int = 64, heads: int = 4,
              seq: int = 32, batch: int = 4, out_dir=None) -> list[dict]:
    """Probe every (design, depth, seed); seeds are 0..seeds-1. Writes probe.csv if out_dir is given."""
    check_args(designs, depths, seeds, mode)
    if mode != "sim" and width % heads:
        raise ReslabError(f"--heads: {heads} heads do not divide --width {width}")
    rows = []
    for name in designs:
        for L in depths:
            for seed in range(seeds):
                base = {"mode": mode, "design": name, "depth": L, "seed": seed}
                if mode == "sim":
                    res = linear_ln_sim(L, width, seed, kind=name)
                    metrics = SIM_METRICS
                    rows.append({**base, "kind": "model"})
                else:
                    model = build(name, mode, L, seed, width, heads, seq)
                    idx, targets = random_batch(model.config.vocab_size, batch, seq, seed)
                    res = probe_model(model, idx, targets)
                    metrics = [m for m in LAYER_METRICS if m in res]
                    rows.append({**base, "kind": "model", **{m: res[m] for m in MODEL_METRICS}})
                for layer in range(L):
                    rows.append({**base, "kind": "layer", "layer": layer + 1,
                                 **{m: res[m][layer] for m in metrics}})
    if out_dir is not None:
        write_csv(Path(out_dir) / "probe.csv", rows)
    return rows


def write_csv(path, rows: list[dict]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, restval="", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    write_text(path, buf.getvalue())


def read_csv(path) -> list[dict]:
    """Rows back from probe.csv, numbers as int / float, empty cells dropped."""
    out = []
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            row = {}
            for k, v in r.items():
                if v == "":
                    continue
                if k in ("depth", "seed", "layer"):
                    row[k] = int(v)
                elif k in ("mode", "design", "kind"):
                    row[k] = v
                else:
                    row[k] = float(v)
            out.append(row)
    return out


# ---- aggregation ------------------------------------------------------------------------------
def model_means(rows, metric: str) -> dict[str, dict[int, float]]:
    """design -> depth -> seed-mean of a per-model metric (or, for sim rows, of the last layer's)."""
    acc: dict = {}
    for r in rows:
        if r.get(metric) is None:
            continue
        if r["kind"] == "model" or (r["mode"] == "sim" and r.get("layer") == r["depth"]):
            acc.setdefault(r["design"], {}).setdefault(r["depth"], []).append(r[metric])
    return {d: {L: float(np.mean(v)) for L, v in sorted(by.items())} for d, by in acc.items()}


def layer_means(rows, metric: str, depth: int) -> dict[str, list[float]]:
    """design -> seed-mean of a per-layer metric, for layers 1..depth of the given depth."""
    acc: dict = {}
    for r in rows:
        if r["kind"] == "layer" and r["depth"] == depth and r.get(metric) is not None:
            acc.setdefault(r["design"], {}).setdefault(r["layer"], []).append(r[metric])
    return {d: [float(np.mean(by[l])) for l in sorted(by)] for d, by in acc.items()}


def depth_slopes(rows, metric: str) -> dict[str, float]:
    """design -> exponent of the seed-mean per-model metric against depth."""
    return {d: fit_slope(list(by), list(by.values())) for d, by in model_means(rows, metric).items()}


def layer_slopes(rows, metric: str, depth: int, skip_first: int = 0) -> dict[str, float]:
    """design -> exponent of the seed-mean per-layer metric against the layer index k."""
    out = {}
    for d, ys in layer_means(rows, metric, depth).items():
        ks = list(range(1, len(ys) + 1))[skip_first:]
        out[d] = fit_slope(ks, ys[skip_first:])
    return out


def slopes_table(rows) -> list[dict]:
    """The summary printed by `reslab probe`: per design, the fitted exponents this mode reports."""
    if not rows:
        return []
    mode, deepest = rows[0]["mode"], max(r["depth"] for r in rows)
    table: dict[str, dict] = {}
    def put(name, values):
        for d, v in values.items():
            table.setdefault(d, {"design": d})[name] = v
    if mode == "sim":
        put(f"grad_norm~layer (L={deepest})", layer_slopes(rows, "grad_norm", deepest))
        put(f"grad_var~layer (L={deepest})", layer_slopes(rows, "grad_var", deepest))
    else:
        if len({r["depth"] for r in rows}) > 1:
            put("last_w2_grad~depth", depth_slopes(rows, "last_w2_grad_norm"))
        put(f"adj_change~layer (L={deepest})", layer_slopes(rows, "adj_change", deepest))
        put(f"grad_norm~layer (L={deepest})", layer_slopes(rows, "grad_norm", deepest))
        last_cos = {d: ys[-1] for d, ys in layer_means(rows, "cos_sim", deepest).items()}
        put(f"cos_sim last layer (L={deepest})", last_cos)
    return list(table.values())


NO_FIT = ("n/a: fewer than two positive values to fit (the quantity is 0 at init, as where a design's "
          "branches start at zero: skipinit, fixup, rezero)")


def format_table(table: list[dict]) -> str:
    """The slopes as aligned text; an exponent with nothing to fit is "n/a", explained under the table."""
    if not table:
        return ""
    cols = list(dict.fromkeys(k for row in table for k in row))

    def cell(v) -> str:
        if isinstance(v, float):
            return f"{v:+.3f}" if math.isfinite(v) else "n/a"
        return str(v if v is not None else "")
    cells = [[str(c) for c in cols]] + [[cell(row.get(c)) for c in cols] for row in table]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cols))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    if any(c == "n/a" for r in cells[1:] for c in r):
        lines.append(NO_FIT)
    return "\n".join(lines)
