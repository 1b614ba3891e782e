"""Run a sweep: plan, skip what is finished, train the rest in parallel worker slots, index it all.

    for each planned run:  finished (completed / diverged) -> skip;  else queue (resumes if it can)
    local executor:  `jobs` slots, each a `python -m reslab.sweep.worker RUN_DIR...` process
                     CPU: each slot gets cores // jobs threads;  GPU: each slot its own CUDA_VISIBLE_DEVICES
                     stacking: seeds of one design (configs equal up to name and seeds, at the same
                     checkpoint) share one worker, trained stacked in one process (train/stacked.py):
                     by default on GPUs only (--stack auto), up to --stack-size seeds per worker
    slurm executor:  one array task per run through submitit (see executors.py)
    [tune]:          a scale that tunes first trains the tuning sweep <spec>.tune, then each row's
                     comparison runs at the value it chose (two phases of the above; spec/tune.py, sweep/tune.py)

Only this orchestrating process writes the index. Workers die with it (lifetime.py), and a
run folder is locked while trained, so a killed-and-restarted sweep never trains a run twice at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ReslabError
from ..progress import format_duration
from ..spec.expand import PlannedRun, chosen_scales, expand
from ..spec.schema import SweepSpec
from ..spec.tune import TuningChoice
from ..spec.tune_plan import check_override_conflict, tuning_runs, tuning_spec
from ..train.run_folder import RunFolder
from .eta import TimeLeft, run_work
from .lifetime import worker_popen_kwargs
from .store import FINISHED, Store, run_row_from_folder
from .tune import choice_line, extension_line, tuned_values, tuning_plan
from .worker import EXIT_BUSY, EXIT_COMPLETED, EXIT_DIVERGED


@dataclass
class SweepResult:
    planned: int                       # runs of every phase (tuning and comparison)
    skipped: int = 0                   # already finished before this invocation
    tuning: int = 0                    # of them, [tune] runs (spec/tune_plan.py)
    statuses: dict = field(default_factory=dict)   # run id -> completed / diverged / failed
    wall_s: float = 0.0

    def count(self, status: str) -> int:
        return sum(1 for s in self.statuses.values() if s == status)

    def merge(self, other: "SweepResult") -> None:
        """Add one phase's counts (its run ids are its own: tuning seeds differ from the spec's)."""
        self.planned += other.planned
        self.skipped += other.skipped
        self.statuses.update(other.statuses)


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _gpus_for(runs: list[PlannedRun]) -> int:
    """How many GPUs the sweep's workers can share (0: the runs train on the CPU)."""
    if not runs or all(r.config.train.device == "cpu" for r in runs):
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def default_jobs(runs: list[PlannedRun]) -> int:
    """One worker per GPU; on CPU one single-threaded worker per core (measured fastest for small
    models on 2 cores: see README, Sweeps)."""
    return _gpus_for(runs) or cpu_count()


def plan_status(store: Store, runs: list[PlannedRun]) -> list[tuple[PlannedRun, Path, str]]:
    """(run, folder, status) for every planned run; status from the folder (pending if new)."""
    out = []
    for run in runs:
        folder = store.folder_for(run.id, run.label)
        out.append((run, folder, RunFolder(folder).read_status().get("status", "pending")))
    return out


def record_spec(store: Store, spec: SweepSpec, runs: list[PlannedRun], source: str,
                scales: list[str] | None = None, tuned: list[TuningChoice] | None = None) -> None:
    """specs/<name>.json: the spec and its planned runs. The plan of each scale run now replaces that
    scale's earlier plan; other scales' plans are kept (a cpu and a paper run of one study coexist).
    `scales` names the scales run now (default: those of `runs`; a scale whose rows all wait for
    tuning has no runs yet). `tuned`: the [tune] choices of those scales ("tuned" in the record)."""
    scales = set(scales) if scales is not None else {r.scale for r in runs}
    kept, kept_tuned = [], []
    if (store.specs_dir / f"{spec.name}.json").is_file():
        old = store.load_spec_record(spec.name)
        kept = [r for r in old.get("runs", []) if r["scale"] not in scales]
        kept_tuned = [c for c in old.get("tuned") or [] if isinstance(c, dict) and c.get("scale") not in scales]
        # (the other scales' choices are kept as recorded: this sweep did not read their runs)
    record = {"spec": spec.to_dict(), "source": source,
              "runs": kept + [dict(r.membership(), id=r.id, label=r.label) for r in runs]}
    if tuned or kept_tuned:
        record["tuned"] = kept_tuned + [c.to_dict() for c in tuned or []]
    store.save_spec(spec.name, record)


