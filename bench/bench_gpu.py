#!/usr/bin/env python
"""GPU training throughput of the block designs at GPT-2 small (124M), one run per design.

For each design this builds the model, compiles it (torch.compile, inductor), runs --warmup
untimed updates (the first one compiles; its time is reported apart), then times --steps updates
and reports

    ms/step      median over the timed updates (CUDA events on GPU, perf_counter on CPU)
    tokens/s     batch * context / median step time
    MFU          reslab.train.throughput.mfu (bf16 peak of the device; None on CPU / float32)
    peak GiB     torch.cuda.max_memory_allocated (None on CPU)
    compile s    first update's wall time minus the median step time
    recompiles   new dynamo graphs / frame compilations during the timed updates (must be 0)

One update is the trainer's (reslab/train/single.py `SingleEngine.update` with grad_accum = 1): model.set_step(t)
(ProRes alpha(l, t), a buffer), the lr of the trainer's schedule written into the param groups,
forward under bf16 autocast, backward, global-norm clip at 1.0, fused AdamW built by
reslab.train.optim.build_optimizer (the trainer's optimizer), zero_grad(set_to_none=True). On CUDA
forward and backward run inside sdpa_kernel([FLASH_ATTENTION]), so attention that cannot use
flash attention fails loudly instead of silently taking another kernel; TF32 is on, as in the
trainer's default. Batches are synthetic: tokens uniform over the vocabulary, drawn on the device
from a seeded torch.Generator (no dataset). Unlike the trainer, an update does not read the loss
and the gradient norm back to the host (they are read after the timed updates), so the GPU is
never left waiting for Python; at ~100 ms per update that difference is small.

Design labels: any reslab design name, or NAME+prores (ProRes "linear", warmup 100 updates, so
alpha changes at every timed update; the recompile count proves that this costs no recompilation).

Configuration (124M): 12 layers, 12 heads, width 768, context 1024, vocab 50304, dropout 0, tied
head, learned positions, biases (reslab's defaults), batch 32 (32,768 tokens per update).
--smoke: 2 layers, width 64, 2 heads, context 32, vocab 128, batch 2, 2 timed updates, on the CPU
in float32, compile off unless --compile: the same code path in seconds.

Examples:
    python bench/bench_gpu.py --markdown --json /tmp/bench_gpu.json
    python bench/bench_gpu.py --designs pre-ln,pre-ln+prores --steps 50 --batch-size 16
    python bench/bench_gpu.py --smoke
    python bench/bench_gpu.py --smoke --compile --designs pre-ln+prores
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import gc
import math
import platform
import statistics
import sys
import time
import traceback

import torch

from reslab.config import ModelConfig
from reslab.model.gpt import GPT
from reslab.model.registry import DESIGNS
from reslab.train.config import OptimConfig
from reslab.train.optim import build_optimizer, learning_rate
from reslab.train.throughput import flops_per_token, mfu

# pre-ln+prores second: the recompile check is the point, and it reuses most of pre-ln's kernels
DEFAULT_DESIGNS = ("pre-ln", "pre-ln+prores", "post-ln", "resi-dual", "sas-p")
PRORES_SCHEDULE = "linear"
PRORES_WARMUP = 100
GRAD_CLIP = 1.0
GIB = 1024 ** 3


@dataclasses.dataclass(frozen=True)
class Shape:
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    vocab_size: int
    batch_size: int


PAPER = Shape(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50304, batch_size=32)
SMOKE = Shape(n_layer=2, n_head=2, n_embd=64, block_size=32, vocab_size=128, batch_size=2)


def model_config(label: str, shape: Shape) -> ModelConfig:
    """The ModelConfig of a design label: 'NAME' or 'NAME+prores'."""
    design, plus, extra = label.partition("+")
    if design not in DESIGNS:
        raise ValueError(f"unknown design {design!r} in {label!r}; choose from {', '.join(DESIGNS)}")
    kw = {}
    if plus:
        if extra != "prores":
            raise ValueError(f"{label!r}: the only suffix is '+prores'")
        kw = dict(prores=PRORES_SCHEDULE, prores_warmup=PRORES_WARMUP)
    return ModelConfig(design=design, vocab_size=shape.vocab_size, n_layer=shape.n_layer, n_head=shape.n_head,
                       n_embd=shape.n_embd, block_size=shape.block_size, dropout=0.0, tie_weights=True, **kw)


def optim_config() -> OptimConfig:
    """GPT-2 small's AdamW (nanoGPT's OpenWebText settings); clip 1.0 as the trainer."""
    return OptimConfig(lr=6e-4, min_lr=6e-5, warmup_steps=10, beta1=0.9, beta2=0.95, weight_decay=0.1,
                       grad_clip=GRAD_CLIP)


# ---- compilations ------------------------------------------------------------------------------
def dynamo_counts() -> dict:
    """Cumulative dynamo counters: graphs compiled and frames converted (a cache miss each).

    counters is a defaultdict of Counters in every torch 2.x (missing keys read 0); 'unique_graphs'
    grows by one per graph handed to the backend, frames 'total' by one per frame dynamo had to
    (re)convert because no cached entry's guards passed. In steady state both stay constant."""
    try:
        from torch._dynamo.utils import counters
    except Exception:  # pragma: no cover - torch without dynamo
        return {"graphs": 0, "frames": 0}
    return {"graphs": int(counters["stats"]["unique_graphs"]), "frames": int(counters["frames"]["total"])}


