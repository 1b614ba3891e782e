"""A design card as data: the sections of `reslab assess`, read from the card's sweep reports and
measured beside them. Rendering is assess/render.py's; running, assess/run.py's.

    build_card(req, specs, reports, signal_rows, cost, stab) -> dict (JSON-able; the card.json schema)

Sections (the keys of the dict): design, signal, lr, comparison, depth, cost, stability, ladder;
plus headline (verdict counts and one line per verdict), title, is_result, scale, files, notes.

Verdicts. Each comparison (the design against one baseline at 4 or at 16 layers, both with warmup,
each at its own tuned rate) reads two claims of the card (assess/plan.card_claims), decided by the
reports' rules with one Holm family over the card:
    better        "design - baseline < 0" reproduced
    worse         that claim not reproduced (the data say design - baseline > 0)
    equivalent    neither, and "|design - baseline| < 0.02" reproduced (TOST)
    inconclusive  otherwise
and no verdict at all where a row is not 0.3 nats below the bigram level (the card's regime did not
train it far enough for its difference to mean something) or at the smoke scale.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from ..report.stats import BELOW_BIGRAM, short_of_regime
from ..spec.rows import row_name
from .plan import DEPTHS, EQUIVALENCE, COLD, WARM, CardRequest



def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _claims(report: dict) -> dict[str, dict]:
    return {c["id"]: c for c in report.get("claims") or []}


def _row(report: dict, variant: str, depth: str, warmup: str) -> dict | None:
    name = row_name(variant, {"depth": depth, "warmup": warmup})
    return next((t for t in report.get("table") or [] if t["variant"] == name), None)


def _row_summary(row: dict | None) -> dict:
    if row is None:
        return {"name": None, "n": 0, "mean": None, "std": None, "values": [], "lr": None, "below_bigram": None, "diverged": 0}
    return {"name": row["variant"], "n": row["n"], "mean": row["best"]["mean"], "std": row["best"].get("std"),
            "values": list(row["best"].get("values") or []),
            "lr": (row.get("extra") or {}).get("lr (tuned)"),
            "below_bigram": row.get("below_bigram"), "diverged": row.get("diverged", 0)}


def _short_regime(rows: list[dict]) -> str | None:
    """Why a comparison has no verdict: a row not far enough below the bigram level (named, with how far
    it ended from that level: above it, when its mean loss is worse than a bigram model's)."""
    for r in rows:
        below, name = r.get("below_bigram"), r.get("name") or "a row"
        if below is None:
            return f"{name} has no completed run"
        if below < BELOW_BIGRAM:
            return short_of_regime(name, below)
    return None


def _unheld(claim: dict | None) -> str | None:
    """Why a claim has no verdict because a row's tuned rate did not hold on its comparison seeds
    (report/claims._unsettle), without the test's own reading; else None. It comes before the bigram
    rule: a row that trains on one seed in three ends above the bigram level because of its rate."""
    if not claim or not claim.get("unheld"):
        return None
    return (claim.get("reason") or "").split(": no verdict (the test alone says", 1)[0]


def _three_way(better: dict | None, same: dict | None) -> str:
    if better is None:
        return "not tested"
    if better["verdict"] == "reproduced":
        return "better"
    if better["verdict"] == "not reproduced":
        return "worse"
    if same is not None and same["verdict"] == "reproduced":
        return "equivalent"
    if better["verdict"].startswith("not tested"):
        return "not tested"
    return "inconclusive"


def _numbers(c: dict | None) -> dict:
    keys = ("estimate", "ci_low", "ci_high", "p_holm", "n", "reason", "verdict")
    return {k: (c or {}).get(k) for k in keys}


def comparison_section(req: CardRequest, report: dict, is_result: bool) -> list[dict]:
    claims, out = _claims(report), []
    for b in req.baselines:
        for depth in DEPTHS:
            rows = [_row(report, req.label, depth, WARM), _row(report, b, depth, WARM)]
            better, same = claims.get(f"better-than-{b}-{depth}"), claims.get(f"equivalent-to-{b}-{depth}")
            entry = {"baseline": b, "depth": int(depth[1:]), "design_row": _row_summary(rows[0]),
                     "baseline_row": _row_summary(rows[1]), **_numbers(better),
                     "equivalence": _numbers(same)}
            short = _short_regime([_row_summary(r) for r in rows])
            if not is_result:
                entry["verdict"], entry["why"] = "smoke: not a result", "the smoke scale states no verdicts"
            elif _unheld(better):
                entry["verdict"], entry["why"] = "no verdict", _unheld(better)
            elif short:
                entry["verdict"], entry["why"] = "no verdict", short
            else:
                entry["verdict"] = _three_way(better, same)
                entry["why"] = (better or {}).get("reason") if entry["verdict"] != "equivalent" else same["reason"]
            out.append(entry)
    return out


def depth_section(req: CardRequest, report: dict, is_result: bool) -> dict:
    """The design's and each baseline's rows at 4 / 16 layers with / without warmup, and the card's
    two readings of the design: does it improve with depth; does it need warmup at 16 layers."""
    claims = _claims(report)
    table = {v: {f"{depth}-{w}": _row_summary(_row(report, v, depth, w)) for depth in DEPTHS for w in (WARM, COLD)}
             for v in (req.label, *req.baselines)}
    deeper, needs, free = (claims.get(k) for k in ("improves-with-depth", "needs-warmup-L16", "warmup-free-L16"))
    if not is_result:
        depth_word = warmup_word = "smoke: not a result"
    else:
        depth_word = {"reproduced": "improves with depth (16 layers below 4)",
                      "not reproduced": "worse at 16 layers than at 4"}.get((deeper or {}).get("verdict"), "inconclusive")
        w = (needs or {}).get("verdict")
        if w == "reproduced":
            warmup_word = "needs warmup at 16 layers"
        elif w == "not reproduced":
            warmup_word = "better without warmup at 16 layers"
        elif (free or {}).get("verdict") == "reproduced":
            warmup_word = f"trains without warmup at 16 layers (within ±{EQUIVALENCE:g} nats of with it)"
        else:
            warmup_word = "inconclusive"
        mine = table[req.label]
        short = _unheld(deeper) or _short_regime([mine["L16-w100"], mine["L4-w100"]])
        if short:
            depth_word = f"no verdict: {short}"
        short = _unheld(needs) or _short_regime([mine["L16-w100"]])
        if short:
            warmup_word = f"no verdict: {short}"
    return {"rows": table, "depth": depth_word, "warmup": warmup_word,
            "claims": {"improves-with-depth": _numbers(deeper), "needs-warmup-L16": _numbers(needs),
                       "warmup-free-L16": _numbers(free)}}


NO_LOSS = ("diverged", "failed", "unfinished")  # the report's counts for a tuning cell without a loss


def lr_section(report: dict, unigram: float | None) -> dict:
    """Loss against learning rate for every row of every design (the tuning runs), and each design's
    sensitivity: Wortsman et al.'s S = mean over rates of min(L, cap) - min over rates, per row
    (cap: the unigram level), averaged over the design's rows."""
    from ..report.tuning import seed_sensitivity

    tuning = ((report.get("lr") or {}).get("tuning")) or {}
    out = {"axis": tuning.get("axis"), "values": tuning.get("values") or [], "rows": [], "sensitivity": {}}
    per_design: dict[str, list[float]] = {}
    for row in tuning.get("rows") or []:
        entries = row.get("values") or []
        curve = {float(e["value"]): e.get("mean") for e in entries}
        # why a rate has no loss: its tuning run diverged, failed or has not finished
        no_loss = {float(e["value"]): why for e in entries
                   if not _finite(e.get("mean")) and (why := next((k for k in NO_LOSS if e.get(k)), None))}
        out["rows"].append({"variant": row["variant"], "grid": row["grid"], "name": row["name"],
                            "curve": curve, "no_loss": no_loss, "chosen": row.get("chosen"), "edge": row.get("edge")})
        losses = [x if _finite(x) else math.inf for x in curve.values()]
        if losses and unigram is not None:
            per_design.setdefault(row["variant"], []).append(seed_sensitivity(losses, unigram))
    for design, values in per_design.items():
        out["sensitivity"][design] = {"mean": sum(values) / len(values), "rows": len(values)}
    out["cap"] = unigram
    return out


def headline(card: dict) -> dict:
    """The verdict counts and one line per verdict, the card's first screen."""
    lines, counts = [], {}
    for c in card["comparison"]:
        word = c["verdict"]
        counts[word] = counts.get(word, 0) + 1
        est = c.get("estimate")
        numbers = ""
        if _finite(est) and card["is_result"]:
            numbers = f": {est:+.3f} nats"
            if _finite(c.get("ci_low")) and _finite(c.get("ci_high")):
                numbers += f" [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]"
            if _finite(c.get("p_holm")):
                numbers += f", Holm p {c['p_holm']:.2g}"
        within = f" (within ±{EQUIVALENCE:g} nats)" if word == "equivalent" else ""
        why = f" ({c['why']})" if word == "no verdict" and c.get("why") else ""  # the numbers alone read as a result
        lines.append({"verdict": word, "text": f"vs {c['baseline']} at {c['depth']} layers{within}{numbers}{why}"})
    d = card["depth"]
    for word in ("depth", "warmup"):
        text = d[word]
        reason = text.removeprefix("no verdict: ")
        if reason != text and any(reason in ln["text"] for ln in lines):  # an unheld rate's long reason, once
            text = "no verdict, for the reason given above"
        lines.append({"verdict": word, "text": text})
    if card.get("ladder") and card["ladder"].get("trends"):
        for t in card["ladder"]["trends"]:
            lines.append({"verdict": "trend", "text": t})
    return {"counts": counts, "lines": lines}


def design_section(req: CardRequest, cost: dict) -> dict:
    from ..model.registry import get_design

    d = get_design(req.design)
    flags = {f.name: getattr(d, f.name) for f in dataclasses.fields(d)
             if isinstance(getattr(d, f.name), bool)}
    shallow = cost.get(DEPTHS[0]) or {}
    rows = shallow.get("rows") or {}
    mine, base = rows.get(req.label) or {}, rows.get(req.baselines[0]) or {}
    return {"name": req.design, "label": req.label, "formula": d.formula, "reference": d.reference,
            "stream": d.stream, "plugin": d.plugin, "plugin_version": d.plugin_version,
            "overrides": req.overrides, "capabilities": sorted(k for k, v in flags.items() if v),
            "params": mine.get("params"), "params_baseline": base.get("params"),
            "params_ratio": (mine.get("ratios") or {}).get("params"), "baseline": req.baselines[0]}


def ladder_part(report: dict | None) -> dict | None:
    if report is None:
        return None
    section = report.get("ladder") or {}
    trends = []
    for c in report.get("claims") or []:
        if c.get("kind") != "trend":
            continue
        est = c.get("estimate")
        num = f"{est:+.4f} nats per doubling of parameters" if _finite(est) else "no slope"
        if _finite(c.get("ci_low")) and _finite(c.get("ci_high")):
            num += f" [{c['ci_low']:+.4f}, {c['ci_high']:+.4f}]"
        word = (c.get("trend") or {}).get("label") or c.get("verdict")
        trends.append(f"trend of {c.get('claim') or c['id']}: {num} ({word})")
    return {"section": section, "claims": report.get("claims") or [], "trends": trends,
            "figures": [f for f in report.get("figures") or [] if f.get("file", "").startswith("ladder_")]}


def build_card(req: CardRequest, specs, reports: list[dict], signal: dict, cost: dict, stab: dict,
               folder, wall_s: float | None = None, results=None, own_inits: dict | None = None,
               retuned: dict | None = None) -> dict:
    """retuned: {"rows": {row name: why}, "seeds": {row name: its tuning seeds}} for the rows whose
    tuned rate did not hold on their comparison seeds and were tuned again (assess/run.py)."""
    from ..probe.plots import plot_all
    from ..spec.schema import NOT_A_RESULT, is_result_scale
    from .figure import FIGURE, draw_card_figure
    from .signal import signal_summary

    main = reports[0]
    is_result = is_result_scale(req.scale)
    reference = main.get("reference") or {}
    rows = signal["xiong"][0]  # the figures: the law's setting
    signal_figures = [{"title": f"At initialisation, Xiong et al.'s setting: {p.stem.replace('_', ' ')}",
                       "file": f"signal/{p.name}"} for p in plot_all(rows, Path(folder) / "signal")] if rows else []
    title = f"Design card: {req.label} ({req.scale} scale)"
    card = {
        "title": title if is_result else f"{title} — {NOT_A_RESULT}",
        "is_result": is_result, "scale": req.scale, "design_name": req.design, "label": req.label,
        "baselines": list(req.baselines), "seeds": list(specs[0].seeds),
        "reference": {k: reference.get(k) for k in ("unigram", "bigram")},
        "design": design_section(req, cost),
        "signal": {**signal_summary(signal, own_inits), "figures": signal_figures},
        "lr": {**lr_section(main, reference.get("unigram")), "retuned": retuned or {"rows": {}, "seeds": {}}},
        "comparison": comparison_section(req, main, is_result),
        "depth": depth_section(req, main, is_result),
        "cost": cost,
        "stability": stab,
        "ladder": ladder_part(reports[1] if len(reports) > 1 else None),
        "sweeps": [{"name": s.name, "report": f"sweeps/{s.name}/report.html",
                    "missing": len(r.get("missing") or [])} for s, r in zip(specs, reports)],
        "figures": [{"title": f["title"], "file": f"sweeps/{specs[0].name}/{f['file']}"}
                    for f in main.get("figures") or []],
        "claims": main.get("claims") or [],
        "wall_s": wall_s,
        "runs": {**{k: sum(r.count(k) for r in results or []) for k in ("completed", "diverged", "failed")},
                 "found": sum(r.skipped for r in results or [])},
    }
    depth_rows = card["depth"]["rows"]
    if draw_card_figure(depth_rows, {d: {k: r["values"] for k, r in rows.items()} for d, rows in depth_rows.items()},
                        reference.get("bigram"), Path(folder) / FIGURE):
        card["figures"].insert(0, {"title": "The comparison: every row of every design at its own tuned rate",
                                   "file": FIGURE})
    if card["ladder"]:
        card["ladder"]["figures"] = [{"title": f["title"], "file": f"sweeps/{specs[1].name}/{f['file']}"}
                                     for f in card["ladder"]["figures"]]
    card["headline"] = headline(card)
    return card
