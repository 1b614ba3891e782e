"""The training loop. One call trains one run folder to completion, resuming if it can.

    for t in start .. steps:                    t = completed optimizer updates
        evaluate at t = 0, every eval_interval, and at the end; checkpoint after evaluating
        model.set_step(t) (ProRes), lr(t)
        grad_accum micro-batches (step t, global micro index) -> backward
        clip the global gradient norm; a non-finite loss or norm stops the run as "diverged"
        optimizer step
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch

from ..data import prepare_dataset
from ..data.batches import EvalBatches, TrainBatches
from ..diagnostics import Diagnostics, DiagnosticsFile, diagnostic_batch, spike_score
from ..errors import ReslabError
from ..model.gpt import GPT
from ..model.io import WEIGHTS, load_weights
from ..progress import Progress
from . import distributed
from .checkpoint import (complete_checkpoints, load_optimizer_tensors, read_checkpoint, save_best,
                         save_checkpoint)
from .config import RunConfig
from .determinism import arithmetic, derive_seed, record_arithmetic, rng_state, set_determinism, set_rng_state
from .optim import build_optimizer, learning_rate
from .run_folder import RunFolder
from .sinks import Sinks
from .throughput import mfu


@dataclass
class RunResult:
    status: str                 # completed / diverged
    step: int
    best_val_loss: float | None
    final_val_loss: float | None
    path: Path


def _device(cfg: RunConfig) -> torch.device:
    want = cfg.train.device
    if want == "cuda" or (want == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ReslabError("train.device: 'cuda' was asked for but no CUDA device is available")
        return torch.device("cuda")
    return torch.device("cpu")


def _dtype(cfg: RunConfig, device: torch.device) -> str:
    if cfg.train.dtype != "auto":
        if cfg.train.dtype != "float32" and device.type == "cpu":
            raise ReslabError(f"train.dtype: {cfg.train.dtype} autocast is for CUDA; use float32 on CPU")
        return cfg.train.dtype
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return "bfloat16"
    return "float32"


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


@dataclass
class Runtime:
    """Where and how the run computes: process group, device, precision."""
    dist: distributed.Dist
    device: torch.device
    dtype: str                 # float32 / bfloat16 / float16
    amp_dtype: torch.dtype | None

    def autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)


def _runtime(cfg: RunConfig) -> Runtime:
    t_cfg = cfg.train
    device = _device(cfg)
    d = distributed.setup(device.type)
    if device.type == "cuda":
        device = torch.device("cuda", d.local_rank)
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = t_cfg.tf32
        torch.backends.cudnn.allow_tf32 = t_cfg.tf32
    if t_cfg.threads:
        torch.set_num_threads(t_cfg.threads)
    set_determinism(t_cfg.deterministic)
    dtype = _dtype(cfg, device)
    return Runtime(d, device, dtype, {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype))


def _resume(folder: RunFolder, resuming: bool, ckpt, model, optimizer, scaler, d, sharded: bool, log) -> tuple:
    """(start step, best val loss, last val loss) from the newest complete checkpoint (its weights are
    already loaded), or a fresh start. Restores the optimizer, the RNG and the grad scaler."""
    if ckpt is None:
        if resuming and d.main:
            folder.truncate_metrics(-1)  # killed before its first checkpoint: start again
        return 0, None, None
    path, state, _, opt_tensors = ckpt
    if sharded:
        distributed.load_sharded_optimizer(model, optimizer, opt_tensors, state["param_groups"])
    else:
        load_optimizer_tensors(optimizer, opt_tensors, state["param_groups"], str(path / "optimizer.safetensors"),
                               groups_where=str(path / "state.json"))
    rngs = state["rng"]
    set_rng_state(rngs[d.rank] if d.rank < len(rngs) else rngs[0])
    if state.get("scaler"):
        scaler.load_state_dict(state["scaler"])
    if d.main:
        folder.truncate_metrics(state["step"])
        log(f"resuming {folder.path} from step {state['step']}")
    evals = [r["val_loss"] for r in folder.read_metrics() if "val_loss" in r]
    return state["step"], state.get("best_val_loss"), (evals[-1] if evals else None)


def _update(model, raw_model, optimizer, scaler, batches: TrainBatches, step: int, cfg: RunConfig,
            rt: Runtime, before_clip=None) -> tuple[float, float]:
    """One optimizer update: grad_accum micro-batches, unscale, clip. Returns (mean loss, grad norm);
    the optimizer step is left to the caller, which first checks both are finite."""
    t_cfg, d = cfg.train, rt.dist
    loss_sum = torch.zeros((), device=rt.device)
    for i in range(t_cfg.grad_accum):
        x, y = batches.get(step, d.rank * t_cfg.grad_accum + i)
        x, y = x.to(rt.device, non_blocking=True), y.to(rt.device, non_blocking=True)
        sync = not d.active or i == t_cfg.grad_accum - 1  # DDP all-reduces on the last micro-batch
        with (model.no_sync() if not sync and hasattr(model, "no_sync") else contextlib.nullcontext()):
            with rt.autocast():
                _, loss = model(x, y)
            if t_cfg.nan_at_step is not None and step == t_cfg.nan_at_step:
                loss = loss * float("nan")
            scaler.scale(loss / t_cfg.grad_accum).backward()
        loss_sum += loss.detach()
    scaler.unscale_(optimizer)
    if before_clip is not None:
        before_clip()
    clip = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), clip)
    if hasattr(grad_norm, "full_tensor"):  # FSDP: a DTensor holding the global norm
        grad_norm = grad_norm.full_tensor()
    return distributed.mean_across(d, loss_sum / t_cfg.grad_accum).item(), float(grad_norm)


def train(cfg: RunConfig, out: str | Path, log=print) -> RunResult:
    """Train `cfg` into the run folder `out` (resuming from its last checkpoint if it has one).
    The folder is locked while training: a second process on the same run is refused."""
    preflight(cfg)  # before the run folder exists, so a refused run leaves nothing behind
    rt = _runtime(cfg)
    folder = RunFolder(out)
    finished = False
    try:
        data = _prepare_data(cfg, rt.dist, log)
        check_splits(cfg, data)
        if rt.dist.main:
            folder.lock()
        result = _train(cfg, rt, folder, log, data)
        finished = True
        return result
    finally:
        folder.close()
        distributed.teardown(rt.dist, finished)  # on every path, the early returns and failures too


def preflight(cfg: RunConfig) -> None:
    """What this machine must offer the run, checked before anything is written (also by sweeps
    before they start workers): the device, its precision, a compiler for train.compile."""
    device = _device(cfg)
    _dtype(cfg, device)
    problem = compiler_problem(device.type) if cfg.train.compile else None
    if problem:
        raise ReslabError(f"train.compile: {problem}; install one, or set train.compile = false")


def compiler_problem(device_type: str) -> str | None:
    """Why torch.compile could not build kernels here, or None. Looked for as inductor does, so the
    run is refused before training instead of failing at its first step: CPU kernels are C++, built
    by $CXX, else g++ (torch/_inductor/config.py cpp.cxx, which it can also install from conda when
    TORCH_INDUCTOR_INSTALL_GXX is set); CUDA kernels are Triton's, whose launcher is built by $CC,
    else gcc or clang (triton/runtime/build.py)."""
    if device_type == "cuda":
        found = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
        return None if found and shutil.which(found) else \
            "torch.compile needs a C compiler for Triton on CUDA and found none ($CC, gcc, clang)"
    if os.environ.get("TORCH_INDUCTOR_INSTALL_GXX"):
        return None
    cxx = os.environ.get("CXX") or "g++"
    if shutil.which(cxx):
        return None
    where = f"$CXX={cxx!r} is not an executable" if os.environ.get("CXX") else \
        "$CXX is unset and g++ is not on PATH"
    return f"torch.compile needs a C++ compiler for CPU kernels and found none ({where})"


def _prepare_data(cfg: RunConfig, d: distributed.Dist, log):
    if not d.main:
        distributed.barrier(d)  # rank 0 prepares (or finds) the shards first; the others reuse them
    data = prepare_dataset(cfg.data, progress=d.main, log=log if d.main else (lambda *_: None))
    if d.main:
        distributed.barrier(d)
    return data


def check_splits(cfg: RunConfig, data) -> None:
    """A batch is block_size + 1 consecutive tokens (inputs and shifted targets), so each split must
    hold that many; otherwise the first batch would fail with the run folder already written."""
    need = cfg.model.block_size + 1
    for split, tokens in (("train", data.train), ("val", data.val)):
        if len(tokens) < need:
            count = f"{len(tokens):,} token{'s' * (len(tokens) != 1)}"
            raise ReslabError(f"data: the {split} split has {count}, fewer than model.block_size + 1 = {need:,} "
                              f"({data.folder}); use a longer corpus, another data.val_fraction or a smaller "
                              "model.block_size")


def _train(cfg: RunConfig, rt: Runtime, folder: RunFolder, log, data) -> RunResult:
    t_cfg, o_cfg = cfg.train, cfg.optim
    d, device, dtype, autocast = rt.dist, rt.device, rt.dtype, rt.autocast

    # ---- data and model ---------------------------------------------------------------------------
    model_cfg = cfg.model
    if model_cfg.vocab_size < data.vocab_size:
        model_cfg = model_cfg.replace(vocab_size=data.vocab_size)
    cfg = cfg.replace(model=model_cfg)
    seed = t_cfg.seed
    init_seed = t_cfg.init_seed if t_cfg.init_seed is not None else derive_seed(seed, "init")
    data_seed = t_cfg.data_seed if t_cfg.data_seed is not None else derive_seed(seed, "data")
    dropout_seed = t_cfg.dropout_seed if t_cfg.dropout_seed is not None else derive_seed(seed, "dropout")

    resuming = folder.claim(cfg.to_dict()) if d.main else True
    if d.main:
        folder.save_tokenizer(data.tokenizer)
    raw_model = GPT(model_cfg, seed=init_seed).to(device)
    raw_model.layer_drop_seed = dropout_seed  # stochastic depth: the same layers on every rank
    checkpoints = complete_checkpoints(folder.ckpt_dir)
    ckpt = (checkpoints[-1], *read_checkpoint(checkpoints[-1])) if checkpoints else None
    if ckpt:
        load_weights(raw_model, ckpt[2], str(ckpt[0] / WEIGHTS))  # before wrapping: FSDP shards what it finds
    model = distributed.wrap(raw_model, d, device, t_cfg.parallel)
    sharded = distributed.sharded(d, t_cfg.parallel)
    optimizer = build_optimizer(raw_model, o_cfg, device.type)  # after wrapping: FSDP swaps parameters
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == "float16")
    torch.manual_seed(dropout_seed + d.rank)  # the global RNG now feeds dropout only

    train_batches = TrainBatches(data.train, t_cfg.batch_size, model_cfg.block_size, data_seed)
    eval_batches = EvalBatches(data.val, t_cfg.eval_iters, t_cfg.eval_batch_size or t_cfg.batch_size,
                               model_cfg.block_size, seed=t_cfg.eval_seed, mode=t_cfg.eval_mode)
    # diagnostics (reslab/diagnostics): off by default; its hooks exist only inside measure()
    g_cfg, diag, diag_file = cfg.diagnostics, None, None
    if g_cfg.enabled and d.main:
        diag = Diagnostics(raw_model, diagnostic_batch(data.val, g_cfg.batch_size, model_cfg.block_size, g_cfg.seed),
                           g_cfg.interval or t_cfg.eval_interval, t_cfg.steps, autocast)
        diag_file = DiagnosticsFile(folder.path)

    start, best, final_val = _resume(folder, resuming, ckpt, model, optimizer, scaler, d, sharded, log)
    if diag_file:
        diag_file.truncate_before(start)  # diagnostics: step `start` is measured again
    if start >= t_cfg.steps and folder.read_status().get("status") in ("completed", "diverged"):
        status = folder.read_status()
        return RunResult(status["status"], status.get("step", start), status.get("best_val_loss"),
                         status.get("final_val_loss"), folder.path)

    if t_cfg.compile:
        model = torch.compile(model)
    if d.main:
        folder.write_status(status="running", step=start, corpus=data.meta.get("corpus"),
                            comparable=data.meta.get("comparable", True), device=str(device), dtype=dtype,
                            world_size=d.world, params=raw_model.param_counts(), stacked=None, stacked_with=None,
                            arithmetic=record_arithmetic(folder.read_status().get("arithmetic"),
                                                         arithmetic(device), start))
    sinks = Sinks(t_cfg, folder.path, cfg.name, cfg.to_dict()) if d.main else None

    eval_every, ckpt_every = t_cfg.eval_interval, t_cfg.checkpoint_interval
    ckpt_every = eval_every if ckpt_every is None else ckpt_every
    tokens_per_step = t_cfg.batch_size * model_cfg.block_size * t_cfg.grad_accum * d.world
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    progress = Progress(t_cfg.steps, cfg.name, mode=t_cfg.progress if d.main else "off")
    progress.update(start)
    model.train()
    status, diverged_at = "completed", None
    t0, window_tokens, last_train_loss, last_val = time.perf_counter(), 0, None, None

    def checkpoint_state(step: int) -> dict:
        return {"rng": distributed.gather_objects(d, rng_state()), "best_val_loss": best,
                "data_cursor": {"step": step, "micro": 0},
                "scaler": scaler.state_dict() if scaler.is_enabled() else None}

    try:
        for step in range(start, t_cfg.steps + 1):
            # ---- evaluate and checkpoint at `step` completed updates ----------------------------
            raw_model.set_step(step)  # ProRes alpha(l, t) for t = step, for evaluation and update
            first_of_resume = step == start and start > 0
            if not first_of_resume and (step % eval_every == 0 or step == t_cfg.steps):
                eval_start = time.perf_counter()
                val = evaluate(model, eval_batches.batches(step // eval_every), device, autocast)
                last_val = final_val = val
                improved = best is None or val < best
                best = val if improved else best
                # FSDP: gathering the full state is collective, so every rank takes part
                best_state = distributed.gather_full_state(model)[0] if sharded and improved and step > 0 else None
                if d.main:
                    folder.log({"step": step, "val_loss": val})
                    sinks.log({"step": step, "val_loss": val})
                    progress.message(f"{cfg.name} step {step}: val loss {val:.4f}")
                    if improved and step > 0:
                        save_best(folder.ckpt_dir, step, raw_model, val, state=best_state)
                save_now = step == t_cfg.steps or (ckpt_every and step % ckpt_every == 0 and step > 0)
                state = checkpoint_state(step) if save_now else None
                gathered = distributed.gather_full_state(model, optimizer) if save_now and sharded else None
                if save_now and d.main:
                    save_checkpoint(folder.ckpt_dir, step, raw_model, optimizer, state, t_cfg.keep_checkpoints,
                                    gathered=gathered)
                t0 += time.perf_counter() - eval_start  # throughput counts training time only
            diag_row = None  # diagnostics: measured before this step's update, logged after it
            if diag is not None and diag.due(step):
                diag_start = time.perf_counter()
                diag_row = diag.measure(step, snapshot=step < t_cfg.steps)
                t0 += time.perf_counter() - diag_start
            if step == t_cfg.steps:
                if diag_row is not None:
                    diag_file.log(diag_row)
                break

            # ---- one optimizer update ------------------------------------------------------------
            lr = learning_rate(step, o_cfg, t_cfg.steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            diag_grads = (lambda: diag_row.update(diag.train_grad_norms())) if diag_row is not None else None
            train_loss, grad_norm_value = _update(model, raw_model, optimizer, scaler, train_batches, step,
                                                  cfg, rt, before_clip=diag_grads)
            # fp16's grad scaler skips steps with inf gradients by design; a NaN loss is divergence.
            if not math.isfinite(train_loss) or (not math.isfinite(grad_norm_value) and not scaler.is_enabled()):
                status, diverged_at = "diverged", step + 1
                if diag_row is not None:
                    diag_file.log(diag_row)
                break
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            raw_model.after_optimizer_step()  # nGPT: weights back onto the unit sphere; else nothing
            last_train_loss = train_loss
            if diag_row is not None:
                diag_row.update(diag.update_ratios())
                diag_file.log(diag_row)

            # ---- log ----------------------------------------------------------------------------
            done = step + 1
            window_tokens += tokens_per_step
            if d.main and (done % t_cfg.log_interval == 0 or done == t_cfg.steps):
                now = time.perf_counter()
                elapsed = now - t0
                tps = window_tokens / elapsed if elapsed > 0 else None
                row = {"step": done, "train_loss": train_loss, "lr": lr, "grad_norm": grad_norm_value,
                       "tokens_per_s": tps}
                util = mfu(tps or 0.0, raw_model, model_cfg.block_size, device_name, dtype, d.world)
                if util is not None:
                    row["mfu"] = util
                if model_cfg.prores != "none":
                    row["prores_alpha"] = raw_model.prores_alphas()
                folder.log(row)
                sinks.log(row)
                progress.update(done, loss=train_loss, val=last_val, tok_s=round(tps) if tps else None)
                t0, window_tokens = now, 0  # windows tile the timeline: logging counts too
    except BaseException as e:
        if d.main and not isinstance(e, KeyboardInterrupt):
            folder.write_status(status="failed", error=f"{type(e).__name__}: {e}",
                                traceback=traceback.format_exc(limit=8))
        raise
    finally:
        progress.close()
        folder.close()
        if diag_file:
            diag_file.close()
        if sinks:
            sinks.close()

    final_step = diverged_at if status == "diverged" else t_cfg.steps
    if d.main:
        if status == "diverged":
            progress.message(f"{cfg.name}: diverged at step {diverged_at} (non-finite loss or gradient)")
        write_final_status(folder, cfg, status, final_step, best, final_val, last_train_loss)
    return RunResult(status, final_step, best, final_val if status == "completed" else None, folder.path)


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

