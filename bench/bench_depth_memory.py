#!/usr/bin/env python
"""What keeping earlier layers costs: activation memory against depth, and time per token, for the
designs that mix across depth, each as a ratio to pre-ln measured in the same run.

    saved MiB     bytes autograd keeps for the backward pass of one forward (every saved tensor's
                  storage counted once, through torch.autograd.graph.saved_tensors_hooks): the
                  activation memory, independent of the machine and of the allocator
    peak MiB      torch.cuda.max_memory_allocated over forward + backward (CUDA only)
    ms / step     forward + loss + backward, median over --steps, interleaved over the designs
                  (round robin, so a change of machine load hits every design alike)
    x pre-ln      each figure over pre-ln's at the same depth

    python bench/bench_depth_memory.py                          width 128, depths 4 8 16 32, CPU
    python bench/bench_depth_memory.py --quick                  one short round (the test suite runs it)
    python bench/bench_depth_memory.py --markdown --json out.json
    python bench/bench_depth_memory.py --memory-only --markdown  the saved bytes only (no timing: the
                                                                 same on any machine, and fast)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

import reslab
from reslab.assess.cost import forward_backward, round_order, saved_bytes

ROWS = {  # label -> (design, config overrides)
    "pre-ln": ("pre-ln", {}),
    "parallel": ("parallel", {}),
    "hyper-connections (n=4)": ("hyper-connections", {}),
    "denseformer": ("denseformer", {}),
    "denseformer (dilation 4)": ("denseformer", {"options": {"dilation": 4}}),
    "attn-res (full)": ("attn-res", {}),
    "attn-res (block of 4 layers)": ("attn-res", {"options": {"block_layers": 4}}),
    "mudd": ("mudd", {}),
    "lime": ("lime", {}),
    "speedrun": ("speedrun", {}),
    "laurel (rw, rank 16)": ("laurel", {}),
    "laurel (rw, rank 16, pa)": ("laurel", {"options": {"pa": True}}),
    "frac-connections (m=4)": ("frac-connections", {"options": {"fracs": 4}}),
    "dca": ("dca", {}),
    "moda": ("moda", {}),
    "depth-attention": ("depth-attention", {}),
}


def measure(depths, width, batch, context, steps, rounds, device, labels, timed=True):
    torch.manual_seed(0)
    idx = torch.randint(0, 65, (batch, context), generator=torch.Generator().manual_seed(1)).to(device)
    results = []
    for depth in depths:
        models = {}
        for label in labels:
            design, over = ROWS[label]
            models[label] = reslab.build_model(design, n_layer=depth, n_embd=width, n_head=4,
                                               block_size=context, vocab_size=65, dropout=0.0, seed=0,
                                               **over).to(device).train()
        row = {label: {"saved_mib": saved_bytes(m, idx, idx) / 2 ** 20} for label, m in models.items()}
        times = {label: [] for label in labels}
        for r in range(rounds if timed else 0):
            for label in round_order(labels, r):
                m = models[label]
                if device.startswith("cuda"):
                    torch.cuda.reset_peak_memory_stats()
                for s in range(steps + 1):
                    seconds = forward_backward(m, idx, idx)
                    if s:  # the first step of a round warms caches
                        times[label].append(seconds)
                    m.zero_grad(set_to_none=True)
                if device.startswith("cuda"):
                    row[label]["peak_mib"] = torch.cuda.max_memory_allocated() / 2 ** 20
        base = row["pre-ln"]
        for label in labels:
            row[label]["saved_ratio"] = row[label]["saved_mib"] / base["saved_mib"]
            if timed:
                row[label]["ms"] = 1e3 * statistics.median(times[label])
        for label in labels if timed else ():
            row[label]["time_ratio"] = row[label]["ms"] / base["ms"]
        results.append({"depth": depth, "rows": row})
    return results


def markdown(results, labels) -> str:
    depths = [r["depth"] for r in results]
    timed = "ms" in results[0]["rows"]["pre-ln"]
    what = "saved MiB (x pre-ln), ms (x)" if timed else "saved MiB (x pre-ln)"
    lines = ["| design | " + " | ".join(f"L={d}: {what}" for d in depths) + " |", "|---|" + "---:|" * len(depths)]
    for label in labels:
        cells = []
        for r in results:
            v = r["rows"][label]
            cell = f"{v['saved_mib']:.1f} ({v['saved_ratio']:.2f}x)"
            cells.append(cell + (f", {v['ms']:.1f} ({v['time_ratio']:.2f}x)" if timed else ""))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--depths", default="4,8,16,32")
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--designs", help="comma-separated row labels (default: all); pre-ln is always in")
    ap.add_argument("--quick", action="store_true", help="depths 4,8, width 32, one round of 1 step")
    ap.add_argument("--memory-only", action="store_true", help="count the saved bytes, time nothing")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    if a.quick:
        a.depths, a.width, a.batch, a.context, a.steps, a.rounds = "4,8", 32, 2, 16, 1, 1
    labels = list(ROWS) if not a.designs else ["pre-ln"] + [s for s in a.designs.split(",") if s != "pre-ln"]
    unknown = [s for s in labels if s not in ROWS]
    if unknown:
        print(f"bench_depth_memory: unknown row {unknown[0]!r}; rows are {', '.join(ROWS)}", file=sys.stderr)
        return 2
    try:
        depths = [int(d) for d in a.depths.split(",")]
    except ValueError:
        print(f"bench_depth_memory: --depths: whole numbers separated by commas, got {a.depths!r}", file=sys.stderr)
        return 2
    results = measure(depths, a.width, a.batch, a.context, a.steps, a.rounds, a.device, labels,
                      timed=not a.memory_only)
    meta = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "device": a.device,
            "width": a.width, "batch": a.batch, "context": a.context, "threads": torch.get_num_threads()}
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=2)
    if a.markdown:
        print(markdown(results, labels))
    else:
        for r in results:
            for label, v in r["rows"].items():
                timing = f"  {v['ms']:8.2f} ms ({v['time_ratio']:.2f}x)" if "ms" in v else ""
                print(f"L={r['depth']:<3} {label:<30} saved {v['saved_mib']:8.2f} MiB ({v['saved_ratio']:.2f}x){timing}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