class SweepView:
    """The live view of a sweep: one line with done / running / failed / queued and the time left
    (eta.py: weighted by each run's work, so large runs still queued are not counted as small ones),
    redrawn on a terminal, printed on every change otherwise; finished runs get a line each."""

    def __init__(self, name: str, total: int, jobs: int, stream=None, work: dict[str, float] | None = None):
        self.name, self.total, self.jobs = name, total, jobs
        self.stream = stream or sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.time_left = TimeLeft(work or {})
        self.last = ""

    def line(self, done: int, running: int, failed: int, diverged: int, queued: int) -> str:
        left = self.time_left.seconds(self.jobs)
        eta = "--" if left is None else f"about {format_duration(left)}"
        return (f"sweep {self.name}: {done}/{self.total} done ({diverged} diverged), {running} running, "
                f"{failed} failed, {queued} queued, time left {eta}")

    def show(self, **counts) -> None:
        text = self.line(**counts)
        if text == self.last:
            return
        self.last = text
        self.stream.write(f"\r\033[K{text}" if self.tty else text + "\n")
        self.stream.flush()

    def message(self, text: str) -> None:
        self.stream.write(("\r\033[K" if self.tty else "") + text + "\n")
        self.stream.flush()
        self.last = ""

    def close(self) -> None:
        if self.tty and self.last:
            self.stream.write("\n")


STACK_MODES = ("auto", "always", "never")


def _checkpoint_step(folder: Path) -> int | None:
    from ..train.checkpoint import complete_checkpoints

    steps = complete_checkpoints(folder / "checkpoints")
    return int(steps[-1].name.split("_")[1]) if steps else None


def stacked_tasks(todo: list, stack: str, gpus: int, stack_size: int) -> list[list]:
    """Group the (run, folder) pairs into worker tasks: seeds of one design at the same checkpoint
    step share a task (at most stack_size each) when stacking is on; every other run is its own task.
    Order follows the first run of each task in `todo`."""
    if stack == "never" or (stack == "auto" and not gpus) or stack_size < 2:
        return [[item] for item in todo]
    from ..train.stacked import stack_key, stack_refusal

    groups: dict[tuple, list] = {}
    for run, folder in todo:
        groups.setdefault((stack_key(run.config), _checkpoint_step(folder)), []).append((run, folder))
    tasks = []
    for members in groups.values():
        if stack_refusal([r.config for r, _ in members]):
            tasks.extend([m] for m in members)
            continue
        tasks.extend(members[i:i + stack_size] for i in range(0, len(members), stack_size))
    first = {id(item[1]): i for i, item in enumerate(todo)}
    return sorted(tasks, key=lambda task: first[id(task[0][1])])


