"""Optional metric sinks beside metrics.jsonl: TensorBoard and Weights & Biases, when installed.

Every numeric field of a metrics row is logged under its own name (train_loss, val_loss, lr,
grad_norm, tokens_per_s, mfu) at the row's step, so both tools show exactly what metrics.jsonl holds.

A resumed run continues where its last checkpoint left off (metrics.jsonl has been cut back to it
when the sinks open):
  - TensorBoard: the new event file starts with a purge marker at the first step trained again, so
    the rows the interrupted process logged after that checkpoint are hidden (TensorBoard's own
    purge_step mechanism), and the curves equal metrics.jsonl's.
  - W&B: the run folder's name is the W&B run id and the run is opened with resume="allow", so a
    resumed run continues the same W&B run (offline: a second offline run with the same id, which
    `wandb sync` merges). Steps the server already holds (below the resumed run's starting_step) are
    not sent again: W&B would refuse them.
Seeds trained as one stack (train/stacked.py) open one W&B run each in the same process
(reinit="create_new", wandb >= 0.19.10).
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

from ..errors import ReslabError


def _last_logged_step(run_path: Path) -> int | None:
    """The largest step in run_path/metrics.jsonl (None when it has no rows); a cut last line is ignored."""
    try:
        lines = (run_path / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    steps = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            steps.append(row["step"])
    return max(steps) if steps else None


def _wandb_version(wandb) -> tuple[int, ...]:
    """wandb.__version__ as numbers ("0.31.0" -> (0, 31, 0)); unknown parts count as 0."""
    parts = []
    for piece in str(getattr(wandb, "__version__", "0")).split(".")[:3]:
        digits = "".join(itertools.takewhile(str.isdigit, piece))
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0]


class Sinks:
    def __init__(self, t_cfg, run_path, name: str, config: dict):
        self.tb = self.wandb = None
        self._wandb_from = 0  # W&B: steps below this are already in the (resumed) W&B run
        run_path = Path(run_path)
        if t_cfg.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ReslabError("train.tensorboard: the tensorboard package is not installed "
                                  "(pip install tensorboard)") from None
            tb_dir = run_path / "tensorboard"
            purge_step = None
            if tb_dir.is_dir() and any(tb_dir.glob("events.*")):  # resumed: hide what is trained again
                last = _last_logged_step(run_path)
                purge_step = 0 if last is None else last + 1
            self.tb = SummaryWriter(str(tb_dir), purge_step=purge_step)
        if t_cfg.wandb:
            try:
                import wandb
            except ImportError:
                self.close()
                raise ReslabError("train.wandb: the wandb package is not installed (pip install wandb)") from None
            # The run folder's name is the W&B id, so a resumed run continues the same W&B run.
            # reinit="create_new": stacked seeds (train/stacked.py) are several runs in one process;
            # W&B's default would hand every member the first member's run.
            options = {"reinit": "create_new"} if _wandb_version(wandb) >= (0, 19, 10) else {}
            try:
                self.wandb = wandb.init(project=t_cfg.wandb_project, name=name, id=run_path.name,
                                        resume="allow", config=config, dir=str(run_path), **options)
            except Exception as e:  # wandb raises its own types (bad id, login, network): one line
                self.close()
                raise ReslabError(f"train.wandb: wandb.init failed for run id {run_path.name!r}: "
                                  f"{type(e).__name__}: {_first_line(e)}") from None
            self._wandb_from = int(getattr(self.wandb, "starting_step", 0) or 0)

    def log(self, row: dict) -> None:
        scalars = {k: v for k, v in row.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"}
        step = row["step"]
        if self.tb:
            for key, value in scalars.items():
                self.tb.add_scalar(key, value, step)
        if self.wandb and step >= self._wandb_from:
            self.wandb.log(scalars, step=step)

    def close(self, failed: bool | None = None) -> None:
        """Flush and close. `failed` (default: whether an exception is propagating) marks the W&B run failed."""
        if failed is None:
            failed = sys.exc_info()[0] is not None
        if self.tb:
            self.tb.close()
            self.tb = None
        if self.wandb:
            run, self.wandb = self.wandb, None
            run.finish(exit_code=1 if failed else 0)
