"""The report's layout, the answer first: the order of its parts in Markdown and HTML, page.py's block
kinds (lead, details), and, in headless Chromium at 1400 x 900, that the verdict counts, every
claim's one-line result and the main figure lie within the first screen."""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from reslab.report import page, plots, render
from reslab.report.claims import evaluate_claims
from tests.test_integrations import chromium, chromium_or_skip

REFERENCE = {"unigram": 3.3473, "bigram": 2.4857, "method": "count models"}
SEEDS = [1337, 42, 123]
# best val loss per seed: full trains, attn-only a little behind, ffn-only and none at the unigram level
LOSSES = {"full": [1.97, 1.99, 1.98], "attn-only": [2.14, 2.13, 2.15], "ffn-only": [3.343, 3.344, 3.345],
          "attn-only-nanogpt": [2.11, 2.12, 2.13], "none": [3.35, 3.36, 3.355]}
CLAIMS = [
    {"id": "ffn-only-collapses", "statement": "ffn-only ends at the unigram level", "source": "s",
     "kind": "level", "a": "ffn-only", "reference": "unigram", "op": ">", "threshold": -0.1},
    {"id": "attn-only-trains", "statement": "attn-only trains", "source": "s",
     "kind": "difference", "a": "attn-only", "b": "ffn-only", "op": "<", "threshold": -1.0},
    {"id": "attn-only-near-full", "statement": "attn-only costs little", "source": "s",
     "kind": "difference", "a": "attn-only", "b": "full", "op": "<", "threshold": 0.16},
    {"id": "nanogpt-collapses", "statement": "attn-only collapses under nanoGPT's conventions", "source": "s",
     "kind": "level", "a": "attn-only-nanogpt", "reference": "unigram", "op": ">", "threshold": -0.1},
    {"id": "none-fails", "statement": "without skips nothing trains", "source": "s", "kind": "fails", "a": "none"},
]


def _summary(values: list[float]) -> dict:
    n = len(values)
    mean = sum(values) / n
    std = (sum((x - mean) ** 2 for x in values) / (n - 1)) ** 0.5
    return {"n": n, "mean": mean, "std": std, "ci_low": mean - 0.02, "ci_high": mean + 0.02, "values": values}


def _row(variant: str) -> dict:
    base = sum(LOSSES["full"]) / 3
    mean = sum(LOSSES[variant]) / 3
    return {"variant": variant, "n": 3, "n_planned": 3, "best": _summary(LOSSES[variant]),
            "final": _summary([x + 0.01 for x in LOSSES[variant]]), "ppl": 2.718 ** mean, "is_baseline": variant == "full",
            "diff": None if variant == "full" else mean - base,
            "diff_pct": None if variant == "full" else 100 * (mean - base) / base,
            "test": None if variant == "full" else {"test": "paired", "t": 9.0, "p": 0.004, "p_holm": 0.012,
                                                    "df": 2.0, "hedges_g": 3.1, "note": None},
            "below_bigram": REFERENCE["bigram"] - mean, "not_learned_beyond_bigram": mean >= REFERENCE["bigram"],
            "collapsed": 3 if mean > 3 else 0, "diverged": 0, "failed": 0,
            "extra": {"params": 804096, "tokens/s": 17000.0, "spike score": 0.0}}


