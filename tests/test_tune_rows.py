"""[[tune.rows]]: rows that tune over their own values instead of tune.values."""

from __future__ import annotations

import io

import pytest

from reslab.cli import main
from reslab.errors import ConfigError
from reslab.report.tuning import lr_blocks, lr_section
from reslab.sweep.runner import run_sweep
from reslab.spec.load import parse_spec
from reslab.sweep.store import Store
from reslab.spec.expand import with_seeds
from reslab.spec.tune import row_seeds, row_values
from reslab.spec.tune_plan import most_extension_runs, tuning_runs
from reslab.sweep.tune import tuning_plan
from tests.sweep_helpers import spec_dict, write_spec

SEEDS = [9001, 9002]


def _spec_dict(tmp, rows, values=(1e-3, 1e-2), grid=None, **tune):
    data = spec_dict(tmp, seeds=[1], steps=6, eval_interval=3)
    data["base"]["optim"]["min_lr"] = 1e-6
    data["tune"] = {"axis": "optim.lr", "values": list(values), "seeds": SEEDS, "rows": rows, **tune}
    if grid is not None:
        data["grid"] = grid
    return data


def _lrs(runs) -> dict:
    """(variant, grid point without lr) -> the sorted values its tuning runs train, with each value's seeds."""
    out: dict = {}
    for r in runs:
        point = tuple(sorted((k, v) for k, v in r.grid.items() if k != "optim.lr"))
        out.setdefault((r.variant, point), {}).setdefault(r.grid["optim.lr"], []).append(r.seed)
    return out


def test_a_row_an_entry_selects_tunes_over_that_entrys_values_only(tmp_path):
    spec = parse_spec(_spec_dict(tmp_path, [{"match": {"variant": "none"}, "values": [3e-4, 1e-4]}]))
    runs = tuning_runs(spec)
    assert _lrs(runs) == {("full", ()): {1e-3: SEEDS, 1e-2: SEEDS}, ("none", ()): {1e-4: SEEDS, 3e-4: SEEDS}}
    assert spec.tune.rows[0].values == [1e-4, 3e-4]   # kept sorted ascending, as tune.values is
    assert [r.seed for r in runs] == sorted((r.seed for r in runs), key=SEEDS.index)   # seed-major
    # the same identities as a spec whose grid held those values for every row
    wide = parse_spec(_spec_dict(tmp_path, [], values=[1e-4, 3e-4, 1e-3, 1e-2]))
    assert {r.id for r in runs} < {r.id for r in tuning_runs(wide)}
    assert len(tuning_runs(wide)) == 2 * len(runs)


def test_entries_select_by_variant_and_grid_point_and_the_first_match_wins(tmp_path):
    rows = [{"match": {"n_layer": 2}, "values": [1e-4, 1e-3]},
            {"match": {"variant": "full"}, "values": [1e-2, 3e-2, 1e-1]}]
    spec = parse_spec(_spec_dict(tmp_path, rows, grid={"model.n_layer": [1, 2]}))
    got = {k: sorted(v) for k, v in _lrs(tuning_runs(spec)).items()}
    assert got == {("full", (("model.n_layer", 1),)): [1e-2, 3e-2, 1e-1],
                   ("full", (("model.n_layer", 2),)): [1e-4, 1e-3],
                   ("none", (("model.n_layer", 1),)): [1e-3, 1e-2],
                   ("none", (("model.n_layer", 2),)): [1e-4, 1e-3]}
    assert row_values(spec.tune, "none", {"model.n_layer": 1}) == [1e-3, 1e-2]


