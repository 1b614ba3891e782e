"""[[more_seeds]]: the rows an entry selects train on more comparison seeds than the spec's."""

from __future__ import annotations

import io

import pytest

from reslab.cli import main
from reslab.errors import ConfigError
from reslab.report.build import build_report
from reslab.report.render import render_markdown
from reslab.spec.more_seeds import comparison_seeds
from reslab.sweep.runner import run_sweep
from reslab.spec.expand import expand, with_seeds
from reslab.spec.load import parse_spec
from reslab.sweep.store import Store
from reslab.spec.tune_plan import comparison_counts, tuning_runs
from reslab.sweep.tune import plan
from tests.sweep_helpers import spec_dict, write_spec

GRID = {"model.n_layer": [1, 2]}


def _spec_dict(tmp, more, seeds=(1, 2, 3), **extra):
    data = spec_dict(tmp, seeds=seeds, steps=6, eval_interval=3)
    data["grid"] = dict(GRID)
    data["more_seeds"] = more
    data.update(extra)
    return data


def _seeds_by_row(runs) -> dict:
    out: dict = {}
    for r in runs:
        out.setdefault((r.variant, r.grid["model.n_layer"]), []).append(r.seed)
    return out


def test_only_the_selected_rows_train_on_the_extra_seeds_after_the_spec_seeds(tmp_path):
    spec = parse_spec(_spec_dict(tmp_path, [{"match": {"n_layer": 2}, "seeds": [7, 8]}]))
    runs = expand(spec)
    assert _seeds_by_row(runs) == {("full", 1): [1, 2, 3], ("none", 1): [1, 2, 3],
                                   ("full", 2): [1, 2, 3, 7, 8], ("none", 2): [1, 2, 3, 7, 8]}
    assert [r.seed for r in runs] == [1] * 4 + [2] * 4 + [3] * 4 + [7] * 2 + [8] * 2   # seed-major
    # the spec's seeds are the same runs as without the entry: adding seeds never retrains a row
    plain = parse_spec(_spec_dict(tmp_path, []))
    assert {r.id for r in expand(plain)} == {r.id for r in runs if r.seed in (1, 2, 3)}


def test_a_variant_list_and_several_entries_add_up_in_the_order_first_named(tmp_path):
    variants = {"full": {}, "none": {"model": {"attn_res": False, "ffn_res": False}},
                "attn-only": {"model": {"ffn_res": False}}}
    more = [{"match": {"variant": ["full", "none"], "n_layer": 2}, "seeds": [7]},
            {"match": {"variant": "none"}, "seeds": [9, 7]}]
    spec = parse_spec(_spec_dict(tmp_path, more, variants=variants))
    got = _seeds_by_row(expand(spec))
    assert got[("full", 2)] == [1, 2, 3, 7] and got[("full", 1)] == [1, 2, 3]
    assert got[("none", 2)] == [1, 2, 3, 7, 9] and got[("none", 1)] == [1, 2, 3, 7, 9]
    assert got[("attn-only", 1)] == got[("attn-only", 2)] == [1, 2, 3]
    assert comparison_seeds(spec, "", "none", {"model.n_layer": 1}) == [1, 2, 3, 7, 9]   # the sweep's order


def test_an_entry_applies_at_its_scales_only(tmp_path):
    data = _spec_dict(tmp_path, [{"match": {"n_layer": 2}, "seeds": [7], "scales": ["big"]}],
                      scales={"small": {}, "big": {"train": {"steps": 8}}})
    spec = parse_spec(data)
    assert {r.seed for r in expand(spec, ["small"])} == {1, 2, 3}
    assert _seeds_by_row(expand(spec, ["big"]))[("full", 2)] == [1, 2, 3, 7]


def test_tuning_never_runs_the_extra_seeds_and_the_plan_counts_them_per_row(tmp_path, monkeypatch):
    import reslab.sweep.tune as tune_mod

    monkeypatch.setattr(tune_mod, "_status", lambda store, run: {"status": "pending"})
    tune = {"axis": "optim.lr", "values": [1e-3, 1e-2], "seeds": [9001]}
    data = _spec_dict(tmp_path, [{"match": {"n_layer": 2}, "seeds": [7, 8]}], tune=tune)
    data["base"]["optim"]["min_lr"] = 1e-6
    spec = parse_spec(data)
    assert {r.seed for r in tuning_runs(spec)} == {9001} and len(tuning_runs(spec)) == 8
    assert comparison_counts(spec) == {"": 2 * 3 + 2 * 5}
    assert sum(plan(spec, None).after.values()) == 16


def test_more_comparison_seeds_from_the_command_line_skip_the_entries_seeds(tmp_path):
    spec = parse_spec(_spec_dict(tmp_path, [{"match": {"n_layer": 2}, "seeds": [4, 5]}]))
    five = with_seeds(spec, 5)
    assert five.seeds == [1, 2, 3, 6, 7] and five.more_seeds == spec.more_seeds
    assert _seeds_by_row(expand(five))[("full", 2)] == [1, 2, 3, 6, 7, 4, 5]
    assert _seeds_by_row(expand(with_seeds(spec, 1)))[("none", 2)] == [1, 4, 5]


