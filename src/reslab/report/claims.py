"""The report's verdict on each published claim of a study ([[claims]]).

A study spec lists the claims of its papers as checkable statements about the runs it plans, so
that the report says, claim by claim and with the numbers, whether this sweep reproduced it.

The format of a [[claims]] table, the typed Claim it reads into and its checks against the spec
are reslab.spec.claims's; this module decides each claim on a report's rows.

Decision rules (RULES_TEXT says them in the report):
  * difference, level: per-unit values (unit = seed, and the pooled axes' values). Two cells that
    ran the same units are paired over the units both completed (d_u = a_u - b_u); cells whose
    units differ get Welch's t (Welch-Satterthwaite df); a level claim is a one-sample t on
    a_u - reference. Two one-sided t-tests of the mean D against the threshold c:
        p_for     H0: the claim is false (for "<": D >= c),  small when the data support it
        p_against H0: the claim is true  (for "<": D <= c),  small when the data contradict it
    p = the smaller, with its direction. Holm-Bonferroni over every claim of the report that has
    a p. Reproduced when the direction is "for" and p_holm < 0.05, not reproduced when "against"
    and p_holm < 0.05, inconclusive otherwise. With zero variance (n >= 3) there is no t: the
    point estimate decides, there is no p, and the reason says so. A difference claim with op
    "within" (|D| < c, equivalence) is two one-sided tests of D against -c and c (TOST): p_for is
    the larger of their p-values, p_against the smaller of the opposite two.
  * fewer than 3 pairs (or values on a side): no p, inconclusive, reason "n = 2 < 3".
  * diverged runs are never averaged: units with a diverged run are dropped from difference,
    level and spread claims and counted in the reason; divergence counts only for fails / trains.
  * spread: 1 - 0.05/m simultaneous t-intervals (Bonferroni) for all m pairwise differences of the
    cells' means, paired where two cells ran the same units. They bound the spread
    max|mu_i - mu_j| with 95% simultaneous coverage between L = max over pairs of the interval's
    distance from 0 and U = max over pairs of its largest |end|. "spread < c" is reproduced when
    U < c (every interval inside (-c, c)), not reproduced when L > c (some interval wholly outside
    [-c, c]), inconclusive otherwise; ">" the mirror image. A spread claim has no p and is not part
    of Holm: its verdict already controls its own pairs.
  * fails / trains: a run fails when it diverged (or its metric is not finite), or its metric is
    at or above the bigram level. Reproduced when all of n >= 3 judged runs fail (trains: all
    train), not reproduced when none do (trains: all fail), inconclusive otherwise; no p. The
    interval is the exact (Clopper-Pearson) 95% interval of the failing fraction.
  * a cell without any run at this scale: verdict "not tested at this scale".
  * a claim on a row whose tuned value did not hold on its comparison seeds (report/tuning.py,
    check_held: its tuning seeds learned beyond bigram at the chosen rate, most comparison runs did
    not) is inconclusive whatever its test says: the row is not its design at its own best rate.
    The test's numbers stay in the result (and its p in the Holm family); the reason says both.
  * likewise inconclusive: a trend over a rung whose row ends less than 0.3 nats below the bigram
    level, and a difference or spread claim whose rows ALL end there (a difference between two
    collapsed designs means nothing; one between a design that trained and one that did not is the
    evidence of claims such as "Post-LN fails deep without warmup", so it stands).
"""

from __future__ import annotations

import itertools
import math

import scipy.stats

from ..spec.claims import Cell, Claim, parse_claim
from ..spec.ladder import RUNG_AXIS
from ..spec.rows import cell_text, complete_cells, is_number, resolve_key, same_value
from . import stats
from .ladder import decide_trend, trend_fields

__all__ = ["RULES_TEXT", "claim_blocks", "evaluate_claims"]

ALPHA = 0.05
MIN_N = 3  # below this a t quantile has at most 1 degree of freedom: no test, no verdict
VERDICTS = ("reproduced", "not reproduced", "inconclusive", "not tested at this scale")
NOT_TESTED = "not tested at this scale"