def test_each_row_chooses_among_its_own_values_and_extends_from_them(tmp_path, monkeypatch):
    import reslab.sweep.tune as tune

    spec = parse_spec(_spec_dict(tmp_path, [{"match": {"variant": "none"}, "values": [1e-4, 3e-4, 1e-3]}], extend=1))
    curve = {"full": {1e-3: 2.5, 1e-2: 2.2, 0.1: 2.4},         # best 1e-2, the top: tries 0.1, worse
             "none": {3.3e-5: 3.1, 1e-4: 3.0, 3e-4: 3.2, 1e-3: 3.3}}   # best 1e-4, its own bottom: tries 3.3e-5
    monkeypatch.setattr(tune, "_status", lambda store, run: {
        "status": "completed", "best_val_loss": curve[run.variant].get(run.grid["optim.lr"], 3.0)})
    runs, choices = tuning_plan(spec, None)
    by = {c.variant: c.to_dict() for c in choices}
    assert by["full"]["value"] == 1e-2 and [e["value"] for e in by["full"]["values"]] == [1e-3, 1e-2, 0.1]
    assert by["none"]["value"] == 1e-4 and by["none"]["extended"] == {"top": 0, "bottom": 1}
    assert [e["value"] for e in by["none"]["values"]] == [3.3e-5, 1e-4, 3e-4, 1e-3]


BAD = [
    ([{"match": {"variant": ["none", "full"]}, "values": [1e-4, 1e-3]}],
     "tune.rows[0].match.variant: name one variant here (one entry per variant), got a list"),
    ([{"match": {"variant": "nope"}, "values": [1e-4, 1e-3]}],
     "tune.rows[0].match.variant: unknown variant 'nope'; variants are full, none"),
    ([{"match": {"depth": 2}, "values": [1e-4, 1e-3]}],
     "tune.rows[0].match.depth: unknown grid axis; axes are model.n_layer"),
    ([{"match": {"n_layer": 3}, "values": [1e-4, 1e-3]}],
     "tune.rows[0].match.n_layer: 3 is not a value of grid axis model.n_layer; values are 1, 2"),
    ([{"match": {}, "values": [1e-4, 1e-3]}], "tune.rows[0].match: empty"),
    ([{"match": {"variant": "none"}, "values": [1e-4]}],
     "tune.rows[0].values: give at least 2 values to choose from, got [0.0001]"),
    ([{"match": {"variant": "none"}, "values": [1e-4, 1e-4]}], "tune.rows[0].values: [0.0001, 0.0001] repeats a value"),
    ([{"match": {"variant": "none"}, "values": [0.0, 1e-4]}],
     "tune.rows[0].values: learning rates must be > 0, got 0.0"),
    ([{"match": {"variant": "none"}}], "tune.rows[0]: give the selected rows their own values, seeds or both"),
    ([{"match": {"variant": "none"}, "seeds": [1, 9003]}], "tune.rows[0].seeds: [1] are also the spec's seeds"),
    ([{"match": {"variant": "none"}, "seeds": [9003, 9003]}], "tune.rows[0].seeds: [9003, 9003] repeats a seed"),
    ([{"match": {"variant": "none"}, "seeds": []}], "tune.rows[0].seeds: must list at least one seed"),
    ([{"match": {"variant": "none"}, "seeds": [-1]}], "tune.rows[0].seeds: must be non-negative integers"),
    ([{"match": {"variant": "none"}, "values": [1e-4, 1e-3], "colour": 1}], "tune.rows[0].colour: unknown key"),
    ([{"match": {"variant": "none"}, "values": [1e-4, 1e-3]}, {"match": {"variant": "none", "n_layer": 1},
                                                               "values": [1e-3, 1e-2]}],
     "tune.rows[1].match selects no row that an earlier entry has not taken"),
    ([{"match": {"variant": "none"}, "values": [1e-7, 1e-6]}], "optim.min_lr: must be in [0, lr=1e-07]"),
]


@pytest.mark.parametrize("rows, line", BAD, ids=[b[1][:40] for b in BAD])
def test_a_bad_rows_entry_is_one_line_naming_it(tmp_path, rows, line):
    data = _spec_dict(tmp_path, rows, grid={"model.n_layer": [1, 2]})
    data["base"]["optim"]["min_lr"] = 1e-6 if "min_lr" not in line else 1e-6 * 5
    with pytest.raises(ConfigError) as e:
        parse_spec(data)
    assert len(e.value.errors) == 1, e.value.errors
    assert line in e.value.errors[0]


