"""A scale ladder in a report: trend claims' verdicts, each design's loss against size, and the
section's tables and figures.

    trend_fields(claim, expr, effects, sizes, exponent, dropped) -> the fields of a trend claim's
        result (report/claims.py builds the rest); a tested one waits for its Holm p (decide_trend)
    decide_trend(result)           its verdict and reason once p_holm is known
    ladder_section(spec, scale, cells, claims, out) -> dict | None: the report's "ladder" entry
    ladder_blocks(report)          render.py's blocks for it

A trend claim rules on the slope b of (a - b) per doubling of N, the rungs' non-embedding weights
(spec/ladder.py), fitted by least squares over every rung's per-seed differences
(report/trend.py): two one-sided tests of b against the claim's threshold, their smaller p in the
report's Holm family, reproduced / not reproduced at Holm p < 0.05 in its direction, as a
difference claim is. At least 3 seeds at every rung, or no test and no verdict. The slope per
doubling of compute (6 N T, T the rung's tokens) is the same slope divided by 1 + the ladder's
exponent, since log C = (1 + exponent) log N + a constant; the report gives both. The trend's
word (grows, shrinks, stays within +-c per doubling, undetermined) is descriptive, from the 95%
interval and the paper's sign.
"""

from __future__ import annotations

import math

import numpy as np

from ..spec.ladder import RUNG_AXIS, rung_sizes, rung_tokens, rungs_at
from ..spec.rows import row_name
from ..spec.schema import SweepSpec
from . import stats, trend

ALPHA = 0.05
LOSS_FIGURE = "ladder_loss.png"
EFFECT_FIGURE = "ladder_effect.png"
CURVE_POINTS = 50


def _f(x) -> str:
    return "—" if x is None else f"{x:+.4f}"


def _word(fit: dict, published: str | None, c: float | None) -> str:
    """The trend's word: of the published effect when the claim gives its sign, else of a - b."""
    if published is None:
        word = trend.trend_label(fit, +1, c)
        return {trend.GROWS: "a - b rises with size", trend.SHRINKS: "a - b falls with size"}.get(word, word)
    word = trend.trend_label(fit, -1 if published == "<" else +1, c)
    return {trend.GROWS: "the published effect grows with size",
            trend.SHRINKS: "the published effect shrinks with size"}.get(word, word)


def trend_fields(claim, expr: str, effects: dict[str, list[float]], sizes: dict[str, int], exponent: float,
                 dropped: str) -> dict:
    """A trend claim's result fields from each rung's per-seed differences a - b (rung -> values).
    Rungs without any pair are left out (and named); fewer than 2 rungs with pairs: no slope."""
    op, c = claim.op, float(claim.threshold)
    shown = f"slope of {expr} per doubling of N"
    out: dict = {"claim": f"{shown} {'within ±' if op == 'within' else op + ' '}{c:g}",
                 "test": "least-squares slope over rungs", "trend": None}
    present = {r: v for r, v in effects.items() if v}
    empty = [r for r in sizes if r not in present]
    missing = (f"; no pair at rung {', '.join(empty)}" if empty else "") + dropped
    out["n"] = sum(len(v) for v in present.values())
    if len(present) < 2:
        out["reason"] = f"pairs at {len(present)} rung(s): a slope needs at least 2" + missing
        return out
    fit = trend.fit_slope({sizes[r]: v for r, v in present.items()})
    tests = trend.slope_tests(fit, op, c)
    points = []
    for r, v in present.items():
        s = stats.summarize(v)
        points.append({"rung": r, "params": sizes[r], "values": s["values"], "mean": s["mean"],
                       "ci_low": s["ci_low"], "ci_high": s["ci_high"], "n": s["n"]})
    per_compute = None if fit["slope"] is None else fit["slope"] / (1.0 + exponent)
    word = _word(fit, claim.published, c if op == "within" else None)
    out.update(estimate=fit["slope"], ci_low=fit["ci_low"], ci_high=fit["ci_high"], df=fit["df"],
               trend={"points": points, "slope": fit, "label": word, "slope_per_compute_doubling": per_compute,
                      "a": claim.cells[0].variant, "b": claim.cells[1].variant, "published": claim.published})
    head = (f"slope = {_f(fit['slope'])} nats per doubling of N ({_f(per_compute)} per doubling of compute) "
            f"over {len(present)} rungs, {out['n']} pairs")
    if fit["se_slope"] is None:
        out["reason"] = f"{head}: {fit['note']}; no verdict" + missing
        return out
    if tests["p"] is None:  # zero residual variance: the point estimate decides
        holds = tests["holds"]
        out["verdict"] = "reproduced" if holds else "not reproduced"
        out["reason"] = f"{head}; {fit['note']}: it {'is' if holds else 'is not'} {op} {c:g}" + missing
        return out
    out.update(t=tests["t"], p_for=tests["p_for"], p_against=tests["p_against"], p=tests["p"],
               direction=tests["direction"], _pending_trend=(head, op, c, word, missing))
    return out


