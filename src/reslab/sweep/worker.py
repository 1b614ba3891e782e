"""One run of a sweep, in its own process:  python -m reslab.sweep.worker RUN_DIR

Reads the planned config from RUN_DIR/sweep.json and trains it (resuming if the folder holds a
checkpoint). The thread budget comes from RESLAB_THREADS (set by the runner). Exit status:
0 completed, 3 diverged, 75 the folder is busy (another process trains it), 1 failed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

EXIT_COMPLETED, EXIT_FAILED, EXIT_DIVERGED, EXIT_BUSY = 0, 1, 3, 75


def run(run_dir: str | Path) -> int:
    from ..errors import ReslabError
    from ..fileio import read_json
    from ..train.config import build_run_config
    from ..train.loop import train
    from ..train.run_folder import FolderBusy, RunFolder

    run_dir = Path(run_dir)
    threads = os.environ.get("RESLAB_THREADS")
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    try:
        cfg = build_run_config(read_json(run_dir / "sweep.json", "sweep membership")["config"],
                               where=str(run_dir / "sweep.json"))
        result = train(cfg, run_dir, log=lambda msg: print(msg, file=sys.stderr, flush=True))
    except FolderBusy as e:
        print(f"reslab: {e}", file=sys.stderr)
        return EXIT_BUSY
    except Exception as e:  # recorded in status.json; the sweep goes on with the other runs
        folder = RunFolder(run_dir)
        if folder.read_status().get("status") != "failed":  # train records failures inside its loop
            message = "; ".join(e.lines()) if isinstance(e, ReslabError) else f"{type(e).__name__}: {e}"
            folder.write_status(status="failed", error=message)
        import traceback

        traceback.print_exc()
        return EXIT_FAILED
    return EXIT_COMPLETED if result.status == "completed" else EXIT_DIVERGED


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: python -m reslab.sweep.worker RUN_DIR", file=sys.stderr)
        return 2
    return run(sys.argv[1])


if __name__ == "__main__":
    sys.exit(main())
