"""Beyond one machine: each run of a sweep as one task of a Slurm job array, through submitit.

    --executor slurm            submitit's Slurm executor (sbatch --array, [slurm] table of the spec)
    --executor submitit-local   submitit's local executor: the same code path, on this machine (tests)

A task trains its run folder with the sweep worker; a run that asks for several GPUs
([slurm] gpus_per_run > 1) is launched with torchrun inside its task (its ranks share the task's
cpus_per_task threads); gpus_per_run = 0 asks Slurm for no GPU. The orchestrating process
waits for the tasks and writes the index as each one ends, exactly as with the local pool.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..errors import ReslabError


def torchrun_command(run_dir: str, gpus_per_run: int) -> list[str]:
    """How a task trains a run on several GPUs: one process per GPU of its node, through torchrun."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus_per_run}",
            "-m", "reslab.sweep.worker", run_dir]


def run_in_task(run_dir: str, gpus_per_run: int, threads: int) -> int:
    """The body of one array task: train one run folder; returns the worker's exit status.
    `threads` is the task's CPU budget (cpus_per_task); torchrun's processes share it."""
    if gpus_per_run > 1:
        per_rank = str(max(1, threads // gpus_per_run))
        os.environ.update(RESLAB_THREADS=per_rank, OMP_NUM_THREADS=per_rank)
        return subprocess.call(torchrun_command(run_dir, gpus_per_run))
    os.environ["RESLAB_THREADS"] = str(threads)
    from .worker import run

    return run(run_dir)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0]


def _executor(kind: str, folder: Path, spec, jobs: int):
    try:
        import submitit
    except ImportError:
        raise ReslabError(f"--executor {kind}: needs submitit (pip install 'reslab[cluster]')") from None
    s = spec.slurm
    if kind == "submitit-local":
        ex = submitit.AutoExecutor(folder=folder, cluster="local")
        ex.update_parameters(timeout_min=s.time_min)
        return ex
    missing = [c for c in ("sbatch", "srun", "sacct") if shutil.which(c) is None]
    if missing:
        raise ReslabError(f"--executor slurm: no Slurm on this machine ({', '.join(missing)} not on PATH); "
                          f"run on a Slurm login node, or use --executor local")
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
    params = dict(timeout_min=s.time_min, cpus_per_task=s.cpus_per_task,
                  tasks_per_node=1, nodes=1, slurm_array_parallelism=s.max_parallel or jobs,
                  name=f"reslab-{spec.name}")
    if s.gpus_per_run > 0:  # a CPU run asks for no GPU: no --gpus-per-node line at all
        params["gpus_per_node"] = s.gpus_per_run
    if s.partition:
        params["slurm_partition"] = s.partition
    if s.account:
        params["slurm_account"] = s.account
    if s.mem_gb:
        params["mem_gb"] = s.mem_gb
    ex.update_parameters(**params)
    return ex


def run_submitit(todo, store, spec, jobs: int, kind: str, view, result, finish) -> None:
    """Submit every run as one array; poll; record each task's end with `finish` (runner._finish)."""
    from .worker import EXIT_FAILED

    ex = _executor(kind, store.root / "submitit", spec, jobs)
    threads = max(1, spec.slurm.cpus_per_task if kind == "slurm" else 1)
    dirs = []
    for _, folder in todo:
        folder.mkdir(parents=True, exist_ok=True)
        dirs.append(str(folder))
    started = time.time()
    try:
        tasks = ex.map_array(run_in_task, dirs, [spec.slurm.gpus_per_run] * len(dirs), [threads] * len(dirs))
    except Exception as e:  # sbatch refused the array (partition, account, limits) or failed to run
        raise ReslabError(f"--executor {kind}: submitting {len(dirs)} run{'s' * (len(dirs) != 1)} failed: "
                          f"{_submission_error(e)}") from None
    for run, folder in todo:
        store.upsert_run({"id": run.id, "path": str(folder), "status": "running"})
    pending = list(zip(tasks, todo))
    while pending:
        time.sleep(0.5)
        for item in list(pending):
            task, (run, folder) = item
            if not task.done():
                continue
            pending.remove(item)
            try:
                code = task.result()
            except Exception as e:  # the task itself failed (killed, timed out, lost)
                view.message(f"task for {folder.name} failed: {type(e).__name__}: {_first_line(e)}")
                code = EXIT_FAILED
            finish(store, folder, started, view, result, run.id, code)
        view.show(done=sum(1 for s in result.statuses.values() if s in ("completed", "diverged")),
                  running=len(pending), failed=result.count("failed"), diverged=result.count("diverged"),
                  queued=0)


def _submission_error(e: BaseException) -> str:
    """sbatch's own message (its 'sbatch: error: ...' line) when there is one, else the first line."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    said = [line for line in lines if line.lower().startswith("sbatch: error")]
    return said[-1] if said else f"{type(e).__name__}: {lines[0] if lines else ''}"
