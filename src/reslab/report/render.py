"""A sweep report as Markdown and as one self-contained HTML page, from a report dict.

_blocks turns the dict into page.py's blocks, in the order a reader needs them (the answer first:
docs/reports.md, "Layout: the answer first"); page.py lays the same blocks out as Markdown and as
HTML, so the two documents carry the same content in the same order.
The report dict (JSON-serializable; optional keys may be missing):
    title, is_result (False at the smoke scale: spec.schema.is_result_scale), spec {name, description,
    question, scale, baseline, seeds, more_seeds, exclude}, generated, collapse_rule,
    reference {unigram, bigram, method, train_tokens, val_tokens[, note]} | None, reference_error,
    table [{variant, n, n_planned, best {n, mean, std, ci_low, ci_high, values}, final {...}, ppl,
            diff, diff_pct, test {test, t, p, p_holm, df, hedges_g, note} | None, collapsed,
            diverged, failed, is_baseline, below_bigram, not_learned_beyond_bigram,
            extra {column: value}}],
    lr (tuning.lr_section) | None, claims [...] (claims.evaluate_claims),
    published [{variant, value, metric, source, setup}],
    runs [{id, variant, seed, status, best_val_loss, final_val_loss, collapsed,
           not_learned_beyond_bigram, error}],
    missing [{variant, seed, scale, reason}], notes [str], figures [{title, file}],
    main_figure (a file of figures, shown beside the headline; default: the first figure)
Number formats: losses 4 decimals, p, t and df 3 significant digits, Hedges' g 2 decimals, None as "—".
"""

from __future__ import annotations

import math
from pathlib import Path

from ..fileio import write_json, write_text
from . import claims, ladder, tuning
from .page import check_html, page_html, page_markdown, require_valid_html
from .stats import is_result

__all__ = ["check_html", "render_html", "render_markdown", "write_report"]

DASH = "—"


# ---- number formats ------------------------------------------------------------------------------
def _num(x) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def _loss(x) -> str:
    v = _num(x)
    return DASH if v is None else f"{v:.4f}"


def _p(x) -> str:
    v = _num(x)
    return DASH if v is None else f"{v:.3g}"


def _g(x) -> str:
    v = _num(x)
    return DASH if v is None else f"{v:.2f}"


def _value(x) -> str:
    """A free-form cell (extra columns, published values)."""
    if x is None:
        return DASH
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if not math.isfinite(x):
            return DASH
        return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"
    return str(x)


def _mean_std(s: dict | None) -> str:
    s = s or {}
    if _num(s.get("mean")) is None:
        return DASH
    std = _num(s.get("std"))
    return _loss(s["mean"]) if std is None else f"{_loss(s['mean'])} ± {std:.4f}"


def _interval(s: dict | None, n_row) -> str:
    s = s or {}
    n = s.get("n", n_row)
    if isinstance(n, int) and n < 3:
        return "n<3: no interval"
    if _num(s.get("ci_low")) is None or _num(s.get("ci_high")) is None:
        return DASH
    return f"[{_loss(s['ci_low'])}, {_loss(s['ci_high'])}]"


def _ppl(x) -> str:
    v = _num(x)
    return DASH if v is None else f"{v:.2f}"


NOT_BEYOND_BIGRAM = "not learned beyond bigram"


def _below_bigram(row: dict) -> str:
    v = _num(row.get("below_bigram"))
    if v is None:
        return DASH
    return f"{v:+.4f}" + (f" ({NOT_BEYOND_BIGRAM})" if row.get("not_learned_beyond_bigram") else "")


def _diff(row: dict) -> str:
    if row.get("is_baseline"):
        return "baseline"
    d, pct = _num(row.get("diff")), _num(row.get("diff_pct"))
    if d is None:
        return DASH
    return f"{d:+.4f}" + ("" if pct is None else f" ({pct:+.2f}%)")


# ---- content as blocks (page.py's kinds) ---------------------------------------------------------
def _tests(report: dict, row: dict) -> dict:
    return (row.get("test") or {}) if is_result(report) else {}  # no p-values where nothing is a result


def _row_name(row: dict) -> str:
    return str(row.get("variant", DASH)) + (" (baseline)" if row.get("is_baseline") else "")