def _prepare_data(runs: list[PlannedRun], log) -> None:
    """Tokenize every distinct dataset once, here, before workers start (they then only read it).

    A sweep refuses TinyShakespeare's KJV fallback: the store keys runs by their planned config, so a
    run trained on the fallback would be reused later as a TinyShakespeare result."""
    from ..data import prepare_dataset

    seen = set()
    for run in runs:
        key = json.dumps(run.config.data.__dict__, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            data = prepare_dataset(run.config.data, progress=False, log=log)
            if run.config.data.corpus == "tinyshakespeare" and data.meta.get("corpus") != "tinyshakespeare":
                raise ReslabError(
                    f"run {run.label}: TinyShakespeare was not found, and a sweep does not train on the "
                    f"{data.meta.get('corpus')} fallback under TinyShakespeare's run identities; put input.txt "
                    f"in $RESLAB_DATA_DIR/tinyshakespeare/ or a shared/data/tinyshakespeare/ folder above this "
                    f"one, set data.path, or set data.corpus = \"kjv\" to train on the fallback knowingly")


def _finish(store: Store, run_dir: Path, started: float, view: SweepView, result: SweepResult,
            run_id: str, code: int, stacked: int = 1) -> str:
    """Record one worker's end: timings into sweep.json, the folder's status into the index.
    stacked: how many runs the worker trained at once (their wall time is shared, for the estimate)."""
    wall = time.time() - started
    meta = store.read_membership(run_dir)
    store.write_membership(run_dir, run_id, meta["config"], started_at=started,
                           finished_at=time.time(), wall_s=(meta.get("wall_s") or 0.0) + wall)
    row = run_row_from_folder(run_dir)
    status = row["status"] if code != EXIT_BUSY else "busy"
    if code not in (EXIT_COMPLETED, EXIT_DIVERGED, EXIT_BUSY) and status not in ("failed", *FINISHED):
        status = row["status"] = "failed"
        row["error"] = row.get("error") or f"worker exited with status {code}; see {run_dir / 'worker.log'}"
    store.upsert_run(row)
    result.statuses[run_id] = status
    best = row.get("best_val_loss")
    detail = f"best val loss {best:.4f}" if isinstance(best, float) else (row.get("error") or "")
    if status == "busy":
        detail = "another process is training it; left alone"
    view.time_left.finished(run_id, wall / stacked, measured=status == "completed")
    view.message(f"{status:<9} {run_dir.name}  {detail}  ({wall:.0f} s)")
    return status


def run_sweep(spec: SweepSpec, store: Store, jobs: int | None = None, scales: list[str] | None = None,
              executor: str = "local", source: str = "", log=None, stream=None, stack: str = "auto",
              stack_size: int = 8) -> SweepResult:
    """Train every unfinished run of `spec` into `store`; returns what happened to each.

    A scale with a [tune] table runs in two phases (spec/tune.py): first the tuning sweep
    <spec>.tune, then each row's chosen value is recorded and the comparison runs are trained at it.
    The result counts the runs of both phases."""
    if jobs is not None and jobs < 1:  # checked before anything is written
        raise ReslabError(f"--jobs: must be at least 1, got {jobs}")
    if stack not in STACK_MODES:
        raise ReslabError(f"--stack: choose one of {', '.join(STACK_MODES)}, got {stack!r}")
    if stack_size < 1:
        raise ReslabError(f"--stack-size: must be at least 1, got {stack_size}")
    check_override_conflict(spec, scales)
    log = log or (lambda msg: print(msg, file=sys.stderr))
    t0 = time.time()
    truns = tuning_runs(spec, scales)
    result = SweepResult(planned=0)
    phase = dict(store=store, executor=executor, log=log, stream=stream, stack=stack, stack_size=stack_size)
    choices: list[TuningChoice] = []
    if truns:
        # the tuning plan grows while rows whose best is an end of their values try one more
        # (tune.extend): train what it holds until it stops growing
        jobs = jobs or default_jobs(truns)
        grid_runs, known = truns, set()
        while True:
            truns, choices = tuning_plan(spec, store, scales, grid_runs)
            new = {r.id for r in truns} - known
            if not new:
                break
            if known:
                for c in choices:
                    if c.value is None and any(c.extended.values()):
                        log(extension_line(spec.name, c, spec.tune.extend))
            result.merge(_train_phase(tuning_spec(spec), truns, jobs, source=source, only=new, **phase))
            known |= new
        result.tuning = len(truns)
        for c in choices:
            log(choice_line(spec.name, c))
    runs = expand(spec, scales, tuned=tuned_values(choices))
    jobs = jobs or default_jobs(runs)
    result.merge(_train_phase(spec, runs, jobs, source=source, record_scales=chosen_scales(spec, scales),
                              tuned=choices, **phase))
    waiting = sum(c.value is None for c in choices)
    if waiting:
        log(f"sweep {spec.name}: {waiting} rows wait for their tuning runs to finish; rerun the sweep to "
            "train their comparison runs")
    result.wall_s = time.time() - t0
    return result


def _train_phase(spec: SweepSpec, runs: list[PlannedRun], jobs: int, store: Store, executor: str, log,
                 stream, stack: str, stack_size: int, source: str, record_scales: list[str] | None = None,
                 tuned: list[TuningChoice] | None = None, only: set[str] | None = None) -> SweepResult:
    """Record `spec` with its planned runs, then train the unfinished ones (one phase of a sweep).
    `only`: the ids of the runs to count and train now (the others are recorded only: a tuning
    round after the first records the whole plan and trains what it added)."""
    record_spec(store, spec, runs, source, scales=record_scales, tuned=tuned)
    known_before = only is not None and len(only) < len(runs)   # a later round of a growing tuning plan
    if only is not None:
        runs = [r for r in runs if r.id in only]
    planned = plan_status(store, runs)
    result = SweepResult(planned=len(runs))
    todo = []
    for run, folder, status in planned:
        store.write_membership(folder, run.id, run.config.to_dict(), run.membership())
        store.add_members(run.id, [run.membership()])
        row = run_row_from_folder(folder)
        if status in FINISHED:
            result.skipped += 1
            result.statuses[run.id] = status
        elif row["status"] == "running":
            row["status"] = "interrupted"  # the folder says running, but no sweep process owns it now
        store.upsert_run(row)
        if status not in FINISHED:
            todo.append((run, folder))
    gpus = _gpus_for([r for r, _ in todo])
    tasks = stacked_tasks(todo, stack, gpus, stack_size) if executor == "local" else [[t] for t in todo]
    stacks = [len(t) for t in tasks if len(t) > 1]
    stacked_note = f", {sum(stacks)} of them stacked as {len(stacks)} multi-seed workers" if stacks else ""
    planned = (f"{len(runs)} more runs planned, for rows whose best is an end of their values" if only is not None
               and known_before else f"{len(runs)} runs planned")
    log(f"sweep {spec.name}: {planned}, {result.skipped} already finished, "
        f"{len(todo)} to train with {jobs} worker{'s' if jobs > 1 else ''}{stacked_note} (store {store.root})")
    if todo:
        _prepare_data([r for r, _ in todo], log)
        view = SweepView(spec.name, len(runs), jobs, stream, work={r.id: run_work(r.config) for r, _ in todo})
        if executor == "local":
            _run_local(tasks, store, jobs, gpus, view, result)
        else:
            from .executors import run_submitit

            run_submitit(todo, store, spec, jobs, executor, view, result, _finish)
        view.close()
    return result


def _worker_env(slot: int, jobs: int, gpus: int) -> dict:
    env = dict(os.environ)
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = str(slot % gpus)
    threads = max(1, cpu_count() // jobs)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), RESLAB_THREADS=str(threads))
    return env


def _run_local(tasks: list[list], store: Store, jobs: int, gpus: int, view: SweepView, result: SweepResult) -> None:
    queue = list(tasks)
    running: dict[int, tuple] = {}  # slot -> (process, task, started, log file)

    def counts() -> dict:
        done = sum(1 for s in result.statuses.values() if s in FINISHED)
        return dict(done=done, running=sum(len(task) for _, task, _, _ in running.values()),
                    failed=result.count("failed"), diverged=result.count("diverged"),
                    queued=sum(len(task) for task in queue))

    try:
        while queue or running:
            for slot in range(jobs):
                if slot in running or not queue:
                    continue
                task = queue.pop(0)
                folders = [folder for _, folder in task]
                for folder in folders:
                    folder.mkdir(parents=True, exist_ok=True)
                logf = open(folders[0] / "worker.log", "ab")  # a stack logs into its first run's folder
                proc = subprocess.Popen([sys.executable, "-m", "reslab.sweep.worker", *map(str, folders)],
                                        stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        **worker_popen_kwargs(_worker_env(slot, jobs, gpus)))
                running[slot] = (proc, task, time.time(), logf)
                for run, folder in task:
                    store.upsert_run({"id": run.id, "path": str(folder), "status": "running"})
            view.show(**counts())
            time.sleep(0.2)
            for slot, (proc, task, started, logf) in list(running.items()):
                code = proc.poll()
                if code is None:
                    continue
                logf.close()
                del running[slot]
                for run, folder in task:
                    _finish(store, folder, started, view, result, run.id, code, stacked=len(task))
            view.show(**counts())
    except KeyboardInterrupt:
        for proc, *_ in running.values():
            proc.terminate()
        for proc, *_ in running.values():
            proc.wait()
        raise
