"""What the training loop asks of an engine. The loop (loop.py) owns the schedule: when to
evaluate, checkpoint, measure diagnostics, log, and when a run has diverged. An engine owns the
computation: the model(s), the optimizer, one update, an evaluation, and the files of a save.

    SingleEngine   (single.py)   one model: plain, DDP or FSDP
    StackedEngine  (stacked.py)  K seeds of one design vmapped in one process

Values come back as lists indexed by Run.k (one entry for a single run)."""

from __future__ import annotations

from typing import Callable, Protocol

from .runs import Run


class Engine(Protocol):
    runs: list[Run]
    start: int                  # completed updates every run resumes from (0: a fresh start)
    world: int                  # processes that share one run's batch (DDP/FSDP), for tokens and MFU
    stacked: bool               # the runs are seeds computed together (status.json records it)
    inf_grad_is_skip: bool      # fp16's grad scaler skips an update with inf gradients: not divergence

    def set_step(self, step: int) -> None:
        """Step-dependent model state (ProRes alphas) for evaluating and updating at `step`."""

    def evaluate(self, batches: list) -> list[float]:
        """Mean validation loss of every run over `batches`."""

    def save_best(self, run: Run, step: int, val_loss: float) -> None:
        """Keep `run`'s model as its best so far (called on every rank: FSDP gathers collectively)."""

    def save_checkpoint(self, step: int, runs: list[Run]) -> None:
        """A resumable checkpoint of each of `runs` at `step` (called on every rank)."""

    def update(self, step: int, lr: float, before_clip: Callable[[], None] | None) -> tuple[list, list]:
        """Gradients of update `step` at learning rate `lr`, clipped: (train losses, grad norms
        before clipping). before_clip runs once the gradients are whole. The optimizer has not stepped."""

    def train_grad_norms(self, run: Run) -> dict:
        """Diagnostics' per-layer gradient norms of `run`, read inside before_clip."""

    def optimizer_step(self) -> None:
        """Apply the update whose gradients `update` left, and clear them."""