def _main_table(report: dict) -> tuple:
    """The columns a reader compares rows by; the rest are in _more_columns (folded)."""
    headers = ["variant", "seeds (n/planned)", "best val loss (mean ± std)", "95% t-interval",
               "below bigram", "Δ vs baseline", "p (Holm)", "collapsed / diverged / failed"]
    body = [[_row_name(r), f"{_value(r.get('n'))}/{_value(r.get('n_planned'))}", _mean_std(r.get("best")),
             _interval(r.get("best"), r.get("n")), _below_bigram(r), _diff(r), _p(_tests(report, r).get("p_holm")),
             " / ".join(str(r.get(k) or 0) for k in ("collapsed", "diverged", "failed"))]
            for r in report.get("table") or []]
    return ("table", headers, body, "lrrrrrrr")


def _more_columns(report: dict) -> tuple:
    rows = report.get("table") or []
    extra_cols = list(dict.fromkeys(k for r in rows for k in (r.get("extra") or {})))
    headers = ["variant", "final val loss (mean ± std)", "ppl", "test", "t", "df", "p (raw)",
               "Hedges' g"] + extra_cols
    body = []
    for r in rows:
        test = _tests(report, r)
        kind = {"paired": "paired t", "welch": "Welch t"}.get(test.get("test"), DASH)
        body.append([_row_name(r), _mean_std(r.get("final")), _ppl(r.get("ppl")), kind, _p(test.get("t")),
                     _p(test.get("df")), _p(test.get("p")), _g(test.get("hedges_g"))]
                    + [_value((r.get("extra") or {}).get(c)) for c in extra_cols])
    summary = "More columns: final val loss, ppl, the test, t, df, raw p, Hedges' g" + (
        ", " + ", ".join(extra_cols) if extra_cols else "")
    return ("details", summary, [("table", headers, body, "lrrlrrrr" + "r" * len(extra_cols))])


def _seed_table(report: dict) -> tuple | None:
    """Each seed's best val loss, variants x seeds (from runs; from the table's values if no runs)."""
    runs = report.get("runs") or []
    variants = [r.get("variant") for r in report.get("table") or []]
    variants = list(dict.fromkeys(variants + [r.get("variant") for r in runs]))
    if runs:
        seeds = list(dict.fromkeys(list((report.get("spec") or {}).get("seeds") or [])
                                   + sorted({r.get("seed") for r in runs}, key=str)))
        cell = {}
        for r in runs:
            mark = {"diverged": " (diverged)", "failed": " (failed)"}.get(r.get("status"), "")
            mark += " (collapsed)" if r.get("collapsed") else ""
            mark += f" ({NOT_BEYOND_BIGRAM})" if r.get("not_learned_beyond_bigram") else ""
            cell[(r.get("variant"), r.get("seed"))] = _loss(r.get("best_val_loss")) + mark
        body = [[str(v)] + [cell.get((v, s), DASH) for s in seeds] for v in variants]
        return ("table", ["variant"] + [f"seed {s}" for s in seeds], body, "l" + "r" * len(seeds))
    body = [[str(r.get("variant"))] + [", ".join(_loss(x) for x in (r.get("best") or {}).get("values") or [])]
            for r in report.get("table") or []]
    return ("table", ["variant", "best val loss per seed"], body, "ll") if body else None


def _scale_line(report: dict) -> str:
    """The one line under the question: scale, baseline, seeds (and any rows' extra seeds)."""
    spec = report.get("spec") or {}
    parts = [f"{key} {spec[key]}" for key in ("scale", "baseline") if spec.get(key)]
    if spec.get("seeds"):
        parts.append("seeds " + ", ".join(str(s) for s in spec["seeds"]))
    parts += spec.get("more_seeds") or []   # [[more_seeds]]: some rows' extra seeds
    parts += spec.get("exclude") or []      # [[exclude]]: rows of the grid left out
    return " · ".join(parts) or f"Sweep {spec.get('name', DASH)}"


def _spec_line(report: dict) -> str:
    spec = report.get("spec") or {}
    return f"Sweep {spec.get('name', DASH)}" + (f": {spec['description']}" if spec.get("description") else "")


