"""Regenerate tests/golden/engine_runs.json: `python -m tests.make_engine_golden`.

Every logged train loss, grad norm and val loss of a handful of tiny runs, one per thing the
training loop schedules (dropout, gradient accumulation, ProRes, diagnostics, a resume, stacked
seeds). tests/test_train_engines.py holds today's loop to them: single runs bit for bit, stacked
seeds within test_stacked.py's tolerance of their separate runs. Regenerate only when a change is
meant to move the numbers, and say so in the commit message."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch

from reslab.fileio import write_json
from reslab.train.config import build_run_config
from reslab.train.loop import train, train_stacked
from reslab.train.run_folder import RunFolder
from tests.train_helpers import tiny_run, write_corpus

GOLDEN = Path(__file__).parent / "golden" / "engine_runs.json"
QUIET = dict(log=lambda *_: None)

# name -> config overrides on tests.train_helpers.tiny_run (30 steps, eval every 10, log every step)
SINGLE = {
    "plain": {"model.dropout": 0.0},
    "dropout": {"model.dropout": 0.1},
    "grad_accum": {"model.dropout": 0.0, "train.grad_accum": 3},
    "prores": {"model.dropout": 0.0, "model.prores": "linear", "model.prores_warmup": 8, "model.n_layer": 3},
    "diagnostics": {"model.dropout": 0.1, "diagnostics.enabled": True, "diagnostics.interval": 5},
    # checkpoints every 7 steps, evaluations every 10; interrupted after update 17, then resumed
    "resume": {"model.dropout": 0.1, "train.checkpoint_interval": 7},
}
INTERRUPT_AFTER = {"resume": 17}
STACK_SEEDS = (1, 2, 3)
STACK = {"model.dropout": 0.0, "train.steps": 20}


def curves(run: Path) -> dict:
    """Every logged train loss, grad norm and val loss: key -> {step: value}. The file's steps must
    rise row by row, so a resume that appended without cutting back cannot hide in the dict."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    out = {}
    for key in ("train_loss", "grad_norm", "val_loss"):
        pairs = [(r["step"], r[key]) for r in rows if key in r]
        steps = [step for step, _ in pairs]
        if steps != sorted(set(steps)):
            raise AssertionError(f"{run}/metrics.jsonl: {key} steps out of order or repeated: {steps}")
        out[key] = dict(pairs)
    return out


def config(tmp: Path, overrides: dict):
    """tiny_run with `overrides`, which may name tables tiny_run leaves out (diagnostics)."""
    run = tiny_run(write_corpus(tmp), tmp / "cache")
    for key, value in overrides.items():
        table, field = key.split(".")
        run.setdefault(table, {})[field] = value
    return build_run_config(run)


def interrupted(cfg, out: Path, after: int) -> None:
    """Train `cfg` into `out`, raising KeyboardInterrupt (as at Ctrl-C) once update `after` is
    logged; through RunFolder.log so that no loop internals are assumed."""
    real = RunFolder.log

    def log(self, row):
        real(self, row)
        if row.get("step") == after and "train_loss" in row:
            raise KeyboardInterrupt

    RunFolder.log = log
    try:
        train(cfg, out, **QUIET)
    except KeyboardInterrupt:
        pass
    else:
        sys.exit(f"make_engine_golden: the run was not interrupted after update {after}")
    finally:
        RunFolder.log = real


def run_single(tmp: Path, name: str) -> dict:
    cfg = config(tmp, SINGLE[name])
    out = tmp / name
    if name in INTERRUPT_AFTER:
        interrupted(cfg, out, INTERRUPT_AFTER[name])
    train(cfg, out, **QUIET)
    return curves(out)


def run_stack(tmp: Path) -> dict:
    cfgs = [config(tmp, {**STACK, "train.seed": s}) for s in STACK_SEEDS]
    train_stacked(cfgs, [tmp / f"stacked{s}" for s in STACK_SEEDS], **QUIET)
    for cfg, s in zip(cfgs, STACK_SEEDS):
        train(cfg, tmp / f"separate{s}", **QUIET)
    return {"seeds": list(STACK_SEEDS), "overrides": STACK,
            "stacked": {str(s): curves(tmp / f"stacked{s}") for s in STACK_SEEDS},
            "separate": {str(s): curves(tmp / f"separate{s}") for s in STACK_SEEDS}}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        single = {name: {"overrides": SINGLE[name], "interrupt_after": INTERRUPT_AFTER.get(name),
                         **run_single(Path(tmp), name)} for name in SINGLE}
        stack = run_stack(Path(tmp))
    write_json(GOLDEN, {"what": "every logged train loss, grad norm and val loss of tiny runs "
                                "(tests.make_engine_golden); steps are JSON keys",
                        "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                        "single": single, "stacked": stack})
    print(f"wrote {GOLDEN}")


if __name__ == "__main__":
    main()