RULES_TEXT = (
    "How the verdicts are decided. Difference and level claims: per-seed values (seed and any grid "
    "axis the claim leaves out), paired over the seeds both cells completed, Welch's t where the "
    "cells ran different seeds, a one-sample t against the reference level for a level claim. Two "
    "one-sided t-tests of the mean against the claim's threshold: one whose null hypothesis is that "
    "the claim is false, one whose null is that it is true; the smaller p is the claim's, with its "
    "direction, and the p-values of all claims of this report are corrected together with "
    "Holm-Bonferroni (an equivalence claim, |a - b| within ±c, takes the larger p of the tests against "
    "-c and +c). Reproduced: the data support the claim with Holm p < 0.05; not reproduced: "
    "they contradict it with Holm p < 0.05; inconclusive otherwise, and always with fewer than 3 "
    "seeds. With zero variance the point estimate decides and no p is given. Diverged runs are never "
    "averaged: their seeds are dropped from these claims and counted in the reason. Spread claims: "
    "simultaneous 95% t-intervals (Bonferroni) for every pairwise difference of the cells' means; "
    "'spread < c' is reproduced when every interval lies inside (-c, c), not reproduced when one lies "
    "wholly outside [-c, c]; these have no p and are not part of the Holm correction. Fails / trains "
    "claims: a run fails when it diverged or its loss is at or above the bigram level; reproduced "
    "when all of at least 3 seeds fail (trains: all train), not reproduced when none do; no p. A claim "
    "on a row whose tuned learning rate did not hold (its tuning seeds learned beyond bigram there, "
    "most of its comparison runs did not) is inconclusive whatever its test says, and so is a trend "
    "over a rung whose row ends less than 0.3 nats below the bigram level, and a difference or spread "
    "claim whose rows all end less than 0.3 nats below it."
)



# ---- evaluation ---------------------------------------------------------------------------------
def _status(run: dict, metric: str) -> str:
    """'ok' (completed with a finite value), 'diverged' (diverged, or a non-finite value), 'missing'."""
    if run.get("status") == "diverged":
        return "diverged"
    if run.get("status") != "completed":
        return "missing"
    v = run.get(metric)
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return "missing"
    return "ok" if math.isfinite(v) else "diverged"


def run_fails(run: dict, metric: str, bigram: float | None) -> bool | None:
    """The fails / trains rule for one run: True when it diverged (or its value is not finite) or its
    metric is at or above the bigram level, False when it trained; None when it has no result or
    there is no bigram level to judge it by."""
    s = _status(run, metric)
    if s == "diverged":
        return True
    if s == "missing" or bigram is None:
        return None
    return float(run[metric]) >= bigram


def _select(cell: Cell, rows: list[dict]) -> tuple[dict, str | None]:
    """The cell's axes resolved to the report rows' grid keys, or why they cannot be."""
    axes = list(dict.fromkeys(k for r in rows for k in (r.get("grid") or {})))
    named = {}
    for key, value in cell.axes.items():
        hit = resolve_key(key, axes)
        if len(hit) != 1:
            return {}, (f"grid axis {key!r} is not in this report" if not hit
                        else f"grid axis {key!r} is ambiguous ({', '.join(hit)})")
        named[hit[0]] = value
    return named, None


def _units(cell_variant: str, named: dict, rows: list[dict]) -> tuple[dict, list[str]]:
    """unit -> run for the runs of the rows matching the cell; a unit is (free axes' values, seed)."""
    out, names = {}, []
    for r in rows:
        grid = r.get("grid") or {}
        if r.get("variant") != cell_variant:
            continue
        if not all(a in grid and same_value(grid[a], v) for a, v in named.items()):
            continue
        names.append(str(r.get("row", cell_variant)))
        free = tuple(sorted((k, str(v)) for k, v in grid.items() if k not in named))
        for run in r.get("runs") or []:
            out[(free, run.get("seed"))] = run
    return out, names


