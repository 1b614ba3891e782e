"""A sweep report as Markdown and as one self-contained HTML page, from a report dict.

Both renderers walk the same list of blocks (_blocks), so the two documents carry the same content.
The report dict (JSON-serializable; optional keys may be missing):
    title, is_result (False at the smoke scale: spec.schema.is_result_scale), spec {name, description,
    scale, baseline, seeds}, generated, collapse_rule,
    reference {unigram, bigram, method, train_tokens, val_tokens[, note]} | None, reference_error,
    table [{variant, n, n_planned, best {n, mean, std, ci_low, ci_high, values}, final {...}, ppl,
            diff, diff_pct, test {test, t, p, p_holm, df, hedges_g, note} | None, collapsed,
            diverged, failed, is_baseline, below_bigram, not_learned_beyond_bigram,
            extra {column: value}}],
    lr (tuning.lr_section) | None, claims [...] (claims.evaluate_claims),
    published [{variant, value, metric, source, setup}],
    runs [{id, variant, seed, status, best_val_loss, final_val_loss, collapsed,
           not_learned_beyond_bigram, error}],
    missing [{variant, seed, scale, reason}], notes [str], figures [{title, file}]
Number formats: losses 4 decimals, p 3 significant digits, Hedges' g 2 decimals, None as "—".
"""

from __future__ import annotations

import base64
import html
import math
import re
from html.parser import HTMLParser
from pathlib import Path

from ..fileio import write_json, write_text
from . import claims, ladder, tuning
from .stats import is_result

DASH = "—"
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
        "source", "track", "wbr"}
_MIME = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
         ".gif": "image/gif", ".webp": "image/webp"}
_EXTERNAL = re.compile(r"https?://", re.IGNORECASE)


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


# ---- content as blocks ---------------------------------------------------------------------------
# ("h1"|"h2"|"p", text) | ("table", headers, rows, align) | ("ul", items) | ("img", title, file)
def _main_table(report: dict) -> tuple:
    rows = report.get("table") or []
    extra_cols = list(dict.fromkeys(k for r in rows for k in (r.get("extra") or {})))
    headers = ["variant", "seeds (n/planned)", "best val loss (mean ± std)", "95% t-interval",
               "ppl", "below bigram", "Δ vs baseline", "test", "p (Holm)", "Hedges' g",
               "collapsed / diverged / failed"] + extra_cols
    result = is_result(report)
    body = []
    for r in rows:
        test = (r.get("test") or {}) if result else {}  # no p-values where nothing is a result
        name = str(r.get("variant", DASH)) + (" (baseline)" if r.get("is_baseline") else "")
        kind = {"paired": "paired t", "welch": "Welch t"}.get(test.get("test"), DASH)
        body.append([
            name, f"{_value(r.get('n'))}/{_value(r.get('n_planned'))}", _mean_std(r.get("best")),
            _interval(r.get("best"), r.get("n")), _ppl(r.get("ppl")), _below_bigram(r), _diff(r), kind,
            _p(test.get("p_holm")), _g(test.get("hedges_g")),
            " / ".join(str(r.get(k) or 0) for k in ("collapsed", "diverged", "failed")),
        ] + [_value((r.get("extra") or {}).get(c)) for c in extra_cols])
    return ("table", headers, body, "lrrrrrrlrrr" + "r" * len(extra_cols))


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


def _spec_line(report: dict) -> str:
    spec = report.get("spec") or {}
    parts = [f"Sweep {spec.get('name', DASH)}"]
    if spec.get("description"):
        parts[0] += f": {spec['description']}"
    for key in ("scale", "baseline"):
        if spec.get(key):
            parts.append(f"{key} {spec[key]}")
    if spec.get("seeds"):
        parts.append("seeds " + ", ".join(str(s) for s in spec["seeds"]))
    parts += spec.get("more_seeds") or []   # [[more_seeds]]: some rows' extra seeds
    if spec.get("question"):
        parts.append(f"question: {spec['question']}")
    return " · ".join(parts)


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


def _blocks(report: dict) -> list[tuple]:
    result = is_result(report)
    b: list[tuple] = [("h1", report.get("title") or "Sweep report")]
    if not result:
        b.append(("p", "smoke: not a result. The smoke scale is reserved for pipeline tests: this report "
                       "shows that the sweep runs end to end, and its numbers are no evidence for or "
                       "against anything, so it states no tests, p-values or verdicts."))
    b.append(("p", _spec_line(report)))
    if report.get("generated"):
        b.append(("p", f"Generated {report['generated']}."))
    b += tuning.lr_blocks(report)
    b += [("h2", "Results"), _main_table(report)]
    b.append(("p", "Collapse rule: " + (report.get("collapse_rule") or "not given.")))
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
    b += claims.claim_blocks(report)
    b += ladder.ladder_blocks(report)
    seeds = _seed_table(report)
    if seeds:
        b += [("h2", "Best val loss per seed"), seeds]
    published = report.get("published") or []
    if published:
        b += [("h2", "Published numbers"),
              ("p", ("These numbers come from the papers named in the source column, not from "
                     "this sweep; their setups differ from ours, so they are context, not a "
                     "comparison.")),
              ("table", ["variant", "value", "metric", "source", "setup"],
               [[str(p.get("variant", DASH)), _value(p.get("value")), _value(p.get("metric")),
                 _value(p.get("source")), _value(p.get("setup"))] for p in published], "lrlll")]
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
    if report.get("notes"):
        b += [("h2", "Notes")] + [("p", str(n)) for n in report["notes"]]
    if report.get("figures"):
        b.append(("h2", "Figures"))
        b += [("img", str(f.get("title") or f.get("file")), str(f.get("file"))) for f in report["figures"]]
    return b


