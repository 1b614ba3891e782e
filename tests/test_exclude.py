"""[[exclude]]: rows of the grid a scale leaves out, neither tuned nor compared."""

from __future__ import annotations

import io

import pytest

from reslab.cli import main
from reslab.errors import ConfigError
from reslab.report.build import build_report
from reslab.report.render import render_markdown
from reslab.spec.expand import expand
from reslab.spec.load import parse_spec
from reslab.spec.tune_plan import comparison_counts, tuning_runs
from reslab.sweep.runner import run_sweep
from reslab.sweep.store import Store
from tests.sweep_helpers import spec_dict, write_spec

TUNE = {"axis": "optim.lr", "values": [1e-3, 1e-2], "seeds": [9001]}
SHALLOW_NONE = {"match": {"variant": "none", "n_layer": 1}}


def _spec_dict(tmp, exclude, **extra):
    data = spec_dict(tmp, seeds=(1, 2), steps=6, eval_interval=3)
    data["base"]["optim"]["min_lr"] = 1e-6
    data["grid"] = {"model.n_layer": [1, 2]}
    data["exclude"] = exclude
    data.update(extra)
    return data


def _rows(runs) -> set:
    return {(r.variant, r.grid["model.n_layer"]) for r in runs}


def test_the_selected_rows_are_neither_planned_nor_tuned(tmp_path):
    spec = parse_spec(_spec_dict(tmp_path, [SHALLOW_NONE]))
    runs = expand(spec)
    assert _rows(runs) == {("full", 1), ("full", 2), ("none", 2)} and len(runs) == 3 * 2
    tuned = parse_spec(_spec_dict(tmp_path, [SHALLOW_NONE], tune=TUNE))
    truns = tuning_runs(tuned)
    assert _rows(truns) == {("full", 1), ("full", 2), ("none", 2)} and len(truns) == 3 * 2  # 2 values x 1 seed
    assert comparison_counts(tuned) == {"": 3 * 2}
    # without the entry, the same spec plans the fourth row: the entry is what removed it
    assert len(expand(parse_spec(_spec_dict(tmp_path, [])))) == 4 * 2


def test_a_variant_list_and_scales(tmp_path):
    scales = {"small": {}, "big": {"train": {"steps": 8}}}
    entry = {"match": {"variant": ["full", "none"], "n_layer": 2}, "scales": ["small"]}
    spec = parse_spec(_spec_dict(tmp_path, [entry], scales=scales))
    assert _rows(expand(spec, ["small"])) == {("full", 1), ("none", 1)}
    assert _rows(expand(spec, ["big"])) == {("full", 1), ("full", 2), ("none", 1), ("none", 2)}


CLAIM = {"id": "shallow", "statement": "none is worse at 1 layer", "source": "test", "kind": "difference",
         "a": {"variant": "none", "n_layer": 1}, "b": {"variant": "full", "n_layer": 1}, "op": ">", "threshold": 0.0}
BAD = [
    ([{"match": {}}], {}, "exclude[0].match: empty; name the rows to leave out"),
    ([{"match": {"variant": "ghost"}}], {}, "exclude[0].match.variant: unknown variant 'ghost'"),
    ([{"match": {"n_layer": 5}}], {}, "exclude[0].match.n_layer: 5 is not a value of grid axis"),
    ([{"match": {"n_layer": 2}, "scales": ["huge"]}], {"scales": {"small": {}}},
     "exclude[0].scales: unknown scale 'huge'"),
    ([{"match": {"variant": "none"}, "scales": ["small"]}],
     {"scales": {"small": {}, "big": {}}, "scale_variants": {"small": ["full"]}},
     "exclude[0].match: selects no row at scale small"),
    ([{"match": {"n_layer": 1}}, {"match": {"n_layer": 2}}], {}, "exclude: leaves scale '' no row to run"),
    ([SHALLOW_NONE], {"claims": [CLAIM]},
     "claims[0]: its cell none (n_layer = 1) has no row at scale '': [[exclude]] leaves out every row it selects"),
    ([SHALLOW_NONE], {"claims": [dict(CLAIM, a="none", b="full")]},
     "claims[0]: its cells pool model.n_layer over different values at scale '' once [[exclude]] leaves rows out"),
]


@pytest.mark.parametrize("exclude, extra, line", BAD, ids=[b[2][:50] for b in BAD])
def test_a_bad_entry_is_one_line_naming_it(tmp_path, exclude, extra, line):
    with pytest.raises(ConfigError) as e:
        parse_spec(_spec_dict(tmp_path, exclude, **extra))
    assert len(e.value.errors) == 1, e.value.errors
    assert line in e.value.errors[0]


def test_a_bad_entry_in_a_spec_file_is_one_line_and_no_traceback(tmp_path, capsys):
    path = write_spec(tmp_path, _spec_dict(tmp_path, [{"match": {"variant": "ghost"}}]))
    assert main(["sweep", "plan", str(path)]) != 0
    err = capsys.readouterr().err
    assert f"{path}: exclude[0].match.variant: unknown variant 'ghost'" in err and "Traceback" not in err


def test_a_sweep_runs_the_other_rows_and_its_report_says_what_was_left_out(tmp_path):
    """The left-out row is neither in the table nor counted missing, a claim on rows that ran is
    decided, and the report's scale line names the entry."""
    deep = dict(CLAIM, id="deep", a={"variant": "none", "n_layer": 2}, b={"variant": "full", "n_layer": 2})
    spec = parse_spec(_spec_dict(tmp_path, [SHALLOW_NONE], claims=[deep]))
    store = Store(tmp_path / "store")
    result = run_sweep(spec, store, jobs=2, stream=io.StringIO(), log=lambda *_: None)
    assert result.count("completed") == 6
    report, _ = build_report(store, "demo", out_dir=tmp_path / "report")
    store.close()
    assert {r["variant"] for r in report["table"]} == {"full-n_layer=1", "full-n_layer=2", "none-n_layer=2"}
    assert report["missing"] == []
    assert report["spec"]["exclude"] == ["left out: variant = none; n_layer = 1"]
    assert "left out: variant = none; n_layer = 1" in render_markdown(report)
    (claim,) = report["claims"]
    assert claim["id"] == "deep" and claim["n"] == 2 and "n = 2 < 3" in claim["reason"]