def _values(units: dict, metric: str) -> tuple[dict, int, int]:
    """unit -> value of the completed runs; counts of diverged and of missing runs."""
    vals, div, miss = {}, 0, 0
    for u, run in units.items():
        s = _status(run, metric)
        if s == "ok":
            vals[u] = float(run[metric])
        elif s == "diverged":
            div += 1
        else:
            miss += 1
    return vals, div, miss


def _pair(ua: dict, ub: dict, metric: str) -> dict:
    """Two cells' values: paired over the units both completed when they ran the same units, else
    each side's own completed values (Welch). Counts what was dropped and why."""
    if set(ua) == set(ub):
        d, div, miss = [], 0, 0
        for u in sorted(ua, key=str):
            sa, sb = _status(ua[u], metric), _status(ub[u], metric)
            if sa == sb == "ok":
                d.append(float(ua[u][metric]) - float(ub[u][metric]))
            elif "diverged" in (sa, sb):
                div += 1
            else:
                miss += 1
        return {"paired": True, "d": d, "n": len(d), "diverged": div, "missing": miss}
    va, da, ma = _values(ua, metric)
    vb, db, mb = _values(ub, metric)
    return {"paired": False, "a": list(va.values()), "b": list(vb.values()),
            "n": min(len(va), len(vb)), "na": len(va), "nb": len(vb), "diverged": da + db, "missing": ma + mb}


def _estimate(p: dict, level: float = 0.95) -> dict:
    """Mean difference, its standard error, df and its t-interval (paired / one-sample or Welch).
    Needs n >= 2 values on each side."""
    if p["paired"]:
        s = stats.summarize(p["d"])
        n, mean, sd = s["n"], s["mean"], s["std"]
        se = sd / math.sqrt(n)
        lo, hi = stats.t_interval(mean, sd, n, level) if sd > 0 else (mean, mean)
        return {"est": mean, "se": se, "df": float(n - 1), "lo": lo, "hi": hi}
    sa, sb = stats.summarize(p["a"]), stats.summarize(p["b"])
    va, vb = sa["std"] ** 2 / sa["n"], sb["std"] ** 2 / sb["n"]
    est, se = sa["mean"] - sb["mean"], math.sqrt(va + vb)
    if se == 0.0:
        return {"est": est, "se": 0.0, "df": None, "lo": est, "hi": est}
    # Welch-Satterthwaite degrees of freedom
    df = (va + vb) ** 2 / (va ** 2 / (sa["n"] - 1) + vb ** 2 / (sb["n"] - 1))
    half = float(scipy.stats.t.ppf(1.0 - (1.0 - level) / 2.0, df)) * se
    return {"est": est, "se": se, "df": df, "lo": est - half, "hi": est + half}


def _f(x, signed: bool = True) -> str:
    return "—" if x is None else (f"{x:+.4f}" if signed else f"{x:.4f}")


def _pv(x) -> str:
    return "—" if x is None else f"{x:.3g}"


def _dropped(p: dict, unit: str) -> str:
    parts = []
    if p.get("diverged"):
        parts.append(f"{p['diverged']} {unit}{'s' if p['diverged'] != 1 else ''} with a diverged run dropped")
    if p.get("missing"):
        parts.append(f"{p['missing']} {unit}{'s' if p['missing'] != 1 else ''} with a run not completed dropped")
    return ("; " + "; ".join(parts)) if parts else ""


def _result(c: dict, **kw) -> dict:
    """A verdict with every field, from a claim's header (Claim.header) and what is known."""
    out = {"id": c["id"], "statement": c["statement"], "source": c["source"],
           "kind": c["kind"], "metric": c["metric"], "claim": None, "estimate": None,
           "ci_low": None, "ci_high": None, "test": None, "n": None, "t": None, "df": None, "p": None,
           "p_for": None, "p_against": None, "direction": None, "p_holm": None,
           "verdict": "inconclusive", "reason": "", "rows": []}
    out.update(kw)
    return out


