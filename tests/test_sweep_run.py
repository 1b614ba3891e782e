"""The sweep runner and the results store: resumable, crash-safe, failures isolated, indexable."""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from reslab.sweep.runner import run_sweep
from reslab.spec.expand import expand, with_seeds
from reslab.spec.load import load_spec, parse_spec
from reslab.sweep.store import Store
from tests.kill_helpers import checkpoint_steps, kill_seed, last_step, lock_is_free, status, wait_until
from tests.sweep_helpers import assert_same_curves, curves, spec_dict, write_spec


def _sweep(spec, store_dir, jobs=2, **kw):
    store = Store(store_dir)
    result = run_sweep(spec, store, jobs=jobs, stream=io.StringIO(), log=lambda *_: None, **kw)
    return store, result


def _folders(store_dir: Path) -> dict[str, Path]:
    return {p.name.rsplit("-", 1)[1]: p for p in (store_dir / "runs").iterdir()}


def _partial_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".tmp-")]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One finished 4-run sweep, shared by the tests that only read it (they copy it to change it)."""
    tmp = tmp_path_factory.mktemp("finished")
    spec = parse_spec(spec_dict(tmp))
    store, result = _sweep(spec, tmp / "store")
    store.close()
    return tmp, spec, result


def test_sweep_trains_every_run_once_and_a_rerun_skips_them(finished, tmp_path):
    src, spec, result = finished
    shutil.copytree(src, tmp_path, dirs_exist_ok=True)
    store = Store(tmp_path / "store")
    assert result.planned == 4 and result.count("completed") == 4 and result.skipped == 0
    rows = store.runs(spec="demo")
    assert sorted((r["variant"], r["seed"]) for r in rows) == [("full", 1), ("full", 2), ("none", 1), ("none", 2)]
    assert all(r["status"] == "completed" and r["best_val_loss"] is not None and r["wall_s"] > 0 for r in rows)
    mtimes = {p: (p / "metrics.jsonl").stat().st_mtime_ns for p in _folders(tmp_path / "store").values()}
    store2, again = _sweep(spec, tmp_path / "store")
    assert again.skipped == 4 and again.count("completed") == 4
    assert {p: (p / "metrics.jsonl").stat().st_mtime_ns for p in mtimes} == mtimes  # nothing retrained

    # a changed override is a new run; the unchanged ones are skipped
    changed = spec_dict(src)  # the data path is part of a run's identity: keep the original corpus
    changed["variants"]["none"]["optim"] = {"lr": 1e-3}
    _, third = _sweep(parse_spec(changed), tmp_path / "store")
    assert third.skipped == 2 and third.count("completed") == 4
    assert len(_folders(tmp_path / "store")) == 6
    assert store2.integrity() == "ok"


def test_diverging_and_crashing_runs_are_recorded_and_the_sweep_finishes(tmp_path):
    data = spec_dict(tmp_path, seeds=[1])
    data["variants"] = {"full": {}, "blowup": {"train": {"nan_at_step": 5}},
                        "broken": {"optim": {"lr": 2e-3}}, "after": {"optim": {"lr": 5e-3}}}
    spec = parse_spec(data)
    from reslab.spec.expand import expand

    broken = next(r for r in expand(spec) if r.variant == "broken")
    store = Store(tmp_path / "store")
    ckpt = store.folder_for(broken.id, broken.label) / "checkpoints" / "step_00000010"
    ckpt.mkdir(parents=True)
    (ckpt / "model.json").write_text("{not json")  # a corrupt checkpoint: resuming it must fail
    (ckpt / "state.json").write_text("{}")
    store, result = _sweep(spec, tmp_path / "store")
    status = {r["variant"]: r for r in store.runs(spec="demo")}
    assert status["full"]["status"] == "completed" and status["after"]["status"] == "completed"
    assert status["blowup"]["status"] == "diverged" and status["blowup"]["step"] == 6
    assert status["broken"]["status"] == "failed" and "step_00000010" in status["broken"]["error"]
    assert result.count("failed") == 1 and result.count("diverged") == 1


def test_cli_sweep_exit_status_and_runs_listing(tmp_path):
    data = spec_dict(tmp_path, seeds=[1])
    data["variants"] = {"full": {}, "blowup": {"train": {"nan_at_step": 3}}}
    path = write_spec(tmp_path, data)
    store = tmp_path / "store"
    cli = [sys.executable, "-m", "reslab.cli"]
    proc = subprocess.run([*cli, "sweep", "run", str(path), "--store", str(store), "--jobs", "2"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr  # a diverged run is a result, not a failure
    assert proc.stdout.strip().splitlines()[-1] == str(store)
    assert "1 completed, 1 diverged, 0 failed" in proc.stderr
    listing = subprocess.run([*cli, "runs", "--store", str(store), "--status", "diverged"],
                             capture_output=True, text=True, check=True).stdout
    assert "blowup" in listing and "full" not in listing
    plan = subprocess.run([*cli, "sweep", "plan", str(path), "--store", str(store)],
                          capture_output=True, text=True, check=True).stdout
    assert "completed" in plan and "diverged" in plan


def test_reindex_rebuilds_the_same_index_from_the_folders(finished, tmp_path):
    shutil.copytree(finished[0], tmp_path, dirs_exist_ok=True)
    store = Store(tmp_path / "store")
    before = sorted((r["id"], r["variant"], r["seed"], r["status"], r["best_val_loss"]) for r in store.runs())
    store.close()
    (tmp_path / "store" / "index.sqlite").write_bytes(b"garbage")  # lost or corrupted: rebuild it
    for suffix in ("-wal", "-shm"):
        Path(str(tmp_path / "store" / "index.sqlite") + suffix).unlink(missing_ok=True)
    assert Store(tmp_path / "store").reindex() == 4
    after = sorted((r["id"], r["variant"], r["seed"], r["status"], r["best_val_loss"])
                   for r in Store(tmp_path / "store").runs())
    assert after == before


def test_export_runs_and_curves_as_csv_and_parquet(finished, tmp_path):
    import csv

    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is in the [test] extra")
    store = Store(finished[0] / "store")
    from reslab.sweep.export import export

    files = export(store.runs(), tmp_path / "out", "csv")
    runs = list(csv.DictReader(files[0].open()))
    assert sorted((r["variant"], r["seed"]) for r in runs) == [("full", "1"), ("full", "2"), ("none", "1"),
                                                                ("none", "2")]
    curve = list(csv.DictReader(files[1].open()))
    full = [r for r in curve if r["variant"] == "full" and r["seed"] == "1" and r["val_loss"]]
    assert [int(r["step"]) for r in full] == [0, 10, 20, 30]
    files = export(store.runs(), tmp_path / "out", "parquet")
    table = pq.read_table(files[1]).to_pylist()
    assert len(table) == len(curve)
    assert not _partial_files(tmp_path / "out")


def test_submitit_local_executor_runs_the_same_path(finished, tmp_path):
    pytest.importorskip("submitit", reason="submitit is in the [test] extra")
    spec = with_seeds(finished[1], 1)
    store, result = _sweep(spec, tmp_path / "store", executor="submitit-local")
    assert result.count("completed") == 2
    assert store.runs(status="completed")[0]["wall_s"] > 0
    ours, ref = _folders(tmp_path / "store"), _folders(finished[0] / "store")
    assert set(ours) < set(ref)
    for run_id in ours:  # the same runs, trained the same way
        assert_same_curves(curves(ours[run_id]), curves(ref[run_id]), rel=1e-6)


def test_sigkill_the_sweep_mid_training_then_finish(tmp_path):
    """Kill the orchestrator with SIGKILL at least 3 times, each time once a chosen run has trained
    a drawn number of steps past its last checkpoint (observed in its metrics, never timed), and
    check after each kill that the run was caught mid-training: its workers gone, its status still
    "running", its last step short of the end. Then rerun until done: every run completes exactly
    once, every curve equals the uninterrupted sweep's, the index is intact and no partially
    written file is left."""
    steps = 60
    data = spec_dict(tmp_path, steps=steps, checkpoint_interval=5, eval_interval=10)
    path = write_spec(tmp_path, data)
    spec = load_spec(path)
    _sweep(spec, tmp_path / "ref")                       # the uninterrupted reference
    store = tmp_path / "store"
    planned = [Store(store).folder_for(r.id, r.label) for r in expand(spec)]
    cmd = [sys.executable, "-m", "reslab.cli", "sweep", "run", str(path), "--store", str(store), "--jobs", "2"]
    seed = kill_seed()
    rng = random.Random(seed)
    landed, rounds = [], 0
    while len(landed) < 3:
        rounds += 1
        assert rounds <= 12, f"only {len(landed)} kills landed mid-training in 12 rounds (RESLAB_TEST_SEED={seed})"
        # a run with room left: the kill step lies at least 15 updates before its end
        room = [f for f in planned if max(checkpoint_steps(f), default=0) + 1 <= steps - 15]
        assert room, f"no run left to interrupt (RESLAB_TEST_SEED={seed})"
        target = rng.choice(room)
        resume_from = max(checkpoint_steps(target), default=0)
        kill_at = rng.randint(resume_from + 1, min(resume_from + 12, steps - 15))
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: last_step(target) >= kill_at or proc.poll() is not None,
                   f"{target.name} reach step {kill_at}", seed)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        wait_until(lambda: all(lock_is_free(f) for f in planned if f.is_dir()),
                   "the workers die with the sweep", seed)  # PR_SET_PDEATHSIG
        caught = status(target) == "running" and kill_at <= last_step(target) < steps
        if caught:
            landed.append((target.name, kill_at, last_step(target)))
    final = subprocess.run(cmd, capture_output=True, text=True)
    assert final.returncode == 0, final.stderr
    ours, ref = _folders(store), _folders(tmp_path / "ref")
    assert ours.keys() == ref.keys()  # one folder per run, no duplicates
    for run_id, folder in ours.items():
        assert curves(folder) == curves(ref[run_id]), (folder.name, landed, seed)  # each step once, same values
    db = sqlite3.connect(store / "index.sqlite")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    statuses = db.execute("SELECT status, COUNT(*) FROM runs GROUP BY status").fetchall()
    assert statuses == [("completed", 4)]
    assert db.execute("SELECT COUNT(*) FROM members").fetchone()[0] == 4
    assert not _partial_files(store)


def test_two_sweeps_share_a_run_with_the_same_identity(finished, tmp_path):
    """A run another sweep already trained (same resolved config, other display name) is reused,
    not retrained, and belongs to both sweeps."""
    shutil.copytree(finished[0], tmp_path, dirs_exist_ok=True)
    other = spec_dict(finished[0], seeds=[1], name="other")
    other["variants"] = {"base": {}, "lower-lr": {"optim": {"lr": 1e-3}}}
    other.pop("baseline")
    store, result = _sweep(parse_spec(other), tmp_path / "store")
    assert result.skipped == 1 and result.count("completed") == 2  # "base" is demo's "full", seed 1
    shared = [r for r in store.runs() if r["variant"] in ("full", "base") and r["seed"] == 1]
    assert {r["spec"] for r in shared} == {"demo", "other"} and len({r["id"] for r in shared}) == 1


def test_stacked_sweep_gives_each_run_its_separate_curve(finished, tmp_path):
    """--stack always on CPU: the two seeds of each variant train stacked in one worker; every run's
    folder, status and index row are as in the unstacked sweep, and its curve equal within float
    tolerance (dropout is 0 in these specs)."""
    src, spec, _ = finished
    store, result = _sweep(spec, tmp_path / "store", jobs=2, stack="always")
    assert result.count("completed") == 4
    rows = store.runs(spec="demo")
    assert all(r["status"] == "completed" for r in rows)
    for run_id, folder in _folders(tmp_path / "store").items():
        status = json.loads((folder / "status.json").read_text())
        assert status["stacked"] == 2 and len(status["stacked_with"]) == 1
        reference = _folders(src / "store")[run_id]
        for (s1, t1, v1), (s2, t2, v2) in zip(curves(folder), curves(reference), strict=True):
            assert s1 == s2
            for a, b in ((t1, t2), (v1, v2)):
                assert (a is None) == (b is None) and (a is None or abs(a - b) <= 1e-4 * max(1.0, abs(b)))
    # a rerun finds them finished: nothing retrained
    again = run_sweep(spec, store, jobs=2, stream=io.StringIO(), log=lambda *_: None, stack="always")
    assert again.skipped == 4


def test_stacked_tasks_group_seeds_of_one_design_at_one_checkpoint(finished, tmp_path):
    from reslab.sweep.runner import stacked_tasks
    from reslab.spec.expand import expand

    _, spec, _ = finished
    runs = expand(spec)
    todo = [(r, tmp_path / r.id) for r in runs]
    groups = stacked_tasks(todo, "always", gpus=0, stack_size=8)
    assert sorted(sorted(r.seed for r, _ in g) for g in groups) == [[1, 2], [1, 2]]
    assert all(len({r.variant for r, _ in g}) == 1 for g in groups)
    assert [len(g) for g in stacked_tasks(todo, "auto", gpus=0, stack_size=8)] == [1, 1, 1, 1]  # CPU: off
    assert [len(g) for g in stacked_tasks(todo, "auto", gpus=1, stack_size=8)] == [2, 2]
    assert [len(g) for g in stacked_tasks(todo, "always", gpus=0, stack_size=1)] == [1, 1, 1, 1]
    assert [len(g) for g in stacked_tasks(todo, "never", gpus=1, stack_size=8)] == [1, 1, 1, 1]
    # a run with a checkpoint does not stack with a fresh seed of its design
    first = todo[0][1] / "checkpoints" / "step_00000010"
    first.mkdir(parents=True)
    (first / "state.json").write_text("{}")
    assert sorted(len(g) for g in stacked_tasks(todo, "always", gpus=0, stack_size=8)) == [1, 1, 2]


def test_bad_stack_options_are_refused_before_anything_is_written(tmp_path):
    from reslab.errors import ReslabError

    spec = parse_spec(spec_dict(tmp_path))
    for kw, message in (({"stack": "sometimes"}, "--stack"), ({"stack_size": 0}, "--stack-size")):
        with pytest.raises(ReslabError, match=message):
            _sweep(spec, tmp_path / "store", **kw)
    assert not (tmp_path / "store" / "runs").exists()
