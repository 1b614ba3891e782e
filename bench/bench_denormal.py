#!/usr/bin/env python
"""What flushing subnormal floats saves on a CPU: a model that collapses, trained with and without.

A model that collapses to the unigram level (here Derf in every norm's place at 4 layers of width 64,
which saturates: see docs/studies.md, norm-free) drives its gradients and Adam's moments towards
zero, into float32's subnormal range (below 1.18e-38), where x86 CPUs compute in microcode. reslab
flushes them to zero by default (train.flush_denormal, x86 FTZ/DAZ); this trains the same run twice,
one thread each, flushing and not (order: on, off, so the later run has no warm-up advantage), and
reports each wall time, the ratio off / on, and whether the two runs' losses are identical.

    python bench/bench_denormal.py                    # ~5 min: 1200 updates, the norm-free shape
    python bench/bench_denormal.py --steps 400        # ~20 s
    python bench/bench_denormal.py --smoke            # seconds, a generated corpus: the pipeline only

Measured 2026-12-06 on this machine (the default, 1200 updates, nothing else running): flushing
18.1 s, keeping subnormals 199.6 s (11.0x), every train and val loss identical.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

import torch

from reslab.train.config import build_run_config
from reslab.train.loop import train


def config(data: dict, steps: int, flush: bool, smoke: bool) -> dict:
    return {
        "name": f"derf-collapse-{'flush' if flush else 'keep'}",
        "model": {"design": "pre-ln", "norm": "derf", "n_layer": 2 if smoke else 4, "n_head": 4,
                  "n_embd": 32 if smoke else 64, "block_size": 32 if smoke else 64, "bias": False,
                  "tie_weights": False},
        "data": data,
        "optim": {"lr": 3e-3, "min_lr": 1e-4, "warmup_steps": min(100, steps // 4), "beta2": 0.99,
                  "weight_decay": 0.1, "grad_clip": 1.0},
        "train": {"steps": steps, "batch_size": 8, "eval_interval": steps, "eval_iters": 2 if smoke else 20,
                  "threads": 1, "progress": "off", "device": "cpu", "seed": 9001,
                  "checkpoint_interval": 0, "flush_denormal": flush},
    }


def losses(run: Path) -> list:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r.get("train_loss"), r.get("val_loss")) for r in rows]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--smoke", action="store_true", help="a generated corpus and a few updates: the pipeline only")
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args()
    steps = 12 if args.smoke else args.steps
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.smoke:
            rng = random.Random(0)
            corpus = tmp / "corpus.txt"
            corpus.write_text("".join(rng.choice("abcdefgh \n") for _ in range(20000)))
            data = {"corpus": "text", "path": str(corpus), "tokenizer": "char", "cache_dir": str(tmp / "cache")}
        else:
            data = {"corpus": "tinyshakespeare", "tokenizer": "char"}
        out = {"steps": steps, "smoke": args.smoke, "torch": torch.__version__,
               "cpu_capability": torch.backends.cpu.get_cpu_capability()}
        for flush in (True, False):
            start = time.perf_counter()
            result = train(build_run_config(config(data, steps, flush, args.smoke)), tmp / str(flush),
                           log=lambda *_: None)
            out["flush_s" if flush else "keep_s"] = time.perf_counter() - start
            out["flush_losses" if flush else "keep_losses"] = losses(result.path)
        torch.set_flush_denormal(False)
    out["ratio_keep_to_flush"] = out["keep_s"] / out["flush_s"]
    out["same_losses"] = out["flush_losses"] == out["keep_losses"]
    last_val = [v for _, _, v in out["flush_losses"] if v is not None][-1]
    print(("smoke: not a result\n" if args.smoke else "")
          + f"collapsed Derf model, {steps} updates, one thread ({out['cpu_capability']}): "
          f"flushing {out['flush_s']:.1f} s, keeping subnormals {out['keep_s']:.1f} s, "
          f"ratio {out['ratio_keep_to_flush']:.2f}x; last val loss {last_val:.4f}; "
          f"losses identical: {out['same_losses']}")
    if args.json:
        args.json.write_text(json.dumps({k: v for k, v in out.items() if k not in ("flush_losses", "keep_losses")},
                                        indent=1))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
