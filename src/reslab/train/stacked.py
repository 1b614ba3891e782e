"""Stacked seeds: K runs of one design that differ only in their seeds, trained in one process.

    parameters   each parameter of the K models stacked along a new leading dim: W[k] is seed k's W
    forward      torch.func.vmap over functional_call(model, W[k], x[k], y[k]) gives K losses; inside,
                 linear layers become batched matmuls and attention folds the seed dim into its batch
                 (flash / memory-efficient SDPA have vmap rules on CUDA; on CPU it loops over seeds)
    backward     of the SUM of the K losses: seed k's gradient lands in W.grad[k] and nowhere else
    clipping     per seed: g[k] *= min(1, clip / (||g[k]|| + 1e-6)), ||g[k]|| over all of seed k's parameters
    AdamW        one fused AdamW over the stacked tensors. AdamW is elementwise, so every seed has its
                 own moments; the step count is shared because all seeds take every step together
    per seed     its own data order, run folder, metrics, evaluations, checkpoints, best model, diagnostics
                 and status, written as `reslab train` writes them (the one loop, loop.py, keeps their books): a stacked run and a separate run are
                 interchangeable (either resumes the other's checkpoints)

Each seed also has a "member view": an ordinary GPT whose parameters are views of slice k of the
stacked tensors, so checkpoints, the best model and diagnostics read it like any model.

Not bit-identical to separate runs: batched matmuls round differently (~1e-7 relative per step), and
dropout masks come from one shared random stream (vmap randomness="different"), so with dropout > 0
a member's curve is another draw of the same process, not its separate run's exact curve.
A diverged seed stops logging at once (status "diverged"); its slice keeps being computed, harmlessly,
until the others finish.
"""

from __future__ import annotations

import json
import math
import shutil

import torch
from torch import nn
from torch.func import functional_call, vmap

from ..model.gpt import GPT
from ..model.io import load_weights
from .checkpoint import complete_checkpoints, load_optimizer_tensors, read_checkpoint, save_best, save_checkpoint
from .config import RunConfig
from .determinism import rng_state, set_rng_state
from .optim import build_optimizer
from .run_folder import RunFolder
from .runs import Run
from .runtime import Runtime

# Fields that may differ between the members of a stack (everything else must be equal).
SEED_FIELDS = ("seed", "init_seed", "data_seed", "dropout_seed", "nan_at_step")


def stack_key(cfg: RunConfig) -> str:
    """Runs with equal keys can be stacked: the same config up to the name and the seeds."""
    d = cfg.to_dict()
    d.pop("name", None)
    for key in SEED_FIELDS:
        d["train"].pop(key, None)
    return json.dumps(d, sort_keys=True, default=str)


def stack_refusal(cfgs: list[RunConfig]) -> str | None:
    """Why these configs cannot train as one stack (None: they can)."""
    if not cfgs:
        return "no runs to stack"
    if len({stack_key(c) for c in cfgs}) > 1:
        return "stacked runs must have the same config apart from their name and seeds"
    t = cfgs[0].train
    if t.dtype == "float16":
        return "train.dtype float16 needs a gradient scaler per seed; stack in bfloat16 or float32"
    return None


# ---- the stacked computation -------------------------------------------------------------------------
def stack_parameters(models: list[GPT], device: torch.device) -> dict[str, torch.Tensor]:
    """name -> one leaf tensor (K, *shape) holding every model's parameter (a tied head is wte's)."""
    names = [n for n, _ in models[0].named_parameters()]
    return {n: torch.stack([m.get_parameter(n).detach() for m in models]).to(device).requires_grad_()
            for n in names}


def member_view(model: GPT, stacked: dict[str, torch.Tensor], k: int, device: torch.device) -> GPT:
    """`model` with every parameter replaced by a view of slice k of `stacked` (same storage: an
    optimizer step on the stack moves the view, and loading weights into the view writes the stack)."""
    for name in stacked:
        module_name, _, leaf = name.rpartition(".")
        model.get_submodule(module_name)._parameters[leaf] = nn.Parameter(stacked[name].detach()[k])
    if model.config.tie_weights:
        model.lm_head.weight = model.wte.weight
    return model.to(device)  # buffers (ProRes alphas); the parameters are already there