def _rule(op: str, c: float) -> str:
    """The tested relation as text: "< 0.15", "> 0", or "within ±0.02" (|D| < c)."""
    return f"within ±{c:g}" if op == "within" else f"{op} {c:g}"


def _one_sided(est: float, se: float, df: float, op: str, c: float) -> tuple[float, float]:
    """(p_for, p_against) of the claim "D op c" from the t distribution of the mean difference D.

    "<" and ">": the two one-sided tests of D against c. For "<" the null "the claim is false" is
    D >= c, which small t = (D - c) / se rejects: p_for = P(T <= t), p_against = P(T >= t).
    "within" (equivalence, |D| < c): the claim holds when both D > -c and D < c, so p_for is the
    larger of those two one-sided p-values (TOST, Schuirmann 1987); it fails when D < -c or D > c,
    so p_against is the smaller of those two.
    """
    def below(x):  # P(T <= (D - x) / se)
        return float(scipy.stats.t.cdf((est - x) / se, df))

    def above(x):
        return float(scipy.stats.t.sf((est - x) / se, df))
    if op == "<":
        return below(c), above(c)
    if op == ">":
        return above(c), below(c)
    return max(above(-c), below(c)), min(below(-c), above(c))


def _t_claim(claim: Claim, expr: str, p: dict, test: str, unit: str, rows: list) -> dict:
    """A difference or level claim from its values: the two one-sided t-tests, or why there are none.
    A tested claim's verdict waits for its Holm p (_decide_t); the others are decided here."""
    op, c = claim.op, float(claim.threshold)
    shown = f"|{expr}| < {c:g}" if op == "within" else f"{expr} {op} {c:g}"
    base = _result(claim.header(), claim=shown, test=test, n=p["n"], rows=rows)
    dropped = _dropped(p, unit)
    if p["n"] < MIN_N:
        base["reason"] = (f"n = {p['n']} < {MIN_N}: no test and no verdict from fewer than {MIN_N} "
                          f"{unit}s" + dropped)
        if p["n"] >= 1:
            base["estimate"] = (math.fsum(p["d"]) / len(p["d"]) if p["paired"]
                                else math.fsum(p["a"]) / len(p["a"]) - math.fsum(p["b"]) / len(p["b"]))
        return base
    e = _estimate(p)
    base.update(estimate=e["est"], ci_low=e["lo"], ci_high=e["hi"])
    if e["se"] == 0.0:
        holds = {"<": e["est"] < c, ">": e["est"] > c, "within": abs(e["est"]) < c}[op]
        base["verdict"] = "reproduced" if holds else "not reproduced"
        base["reason"] = (f"{expr} = {_f(e['est'])} with zero variance over {p['n']} {unit}s, so no t-test: "
                          f"decided by the point estimate, which {'is' if holds else 'is not'} {_rule(op, c)}"
                          + dropped)
        return base
    p_for, p_against = _one_sided(e["est"], e["se"], e["df"], op, c)
    t = (e["est"] - c) / e["se"] if op != "within" else e["est"] / e["se"]
    base.update(t=t, df=e["df"], p_for=p_for, p_against=p_against, p=min(p_for, p_against),
                direction="for" if p_for <= p_against else "against",
                _pending=(expr, _rule(op, c), unit, dropped))
    return base


def _decide_t(r: dict) -> None:
    """Verdict and reason of a tested difference / level claim, once its Holm p is known."""
    expr, rule, unit, dropped = r.pop("_pending")
    ph = r["p_holm"]
    head = (f"{expr} = {_f(r['estimate'])} ({r['test']} over {r['n']} {unit}s, t = {r['t']:.3g}, "
            f"df = {r['df']:.3g})")
    if ph < ALPHA:
        r["verdict"] = "reproduced" if r["direction"] == "for" else "not reproduced"
        verb = "support" if r["direction"] == "for" else "contradict"
        r["reason"] = f"{head}: the data {verb} {rule} with p = {_pv(r['p'])}, Holm p = {_pv(ph)} < {ALPHA}"
    else:
        r["verdict"] = "inconclusive"
        side = "supporting" if r["direction"] == "for" else "contradicting"
        r["reason"] = (f"{head}: the smaller one-sided p ({side} {rule}) is {_pv(r['p'])}, "
                       f"Holm p = {_pv(ph)} >= {ALPHA}")
    r["reason"] += dropped