def _runs(root: Path) -> list[dict]:
    """A run folder per variant and seed whose validation loss falls to its best value."""
    runs = []
    for variant, values in LOSSES.items():
        for seed, best in zip(SEEDS, values):
            folder = root / f"{variant}-{seed}"
            folder.mkdir(parents=True)
            rows = [{"step": s, "val_loss": best + (4.2 - best) * (1 - s / 600) ** 3} for s in range(0, 601, 50)]
            (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            runs.append({"id": folder.name, "variant": variant, "seed": seed, "status": "completed",
                         "path": str(folder), "collapsed": best > 3})
    return runs


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> tuple[dict, Path]:
    """A result-scale report with five claims (one of each verdict and a fails claim) and a real
    validation-loss figure, in a folder of its own (the report's figures are read from there)."""
    folder = tmp_path_factory.mktemp("layout")
    runs = _runs(folder / "runs")
    colors = plots.variant_colors(list(LOSSES))
    assert plots.plot_val_loss(runs, colors, folder / "val_loss.png", reference=REFERENCE)
    assert plots.plot_train_loss_spikes(runs, colors, folder / "train_loss_spikes.png") is False  # no train rows
    (folder / "train_loss_spikes.png").write_bytes((folder / "val_loss.png").read_bytes())  # a second figure
    cells = [{"variant": v, "grid": {}, "row": v,
              "runs": [{"seed": s, "status": "completed", "best_val_loss": x, "final_val_loss": x}
                       for s, x in zip(SEEDS, values)]} for v, values in LOSSES.items()]
    verdicts = evaluate_claims(CLAIMS, cells, REFERENCE, "cpu")
    assert {r["verdict"] for r in verdicts} == {"reproduced", "not reproduced", "inconclusive"}
    report = {
        "title": "partial-residual (cpu scale)", "is_result": True,
        "spec": {"name": "partial-residual", "description": "skips removed one at a time",
                 "question": "What breaks when the attention or the MLP skip of a Pre-LN block is removed?",
                 "scale": "cpu", "baseline": "full", "seeds": SEEDS},
        "generated": "2026-12-04 12:00 on testbox", "collapse_rule": "within 0.1 nats of the unigram level",
        "reference": REFERENCE, "table": [_row(v) for v in LOSSES], "claims": verdicts,
        "published": [{"variant": "ffn-only", "value": 3.35, "metric": "val loss", "source": "seed 000",
                       "setup": "ResidualGPT"}],
        "runs": [{k: r.get(k) for k in ("id", "variant", "seed", "status", "collapsed")}
                 | {"best_val_loss": LOSSES[r["variant"]][SEEDS.index(r["seed"])]} for r in runs],
        "missing": [], "notes": ["A note."],
        "figures": [{"title": "Validation loss", "file": "val_loss.png"},
                    {"title": "Training loss and spike events", "file": "train_loss_spikes.png"}],
    }
    return report, folder


# ---- order -------------------------------------------------------------------------------------
def test_markdown_puts_the_answer_first(result):
    report, _ = result
    md = render.render_markdown(report)
    parts = md.split("\n\n")
    assert parts[:3] == ["# partial-residual (cpu scale)", report["spec"]["question"],
                         "scale cpu · baseline full · seeds 1337, 42, 123"]
    counts = Counter(r["verdict"] for r in report["claims"])
    assert parts[3] == " · ".join(f"{counts[v]} {v}" for v in ("reproduced", "not reproduced", "inconclusive"))
    lines = parts[4].splitlines()
    assert len(lines) == len(report["claims"]) == 5
    for line, r in zip(lines, report["claims"]):
        assert line.startswith(f"- **{r['verdict']}** {r['id']}: ")
        if r.get("p_holm") is not None:
            assert line.endswith(f"Holm p {r['p_holm']:.3g}") and f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]" in line
    assert parts[5] == "![Validation loss](val_loss.png)"
    headings = [p for p in parts if p.startswith("## ")]
    assert headings == ["## Results", "## Published claims and verdicts", "## Best val loss per seed", "## Figures",
                        "## Method", "## Published numbers", "## Notes"]
    # every figure once: the main one beside the headline, the rest under Figures
    assert md.count("](val_loss.png)") == md.count("](train_loss_spikes.png)") == 1
    assert md.index("](train_loss_spikes.png)") > md.index("## Figures")
    # the rules of the verdicts are method text, after the figures
    assert md.index("How the verdicts are decided") > md.index("## Method")


def test_results_table_keeps_the_compared_columns_and_folds_the_rest(result):
    report, folder = result
    md = render.render_markdown(report)
    main, collapse, summary, more = md.split("## Results\n\n")[1].split("\n\n")[:4]
    assert main.splitlines()[0] == ("| variant | seeds (n/planned) | best val loss (mean ± std) | 95% t-interval "
                                    "| below bigram | Δ vs baseline | p (Holm) | collapsed / diverged / failed |")
    assert collapse.startswith("Collapse rule: ")
    assert summary.startswith("More columns: ") and "params, tokens/s, spike score" in summary
    assert more.splitlines()[0] == ("| variant | final val loss (mean ± std) | ppl | test | t | df | p (raw) "
                                    "| Hedges' g | params | tokens/s | spike score |")
    assert "| attn-only | 2.1500 ± 0.0100 | 8.50 | paired t | 9 | 2 | 0.004 | 3.10 | 804,096 | 17,000 | 0 |" in more
    page_text = render.render_html(report, folder)
    folded = page_text.split("<details><summary>")[1].split("</details>")[0]
    assert folded.startswith("More columns: ") and folded.count("<table>") == 1 and "Hedges&#x27; g" in folded


