"""One run folder as the training loop keeps its books: the run's config, seeds and batches, its
best and last evaluation, its status, metrics rows, sinks and diagnostics. A single run is a list
of one Run; stacked seeds are one Run per seed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..data.batches import TrainBatches
from ..diagnostics import Diagnostics, DiagnosticsFile, spike_score
from ..model.gpt import GPT
from .config import RunConfig
from .determinism import derive_seed
from .run_folder import RunFolder
from .sinks import Sinks


@dataclass
class RunResult:
    status: str                 # completed / diverged
    step: int
    best_val_loss: float | None
    final_val_loss: float | None
    path: Path


@dataclass(frozen=True)
class Seeds:
    """The three random streams of a run, each its explicit seed or one derived from train.seed."""
    init: int
    data: int
    dropout: int

    @classmethod
    def of(cls, cfg: RunConfig) -> "Seeds":
        t = cfg.train
        pick = lambda explicit, stream: explicit if explicit is not None else derive_seed(t.seed, stream)  # noqa: E731
        return cls(pick(t.init_seed, "init"), pick(t.data_seed, "data"), pick(t.dropout_seed, "dropout"))


@dataclass
class Run:
    k: int                               # its index in the engine's results (seed k of a stack)
    cfg: RunConfig
    folder: RunFolder
    batches: TrainBatches
    writes: bool = True                  # False on DDP/FSDP ranks other than 0: they compute, rank 0 writes
    model: GPT | None = None             # the run's model as an ordinary GPT (a member view when stacked)
    active: bool = True                  # False once finished or diverged
    status: str = "completed"
    diverged_at: int | None = None
    best: float | None = None
    final_val: float | None = None
    last_train_loss: float | None = None
    sinks: Sinks | None = None
    diag: Diagnostics | None = None
    diag_file: DiagnosticsFile | None = None
    diag_row: dict | None = field(default=None, repr=False)

    @property
    def seeds(self) -> Seeds:
        return Seeds.of(self.cfg)

    def log(self, row: dict) -> None:
        if self.writes:
            self.folder.log(row)
            if self.sinks:
                self.sinks.log(row)

    def write_status(self, **fields) -> None:
        if self.writes:
            self.folder.write_status(**fields)

    def resume_books(self, resuming: bool, step: int | None, state: dict | None) -> None:
        """Cut metrics back to the checkpoint at `step` (None: none, start again) and take its best
        val loss and the last evaluation before it."""
        if step is None:
            if resuming and self.writes:
                self.folder.truncate_metrics(-1)  # killed before its first checkpoint: start again
            return
        if self.writes:
            self.folder.truncate_metrics(step)
        self.best = state.get("best_val_loss")
        evals = [r["val_loss"] for r in self.folder.read_metrics() if "val_loss" in r and r["step"] <= step]
        self.final_val = evals[-1] if evals else None

    def finish_diagnostics(self) -> None:
        if self.diag_row is not None:
            self.diag_file.log(self.diag_row)
            self.diag_row = None

    def close(self) -> None:
        if self.diag_file:
            self.diag_file.close()
        if self.sinks:
            self.sinks.close()

    def result(self, steps: int) -> RunResult:
        final_step = self.diverged_at if self.status == "diverged" else steps
        return RunResult(self.status, final_step, self.best,
                         self.final_val if self.status == "completed" else None, self.folder.path)


def finished_result(folder: RunFolder) -> RunResult | None:
    """The result status.json records for a completed or diverged run, else None."""
    status = folder.read_status()
    if status.get("status") not in ("completed", "diverged"):
        return None
    return RunResult(status["status"], status.get("step", 0), status.get("best_val_loss"),
                     status.get("final_val_loss"), folder.path)


def write_final_status(folder: RunFolder, cfg: RunConfig, status: str, final_step: int, best, final_val,
                       last_train_loss) -> None:
    """status.json at the end of a run, with the loss-spike scores (diagnostics on or off: cheap)."""
    g_cfg, rows = cfg.diagnostics, folder.read_metrics()
    spikes = {key: spike_score([r[key] for r in rows if key in r], g_cfg.spike_window, g_cfg.spike_threshold)
              for key in ("train_loss", "grad_norm")}
    folder.write_status(status=status, step=final_step, best_val_loss=best,
                        final_val_loss=final_val if status == "completed" else None,
                        last_train_loss=last_train_loss, spike_score_loss=spikes["train_loss"],
                        spike_score_grad_norm=spikes["grad_norm"])