# ---- Markdown ------------------------------------------------------------------------------------
def _md_cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render_markdown(report: dict) -> str:
    out: list[str] = []
    for block in _blocks(report):
        kind = block[0]
        if kind == "h1":
            out.append(f"# {block[1]}")
        elif kind == "h2":
            out.append(f"## {block[1]}")
        elif kind == "p":
            out.append(str(block[1]))
        elif kind == "ul":
            out.append("\n".join(f"- {_md_cell(i)}" for i in block[1]))
        elif kind == "table":
            _, headers, rows, align = block
            lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |",
                     "|" + "|".join(":---" if a == "l" else "---:" for a in align) + "|"]
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
            out.append("\n".join(lines))
        elif kind == "img":
            title = block[1].replace("[", "(").replace("]", ")")
            out.append(f"![{title}]({block[2].replace(' ', '%20')})")
    return "\n\n".join(out) + "\n"


# ---- HTML ----------------------------------------------------------------------------------------
_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:1.8em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:1em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.3em .6em}th{background:#f3f3f3}
td.r{text-align:right;font-variant-numeric:tabular-nums}
figure{margin:1.5em 0}img{max-width:100%;height:auto}figcaption{color:#555;font-size:.9em}
.missing{color:#a00;border:1px dashed #a00;padding:.5em}
"""


def _img_html(title: str, file: str, folder: Path) -> str:
    e = html.escape
    path = Path(folder) / file
    try:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
    except OSError:
        return f'<p class="missing">Figure “{e(title)}” is missing: {e(file)} could not be read.</p>'
    mime = _MIME.get(path.suffix.lower(), "application/octet-stream")
    return (f'<figure><img src="data:{mime};base64,{data}" alt="{e(title, quote=True)}">'
            f"<figcaption>{e(title)}</figcaption></figure>")


def _table_html(headers, rows, align) -> str:
    e = html.escape
    head = "".join(f"<th>{e(str(h))}</th>" for h in headers)
    cls = {"l": "<td>", "r": '<td class="r">'}
    body = "".join("<tr>" + "".join(f"{cls[a]}{e(str(c))}</td>" for c, a in zip(row, align))
                   + "</tr>\n" for row in rows)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n</table>"


def render_html(report: dict, folder: Path) -> str:
    e = html.escape
    parts = []
    for block in _blocks(report):
        kind = block[0]
        if kind in ("h1", "h2", "p"):
            parts.append(f"<{kind}>{e(str(block[1]))}</{kind}>")
        elif kind == "ul":
            parts.append("<ul>" + "".join(f"<li>{e(str(i))}</li>" for i in block[1]) + "</ul>")
        elif kind == "table":
            parts.append(_table_html(*block[1:]))
        elif kind == "img":
            parts.append(_img_html(block[1], block[2], folder))
    title = e(str(report.get("title") or "Sweep report"))
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{title}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            + "\n".join(parts) + "\n</body>\n</html>\n")


# ---- structural check ----------------------------------------------------------------------------
class _Checker(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, tuple[int, int]]] = []
        self.problems: list[str] = []
        self._in_style = False

    def _attrs(self, tag: str, attrs) -> None:
        line = self.getpos()[0]
        for name, value in attrs:
            if value and _EXTERNAL.search(value):
                self.problems.append(f"line {line}: <{tag} {name}=...> refers to an external URL")
        if tag == "img":
            src = dict(attrs).get("src") or ""
            if not src.startswith("data:"):
                self.problems.append(f"line {line}: <img> src is not a data: URI ({src[:60]!r})")

    def handle_starttag(self, tag, attrs):
        self._attrs(tag, attrs)
        if tag not in VOID:
            self.stack.append((tag, self.getpos()))
        self._in_style = tag == "style"

    def handle_startendtag(self, tag, attrs):
        self._attrs(tag, attrs)

    def handle_endtag(self, tag):
        self._in_style = False
        line = self.getpos()[0]
        if tag in VOID:
            return
        if self.stack and self.stack[-1][0] == tag:
            self.stack.pop()
            return
        if any(t == tag for t, _ in self.stack):
            while self.stack[-1][0] != tag:
                t, pos = self.stack.pop()
                self.problems.append(f"line {line}: </{tag}> closes <{t}> (line {pos[0]}) "
                                     "that was never closed (misnested)")
            self.stack.pop()
        else:
            self.problems.append(f"line {line}: </{tag}> has no matching open tag")

    def handle_data(self, data):
        if self._in_style and _EXTERNAL.search(data):
            self.problems.append(f"line {self.getpos()[0]}: the style sheet refers to an external URL")


def check_html(text: str) -> list[str]:
    """Problems of an HTML page: unbalanced or misnested tags (void elements excepted), <img>
    whose src is not a data: URI, and any http(s):// URL in an attribute or in a <style> sheet
    (plain text that mentions a URL is not a reference and is allowed). [] = fine."""
    checker = _Checker()
    checker.feed(text)
    checker.close()
    checker.problems += [f"<{t}> opened at line {pos[0]} is never closed" for t, pos in checker.stack]
    return checker.problems


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
    problems = check_html(page)
    if problems:
        raise RuntimeError("reslab bug: the HTML report fails its structural check: "
                           + "; ".join(problems[:10]))
    paths = {"md": folder / "report.md", "html": folder / "report.html", "json": folder / "report.json"}
    write_text(paths["md"], md)
    write_text(paths["html"], page)
    write_json(paths["json"], _jsonable(report))
    return paths
