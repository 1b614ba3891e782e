"""Report figures, Markdown / HTML rendering, the HTML checker and atomic writing, on hand-made
run folders (no training)."""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from reslab.report import plots, render
from tests.kill_helpers import SAFETY_NET_S

PNG_SIG = b"\x89PNG\r\n\x1a\n"
VARIANTS = ["pre-ln", "post-ln", "prores"]


def _write_jsonl(path: Path, rows: list[dict], cut_last: bool = False) -> None:
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if cut_last:
        text += '{"step": 999, "train_lo'  # a line cut short by a kill
    path.write_text(text, encoding="utf-8")


def _make_run(root: Path, variant: str, seed: int, diverged: bool = False, cut: bool = False) -> dict:
    path = root / f"{variant}-s{seed}"
    path.mkdir()
    n_steps = 12 if diverged else 30
    off = 0.1 * VARIANTS.index(variant) + 0.01 * seed
    metrics, diag = [], []
    for step in range(1, n_steps + 1):
        loss = 4.0 - 0.05 * step + off + 0.002 * ((step * 7 + seed) % 5)
        if diverged and step == n_steps:
            loss = float("nan")
        if step == 20 and variant == "post-ln" and seed == 0:
            loss += 3.0  # an obvious spike
        row = {"step": step, "train_loss": loss, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 1e4}
        if variant == "prores":
            row["prores_alpha"] = [min(1.0, step / (10.0 * (k + 1))) for k in range(4)]
        metrics.append(row)
        if step % 5 == 0:
            val = 4.1 - 0.05 * step + off
            metrics.append({"step": step, "val_loss": float("inf") if diverged and step == 10 else val})
            d = {"step": step, "loss": val, "grad_norm.block0": 0.5 + 0.01 * step + off,
                 "hidden_norm.embed": 1.0}
            d.update({f"hidden_norm.block{i}": 1.0 + (i + 1) * (0.5 + off) for i in range(4)})
            diag.append(d)
    _write_jsonl(path / "metrics.jsonl", metrics, cut_last=cut)
    _write_jsonl(path / "diagnostics.jsonl", diag, cut_last=cut)
    return {"id": path.name, "variant": variant, "seed": seed,
            "status": "diverged" if diverged else "completed", "path": str(path), "collapsed": False}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[dict]:
    root = tmp_path_factory.mktemp("runs")
    out = []
    for v in VARIANTS:
        for s in range(3 if v == "pre-ln" else 2):
            out.append(_make_run(root, v, s, diverged=(v == "post-ln" and s == 1),
                                 cut=(v == "pre-ln" and s == 2)))
    return out


PLOTTERS = [plots.plot_val_loss, plots.plot_train_loss_spikes, plots.plot_layer0_grad,
            plots.plot_hidden_growth, plots.plot_prores_alpha]


def _summary(values):
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in values) / (n - 1)) if n > 1 else None
    ci = (mean - 0.05, mean + 0.05) if n >= 3 else (None, None)
    return {"n": n, "mean": mean, "std": std, "ci_low": ci[0], "ci_high": ci[1], "values": values}


