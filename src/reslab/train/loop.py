"""The training loop: one schedule for every engine (a single run is a stack of one).

    train(cfg, out)            one run: plain, DDP or FSDP (single.py)
    train_stacked(cfgs, outs)  K seeds of one design in one process (stacked.py)

    for t in start .. steps:                    t = completed optimizer updates
        evaluate at t = 0, every eval_interval and at the end (best model kept)
        checkpoint at every checkpoint_interval and at the end; status.json names its step
        diagnostics measured before the update at their interval
        update t at lr(t): the engine's gradients, clipped; a non-finite loss or norm: "diverged"
        optimizer step; log train loss, grad norm, lr, tokens/s, MFU, ProRes alphas

The loop owns the schedule and the books (runs.py); the engine owns the model, the optimizer, one
update, an evaluation and the files of a save (engine.py)."""

from __future__ import annotations

import math
import time
import traceback
from pathlib import Path

from ..data.batches import EvalBatches, TrainBatches
from ..diagnostics import Diagnostics, DiagnosticsFile, diagnostic_batch
from ..errors import ReslabError
from ..progress import Progress
from . import distributed
from .config import RunConfig
from .determinism import arithmetic, record_arithmetic
from .engine import Engine
from .optim import learning_rate
from .run_folder import RunFolder
from .runs import Run, RunResult, Seeds, finished_result, write_final_status
from .runtime import Runtime, check_splits, prepare_data, preflight, runtime
from .single import SingleEngine
from .sinks import Sinks
from .stacked import StackedEngine, stack_refusal
from .throughput import mfu


# ---- entry points -----------------------------------------------------------------------------------
def train(cfg: RunConfig, out: str | Path, log=print) -> RunResult:
    """Train `cfg` into the run folder `out` (resuming from its last checkpoint if it has one).
    The folder is locked while training: a second process on the same run is refused."""
    preflight(cfg)  # before the run folder exists, so a refused run leaves nothing behind
    rt = runtime(cfg)
    folder = RunFolder(out)
    finished = False
    try:
        data = prepare_data(cfg, rt.dist, log)
        check_splits(cfg, data)
        if rt.dist.main:
            folder.lock()
        result = _train(cfg, rt, folder, log, data)
        finished = True
        return result
    finally:
        folder.close()
        distributed.teardown(rt.dist, finished)  # on every path, the early returns and failures too


def _train(cfg: RunConfig, rt: Runtime, folder: RunFolder, log, data) -> RunResult:
    run = _new_run(0, _with_vocab(cfg, data), folder, data, writes=rt.dist.main)
    engine = SingleEngine(run, rt, _claim(run, data), log)
    done = finished_result(folder) if engine.start >= cfg.train.steps else None
    return done or run_loop(engine, rt, data)[0]


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
    rt = runtime(cfgs[0])
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


def _train_stacked(cfgs: list[RunConfig], folders: list[RunFolder], rt: Runtime, log) -> list[RunResult]:
    results = {i: finished_result(f) if f.config_path.is_file() else None for i, f in enumerate(folders)}
    todo = [i for i, r in results.items() if r is None]
    if todo:
        data = prepare_data(cfgs[todo[0]], rt.dist, log)
        check_splits(cfgs[todo[0]], data)
        runs = [_new_run(k, _with_vocab(cfgs[i], data), folders[i], data) for k, i in enumerate(todo)]
        engine = StackedEngine(runs, rt, [_claim(r, data) for r in runs], log)
        results.update(zip(todo, run_loop(engine, rt, data)))
    return [results[i] for i in range(len(cfgs))]


def _with_vocab(cfg: RunConfig, data) -> RunConfig:
    """The model's vocabulary grown to the tokenizer's where the config's is smaller."""
    if cfg.model.vocab_size < data.vocab_size:
        return cfg.replace(model=cfg.model.replace(vocab_size=data.vocab_size))
    return cfg


def _new_run(k: int, cfg: RunConfig, folder: RunFolder, data, writes: bool = True) -> Run:
    batches = TrainBatches(data.train, cfg.train.batch_size, cfg.model.block_size, Seeds.of(cfg).data)
    return Run(k, cfg, folder, batches, writes=writes)


