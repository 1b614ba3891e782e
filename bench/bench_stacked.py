#!/usr/bin/env python
"""Many seeds at once: K seeds of one design stacked in one process against one seed alone.

Both sides are reslab's real trainers on the same preset (default `shakespeare-char-10m`: 6 layers,
width 384, context 256, batch 64, dropout 0.2, TinyShakespeare characters; bf16 on CUDA):

    one seed     reslab.train.loop.train on seed 1
    K stacked    reslab.train.stacked.train_stacked on seeds 1..K (one vmapped computation)

Each trains --steps updates with one evaluation at the start and one at the end and a checkpoint
only at the end. Reported: wall seconds of each whole call (data already prepared), the median
step time from the trainers' own per-step throughput (steady state, evaluations excluded), and the
ratios K-stacked / one-seed. The issue's GPU target: 8 seeds in at most twice one seed's time
(ratio <= 2.0). The order is one seed, stack, one seed again, so drift shows as a spread.

Examples:
    python bench/bench_stacked.py --seeds 8 --json /tmp/stacked.json --markdown      # GPU, ~1 min
    python bench/bench_stacked.py --smoke                                              # CPU, seconds
    python bench/bench_stacked.py --seeds 4 --steps 100 --preset nanogpt-cpu           # CPU figures
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from reslab.data import prepare_dataset
from reslab.fileio import read_toml
from reslab.train.config import build_run_config, preset_path
from reslab.train.loop import train, train_stacked
from reslab.typed import deep_merge


def _configs(args, seeds: list[int], smoke_corpus: Path | None) -> list:
    base = read_toml(preset_path(args.preset))
    base.pop("name", None)
    overrides = {"train": {"steps": args.steps, "eval_interval": args.steps, "eval_iters": args.eval_iters,
                           "checkpoint_interval": 0, "progress": "off", "log_interval": 1,
                           "compile": args.compile, "device": args.device}}
    if smoke_corpus is not None:  # a few seconds on a CPU: a tiny model on a generated corpus
        overrides = deep_merge(overrides, {
            "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "dropout": 0.0},
            "data": {"corpus": "text", "path": str(smoke_corpus), "tokenizer": "char",
                     "cache_dir": str(smoke_corpus.parent / "cache")},
            "train": {"batch_size": 4, "threads": 1}})
    data = deep_merge(base, overrides)
    return [build_run_config(deep_merge(data, {"name": f"seed{s}", "train": {"seed": s}}), where=args.preset)
            for s in seeds]


def _median_step_ms(run: Path, cfg) -> float | None:
    """Median step time from the trainer's tokens_per_s rows (per run: its own tokens)."""
    tokens = cfg.train.batch_size * cfg.model.block_size * cfg.train.grad_accum
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_s"] for r in rows if r.get("tokens_per_s")][2:]  # the first steps warm up
    return 1000.0 * tokens / statistics.median(rates) if rates else None


def _final_losses(runs: list[Path]) -> list[float]:
    out = []
    for run in runs:
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        out.append([r["train_loss"] for r in rows if "train_loss" in r][-1])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=8, help="K, the seeds in the stack (default 8)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--eval-iters", type=int, default=5)
    p.add_argument("--preset", default="shakespeare-char-10m")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--compile", action="store_true", help="torch.compile both sides")
    p.add_argument("--smoke", action="store_true", help="tiny model, generated text, 2 seeds, 6 steps, CPU")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = p.parse_args(argv)
    if args.smoke:
        args.seeds, args.steps, args.eval_iters, args.device = min(args.seeds, 2), 6, 1, "cpu"
    if args.seeds < 2 or args.steps < 4:
        p.error("--seeds must be at least 2 and --steps at least 4")

    with tempfile.TemporaryDirectory(prefix="bench-stacked-") as tmp_name:
        tmp = Path(tmp_name)
        corpus = None
        if args.smoke:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
            from tests.train_helpers import write_corpus

            corpus = write_corpus(tmp)
        seeds = list(range(1, args.seeds + 1))
        cfgs = _configs(args, seeds, corpus)
        prepare_dataset(cfgs[0].data, progress=False, log=lambda *_: None)  # not timed
        quiet = dict(log=lambda *_: None)
        device = "cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()) else "cpu"
        device_name = torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu"
        # warm up the device (CUDA context, kernels) outside the timed calls
        warm = build_run_config(deep_merge(cfgs[0].to_dict(), {"train": {"steps": 4, "eval_interval": 4}}))
        train(warm, tmp / "warmup", **quiet)

        walls, steps_ms = {"one": [], "stacked": []}, {"one": [], "stacked": []}
        finals = []
        for label, attempt in (("one", 0), ("stacked", 0), ("one", 1)):
            start = time.perf_counter()
            if label == "one":
                out = tmp / f"one-{attempt}"
                train(cfgs[0], out, **quiet)
                steps_ms["one"].append(_median_step_ms(out, cfgs[0]))
            else:
                outs = [tmp / f"stacked-{s}" for s in seeds]
                train_stacked(cfgs, outs, **quiet)
                steps_ms["stacked"].append(statistics.median(_median_step_ms(o, c) for o, c in zip(outs, cfgs)))
                finals = _final_losses(outs)
            if device == "cuda":
                torch.cuda.synchronize()
            walls[label].append(time.perf_counter() - start)

    one_wall, one_step = statistics.median(walls["one"]), statistics.median(steps_ms["one"])
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device_name, "torch": torch.__version__, "preset": "smoke" if args.smoke else args.preset,
        "seeds": args.seeds, "steps": args.steps, "compile": args.compile, "dtype": cfgs[0].train.dtype,
        "one_seed_wall_s": walls["one"], "stacked_wall_s": walls["stacked"][0],
        "one_seed_step_ms": steps_ms["one"], "stacked_step_ms": steps_ms["stacked"][0],
        "wall_ratio": walls["stacked"][0] / one_wall,
        "step_ratio": steps_ms["stacked"][0] / one_step,
        "seeds_per_time_vs_separate": args.seeds * one_wall / walls["stacked"][0],
        "stacked_final_train_losses": finals,
        "target": "GPU: K=8 stacked in at most 2x one seed's wall time",
    }
    lines = [f"device: {device_name}, torch {torch.__version__}, {result['preset']}, {args.steps} steps, "
             f"compile {args.compile}",
             "",
             "| trainer | wall s | median ms/step | vs one seed (wall) | vs one seed (step) |",
             "|---|---:|---:|---:|---:|",
             f"| one seed (train) | {one_wall:.1f} | {one_step:.1f} | 1.00 | 1.00 |",
             f"| {args.seeds} seeds stacked (train_stacked) | {walls['stacked'][0]:.1f} | "
             f"{steps_ms['stacked'][0]:.1f} | {result['wall_ratio']:.2f} | {result['step_ratio']:.2f} |",
             "",
             f"{args.seeds} seeds stacked take {result['wall_ratio']:.2f}x one seed's wall time: "
             f"{result['seeds_per_time_vs_separate']:.2f}x the seeds per hour of separate runs one after another."]
    print("\n".join(lines if args.markdown else lines[-1:]))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