def _spread(claim: Claim, cells: list[tuple[str, dict]], rows: list) -> dict:
    op, c = claim.op, float(claim.threshold)
    names = [name for name, _ in cells]
    base = _result(claim.header(), claim=f"spread({', '.join(names)}) {op} {c:g}", rows=rows)
    metric = claim.metric
    means = []
    for _, units in cells:
        vals = list(_values(units, metric)[0].values())
        means.append(math.fsum(vals) / len(vals) if vals else None)
    if all(m is not None for m in means):
        base["estimate"] = max(means) - min(means)
    pairs = list(itertools.combinations(range(len(cells)), 2))
    m = len(pairs)
    level = 1.0 - ALPHA / m  # Bonferroni within the claim: simultaneous 95% over its m pairs
    base["test"] = f"pairwise t-intervals, Bonferroni over {m} pair{'s' if m != 1 else ''}"
    results = [_pair(cells[i][1], cells[j][1], metric) for i, j in pairs]
    n = min(p["n"] for p in results)
    base["n"] = n
    diverged = sum(_values(units, metric)[1] for _, units in cells)
    note = f"; {diverged} diverged run{'s' if diverged != 1 else ''} left out (never averaged)" if diverged else ""
    if n < MIN_N:
        i, j = next(ij for ij, p in zip(pairs, results) if p["n"] == n)
        base["reason"] = (f"n = {n} < {MIN_N} ({names[i]} vs {names[j]}): no intervals and no verdict from "
                          f"fewer than {MIN_N} seeds" + note)
        return base
    ivs = [_estimate(p, level) for p in results]
    lower = max(max(e["lo"], -e["hi"], 0.0) for e in ivs)  # each interval's distance from 0
    upper = max(max(abs(e["lo"]), abs(e["hi"])) for e in ivs)
    base.update(ci_low=lower, ci_high=upper)
    if op == "<":
        verdict = "reproduced" if upper < c else "not reproduced" if lower > c else "inconclusive"
    else:
        verdict = "reproduced" if lower > c else "not reproduced" if upper < c else "inconclusive"
    rule = {"reproduced" if op == "<" else "not reproduced":
            f"every pair's interval lies inside (-{c:g}, {c:g})",
            "not reproduced" if op == "<" else "reproduced":
            f"some pair's interval lies wholly outside [-{c:g}, {c:g}]",
            "inconclusive": f"no pair's interval lies wholly outside [-{c:g}, {c:g}], but not all lie inside"}
    base["verdict"] = verdict
    base["reason"] = (f"spread (max - min of {len(cells)} means) = {_f(base['estimate'], False)}; the "
                      f"simultaneous 95% bounds on it are [{lower:.4f}, {upper:.4f}] ({base['test']}): "
                      f"{rule[verdict]}; spread claims have no p and are not in the Holm correction" + note)
    return base