def test_a_sweep_trains_each_rows_values_and_the_report_and_plan_say_so(tmp_path, capsys):
    data = _spec_dict(tmp_path, [{"match": {"variant": "none"}, "values": [1e-4, 3e-4]}], seeds=[9001])
    spec = parse_spec(data)
    store = Store(tmp_path / "store")
    result = run_sweep(spec, store, jobs=2, stream=io.StringIO(), log=lambda *_: None, stack="always")
    assert result.tuning == 4 and result.count("completed") == 6
    tuned = {c["variant"]: c for c in store.load_spec_record("demo")["tuned"]}
    assert [e["value"] for e in tuned["none"]["values"]] == [1e-4, 3e-4]
    assert [e["value"] for e in tuned["full"]["values"]] == [1e-3, 1e-2]
    # the report: each row's own values, none of them counted as tried beyond its grid
    section = lr_section(store.spec_record("demo").spec, store.spec_record("demo").tuned, store, "demo", "", [],
                          tmp_path / "fig")
    rows = {r["variant"]: r for r in section["tuning"]["rows"]}
    assert rows["none"]["own_values"] == [1e-4, 3e-4] and rows["full"]["own_values"] == [1e-3, 1e-2]
    assert all(r["added"] == [] for r in rows.values())
    assert section["tuning"]["values"] == [1e-4, 3e-4, 1e-3, 1e-2]
    assert not any(b[0] == "p" and "tried values beyond it" in b[1] for b in lr_blocks({"lr": section}))
    store.close()
    assert main(["sweep", "plan", str(write_spec(tmp_path, data)), "--store", str(tmp_path / "store")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == ("tuning demo.tune: optim.lr in [0.001, 0.01] (variant = none: [0.0001, 0.0003]) x tuning seeds "
                     "9001, 4 runs")


# ---- rows with their own tuning seeds ------------------------------------------------------------
def test_a_row_an_entry_gives_seeds_tunes_on_those_seeds_at_the_common_values(tmp_path):
    spec = parse_spec(_spec_dict(tmp_path, [{"match": {"variant": "none"}, "seeds": [9001, 9002, 9003]}]))
    runs = tuning_runs(spec)
    assert _lrs(runs) == {("full", ()): {1e-3: SEEDS, 1e-2: SEEDS},
                          ("none", ()): {1e-3: [9001, 9002, 9003], 1e-2: [9001, 9002, 9003]}}
    assert row_seeds(spec.tune, "none", {}) == [9001, 9002, 9003] and row_seeds(spec.tune, "full", {}) == SEEDS
    assert row_values(spec.tune, "none", {}) == [1e-3, 1e-2]        # an entry without values keeps tune.values
    assert [r.seed for r in runs] == sorted((r.seed for r in runs), key=[9001, 9002, 9003].index)   # seed-major
    # a run at a seed is the run a spec tuning every row on that seed would plan: shared runs are shared
    wide = parse_spec(_spec_dict(tmp_path, [], seeds=[9001, 9002, 9003]))
    assert {r.id for r in runs} < {r.id for r in tuning_runs(wide)} and len(tuning_runs(wide)) == len(runs) + 2


def test_an_entry_may_give_values_and_seeds_and_the_first_match_wins_both(tmp_path):
    rows = [{"match": {"variant": "none", "n_layer": 2}, "values": [1e-4, 1e-3], "seeds": [9003]},
            {"match": {"variant": "none"}, "seeds": [9004, 9005]}]
    spec = parse_spec(_spec_dict(tmp_path, rows, grid={"model.n_layer": [1, 2]}))
    got = _lrs(tuning_runs(spec))
    assert got[("none", (("model.n_layer", 2),))] == {1e-4: [9003], 1e-3: [9003]}
    assert got[("none", (("model.n_layer", 1),))] == {1e-3: [9004, 9005], 1e-2: [9004, 9005]}
    assert got[("full", (("model.n_layer", 1),))] == {1e-3: SEEDS, 1e-2: SEEDS}


def test_a_row_chooses_by_the_mean_over_its_own_seeds_and_extends_on_them(tmp_path, monkeypatch):
    import reslab.sweep.tune as tune

    spec = parse_spec(_spec_dict(tmp_path, [{"match": {"variant": "none"}, "seeds": [9001, 9002, 9003]}],
                                 values=(1e-3, 3e-3, 1e-2), extend=1))
    # none at 3e-3 trains on seed 9001 only (a cliff): one seed would choose it, three choose 1e-3's
    # side, whose best is the bottom end, so it tries 3.3e-4 on its three seeds
    loss = {("none", 3e-3, 9001): 2.1, ("none", 3e-3, 9002): 3.3, ("none", 3e-3, 9003): 3.3,
            ("none", 1e-3, 9001): 2.4, ("none", 1e-3, 9002): 2.5, ("none", 1e-3, 9003): 2.45,
            ("none", 3.3e-4, 9001): 2.3, ("none", 3.3e-4, 9002): 2.35, ("none", 3.3e-4, 9003): 2.3,
            **{("none", 1e-2, seed): 3.3 for seed in (9001, 9002, 9003)}}
    monkeypatch.setattr(tune, "_status", lambda store, run: {
        "status": "completed", "best_val_loss": loss.get((run.variant, run.grid["optim.lr"], run.seed),
                                                         2.0 + run.grid["optim.lr"])})
    runs, choices = tuning_plan(spec, None)
    by = {c.variant: c.to_dict() for c in choices}
    assert by["none"]["seeds"] == [9001, 9002, 9003] and by["full"]["seeds"] == SEEDS
    assert by["none"]["value"] == 3.3e-4 and by["none"]["extended"] == {"top": 0, "bottom": 1}
    assert {e["value"]: e["n"] for e in by["none"]["values"]} == {3.3e-4: 3, 1e-3: 3, 3e-3: 3, 1e-2: 3}
    assert sorted(r.seed for r in runs if r.variant == "none" and r.grid["optim.lr"] == 3.3e-4) == [9001, 9002, 9003]
    assert by["full"]["value"] == 3.3e-4 and sorted(r.seed for r in runs if r.variant == "full"
                                                  and r.grid["optim.lr"] == 3.3e-4) == SEEDS
    assert most_extension_runs(spec) == 1 * (3 + 2)     # extend x each row's own seeds


def test_more_seeds_for_the_comparison_skip_every_rows_tuning_seeds(tmp_path):
    data = _spec_dict(tmp_path, [{"match": {"variant": "none"}, "seeds": [3, 4]}])
    data["tune"]["seeds"] = [2]
    assert with_seeds(parse_spec(data), 4).seeds == [1, 5, 6, 7]


def test_a_sweep_tunes_a_row_on_its_own_seeds_and_the_report_says_so(tmp_path, capsys):
    data = _spec_dict(tmp_path, [{"match": {"variant": "none"}, "seeds": [9001, 9002]}], seeds=[9001])
    spec = parse_spec(data)
    store = Store(tmp_path / "store")
    result = run_sweep(spec, store, jobs=2, stream=io.StringIO(), log=lambda *_: None, stack="always")
    assert result.tuning == 6 and result.count("completed") == 8
    tuned = {c["variant"]: c for c in store.load_spec_record("demo")["tuned"]}
    assert tuned["none"]["seeds"] == [9001, 9002] and tuned["full"]["seeds"] == [9001]
    assert all(e["n"] == 2 for e in tuned["none"]["values"]) and all(e["n"] == 1 for e in tuned["full"]["values"])
    section = lr_section(store.spec_record("demo").spec, store.spec_record("demo").tuned, store, "demo", "", [],
                          tmp_path / "fig")
    rows = {r["variant"]: r for r in section["tuning"]["rows"]}
    assert rows["none"]["seeds"] == [9001, 9002] and rows["full"]["seeds"] == [9001]
    assert rows["none"]["chosen"] == tuned["none"]["value"]
    blocks = lr_blocks({"lr": section})
    assert ("p", "These rows tuned on their own seeds ([[tune.rows]] seeds), their cells the mean over those: "
                 "none on 2 (9001, 9002).") in blocks
    table = next(b for b in blocks if b[0] == "table")
    assert not any("n=" in cell for row in table[2] for cell in row)   # each row's cells count its own seeds
    store.close()
    assert main(["sweep", "plan", str(write_spec(tmp_path, data)), "--store", str(tmp_path / "store")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == ("tuning demo.tune: optim.lr in [0.001, 0.01] (variant = none: seeds 9001, 9002) x tuning seeds "
                     "9001, 6 runs")
