"""[tune]: each row's own value of a config key, chosen on tuning seeds before the comparison runs."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import shutil
from pathlib import Path

import pytest

from reslab.cli import main
from reslab.errors import ConfigError, ReslabError
from reslab.report.tuning import _tuning_blocks, check_held, lr_blocks, lr_section
from reslab.sweep.runner import run_sweep
from reslab.spec.expand import expand, with_seeds
from reslab.spec.load import parse_spec
from reslab.sweep.store import Store
from reslab.spec.tune import pick
from reslab.spec.tune_plan import tuning_runs
from reslab.sweep.tune import choose
from tests.sweep_helpers import spec_dict, write_spec

VALUES = [1e-3, 1e-2]
TUNE_SEEDS = [9001, 9002]


def _tune_dict(tmp: Path, **tune) -> dict:
    data = spec_dict(tmp, seeds=[1], steps=6, eval_interval=3)
    data["tune"] = {"axis": "optim.lr", "values": list(reversed(VALUES)), "seeds": TUNE_SEEDS, **tune}
    return data


def _sweep(spec, root: Path):
    store = Store(root)
    result = run_sweep(spec, store, jobs=2, stream=io.StringIO(), log=lambda *_: None, stack="always")
    return store, result


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """One finished tuned sweep: 2 variants x 2 learning rates x 2 tuning seeds, then 2 comparison
    runs (seeds of one design train stacked in one worker, to keep the processes few)."""
    tmp = tmp_path_factory.mktemp("tuned")
    data = _tune_dict(tmp)
    spec = parse_spec(data)
    store, result = _sweep(spec, tmp / "store")
    store.close()
    return tmp, data, spec, result


def _copy(tuned, dest: Path):
    shutil.copytree(tuned[0], dest, dirs_exist_ok=True)
    return Store(dest / "store")


def test_each_row_trains_at_the_argmin_of_its_tuning_runs(tuned):
    tmp, _, spec, result = tuned
    assert spec.tune.values == VALUES  # kept sorted ascending
    assert result.tuning == 8 and result.planned == 10 and result.count("completed") == 10
    store = Store(tmp / "store")
    means: dict[str, dict[float, list[float]]] = {}
    for r in store.runs(spec="demo.tune"):
        lr = json.loads(r["grid"])["optim.lr"]
        assert r["status"] == "completed" and r["seed"] in TUNE_SEEDS
        assert json.loads(r["config"])["optim"]["lr"] == lr
        means.setdefault(r["variant"], {}).setdefault(lr, []).append(r["best_val_loss"])
    by_hand = {}
    for variant, per_lr in means.items():
        assert sorted(per_lr) == VALUES and all(len(v) == 2 for v in per_lr.values())
        mean = {lr: sum(v) / len(v) for lr, v in per_lr.items()}
        by_hand[variant] = min(VALUES, key=lambda lr: (mean[lr], lr))
    record = store.load_spec_record("demo")
    assert {c["variant"]: c["value"] for c in record["tuned"]} == by_hand
    for c in record["tuned"]:  # the record keeps each value's mean for the report
        got = {e["value"]: e["mean"] for e in c["values"]}
        assert got == pytest.approx({lr: sum(v) / 2 for lr, v in means[c["variant"]].items()})
    compare = store.runs(spec="demo")
    assert len(compare) == 2
    for r in compare:  # the chosen value is in the run's config, and its identity
        assert json.loads(r["config"])["optim"]["lr"] == by_hand[r["variant"]]
        assert json.loads(r["grid"]) == {} and r["seed"] == 1
    assert {r["seed"] for r in compare}.isdisjoint(TUNE_SEEDS)
    assert {r["id"] for r in compare}.isdisjoint({r["id"] for r in store.runs(spec="demo.tune")})


def test_a_rerun_trains_nothing_and_chooses_the_same(tuned, tmp_path):
    store = _copy(tuned, tmp_path)
    runs = sorted((tmp_path / "store" / "runs").iterdir())
    mtimes = {p: (p / "metrics.jsonl").stat().st_mtime_ns for p in runs}
    before = store.load_spec_record("demo")["tuned"]
    store, again = _sweep(tuned[2], tmp_path / "store")
    assert again.skipped == again.planned == 10 and again.count("completed") == 10
    assert sorted((tmp_path / "store" / "runs").iterdir()) == runs
    assert {p: (p / "metrics.jsonl").stat().st_mtime_ns for p in runs} == mtimes
    assert store.load_spec_record("demo")["tuned"] == before


def test_a_diverged_tuning_run_makes_its_value_lose(tuned, tmp_path):
    store = _copy(tuned, tmp_path)
    spec = tuned[2]
    first = {c.variant: c.value for c in choose(spec, store)}
    # one seed of full's winning value diverged: that value now loses, whatever its other seed did
    run = next(r for r in tuning_runs(spec) if r.variant == "full" and r.grid["optim.lr"] == first["full"]
               and r.seed == TUNE_SEEDS[0])
    status_file = store.folder_for(run.id, run.label) / "status.json"
    status = json.loads(status_file.read_text())
    status_file.write_text(json.dumps(dict(status, status="diverged", best_val_loss=None)))
    again = {c.variant: c.to_dict() for c in choose(spec, store)}
    other = next(v for v in VALUES if v != first["full"])
    assert again["full"]["value"] == other and again["none"]["value"] == first["none"]
    entry = next(e for e in again["full"]["values"] if e["value"] == first["full"])
    assert entry["diverged"] == 1 and entry["n"] == 1


def test_the_rule_ties_to_the_smaller_and_ranks_failures_last():
    ok = "completed"
    # a tie: the smaller value wins, whatever order the results come in
    assert pick([0.3, 0.1, 0.2], {0.3: [(ok, 2.0)], 0.1: [(ok, 2.0)], 0.2: [(ok, 2.5)]}, 1)[0] == 0.1
    # a value with one diverged or failed seed loses to any value without, even with a better other seed
    results = {0.1: [(ok, 3.0), (ok, 3.0)], 0.2: [(ok, 1.0), ("diverged", None)], 0.3: [(ok, 1.0), ("failed", None)]}
    value, table, note = pick([0.1, 0.2, 0.3], results, 2)
    assert value == 0.1 and note is None
    assert [(e["n"], e["diverged"], e["failed"]) for e in table] == [(2, 0, 0), (1, 1, 0), (1, 0, 1)]
    # a completed run without a finite metric is no result either
    assert pick([0.1, 0.2], {0.1: [(ok, math.nan)], 0.2: [(ok, 9.0)]}, 1)[0] == 0.2
    # every value diverged: the smallest, and the choice says so
    value, _, note = pick([0.2, 0.1], {0.1: [("diverged", None)], 0.2: [("failed", None)]}, 1)
    assert value == 0.1 and "every value diverged" in note
    # a run not finished yet: no choice
    value, _, note = pick([0.1, 0.2], {0.1: [(ok, 1.0)], 0.2: [("running", None)]}, 1)
    assert value is None and "not finished" in note


BAD = [  # (tune table changes, expected text of its one line)
    ({"seeds": [1, 9002]}, "tune.seeds: [1] are also the spec's seeds"),
    ({"values": [1e-3]}, "tune.values: give at least 2 values"),
    ({"values": [1e-3, 1e-3]}, "repeats a value"),
    ({"values": [0.0, 1e-3]}, "tune.values: learning rates must be > 0"),
    ({"values": [math.inf, 1e-3]}, "tune.values: must be finite numbers"),
    ({"values": [1e-3, "fast"]}, "tune.values: must be finite numbers"),
    ({"axis": "optim.lrr"}, "tune.axis: 'optim.lrr': 'lrr' is not a key of optim"),
    ({"axis": "optim"}, "tune.axis: 'optim' is not a dotted config key"),
    ({"axis": "train"}, "tune.axis: 'train' is not a dotted config key"),
    ({"axis": "model.n_layer", "values": [1.5, 2]}, "tune.values[0]: model.n_layer: expected an integer"),
    ({"axis": "train.seed", "values": [1, 2]}, "tune.axis: 'train.seed': the tuning seeds are tune.seeds"),
    ({"metric": "val_loss"}, "tune.metric: 'val_loss' is not allowed"),
    ({"scales": ["big"]}, "tune.scales: the spec declares no scales"),
    ({"seeds": []}, "tune.seeds: must list at least one seed"),
    ({"seeds": [9001, 9001]}, "tune.seeds: [9001, 9001] repeats a seed"),
    ({"colour": "red"}, "tune.colour: unknown key"),
]


@pytest.mark.parametrize("change,line", BAD, ids=[b[1][:40] for b in BAD])
def test_a_bad_tune_table_is_one_line(tmp_path, change, line):
    data = _tune_dict(tmp_path, **change)
    with pytest.raises(ConfigError) as e:
        parse_spec(data)
    assert len(e.value.errors) == 1, e.value.errors
    assert line in e.value.errors[0]


def test_tune_axis_conflicts_are_one_line_each(tmp_path):
    data = _tune_dict(tmp_path)
    data["grid"] = {"optim.lr": [1e-3, 3e-3]}
    with pytest.raises(ConfigError, match=r"tune.axis: optim.lr is also the grid axis grid\['optim.lr'\]") as e:
        parse_spec(data)
    assert len(e.value.errors) == 1
    data = _tune_dict(tmp_path)
    data["grid"] = {"schedule": {"hot": {"optim": {"lr": 1e-2}}, "cold": {"optim": {"lr": 1e-4}}}}
    with pytest.raises(ConfigError) as e:
        parse_spec(data)
    assert [line.split(": ", 1)[1].split(":")[0] for line in e.value.errors] == ["grid.schedule.hot",
                                                                                  "grid.schedule.cold"]
    data = _tune_dict(tmp_path, scales=["fast"])
    data["scales"] = {"fast": {}, "slow": {}}
    data["tune"]["scales"] = ["fast", "huge"]
    with pytest.raises(ConfigError, match="tune.scales: unknown scale 'huge'; scales are fast, slow") as e:
        parse_spec(data)
    assert len(e.value.errors) == 1


def test_cli_refuses_bad_input_in_one_line_and_writes_nothing(tmp_path, capsys):
    store = tmp_path / "store"
    path = write_spec(tmp_path, _tune_dict(tmp_path))
    assert main(["sweep", "run", str(path), "--store", str(store), "--set", "optim.lr=0.01"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["reslab: error: --set optim.lr: conflicts with [tune] axis optim.lr, which chooses each "
                   "row's own value (every run); drop the --set, or run a scale that does not tune"]
    assert not store.exists()
    assert main(["sweep", "plan", str(path), "--store", str(store), "--set", "optim.lr=0.01"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    # another --set is fine, and the tuning seeds stay out of --seeds' extension
    assert main(["sweep", "plan", str(path), "--store", str(store), "--set", "optim.min_lr=1e-5",
                 "--seeds", "3"]) == 0
    assert "14 runs: 8 tuning, 6 comparison (6 planned after tuning)" in capsys.readouterr().err
    bad = write_spec(tmp_path, _tune_dict(tmp_path, seeds=[1]), "bad.toml")
    assert main(["sweep", "plan", str(bad), "--store", str(store)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"reslab: error: {bad}: tune.seeds: [1] are also the spec's seeds")
    assert "Traceback" not in "".join(err) and not store.exists()


def test_more_seeds_never_take_a_tuning_seed(tmp_path):
    data = _tune_dict(tmp_path, seeds=[1, 4])
    data["seeds"] = [2, 3]
    assert with_seeds(parse_spec(data), 5).seeds == [2, 3, 5, 6, 7]


def test_plan_lists_the_tuning_runs_and_counts_the_comparison_runs(tuned, tmp_path, capsys):
    tmp, data, _, _ = tuned
    path = write_spec(tmp_path, data)
    assert main(["sweep", "plan", str(path), "--store", str(tmp_path / "empty")]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == "tuning demo.tune: optim.lr in [0.001, 0.01] x tuning seeds 9001, 9002, 8 runs"
    assert sum(" pending " in line for line in lines) == 8
    assert "planned after tuning: 2 comparison runs (2 rows x 1 seeds), each row at its chosen optim.lr" in out
    assert "10 runs: 8 tuning, 2 comparison (2 planned after tuning)" in err
    assert not (tmp_path / "empty").exists()  # planning writes nothing
    # on the finished store the comparison runs are known, with their ids and status
    assert main(["sweep", "plan", str(path), "--store", str(tmp / "store"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["phase"] for r in rows].count("tune") == 8
    compare = [r for r in rows if r["phase"] == "compare"]
    assert len(compare) == 2 and all(r["status"] == "completed" and r["id"] for r in compare)


def test_scales_that_do_not_tune_keep_their_runs(tmp_path):
    plain = spec_dict(tmp_path, seeds=[1, 2])
    plain["scales"] = {"fast": {"train": {"steps": 4}}, "slow": {}}
    with_tune = dict(plain, tune={"axis": "optim.lr", "values": VALUES, "seeds": TUNE_SEEDS, "scales": ["slow"]})
    a, b = expand(parse_spec(plain), ["fast"]), expand(parse_spec(with_tune), ["fast"])
    assert [(r.id, r.label, r.grid) for r in a] == [(r.id, r.label, r.grid) for r in b]
    assert expand(parse_spec(with_tune), ["slow"]) == []  # planned after tuning
    assert {r.scale for r in tuning_runs(parse_spec(with_tune))} == {"slow"}
    assert tuning_runs(parse_spec(with_tune), ["fast"]) == []


def test_the_study_estimate_counts_the_tuning_runs(tmp_path):
    from reslab.cli.study import _estimate_line

    data = _tune_dict(tmp_path)
    data["study"] = {"source": "test", "estimates": {"": {"runs": 10, "jobs": 2, "cpu_minutes": 5.0,
                                                          "basis": "measured here"}}}
    spec = parse_spec(data)
    line = _estimate_line(spec, "", 2, 2, tuning=8)
    assert line.startswith("10 runs (8 tuning, 2 comparison), 2 workers: about 5 min")
    assert _estimate_line(spec, "", 2, 2).startswith("2 runs, 2 workers: about 1 min")
    line = _estimate_line(spec, "", 2, 2, tuning=8, extension=4)   # tune.extend's bound is said, not priced
    assert line.startswith("10 runs (8 tuning, 2 comparison) and up to 4 more, 2 workers: about 5 min")


def test_the_most_an_extension_can_add_is_rows_x_extend_x_tuning_seeds(tmp_path):
    from reslab.spec.tune_plan import most_extension_runs

    assert most_extension_runs(parse_spec(_tune_dict(tmp_path))) == 0
    assert most_extension_runs(parse_spec(_tune_dict(tmp_path, extend=2))) == 2 * 2 * len(TUNE_SEEDS)


def test_the_report_section_shows_the_tuning_table_and_figure(tuned, tmp_path):
    tmp, _, spec, _ = tuned
    store = Store(tmp / "store")
    record = store.load_spec_record("demo")
    typed = store.spec_record("demo")
    section = lr_section(typed.spec, typed.tuned, store, "demo", "", [], tmp_path)
    rows = {r["variant"]: r for r in section["tuning"]["rows"]}
    assert {v: r["chosen"] for v, r in rows.items()} == {c["variant"]: c["value"] for c in record["tuned"]}
    for c in record["tuned"]:
        assert [e["mean"] for e in rows[c["variant"]]["values"]] == [e["mean"] for e in c["values"]]
        assert [e["n"] for e in rows[c["variant"]]["values"]] == [2, 2]
    assert section["figures"] == [{"title": "Tuning: validation loss against optim.lr, chosen values marked",
                                   "file": "lr_tuning.png"}]
    assert (tmp_path / "lr_tuning.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    blocks = lr_blocks({"lr": section})
    assert blocks[0] == ("h2", "Learning rate: each design at its own")
    table = next(b for b in blocks if b[0] == "table")
    assert table[1] == ["row", "lr = 0.001", "lr = 0.01", "chosen"]
    # with two values every choice is at an edge of the grid, and the table says which
    edge = {v: "top" if r["chosen"] == max(VALUES) else "bottom" for v, r in rows.items()}
    assert {v: r["edge"] for v, r in rows.items()} == edge
    assert {r[0]: r[-1] for r in table[2]} == {v: f"{r['chosen']:g} (grid's {edge[v]} edge)" for v, r in rows.items()}
    assert any(b[0] == "p" and b[1].startswith(f"{len(rows)} of {len(rows)} rows chose a value at an end of the "
                                               "values they tried") and "or tune.extend, settles it" in b[1]
               for b in blocks)
    assert any(b[0] == "p" and "ties go to the smaller" in b[1] for b in blocks)
    assert not any(b[0] == "img" for b in blocks)
    # no [tune] here and no learning-rate grid: no section
    plain = typed.spec.replace(tune=None)
    assert lr_section(plain, [], store, "demo", "", [], tmp_path) is None


def test_the_recorded_choices_read_back_as_typed_values_and_a_damaged_one_is_named(tuned, tmp_path):
    store = _copy(tuned, tmp_path)
    raw = store.load_spec_record("demo")["tuned"]
    typed = store.spec_record("demo").tuned
    # the stored JSON is the typed record's to_dict, key for key and in order (old records read alike)
    assert [c.to_dict() for c in typed] == raw
    assert [list(c) for c in raw] == [["scale", "variant", "grid", "axis", "metric", "seeds", "value", "values",
                                       "edge", "extended", "note"]] * len(raw)
    assert [c.value for c in typed] == [c.value for c in choose(tuned[2], store)]
    assert all(isinstance(e.mean, float) and e.n == 2 for c in typed for e in c.values)
    path = store.specs_dir / "demo.json"
    record = json.loads(path.read_text())
    record["tuned"][1]["values"][0]["n"] = "two"
    path.write_text(json.dumps(record))
    with pytest.raises(ReslabError, match=r"demo\.json: tuned\[1\]\.values\[0\]\.n: expected an integer, got "
                                          r"'two'; the sweep record is damaged"):
        store.spec_record("demo")


def test_the_results_table_gives_each_row_its_tuned_value(tuned, tmp_path):
    from reslab.report.build import build_report

    tmp, _, _, _ = tuned
    store = Store(tmp / "store")
    record = store.load_spec_record("demo")
    report, _ = build_report(store, "demo", out_dir=tmp_path, probe=False)
    shown = {t["variant"]: t["extra"].get("lr (tuned)") for t in report["table"]}
    assert shown == {c["variant"]: c["value"] for c in record["tuned"]}
    assert all(v is not None for v in shown.values())


def _tuning_row(name: str, chosen: float, at_chosen: float) -> dict:
    return {"name": name, "chosen": chosen, "values": [{"value": 1e-3, "mean": 2.3, "n": 1},
                                                       {"value": chosen, "mean": at_chosen, "n": 1}]}


def _comparison(name: str, values: list, status: str = "completed") -> dict:
    return {"row": name, "runs": [{"seed": s, "status": status, "best_val_loss": v} for s, v in enumerate(values)]}


def test_a_tuned_rate_that_the_comparison_seeds_do_not_survive_did_not_hold():
    tuning = {"axis": "optim.lr", "metric": "best_val_loss", "seeds": [9001],
              "rows": [_tuning_row("cliff", 1e-2, 2.06), _tuning_row("steady", 1e-2, 2.06),
                       _tuning_row("one-bad-seed", 1e-2, 2.06), _tuning_row("never-learned", 1e-2, 3.35),
                       _tuning_row("diverged", 1e-2, 2.06), _tuning_row("not-run-yet", 1e-2, 2.06)]}
    cells = [_comparison("cliff", [3.351, 3.352, 3.350]), _comparison("steady", [2.07, 2.05, 2.08]),
             _comparison("one-bad-seed", [2.07, 3.35, 2.08]), _comparison("never-learned", [3.35, 3.35, 3.35]),
             _comparison("diverged", [math.nan, math.nan, 2.1], status="diverged")]
    why = check_held(tuning, cells, bigram=2.4857)
    assert sorted(why) == ["cliff", "diverged"]
    assert "3 of 3 comparison runs did not learn beyond the bigram level" in why["cliff"]
    assert "reached 2.0600" in why["cliff"] and "mean 3.3510" in why["cliff"]
    held = {r["name"]: r["held"] for r in tuning["rows"]}
    assert held == {"cliff": False, "steady": True, "one-bad-seed": True, "never-learned": True,
                    "diverged": False, "not-run-yet": None}
    assert tuning["rows"][0]["comparison"] == {"mean": pytest.approx(3.351), "n": 3, "not_beyond": 3}
    text = " ".join(str(b[1]) for b in _tuning_blocks(tuning | {"values": [1e-3, 1e-2]}) if b[0] == "p")
    assert "2 of 6 rows' tuned values did not hold" in text and "no claim on them gets a verdict" in text
    assert check_held(tuning, cells, bigram=None) == {}  # no reference levels: nothing to judge


def test_grid_edge_marks_only_the_ends_of_a_grid_of_two_or_more():
    from reslab.report.tuning import grid_edge

    assert [grid_edge(v, [1e-3, 3e-3, 1e-2]) for v in (1e-3, 3e-3, 1e-2)] == ["bottom", None, "top"]
    assert grid_edge(1e-3, [1e-3]) is None            # one value: no grid to be at the edge of
    assert grid_edge(None, [1e-3, 1e-2]) is None      # not chosen yet


# ---- tune.extend: a row whose best is an end of its grid tries values beyond it -----------------------
def test_next_value_is_one_geometric_step_rounded_to_two_digits():
    from reslab.spec.tune import next_value

    assert next_value([3e-3, 1e-2, 3e-2], "top") == 0.09          # 3e-2 * (3e-2 / 1e-2)
    assert next_value([3e-3, 1e-2, 3e-2], "bottom") == 0.0009     # 3e-3 / (1e-2 / 3e-3), rounded
    assert next_value([1e-3, 3e-3, 1e-2], "bottom") == 0.00033    # 1e-3 / 3, to 2 significant digits
    assert next_value([1e-3, 1e-2], "top") == 0.1
    assert next_value([100, 200], "top") == 400 and isinstance(next_value([100, 200], "top"), int)
    assert next_value([100, 200], "bottom") == 50
    assert next_value([1, 2], "bottom") is None                   # 0.5 rounds to 0 on an integer axis: no value
    assert next_value([0.0, 1e-3], "bottom") is None              # no geometric step from 0


def _fake_results(monkeypatch, loss_of):
    """tune._status answers from loss_of(variant, lr) (None: the run has not finished)."""
    import reslab.sweep.tune as tune

    def status(store, run):
        loss = loss_of(run.variant, run.grid["optim.lr"])
        return {} if loss is None else {"status": "completed", "best_val_loss": loss}
    monkeypatch.setattr(tune, "_status", status)


def test_a_row_at_an_end_extends_until_its_best_is_inside(tmp_path, monkeypatch):
    from reslab.sweep.tune import tuning_plan

    data = _tune_dict(tmp_path, values=[1e-3, 1e-2], extend=2)
    data["base"]["optim"]["min_lr"] = 1e-5
    spec = parse_spec(data)
    # full: best at 0.1, one step above the grid; none: best at 1e-3, and 1e-4 is worse
    curve = {"full": {1e-4: 3.0, 1e-3: 2.5, 1e-2: 2.2, 0.1: 2.0, 1.0: 2.9},
             "none": {1e-4: 3.1, 1e-3: 3.0, 1e-2: 3.2}}
    _fake_results(monkeypatch, lambda v, lr: curve[v].get(lr))
    runs, choices = tuning_plan(spec, None)
    by = {c.variant: c.to_dict() for c in choices}
    assert by["full"]["value"] == 0.1 and by["full"]["edge"] is None
    assert by["full"]["extended"] == {"top": 2, "bottom": 0}   # tried 0.1 (best) and 1.0 (worse): inside
    assert [e["value"] for e in by["full"]["values"]] == [1e-3, 1e-2, 0.1, 1.0]
    assert by["none"]["value"] == 1e-3 and by["none"]["extended"] == {"top": 0, "bottom": 1}
    assert [e["value"] for e in by["none"]["values"]] == [1e-4, 1e-3, 1e-2]
    # each added value is every tuning seed's run of that row only, planned as the grid would have it
    added = sorted((r.variant, r.grid["optim.lr"], r.seed) for r in runs if r.grid["optim.lr"] not in (1e-3, 1e-2))
    assert added == sorted([("full", 0.1, s) for s in TUNE_SEEDS] + [("full", 1.0, s) for s in TUNE_SEEDS]
                           + [("none", 1e-4, s) for s in TUNE_SEEDS])
    wider = {r.id for r in tuning_runs(spec.replace(tune=dataclasses.replace(spec.tune, values=[1e-4, 1e-3, 1e-2, 0.1, 1.0])))}
    assert {r.id for r in runs} <= wider  # the same identities as a grid that held those values


def test_an_extension_stops_at_its_limit_and_waits_for_unfinished_runs(tmp_path, monkeypatch):
    from reslab.sweep.tune import choice_line, tuning_plan

    spec = parse_spec(_tune_dict(tmp_path, values=[1e-3, 1e-2], extend=1))
    _fake_results(monkeypatch, lambda v, lr: 2.0 - lr)   # always better higher: the top, then the limit
    _, choices = tuning_plan(spec, None)
    assert all(c.value == 0.1 and c.edge == "top" and c.extended == {"top": 1, "bottom": 0} for c in choices)
    assert "the top of its values, 1 of them beyond the grid: its best may lie beyond" in choice_line("demo", choices[0])
    # while the added value's runs are unfinished the row has no value yet, and its runs are planned
    _fake_results(monkeypatch, lambda v, lr: None if lr == 0.1 else 2.0 - lr)
    runs, choices = tuning_plan(spec, None)
    assert all(c.value is None for c in choices)
    assert sum(r.grid["optim.lr"] == 0.1 for r in runs) == 2 * len(TUNE_SEEDS)
    # a value the config refuses ends the extension, and the row says why
    _fake_results(monkeypatch, lambda v, lr: 2.0 + lr)   # always better lower: 1e-4 is below optim.min_lr 3e-4
    runs, choices = tuning_plan(spec, None)
    assert len(runs) == len(tuning_runs(spec))
    for c in choices:
        assert c.value == 1e-3 and c.edge == "bottom" and c.extended == {"top": 0, "bottom": 0}
        assert c.note == "cannot try 0.0001 beyond the bottom: optim.min_lr: must be in [0, lr=0.0001], got 0.0003 (and 3 more runs)"
    # without extend nothing is added: the edge is only reported
    plain = parse_spec(_tune_dict(tmp_path, values=[1e-3, 1e-2]))
    _fake_results(monkeypatch, lambda v, lr: 2.0 - lr)
    runs, choices = tuning_plan(plain, None)
    assert len(runs) == len(tuning_runs(plain)) and all(c.edge == "top" for c in choices)


def test_a_sweep_with_extend_trains_the_added_values_and_a_rerun_trains_nothing(tmp_path, capsys):
    data = _tune_dict(tmp_path, values=[1e-5, 1e-4], extend=1, seeds=[9001])
    data["base"]["optim"]["min_lr"] = 1e-6
    spec = parse_spec(data)
    lines: list[str] = []
    store = Store(tmp_path / "store")
    result = run_sweep(spec, store, jobs=2, stream=io.StringIO(), log=lines.append, stack="always")
    tuned = store.load_spec_record("demo")["tuned"]
    tried = {c["variant"]: [e["value"] for e in c["values"]] for c in tuned}
    assert any(len(v) == 3 for v in tried.values()), tried  # six updates at 1e-5 or 1e-4: the top wins, so 1e-3 is tried
    grown = [c for c in tuned if len(tried[c["variant"]]) == 3]
    for c in grown:  # the log says which rows try which value, and the round's runs
        assert (f"tuned demo {c['variant']}: its best so far is the top of its values; trying 0.001 (1 of at most 1 "
                "beyond the grid)") in lines
    assert any(line.startswith(f"sweep demo.tune: {len(grown)} more runs planned, for rows whose best is an end "
                               "of their values, 0 already finished") for line in lines), lines
    losses: dict[str, dict] = {}
    for r in store.runs(spec="demo.tune"):
        assert r["status"] == "completed"
        losses.setdefault(r["variant"], {})[json.loads(r["grid"])["optim.lr"]] = r["best_val_loss"]
    for c in tuned:  # the choice is the argmin over every value the row tried
        assert sorted(losses[c["variant"]]) == tried[c["variant"]]
        assert c["value"] == min(tried[c["variant"]], key=lambda v: (losses[c["variant"]][v], v))
    assert result.tuning == sum(map(len, tried.values())) == len(store.runs(spec="demo.tune"))
    recorded = store.load_spec_record("demo.tune")["runs"]  # the tuning record plans the added runs too
    assert len(recorded) == result.tuning
    for r in store.runs(spec="demo"):
        assert json.loads(r["config"])["optim"]["lr"] == next(c["value"] for c in tuned if c["variant"] == r["variant"])
    # a rerun replays the same rounds from the finished runs: nothing trains, the same choices
    store.close()
    store, again = _sweep(spec, tmp_path / "store")
    assert again.skipped == again.planned == result.planned and again.tuning == result.tuning
    assert store.load_spec_record("demo")["tuned"] == tuned
    # the report's tuning table has a column per value tried, and says which rows went beyond the grid
    section = lr_section(store.spec_record("demo").spec, store.spec_record("demo").tuned, store, "demo", "", [],
                          tmp_path / "fig")
    assert section["tuning"]["values"] == sorted({v for vs in tried.values() for v in vs})
    blocks = lr_blocks({"lr": section})
    assert any(b[0] == "p" and "tried values beyond it" in b[1] for b in blocks)
    # `sweep plan` lists the added runs with the grid's and says how many there are
    store.close()
    assert main(["sweep", "plan", str(write_spec(tmp_path, data)), "--store", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    grown = result.tuning - len(tuning_runs(spec))
    assert f", {result.tuning} runs; tune.extend = 1: a row whose best is an end of its values tries up to 1 more " \
           f"beyond it ({grown} such runs so far)" in out.splitlines()[0]
    assert sum(" completed " in line for line in out.splitlines()) == result.planned


@pytest.mark.parametrize("change, line", [
    ({"extend": 5}, "tune.extend: the values a row may add beyond an end of its grid must be 0 to 4, got 5"),
    ({"extend": -1}, "tune.extend: the values a row may add beyond an end of its grid must be 0 to 4, got -1"),
    ({"extend": 1, "axis": "optim.warmup_steps", "values": [0, 100]},
     "tune.extend: extends the grid in geometric steps, so every value must be > 0, got 0; set extend = 0 or give "
     "positive values"),
])
def test_a_bad_extend_is_one_line(tmp_path, change, line):
    with pytest.raises(ConfigError) as e:
        parse_spec(_tune_dict(tmp_path, **change))
    assert e.value.errors == [f"spec: {line}"]
