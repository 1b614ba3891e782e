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
                 and status, written as `reslab train` writes them: a stacked run and a separate run are
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
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.func import functional_call, vmap

from ..data import prepare_dataset
from ..data.batches import EvalBatches, TrainBatches
from ..diagnostics import Diagnostics, DiagnosticsFile, diagnostic_batch
from ..errors import ReslabError
from ..model.gpt import GPT
from ..model.io import load_weights
from ..progress import Progress
from .checkpoint import (
    complete_checkpoints,
    load_optimizer_tensors,
    read_checkpoint,
    save_best,
    save_checkpoint,
)
from .config import RunConfig
from .determinism import arithmetic, derive_seed, record_arithmetic, rng_state, set_rng_state
from .loop import RunResult, Runtime, _runtime, write_final_status
from .optim import build_optimizer, learning_rate
from .run_folder import RunFolder
from .sinks import Sinks
from .throughput import mfu

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


def seed_buffers(members: list["Member"]) -> dict[str, torch.Tensor]:
    """The buffers that differ between seeds at one step (stochastic depth's k_l), each stacked over
    the members like a parameter; without them every seed would use the template's."""
    names = members[0].view.seed_buffers()
    return {n: torch.stack([m.view.get_buffer(n) for m in members]) for n in names}


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


# ---- one member of the stack ---------------------------------------------------------------------------
@dataclass
class Member:
    k: int
    cfg: RunConfig
    folder: RunFolder
    batches: TrainBatches
    view: GPT | None = None
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

    def log(self, row: dict) -> None:
        self.folder.log(row)
        if self.sinks:
            self.sinks.log(row)


def _seeds(cfg: RunConfig) -> tuple[int, int, int]:
    t = cfg.train
    pick = lambda explicit, stream: explicit if explicit is not None else derive_seed(t.seed, stream)  # noqa: E731
    return pick(t.init_seed, "init"), pick(t.data_seed, "data"), pick(t.dropout_seed, "dropout")


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


# ---- training --------------------------------------------------------------------------------------
def train_stacked(cfgs: list[RunConfig], outs: list[str | Path], log=print) -> list[RunResult]:
    """Train K runs that differ only in their seeds into their own run folders, in one process.
    Every folder is locked for the duration; a finished member is skipped."""
    if len(cfgs) != len(outs):
        raise ReslabError(f"train_stacked: {len(cfgs)} configs but {len(outs)} run folders")
    reason = stack_refusal(cfgs)
    if reason:
        raise ReslabError(f"cannot stack {', '.join(c.name for c in cfgs)}: {reason}")
    if len({str(Path(o).resolve()) for o in outs}) < len(outs):
        raise ReslabError("train_stacked: two members share one run folder")
    rt = _runtime(cfgs[0])
    if rt.dist.active:
        raise ReslabError("stacked seeds train in one process; do not start them under torchrun")
    folders = [RunFolder(o) for o in outs]
    try:
        for folder in folders:
            folder.lock()
        return _train_stacked(cfgs, folders, rt, log)
    finally:
        for folder in folders:
            folder.close()


def _finished_result(folder: RunFolder) -> RunResult | None:
    status = folder.read_status()
    if status.get("status") not in ("completed", "diverged"):
        return None
    return RunResult(status["status"], status.get("step", 0), status.get("best_val_loss"),
                     status.get("final_val_loss"), folder.path)