def _trend(claim: Claim, expr: str, ua: dict, ub: dict, rows: list, ladder: dict | None) -> dict:
    """A trend claim: each rung's per-seed differences (paired over the units both cells completed
    there), then report/ladder.py's slope and tests."""
    if not ladder or not ladder.get("sizes"):
        return _result(claim.header(), verdict=NOT_TESTED, rows=rows,
                       reason="no ladder at this scale: a trend needs the rungs' sizes")
    sizes = ladder["sizes"]
    sides: dict = {}  # rung -> (a's units, b's units), a unit = (the other free axes, seed)
    for i, units in enumerate((ua, ub)):
        for (free, seed), run in units.items():
            rung = dict(free).get(RUNG_AXIS)
            rest = tuple(kv for kv in free if kv[0] != RUNG_AXIS)
            sides.setdefault(rung, ({}, {}))[i][(rest, seed)] = run
    effects, diverged, missing = {}, 0, 0
    for rung in sizes:
        a, b = sides.get(rung, ({}, {}))
        common = set(a) & set(b)
        missing += len(set(a) ^ set(b))
        p = _pair({u: a[u] for u in common}, {u: b[u] for u in common}, claim.metric)
        effects[rung] = p["d"]
        diverged, missing = diverged + p["diverged"], missing + p["missing"]
    dropped = _dropped({"diverged": diverged, "missing": missing}, "pair")
    return _result(claim.header(), rows=rows,
                   **trend_fields(claim, expr, effects, sizes, ladder.get("exponent", 0.0), dropped))


def _fails(claim: Claim, name: str, units: dict, reference: dict | None, rows: list) -> dict:
    kind, metric = claim.kind, claim.metric
    bigram = (reference or {}).get("bigram")
    bigram = float(bigram) if is_number(bigram) and math.isfinite(bigram) else None
    failed = trained = unjudged = missing = 0
    for run in units.values():
        fails = run_fails(run, metric, bigram)
        if fails is None and _status(run, metric) == "missing":
            missing += 1
        elif fails is None:
            unjudged += 1
        elif fails:
            failed += 1
        else:
            trained += 1
    n = failed + trained
    base = _result(claim.header(), claim=f"{name} {kind}", test="count of failed runs", n=n, rows=rows,
                   failed=failed)
    extra = "".join([f"; {missing} run(s) not completed, not counted" if missing else "",
                     f"; {unjudged} completed run(s) not judged: this report has no bigram level"
                     if unjudged else ""])
    if n:
        base["estimate"] = failed / n
        ci = scipy.stats.binomtest(failed, n).proportion_ci(0.95, method="exact")
        base.update(ci_low=float(ci.low), ci_high=float(ci.high))
    rule = f"a run fails when it diverged or its {metric} is at or above the bigram level"
    if bigram is not None:
        rule += f" ({bigram:.4f})"
    if n < MIN_N:
        base["reason"] = f"n = {n} < {MIN_N}: no verdict from fewer than {MIN_N} runs ({failed} failed){extra}"
        return base
    want_fail = kind == "fails"
    if failed == n:
        base["verdict"] = "reproduced" if want_fail else "not reproduced"
    elif failed == 0:
        base["verdict"] = "not reproduced" if want_fail else "reproduced"
    base["reason"] = f"{failed} of {n} runs failed ({rule})" + (
        "" if base["verdict"] != "inconclusive" else ": neither all nor none") + extra
    return base


