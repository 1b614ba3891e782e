#!/usr/bin/env python
"""What reslab's trainer costs beyond the bare minimum, at nanoGPT's CPU configuration.

Shape: 4 layers, 4 heads, width 128, context 64, batch 12, vocab 65 (the `nanogpt-cpu` preset),
AdamW lr 1e-3 betas (0.9, 0.99) weight decay 0.1 on matrices, grad clip 1.0, dropout 0, float32.
Three contenders train the same number of steps on the same batches, interleaved in rounds:

    engine     reslab.train.loop.train, the real trainer, on a run config (eval_interval larger
               than the step count, so only the evaluation at step 0 and the final one run, both
               outside the timed window; progress off; log_interval 1). Step time is read two ways:
                 metrics     the per-step `tokens_per_s` the trainer writes to metrics.jsonl
                             (its window excludes writing the row itself);
                 timestamps  wall-clock between consecutive metrics rows, taken as each row is
                             logged (everything the loop does per step, logging included).
    bare       a bare PyTorch loop over the SAME reslab model (same config, same init seed) and the
               SAME batches (TrainBatches, same data seed): lr schedule, forward, backward, clip,
               AdamW step, zero_grad. No logging, no checks, no checkpoints.
    reference  the same bare loop over bench/reference_gpt.py (a plain single-file GPT of the same
               shape), with bias False (nanoGPT's default) and bias True; the one with the
               preset's bias setting has the same architecture and parameter count as reslab's.

Every contender starts each round from a freshly initialised model, so each round is the same
work; the first --skip steps of each round are dropped; the order of contenders rotates from round
to round so machine-load drift hits all of them alike. The engine and bare reslab losses are
compared step by step (they should be identical: same model, batches and arithmetic).

Reported: median ms/step and tokens/s, fastest step, median process-CPU ms/step (less sensitive to
other load), wall-clock tokens/s over the timed loop, the engine overhead (engine / bare - 1), the
reslab model vs the reference (bare reslab / bare reference), a phase breakdown of the bare loops,
and micro-costs of the per-step work only the engine does.

--nanogpt-cpu-run instead trains the whole `nanogpt-cpu` preset (2000 steps, 9 evaluations)
through reslab.train.loop.train and reports its final and best val loss and wall time (~4 min).

Examples:
    python bench/bench_engine.py --quick
    python bench/bench_engine.py --markdown --json /tmp/bench_engine.json
    python bench/bench_engine.py --steps 200 --rounds 5 --threads 2
    python bench/bench_engine.py --nanogpt-cpu-run --json /tmp/nanogpt_cpu_run.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))  # reference_gpt

import reslab  # noqa: E402
from reslab.fileio import read_toml  # noqa: E402
from reslab.data import DataConfig, prepare_dataset  # noqa: E402
from reslab.data.batches import TrainBatches  # noqa: E402
from reslab.errors import ReslabError  # noqa: E402
from reslab.train import loop as engine_loop  # noqa: E402
from reslab.train import single as engine_single  # noqa: E402
from reslab.train.config import build_run_config, preset_path  # noqa: E402
from reslab.train.determinism import derive_seed  # noqa: E402
from reslab.train.optim import build_optimizer, learning_rate  # noqa: E402
from reslab.train.run_folder import RunFolder  # noqa: E402
from reference_gpt import RefConfig, ReferenceGPT  # noqa: E402

PRESET = "nanogpt-cpu"
CONTENDERS = ["engine", "bare", "reference (bias False)", "reference (bias True)"]
PHASES = ["data", "forward", "backward", "clip", "optimizer"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def default_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def write_json_atomic(path: str, payload: dict) -> None:
    from reslab.fileio import write_json  # temporary file, then rename

    write_json(path, payload)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


# ---- data and config ---------------------------------------------------------------------------------
def choose_data(kind: str, tmp: Path) -> tuple[dict, str]:
    """(the [data] table of the run config, a description). TinyShakespeare (char) when it is found
    locally (no download, no KJV fallback: a benchmark must not change corpus silently); otherwise,
    or with --data generated, the generated corpus of tests/train_helpers.py."""
    if kind in ("auto", "tinyshakespeare"):
        table = {"corpus": "tinyshakespeare", "tokenizer": "char"}
        if kind == "auto":
            table.update(download=False, fallback=False)
        try:
            data = prepare_dataset(DataConfig(**table), progress=False, log=lambda *_: None)
            return table, f"{data.meta.get('corpus')} (char, {len(data.train):,} train tokens)"
        except (ReslabError, OSError) as e:
            if kind == "tinyshakespeare":
                raise
            log(f"data: TinyShakespeare not available ({e}); using the generated corpus")
    sys.path.insert(0, str(ROOT))
    from tests.train_helpers import write_corpus

    corpus = write_corpus(tmp)
    table = {"corpus": "text", "path": str(corpus), "tokenizer": "char", "cache_dir": str(tmp / "cache")}
    return table, "generated corpus of tests/train_helpers.py (char)"


def bench_config(args, data_table: dict):
    """The nanogpt-cpu preset, shaped by the flags, training only (no evaluation inside the loop)."""
    raw = read_toml(str(preset_path(PRESET)))
    raw["name"] = "bench-engine"
    raw["data"] = dict(data_table)
    raw["model"].update(n_layer=args.layers, n_head=args.heads, n_embd=args.width,
                        block_size=args.context, vocab_size=args.vocab, dropout=0.0)
    raw["train"].update(steps=args.steps, batch_size=args.batch, eval_interval=args.steps + 1,
                        eval_iters=1, log_interval=1, checkpoint_interval=0, keep_checkpoints=1,
                        progress="off", threads=args.threads, device="cpu", dtype="float32")
    return build_run_config(raw, where=f"preset {PRESET} (bench)")


# ---- engine ------------------------------------------------------------------------------------------
@contextlib.contextmanager
def instrumented_engine():
    """Timestamps of every metrics row as the trainer logs it, and the time of evaluations and
    checkpoint writes. Wraps methods/functions for the duration only; records two clock reads per
    call and nothing else."""
    rec = {"rows": [], "evaluate": [], "checkpoint": [], "evaluate_start": []}
    orig_log = RunFolder.log
    orig_eval, orig_save, orig_best = engine_single.evaluate, engine_single.save_checkpoint, engine_single.save_best

    def timed_log(self, row):
        rec["rows"].append((time.perf_counter(), time.process_time(), row))
        return orig_log(self, row)

    def timer(fn, key):
        def wrapped(*a, **kw):
            t = time.perf_counter()
            rec.setdefault(key + "_start", []).append(t)
            try:
                return fn(*a, **kw)
            finally:
                rec[key].append(time.perf_counter() - t)
        return wrapped

    RunFolder.log = timed_log
    engine_single.evaluate = timer(orig_eval, "evaluate")
    engine_single.save_checkpoint = timer(orig_save, "checkpoint")
    engine_single.save_best = timer(orig_best, "checkpoint")
    try:
        yield rec
    finally:
        RunFolder.log = orig_log
        engine_single.evaluate, engine_single.save_checkpoint, engine_single.save_best = orig_eval, orig_save, orig_best


def run_engine(cfg, out: Path, skip: int, tokens_per_step: int) -> dict:
    with instrumented_engine() as rec:
        t = time.perf_counter()
        result = engine_loop.train(cfg, out, log=lambda *_: None)
        total = time.perf_counter() - t
    if result.status != "completed":
        raise RuntimeError(f"engine run ended {result.status}")
    train_rows = [(w, c, r) for w, c, r in rec["rows"] if "train_loss" in r]
    steps = [r["step"] for _, _, r in train_rows]
    if steps != list(range(1, len(steps) + 1)):
        raise RuntimeError("engine: expected one metrics row per step (log_interval 1)")
    # Row k (k = 1..N) is logged right after update k; the time between rows k-1 and k is update k.
    wall = [train_rows[i][0] - train_rows[i - 1][0] for i in range(1, len(train_rows))]
    cpu = [train_rows[i][1] - train_rows[i - 1][1] for i in range(1, len(train_rows))]
    metric = [tokens_per_step / r["tokens_per_s"] for _, _, r in train_rows]
    keep_from = max(skip, 1)  # update 1 has no previous row: timestamps start at update 2
    w_kept = wall[keep_from - 1:]
    return {
        "step_s": w_kept,
        "cpu_s": cpu[keep_from - 1:],
        "metric_step_s": metric[skip:],
        "loop_s": train_rows[-1][0] - train_rows[keep_from - 1][0],
        "loop_steps": len(w_kept),
        "losses": [r["train_loss"] for _, _, r in train_rows],
        "total_s": total,
        "evaluate_s": sum(rec["evaluate"]),
        "checkpoint_s": sum(rec["checkpoint"]),
    }


# ---- bare loops ----------------------------------------------------------------------------------------
def run_bare(model, optimizer, batches: TrainBatches, o_cfg, steps: int, skip: int) -> dict:
    """The minimum of a training step, timed per phase. Losses are kept as tensors and read after."""
    clip = o_cfg.grad_clip if o_cfg.grad_clip > 0 else float("inf")
    params = list(model.parameters())
    model.train()
    pc, ptime = time.perf_counter, time.process_time
    step_s, cpu_s, phases, losses = [], [], {p: [] for p in PHASES}, []
    loop_start = None
    t_prev, c_prev = pc(), ptime()
    for step in range(steps):
        if step == skip:
            loop_start = t_prev
        lr = learning_rate(step, o_cfg, steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = batches.get(step, 0)
        t1 = pc()
        _, loss = model(x, y)
        t2 = pc()
        loss.backward()
        t3 = pc()
        torch.nn.utils.clip_grad_norm_(params, clip)
        t4 = pc()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t5 = pc()
        c5 = ptime()
        losses.append(loss.detach())
        if step >= skip:
            step_s.append(t5 - t_prev)
            cpu_s.append(c5 - c_prev)
            for name, dt in zip(PHASES, (t1 - t_prev, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                phases[name].append(dt)
        t_prev, c_prev = t5, c5
    return {"step_s": step_s, "cpu_s": cpu_s, "phase_s": phases,
            "loop_s": (t_prev - loop_start) if loop_start is not None else 0.0, "loop_steps": len(step_s),
            "losses": [float(v) for v in losses]}


# ---- micro-costs of what only the engine does per step ---------------------------------------------------
def micro_costs(model, tmp: Path, n: int) -> dict:
    """Microseconds per call, in isolation, of per-step work that the bare loop does not do."""
    from reslab.model.residual import Residual
    from reslab.progress import Progress
    from reslab.train.throughput import mfu

    def per_call(fn, reps=n):
        fn()
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        return 1e6 * (time.perf_counter() - t) / reps

    folder = RunFolder(tmp / "micro")
    folder.path.mkdir(parents=True, exist_ok=True)
    row = {"step": 123, "train_loss": 1.2345678, "lr": 0.000987654, "grad_norm": 0.456789, "tokens_per_s": 12345.678}
    progress = Progress(1000, "x", mode="off")
    loss, norm = torch.tensor(1.5), torch.tensor(0.7)
    cfg = model.config
    x = torch.randn(12, cfg.block_size, cfg.n_embd)
    b = torch.randn_like(x)
    res = Residual()
    out = {
        "metrics_row_write_us": per_call(lambda: folder.log(row)),  # json.dumps + write + flush
        "json_dumps_row_us": per_call(lambda: json.dumps(row)),
        "progress_update_off_us": per_call(lambda: progress.update(5, loss=1.0, val=None, tok_s=1)),
        "item_and_float_us": per_call(lambda: (loss.item(), float(norm))),
        "loss_sum_accumulate_us": per_call(lambda: torch.zeros(()).add_(loss)),
        "mfu_cpu_us": per_call(lambda: mfu(12345.0, model, cfg.block_size, "cpu", "float32", 1)),
        "set_step_us": per_call(lambda: model.set_step(5)),
        "residual_module_add_us": per_call(lambda: res(x, b)),
        "plain_add_us": per_call(lambda: x + b),
    }
    folder.close()
    out["residual_calls_per_forward"] = len([m for m in model.modules() if isinstance(m, Residual)])
    # AdamW implementations on this model's parameters (the trainer uses the fused kernel by
    # default; the reference loop uses torch's default, the for-loop one, as nanoGPT does on CPU)
    for impl, kw in (("forloop", {"foreach": False}), ("foreach", {"foreach": True}), ("fused", {"fused": True})):
        try:
            ps = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
            for p in ps:
                p.grad = torch.randn_like(p) * 1e-3
            opt = torch.optim.AdamW(ps, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1, **kw)
            out[f"adamw_step_{impl}_us"] = per_call(opt.step, max(n // 50, 5))
        except (RuntimeError, ValueError) as e:
            log(f"micro: AdamW {impl} unavailable ({e})")
    return out


# ---- the benchmark ----------------------------------------------------------------------------------------
def summarize(name: str, runs: list[dict], tokens: int) -> dict:
    step = [s for r in runs for s in r["step_s"]]
    cpu = [s for r in runs for s in r["cpu_s"]]
    loop_s = sum(r["loop_s"] for r in runs)
    loop_steps = sum(r["loop_steps"] for r in runs)
    out = {
        "contender": name,
        "step_ms": 1e3 * median(step),
        "tokens_per_s": tokens / median(step),
        "step_ms_min": 1e3 * min(step),
        "step_ms_max": 1e3 * max(step),
        "step_cpu_ms": 1e3 * median(cpu),
        "loop_tokens_per_s": tokens * loop_steps / loop_s if loop_s > 0 else None,
        "round_median_ms": [1e3 * median(r["step_s"]) for r in runs],
        "n_samples": len(step),
    }
    if "metric_step_s" in runs[0]:
        metric = [s for r in runs for s in r["metric_step_s"]]
        out["metrics_step_ms"] = 1e3 * median(metric)
        out["metrics_tokens_per_s"] = tokens / median(metric)
        out["evaluate_s"] = [r["evaluate_s"] for r in runs]
        out["checkpoint_s"] = [r["checkpoint_s"] for r in runs]
        out["train_call_s"] = [r["total_s"] for r in runs]
    if "phase_s" in runs[0]:
        out["phase_ms"] = {p: 1e3 * median([s for r in runs for s in r["phase_s"][p]]) for p in PHASES}
    return out


def run_benchmark(args) -> dict:
    threads = args.threads
    with tempfile.TemporaryDirectory(prefix="bench_engine.") as tmp_name:
        tmp = Path(tmp_name)
        data_table, data_desc = choose_data(args.data, tmp)
        cfg = bench_config(args, data_table)
        data = prepare_dataset(cfg.data, progress=False, log=lambda *_: None)
        model_cfg = cfg.model
        if model_cfg.vocab_size < data.vocab_size:  # as the trainer does
            model_cfg = model_cfg.replace(vocab_size=data.vocab_size)
        t_cfg, o_cfg = cfg.train, cfg.optim
        init_seed = derive_seed(t_cfg.seed, "init")
        data_seed = derive_seed(t_cfg.seed, "data")
        tokens = t_cfg.batch_size * model_cfg.block_size
        ref_seed = 1234

        def fresh_reslab():
            model = reslab.build_model(model_cfg, seed=init_seed)
            return model, build_optimizer(model, o_cfg, "cpu")

        def fresh_reference(bias: bool):
            model = ReferenceGPT(RefConfig(vocab_size=model_cfg.vocab_size, block_size=model_cfg.block_size,
                                           n_layer=model_cfg.n_layer, n_head=model_cfg.n_head,
                                           n_embd=model_cfg.n_embd, dropout=0.0, bias=bias), seed=ref_seed)
            return model, model.optimizer(lr=o_cfg.lr, betas=(o_cfg.beta1, o_cfg.beta2),
                                          weight_decay=o_cfg.weight_decay, eps=o_cfg.eps)

        params = {"engine": fresh_reslab()[0].param_counts()["total"]}
        params["bare"] = params["engine"]
        for bias in (False, True):
            params[f"reference (bias {bias})"] = fresh_reference(bias)[0].num_params()

        runs = {c: [] for c in CONTENDERS}
        loss_diff = []
        t_start = time.perf_counter()
        for rnd in range(args.rounds):
            k = rnd % len(CONTENDERS)
            order = CONTENDERS[k:] + CONTENDERS[:k]
            engine_losses = bare_losses = None
            for name in order:
                gc.collect()
                if name == "engine":
                    r = run_engine(cfg, tmp / f"engine-{rnd}", args.skip, tokens)
                    engine_losses = r["losses"]
                else:
                    if name == "bare":
                        model, opt = fresh_reslab()
                    else:
                        model, opt = fresh_reference(name.endswith("True)"))
                    batches = TrainBatches(data.train, t_cfg.batch_size, model_cfg.block_size, data_seed)
                    r = run_bare(model, opt, batches, o_cfg, t_cfg.steps, args.skip)
                    if name == "bare":
                        bare_losses = r["losses"]
                    del model, opt
                runs[name].append(r)
            loss_diff.append(max(abs(a - b) for a, b in zip(engine_losses, bare_losses)))
            log(f"  round {rnd + 1}/{args.rounds} done ({time.perf_counter() - t_start:.0f} s)")
        wall = time.perf_counter() - t_start

        rows = [summarize(c, runs[c], tokens) for c in CONTENDERS]
        for r in rows:
            r["params"] = params[r["contender"]]
        by = {r["contender"]: r for r in rows}
        eng, bare = by["engine"], by["bare"]
        ref_f, ref_t = by["reference (bias False)"], by["reference (bias True)"]
        for r in rows:
            r["step_ms_vs_bare"] = r["step_ms"] / bare["step_ms"]
        same = ref_t if model_cfg.bias else ref_f
        pct = lambda a, b: 100.0 * (a / b - 1.0)  # noqa: E731
        summary = {
            "engine_overhead_pct": pct(eng["step_ms"], bare["step_ms"]),
            "engine_overhead_pct_metrics": pct(eng["metrics_step_ms"], bare["step_ms"]),
            "engine_overhead_pct_cpu": pct(eng["step_cpu_ms"], bare["step_cpu_ms"]),
            "engine_overhead_pct_fastest": pct(eng["step_ms_min"], bare["step_ms_min"]),
            "engine_overhead_pct_loop_wall": (pct(bare["loop_tokens_per_s"], eng["loop_tokens_per_s"])
                                              if eng["loop_tokens_per_s"] and bare["loop_tokens_per_s"] else None),
            # the reference with reslab's bias setting is the same architecture (same parameters)
            "reference_same_architecture": same["contender"],
            "reslab_vs_reference_same": bare["step_ms"] / same["step_ms"],
            "reslab_vs_reference_same_cpu": bare["step_cpu_ms"] / same["step_cpu_ms"],
            "reslab_vs_reference_same_fastest": bare["step_ms_min"] / same["step_ms_min"],
            "reslab_vs_reference_bias_true": bare["step_ms"] / ref_t["step_ms"],
            "reslab_vs_reference_bias_false": bare["step_ms"] / ref_f["step_ms"],
            "engine_vs_bare_max_abs_loss_diff": max(loss_diff),
        }
        micro = micro_costs(fresh_reslab()[0], tmp, 200 if args.quick else 2000)

    c = model_cfg
    return {
        "torch": torch.__version__, "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
        "python": platform.python_version(), "machine": platform.machine(),
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "argv": sys.argv[1:], "load_avg_before": args.load_before, "load_avg_after": _loadavg(),
        "data": data_desc,
        "model": {"design": c.design, "n_layer": c.n_layer, "n_head": c.n_head, "n_embd": c.n_embd,
                  "block_size": c.block_size, "vocab_size": c.vocab_size, "bias": c.bias,
                  "tie_weights": c.tie_weights, "dropout": c.dropout},
        "batch": t_cfg.batch_size, "tokens_per_step": tokens,
        "optim": {"lr": o_cfg.lr, "min_lr": o_cfg.min_lr, "warmup_steps": o_cfg.warmup_steps,
                  "betas": [o_cfg.beta1, o_cfg.beta2], "weight_decay": o_cfg.weight_decay,
                  "grad_clip": o_cfg.grad_clip, "schedule": o_cfg.schedule},
        "timing": {"steps_per_round": t_cfg.steps, "rounds": args.rounds, "skip": args.skip,
                   "threads": threads},
        "wall_s": wall, "rows": rows, "summary": summary, "micro_us": micro,
    }


def _loadavg():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


# ---- output --------------------------------------------------------------------------------------------------
COLUMNS = ["contender", "params", "ms/step", "tokens/s", "vs bare", "fastest ms", "CPU ms/step", "loop tokens/s"]


def table(rows: list[dict], markdown: bool, columns: list[str], cells) -> str:
    body = [cells(r) for r in rows]
    if markdown:
        lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(["---"] + ["---:"] * (len(columns) - 1)) + "|"]
        return "\n".join(lines + ["| " + " | ".join(b) + " |" for b in body])
    widths = [max(len(col), *(len(b[i]) for b in body)) for i, col in enumerate(columns)]
    fmt = lambda cs: "  ".join(x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(zip(cs, widths)))  # noqa: E731
    return "\n".join([fmt(columns), fmt(["-" * w for w in widths])] + [fmt(b) for b in body])


def main_cells(r: dict) -> list[str]:
    loop = f"{r['loop_tokens_per_s']:,.0f}" if r["loop_tokens_per_s"] else "n/a"
    return [r["contender"], f"{r['params']:,}", f"{r['step_ms']:.2f}", f"{r['tokens_per_s']:,.0f}",
            f"{r['step_ms_vs_bare']:.3f}", f"{r['step_ms_min']:.2f}", f"{r['step_cpu_ms']:.2f}", loop]


def report(res: dict, markdown: bool) -> str:
    m, s, t = res["model"], res["summary"], res["timing"]
    eng = next(r for r in res["rows"] if r["contender"] == "engine")
    lines = [
        "## bench_engine: reslab trainer vs a bare loop vs a plain PyTorch GPT",
        f"torch {res['torch']}, threads {res['threads']} (cpu_count {res['cpu_count']}), python {res['python']}, "
        f"{res['machine']}; load average before {_fmt_load(res['load_avg_before'])}, after "
        f"{_fmt_load(res['load_avg_after'])}",
        f"model: {m['design']}, n_layer {m['n_layer']}, n_head {m['n_head']}, n_embd {m['n_embd']}, "
        f"block_size {m['block_size']}, vocab {m['vocab_size']}, bias {m['bias']}, tied head, dropout "
        f"{m['dropout']}, float32; batch {res['batch']} -> {res['tokens_per_step']} tokens/step",
        f"optim: AdamW lr {res['optim']['lr']} (warmup {res['optim']['warmup_steps']}, {res['optim']['schedule']} "
        f"to {res['optim']['min_lr']}), betas {res['optim']['betas']}, wd {res['optim']['weight_decay']} on "
        f"matrices, clip {res['optim']['grad_clip']}; data: {res['data']}",
        f"timing: {t['rounds']} rounds x {t['steps_per_round']} steps per contender, interleaved (order "
        f"rotated), first {t['skip']} steps of each round dropped; medians over all rounds; wall "
        f"{res['wall_s']:.0f} s",
        "",
        table(res["rows"], markdown, COLUMNS, main_cells),
        "",
        f"engine step time from its own metrics.jsonl tokens_per_s: {eng['metrics_step_ms']:.2f} ms/step "
        f"({eng['metrics_tokens_per_s']:,.0f} tokens/s); from row timestamps (everything, logging "
        f"included): {eng['step_ms']:.2f} ms/step",
        f"engine overhead vs bare: {s['engine_overhead_pct']:+.1f}% (median wall, timestamps), "
        f"{s['engine_overhead_pct_metrics']:+.1f}% (as metrics.jsonl reports it), "
        f"{s['engine_overhead_pct_cpu']:+.1f}% (median process CPU), "
        f"{s['engine_overhead_pct_fastest']:+.1f}% (fastest step)"
        + (f", {s['engine_overhead_pct_loop_wall']:+.1f}% (loop wall clock)"
           if s["engine_overhead_pct_loop_wall"] is not None else ""),
        f"reslab model vs reference (bare loops, step-time ratio; >1 = reslab slower): "
        f"{s['reslab_vs_reference_same']:.3f} vs {s['reference_same_architecture']}, the same "
        f"architecture (CPU-time ratio {s['reslab_vs_reference_same_cpu']:.3f}, fastest-step ratio "
        f"{s['reslab_vs_reference_same_fastest']:.3f}); "
        + (f"{s['reslab_vs_reference_bias_true']:.3f} vs reference (bias True)"
           if s["reference_same_architecture"].endswith("False)")
           else f"{s['reslab_vs_reference_bias_false']:.3f} vs reference (bias False), nanoGPT's default"),
        f"engine and bare reslab train losses, step by step: max |difference| "
        f"{s['engine_vs_bare_max_abs_loss_diff']:.3g} (0 = the same computation)",
        f"engine, untimed per round: evaluations {median(eng['evaluate_s']):.2f} s, checkpoint writes "
        f"{median(eng['checkpoint_s']):.2f} s, whole train() call {median(eng['train_call_s']):.1f} s",
        "",
        "bare loops, median ms per phase:",
        "",
        table([r for r in res["rows"] if "phase_ms" in r], markdown, ["contender"] + PHASES,
              lambda r: [r["contender"]] + [f"{r['phase_ms'][p]:.3f}" for p in PHASES]),
        "",
        "micro-costs in isolation, microseconds per call (engine-only per-step work: metrics row, "
        "progress, item, loss sum, mfu, set_step; model: Residual vs plain add; AdamW step by "
        "implementation, the trainer's CPU default being forloop): "
        + ", ".join(f"{k[:-3]} {v:.1f}" for k, v in res["micro_us"].items() if k.endswith("_us"))
        + f"; Residual modules per forward: {res['micro_us']['residual_calls_per_forward']}",
    ]
    return "\n".join(lines)


def _fmt_load(load) -> str:
    return "n/a" if not load else " ".join(f"{x:.2f}" for x in load)


# ---- the whole nanogpt-cpu preset -------------------------------------------------------------------------------
def nanogpt_cpu_run(args) -> int:
    raw = read_toml(str(preset_path(PRESET)))
    raw["train"].update(progress=args.progress, threads=args.threads)
    if args.run_steps is not None:  # a shortened run (a smoke test); the schedule follows the steps
        raw["train"]["steps"] = args.run_steps
    cfg = build_run_config(raw, where=f"preset {PRESET}")
    with contextlib.ExitStack() as stack:
        if args.out:
            out = Path(args.out)
        else:
            out = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nanogpt_cpu_run."))) / "run"
        log(f"training preset {PRESET} ({cfg.train.steps} steps) into {out}")
        with instrumented_engine() as rec:
            t0 = time.perf_counter()
            result = engine_loop.train(cfg, out, log=log)
            total = time.perf_counter() - t0
        rows = [r for _, _, r in rec["rows"]]
    evals = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
    tps = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r["tokens_per_s"]]
    train_rows = [(w, r) for w, _, r in rec["rows"] if "train_loss" in r]
    eval_s, ckpt_s = sum(rec["evaluate"]), sum(rec["checkpoint"])
    setup_s = rec["evaluate_start"][0] - t0 if rec["evaluate_start"] else 0.0  # data, model, folder
    res = {
        "preset": PRESET, "torch": torch.__version__, "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(), "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "load_avg_before": args.load_before, "load_avg_after": _loadavg(),
        "status": result.status, "steps": result.step,
        "final_val_loss": result.final_val_loss, "best_val_loss": result.best_val_loss,
        "evaluations": evals, "last_train_loss": train_rows[-1][1]["train_loss"] if train_rows else None,
        "wall_s": total, "evaluate_s": eval_s, "checkpoint_s": ckpt_s,
        "setup_s": setup_s,
        "train_steps_s": total - setup_s - eval_s - ckpt_s,  # the training loop without evaluations
        "median_tokens_per_s": median(tps[5:] or tps),
    }
    fmt = lambda v: "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4f}"  # noqa: E731
    print(f"## {PRESET} through reslab.train.loop.train")
    print(f"torch {res['torch']}, threads {res['threads']} (cpu_count {res['cpu_count']}); load average "
          f"before {_fmt_load(res['load_avg_before'])}, after {_fmt_load(res['load_avg_after'])}")
    print(f"status {res['status']} at step {res['steps']}")
    print(f"final val loss {fmt(res['final_val_loss'])}, best val loss {fmt(res['best_val_loss'])}, "
          f"last train loss {fmt(res['last_train_loss'])}")
    print(f"wall time {total:.1f} s total: setup {setup_s:.1f} s, evaluations {eval_s:.1f} s ({len(evals)}), "
          f"checkpoint writes {ckpt_s:.2f} s, training steps {res['train_steps_s']:.1f} s; median "
          f"{res['median_tokens_per_s']:,.0f} tokens/s while training")
    print("val loss by step: " + ", ".join(f"{s} {v:.4f}" for s, v in evals), flush=True)
    if args.json:
        write_json_atomic(args.json, res)
    return 0 if result.status == "completed" else 1


# ---- CLI ---------------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=100, help="steps per contender per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--skip", type=int, default=5, help="first steps of each round not timed")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--width", type=int, default=128, help="n_embd")
    p.add_argument("--context", type=int, default=64, help="block_size = sequence length")
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--vocab", type=int, default=65, help="raised to the tokenizer's size if smaller")
    p.add_argument("--data", choices=["auto", "tinyshakespeare", "generated"], default=None,
                   help="auto (default): TinyShakespeare if found locally, else the generated corpus; "
                        "tinyshakespeare: reslab's default lookup (may download / fall back to KJV); "
                        "--quick defaults to generated")
    p.add_argument("--json", metavar="OUT", default=None, help="write results JSON (atomically)")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.add_argument("--quick", action="store_true", help="tiny model, few steps: a sanity run in seconds")
    p.add_argument("--nanogpt-cpu-run", action="store_true",
                   help=f"train the whole {PRESET} preset through reslab's trainer (~4 min on 2 cores) "
                        "and report final / best val loss and wall time")
    p.add_argument("--out", default=None, help="--nanogpt-cpu-run: keep the run folder here (default: a temp folder)")
    p.add_argument("--run-steps", type=int, default=None,
                   help="--nanogpt-cpu-run: train this many steps instead of the preset's (a smoke test)")
    p.add_argument("--progress", default="lines", choices=["auto", "bar", "lines", "off"],
                   help="--nanogpt-cpu-run: progress display")
    args = p.parse_args(argv)
    if args.quick:
        args.layers, args.heads, args.width, args.context, args.batch = 2, 2, 32, 16, 4
        args.steps, args.rounds, args.skip = 6, 2, 2
        args.data = args.data or "generated"
    args.data = args.data or "auto"
    for name in ("steps", "rounds", "layers", "heads", "width", "context", "batch", "vocab"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    if not 0 <= args.skip < args.steps - 1:
        p.error("--skip must be >= 0 and leave at least two timed steps (--skip < --steps - 1)")
    if args.width % args.heads:
        p.error("--heads must divide --width")
    if args.run_steps is not None and args.run_steps < 1:
        p.error("--run-steps must be >= 1")
    args.threads = args.threads or default_threads()
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    args.load_before = _loadavg()
    torch.set_num_threads(args.threads)
    if args.nanogpt_cpu_run:
        return nanogpt_cpu_run(args)
    log(f"bench_engine: {args.rounds} rounds x {args.steps} steps x {len(CONTENDERS)} contenders, "
        f"{args.threads} threads")
    res = run_benchmark(args)
    print(report(res, args.markdown), flush=True)
    if args.json:
        write_json_atomic(args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