def _reference_text(report: dict) -> str | None:
    """The paragraph on the reference levels, or None for a report that predates them."""
    if "reference" not in report and "reference_error" not in report:
        return None
    ref = report.get("reference") or {}
    uni, bi = _num(ref.get("unigram")), _num(ref.get("bigram"))
    if uni is None or bi is None:
        why = report.get("reference_error") or "not computed"
        return (f"Reference levels: not available ({why}), so the 'below bigram' column is empty "
                "and no row is flagged.")
    text = (f"Reference levels: unigram {uni:.4f} nats, bigram {bi:.4f} nats: the "
            f"{ref.get('method') or 'validation loss of count models fitted on the training split'}. "
            "'below bigram' = bigram level − the row's mean best val loss (positive: the row learned "
            "more than one-token-context counts); a row or run at or above the bigram level is marked "
            f"'{NOT_BEYOND_BIGRAM}'.")
    return text + (f" Note: {ref['note']}." if ref.get("note") else "")


# ---- the headline --------------------------------------------------------------------------------
SMOKE_TEXT = ("The smoke scale is reserved for pipeline tests: this report shows that the sweep runs "
              "end to end, and its numbers are no evidence for or against anything, so it states no "
              "tests, p-values or verdicts.")


def verdict_counts(verdicts: list[dict]) -> str:
    """'3 reproduced · 1 not reproduced · 1 inconclusive': claims.VERDICTS' order, zeros left out."""
    found = [str(v.get("verdict") or DASH) for v in verdicts]
    order = list(dict.fromkeys(list(claims.VERDICTS) + found))
    return " · ".join(f"{found.count(v)} {v}" for v in order if found.count(v))


def claim_line(r: dict) -> tuple[str, str]:
    """(verdict, the rest) of a claim's one-line result: its id and checked expression (the
    statement where it has none), the estimate with its 95% interval, the Holm p."""
    text = f"{r.get('id', DASH)}: {r.get('claim') or r.get('statement') or DASH}"
    estimate = claims.estimate_text(r)
    if estimate != DASH:
        interval = claims.interval_text(r)
        text += f"; estimate {estimate}" + ("" if interval == DASH else f" {interval}")
    if _num(r.get("p_holm")) is not None:
        text += f", Holm p {_p(r['p_holm'])}"
    return claims.verdict_text(r), text


def _row_line(report: dict, r: dict) -> tuple[str, str]:
    """A row's one-line result where a report checks no claims: its loss and its test."""
    text = f"best val loss {_mean_std(r.get('best'))}"
    if not r.get("is_baseline"):
        text += f", Δ {_diff(r)}"
        p = _tests(report, r).get("p_holm")
        if _num(p) is not None:
            text += f", Holm p {_p(p)}"
    return _row_name(r), text


def main_figure(report: dict) -> dict | None:
    """The figure beside the headline: report["main_figure"] (a file) if it names one of the
    figures, else the first (the validation-loss curves, as build.py lists them)."""
    figures = report.get("figures") or []
    named = report.get("main_figure")
    return next((f for f in figures if f.get("file") == named), figures[0] if figures else None)


def _lead(report: dict) -> tuple:
    figure = main_figure(report)
    pair = (str(figure.get("title") or figure.get("file")), str(figure.get("file"))) if figure else None
    if not is_result(report):
        return ("lead", [SMOKE_TEXT], "smoke: not a result", pair)
    verdicts = report.get("claims") or []
    if verdicts:
        return ("lead", [claim_line(r) for r in verdicts], verdict_counts(verdicts), pair)
    rows = report.get("table") or []
    counts = "No published claims checked; each row against the baseline:" if rows else None
    return ("lead", [_row_line(report, r) for r in rows], counts, pair)


# ---- the page ------------------------------------------------------------------------------------
def _method_blocks(report: dict, rules: list[tuple]) -> list[tuple]:
    """How the numbers were made: the sweep, the reference levels, the columns, the tests' rules."""
    result = is_result(report)
    b: list[tuple] = [("h2", "Method"), ("p", _spec_line(report))]
    if report.get("generated"):
        b.append(("p", f"Generated {report['generated']}."))
    reference = _reference_text(report)
    if reference:
        b.append(("p", reference))
    b.append(("p", ("Best val loss = lowest validation loss of a run (nats/token); ppl = perplexity "
                    "(exp of the loss); Δ = variant mean − baseline mean"
                    + ("; p-values are two-sided and Holm-adjusted over the comparisons with the baseline."
                       if result else "."))))
    if result:
        test_notes = [f"{r.get('variant')}: {(r.get('test') or {}).get('note')}"
                      for r in report.get("table") or [] if (r.get("test") or {}).get("note")]
        if test_notes:
            b.append(("ul", test_notes))
    else:
        b.append(("p", "No test, p-value or Hedges' g is given (the columns show —): at the smoke scale "
                       "nothing is a result."))
    return b + rules