def evaluate_claims(claims: list[dict], cells: list[dict], reference: dict | None, scale: str,
                    unheld: dict[str, str] | None = None, ladder: dict | None = None,
                    shallow: dict[str, str] | None = None) -> list[dict]:
    """A verdict for each claim that applies at `scale`, in the claims' order.

    cells: one per report row, {"variant", "grid" {axis: value or point name}, "row", "runs"
    [{"seed", "status", "best_val_loss", "final_val_loss"}]}; reference: {"unigram", "bigram", ...}
    levels in nats, or None. Each result: id, statement, source, kind, metric, claim (the tested
    expression), estimate, ci_low / ci_high (95%), test, n, p (raw: the smaller one-sided p),
    p_for, p_against, direction, p_holm, verdict (VERDICTS), reason (the rule that decided, with
    its numbers), rows (the report rows of each cell). The rules are in this module's docstring;
    Holm's correction runs over every returned claim that has a p. A claim that is malformed is
    returned as inconclusive with the problem as its reason, never raised. unheld: {row name: why}
    for rows whose tuned value did not hold (report/tuning.py check_held); a claim on one of them
    is inconclusive, with the test's own verdict kept in its reason. ladder: {"sizes": {rung: N},
    "exponent"} at this scale, for trend claims (report/ladder.py); None without a ladder.
    shallow: {row name: why} for rows that end less than 0.3 nats below the bigram level; a trend
    over a rung with such a row is inconclusive (its slope would lean on a rung whose difference
    means little), and so is a difference or spread claim all of whose rows are such rows, with the
    test's own verdict kept in its reason.
    """
    rows = list(cells or [])
    out: list[dict] = []
    for i, raw in enumerate(claims or []):
        errors: list[str] = []
        claim = parse_claim(raw, f"claims[{i}]", errors)
        if claim is None or not claim.valid:
            scales = raw.get("scales") if isinstance(raw, dict) else None
            if isinstance(scales, list) and scale not in scales:
                continue
            get = raw.get if isinstance(raw, dict) else (lambda k, d=None: d)
            out.append(_result({"id": get("id", f"claims[{i}]"), "statement": get("statement", ""),
                                "source": get("source", ""), "kind": get("kind"),
                                "metric": get("metric", "best_val_loss")},
                               reason=f"the claim is malformed: {errors[0]}"))
            continue
        if claim.scales is not None and scale not in claim.scales:
            continue
        out.append(_evaluate_one(claim, rows, reference, ladder))
    tested = {str(k): r["p"] for k, r in enumerate(out) if r.get("p") is not None}
    for k, ph in stats.holm(tested).items():
        out[int(k)]["p_holm"] = ph
        (decide_trend if "_pending_trend" in out[int(k)] else _decide_t)(out[int(k)])
    for r in out:
        _unsettle(r, unheld or {})
        if r.get("kind") == "trend" or (r.get("kind") in ("difference", "spread")
                                        and _all_named(r, shallow or {})):
            _unsettle(r, shallow or {}, key="shallow")
    return out


def _all_named(r: dict, rows: dict[str, str]) -> bool:
    """Every row the claim compares is in `rows`. A difference between rows that none trained 0.3 nats
    below the bigram level (two collapsed designs, say) says nothing; one between a row that trained and
    one that did not is the claim's evidence (a design that fails where the other trains)."""
    names = [n for cell in r.get("rows") or [] for n in cell]
    return bool(names) and all(n in rows for n in names)


def _unsettle(r: dict, unheld: dict[str, str], key: str = "unheld") -> None:
    """Inconclusive when a row of the claim is not its design at its own best rate (key "unheld"),
    or a row ended too close to the bigram level to be compared (key "shallow": a trend's rung, or
    every row of a difference or spread claim; evaluate_claims decides which)."""
    names = [n for cell in r.get("rows") or [] for n in cell if n in unheld]
    if not names or r.get("verdict") == NOT_TESTED or r.get("unheld"):
        return
    test_says = r.get("verdict")
    r["verdict"], r[key] = "inconclusive", names
    r["reason"] = (f"{'; '.join(unheld[n] for n in names)}: no verdict (the test alone says "
                   f"{test_says}: {r.get('reason')})")


