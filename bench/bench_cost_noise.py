#!/usr/bin/env python
"""How far the design card's speed ratio (section 6, Cost) moves between measurements, and whether
taking it round by round holds it steadier than the ratio of the overall medians.

An A/A test: the card's cost measurement (reslab.assess.cost.measure_cost, the card's shape: width
64, 4 heads, batch 16 x 64 tokens, 2 threads) is taken REPEATS times on pre-ln against an identical
copy of itself, whose true speed ratio is exactly 1, and on a second design against pre-ln, whose true
ratio is unknown but fixed. Each repeat gives both estimators from the same timed steps:

    overall      median step of the baseline over the design's, all rounds pooled (the card before)
    same round   each round's baseline median over the design's in that round, median over rounds

and both timing plans: the card's old 5 rounds x 10 steps and its current 11 rounds x 6 steps. The
figure to read is each estimator's spread over the repeats (max - min), and for the A/A pair its
largest distance from 1.

    python bench/bench_cost_noise.py                   # ~6 min on 2 cores: 16 layers, 6 repeats
    python bench/bench_cost_noise.py --smoke           # seconds: 2 layers, 2 repeats (the pipeline only)
    python bench/bench_cost_noise.py --markdown R.json # the docs' table from a result written by --json

Measured: see docs/performance.md (Card speed ratios).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from reslab.assess.cost import measure_cost
from reslab.assess.plan import CardRequest
from reslab.assess.run import cost_timing

NOW = cost_timing(CardRequest("pre-ln", scale="cpu"))  # the card's own plan, so the bench cannot drift from it
PLANS = {"5x10": {"rounds": 5, "steps": 10, "warmup": 3}, f"{NOW['rounds']}x{NOW['steps']}": NOW}


def model(design: str, layers: int, width: int) -> dict:
    return {"design": design, "vocab_size": 65, "n_layer": layers, "n_head": 4, "n_embd": width,
            "block_size": 64, "dropout": 0.0}


def estimators(row: dict) -> dict:
    return {"overall": row["ratios"]["tokens_per_s"], "same_round": row["ratios"]["tokens_per_s_same_round"]}


def spread(values: list[float]) -> dict:
    return {"min": min(values), "max": max(values), "spread": max(values) - min(values),
            "largest_off_1": max(abs(v - 1) for v in values)}


def markdown(result: dict) -> str:
    """The docs' table (docs/performance.md, Card speed ratios), from a result of main()."""
    lines = ["| pair | timing | ratio of overall medians: range (spread) | round by round, median: range (spread) |",
             "|:---|:---|---:|---:|"]
    for pair, per_plan in result["pairs"].items():
        for plan, by in per_plan.items():
            cells = [f"{by[k]['min']:.3f}-{by[k]['max']:.3f} ({by[k]['spread']:.3f})" for k in ("overall", "same_round")]
            p = result["plans"][plan]
            lines.append(f"| {pair} | {p['rounds']} rounds x {p['steps']} steps | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--design", default="keel", help="the A/B design against pre-ln (default keel)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="2 layers of width 32, 2 repeats, 2 rounds of 2 steps")
    ap.add_argument("--json", type=Path, help="write the result here")
    ap.add_argument("--markdown", type=Path, help="print the docs' table from a result written by --json, and stop")
    a = ap.parse_args(argv)
    if a.markdown:
        result = json.loads(a.markdown.read_text())
        print(markdown(result))
        return result
    layers, width, repeats = (2, 32, 2) if a.smoke else (a.layers, 64, a.repeats)
    plans = {"2x2": {"rounds": 2, "steps": 2, "warmup": 1}} if a.smoke else PLANS
    pairs = {"A/A pre-ln": {"pre-ln": model("pre-ln", layers, width), "pre-ln copy": model("pre-ln", layers, width)},
             f"A/B {a.design}": {"pre-ln": model("pre-ln", layers, width), a.design: model(a.design, layers, width)}}
    t0 = time.perf_counter()
    raw = {pair: {plan: {"overall": [], "same_round": []} for plan in plans} for pair in pairs}
    for r in range(repeats):  # plans and pairs interleaved, so a slow spell of the machine hits all alike
        for pair, models in pairs.items():
            other = next(label for label in models if label != "pre-ln")
            for plan, timing in plans.items():
                cost = measure_cost(models, "pre-ln", batch_size=16, threads=a.threads, seed=r, **timing)
                for k, v in estimators(cost["rows"][other]).items():
                    raw[pair][plan][k].append(v)
    result = {"smoke": a.smoke, "layers": layers, "width": width, "repeats": repeats, "threads": a.threads, "plans": plans,
              "wall_s": time.perf_counter() - t0,
              "pairs": {pair: {plan: {k: {"values": v, **spread(v)} for k, v in by.items()}
                               for plan, by in per_plan.items()} for pair, per_plan in raw.items()}}
    for pair, per_plan in result["pairs"].items():
        for plan, by in per_plan.items():
            for k, s in by.items():
                print(f"{pair:14s} {plan:5s} {k:10s} median {statistics.median(s['values']):.3f}  "
                      f"range {s['min']:.3f}-{s['max']:.3f}  spread {s['spread']:.3f}  largest |r-1| {s['largest_off_1']:.3f}")
    print(markdown(result))
    print(f"wall {result['wall_s']:.0f} s" + ("  (smoke: not a result)" if a.smoke else ""))
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
