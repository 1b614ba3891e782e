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
