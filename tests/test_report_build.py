"""Reports built from a results store: statistics per variant, collapse and divergence flags,
missing runs, figures, and the `reslab report` command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from scipy import stats as sps

from reslab.fileio import write_json
from reslab.report.build import build_report
from reslab.report.render import check_html, render_markdown, write_report
from reslab.sweep.runner import record_spec
from reslab.spec.expand import expand
from reslab.spec.load import parse_spec
from reslab.sweep.store import Store
from tests.sweep_helpers import spec_dict

# variant -> seed -> (status, best val loss); a missing seed has no run folder at all
OUTCOMES = {
    "full": {1: ("completed", 1.50), 2: ("completed", 1.52), 3: ("completed", 1.49)},
    "attn-only": {1: ("completed", 1.60), 2: ("diverged", None), 3: ("completed", 3.30)},
    "ffn-only": {1: ("completed", 3.34)},
    "none": {1: ("completed", 3.35), 2: ("completed", 3.36), 3: ("completed", 3.34)},
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store whose run folders are written by hand (no training): exact, known outcomes."""
    tmp = tmp_path_factory.mktemp("report")
    data = spec_dict(tmp, seeds=[1, 2, 3], name="pr")
    data["variants"] = {"full": {}, "attn-only": {"model": {"ffn_res": False}},
                        "ffn-only": {"model": {"attn_res": False}},
                        "none": {"model": {"attn_res": False, "ffn_res": False}}}
    data["report"] = {"no_skip": "none", "collapse_margin": 0.1,
                      "published": [{"variant": "full", "value": 1.475, "source": "study 000",
                                     "setup": "nanoGPT 10M, TinyShakespeare"}]}
    spec = parse_spec(data)
    store = Store(tmp / "store")
    runs = expand(spec)
    record_spec(store, spec, runs, "test")
    for run in runs:
        outcome = OUTCOMES[run.variant].get(run.seed)
        if outcome is None:
            continue
        status, best = outcome
        folder = store.folder_for(run.id, run.label)
        store.write_membership(folder, run.id, run.config.to_dict(), run.membership(), wall_s=1.0)
        steps = [0, 10, 20, 30] if status == "completed" else [0, 10]
        rows = [{"step": s, "train_loss": 4.0 - s / 20, "lr": 1e-3, "grad_norm": 1.0} for s in steps[1:]]
        rows += [{"step": s, "val_loss": (best or 4.0) + (30 - s) / 30} for s in steps]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        write_json(folder / "status.json", {"status": status, "step": steps[-1], "best_val_loss": best,
                                            "final_val_loss": best, "params": {"total": 1000},
                                            **({"error": None} if status == "completed" else {})})
    store.reindex()
    return store


def test_table_statistics_match_scipy(store, tmp_path):
    report, _ = build_report(store, "pr", out_dir=tmp_path / "r", probe=False)
    rows = {r["variant"]: r for r in report["table"]}
    assert rows["full"]["best"]["mean"] == pytest.approx((1.50 + 1.52 + 1.49) / 3)
    full, none = [1.50, 1.52, 1.49], [1.60, 3.30]
    # none shares every seed with full: paired; attn-only lost seed 2 (diverged): Welch
    assert rows["none"]["test"]["test"] == "paired"
    assert rows["none"]["test"]["p"] == pytest.approx(sps.ttest_rel([3.35, 3.36, 3.34], full).pvalue)
    assert rows["attn-only"]["test"]["test"] == "welch"
    assert rows["attn-only"]["test"]["p"] == pytest.approx(sps.ttest_ind(none, full, equal_var=False).pvalue)
    # Holm over the three comparisons
    ps = sorted((rows[v]["test"]["p"], v) for v in ("attn-only", "none"))
    assert rows[ps[0][1]]["test"]["p_holm"] == pytest.approx(min(1, 2 * ps[0][0]))
    assert rows["ffn-only"]["test"]["p"] is None  # one seed: no test, and it says so
    assert rows["ffn-only"]["test"]["note"]
    lo, hi = sps.t.interval(0.95, 2, loc=rows["full"]["best"]["mean"], scale=sps.sem(full))
    assert (rows["full"]["best"]["ci_low"], rows["full"]["best"]["ci_high"]) == (pytest.approx(lo), pytest.approx(hi))
    assert rows["attn-only"]["best"]["ci_low"] is None  # n = 2: no interval


def test_diverged_collapsed_and_missing_runs_are_shown(store, tmp_path):
    report, out = build_report(store, "pr", out_dir=tmp_path / "r", probe=False)
    rows = {r["variant"]: r for r in report["table"]}
    assert rows["attn-only"]["diverged"] == 1 and rows["attn-only"]["n"] == 2
    assert rows["attn-only"]["collapsed"] == 1   # seed 3 at 3.30 is within 0.1 of none's mean 3.35
    assert rows["full"]["collapsed"] == 0 and rows["none"]["collapsed"] == 3  # none: above the unigram level
    assert rows["ffn-only"]["collapsed"] == 1
    missing = sorted((m["variant"], m["seed"]) for m in report["missing"])
    assert missing == [("ffn-only", 2), ("ffn-only", 3)]  # a diverged run is a result, not missing
    assert {m["reason"] for m in report["missing"]} == {"pending"}
    diverged = [r for r in report["runs"] if r["status"] == "diverged"]
    assert [(r["variant"], r["seed"]) for r in diverged] == [("attn-only", 2)]
    assert "no-skip" in report["collapse_rule"] and "0.1" in report["collapse_rule"]
    # the generated corpus: unigram level 3.0756, bigram 1.6686 nats (tests/test_reference_levels.py
    # checks the counting); full (mean 1.5033) learned beyond bigram, the others did not
    assert report["reference"]["unigram"] < 3.34 - 0.1 and 1.5033 < report["reference"]["bigram"] < 2.45
    assert {v: r["not_learned_beyond_bigram"] for v, r in rows.items()} == {
        "full": False, "attn-only": True, "ffn-only": True, "none": True}
    assert rows["full"]["below_bigram"] == pytest.approx(report["reference"]["bigram"] - (1.50 + 1.52 + 1.49) / 3)
    md = render_markdown(report)
    assert "Missing runs" in md and "ffn-only" in md and "diverged" in md
    assert "1.475" in md and "study 000" in md  # the published number, labelled
    paths = write_report(report, out)
    html = paths["html"].read_text()
    assert check_html(html) == []
    assert html.count("data:image/png;base64,") == len(report["figures"]) >= 2
    for variant in OUTCOMES:
        assert variant in html


def test_report_cli_formats(store, tmp_path):
    cli = [sys.executable, "-m", "reslab.cli", "report", str(store.root), "--no-probe"]
    out = subprocess.run([*cli, "--out", str(tmp_path / "r"), "--format", "json"], capture_output=True,
                         text=True, check=True).stdout
    data = json.loads(out)
    assert {r["variant"] for r in data["table"]} == set(OUTCOMES)
    path = subprocess.run([*cli, "--out", str(tmp_path / "r")], capture_output=True, text=True, check=True)
    assert path.stdout.strip() == str(tmp_path / "r")
    assert sorted(p.name for p in (tmp_path / "r").glob("report.*")) == ["report.html", "report.json", "report.md"]
    bad = subprocess.run([sys.executable, "-m", "reslab.cli", "report", str(tmp_path / "nothing")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "neither a spec file nor a results store" in bad.stderr
    assert "Traceback" not in bad.stderr