def seed_buffers(runs: list[Run]) -> dict[str, torch.Tensor]:
    """The buffers that differ between seeds at one step (stochastic depth's k_l), each stacked over
    the members like a parameter; without them every seed would use the template's."""
    names = runs[0].model.seed_buffers()
    return {n: torch.stack([r.model.get_buffer(n) for r in runs]) for n in names}


def clip_per_seed(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Clip each seed's gradient to global norm `max_norm` (as clip_grad_norm_ does for one model);
    returns the K norms before clipping. grads[i] has shape (K, ...)."""
    K = grads[0].shape[0]
    per_tensor = torch.stack([torch.linalg.vector_norm(g.reshape(K, -1), dim=1) for g in grads])
    norms = torch.linalg.vector_norm(per_tensor, dim=0)
    if math.isfinite(max_norm):
        coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.view(K, *([1] * (g.dim() - 1))).to(g.dtype))
    return norms


class StackedLoss:
    """losses(params, x, y) -> (K,) for training (x, y: (K, B, T), one batch per seed) and evaluation
    (x, y: (B, T), the same batch for every seed), through one template module."""

    def __init__(self, template: GPT, compile: bool):
        def one_seed(params, x, y):
            return functional_call(template, params, (x, y))[1]

        self.template = template
        self.train_fn = vmap(one_seed, in_dims=(0, 0, 0), randomness="different")
        self.eval_fn = vmap(one_seed, in_dims=(0, None, None), randomness="different")
        if compile:
            self.train_fn = torch.compile(self.train_fn)


# ---- resuming ---------------------------------------------------------------------------------------
def _common_checkpoint_step(folders: list[RunFolder]) -> int | None:
    """The newest step every member has a complete checkpoint of (None: start all afresh)."""
    steps = [{int(p.name.split("_")[1]) for p in complete_checkpoints(f.ckpt_dir)} for f in folders]
    common = set.intersection(*steps) if steps else set()
    return max(common) if common else None


def _drop_checkpoints_after(folder: RunFolder, step: int | None) -> None:
    """A member ahead of the stack's common step goes back to it: later checkpoints would be stale."""
    for path in complete_checkpoints(folder.ckpt_dir):
        if step is None or int(path.name.split("_")[1]) > step:
            shutil.rmtree(path, ignore_errors=True)
    if step is None:
        for path in folder.ckpt_dir.glob("best*"):
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


# ---- the engine -------------------------------------------------------------------------------------
class StackedEngine:
    world = 1
    stacked = True
    inf_grad_is_skip = False  # float16 (a grad scaler per seed) is refused by stack_refusal

    def __init__(self, runs: list[Run], rt: Runtime, resuming: list[bool], log):
        """K models initialised from their own seeds, their parameters stacked; resumed from the
        newest step every member has a checkpoint of."""
        cfg = runs[0].cfg
        self.runs, self.rt, self.cfg = runs, rt, cfg
        models = [GPT(r.cfg.model, seed=r.seeds.init) for r in runs]
        self.params = stack_parameters(models, rt.device)
        for r, model in zip(runs, models):
            r.model = member_view(model, self.params, r.k, rt.device)
            r.model.layer_drop_seed = r.seeds.dropout  # stochastic depth draws from the dropout stream
        template = runs[0].model
        self.optimizer = build_optimizer(template, cfg.optim, rt.device.type, tensors=self.params)
        self.losses = StackedLoss(template, cfg.train.compile)
        self.nan_steps = torch.tensor([r.cfg.train.nan_at_step if r.cfg.train.nan_at_step is not None else -1
                                       for r in runs])

        start = _common_checkpoint_step([r.folder for r in runs]) if all(resuming) else None
        for r in runs:
            _drop_checkpoints_after(r.folder, start)
        if start is None:
            for r, was in zip(runs, resuming):
                r.resume_books(was, None, None)
            torch.manual_seed(runs[0].seeds.dropout)  # one dropout stream for the whole stack
        else:
            saved = []
            for r in runs:
                path = r.folder.ckpt_dir / f"step_{start:08d}"
                state, weights, opt_tensors = read_checkpoint(path)
                load_weights(r.model, weights, str(path))
                r.resume_books(True, start, state)
                saved.append((state, opt_tensors))
            stacked_moments = {key: (value if key.endswith("/step") else
                                     torch.stack([s[1][key] for s in saved]))
                               for key, value in saved[0][1].items()}
            load_optimizer_tensors(self.optimizer, stacked_moments, saved[0][0]["param_groups"],
                                   str(runs[0].folder.ckpt_dir))
            set_rng_state(saved[0][0]["rng"][0])
            log(f"resuming {len(runs)} stacked runs from step {start}")
        self.start = start or 0

    def set_step(self, step: int) -> None:
        for r in self.runs:
            r.model.set_step(step)  # ProRes alpha(l, t); the template's alphas drive the stack

    @torch.no_grad()
    def evaluate(self, batches: list) -> list[float]:
        template, device = self.losses.template, self.rt.device
        was_training = template.training
        template.eval()
        totals = None
        for x, y in batches:
            with self.rt.autocast():
                values = self.losses.eval_fn(self.params, x.to(device), y.to(device)).tolist()
            totals = values if totals is None else [a + b for a, b in zip(totals, values)]
        template.train(was_training)
        return [t / len(batches) for t in totals]

    def save_best(self, run: Run, step: int, val_loss: float) -> None:
        save_best(run.folder.ckpt_dir, step, run.model, val_loss)

    def save_checkpoint(self, step: int, runs: list[Run]) -> None:
        for r in runs:
            state = {"rng": [rng_state()], "best_val_loss": r.best, "data_cursor": {"step": step, "micro": 0},
                     "scaler": None}
            save_checkpoint(r.folder.ckpt_dir, step, r.model, self.optimizer, state,
                            self.cfg.train.keep_checkpoints, member=r.k)

    def update(self, step: int, lr: float, before_clip=None) -> tuple[list, list]:
        """Every seed's micro-batches through the vmapped loss, backward of their sum, per-seed
        clipping: (K train losses, K grad norms before clipping)."""
        t_cfg, o_cfg, device = self.cfg.train, self.cfg.optim, self.rt.device
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss_sum = torch.zeros(len(self.runs), device=device)
        for micro in range(t_cfg.grad_accum):
            pairs = [r.batches.get(step, micro) for r in self.runs]
            x = torch.stack([p[0] for p in pairs]).to(device, non_blocking=True)
            y = torch.stack([p[1] for p in pairs]).to(device, non_blocking=True)
            with self.rt.autocast():
                seed_losses = self.losses.train_fn({**self.params, **seed_buffers(self.runs)}, x, y)
            if bool((self.nan_steps == step).any()):  # testing aid: poison the chosen seeds' losses
                # a factor, not torch.where: where's backward would send 0 * NaN to every seed
                poison = torch.where(self.nan_steps == step, float("nan"), 1.0).to(device)
                seed_losses = seed_losses * poison
            (seed_losses.sum() / t_cfg.grad_accum).backward()
            loss_sum += seed_losses.detach()
        if before_clip is not None:
            before_clip()
        clip = o_cfg.grad_clip if o_cfg.grad_clip > 0 else float("inf")
        norms = clip_per_seed([p.grad for p in self.params.values()], clip).tolist()
        return (loss_sum / t_cfg.grad_accum).tolist(), norms

    def train_grad_norms(self, run: Run) -> dict:
        """Diagnostics read the member view's .grad, pointed at its slice of the stacked gradients."""
        self._point_grads(run, attach=True)
        try:
            return run.diag.train_grad_norms()
        finally:
            self._point_grads(run, attach=False)

    def _point_grads(self, run: Run, attach: bool) -> None:
        for name, p in run.model.named_parameters():
            grad = self.params[name].grad
            p.grad = grad[run.k] if attach and grad is not None else None

    def optimizer_step(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        for r in self.runs:
            r.model.after_optimizer_step()  # nGPT: each seed's weights back onto the unit sphere
