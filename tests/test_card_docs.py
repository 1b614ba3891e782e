"""bench/card_docs.py: result cards are copied with the figures their Markdown links, the index is
written from everything in the docs folder (earlier cards kept), smoke cards are skipped, and a
damaged card is one line with nothing written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import card_docs  # noqa: E402


def _card(root: Path, label: str, scale: str = "cpu", result: bool = True, design: str | None = None,
          cost: dict | None = None) -> None:
    folder = root / "store" / "cards" / f"{label}-{scale}"
    (folder / "signal").mkdir(parents=True)
    (folder / "signal" / "a.png").write_bytes(b"png")
    (folder / "unlinked.png").write_bytes(b"png")
    (folder / "card.md").write_text(f"# {label}\n\n![a figure](signal/a.png)\n")
    (folder / "card.json").write_text(json.dumps({
        "title": label, "label": label, "design_name": design or label, "scale": scale, "is_result": result,
        "baselines": ["pre-ln"], "headline": {"counts": {"better": 1}, "lines": [
            {"verdict": "better", "text": "vs pre-ln at 4 layers: -0.031 nats"}]}, "cost": cost or {}}))


def test_cards_are_copied_and_indexed_and_earlier_ones_kept(tmp_path, capsys):
    out, docs = tmp_path / "out", tmp_path / "docs"
    _card(out, "sas")
    _card(out, "rezero", scale="smoke", result=False)
    (out / "walls.tsv").write_text("sas\t2400\t2026-12-05T10:00Z\tcpu\tclean\n")
    assert card_docs.main([str(out), "--docs", str(docs / "cards.md"), "--folder", str(docs / "cards")]) == 0
    assert "skipped rezero-smoke: smoke: not a result" in capsys.readouterr().err
    copied = docs / "cards" / "sas-cpu"
    assert sorted(p.relative_to(copied).as_posix() for p in copied.rglob("*") if p.is_file()) == \
        ["card.json", "card.md", "signal/a.png"]
    index = (docs / "cards.md").read_text()
    assert "| [sas](sas-cpu/card.md) | pre-ln | cpu | **better** vs pre-ln at 4 layers: -0.031 nats | — | 40.0 min (clean store, 2026-12-05) |" in index
    later = tmp_path / "later"
    _card(later, "resi-dual")
    assert card_docs.main([str(later), "--docs", str(docs / "cards.md"), "--folder", str(docs / "cards")]) == 0
    index = (docs / "cards.md").read_text()
    assert "[sas](sas-cpu/card.md)" in index and "[resi-dual](resi-dual-cpu/card.md)" in index


def test_the_index_gives_each_cards_cost_against_its_first_baseline(tmp_path):
    # A verdict is per update: the index says beside it what an update costs, from the card's section 6
    # (the design's own row, not the baseline's), at each depth it timed.
    def row(params, by_round, interval):
        return {"ratios": {"params": params, "tokens_per_s": 0.5, "tokens_per_s_same_round": 0.36},
                "tokens_per_s_by_round": by_round, "tokens_per_s_interval": interval}
    base = {"ratios": {"params": 1.0, "tokens_per_s": 1.0}}
    cost = {"L4": {"rows": {"canon": row(1.0449, [0.35, 0.36, 0.37], [0.351, 0.379]), "pre-ln": base}},
            "L16": {"rows": {"canon": row(1.0461, [0.34], None), "pre-ln": base}}}
    out, docs = tmp_path / "out", tmp_path / "docs"
    _card(out, "canon", cost=cost)
    _card(out, "post-ln", cost={"L4": {"rows": {"post-ln": {"ratios": {"params": 1.0, "tokens_per_s": 1.012}}}}})
    assert card_docs.main([str(out), "--docs", str(docs / "cards.md"), "--folder", str(docs / "cards")]) == 0
    index = (docs / "cards.md").read_text()
    assert "| 4 layers: params x1.045, tokens/s x0.360 [0.35, 0.38]<br>16 layers: params x1.046, tokens/s x0.360 |" \
        in index
    assert "| 4 layers: params x1.000, tokens/s x1.012 |" in index  # a card timed before rounds were paired


def test_a_wall_time_measured_beside_other_work_says_so(tmp_path):
    out, docs = tmp_path / "out", tmp_path / "docs"
    _card(out, "sas")
    (out / "walls.tsv").write_text("sas\t5157\t2026-12-05T08:35Z\tcpu\tclean\tbeside a CI run\n")
    assert card_docs.main([str(out), "--docs", str(docs / "cards.md"), "--folder", str(docs / "cards")]) == 0
    assert "| 86.0 min (clean store, 2026-12-05; beside a CI run) |" in (docs / "cards.md").read_text()
    assert (docs / "cards" / "walls.tsv").read_text() == "sas\t5157\t2026-12-05T08:35Z\tcpu\tclean\tbeside a CI run\n"


def test_a_damaged_card_is_one_line_and_nothing_is_written(tmp_path, capsys):
    out, docs = tmp_path / "out", tmp_path / "docs"
    _card(out, "sas")
    _card(out, "bad")
    (out / "store" / "cards" / "bad-cpu" / "card.json").write_text("{not json")
    assert card_docs.main([str(out), "--docs", str(docs / "cards.md"), "--folder", str(docs / "cards")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad-cpu/card.json: not a readable card" in err
    assert not docs.exists()
    assert card_docs.main([str(tmp_path / "nothing"), "--docs", str(docs / "x.md")]) == 2


def test_two_cards_of_one_design_with_other_settings_keep_their_own_wall_times(tmp_path):
    out, docs = tmp_path / "out", tmp_path / "docs"
    _card(out, "pre-ln")
    _card(out, "pre-ln+norm-derf", design="pre-ln")
    (out / "walls.tsv").write_text("pre-ln\t600\t2026-12-06T10:00Z\tcpu\tshared\n"
                                   "pre-ln+norm-derf\t1500\t2026-12-06T11:00Z\tcpu\tshared\n")
    assert card_docs.main([str(out), "--docs", str(docs / "cards.md"), "--folder", str(docs / "cards")]) == 0
    index = (docs / "cards.md").read_text()
    assert "| [pre-ln](pre-ln-cpu/card.md) | pre-ln | cpu | **better** vs pre-ln at 4 layers: -0.031 nats | — | 10.0 min" in index
    assert "| [pre-ln+norm-derf](pre-ln+norm-derf-cpu/card.md) | pre-ln | cpu | **better** vs pre-ln at 4 layers: " \
        "-0.031 nats | — | 25.0 min" in index
    assert (docs / "cards" / "walls.tsv").read_text().splitlines() == [
        "pre-ln\t600\t2026-12-06T10:00Z\tcpu\tshared", "pre-ln+norm-derf\t1500\t2026-12-06T11:00Z\tcpu\tshared"]


def test_the_index_names_the_built_in_designs_without_a_card_of_their_own(tmp_path):
    out, docs = tmp_path / "out", tmp_path / "docs"
    _card(out, "sas")
    _card(out, "pre-ln+norm-derf", design="pre-ln")  # another setting's card: pre-ln has none of its own
    _card(out, "mix-pre-post")                       # a plugin's card is listed but is not a built-in's
    assert card_docs.main([str(out), "--docs", str(docs / "cards.md"), "--folder", str(docs / "cards")]) == 0
    names = card_docs.builtin_designs()
    assert {"pre-ln", "sas", "altup"} <= set(names) and "mix-pre-post" not in names
    missing = [n for n in names if n != "sas"]
    assert (docs / "cards.md").read_text().splitlines()[-1] == \
        f"Built-in designs without a card of their own yet ({len(missing)} of {len(names)}): {', '.join(missing)}."
    assert card_docs.missing_line(set(names)) == \
        f"Every one of reslab's {len(names)} built-in designs has a card of its own."