def _evaluate_one(claim: Claim, rows: list[dict], reference: dict | None, ladder: dict | None = None) -> dict:
    selected, problems = [], []
    for cell in claim.cells:
        named, problem = _select(cell, rows)
        if problem:
            problems.append(problem)
        selected.append(named)
    if problems:
        return _result(claim.header(), verdict=NOT_TESTED, reason=f"{problems[0]}: the claim cannot be tested here")
    completed, problem = complete_cells(selected)
    if problem:
        return _result(claim.header(), reason=f"the claim is malformed: {problem}")
    texts = [cell_text(cell.variant, named) for cell, named in zip(claim.cells, completed)]
    units, row_names = [], []
    for cell, named in zip(claim.cells, completed):
        u, names = _units(cell.variant, named, rows)
        units.append(u)
        row_names.append(names)
    empty = [t for t, u in zip(texts, units) if not u]
    if empty:
        return _result(claim.header(), verdict=NOT_TESTED, rows=row_names,
                       reason=f"no run of {', '.join(empty)} at this scale")
    kind, metric = claim.kind, claim.metric
    if kind == "trend":
        return _trend(claim, f"{texts[0]} - {texts[1]}", units[0], units[1], row_names, ladder)
    if kind == "difference":
        p = _pair(units[0], units[1], metric)
        if p["paired"]:
            test, unit = "paired t", "seed pair"
        else:
            test, unit = f"Welch t ({p['na']} vs {p['nb']} seeds)", "seed"
        return _t_claim(claim, f"{texts[0]} - {texts[1]}", p, test, unit, row_names)
    if kind == "level":
        ref = claim.reference
        if isinstance(ref, str):
            level = (reference or {}).get(ref)
            if not is_number(level) or not math.isfinite(level):
                return _result(claim.header(), claim=f"{texts[0]} - {ref} {claim.op} {claim.threshold:g}",
                               rows=row_names, reason=f"this report has no {ref} level: the claim cannot be judged")
            label = f"{ref} ({float(level):.4f})"
        else:
            level, label = float(ref), f"{float(ref):g}"
        vals, div, miss = _values(units[0], metric)
        d = [v - float(level) for v in vals.values()]
        p = {"paired": True, "d": d, "n": len(d), "diverged": div, "missing": miss}
        return _t_claim(claim, f"{texts[0]} - {label}", p, "one-sample t", "seed", row_names)
    if kind == "spread":
        return _spread(claim, list(zip(texts, units)), row_names)
    return _fails(claim, texts[0], units[0], reference, row_names)


# ---- report blocks -------------------------------------------------------------------------------
def interval_text(r: dict) -> str:
    lo, hi = r.get("ci_low"), r.get("ci_high")
    if lo is None or hi is None:
        return "—"
    if r.get("kind") in ("fails", "trains"):
        return f"[{lo:.2f}, {hi:.2f}] failing"
    if r.get("kind") == "spread":
        return f"[{lo:.4f}, {hi:.4f}] (simultaneous)"
    return f"[{lo:+.4f}, {hi:+.4f}]"


def verdict_text(r: dict) -> str:
    """The verdict as tables show it: an inconclusive one says when a row's tuned rate did not hold."""
    verdict = str(r.get("verdict") or "—")
    return verdict + (" (a tuned rate did not hold)" if r.get("unheld") else
                      " (a rung ends less than 0.3 nats below bigram)" if r.get("shallow") else "")


def estimate_text(r: dict) -> str:
    est = r.get("estimate")
    if r.get("kind") in ("fails", "trains"):
        return "—" if not r.get("n") else f"{r.get('failed', 0)}/{r['n']} failed"
    if est is None:
        return "—"
    return f"{est:.4f}" if r.get("kind") == "spread" else f"{est:+.4f}"


def p_text(r: dict) -> str:
    if r.get("p_holm") is None:
        return "—"
    return f"{r['p_holm']:.3g} (raw {r['p']:.3g})"


def claim_blocks(report: dict) -> list[tuple]:
    """The report blocks of the claims' verdicts (render.py's block tuples): a heading, a table and
    the rules. A smoke-scale report gets one paragraph and no verdicts; no claims, no blocks."""
    claims = report.get("claims") or []
    if not claims:
        return []
    if not stats.is_result(report):
        return [("p", "smoke: not a result; no verdicts")]
    headers = ["claim", "statement", "source", "estimate", "95% interval", "test / n", "p (Holm)",
               "verdict", "reason"]
    body = []
    for r in claims:
        test = r.get("test") or "—"
        n = r.get("n")
        body.append([str(r.get("id", "—")), str(r.get("statement") or "—"), str(r.get("source") or "—"),
                     estimate_text(r), interval_text(r), test if n is None else f"{test}, n = {n}",
                     p_text(r), verdict_text(r), str(r.get("reason") or "—")])
    return [("h2", "Published claims and verdicts"), ("table", headers, body, "lllrrlrll"),
            ("p", RULES_TEXT)]