def test_main_figure_is_named_by_the_report(result):
    report, folder = result
    named = dict(report, main_figure="train_loss_spikes.png")
    md = render.render_markdown(named)
    assert md.split("\n\n")[5] == "![Training loss and spike events](train_loss_spikes.png)"
    assert md.count("](val_loss.png)") == 1 and md.index("](val_loss.png)") > md.index("## Figures")
    # an unknown file falls back to the first figure; no figure at all: a headline without one
    assert render.render_markdown(dict(report, main_figure="nope.png")).split("\n\n")[5] == \
        "![Validation loss](val_loss.png)"
    bare = render.render_html(dict(report, figures=[]), folder)
    assert "<img" not in bare and '<section class="lead"><div class="answer">' in bare


def test_smoke_headline_has_no_counts(result):
    report, folder = result
    smoke = dict(report, is_result=False, claims=[])
    parts = render.render_markdown(smoke).split("\n\n")
    assert parts[3] == "smoke: not a result" and parts[4].startswith("- The smoke scale is reserved")
    assert "reproduced" not in render.render_markdown(smoke)
    assert render.check_html(render.render_html(smoke, folder)) == []


def test_headline_without_claims_gives_each_row(result):
    report, _ = result
    parts = render.render_markdown(dict(report, claims=[])).split("\n\n")
    assert parts[3] == "No published claims checked; each row against the baseline:"
    rows = parts[4].splitlines()
    assert rows[0] == "- **full (baseline)** best val loss 1.9800 ± 0.0100"
    assert rows[1] == "- **attn-only** best val loss 2.1400 ± 0.0100, Δ +0.1600 (+8.08%), Holm p 0.012"


# ---- page.py on its own ------------------------------------------------------------------------
BLOCKS = [("h1", "Card"), ("lead", ["plain line", ("label", "a <b> & c")], "2 yes · 1 no", ("Fig", "f.png")),
          ("details", "More", [("p", "inside"), ("table", ["a", "b"], [["x", "1"]], "lr")]), ("p", "after")]


def test_page_markdown_blocks():
    assert page.page_markdown(BLOCKS) == ("# Card\n\n2 yes · 1 no\n\n- plain line\n- **label** a <b> & c\n\n"
                                          "![Fig](f.png)\n\nMore\n\ninside\n\n| a | b |\n|:---|---:|\n| x | 1 |\n\n"
                                          "after\n")


def test_page_html_blocks(tmp_path):
    (tmp_path / "f.png").write_bytes(b"\x89PNG\r\n\x1a\nbytes")
    text = page.page_html("Card <1>", BLOCKS, tmp_path)
    assert page.check_html(text) == [] and "<title>Card &lt;1&gt;</title>" in text
    lead = text.split('<section class="lead">')[1].split("</section>")[0]
    assert lead.index('<p class="counts">2 yes · 1 no</p>') < lead.index("<li>plain line</li>") \
        < lead.index("<li><strong>label</strong> a &lt;b&gt; &amp; c</li>") < lead.index('<img src="data:image/png;base64,')
    folded = text.split("<details><summary>More</summary>")[1].split("</details>")[0]
    assert "<p>inside</p>" in folded and '<td class="r">1</td>' in folded
    assert text.index("</details>") < text.index("<p>after</p>")


def test_page_refuses_an_unknown_block_kind(tmp_path):
    for render_it in (lambda b: page.page_markdown(b), lambda b: page.page_html("t", b, tmp_path)):
        with pytest.raises(ValueError, match=r"unknown block kind 'figure' \(known: h1, h2, p, ul, table, img, lead, "
                                             r"details\)"):
            render_it([("p", "x"), ("details", "d", [("figure", "x")])])