def decide_trend(r: dict) -> None:
    """The verdict and reason of a tested trend claim, once its Holm p is known."""
    head, op, c, word, missing = r.pop("_pending_trend")
    ph, p = r["p_holm"], r["p"]
    bound = f"within ±{c:g}" if op == "within" else f"{op} {c:g}"
    interval = f"95% interval [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]"
    if ph < ALPHA:
        r["verdict"] = "reproduced" if r["direction"] == "for" else "not reproduced"
        verb = "support" if r["direction"] == "for" else "contradict"
        r["reason"] = f"{head}, {interval} ({word}): the data {verb} {bound} with p = {p:.3g}, Holm p = {ph:.3g} < {ALPHA}"
    else:
        r["verdict"] = "inconclusive"
        side = "supporting" if r["direction"] == "for" else "contradicting"
        r["reason"] = (f"{head}, {interval} ({word}): the smaller one-sided p ({side} {bound}) is {p:.3g}, "
                       f"Holm p = {ph:.3g} >= {ALPHA}")
    r["reason"] += missing


# ---- the section ---------------------------------------------------------------------------------
def _points(runs_by_rung: dict[str, list[float]], sizes: dict[str, int]) -> list[dict]:
    out = []
    for r in sizes:
        vals = runs_by_rung.get(r) or []
        if not vals:
            continue
        s = stats.summarize(vals)
        out.append({"rung": r, "params": sizes[r], "values": s["values"], "mean": s["mean"],
                    "ci_low": s["ci_low"], "ci_high": s["ci_high"], "n": s["n"]})
    return out


def _design(name: str, variant: str, points: list[dict], top: tuple[str, int] | None) -> dict:
    """One design's loss against N: its points, the power law where 3 rungs or more have runs, and
    an extrapolation to `top` (a larger rung of another scale), labelled as one."""
    out = {"name": name, "color_key": variant, "points": points, "fit": None, "curve": [], "extrapolation": None}
    if len(points) < 3:
        return out
    full = trend.fit_power_law({p["params"]: p["values"] for p in points})
    # the covariance is a numpy matrix: the JSON keeps the standard errors instead
    out["fit"] = {k: (float(v) if isinstance(v, np.floating) else v) for k, v in full.items() if k != "cov"}
    if not full["fit"]:
        return out
    lo, hi = points[0]["params"], points[-1]["params"]
    hi_draw = top[1] if top and top[1] > hi else hi
    grid = np.geomspace(lo, hi_draw, CURVE_POINTS)
    out["curve"] = [[float(n), float(full["E"] + full["A"] * n ** (-full["alpha"]))] for n in grid]
    if top and top[1] > hi:
        pred = trend.power_law_prediction(full, float(top[1]))
        out["extrapolation"] = {"n": float(top[1]), "prediction": pred["prediction"], "low": pred["low"],
                                "high": pred["high"], "extrapolation": pred["extrapolation"],
                                "label": top[0]}  # short: the figure annotates it; the text says the rest
    return out


def _largest_elsewhere(spec: SweepSpec, scale: str) -> tuple[str, int] | None:
    """The largest rung of the spec's other scales (the paper's sizes), where it is larger."""
    best = None
    for s in spec.scales:
        if s == scale or not rungs_at(spec, s):
            continue
        for r, n in rung_sizes(spec, s).items():
            if best is None or n > best[1]:
                best = (f"{s} rung {r}", n)
    return best


def ladder_section(spec: SweepSpec, scale: str, cells: list[dict], claims: list[dict], metric: str = "best_val_loss"
                   ) -> dict | None:
    """The report's ladder entry (None without a ladder at this scale). cells: build.py's."""
    if spec.ladder is None or not rungs_at(spec, scale):
        return None
    sizes = rung_sizes(spec, scale)
    tokens = rung_tokens(spec, scale, sizes)
    families: dict[str, dict] = {}  # a design at a grid point without its rung -> rung -> values
    for cell in cells:
        grid = dict(cell.get("grid") or {})
        rung = grid.pop(RUNG_AXIS, None)
        if rung not in sizes:
            continue
        name = row_name(cell["variant"], grid)
        fam = families.setdefault(name, {"variant": cell["variant"], "values": {}})
        fam["values"][rung] = [r[metric] for r in cell.get("runs") or []
                               if r.get("status") == "completed" and r.get(metric) is not None
                               and math.isfinite(r[metric])]
    top = _largest_elsewhere(spec, scale)
    designs = [_design(name, fam["variant"], _points(fam["values"], sizes), top) for name, fam in families.items()]
    effects = [{"id": c["id"], "a": c["trend"]["a"], "b": c["trend"]["b"], "color_key": c["trend"]["a"],
                "points": c["trend"]["points"], "slope": c["trend"]["slope"], "label": c["trend"]["label"],
                "verdict": c.get("verdict")}
               for c in claims if c.get("kind") == "trend" and c.get("trend")]
    return {"over": spec.ladder.over, "exponent": spec.ladder.exponent, "metric": metric,
            "tuned": spec.tune is not None and spec.tune.tunes(scale),
            "rungs": [{"name": r, "params": n, "tokens": tokens[r]} for r, n in sizes.items()],
            "designs": designs, "effects": effects, "figures": []}


