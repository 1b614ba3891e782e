"""`reslab --plugin reslab_mix_pre_post assess mix-pre-post --scale smoke`, end to end: the plan
first, every section of the card (marked "smoke: not a result"), a self-contained page whose first
screen in Chromium holds the answer and the main figure, load_runs sees the card's runs, and a rerun
trains nothing and writes the same card."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reslab import load_runs
from reslab.report.page import check_html
from tests.test_plugins import _env
from tests.test_report_layout import _layout
from tests.test_integrations import chromium_or_skip

SECTIONS = ["1. The design", "2. Signal propagation at initialisation", "3. Loss against learning rate",
            "4. The comparison", "5. Depth and warmup", "6. Cost", "7. Stability", "8. Scale ladder"]


def _assess(store, *extra):
    return subprocess.run([sys.executable, "-m", "reslab", "--plugin", "reslab_mix_pre_post", "assess", "mix-pre-post",
                           "--scale", "smoke", "--store", str(store), "--jobs", "2", *extra],
                          capture_output=True, text=True, env=_env(), timeout=900)


@pytest.fixture(scope="module")
def card(tmp_path_factory):
    store = tmp_path_factory.mktemp("assess") / "store"
    first = _assess(store)
    assert first.returncode == 0, first.stderr[-3000:]
    folder = first.stdout.strip().splitlines()[-1]
    return store, first, json.loads((Path(folder) / "card.json").read_text()), folder


def test_the_plan_comes_first_and_the_headline_last(card):
    _, proc, _, folder = card
    err = proc.stderr.splitlines()
    assert err[0] == "assess mix-pre-post against pre-ln, scale smoke (smoke: not a result)"
    assert err[1].startswith("  sweep assess-mix-pre-post: 0 tuning + 8 comparison runs; 0 already in the store")
    assert err[2].startswith("  sweep assess-mix-pre-post-ladder: 0 tuning + 6 comparison runs")
    assert "Design card: mix-pre-post (smoke scale) — smoke: not a result" in proc.stderr
    assert err[-1] == f"card: {folder}/card.html (and card.md, card.json)"


def test_every_section_is_written_and_marked_not_a_result(card):
    _, _, data, folder = card
    md = (Path(folder) / "card.md").read_text()
    positions = [md.index(f"## {s}") for s in SECTIONS]
    assert positions == sorted(positions)
    assert md.count("smoke: not a result") >= 4
    assert data["is_result"] is False and data["design"]["plugin"] == "reslab_mix_pre_post"
    assert data["design"]["formula"] and data["design"]["params"] > 0
    assert {c["verdict"] for c in data["comparison"]} == {"smoke: not a result"}
    assert set(data["signal"]["modes"]) == {"xiong", "default"}
    assert set(data["signal"]["modes"]["xiong"]["designs"]) == {"mix-pre-post", "pre-ln", "post-ln"}
    assert set(data["cost"]) == {"L4", "L16"} and data["cost"]["L4"]["rows"]["pre-ln"]["ratios"]["params"] == 1.0
    assert data["stability"]["designs"]["mix-pre-post"]["runs"] == 4
    assert data["runs"] == {"completed": 14, "diverged": 0, "failed": 0, "found": 0}  # a clean store: all trained
    assert "14 runs ended, 0 of them already in the store before it." in md
    assert data["ladder"]["section"]  # the ladder was climbed (the smoke default)
    assert data["figures"][0]["file"] == "card.png"


def test_the_page_is_self_contained_and_valid(card):
    _, _, data, folder = card
    page = (Path(folder) / "card.html").read_text()
    assert check_html(page) == []
    assert "http://" not in page and "https://" not in page
    assert page.count("data:image/png;base64,") >= 5


def test_first_screen_in_chromium(card, tmp_path):
    exe = chromium_or_skip()
    _, _, data, folder = card
    needles = ["smoke: not a result"] + [ln["text"] for ln in data["headline"]["lines"]]
    got = _layout(exe, Path(folder) / "card.html", needles, tmp_path)
    for needle in needles:
        b = got["needles"][needle]
        assert b is not None and b["bottom"] <= 900 and b["right"] <= 1400, (needle, b)
    main = got["images"][0]
    assert main["alt"] == data["figures"][0]["title"] and main["bottom"] <= 900 and main["right"] <= 1400, main
    assert all(i["natural"] > 0 for i in got["images"]), got["images"]
    assert got["width"] <= 1400


def test_load_runs_sees_the_cards_runs(card):
    store = card[0]
    runs = load_runs(store)
    mine = runs[runs["spec"] == "assess-mix-pre-post"]
    assert len(mine) == 8 and set(mine["variant"]) == {"mix-pre-post", "pre-ln"}
    assert set(mine["status"]) == {"completed"}


def test_a_rerun_trains_nothing_and_writes_the_same_verdicts(card):
    store, _, data, folder = card
    again = _assess(store)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "8 runs planned, 8 already finished, 0 to train" in again.stderr
    assert "6 runs planned, 6 already finished, 0 to train" in again.stderr
    assert "8 already in the store" in again.stderr.splitlines()[1]
    redo = json.loads((Path(folder) / "card.json").read_text())
    assert redo["comparison"] == data["comparison"] and redo["depth"] == data["depth"]


def test_a_bad_request_is_one_line_and_writes_nothing(tmp_path):
    proc = _assess(tmp_path / "store", "--against", "mix-pre-post")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "--against: mix-pre-post is the design assessed" in proc.stderr
    assert not (tmp_path / "store").exists()


def test_a_result_cards_counts_and_lines_are_on_the_first_screen(card, tmp_path):
    """The same card as a result would read (verdicts and counts in its headline), rendered again."""
    import shutil

    from reslab.assess.card import headline
    from reslab.assess.render import write_card

    exe = chromium_or_skip()
    _, _, data, folder = card
    copy = tmp_path / "card"
    shutil.copytree(folder, copy)
    data = dict(data, is_result=True, title="Design card: mix-pre-post (cpu scale)")
    data["comparison"] = [dict(c, verdict=v, estimate=e, ci_low=e - 0.01, ci_high=e + 0.01, p_holm=0.01)
                          for c, v, e in zip(data["comparison"], ("better", "equivalent"), (-0.031, 0.004))]
    data["depth"] = dict(data["depth"], depth="improves with depth (16 layers below 4)",
                         warmup="trains without warmup at 16 layers (within ±0.02 nats of with it)")
    data["headline"] = headline(data)
    assert data["headline"]["counts"] == {"better": 1, "equivalent": 1}
    paths = write_card(data, copy)
    needles = ["1 better · 1 equivalent"] + [ln["text"] for ln in data["headline"]["lines"]]
    assert "vs pre-ln at 4 layers: -0.031 nats [-0.041, -0.021], Holm p 0.01" in needles
    got = _layout(exe, paths["html"], needles, tmp_path)
    for needle in needles:
        b = got["needles"][needle]
        assert b is not None and b["bottom"] <= 900 and b["right"] <= 1400, (needle, b)
    assert got["images"][0]["bottom"] <= 900 and all(i["natural"] > 0 for i in got["images"])


def test_the_stability_table_counts_in_words():
    from reslab.assess.render import _stability_blocks
    by_lr = {"0.01": {"runs": 1, "diverged": 0, "plateau": 0, "spikes": 1},
             "0.033": {"runs": 2, "diverged": 1, "plateau": 0, "spikes": 3}}
    card = {"stability": {"rule": "a rule", "designs": {"x": {"runs": 3, "diverged": 1, "plateau": 0, "spikes": 4,
                                                                  "stable_lrs": ["0.01"], "by_lr": by_lr}}}}
    table = _stability_blocks(card)[2]
    assert table[2][0][-1] == "0.01: 1 run, 1 spike; 0.033: 2 runs, 1 diverged, 3 spikes"
