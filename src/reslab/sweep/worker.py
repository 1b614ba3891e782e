"""One task of a sweep, in its own process:  python -m reslab.sweep.worker RUN_DIR [RUN_DIR ...]

Reads each planned config from RUN_DIR/sweep.json and trains it (resuming if the folder holds a
checkpoint). Several folders are seeds of one design, trained stacked in this one process
(reslab/train/stacked.py). The thread budget comes from RESLAB_THREADS (set by the runner).
Exit status: 0 completed, 3 diverged (one run), 75 a folder is busy (another process trains it),
1 failed. For a stack, 0 means it ran to the end: each folder's status.json says how each run ended.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

EXIT_COMPLETED, EXIT_FAILED, EXIT_DIVERGED, EXIT_BUSY = 0, 1, 3, 75


def run(*run_dirs: str | Path) -> int:
    from ..errors import ReslabError
    from ..fileio import read_json
    from ..train.config import build_run_config
    from ..train.loop import train, train_stacked
    from ..train.run_folder import FolderBusy, RunFolder

    run_dirs = [Path(d) for d in run_dirs]
    threads = os.environ.get("RESLAB_THREADS")
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    try:
        cfgs = [build_run_config(read_json(d / "sweep.json", "sweep membership")["config"],
                                 where=str(d / "sweep.json")) for d in run_dirs]
        if len(cfgs) == 1:
            return EXIT_COMPLETED if train(cfgs[0], run_dirs[0], log=log).status == "completed" else EXIT_DIVERGED
        train_stacked(cfgs, run_dirs, log=log)
        return EXIT_COMPLETED
    except FolderBusy as e:
        print(f"reslab: {e}", file=sys.stderr)
        return EXIT_BUSY
    except Exception as e:  # recorded in status.json; the sweep goes on with the other runs
        message = "; ".join(e.lines()) if isinstance(e, ReslabError) else f"{type(e).__name__}: {e}"
        for d in run_dirs:
            folder = RunFolder(d)
            if folder.read_status().get("status") not in ("failed", "completed", "diverged"):
                folder.write_status(status="failed", error=message)  # the loops record their own failures
        import traceback

        traceback.print_exc()
        return EXIT_FAILED


def main() -> int:
    from .lifetime import watch_parent

    watch_parent()  # off Linux: exit when the sweep dies (on Linux the kernel does it)
    if len(sys.argv) < 2:
        print("usage: python -m reslab.sweep.worker RUN_DIR [RUN_DIR ...]", file=sys.stderr)
        return 2
    return run(*sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