def test_require_valid_html_raises_on_a_broken_page():
    page.require_valid_html("<html><body><p>x</p></body></html>")
    with pytest.raises(RuntimeError, match=r"reslab bug: .*</body> closes <table> \(line 1\) that was never closed"):
        page.require_valid_html("<html><body><table></body></html>")


# ---- the first screen in Chromium ----------------------------------------------------------------
# Injected into a copy of the page: after load, the box of the first element holding each needle
# (the smallest one: no child holds it too), every image's natural width, every header cell's lines.
PROBE = """<script>window.addEventListener('load', () => {
  const box = e => { if (!e) return null; const r = e.getBoundingClientRect();
                     return {top: r.top + scrollY, bottom: r.bottom + scrollY, left: r.left, right: r.right}; };
  const find = s => [...document.body.querySelectorAll('*')].find(
      e => e.textContent.includes(s) && ![...e.children].some(c => c.textContent.includes(s)));
  const lines = h => { const st = getComputedStyle(h);
      return (h.clientHeight - parseFloat(st.paddingTop) - parseFloat(st.paddingBottom)) / parseFloat(st.lineHeight); };
  const out = {needles: Object.fromEntries(NEEDLES.map(s => [s, box(find(s))])),
    images: [...document.images].map(i => Object.assign(box(i), {alt: i.alt, natural: i.naturalWidth})),
    headers: [...document.querySelectorAll('th')].map(h => [h.textContent, lines(h)]),
    width: document.documentElement.scrollWidth};
  document.body.setAttribute('data-layout', JSON.stringify(out)); });</script>"""


def _layout(exe: str, html_path: Path, needles: list[str], tmp: Path) -> dict:
    text = html_path.read_text(encoding="utf-8").replace("<details>", "<details open>")  # headers folded too
    probe = tmp / "probe.html"
    probe.write_text(text.replace("</body>", PROBE.replace("NEEDLES", json.dumps(needles)) + "</body>"),
                     encoding="utf-8")
    dump = chromium(exe, "--window-size=1400,900", "--virtual-time-budget=2000", "--dump-dom", probe.as_uri())
    found = re.search(r'data-layout="([^"]*)"', dump.stdout)
    assert found, f"Chromium printed no layout (exit {dump.returncode}): {dump.stderr[-1500:]}"
    return json.loads(html.unescape(found.group(1)))


def _needles(report: dict) -> tuple[str, list[str]]:
    """The verdict counts as the page must say them, and a needle per claim: its id as the headline
    line starts it (the claims table below has the id in a cell of its own, without the colon)."""
    counts = Counter(r["verdict"] for r in report["claims"])
    return (" · ".join(f"{counts[v]} {v}" for v in ("reproduced", "not reproduced", "inconclusive")),
            [f"{r['id']}: " for r in report["claims"]])


def test_answer_and_main_figure_on_the_first_screen(result, tmp_path):
    exe = chromium_or_skip()
    report, folder = result
    html_path = render.write_report(report, folder)["html"]
    counts, claims = _needles(report)
    got = _layout(exe, html_path, [counts] + claims, tmp_path)
    for needle in [counts] + claims:
        b = got["needles"][needle]
        assert b is not None, f"{needle!r} is not on the page"
        assert b["bottom"] <= 900 and b["right"] <= 1400, f"{needle!r} is below or beside the first screen: {b}"
    for r in report["claims"]:  # the line says the estimate, its interval and the Holm p
        line = html_path.read_text().split(f"{r['id']}: ")[1].split("</li>")[0]
        if r.get("p_holm") is not None:
            assert f"{r['estimate']:+.4f} [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]" in line
            assert f"Holm p {r['p_holm']:.3g}" in line
    main = got["images"][0]
    assert main["alt"] == "Validation loss" and main["bottom"] <= 900 and main["right"] <= 1400, main
    assert [i["alt"] for i in got["images"]] == [f["title"] for f in report["figures"]]
    assert all(i["natural"] > 0 for i in got["images"]), got["images"]  # no broken figure
    assert got["width"] <= 1400  # nothing wider than the window
    too_tall = [(h, round(n, 1)) for h, n in got["headers"] if n > 2.05]
    assert got["headers"] and not too_tall, f"headers on more than 2 lines at 1400 px: {too_tall}"
