#!/usr/bin/env python
"""What training diagnostics ([diagnostics] enabled = true) add to training time at the default
cadence (every eval interval, plus step 0 and the final step).

Shape: the `nanogpt-cpu` preset (4 layers, 4 heads, width 128, context 64, batch 12, float32 on
CPU), dropout 0, checkpoints only at the end. The same run is trained with diagnostics off and on,
interleaved in rounds (the order alternates from round to round so machine-load drift hits both
alike), each into a fresh run folder. Reported:

    wall        median wall-clock seconds of the whole train() call, off and on, and
                overhead_wall = median(on) / median(off) - 1   (noisy: includes load drift)
    direct      seconds spent inside the diagnostics calls themselves (measure, train_grad_norms,
                update_ratios, writing the row), timed around each call in the "on" runs, and
                overhead_direct = median(direct) / median(off wall)   (the steadier figure)

The issue's target is an overhead under 3% at the default cadence.

Examples:
    python bench/bench_diagnostics.py --quick
    python bench/bench_diagnostics.py                         # 500 steps, eval_interval 250, 3 rounds
    python bench/bench_diagnostics.py --steps 2000 --eval-interval 250 --rounds 3 --json /tmp/diag.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from reslab.fileio import read_toml  # noqa: E402
from reslab.diagnostics import collector  # noqa: E402
from reslab.train import loop  # noqa: E402
from reslab.train.config import build_run_config, preset_path  # noqa: E402

PRESET = "nanogpt-cpu"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def config(args, data_table: dict, enabled: bool):
    raw = read_toml(str(preset_path(PRESET)))
    raw["name"] = "bench-diagnostics"
    raw["data"] = dict(data_table)
    raw["model"].update(dropout=0.0)
    raw["train"].update(steps=args.steps, eval_interval=args.eval_interval, eval_iters=args.eval_iters,
                        log_interval=1, checkpoint_interval=0, keep_checkpoints=1, progress="off",
                        threads=args.threads, device="cpu", dtype="float32")
    raw["diagnostics"] = {"enabled": enabled}
    return build_run_config(raw, where=f"preset {PRESET} (bench)")


class Timer:
    """Wraps the Diagnostics / DiagnosticsFile methods the loop calls and sums their time."""

    METHODS = [(collector.Diagnostics, "measure"), (collector.Diagnostics, "train_grad_norms"),
               (collector.Diagnostics, "update_ratios"), (collector.DiagnosticsFile, "log")]

    def __init__(self):
        self.total, self.calls, self._orig = 0.0, 0, []

    def __enter__(self):
        for cls, name in self.METHODS:
            fn = getattr(cls, name)
            self._orig.append((cls, name, fn))

            def timed(*a, _fn=fn, **k):
                t = time.perf_counter()
                try:
                    return _fn(*a, **k)
                finally:
                    self.total += time.perf_counter() - t
                    self.calls += 1
            setattr(cls, name, timed)
        return self

    def __exit__(self, *exc):
        for cls, name, fn in self._orig:
            setattr(cls, name, fn)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--eval-interval", type=int, default=250, help="also the diagnostics cadence (its default)")
    p.add_argument("--eval-iters", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--data", choices=["auto", "tinyshakespeare", "generated"], default=None)
    p.add_argument("--quick", action="store_true", help="a few seconds: 20 steps, cadence 10, 1 round, 1 thread, generated data")
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.eval_interval, args.eval_iters, args.rounds = 20, 10, 1, 1
        args.threads = args.threads or 1
        args.data = args.data or "generated"
    args.data = args.data or "auto"

    from bench_engine import choose_data

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data_table, data_desc = choose_data(args.data, tmp)
        walls = {"off": [], "on": []}
        direct, calls = [], 0
        losses = {}
        for r in range(args.rounds):
            order = ["off", "on"] if r % 2 == 0 else ["on", "off"]
            for mode in order:
                cfg = config(args, data_table, enabled=mode == "on")
                out = tmp / f"run_{mode}_{r}"
                with Timer() as timer:
                    t = time.perf_counter()
                    loop.train(cfg, out, log=lambda *_: None)
                    walls[mode].append(time.perf_counter() - t)
                if mode == "on":
                    direct.append(timer.total)
                    calls = timer.calls
                rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
                losses[mode] = [x["train_loss"] for x in rows if "train_loss" in x]
                log(f"round {r + 1}/{args.rounds} {mode}: {walls[mode][-1]:.2f} s"
                    + (f" (diagnostics {timer.total:.3f} s in {timer.calls} calls)" if mode == "on" else ""))
        n_rows = len(collector.read_rows(tmp / "run_on_0" / collector.FILE_NAME))

    off, on = statistics.median(walls["off"]), statistics.median(walls["on"])
    result = {
        "preset": PRESET, "data": data_desc, "steps": args.steps, "cadence": args.eval_interval,
        "rounds": args.rounds, "measurements_per_run": n_rows, "diagnostic_calls_per_run": calls,
        "wall_off_s": off, "wall_on_s": on, "overhead_wall": on / off - 1,
        "direct_s": statistics.median(direct), "overhead_direct": statistics.median(direct) / off,
        "per_measurement_ms": 1000 * statistics.median(direct) / max(n_rows, 1),
        "losses_identical": losses.get("off") == losses.get("on"),
        "off_ms_per_step": 1000 * off / args.steps,  # whole run / steps (evaluations included)
    }
    print(f"diagnostics overhead ({PRESET} shape, {args.steps} steps, cadence {args.eval_interval}, "
          f"{n_rows} measurements, {args.rounds} round(s), {data_desc})")
    print(f"  wall   off {off:.2f} s   on {on:.2f} s   overhead {100 * result['overhead_wall']:+.2f}%")
    print(f"  direct {result['direct_s']:.3f} s in diagnostics calls = {100 * result['overhead_direct']:.2f}% "
          f"of the off run ({result['per_measurement_ms']:.1f} ms per measurement; "
          f"{result['off_ms_per_step']:.1f} ms per training step, evaluations included)")
    print(f"  train losses identical on/off: {result['losses_identical']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
