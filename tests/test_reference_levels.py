"""Reference levels (unigram and bigram count models of the training split, scored on validation)
against hand computations; their cache in the prepared folder; and their use in reports: the
below-bigram column and flag, the smoke scale that is never a result, the claims and learning-rate
sections wired in, and the dashed level lines of the validation-loss figure."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from reslab.data import prepare_dataset
from reslab.data import reference as ref_mod
from reslab.data.config import DataConfig
from reslab.data.reference import count_levels, reference_levels
from reslab.errors import ReslabError
from reslab.fileio import write_json
from reslab.report import plots
from reslab.report.build import build_report
from reslab.report.render import render_html, render_markdown, write_report
from reslab.cli.study import summary_lines
from reslab.sweep.runner import record_spec
from reslab.spec.expand import expand
from reslab.spec.load import parse_spec
from reslab.spec.schema import is_result_scale
from reslab.sweep.store import Store
from tests.sweep_helpers import spec_dict
from tests.train_helpers import generated_text

QUIET = dict(progress=False, log=lambda *_: None)


# ---- the levels by hand --------------------------------------------------------------------------
TRAIN = [0, 1, 0, 2, 0, 1, 1, 3]  # V = 5: token 4 never occurs, token 3 only last (never a context)
VAL = [0, 1, 4, 3, 2, 0]          # targets 1, 4, 3, 2, 0 with contexts 0, 1, 4, 3, 2


def test_levels_match_a_hand_computation():
    # unigram counts 3, 3, 1, 1, 0 over n = 8 tokens: p = (c + 1) / (8 + 5) = 4, 4, 2, 2, 1 / 13
    unigram = -(math.log(4 / 13) + math.log(1 / 13) + math.log(2 / 13) + math.log(2 / 13)
                + math.log(4 / 13)) / 5
    # pairs 01 10 02 20 01 11 13: c(0) = 3 with T(0) = 2 followers, c(1) = 3 with T(1) = 3,
    # c(2) = 1 with T(2) = 1; 3 and 4 are never contexts: their predictions are the unigram's
    p_01 = (2 + 2 * 4 / 13) / (3 + 2)   # = 34/65
    p_14 = (0 + 3 * 1 / 13) / (3 + 3)   # = 1/26: an unseen pair gets T(a) p(b) / (c(a) + T(a))
    p_43 = 2 / 13
    p_32 = 2 / 13
    p_20 = (1 + 1 * 4 / 13) / (1 + 1)   # = 17/26
    bigram = -(math.log(p_01) + math.log(p_14) + math.log(p_43) + math.log(p_32) + math.log(p_20)) / 5
    assert (p_01, p_14, p_20) == (pytest.approx(34 / 65, abs=1e-15), pytest.approx(1 / 26, abs=1e-15),
                                  pytest.approx(17 / 26, abs=1e-15))
    got = count_levels(np.array(TRAIN, dtype=np.uint16), np.array(VAL, dtype=np.uint16), 5)
    assert abs(got["unigram"] - unigram) < 1e-12 and abs(got["bigram"] - bigram) < 1e-12
    assert (got["train_tokens"], got["val_tokens"]) == (8, 6)
    assert "Witten-Bell" in got["method"] and "all 8 training tokens" in got["method"]
    assert set(got) == {"unigram", "bigram", "method", "train_tokens", "val_tokens"}


def _by_loops(train: list[int], val: list[int], V: int) -> tuple[float, float]:
    """The two levels with plain Python counting, straight from the formulas."""
    n = len(train)
    uni = Counter(train)
    pairs = Counter(zip(train[:-1], train[1:]))
    ctx = Counter(train[:-1])
    followers = Counter(a for a, _ in pairs)

    def p_uni(b):
        return (uni[b] + 1) / (n + V)

    def p_bi(a, b):
        if ctx[a] == 0:
            return p_uni(b)
        return (pairs[(a, b)] + followers[a] * p_uni(b)) / (ctx[a] + followers[a])

    targets = list(zip(val[:-1], val[1:]))
    return (-math.fsum(math.log(p_uni(b)) for _, b in targets) / len(targets),
            -math.fsum(math.log(p_bi(a, b)) for a, b in targets) / len(targets))


def test_levels_at_gpt2_vocabulary_size_match_plain_counting():
    V = 50257  # pair ids a * V + b reach 2.5e9: int64, counted sparsely
    rng = np.random.default_rng(0)
    ids = np.array([0, 7, 777, 12345, 31000, 50256])
    train = ids[rng.integers(0, len(ids), 400)]
    val = np.concatenate([ids[rng.integers(0, len(ids), 99)], [50255]])  # a token train never saw
    unigram, bigram = _by_loops(train.tolist(), val.tolist(), V)
    got = count_levels(train.astype(np.uint32), val.astype(np.uint32), V)
    assert abs(got["unigram"] - unigram) < 1e-12 and abs(got["bigram"] - bigram) < 1e-12
    assert got["bigram"] < got["unigram"]


def test_limits_use_the_first_tokens_and_say_so():
    train, val = np.array(TRAIN * 3), np.array(VAL * 2)
    capped = count_levels(train, val, 5, train_limit=10, val_limit=4)
    assert capped["unigram"] == count_levels(train[:10], val[:4], 5)["unigram"]
    assert capped["bigram"] == count_levels(train[:10], val[:4], 5)["bigram"]
    assert (capped["train_tokens"], capped["val_tokens"]) == (10, 4)
    assert "the first 10 of 24 training tokens" in capped["method"]
    assert "the first 4 of 12 validation tokens" in capped["method"]
    assert (ref_mod.TRAIN_LIMIT, ref_mod.VAL_LIMIT) == (20_000_000, 5_000_000)


def test_unusable_data_is_one_error():
    with pytest.raises(ReslabError, match="at least 2 training and 2 validation tokens"):
        count_levels(np.array([1]), np.array([0, 1]), 5)
    with pytest.raises(ReslabError, match="token id 9 outside the vocabulary of 5"):
        count_levels(np.array([0, 9, 1]), np.array([0, 1]), 5)


# ---- the cache -----------------------------------------------------------------------------------
@pytest.fixture()
def prepared(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(generated_text(12_000))
    return prepare_dataset(DataConfig(corpus="text", path=str(corpus), cache_dir=str(tmp_path / "cache")), **QUIET)


def test_cache_is_written_once_and_reused(prepared, monkeypatch):
    path = prepared.folder / "reference.json"
    assert not path.exists()  # preparing alone does not count them (training never needs them)
    first = reference_levels(prepared)
    assert first == count_levels(prepared.train, prepared.val, prepared.vocab_size)
    assert json.loads(path.read_text())["levels"] == first
    mtime = path.stat().st_mtime_ns

    def no_recount(*a, **k):
        raise AssertionError("recounted although the cache is valid")

    monkeypatch.setattr(ref_mod, "count_levels", no_recount)
    assert reference_levels(prepared) == first and path.stat().st_mtime_ns == mtime
    assert not [p for p in prepared.folder.iterdir() if p.name.startswith(".")]  # no temporary file


@pytest.mark.parametrize("damage", ["truncated", "not-utf8", "a-list", "string-level", "negative-level",
                                    "nan-level", "other-data", "old-version", "missing-key"])
def test_a_damaged_cache_is_recounted(prepared, damage):
    path = prepared.folder / "reference.json"
    good = reference_levels(prepared)
    obj = json.loads(path.read_text())
    if damage == "truncated":
        path.write_text(path.read_text()[:40])
    elif damage == "not-utf8":
        path.write_bytes(b"\xff\xfe{\x00")
    elif damage == "a-list":
        path.write_text("[1, 2]")
    else:
        if damage == "string-level":
            obj["levels"]["bigram"] = "2.5"
        elif damage == "negative-level":
            obj["levels"]["unigram"] = -1.0
        elif damage == "nan-level":
            path.write_text(path.read_text().replace(repr(good["bigram"]), "NaN"))
            obj = None
        elif damage == "other-data":
            obj["key"] = "0" * 64
        elif damage == "old-version":
            obj["version"] = 0
        elif damage == "missing-key":
            del obj["levels"]["method"]
        if obj is not None:
            write_json(path, obj)
    lines = []
    assert reference_levels(prepared, log=lines.append) == good
    assert json.loads(path.read_text())["levels"] == good  # rewritten, valid again
    assert len(lines) == 1 and lines[0].startswith(f"data: recounting reference levels: {path} is ")


def test_an_unwritable_cache_only_loses_the_cache(prepared):
    (prepared.folder / "reference.json").mkdir()  # the atomic rename onto a folder fails
    lines = []
    levels = reference_levels(prepared, log=lines.append)
    assert levels == count_levels(prepared.train, prepared.val, prepared.vocab_size)
    assert any("not cached" in line for line in lines)


def test_data_prepare_prints_the_levels_in_one_line(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(generated_text(12_000))
    proc = subprocess.run([sys.executable, "-m", "reslab.cli", "data", "prepare", "--set", "data.corpus=text",
                           "--set", f"data.path={corpus}", "--out", str(tmp_path / "p")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [l for l in proc.stderr.splitlines() if "reference levels" in l]
    data = prepare_dataset(DataConfig(corpus="text", path=str(corpus)), out_dir=tmp_path / "p", **QUIET)
    want = count_levels(data.train, data.val, data.vocab_size)
    assert len(lines) == 1
    assert f"unigram {want['unigram']:.4f}, bigram {want['bigram']:.4f}" in lines[0]
    assert json.loads((tmp_path / "p" / "reference.json").read_text())["levels"] == want


# ---- reports -------------------------------------------------------------------------------------
def _store(tmp: Path, outcomes: dict, scale: str | None = None, name: str = "ref") -> tuple[Store, dict]:
    """A store with hand-written run folders (no training); outcomes: variant -> seed -> best loss.
    Returns the store and the levels of its data, counted directly."""
    data = spec_dict(tmp, seeds=[1, 2], name=name)
    overrides = [{}, {"model": {"ffn_res": False}}, {"model": {"attn_res": False, "ffn_res": False}}]
    data["variants"] = dict(zip(outcomes, overrides))  # distinct configs: distinct runs
    if scale:
        data["scales"] = {scale: {}}
    data["report"] = {"collapse_margin": 0.1}
    spec = parse_spec(data)
    store = Store(tmp / "store")
    runs = expand(spec)
    record_spec(store, spec, runs, "test")
    for run in runs:
        best = outcomes[run.variant][run.seed]
        folder = store.folder_for(run.id, run.label)
        store.write_membership(folder, run.id, run.config.to_dict(), run.membership(), wall_s=1.0)
        rows = [{"step": s, "val_loss": best + (30 - s) / 10} for s in (0, 10, 20, 30)]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        write_json(folder / "status.json", {"status": "completed", "step": 30, "best_val_loss": best,
                                            "final_val_loss": best, "params": {"total": 1000}, "error": None})
    store.reindex()
    cfg = DataConfig(**{k: v for k, v in data["base"]["data"].items()})
    prepared = prepare_dataset(cfg, **QUIET)
    return store, count_levels(prepared.train, prepared.val, prepared.vocab_size)


def _levels_of_corpus(tmp: Path) -> dict:
    spec_dict(tmp)  # writes the corpus
    cfg = DataConfig(corpus="text", path=str(tmp / "corpus.txt"), cache_dir=str(tmp / "cache"))
    d = prepare_dataset(cfg, **QUIET)
    return count_levels(d.train, d.val, d.vocab_size)


def test_rows_get_below_bigram_and_the_flag(tmp_path):
    bigram = _levels_of_corpus(tmp_path)["bigram"]
    outcomes = {"full": {1: bigram - 0.5, 2: bigram - 0.3},     # learned beyond bigram
                "mixed": {1: bigram - 0.2, 2: bigram + 0.1},    # the mean below, one seed above
                "none": {1: bigram + 0.05, 2: bigram + 0.15}}   # not beyond
    store, levels = _store(tmp_path, outcomes)
    report, out = build_report(store, "ref", out_dir=tmp_path / "r", probe=False)
    assert {k: report["reference"][k] for k in levels} == levels
    assert report["unigram_entropy"] == levels["unigram"]
    rows = {r["variant"]: r for r in report["table"]}
    for v, seeds in outcomes.items():
        mean = (seeds[1] + seeds[2]) / 2
        assert rows[v]["below_bigram"] == pytest.approx(bigram - mean, abs=1e-12)
    assert [rows[v]["not_learned_beyond_bigram"] for v in outcomes] == [False, False, True]
    flagged = sorted((r["variant"], r["seed"]) for r in report["runs"] if r["not_learned_beyond_bigram"])
    assert flagged == [("mixed", 2), ("none", 1), ("none", 2)]

    md = render_markdown(report)
    main = md.split("## Results")[1].split("\n\n")[1]
    assert main.splitlines()[0].split(" | ")[4] == "below bigram"
    none_row = next(l for l in main.splitlines() if l.startswith("| none"))
    assert f"{bigram - (outcomes['none'][1] + outcomes['none'][2]) / 2:+.4f} (not learned beyond bigram)" in none_row
    assert "not learned beyond bigram" not in next(l for l in main.splitlines() if l.startswith("| mixed"))
    per_seed = md.split("## Best val loss per seed")[1].split("\n\n")[1]
    assert per_seed.count("(not learned beyond bigram)") == 3
    assert f"Reference levels: unigram {levels['unigram']:.4f} nats, bigram {bigram:.4f} nats" in md
    assert "Witten-Bell" in md and "add-one" in md
    assert f"{levels['unigram']:.3f} nats" in report["collapse_rule"]
    paths = write_report(report, out)
    assert "not learned beyond bigram" in paths["html"].read_text()

    lines = summary_lines(report)
    assert "below bigram" in lines[2] and f"bigram {bigram:.4f}" in lines[1]
    assert "(not beyond bigram)" in next(l for l in lines if l.startswith("none"))
    assert f"{bigram - (outcomes['full'][1] + outcomes['full'][2]) / 2:+.4f}" in next(
        l for l in lines if l.startswith("full"))


def test_missing_data_is_one_note_and_no_values(tmp_path):
    store, _ = _store(tmp_path, {"full": {1: 1.0, 2: 1.1}, "none": {1: 2.0, 2: 2.1}})
    (tmp_path / "corpus.txt").unlink()  # the runs' data is gone: no levels can be counted
    report, out = build_report(store, "ref", out_dir=tmp_path / "r", probe=False)
    assert report["reference"] is None and report["unigram_entropy"] is None
    assert "could not be prepared" in report["reference_error"] and "\n" not in report["reference_error"]
    assert all(r["below_bigram"] is None and r["not_learned_beyond_bigram"] is False for r in report["table"])
    assert all(r["not_learned_beyond_bigram"] is False for r in report["runs"])
    md = render_markdown(report)
    assert md.count("Reference levels") == 1 and "Reference levels: not available (" in md
    main = md.split("## Results")[1].split("\n\n")[1]
    assert all(l.split(" | ")[4] == "—" for l in main.splitlines()[2:])
    assert write_report(report, out)["json"].is_file()
    assert "reference levels: not available" in summary_lines(report)[1]


def test_smoke_scale_is_never_a_result(tmp_path, monkeypatch):
    from reslab.report import claims

    monkeypatch.setattr(claims, "evaluate_claims", lambda *a: [{"id": "x", "verdict": "supported"}])
    assert is_result_scale("smoke") is False
    assert all(is_result_scale(s) for s in ("tiny", "paper", None, ""))
    outcomes = {"full": {1: 1.0, 2: 1.1}, "none": {1: 2.0, 2: 2.3}}
    store, _ = _store(tmp_path, outcomes, scale="smoke")
    report, out = build_report(store, "ref", out_dir=tmp_path / "r", probe=False)
    assert report["is_result"] is False and report["claims"] == []
    assert report["title"] == "ref (smoke scale) — smoke: not a result"
    assert all(r["test"] is None for r in report["table"])
    rows = {r["variant"]: r for r in report["table"]}
    assert rows["none"]["diff"] == pytest.approx(2.15 - 1.05)  # differences stay, tests do not
    md = render_markdown(report)
    paragraphs = [p for p in md.split("\n\n") if not p.startswith(("#", "|", "!", "-"))]
    assert paragraphs[1] == "smoke: not a result"  # the headline, under the scale line
    main, _, _, more = md.split("## Results")[1].split("\n\n")[1:5]  # table, collapse rule, more columns
    none_row = next(l for l in main.splitlines() if l.startswith("| none")).split(" | ")
    assert none_row[6] == "—"  # p (Holm)
    none_more = next(l for l in more.splitlines() if l.startswith("| none")).split(" | ")
    assert none_more[3:8] == ["—", "—", "—", "—", "—"]  # test, t, df, p, Hedges' g
    assert "p-value" in md and "nothing is a result" in md
    page = render_html(report, out)
    assert page.split('<p class="counts">')[1].startswith("smoke: not a result")
    assert "smoke: not a result" in summary_lines(report)[0]
    (tmp_path / "t").mkdir()
    tiny_store, _ = _store(tmp_path / "t", outcomes, scale="tiny")
    tiny, _ = build_report(tiny_store, "ref", out_dir=tmp_path / "t" / "r", probe=False)
    assert tiny["is_result"] is True and tiny["claims"] == [{"id": "x", "verdict": "supported"}]
    assert {r["variant"]: r["test"]["test"] for r in tiny["table"] if r["test"]} == {"none": "paired"}
    assert "smoke" not in tiny["title"] and "smoke: not a result" not in render_markdown(tiny)


def test_claims_and_lr_sections_are_wired_in(tmp_path, monkeypatch):
    from reslab.report import claims, tuning

    seen = {}

    def fake_lr(spec, tuned, store, spec_name, scale, cells, out):
        seen["lr"] = (spec.name, spec_name, scale, cells, out)
        return {"figures": [{"title": "Loss against learning rate", "file": "lr.png"}]}

    def fake_claims(claim_list, cells, reference, scale, unheld, ladder, shallow):
        seen["claims"] = (claim_list, cells, reference, scale, unheld)
        assert ladder is None  # no [ladder]: no rung sizes
        assert isinstance(shallow, dict)  # rows less than 0.3 below bigram, for trend claims
        return []

    monkeypatch.setattr(tuning, "lr_section", fake_lr)
    monkeypatch.setattr(claims, "evaluate_claims", fake_claims)
    monkeypatch.setattr(tuning, "lr_blocks", lambda report: [("h2", "Learning rate"), ("p", "lr text")])
    monkeypatch.setattr(claims, "claim_blocks", lambda report: [("h2", "Claims"), ("p", "claims text")])
    outcomes = {"full": {1: 1.0, 2: 1.1}, "none": {1: 2.0, 2: 2.3}}
    store, levels = _store(tmp_path, outcomes, scale="tiny")
    report, out = build_report(store, "ref", out_dir=tmp_path / "r", probe=False)
    claim_list, cells, reference, scale, unheld = seen["claims"]
    assert claim_list == [] and scale == "tiny" and reference is report["reference"]
    assert unheld == {}  # this fake lr section has no tuning table: every row held
    assert seen["lr"][0:3] == ("ref", "ref", "tiny") and seen["lr"][3] is cells and seen["lr"][4] == out
    assert [(c["variant"], c["grid"], c["row"]) for c in cells] == [("full", {}, "full"), ("none", {}, "none")]
    for c in cells:
        assert sorted((r["seed"], r["status"], r["best_val_loss"], r["final_val_loss"]) for r in c["runs"]) == [
            (s, "completed", outcomes[c["variant"]][s], outcomes[c["variant"]][s]) for s in (1, 2)]
        assert all(Path(r["path"]).is_dir() and set(r) == {"seed", "status", "best_val_loss", "final_val_loss",
                                                            "path"} for r in c["runs"])
    assert report["figures"][-1] == {"title": "Loss against learning rate", "file": "lr.png"}
    headings = [l for l in render_markdown(report).splitlines() if l.startswith("## ")]
    assert headings[:4] == ["## Results", "## Claims", "## Best val loss per seed", "## Learning rate"]


# ---- the figure ----------------------------------------------------------------------------------
def _run(tmp: Path, name: str, values: list[float]) -> dict:
    path = tmp / name
    path.mkdir()
    rows = [{"step": 10 * i, "val_loss": v} for i, v in enumerate(values)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"id": name, "variant": name, "seed": 1, "status": "completed", "path": str(path)}


def _dashed(fig) -> dict[str, float]:
    ax = fig.axes[0]
    return {line.get_label(): float(line.get_ydata()[0]) for line in ax.get_lines()
            if line.get_linestyle() == "--"}


@pytest.mark.parametrize("values", [[4.2, 3.0, 2.0, 1.6], [4.2, 4.1, 4.0, 3.9], [1.2, 1.1, 1.0]],
                         ids=["falls-past-both", "stays-above-both", "below-both"])
def test_val_loss_figure_draws_the_levels(tmp_path, values):
    runs = [_run(tmp_path, "a", values)]
    reference = {"unigram": 3.347, "bigram": 2.486}
    fig = plots.val_loss_figure(runs, plots.variant_colors(["a"]), reference=reference)
    assert _dashed(fig) == {"bigram level 2.486 (count model)": 2.486, "unigram level 3.347 (count model)": 3.347}
    lo, hi = fig.axes[0].get_ylim()
    span = max(values + [3.347]) - min(values + [2.486])
    assert lo == pytest.approx(min(values + [2.486]) - 0.04 * span)
    assert hi == pytest.approx(max(values + [3.347]) + 0.04 * span)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "bigram level 2.486 (count model)" in labels and "unigram level 3.347 (count model)" in labels
    assert _dashed(plots.val_loss_figure(runs, plots.variant_colors(["a"]))) == {}
    assert plots.plot_val_loss(runs, plots.variant_colors(["a"]), tmp_path / "v.png", reference=reference)
    assert (tmp_path / "v.png").read_bytes().startswith(b"\x89PNG")
