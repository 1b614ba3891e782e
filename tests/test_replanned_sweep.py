"""A sweep planned again in the same store (its spec edited, a row re-tuned to another value, a default
that enters run identities changed) keeps its earlier runs under the same variant, grid point and seed.
The report, the index rebuilt from the folders and a card's stability section read the runs the sweep's
record plans now, never a superseded run in their place."""

from __future__ import annotations

import json

import pytest

from reslab.assess.stability import stability
from reslab.fileio import write_json
from reslab.report.build import build_report
from reslab.spec.expand import expand
from reslab.spec.load import parse_spec
from reslab.sweep.runner import record_spec
from reslab.sweep.store import Store, run_row_from_folder
from tests.sweep_helpers import spec_dict

SEEDS = [1, 2, 3]


def _planned(tmp, steps: int):
    data = spec_dict(tmp, seeds=SEEDS, name="pr")
    data["base"]["train"]["steps"] = steps  # enters every run's identity: a new plan, the same slots
    spec = parse_spec(data)
    return spec, expand(spec)


def _train(store: Store, runs, best: float, status: str = "completed") -> None:
    """Run folders written by hand, as a sweep leaves them: membership first, then the outcome."""
    for run in runs:
        folder = store.folder_for(run.id, run.label)
        store.write_membership(folder, run.id, run.config.to_dict(), run.membership(), wall_s=1.0)
        store.add_members(run.id, [run.membership()])
        rows = [{"step": s, "train_loss": 4.0 - s / 20, "val_loss": best + (30 - s) / 30} for s in (10, 20, 30)]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        write_json(folder / "status.json", {"status": status, "step": 30, "best_val_loss": best,
                                            "final_val_loss": best, "params": {"total": 1000}, "error": None})
        write_json(folder / "config.json", {"config": run.config.to_dict()})
        store.upsert_run(run_row_from_folder(folder))


def _bests(report: dict) -> dict[str, list[float]]:
    return {t["variant"]: sorted(t["best"]["values"]) for t in report["table"]}


@pytest.fixture
def replanned(tmp_path):
    """Plan 1 (30 steps) trained on every seed at loss 1.5; then plan 2 (40 steps) recorded, seed 1
    of each variant trained at loss 1.2, seeds 2 and 3 not yet."""
    store = Store(tmp_path / "store")
    spec1, old = _planned(tmp_path, 30)
    record_spec(store, spec1, old, "test")
    _train(store, old, 1.5)
    spec2, new = _planned(tmp_path, 40)
    assert {r.id for r in new}.isdisjoint(r.id for r in old)
    record_spec(store, spec2, new, "test")
    _train(store, [r for r in new if r.seed == 1], 1.2)
    return tmp_path, store, new


def test_a_partly_rerun_plan_reports_its_own_runs_and_the_rest_as_missing(replanned):
    tmp, store, new = replanned
    report, _ = build_report(store, "pr", out_dir=tmp / "report", probe=False)
    assert _bests(report) == {"full": [1.2], "none": [1.2]}  # the 1.5 runs of plan 1 are not in any row
    missing = sorted((m["variant"], m["seed"]) for m in report["missing"])
    assert missing == [(v, s) for v in ("full", "none") for s in (2, 3)]


def test_a_rebuilt_index_gives_each_slot_to_the_planned_run(replanned):
    tmp, store, new = replanned
    _train(store, [r for r in new if r.seed != 1], 1.2)
    for _ in range(2):  # folders are read in name order, whatever order the runs were trained in
        store.reindex()
        members = {(r["variant"], r["seed"]): r["id"] for r in store.runs(spec="pr")}
        assert members == {(r.variant, r.seed): r.id for r in new}
        report, _ = build_report(store, "pr", out_dir=tmp / "report", probe=False)
        assert _bests(report) == {"full": [1.2] * 3, "none": [1.2] * 3}
        assert not report["missing"]