def _claim(run: Run, data) -> bool:
    """Write config.json and the tokenizer, or check the folder holds this run; True: resume it."""
    if not run.writes:
        return True  # another rank claims the folder
    resuming = run.folder.claim(run.cfg.to_dict())
    run.folder.save_tokenizer(data.tokenizer)
    return resuming


# ---- the loop ---------------------------------------------------------------------------------------
def run_loop(engine: Engine, rt: Runtime, data) -> list[RunResult]:
    """Train the engine's runs from engine.start to the end (or divergence); their results."""
    runs = engine.runs
    cfg = runs[0].cfg
    _open_books(engine, rt, data)
    try:
        _schedule(engine, rt, data, cfg)
    except BaseException as e:
        if not isinstance(e, KeyboardInterrupt):  # Ctrl-C leaves "running": the run resumes as it was
            for r in runs:
                if r.active:
                    _record_failure(r, e)
        raise
    finally:
        for r in runs:
            r.close()
    for r in runs:
        if r.writes:
            write_final_status(r.folder, r.cfg, r.status, r.result(cfg.train.steps).step, r.best, r.final_val,
                               r.last_train_loss)
    return [r.result(cfg.train.steps) for r in runs]


def _open_books(engine: Engine, rt: Runtime, data) -> None:
    """Diagnostics, status.json "running" and the metric sinks of every run that writes."""
    runs, start = engine.runs, engine.start
    K, names = len(runs), [r.folder.path.name for r in runs]
    for r in runs:
        if not r.writes:
            continue
        t_cfg, g_cfg = r.cfg.train, r.cfg.diagnostics
        if g_cfg.enabled:  # its hooks exist only inside measure()
            batch = diagnostic_batch(data.val, g_cfg.batch_size, r.cfg.model.block_size, g_cfg.seed)
            r.diag = Diagnostics(r.model, batch, g_cfg.interval or t_cfg.eval_interval, t_cfg.steps, rt.autocast)
            r.diag_file = DiagnosticsFile(r.folder.path)
            r.diag_file.truncate_before(start)  # step `start` is measured again
        how = dict(arithmetic(rt.device), stacked=K) if engine.stacked else arithmetic(rt.device)
        r.write_status(status="running", step=start, corpus=data.meta.get("corpus"),
                       comparable=data.meta.get("comparable", True), device=str(rt.device), dtype=rt.dtype,
                       world_size=engine.world, params=r.model.param_counts(),
                       stacked=K if engine.stacked else None,
                       stacked_with=[n for n in names if n != r.folder.path.name] if engine.stacked else None,
                       arithmetic=record_arithmetic(r.folder.read_status().get("arithmetic"), how, start))
        r.sinks = Sinks(t_cfg, r.folder.path, r.cfg.name, r.cfg.to_dict())


def _record_failure(r: Run, e: BaseException) -> None:
    try:
        r.write_status(status="failed", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(limit=8))
    except OSError:
        pass  # a full disk cannot take the record either; the error itself still reaches the user