def _report(figures: list[dict]) -> dict:
    return {
        "title": "Sweep 001: residual designs",
        "spec": {"name": "001-residuals", "description": "pre vs post vs prores", "scale": "tiny",
                 "baseline": "pre-ln", "seeds": [0, 1, 2]},
        "generated": "2025-01-01 12:00 on testbox",
        "collapse_rule": "A run counts as collapsed if its best val loss is within 0.05 of the "
                         "unigram entropy.",
        "table": [
            {"variant": "pre-ln", "n": 3, "n_planned": 3, "best": _summary([2.6, 2.61, 2.62]),
             "final": _summary([2.6, 2.61, 2.62]), "ppl": 13.6, "diff": None, "diff_pct": None,
             "test": None, "collapsed": 0, "diverged": 0, "failed": 0, "is_baseline": True,
             "extra": {"params": 1234567, "tokens/s": 10234.5}},
            {"variant": "post-ln", "n": 1, "n_planned": 3, "best": _summary([2.71]),
             "final": _summary([2.71]), "ppl": 15.0, "diff": 0.1, "diff_pct": 3.83,
             "test": {"test": "welch", "t": None, "p": None, "p_holm": None, "df": None,
                      "hedges_g": None, "note": "no test: Welch's t-test needs at least 2 values"},
             "collapsed": 0, "diverged": 1, "failed": 0, "is_baseline": False},
            {"variant": "prores", "n": 2, "n_planned": 3, "best": _summary([2.80, 2.81]),
             "final": _summary([2.80, 2.81]), "ppl": 16.5, "diff": 0.195, "diff_pct": 7.47,
             "test": {"test": "paired", "t": 12.3, "p": 0.0123456, "p_holm": 0.0246912, "df": 1,
                      "hedges_g": 1.23456, "note": None},
             "collapsed": 1, "diverged": 0, "failed": 0, "is_baseline": False,
             "extra": {"params": 1234571}},
        ],
        "published": [{"variant": "prores", "value": 3.1, "metric": "val loss", "source": "ProRes paper, Table 2",
                       "setup": "GPT-2 small, 10B tokens"}],
        "runs": [
            {"id": "pre-ln-s0", "variant": "pre-ln", "seed": 0, "status": "completed",
             "best_val_loss": 2.6, "final_val_loss": 2.6, "collapsed": False, "error": None},
            {"id": "pre-ln-s1", "variant": "pre-ln", "seed": 1, "status": "completed",
             "best_val_loss": 2.61, "final_val_loss": 2.61, "collapsed": False, "error": None},
            {"id": "pre-ln-s2", "variant": "pre-ln", "seed": 2, "status": "completed",
             "best_val_loss": 2.62, "final_val_loss": 2.62, "collapsed": False, "error": None},
            {"id": "post-ln-s0", "variant": "post-ln", "seed": 0, "status": "completed",
             "best_val_loss": 2.71, "final_val_loss": 2.72, "collapsed": False, "error": None},
            {"id": "post-ln-s1", "variant": "post-ln", "seed": 1, "status": "diverged",
             "best_val_loss": 3.5, "final_val_loss": None, "collapsed": False,
             "error": "loss became NaN at step 12"},
            {"id": "prores-s0", "variant": "prores", "seed": 0, "status": "completed",
             "best_val_loss": 2.80, "final_val_loss": 2.80, "collapsed": True, "error": None},
            {"id": "prores-s1", "variant": "prores", "seed": 1, "status": "completed",
             "best_val_loss": 2.81, "final_val_loss": 2.81, "collapsed": False, "error": None},
        ],
        "missing": [{"variant": "prores", "seed": 2, "scale": "tiny", "reason": "not started"},
                    {"variant": "post-ln", "seed": 2, "scale": "tiny", "reason": "still running"}],
        "notes": ["Post-LN diverged once at lr 1e-3 <as expected> & documented."],
        "figures": figures,
    }


def _figure_name(fn) -> str:
    return fn.__name__.removeprefix("plot_") + ".png"


@pytest.fixture(scope="module")
def figure_folder(tmp_path_factory, runs) -> Path:
    """Every figure drawn once for the module (drawing is the slow part of these tests)."""
    folder = tmp_path_factory.mktemp("figures")
    colors = plots.variant_colors(VARIANTS)
    for fn in PLOTTERS:
        assert fn(runs, colors, folder / _figure_name(fn)) is True
    return folder


@pytest.fixture()
def report_folder(tmp_path, figure_folder) -> tuple[dict, Path]:
    """A fresh report dict and a fresh folder holding copies of the figures."""
    folder = tmp_path / "report"
    shutil.copytree(figure_folder, folder)
    figures = [{"title": _figure_name(fn).removesuffix(".png").replace("_", " "),
                "file": _figure_name(fn)} for fn in PLOTTERS]
    return _report(figures), folder


# ---- plots -------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", PLOTTERS, ids=lambda f: f.__name__)
def test_plot_writes_png_and_refuses_without_data(fn, runs, figure_folder, tmp_path):
    colors = plots.variant_colors(VARIANTS)
    data = (figure_folder / _figure_name(fn)).read_bytes()  # drawn by the fixture, which asserted True
    assert data.startswith(PNG_SIG) and len(data) > 5000
    assert not [p for p in figure_folder.iterdir() if p.name.startswith(".")]  # no temp file left
    # no data: runs without a folder, runs whose files are empty, no runs at all
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text("")
    no_data = [{**runs[0], "path": None}, {**runs[1], "path": str(empty)}]
    for rs in (no_data, []):
        missing = tmp_path / "none.png"
        assert fn(rs, colors, missing) is False
        assert not missing.exists()


def test_plot_prores_alpha_needs_alpha_rows(runs, tmp_path):
    no_prores = [r for r in runs if r["variant"] != "prores"]
    assert plots.plot_prores_alpha(no_prores, plots.variant_colors(VARIANTS), tmp_path / "a.png") is False


def test_cut_short_line_is_skipped(runs):
    cut = next(r for r in runs if r["variant"] == "pre-ln" and r["seed"] == 2)
    assert (Path(cut["path"]) / "metrics.jsonl").read_text().endswith('"train_lo')
    steps, _ = plots._series(plots._rows(cut, "metrics.jsonl"), "train_loss")
    assert steps[-1] == 30