def test_stability_counts_the_planned_runs_only(replanned):
    tmp, store, new = replanned
    counts = stability(store, "pr", "", unigram=None)["designs"]
    assert {v: d["runs"] for v, d in counts.items()} == {"full": 1, "none": 1}


def test_load_runs_marks_an_earlier_plans_run_as_not_planned(replanned):
    """load_runs lists every membership slot; a slot whose planned run has not trained yet still holds
    the earlier plan's run, marked planned False, so planned=True gives the runs a report reads."""
    pytest.importorskip("pandas")
    from reslab.results import load_runs

    tmp, store, new = replanned
    store.close()
    frame = load_runs(store.root, spec="pr")
    by_slot = {(r.variant, r.seed): (r.id, r.planned, r.best_val_loss) for r in frame.itertuples()}
    new_ids = {(r.variant, r.seed): r.id for r in new}
    for (variant, seed), (run_id, planned, best) in by_slot.items():
        assert planned is (run_id == new_ids[(variant, seed)])
        assert (planned, best) == ((True, 1.2) if seed == 1 else (False, 1.5))
    current = load_runs(store.root, spec="pr", planned=True)
    assert sorted(current["id"]) == sorted(r.id for r in new if r.seed == 1)
    assert len(load_runs(store.root, spec="pr", planned=False)) == 4
    with pytest.raises(Exception, match="planned: expected True, False or None, got 'yes'"):
        load_runs(store.root, planned="yes")


def test_runs_listing_and_export_name_an_earlier_plans_run(replanned, capsys, tmp_path):
    """`reslab runs` says which listed runs an earlier plan trained; --json and export carry the column."""
    import csv

    from reslab.cli import main

    tmp, store, new = replanned
    store.close()
    assert main(["runs", "--store", str(store.root), "--spec", "pr"]) in (0, None)
    lines = capsys.readouterr().out.splitlines()
    earlier = [line for line in lines if line.endswith("(an earlier plan's run: its sweep now plans another here)")]
    assert len(lines) == 6 and len(earlier) == 4
    assert not any(r.id in line for r in new for line in earlier)
    assert main(["runs", "--store", str(store.root), "--spec", "pr", "--json"]) in (0, None)
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["planned"] for r in rows) == [False] * 4 + [True] * 2
    assert main(["runs", "export", str(tmp_path / "out"), "--store", str(store.root), "--spec", "pr",
                 "--no-curves"]) in (0, None)
    with open(tmp_path / "out" / "runs.csv") as f:
        exported = list(csv.DictReader(f))
    assert sorted(r["planned"] for r in exported) == ["False"] * 4 + ["True"] * 2


def test_the_card_records_how_its_planned_runs_computed(replanned):
    """stability()["arithmetic"]: the planned runs grouped by their status.json arithmetic (a resume under
    other arithmetic counts under both); an earlier plan's runs are not the card's."""
    from reslab.assess.render import arithmetic_text
    from reslab.train.run_folder import RunFolder

    tmp, store, new = replanned
    cpu = {"torch": "2.13.0+cpu", "threads": 1, "cpu_capability": "AVX512", "flush_denormal": True}
    trained = [r for r in new if r.seed == 1]
    folders = [store.folder_for(r.id, r.label) for r in trained]
    RunFolder(folders[0]).write_status(arithmetic=[{"from_step": 0, **cpu}])
    RunFolder(folders[1]).write_status(arithmetic=[{"from_step": 0, **cpu},
                                                   {"from_step": 20, **cpu, "cpu_capability": "AVX2"}])
    got = stability(store, "pr", "", unigram=None)["arithmetic"]
    assert got == [{**cpu, "runs": 2}, {**cpu, "cpu_capability": "AVX2", "runs": 1}]
    text = arithmetic_text(got + [{"runs": 3}])
    assert text.startswith("Arithmetic of the runs: 2 runs on torch 2.13.0+cpu, CPU kernels AVX512, 1 thread, "
                           "subnormals flushed; 1 run on torch 2.13.0+cpu, CPU kernels AVX2, 1 thread, subnormals "
                           "flushed; 3 runs with no record of it")
