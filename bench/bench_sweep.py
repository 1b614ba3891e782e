"""Sweep parallelism: 8 tiny runs with N single-threaded workers against the same 8 runs one after
another (1 worker with every core), each in a fresh store, measured in the same invocation.

    python bench/bench_sweep.py [--steps 200] [--out results.json]

Run it alone on the machine: anything else running distorts both timings.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
from pathlib import Path

from reslab.sweep.runner import cpu_count, run_sweep
from reslab.spec.load import parse_spec
from reslab.sweep.store import Store


def spec(steps: int):
    return parse_spec({
        "name": "bench-sweep", "preset": "tiny", "seeds": [1, 2],
        "base": {"train": {"steps": steps, "eval_interval": steps // 2}},
        "variants": {"full": {}, "attn-only": {"model": {"ffn_res": False}},
                     "ffn-only": {"model": {"attn_res": False}},
                     "none": {"model": {"attn_res": False, "ffn_res": False}}}})


def timed(jobs: int, steps: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        result = run_sweep(spec(steps), Store(Path(tmp) / "store"), jobs=jobs, stream=io.StringIO(),
                           log=lambda *_: None)
        wall = time.perf_counter() - t0
        assert result.count("completed") == 8, result.statuses
    return wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--out")
    args = p.parse_args()
    cores = cpu_count()
    timed(cores, 10)  # warm the data cache and the page cache before either timing
    serial = timed(1, args.steps)
    parallel = timed(cores, args.steps)
    row = {"runs": 8, "steps": args.steps, "cores": cores, "serial_s": round(serial, 1),
           "parallel_s": round(parallel, 1), "jobs": cores, "speedup": round(serial / parallel, 2)}
    print(f"8 tiny runs x {args.steps} steps: 1 worker x {cores} threads {serial:.1f} s; "
          f"{cores} workers x 1 thread {parallel:.1f} s; ratio {serial / parallel:.2f}x", file=sys.stderr)
    print(json.dumps(row))
    if args.out:
        Path(args.out).write_text(json.dumps(row, indent=2) + "\n")


if __name__ == "__main__":
    main()