def count_delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before[k] for k in before}


# ---- one design ----------------------------------------------------------------------------------
def _contexts(device: torch.device, amp_dtype):
    """(sdpa context factory, autocast context factory) for the device."""
    if device.type == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        sdpa = lambda: sdpa_kernel([SDPBackend.FLASH_ATTENTION])  # noqa: E731
    else:
        sdpa = contextlib.nullcontext  # CPU: no backend forced
    if amp_dtype is None:
        return sdpa, contextlib.nullcontext
    return sdpa, lambda: torch.autocast(device_type=device.type, dtype=amp_dtype)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_design(label: str, shape: Shape, *, device: torch.device, use_compile: bool, steps: int, warmup: int,
               amp_dtype=None, seed: int = 0, log=lambda msg: None) -> dict:
    """Build, compile, warm up and time one design. Raises on failure (the caller records it)."""
    if steps < 1 or warmup < 1:
        raise ValueError("steps and warmup must be >= 1 (the first warmup update compiles)")
    cuda = device.type == "cuda"
    dtype_name = {torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(amp_dtype, "float32")
    cfg = model_config(label, shape)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    raw = GPT(cfg, seed=seed).to(device)
    raw.train()
    o_cfg = optim_config()
    optimizer = build_optimizer(raw, o_cfg, device.type)  # the trainer's optimizer: fused AdamW groups
    fused = bool(optimizer.defaults.get("fused"))
    model = torch.compile(raw) if use_compile else raw
    gen = torch.Generator(device=device).manual_seed(seed)
    sdpa, autocast = _contexts(device, amp_dtype)
    B, T, V = shape.batch_size, shape.block_size, shape.vocab_size
    total_steps = warmup + steps

    def update(step: int):
        """One optimizer update exactly as the trainer's loop does it (grad_accum 1)."""
        raw.set_step(step)  # ProRes alpha(l, t): a buffer written in place, no recompilation
        lr = learning_rate(step, o_cfg, total_steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        tokens = torch.randint(0, V, (B, T + 1), device=device, generator=gen)
        x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        with sdpa():
            with autocast():
                _, loss = model(x, y)
            loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(raw.parameters(), GRAD_CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach(), grad_norm.detach()

    # ---- warm-up: the first update compiles (forward, then backward) ------------------------------
    counts0 = dynamo_counts()
    t0 = time.perf_counter()
    update(0)
    _sync(device)
    first_s = time.perf_counter() - t0
    for step in range(1, warmup):
        update(step)
    _sync(device)
    warm_s = time.perf_counter() - t0
    counts1 = dynamo_counts()
    log(f"{label}: first update {first_s:.1f} s, warm-up {warm_s:.1f} s")

    # ---- timed updates ---------------------------------------------------------------------------
    alpha_first = None
    results, step_s = [], []
    start = time.perf_counter()
    if cuda:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(steps)]
        for i in range(steps):
            events[i][0].record()
            results.append(update(warmup + i))
            events[i][1].record()
            if i == 0 and cfg.prores != "none":
                alpha_first = raw.prores_alphas()  # alpha(l, t) of the first timed update
        torch.cuda.synchronize(device)
        step_s = [a.elapsed_time(b) / 1000.0 for a, b in events]
    else:
        for i in range(steps):
            t = time.perf_counter()
            results.append(update(warmup + i))
            step_s.append(time.perf_counter() - t)
            if i == 0 and cfg.prores != "none":
                alpha_first = raw.prores_alphas()
    timed_wall = time.perf_counter() - start
    counts2 = dynamo_counts()
    alpha_last = raw.prores_alphas() if cfg.prores != "none" else None

    losses = [float(l) for l, _ in results]
    norms = [float(n) for _, n in results]
    median_s = statistics.median(step_s)
    tokens_per_step = B * T
    tps = tokens_per_step / median_s
    util = mfu(tps, raw, T, torch.cuda.get_device_name(device), dtype_name) if cuda else None
    during = count_delta(counts1, counts2)
    row = {
        "design": label, "error": None,
        "params": raw.param_counts()["total"],
        "batch_size": B, "seq_len": T, "tokens_per_step": tokens_per_step,
        "device": str(device), "dtype": dtype_name, "compiled": use_compile, "fused_adamw": fused,
        "steps": steps, "warmup": warmup,
        "step_ms_median": median_s * 1000.0, "step_ms_min": min(step_s) * 1000.0,
        "step_ms_max": max(step_s) * 1000.0,
        "tokens_per_s": tps, "tokens_per_s_wall": steps * tokens_per_step / timed_wall,
        "flops_per_token": flops_per_token(raw, T),
        "mfu": util,
        "peak_mem_gib": torch.cuda.max_memory_allocated(device) / GIB if cuda else None,
        "first_step_s": first_s, "warmup_s": warm_s,
        "compile_s": max(first_s - median_s, 0.0) if use_compile else None,
        # dynamo graphs compiled in warm-up (1 = the forward in one graph, no graph break)
        "graphs_warmup": count_delta(counts0, counts1)["graphs"],
        # the point of the exercise: nothing may compile again once warm (ProRes alpha changes each step)
        "recompiles": max(during["graphs"], during["frames"]) if use_compile else None,
        "dynamo_during_timed": during if use_compile else None,
        "loss_first": losses[0], "loss_last": losses[-1],
        "grad_norm_last": norms[-1],
        "finite": all(math.isfinite(v) for v in losses + norms),
        "prores_alpha_first_timed": alpha_first, "prores_alpha_last_timed": alpha_last,
    }
    if not row["finite"]:
        raise FloatingPointError(f"{label}: non-finite loss or grad norm in the timed updates")
    return row


def failed_row(label: str, shape: Shape, error: BaseException) -> dict:
    text = str(error).strip().splitlines()
    message = f"{type(error).__name__}: {text[0] if text else ''}"[:400]
    return {"design": label, "error": message, "params": None, "batch_size": shape.batch_size,
            "seq_len": shape.block_size, "tokens_per_s": None, "mfu": None, "step_ms_median": None,
            "peak_mem_gib": None, "compile_s": None, "recompiles": None}


def cleanup(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    try:
        torch._dynamo.reset()  # no compiled code or counters carried from one design to the next
    except Exception:  # pragma: no cover
        pass


def run_all(labels, shape: Shape, *, device: torch.device, use_compile: bool, steps: int, warmup: int,
            amp_dtype=None, seed: int = 0, log=print, after_each=None) -> list[dict]:
    """Every design in turn; a failure becomes a row with its error and the next design runs.
    after_each(rows) is called after every design (main() writes the JSON there, so a run killed
    by a time limit keeps the rows it finished)."""
    rows = []
    for label in labels:
        cleanup(device)
        log(f"{label}: building and {'compiling' if use_compile else 'running (not compiled)'} ...")
        try:
            row = run_design(label, shape, device=device, use_compile=use_compile, steps=steps, warmup=warmup,
                             amp_dtype=amp_dtype, seed=seed, log=log)
            util = "" if row["mfu"] is None else f", MFU {100 * row['mfu']:.1f}%"
            log(f"{label}: {row['step_ms_median']:.1f} ms/step, {row['tokens_per_s']:,.0f} tokens/s{util}, "
                f"recompiles {row['recompiles']}")
        except Exception as e:  # OOM, a missing flash kernel, a compile error: record it, go on
            traceback.print_exc(file=sys.stderr)
            row = failed_row(label, shape, e)
            log(f"{label}: FAILED {row['error']}")
        rows.append(row)
        cleanup(device)
        if after_each is not None:
            after_each(rows)
    return rows


# ---- output --------------------------------------------------------------------------------------
COLUMNS = ["design", "params", "batch", "ms/step", "tokens/s", "MFU %", "peak GiB", "compile s", "recompiles"]


def table_cells(r: dict) -> list[str]:
    def num(v, fmt):
        return "-" if v is None else format(v, fmt)
    if r.get("error"):
        return [r["design"], num(r.get("params"), ","), str(r["batch_size"]),
                f"FAILED: {r['error']}"] + [""] * (len(COLUMNS) - 4)
    return [r["design"], f"{r['params']:,}", str(r["batch_size"]), f"{r['step_ms_median']:.1f}",
            f"{r['tokens_per_s']:,.0f}", num(None if r["mfu"] is None else 100 * r["mfu"], ".1f"),
            num(r["peak_mem_gib"], ".2f"), num(r["compile_s"], ".1f"), num(r["recompiles"], "d")]


def format_table(rows: list[dict], markdown: bool) -> str:
    body = [table_cells(r) for r in rows]
    if markdown:
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join(["---"] + ["---:"] * (len(COLUMNS) - 1)) + "|"]
        return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in body])
    widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(COLUMNS)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                                  for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return "\n".join([fmt(COLUMNS), fmt(["-" * w for w in widths])] + [fmt(b) for b in body])


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--designs", default=None,
                   help=f"comma-separated design labels, NAME or NAME+prores (default: {','.join(DEFAULT_DESIGNS)})")
    p.add_argument("--steps", type=int, default=None, help="timed updates per design (default 20; smoke 2)")
    p.add_argument("--warmup", type=int, default=None, help="untimed updates first, the first compiles (default 3; smoke 1)")
    p.add_argument("--batch-size", type=int, default=None, help="sequences per update (default 32; smoke 2)")
    p.add_argument("--compile", dest="compile", action="store_true", default=None,
                   help="torch.compile the model (default: on, except --smoke on the CPU)")
    p.add_argument("--no-compile", dest="compile", action="store_false", help="run the model eagerly")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default=None,
                   help="default: cuda when available (smoke: cpu)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="OUT", default=None, help="write the results as JSON")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument("--smoke", action="store_true",
                   help="tiny model (2 layers, width 64, context 32, vocab 128), batch 2, 2 timed updates, CPU float32")
    args = p.parse_args(argv)
    base = SMOKE if args.smoke else PAPER
    args.steps = args.steps if args.steps is not None else (2 if args.smoke else 20)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.smoke else 3)
    if args.batch_size is not None:
        base = dataclasses.replace(base, batch_size=args.batch_size)
    args.batch_size = base.batch_size
    args.shape = base
    for name in ("steps", "warmup", "batch_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    labels = [s.strip() for s in (args.designs or ",".join(DEFAULT_DESIGNS)).split(",") if s.strip()]
    for label in labels:
        try:
            model_config(label, SMOKE)
        except Exception as e:
            p.error(str(e))
    args.labels = list(dict.fromkeys(labels))
    want = args.device or ("cpu" if args.smoke else "auto")
    if want == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is available")
    args.device = torch.device("cuda" if want == "cuda" or (want == "auto" and torch.cuda.is_available()) else "cpu")
    if args.compile is None:
        args.compile = not (args.smoke and args.device.type == "cpu")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    device = args.device
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    amp_dtype = None
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True  # the trainer's default (train.tf32)
        torch.backends.cudnn.allow_tf32 = True
        amp_dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({platform.processor() or platform.machine()})"
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    s = args.shape
    shape_line = (f"model: {s.n_layer} layers, {s.n_head} heads, width {s.n_embd}, context {s.block_size}, "
                  f"vocab {s.vocab_size}, dropout 0, tied head, bias; batch {s.batch_size} "
                  f"({s.batch_size * s.block_size:,} tokens/update)")
    precision = {torch.bfloat16: "bf16 autocast", torch.float16: "fp16 autocast"}.get(amp_dtype, "float32")
    attention = "SDPA forced to FLASH_ATTENTION" if device.type == "cuda" else "SDPA (backend not forced)"
    run_line = (f"{precision}, {'torch.compile (inductor)' if args.compile else 'eager (not compiled)'}, "
                f"fused AdamW (build_optimizer), clip {GRAD_CLIP}, {attention}; "
                f"warm-up {args.warmup}, timed {args.steps} updates, median")
    out = {"device": device_name, "device_type": device.type, "torch": torch.__version__,
           "python": platform.python_version(), "date": started, "smoke": args.smoke,
           "compile": args.compile, "precision": precision, "steps": args.steps, "warmup": args.warmup,
           "shape": dataclasses.asdict(s), "prores": {"schedule": PRORES_SCHEDULE, "warmup": PRORES_WARMUP},
           "designs": args.labels, "complete": False, "wall_s": None, "best_mfu": None,
           "argv": sys.argv[1:] if argv is None else list(argv), "rows": []}

    def save(rows: list[dict]) -> None:
        out["rows"] = rows
        ok_rows = [r for r in rows if not r.get("error")]
        out["best_mfu"] = max((r["mfu"] for r in ok_rows if r.get("mfu") is not None), default=None)
        out["wall_s"] = time.perf_counter() - t0
        if args.json:
            from reslab.fileio import write_json  # temporary file, then rename

            write_json(args.json, out)

    t0 = time.perf_counter()
    rows = run_all(args.labels, s, device=device, use_compile=args.compile, steps=args.steps, warmup=args.warmup,
                   amp_dtype=amp_dtype, seed=args.seed, log=log, after_each=save)
    out["complete"] = True
    save(rows)
    wall, best = out["wall_s"], out["best_mfu"]
    ok = [r for r in rows if not r.get("error")]
    print(f"## bench_gpu: {device_name}, torch {torch.__version__}, python {platform.python_version()}, {started}")
    print(shape_line)
    print(run_line)
    print()
    print(format_table(rows, args.markdown))
    print()
    failed = [r["design"] for r in rows if r.get("error")]
    print(f"{len(ok)}/{len(rows)} designs ok" + (f"; failed: {', '.join(failed)}" if failed else "")
          + (f"; best MFU {100 * best:.1f}%" if best is not None else "") + f"; wall {wall:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