BAD = [
    ({"match": {}, "seeds": [7]}, "more_seeds[0].match: empty; name the rows that need more seeds"),
    ({"match": {"variant": "ghost"}, "seeds": [7]}, "more_seeds[0].match.variant: unknown variant 'ghost'"),
    ({"match": {"variant": ["full", "ghost"]}, "seeds": [7]}, "more_seeds[0].match.variant: unknown variant 'ghost'"),
    ({"match": {"variant": []}, "seeds": [7]}, "more_seeds[0].match.variant: an empty list selects no row"),
    ({"match": {"n_layer": 5}, "seeds": [7]}, "more_seeds[0].match.n_layer: 5 is not a value of grid axis"),
    ({"match": {"depth": 2}, "seeds": [7]}, "more_seeds[0].match.depth: unknown grid axis"),
    ({"match": {"n_layer": 2}, "seeds": []}, "more_seeds[0].seeds: must list at least one seed"),
    ({"match": {"n_layer": 2}, "seeds": [7, 7]}, "more_seeds[0].seeds: [7, 7] repeats a seed"),
    ({"match": {"n_layer": 2}, "seeds": [-1]}, "more_seeds[0].seeds: must be non-negative integers"),
    ({"match": {"n_layer": 2}, "seeds": [2, 7]}, "more_seeds[0].seeds: [2] are also the spec's seeds"),
    ({"match": {"n_layer": 2}, "seeds": [9001]}, "more_seeds[0].seeds: [9001] are also tuning seeds"),
    ({"match": {"n_layer": 2}, "seeds": [7], "scales": ["huge"]}, "more_seeds[0].scales: unknown scale 'huge'"),
    ({"match": {"variant": "none", "n_layer": 2}, "seeds": [7], "scales": ["small"]},
     "more_seeds[0].match: selects no row at scale small"),
]


@pytest.mark.parametrize("entry, line", BAD, ids=[b[1][14:60] for b in BAD])
def test_a_bad_entry_is_one_line_naming_it(tmp_path, entry, line):
    tune = {"axis": "optim.lr", "values": [1e-3, 1e-2], "seeds": [9001]}
    data = _spec_dict(tmp_path, [entry], tune=tune, scales={"small": {}, "big": {"train": {"steps": 8}}},
                      scale_variants={"small": ["full"]})
    data["base"]["optim"]["min_lr"] = 1e-6
    with pytest.raises(ConfigError) as e:
        parse_spec(data)
    assert len(e.value.errors) == 1, e.value.errors
    assert line in e.value.errors[0]


def test_a_bad_entry_in_a_spec_file_is_one_line_and_no_traceback(tmp_path, capsys):
    path = write_spec(tmp_path, _spec_dict(tmp_path, [{"match": {"variant": "ghost"}, "seeds": [7]}]))
    assert main(["sweep", "plan", str(path)]) != 0
    err = capsys.readouterr().err
    assert f"{path}: more_seeds[0].match.variant: unknown variant 'ghost'" in err and "Traceback" not in err


def test_a_sweep_trains_them_and_a_claim_on_the_selected_rows_pairs_every_seed(tmp_path):
    claims = [{"id": "deep", "statement": "none is worse than full at 2 layers", "source": "test",
               "kind": "difference", "a": {"variant": "none", "n_layer": 2}, "b": {"variant": "full", "n_layer": 2},
               "op": ">", "threshold": 0.0},
              {"id": "shallow", "statement": "none is worse than full at 1 layer", "source": "test",
               "kind": "difference", "a": {"variant": "none", "n_layer": 1}, "b": {"variant": "full", "n_layer": 1},
               "op": ">", "threshold": 0.0},
              {"id": "across", "statement": "none at 2 layers is worse than full at 1", "source": "test",
               "kind": "difference", "a": {"variant": "none", "n_layer": 2}, "b": {"variant": "full", "n_layer": 1},
               "op": ">", "threshold": 0.0}]
    spec = parse_spec(_spec_dict(tmp_path, [{"match": {"n_layer": 2}, "seeds": [7, 8]}], claims=claims))
    store = Store(tmp_path / "store")
    result = run_sweep(spec, store, jobs=2, stream=io.StringIO(), log=lambda *_: None)
    assert result.count("completed") == 16
    report, _ = build_report(store, "demo", out_dir=tmp_path / "report")
    store.close()
    planned = {r["variant"]: (r["n"], r["n_planned"]) for r in report["table"]}
    assert planned == {"full-n_layer=1": (3, 3), "none-n_layer=1": (3, 3),
                       "full-n_layer=2": (5, 5), "none-n_layer=2": (5, 5)}
    by_id = {c["id"]: c for c in report["claims"]}
    assert by_id["deep"]["n"] == 5 and by_id["shallow"]["n"] == 3
    assert by_id["deep"]["test"].startswith("paired t") and by_id["across"]["test"] == "Welch t (5 vs 3 seeds)"
    assert report["missing"] == []
    assert report["spec"]["more_seeds"] == ["seeds 7, 8 also on n_layer = 2"]
    assert "seeds 7, 8 also on n_layer = 2" in render_markdown(report)