def _short(n: float) -> str:
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:g}"


def ladder_blocks(report: dict) -> list[tuple]:
    """The ladder's heading, rungs, each design's loss per rung and fit, and each trend."""
    sec = report.get("ladder")
    if not sec:
        return []
    rungs = sec["rungs"]
    blocks: list[tuple] = [("h2", f"Scale ladder: {sec['over'] or 'rungs'}")]
    rule = ("the same tokens at every rung" if sec["exponent"] == 0 else
            f"tokens proportional to N^{sec['exponent']:g}" if sec["exponent"] != 1 else "tokens proportional to N")
    blocks.append(("p", f"N is a rung's non-embedding weights, n_layer x (4 d^2 + 2 d h), the same for every design "
                        f"at a rung; the token budget is {rule}. "
                        + ("Each design runs at its own tuned learning rate per rung. " if sec.get("tuned") else
                           "The learning rate is not tuned at this scale. ")
                        + f"Values: {sec['metric'].replace('_', ' ')}, mean over seeds with its 95% t-interval."))
    blocks.append(("table", ["rung", "N", "tokens"], [[r["name"], f"{r['params']:,}", _short(r["tokens"])]
                                                      for r in rungs], "lrr"))
    head = ["design"] + [r["name"] for r in rungs] + ["L(N) = E + A N^-alpha"]
    body = []
    for d in sec["designs"]:
        by = {p["rung"]: p for p in d["points"]}
        row = [d["name"]]
        for r in rungs:
            p = by.get(r["name"])
            if p is None:
                row.append("—")
            elif p["ci_low"] is None:
                row.append(f"{p['mean']:.4f} (n={p['n']})")
            else:
                row.append(f"{p['mean']:.4f} [{p['ci_low']:.4f}, {p['ci_high']:.4f}]")
        fit = d.get("fit")
        if not fit:
            row.append("— (fewer than 3 rungs)")
        elif not fit.get("fit"):
            row.append(str(fit.get("reason")))
        else:
            row.append(f"E = {fit['E']:.3f} ± {fit['se_E']:.3f}, alpha = {fit['alpha']:.3f} ± {fit['se_alpha']:.3f}")
        body.append(row)
    blocks.append(("table", head, body, "l" + "r" * len(rungs) + "l"))
    extra = [d for d in sec["designs"] if d.get("extrapolation")]
    if extra:
        blocks.append(("p", "Extrapolations of the fitted L(N) to the N of a larger rung, with this scale's tokens "
                            "and context (not results, never verdicts): " + "; ".join(
            f"{d['name']} at {d['extrapolation']['label']} ({d['extrapolation']['n']:,.0f} weights): "
            f"{d['extrapolation']['prediction']:.3f} (95% prediction interval {d['extrapolation']['low']:.3f} to "
            f"{d['extrapolation']['high']:.3f})" for d in extra) + "."))
    if sec["effects"]:
        head = ["effect"] + [r["name"] for r in rungs] + ["slope per doubling of N", "trend", "verdict"]
        body = []
        for e in sec["effects"]:
            by = {p["rung"]: p for p in e["points"]}
            row = [f"{e['a']} - {e['b']}"]
            for r in rungs:
                p = by.get(r["name"])
                row.append("—" if p is None else f"{p['mean']:+.4f}" + (
                    "" if p["ci_low"] is None else f" [{p['ci_low']:+.4f}, {p['ci_high']:+.4f}]"))
            s = e["slope"]
            row.append(f"{s['slope']:+.4f}" + ("" if s["ci_low"] is None else
                                               f" [{s['ci_low']:+.4f}, {s['ci_high']:+.4f}]"))
            row += [e["label"], str(e.get("verdict") or "—")]
            body.append(row)
        blocks.append(("table", head, body, "l" + "r" * (len(rungs) + 1) + "ll"))
    return blocks