def test_colors_stable_and_distinct():
    many = [f"v{i}" for i in range(25)]
    a, b = plots.variant_colors(many), plots.variant_colors(many)
    assert a == b and list(a) == many
    assert len(set(a.values())) == 25
    assert plots.variant_colors(["x", "y", "x"]) == {"x": a["v0"], "y": a["v1"]}
    assert a["v0"] == "#1f77b4"  # tab10's blue first, as before
    assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in a.values())


def _rgb_gap(colors: dict[str, str]) -> tuple[float, tuple[str, str]]:
    """The smallest RGB distance (0-255 per channel) between two variants' colours, and the pair."""
    rgb = {v: [int(c[i:i + 2], 16) for i in (1, 3, 5)] for v, c in colors.items()}
    return min((math.dist(rgb[a], rgb[b]), (a, b)) for a, b in itertools.combinations(rgb, 2))


def test_colors_far_apart_for_every_study():
    """Every pair of variants in a report gets colours a reader tells apart: at least 90 apart in RGB
    for any list of up to 12 (every built-in study's variants, its cpu rows), 140 for up to 5."""
    from reslab.studies import load_study, study_names

    lists = {name: list(load_study(name).variants) for name in study_names()}
    lists["partial-residual cpu rows"] = ["full", "attn-only", "ffn-only", "attn-only-nanogpt", "none"]
    lists["twelve"] = [f"v{i}" for i in range(12)]
    for name, variants in lists.items():
        assert 2 <= len(variants) <= 12, name
        gap, pair = _rgb_gap(plots.variant_colors(variants))
        assert gap >= (140 if len(variants) <= 5 else 90), f"{name}: {pair} only {gap:.0f} apart"


def test_spike_indices_match_spike_score():
    stats = pytest.importorskip("reslab.diagnostics.stats")
    values = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 5.0, 1.0, float("nan"), 0.99, 20.0]
    idx = plots.spike_indices(values, window=5, threshold=3.0)
    assert idx == [7, 11]
    scored = sum(1 for v in values if math.isfinite(v)) - 2
    assert stats.spike_score(values, window=5, threshold=3.0) == pytest.approx(len(idx) / scored)


# ---- Markdown ----------------------------------------------------------------------------------
def test_markdown_content(report_folder):
    report, _ = report_folder
    md = render.render_markdown(report)
    table_rows = [l for l in md.splitlines() if l.startswith("| ")]
    for v in VARIANTS:
        assert any(l.startswith(f"| {v}") for l in table_rows), v
    assert report["collapse_rule"] in md
    # the collapse rule sits right under the main table
    lines = md.splitlines()
    last_main = max(i for i, l in enumerate(lines) if l.startswith("| prores") and "/3" in l)
    assert lines[last_main + 2].startswith("Collapse rule: ")
    assert md.count("n<3: no interval") == 2  # post-ln (n=1), prores (n=2)
    assert "[2.5600, 2.6600]" in md and "2.6100 ± 0.0100" in md
    assert "0.0247" in md and "1.23" in md and "1.235" not in md  # p 3 sig. digits, g 2 decimals
    assert "+0.1950 (+7.47%)" in md and "paired t" in md and "Welch t" in md
    assert "1,234,567" in md and "| params | tokens/s |" in md
    assert "## Missing runs" in md
    missing = md.split("## Missing runs")[1].split("##")[0]
    assert "| prores | 2 | tiny | not started |" in missing
    assert "| post-ln | 2 | tiny | still running |" in missing
    assert "loss became NaN at step 12" in md
    assert "## Published numbers" in md and "not from this sweep" in md and "ProRes paper" in md
    assert "2.8000 (collapsed)" in md and "3.5000 (diverged)" in md
    for f in report["figures"]:
        assert f"![{f['title']}]({f['file']})" in md


def test_markdown_tolerates_minimal_report():
    md = render.render_markdown({"title": "t", "table": [{"variant": "a", "n": 0, "best": None}]})
    assert "| a" in md and "Missing runs" not in md and "Published" not in md
    html_text = render.render_html({"title": "t"}, Path("."))
    assert render.check_html(html_text) == []