def _schedule(engine: Engine, rt: Runtime, data, cfg: RunConfig) -> None:
    t_cfg, o_cfg, steps, start = cfg.train, cfg.optim, cfg.train.steps, engine.start
    runs, K = engine.runs, len(engine.runs)
    eval_every = t_cfg.eval_interval
    ckpt_every = eval_every if t_cfg.checkpoint_interval is None else t_cfg.checkpoint_interval
    eval_batches = EvalBatches(data.val, t_cfg.eval_iters, t_cfg.eval_batch_size or t_cfg.batch_size,
                               cfg.model.block_size, seed=t_cfg.eval_seed, mode=t_cfg.eval_mode)
    tokens_per_step = t_cfg.batch_size * cfg.model.block_size * t_cfg.grad_accum * engine.world  # per run
    label = f"{cfg.name} x{K}" if engine.stacked else cfg.name
    progress = Progress(steps, f"{label} seeds" if engine.stacked else label,
                        mode=t_cfg.progress if runs[0].writes else "off")
    progress.update(start)
    t0, window_tokens, last_val = time.perf_counter(), 0, None
    try:
        for step in range(start, steps + 1):
            active = [r for r in runs if r.active]
            if not active:
                break
            engine.set_step(step)
            on_file = step == start and start > 0  # resumed here: its evaluation and checkpoint exist
            paused = time.perf_counter()  # throughput counts training time only

            # ---- evaluate, keep the best model, checkpoint at `step` completed updates ------------
            if not on_file and (step % eval_every == 0 or step == steps):
                values = engine.evaluate(eval_batches.batches(step // eval_every))
                for r in active:
                    val = r.final_val = values[r.k]
                    improved = r.best is None or val < r.best
                    r.best = val if improved else r.best
                    r.log({"step": step, "val_loss": val})
                    if improved and step > 0:
                        engine.save_best(r, step, val)
                last_val = sum(values[r.k] for r in active) / len(active)
                shown = " ".join(f"{values[r.k]:.4f}" for r in active)
                progress.message(f"{label} step {step}: val loss {shown}")
            if not on_file and (step == steps or (ckpt_every and step % ckpt_every == 0 and step > 0)):
                engine.save_checkpoint(step, active)
                for r in active:
                    r.write_status(step=step)  # where a resume starts, should the run stop before the end

            # ---- diagnostics: measured before this step's update, logged after it ----------------
            for r in active:
                r.diag_row = r.diag.measure(step, snapshot=step < steps) if r.diag and r.diag.due(step) else None
            t0 += time.perf_counter() - paused
            if step == steps:
                for r in active:
                    r.finish_diagnostics()
                    r.active = False
                break

            # ---- one optimizer update --------------------------------------------------------------
            lr = learning_rate(step, o_cfg, steps)
            measuring = [r for r in active if r.diag_row is not None]

            def grad_norms():
                for r in measuring:
                    r.diag_row.update(engine.train_grad_norms(r))

            losses, norms = engine.update(step, lr, grad_norms if measuring else None)
            for r in active:
                # fp16's grad scaler skips steps with inf gradients by design; a NaN loss is divergence
                if not math.isfinite(losses[r.k]) or (not math.isfinite(norms[r.k]) and not engine.inf_grad_is_skip):
                    r.active, r.status, r.diverged_at = False, "diverged", step + 1
                    progress.message(f"{r.cfg.name}: diverged at step {step + 1} (non-finite loss or gradient)")
                    r.finish_diagnostics()
            active = [r for r in active if r.active]
            if not active:
                break
            engine.optimizer_step()

            # ---- log ---------------------------------------------------------------------------------
            done = step + 1
            window_tokens += tokens_per_step
            logging = done % t_cfg.log_interval == 0 or done == steps
            now = time.perf_counter()
            tps = window_tokens / (now - t0) if logging and now > t0 else None
            for r in active:
                r.last_train_loss = losses[r.k]
                if r.diag_row is not None:
                    r.diag_row.update(r.diag.update_ratios())
                    r.finish_diagnostics()
                if logging and r.writes:
                    r.log(_train_row(r, done, losses[r.k], lr, norms[r.k], tps, rt, engine.world))
            if logging:
                progress.update(done, loss=sum(losses[r.k] for r in active) / len(active), val=last_val,
                                tok_s=round(tps * K) if tps else None)
                t0, window_tokens = now, 0  # windows tile the timeline: logging counts too
    finally:
        progress.close()


def _train_row(r: Run, done: int, loss: float, lr: float, grad_norm: float, tps, rt: Runtime, world: int) -> dict:
    row = {"step": done, "train_loss": loss, "lr": lr, "grad_norm": grad_norm, "tokens_per_s": tps}
    util = mfu(tps or 0.0, r.model, r.cfg.model.block_size, rt.device_name, rt.dtype, world)
    if util is not None:
        row["mfu"] = util
    if r.cfg.model.prores != "none":
        row["prores_alpha"] = r.model.prores_alphas()
    return row
