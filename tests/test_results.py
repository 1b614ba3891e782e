"""Results as data (reslab.load_runs / load_curves), `reslab train` listing its run in a store, and
`reslab compare` for any runs."""

from __future__ import annotations

import json
import sys

import pytest
import tomli_w

import reslab
from reslab import ReslabError
from reslab.cli import main
from reslab.sweep.store import Store

from .train_helpers import tiny_run, write_corpus


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Four single runs (pre-ln and post-ln, seeds 1 and 2) listed in one store by `reslab train`."""
    root = tmp_path_factory.mktemp("results")
    corpus = write_corpus(root, n_chars=20_000)
    runs = {}
    for design in ("pre-ln", "post-ln"):
        for seed in (1, 2):
            cfg = tiny_run(corpus, root / "cache", **{"model.design": design, "train.seed": seed,
                                                     "train.steps": 10, "model.dropout": 0.0})
            path = root / f"{design}-{seed}.toml"
            path.write_text(tomli_w.dumps(cfg))
            out = root / "runs" / f"{design}-{seed}"
            assert main(["train", str(path), "--out", str(out), "--store", str(root / "store")]) == 0
            runs[(design, seed)] = out
    return root, runs


def test_train_lists_its_run_and_load_runs_reads_it(trained):
    root, runs = trained
    frame = reslab.load_runs(root / "store")
    assert len(frame) == 4 and set(frame["spec"].isna()) == {True}  # single runs belong to no sweep
    assert set(frame["planned"].isna()) == {True}  # and no sweep's plan names them
    assert sorted(zip(frame["design"], frame["seed"])) == sorted(runs)
    assert set(frame["status"]) == {"completed"} and (frame["best_val_loss"] > 0).all()
    assert {"model.n_layer", "optim.lr", "train.steps", "params", "tokens_per_s", "wall_s"} <= set(frame.columns)
    assert (frame["model.n_layer"] == 2).all() and "name" not in frame.columns
    post = reslab.load_runs(root / "store", design="post-ln", **{"train.seed": 2})
    assert len(post) == 1 and post.iloc[0]["path"] == str(runs[("post-ln", 2)].resolve())


def test_load_curves_is_long_format(trained):
    root, runs = trained
    curves = reslab.load_curves(root / "store", metric="train_loss", design="pre-ln")
    assert list(curves.columns) == ["spec", "variant", "scale", "seed", "id", "design", "step", "metric", "value"]
    assert set(curves["metric"]) == {"train_loss"} and len(curves) == 2 * 10
    losses = json.loads((runs[("pre-ln", 1)] / "metrics.jsonl").read_text().splitlines()[1])
    first = curves[(curves["seed"] == 1) & (curves["step"] == losses["step"])]["value"].item()
    assert first == pytest.approx(losses["train_loss"])


def test_filters_typos_and_missing_pieces_are_one_line(trained, tmp_path, monkeypatch):
    root, _ = trained
    with pytest.raises(ReslabError, match="model.n_layers: no run in the store has this config field"):
        reslab.load_runs(root / "store", model__n_layers=2)
    with pytest.raises(ReslabError, match="not a results store"):
        reslab.load_runs(tmp_path / "nothing")
    with pytest.raises(ReslabError, match="metric: loss is not logged"):
        reslab.load_curves(root / "store", metric="loss")
    monkeypatch.setitem(sys.modules, "pandas", None)  # pandas is an optional extra
    with pytest.raises(ReslabError, match=r"need pandas \(pip install 'reslab\[frames\]'\)"):
        reslab.load_runs(root / "store")


def test_reindex_keeps_single_runs_outside_the_store(trained):
    root, _ = trained
    assert Store(root / "store").reindex() == 4
    assert len(reslab.load_runs(root / "store")) == 4


def test_reslab_runs_lists_single_runs_with_their_design_and_seed(trained, capsys):
    root, _ = trained
    assert main(["runs", "--store", str(root / "store")]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "(train)" in line]  # before any compare
    assert len(lines) >= 4 and any("post-ln" in line and "seed 2 " in line for line in lines)


def test_compare_writes_the_sweep_report_for_any_runs(trained, capsys):
    root, runs = trained
    assert main(["compare", *map(str, runs.values()), "--store", str(root / "store"), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    table = {r["variant"]: r for r in report["table"]}
    assert set(table) == {"pre-ln", "post-ln"} and table["pre-ln"]["is_baseline"] and table["post-ln"]["n"] == 2
    means = reslab.load_runs(root / "store", status="completed").groupby("design")["best_val_loss"].mean()
    assert table["post-ln"]["best"]["mean"] == pytest.approx(means["post-ln"])
    folder = root / "store" / "reports"
    assert any((p / "report.html").is_file() for p in folder.iterdir())
    assert not any("Besides model.design" in n for n in report["notes"])  # the runs differ in nothing else


def test_compare_notes_what_else_differs_between_the_runs(trained, capsys):
    """Runs that differ in more than the grouping field are compared, with a note naming the fields."""
    root, runs = trained
    corpus = root / "corpus.txt"
    cfg = tiny_run(corpus, root / "cache", **{"model.design": "sandwich-ln", "train.seed": 1, "train.steps": 10,
                                              "model.dropout": 0.0, "model.n_layer": 3})
    (root / "deep.toml").write_text(tomli_w.dumps(cfg))
    assert main(["train", str(root / "deep.toml"), "--out", str(root / "runs" / "deep")]) == 0
    capsys.readouterr()
    pair = [str(runs[("pre-ln", 1)]), str(runs[("pre-ln", 2)]), str(root / "runs" / "deep")]
    assert main(["compare", *pair, "--store", str(root / "store"), "--format", "json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    (note,) = [n for n in notes if n.startswith("Besides model.design and the seed")]
    assert "model.n_layer (pre-ln: 2; sandwich-ln: 3)" in note and "model.dropout" not in note


def test_compare_groups_by_a_field_and_refuses_ambiguous_groups(trained, capsys):
    root, runs = trained
    four = [str(p) for p in runs.values()]
    assert main(["compare", *four, "--baseline", "post-ln", "--store", str(root / "store"), "--format", "json"]) == 0
    table = {r["variant"]: r for r in json.loads(capsys.readouterr().out)["table"]}
    assert table["post-ln"]["is_baseline"] and not table["pre-ln"]["is_baseline"]
    assert main(["compare", *four[:2], "--by", "train.seed", "--store", str(root / "store"), "--format", "json"]) == 0
    assert {r["variant"] for r in json.loads(capsys.readouterr().out)["table"]} == {"seed=1", "seed=2"}
    assert main(["compare", *four, "--by", "model.n_layer", "--store", str(root / "store")]) == 2
    assert "both have model.n_layer = 2 and seed" in capsys.readouterr().err
    assert main(["compare", four[0], "--store", str(root / "store")]) == 2
    assert main(["compare", *four, "--by", "model.n_layers", "--store", str(root / "store")]) == 2
    assert "--by model.n_layers: not a config field" in capsys.readouterr().err