def _blocks(report: dict) -> list[tuple]:
    """The report's page, the answer first: title, question, scale; the headline beside the main
    figure; the results tables; the learning-rate and ladder sections; the other figures; then how
    it was made, published numbers, notes and what is missing."""
    spec = report.get("spec") or {}
    b: list[tuple] = [("h1", report.get("title") or "Sweep report")]
    if spec.get("question"):
        b.append(("p", str(spec["question"])))
    b += [("p", _scale_line(report)), _lead(report)]
    b += [("h2", "Results"), _main_table(report),
          ("p", "Collapse rule: " + (report.get("collapse_rule") or "not given.")), _more_columns(report)]
    verdicts = claims.claim_blocks(report)
    rules = [x for x in verdicts if x == ("p", claims.RULES_TEXT)]   # how verdicts are made: method
    b += [x for x in verdicts if x not in rules]
    seeds = _seed_table(report)
    if seeds:
        b += [("h2", "Best val loss per seed"), seeds]
    b += tuning.lr_blocks(report)
    b += ladder.ladder_blocks(report)
    lead = main_figure(report)
    rest = [f for f in report.get("figures") or [] if f is not lead]
    if rest:
        b.append(("h2", "Figures"))
        b += [("img", str(f.get("title") or f.get("file")), str(f.get("file"))) for f in rest]
    b += _method_blocks(report, rules)
    published = report.get("published") or []
    if published:
        b += [("h2", "Published numbers"),
              ("p", ("These numbers come from the papers named in the source column, not from "
                     "this sweep; their setups differ from ours, so they are context, not a "
                     "comparison.")),
              ("table", ["variant", "value", "metric", "source", "setup"],
               [[str(p.get("variant", DASH)), _value(p.get("value")), _value(p.get("metric")),
                 _value(p.get("source")), _value(p.get("setup"))] for p in published], "lrlll")]
    if report.get("notes"):
        b += [("h2", "Notes")] + [("p", str(n)) for n in report["notes"]]
    missing = report.get("missing") or []
    if missing:
        b += [("h2", "Missing runs"),
              ("p", (f"This sweep is not complete: {len(missing)} planned run(s) have no result "
                     "and are not in the statistics above.")),
              ("table", ["variant", "seed", "scale", "reason"],
               [[_value(m.get("variant")), _value(m.get("seed")), _value(m.get("scale")),
                 _value(m.get("reason"))] for m in missing], "lrll")]
    bad = [r for r in report.get("runs") or [] if r.get("status") in ("diverged", "failed") or r.get("error")]
    if bad:
        b += [("h2", "Diverged and failed runs"),
              ("table", ["run", "variant", "seed", "status", "error"],
               [[_value(r.get("id")), _value(r.get("variant")), _value(r.get("seed")),
                 _value(r.get("status")), _value(r.get("error"))] for r in bad], "llrll")]
    return b


def render_markdown(report: dict) -> str:
    return page_markdown(_blocks(report))


def render_html(report: dict, folder: Path) -> str:
    return page_html(report.get("title") or "Sweep report", _blocks(report), folder)


# ---- writing -------------------------------------------------------------------------------------
def _jsonable(x):
    """A copy safe for strict JSON: NaN / inf -> None, numpy scalars -> Python, paths -> str."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item") and callable(x.item) and not isinstance(x, (str, bytes)):
        try:
            x = x.item()
        except (TypeError, ValueError):
            pass
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, Path):
        return str(x)
    return x


def write_report(report: dict, folder: Path) -> dict[str, Path]:
    """Write report.md, report.html and report.json into `folder`, each atomically. The HTML is
    checked first; a problem is a bug in reslab and raises RuntimeError before anything is written."""
    folder = Path(folder)
    md, page = render_markdown(report), render_html(report, folder)
    require_valid_html(page)
    paths = {"md": folder / "report.md", "html": folder / "report.html", "json": folder / "report.json"}
    write_text(paths["md"], md)
    write_text(paths["html"], page)
    write_json(paths["json"], _jsonable(report))
    return paths
