#!/usr/bin/env python
"""Would bf16 autocast make the cpu scale's runs faster on a CPU with AMX units?

The cpu studies' runs are compute-bound: most of a step is matrix products. This CPU multiplies bf16
matrices several times faster than float32 ones (AMX), so bf16 autocast is the one lever left that
could shorten a study. This measures it on the studies' model shape, one thread (each study worker
has one core):

    matmul       one (tokens x width) @ (width x 3 width) product, float32 against bf16 inputs
    train step   forward, backward and AdamW of the model (pre-ln, nanogpt-cpu's 4 layers, width
                 128, context 64, batch 24 as in partial-residual's cpu scale), float32 against the
                 same under torch.autocast("cpu", dtype=torch.bfloat16)

Each side is timed in alternation (float32, bf16, float32, bf16, ...), so drift shows in the spread;
reported are the medians and the ratio bf16 / float32 (below 1: bf16 faster). reslab's trainer
refuses bf16 on CPU (train.dtype), and this is the measurement behind that: 2026-12-03 on this
machine, a train step 1.06x slower with bf16 although the product alone is 6.7x faster (the casts
and the element-wise work, about 40% of a step, do not shrink).

    python bench/bench_cpu_autocast.py                 # ~1 min
    python bench/bench_cpu_autocast.py --smoke         # seconds, the pipeline only
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from reslab.config import ModelConfig
from reslab.model.gpt import GPT


def _median_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def matmul_ms(tokens: int, width: int, dtype: torch.dtype, reps: int) -> float:
    a = torch.randn(tokens, width).to(dtype)
    b = torch.randn(width, 3 * width).to(dtype)
    for _ in range(5):
        a @ b
    return _median_ms(lambda: a @ b, reps)


def train_step_ms(cfg: ModelConfig, batch: int, bf16: bool, steps: int) -> float:
    model = GPT(cfg, seed=1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=gen)
    y = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=gen)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    return _median_ms(step, steps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--rounds", type=int, default=3, help="alternations of float32 and bf16 (default 3)")
    ap.add_argument("--steps", type=int, default=30, help="train steps timed per round (default 30)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: the pipeline only, not a figure")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    width, batch, steps = (32, 2, 2) if args.smoke else (128, 24, args.steps)
    cfg = ModelConfig(design="pre-ln", n_layer=2 if args.smoke else 4, n_head=4, n_embd=width,
                      block_size=16 if args.smoke else 64, vocab_size=65, bias=False, tie_weights=True)
    tokens = batch * cfg.block_size
    out: dict[str, dict[str, list[float]]] = {"matmul": {"float32": [], "bf16": []},
                                              "train_step": {"float32": [], "bf16": []}}
    for _ in range(1 if args.smoke else args.rounds):
        for name, dtype in (("float32", torch.float32), ("bf16", torch.bfloat16)):
            out["matmul"][name].append(matmul_ms(tokens, width, dtype, 20 if args.smoke else 200))
            out["train_step"][name].append(train_step_ms(cfg, batch, name == "bf16", steps))
    result = {"shape": {"n_layer": cfg.n_layer, "n_embd": width, "block_size": cfg.block_size, "batch": batch,
                        "threads": 1, "torch": torch.__version__}}
    for what, sides in out.items():
        f32, b16 = statistics.median(sides["float32"]), statistics.median(sides["bf16"])
        result[what] = {"float32_ms": f32, "bf16_ms": b16, "ratio_bf16_to_float32": b16 / f32,
                        "rounds": sides}
        print(f"{what:10s}  float32 {f32:8.3f} ms   bf16 {b16:8.3f} ms   bf16/float32 {b16 / f32:.2f}"
              f"   (rounds: {', '.join(f'{a:.2f}/{b:.2f}' for a, b in zip(sides['float32'], sides['bf16']))})")
    if args.smoke:
        print("smoke: not a result")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