def test_reference_levels_and_smoke_scale_from_the_dict(report_folder):
    report, _ = report_folder
    assert "Reference levels" not in render.render_markdown(report)  # a report from before the levels
    report["reference"] = {"unigram": 3.3473, "bigram": 2.4857, "method": "count models", "train_tokens": 10,
                           "val_tokens": 5}
    report["table"][0].update(below_bigram=2.4857 - 2.61, not_learned_beyond_bigram=True)
    report["table"][2].update(below_bigram=0.25, not_learned_beyond_bigram=False)
    report["runs"][0]["not_learned_beyond_bigram"] = True
    md = render.render_markdown(report)
    assert "| below bigram | Δ vs baseline |" in md
    assert "| [2.5600, 2.6600] | -0.1243 (not learned beyond bigram) | baseline |" in md
    assert "| n<3: no interval | +0.2500 | +0.1950 (+7.47%) | 0.0247 |" in md
    assert "| n<3: no interval | — | +0.1000 (+3.83%) | — |" in md  # no value: no mark
    assert "2.6000 (not learned beyond bigram)" in md
    assert "Reference levels: unigram 3.3473 nats, bigram 2.4857 nats: the count models." in md
    assert "0.0247" in md  # a result: the p-value shows
    # no is_result key: the scale decides (spec.schema.is_result_scale), and smoke hides every test
    report["spec"]["scale"] = "smoke"
    md = render.render_markdown(report)
    assert md.split("\n\n")[2] == "smoke: not a result"  # the headline, under the scale line
    assert "0.0247" not in md and "1.23" not in md and "paired t" not in md
    report["is_result"] = True  # an explicit flag wins
    assert "0.0247" in render.render_markdown(report)


# ---- HTML --------------------------------------------------------------------------------------
def test_html_self_contained(report_folder):
    report, folder = report_folder
    page = render.render_html(report, folder)
    assert render.check_html(page) == []
    assert "http" not in page.lower()
    assert page.count("<table>") == 6  # main, more columns, per seed, published, missing, diverged/failed
    for v in VARIANTS:
        assert f"<td>{v}" in page
    assert page.count('src="data:image/png;base64,') == len(report["figures"]) == 5
    assert "&lt;as expected&gt; &amp; documented" in page  # text is escaped


def test_html_missing_image_is_a_note(report_folder):
    report, folder = report_folder
    report["figures"].append({"title": "gone", "file": "nope.png"})
    page = render.render_html(report, folder)
    assert "nope.png could not be read" in page
    assert render.check_html(page) == []


def test_check_html_flags_broken_documents():
    ok = "<!DOCTYPE html><html><body><p>a<br>b</p><img src=\"data:image/png;base64,AA==\"></body></html>"
    assert render.check_html(ok) == []
    unclosed = "<html><body><table><tr><td>x</td></tr></body></html>"
    probs = render.check_html(unclosed)
    assert probs and any("table" in p for p in probs)
    external = '<html><body><img src="https://example.org/x.png"></body></html>'
    probs = render.check_html(external)
    assert any("data:" in p for p in probs) and any("external" in p for p in probs)
    assert render.check_html('<html><head><link href="http://x/y.css"></head></html>')
    assert render.check_html("<html><style>@import url(http://x/a.css);</style></html>")
    assert render.check_html("<p><b>x</p></b>")  # misnested
    assert render.check_html("</div>")            # stray end tag


# ---- writing -----------------------------------------------------------------------------------
def test_write_report_atomic(report_folder):
    report, folder = report_folder
    report["table"][0]["extra"]["odd"] = float("nan")
    paths = render.write_report(report, folder)
    assert set(paths) == {"md", "html", "json"}
    for p in paths.values():
        assert p.is_file() and p.stat().st_size > 0 and p.parent == folder
    assert not [p for p in folder.iterdir() if p.name.startswith(".") or p.suffix == ".tmp"]
    back = json.loads(paths["json"].read_text())  # strict JSON: NaN became null
    assert back["table"][0]["extra"]["odd"] is None and back["title"] == report["title"]
    assert render.check_html(paths["html"].read_text()) == []


def test_write_report_refuses_broken_html(report_folder, monkeypatch):
    report, folder = report_folder
    monkeypatch.setattr(render, "render_html", lambda r, f: "<html><body><table></body></html>")
    with pytest.raises(RuntimeError, match="reslab bug"):
        render.write_report(report, folder)
    assert not (folder / "report.md").exists() and not (folder / "report.html").exists()


def test_html_in_headless_browser(report_folder):
    # skips only off CI when Chromium is missing; in CI (CI set) a missing Chromium fails.
    # The pixel-level check (every figure and table visible) is in test_integrations.py.
    from tests.test_integrations import chromium, chromium_or_skip

    exe = chromium_or_skip()
    report, folder = report_folder
    paths = render.write_report(report, folder)
    dom = chromium(exe, "--dump-dom", paths["html"].as_uri(), timeout=SAFETY_NET_S).stdout
    page = paths["html"].read_text()
    assert dom.count("<table>") == page.count("<table>") == 6
    assert dom.count("data:image/png;base64,") == len(report["figures"])
    for v in VARIANTS:
        assert f"<td>{v}" in dom
