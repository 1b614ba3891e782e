"""The engine of one run: one model, plain, DDP (a replica per process, gradients all-reduced) or
FSDP (parameters sharded across processes). Every rank computes; rank 0 writes."""

from __future__ import annotations

import contextlib

import torch

from ..model.gpt import GPT
from ..model.io import WEIGHTS, load_weights
from . import distributed
from .checkpoint import complete_checkpoints, load_optimizer_tensors, read_checkpoint, save_best, save_checkpoint
from .determinism import rng_state, set_rng_state
from .optim import build_optimizer
from .runs import Run
from .runtime import Runtime


@torch.no_grad()
def evaluate(model, batches: list, device, autocast) -> float:
    was_training = model.training
    model.eval()
    total = 0.0
    for x, y in batches:
        with autocast():
            _, loss = model(x.to(device), y.to(device))
        total += loss.item()
    model.train(was_training)
    return total / len(batches)


class SingleEngine:
    stacked = False

    def __init__(self, run: Run, rt: Runtime, resuming: bool, log):
        """Build the model and its optimizer, resuming from the run's newest complete checkpoint."""
        t_cfg, d = run.cfg.train, rt.dist
        self.runs, self.rt, self.cfg = [run], rt, run.cfg
        self.world = d.world
        seeds = run.seeds
        raw_model = GPT(run.cfg.model, seed=seeds.init).to(rt.device)
        raw_model.layer_drop_seed = seeds.dropout  # stochastic depth: the same layers on every rank
        checkpoints = complete_checkpoints(run.folder.ckpt_dir)
        ckpt = (checkpoints[-1], *read_checkpoint(checkpoints[-1])) if checkpoints else None
        if ckpt:
            load_weights(raw_model, ckpt[2], str(ckpt[0] / WEIGHTS))  # before wrapping: FSDP shards what it finds
        self.model = distributed.wrap(raw_model, d, rt.device, t_cfg.parallel)
        self.raw_model = run.model = raw_model
        self.sharded = distributed.sharded(d, t_cfg.parallel)
        self.optimizer = build_optimizer(raw_model, run.cfg.optim, rt.device.type)  # after wrapping: FSDP swaps parameters
        self.scaler = torch.amp.GradScaler(rt.device.type, enabled=rt.dtype == "float16")
        self.inf_grad_is_skip = self.scaler.is_enabled()
        torch.manual_seed(seeds.dropout + d.rank)  # the global RNG now feeds dropout only
        state = self._resume(ckpt, run, log)
        self.start = state["step"] if state else 0
        run.resume_books(resuming, state["step"] if state else None, state)
        if t_cfg.compile:
            self.model = torch.compile(self.model)
        self.model.train()

    def _resume(self, ckpt, run: Run, log) -> dict | None:
        """Restore the optimizer, the RNG and the grad scaler from `ckpt` (its weights are already
        loaded); its state.json, or None for a fresh start."""
        if ckpt is None:
            return None
        d = self.rt.dist
        path, state, _, opt_tensors = ckpt
        if self.sharded:
            distributed.load_sharded_optimizer(self.model, self.optimizer, opt_tensors, state["param_groups"])
        else:
            load_optimizer_tensors(self.optimizer, opt_tensors, state["param_groups"],
                                   str(path / "optimizer.safetensors"), groups_where=str(path / "state.json"))
        rngs = state["rng"]
        set_rng_state(rngs[d.rank] if d.rank < len(rngs) else rngs[0])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        if d.main:
            log(f"resuming {run.folder.path} from step {state['step']}")
        return state

    def set_step(self, step: int) -> None:
        self.raw_model.set_step(step)  # ProRes alpha(l, t) for t = step, for evaluation and update

    def evaluate(self, batches: list) -> list[float]:
        return [evaluate(self.model, batches, self.rt.device, self.rt.autocast)]

    def save_best(self, run: Run, step: int, val_loss: float) -> None:
        # FSDP: gathering the full state is collective, so every rank takes part
        state = distributed.gather_full_state(self.model)[0] if self.sharded else None
        if self.rt.dist.main:
            save_best(run.folder.ckpt_dir, step, self.raw_model, val_loss, state=state)

    def save_checkpoint(self, step: int, runs: list[Run]) -> None:
        if not runs:
            return
        (run,) = runs
        d = self.rt.dist
        state = {"rng": distributed.gather_objects(d, rng_state()), "best_val_loss": run.best,
                 "data_cursor": {"step": step, "micro": 0},
                 "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None}
        gathered = distributed.gather_full_state(self.model, self.optimizer) if self.sharded else None
        if d.main:
            save_checkpoint(run.folder.ckpt_dir, step, self.raw_model, self.optimizer, state,
                            self.cfg.train.keep_checkpoints, gathered=gathered)

    def update(self, step: int, lr: float, before_clip=None) -> tuple[list, list]:
        """grad_accum micro-batches, unscale, clip; ([mean loss over ranks], [global grad norm])."""
        t_cfg, rt, d = self.cfg.train, self.rt, self.rt.dist
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        batches = self.runs[0].batches
        loss_sum = torch.zeros((), device=rt.device)
        for i in range(t_cfg.grad_accum):
            x, y = batches.get(step, d.rank * t_cfg.grad_accum + i)
            x, y = x.to(rt.device, non_blocking=True), y.to(rt.device, non_blocking=True)
            sync = not d.active or i == t_cfg.grad_accum - 1  # DDP all-reduces on the last micro-batch
            with (self.model.no_sync() if not sync and hasattr(self.model, "no_sync") else contextlib.nullcontext()):
                with rt.autocast():
                    _, loss = self.model(x, y)
                if t_cfg.nan_at_step is not None and step == t_cfg.nan_at_step:
                    loss = loss * float("nan")
                self.scaler.scale(loss / t_cfg.grad_accum).backward()
            loss_sum += loss.detach()
        self.scaler.unscale_(self.optimizer)
        if before_clip is not None:
            before_clip()
        clip = self.cfg.optim.grad_clip if self.cfg.optim.grad_clip > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), clip)
        if hasattr(grad_norm, "full_tensor"):  # FSDP: a DTensor holding the global norm
            grad_norm = grad_norm.full_tensor()
        return [distributed.mean_across(d, loss_sum / t_cfg.grad_accum).item()], [float(grad_norm)]

    def train_grad_norms(self, run: Run) -> dict:
        return run.diag.train_grad_norms()

    def optimizer_step(self) -> None:
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.raw_model.after_optimizer_step()  # nGPT: weights back onto the unit sphere; else nothing