def _train_stacked(cfgs: list[RunConfig], folders: list[RunFolder], rt: Runtime, log) -> list[RunResult]:
    results: dict[int, RunResult] = {}
    todo = []
    for i, (cfg, folder) in enumerate(zip(cfgs, folders)):
        done = _finished_result(folder) if folder.config_path.is_file() else None
        if done is not None:
            results[i] = done
        else:
            todo.append(i)
    if not todo:
        return [results[i] for i in range(len(cfgs))]

    cfg0 = cfgs[todo[0]]
    t_cfg, o_cfg, device, autocast = cfg0.train, cfg0.optim, rt.device, rt.autocast
    data = prepare_dataset(cfg0.data, progress=True, log=log)
    model_cfg = cfg0.model
    if model_cfg.vocab_size < data.vocab_size:
        model_cfg = model_cfg.replace(vocab_size=data.vocab_size)

    members: list[Member] = []
    for k, i in enumerate(todo):
        cfg = cfgs[i].replace(model=model_cfg)
        _, data_seed, _ = _seeds(cfg)
        members.append(Member(k, cfg, folders[i],
                              TrainBatches(data.train, t_cfg.batch_size, model_cfg.block_size, data_seed)))
    K = len(members)
    resuming = [m.folder.claim(m.cfg.to_dict()) for m in members]
    for m in members:
        m.folder.save_tokenizer(data.tokenizer)

    # ---- the stack: K models initialised from their own seeds, their parameters stacked -------------
    models = [GPT(model_cfg, seed=_seeds(m.cfg)[0]) for m in members]
    stacked = stack_parameters(models, device)
    for m, model in zip(members, models):
        m.view = member_view(model, stacked, m.k, device)
        m.view.layer_drop_seed = _seeds(m.cfg)[2]  # stochastic depth draws from the dropout stream
    template = members[0].view
    optimizer = build_optimizer(template, o_cfg, device.type, tensors=stacked)
    losses = StackedLoss(template, t_cfg.compile)

    # ---- resume from the newest step every member has a checkpoint of ------------------------------
    start = _common_checkpoint_step([m.folder for m in members]) if all(resuming) else None
    for m in members:
        _drop_checkpoints_after(m.folder, start)
    if start is None:
        for m, was in zip(members, resuming):
            if was:
                m.folder.truncate_metrics(-1)
    else:
        saved = []
        for m in members:
            path = m.folder.ckpt_dir / f"step_{start:08d}"
            state, weights, opt_tensors = read_checkpoint(path)
            load_weights(m.view, weights, str(path))
            m.best = state.get("best_val_loss")
            evals = [r["val_loss"] for r in m.folder.read_metrics() if "val_loss" in r and r["step"] <= start]
            m.final_val = evals[-1] if evals else None
            m.folder.truncate_metrics(start)
            saved.append((state, opt_tensors))
        stacked_moments = {key: (value if key.endswith("/step") else
                                 torch.stack([s[1][key] for s in saved]))
                           for key, value in saved[0][1].items()}
        load_optimizer_tensors(optimizer, stacked_moments, saved[0][0]["param_groups"],
                               str(members[0].folder.ckpt_dir))
        set_rng_state(saved[0][0]["rng"][0])
        log(f"resuming {K} stacked runs from step {start}")
    if start is None:
        torch.manual_seed(_seeds(members[0].cfg)[2])  # one dropout stream for the whole stack
    start = start or 0

    eval_batches = EvalBatches(data.val, t_cfg.eval_iters, t_cfg.eval_batch_size or t_cfg.batch_size,
                               model_cfg.block_size, seed=t_cfg.eval_seed, mode=t_cfg.eval_mode)
    g_cfg = cfg0.diagnostics
    names = [m.folder.path.name for m in members]
    for m in members:
        if g_cfg.enabled:
            m.diag = Diagnostics(m.view, diagnostic_batch(data.val, g_cfg.batch_size, model_cfg.block_size, g_cfg.seed),
                                 g_cfg.interval or t_cfg.eval_interval, t_cfg.steps, autocast)
            m.diag_file = DiagnosticsFile(m.folder.path)
            m.diag_file.truncate_before(start)
        m.folder.write_status(status="running", step=start, corpus=data.meta.get("corpus"),
                              comparable=data.meta.get("comparable", True), device=str(device), dtype=rt.dtype,
                              world_size=1, params=m.view.param_counts(), stacked=K,
                              stacked_with=[n for n in names if n != m.folder.path.name],
                              arithmetic=record_arithmetic(m.folder.read_status().get("arithmetic"),
                                                           dict(arithmetic(device), stacked=K), start))
        m.sinks = Sinks(t_cfg, m.folder.path, m.cfg.name, m.cfg.to_dict())

    try:
        _loop(members, stacked, optimizer, losses, eval_batches, start, rt, cfg0, log)
    except BaseException as e:
        if not isinstance(e, KeyboardInterrupt):
            import traceback

            for m in members:
                if m.active:
                    m.folder.write_status(status="failed", error=f"{type(e).__name__}: {e}",
                                          traceback=traceback.format_exc(limit=8))
        raise
    finally:
        for m in members:
            if m.diag_file:
                m.diag_file.close()
            if m.sinks:
                m.sinks.close()

    for m, i in zip(members, todo):
        final_step = m.diverged_at if m.status == "diverged" else t_cfg.steps
        write_final_status(m.folder, m.cfg, m.status, final_step, m.best, m.final_val, m.last_train_loss)
        results[i] = RunResult(m.status, final_step, m.best, m.final_val if m.status == "completed" else None,
                               m.folder.path)
    return [results[i] for i in range(len(cfgs))]


@torch.no_grad()
def _evaluate(losses: StackedLoss, stacked: dict, batches: list, device, autocast) -> list[float]:
    template = losses.template
    was_training = template.training
    template.eval()
    totals = None
    for x, y in batches:
        with autocast():
            values = losses.eval_fn(stacked, x.to(device), y.to(device)).tolist()
        totals = values if totals is None else [a + b for a, b in zip(totals, values)]
    template.train(was_training)
    return [t / len(batches) for t in totals]


def _set_member_grads(m: Member, stacked: dict, attach: bool) -> None:
    """Point the member view's .grad at its slice of the stacked gradients (for diagnostics), or clear it."""
    for name, p in m.view.named_parameters():
        p.grad = stacked[name].grad[m.k] if attach and stacked[name].grad is not None else None


def _loop(members: list[Member], stacked: dict, optimizer, losses: StackedLoss, eval_batches: EvalBatches,
          start: int, rt: Runtime, cfg: RunConfig, log) -> None:
    t_cfg, o_cfg, device, autocast = cfg.train, cfg.optim, rt.device, rt.autocast
    K = len(members)
    eval_every = t_cfg.eval_interval
    ckpt_every = eval_every if t_cfg.checkpoint_interval is None else t_cfg.checkpoint_interval
    tokens_per_step = t_cfg.batch_size * cfg.model.block_size * t_cfg.grad_accum  # per member
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    params = list(stacked.values())
    clip = o_cfg.grad_clip if o_cfg.grad_clip > 0 else float("inf")
    nan_steps = torch.tensor([m.cfg.train.nan_at_step if m.cfg.train.nan_at_step is not None else -1
                              for m in members])
    progress = Progress(t_cfg.steps, f"{cfg.name} x{K} seeds", mode=t_cfg.progress)
    progress.update(start)
    t0, window_tokens, last_val = time.perf_counter(), 0, None
    try:
        for step in range(start, t_cfg.steps + 1):
            active = [m for m in members if m.active]
            if not active:
                break
            for m in members:
                m.view.set_step(step)  # ProRes alpha(l, t); the template's alphas drive the stack
            first_of_resume = step == start and start > 0
            if not first_of_resume and (step % eval_every == 0 or step == t_cfg.steps):
                eval_start = time.perf_counter()
                values = _evaluate(losses, stacked, eval_batches.batches(step // eval_every), device, autocast)
                save_now = step == t_cfg.steps or (ckpt_every and step % ckpt_every == 0 and step > 0)
                for m in active:
                    val = values[m.k]
                    m.final_val = val
                    improved = m.best is None or val < m.best
                    m.best = val if improved else m.best
                    m.log({"step": step, "val_loss": val})
                    if improved and step > 0:
                        save_best(m.folder.ckpt_dir, step, m.view, val)
                    if save_now:
                        state = {"rng": [rng_state()], "best_val_loss": m.best,
                                 "data_cursor": {"step": step, "micro": 0}, "scaler": None}
                        save_checkpoint(m.folder.ckpt_dir, step, m.view, optimizer, state, t_cfg.keep_checkpoints,
                                        member=m.k)
                last_val = sum(values[m.k] for m in active) / len(active)
                progress.message(f"{cfg.name} x{K} step {step}: val loss "
                                 + " ".join(f"{values[m.k]:.4f}" for m in active))
                t0 += time.perf_counter() - eval_start
            diag_start = time.perf_counter()
            for m in active:
                m.diag_row = m.diag.measure(step, snapshot=step < t_cfg.steps) if m.diag and m.diag.due(step) else None
            t0 += time.perf_counter() - diag_start
            if step == t_cfg.steps:
                for m in active:
                    if m.diag_row is not None:
                        m.diag_file.log(m.diag_row)
                    m.active = False
                break

            # ---- one optimizer update for every seed ----------------------------------------------
            lr = learning_rate(step, o_cfg, t_cfg.steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss_sum = torch.zeros(K, device=device)
            for micro in range(t_cfg.grad_accum):
                pairs = [m.batches.get(step, micro) for m in members]
                x = torch.stack([p[0] for p in pairs]).to(device, non_blocking=True)
                y = torch.stack([p[1] for p in pairs]).to(device, non_blocking=True)
                with autocast():
                    seed_losses = losses.train_fn({**stacked, **seed_buffers(members)}, x, y)
                if bool((nan_steps == step).any()):  # testing aid: poison the chosen seeds' losses
                    # a factor, not torch.where: where's backward would send 0 * NaN to every seed
                    poison = torch.where(nan_steps == step, float("nan"), 1.0).to(device)
                    seed_losses = seed_losses * poison
                (seed_losses.sum() / t_cfg.grad_accum).backward()
                loss_sum += seed_losses.detach()
            diag_start = time.perf_counter()
            for m in active:
                if m.diag_row is not None:
                    _set_member_grads(m, stacked, attach=True)
                    m.diag_row.update(m.diag.train_grad_norms())
                    _set_member_grads(m, stacked, attach=False)
            t0 += time.perf_counter() - diag_start
            norms = clip_per_seed([p.grad for p in params], clip).tolist()
            train_losses = (loss_sum / t_cfg.grad_accum).tolist()
            for m in active:
                if not (math.isfinite(train_losses[m.k]) and math.isfinite(norms[m.k])):
                    m.active, m.status, m.diverged_at = False, "diverged", step + 1
                    progress.message(f"{m.cfg.name}: diverged at step {step + 1} (non-finite loss or gradient)")
                    if m.diag_row is not None:
                        m.diag_file.log(m.diag_row)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            for m in members:
                m.view.after_optimizer_step()  # nGPT: each seed's weights back onto the unit sphere

            done = step + 1
            window_tokens += tokens_per_step
            logging = done % t_cfg.log_interval == 0 or done == t_cfg.steps
            now = time.perf_counter()
            tps = window_tokens / (now - t0) if logging and now > t0 else None
            for m in members:
                if not m.active:
                    continue
                m.last_train_loss = train_losses[m.k]
                if m.diag_row is not None:
                    m.diag_row.update(m.diag.update_ratios())
                    m.diag_file.log(m.diag_row)
                if logging:
                    row = {"step": done, "train_loss": train_losses[m.k], "lr": lr, "grad_norm": norms[m.k],
                           "tokens_per_s": tps}
                    util = mfu(tps or 0.0, m.view, cfg.model.block_size, device_name, rt.dtype)
                    if util is not None:
                        row["mfu"] = util
                    if cfg.model.prores != "none":
                        row["prores_alpha"] = m.view.prores_alphas()
                    m.log(row)
            if logging:
                alive = [train_losses[m.k] for m in members if m.active]
                progress.update(done, loss=sum(alive) / len(alive) if alive else None, val=last_val,
                                tok_s=round(tps * K) if tps else None)
                t0, window_tokens = now, 0
    finally:
        progress.close()
