"""Section 7 of the card: stability over the learning-rate grid, from the runs the card trained.

Every tuning run (each row at each learning rate) and comparison run is read back from its folder:

    diverged   the engine stopped it (a non-finite loss, or a loss past train.divergence_factor
               times its start: train/loop.py's rule)
    plateau    it completed, but its best validation loss is within 0.1 nats of the unigram level or
               above it (report/stats.is_collapsed): it learned character frequencies and no more
    spikes     training-loss spike events: a logged loss above mean + 7 std of the up to 1000 losses
               before it (report/plots.spike_indices; the OLMo-2 rule of diagnostics.stats.spike_score)

    stability(store, spec_name, scale, unigram) -> {"designs": {variant: {...}}, "rule": text}

Per design: counts over all its runs, and per learning rate the runs, divergences, plateaus and
spike events, and the rates at which every row trained (no divergence, no plateau) on every run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..fileio import read_json
from ..report.plots import spike_indices
from ..report.stats import is_collapsed
from ..spec.tune import tune_name
from ..train.run_folder import RunFolder

LR = "optim.lr"
SPIKE_RULE = ("a spike is a logged training loss above mean + 7 std of the up to 1000 losses before it "
              "(OLMo-2's rule); plateau: best validation loss within 0.1 nats of the unigram level or above")


def _lr(record: dict) -> float | None:
    """A tuning run's rate is its grid point's; a comparison run's is the tuned value in its config."""
    grid = json.loads(record.get("grid") or "{}")
    if LR in grid:
        return float(grid[LR])
    config = read_json(Path(record["path"]) / "config.json", "run config")
    return float(config["config"]["optim"]["lr"])


def _run_events(path: Path) -> int:
    losses = [m.get("train_loss") for m in RunFolder(path).read_metrics() if "train_loss" in m]
    return len(spike_indices(losses))


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _planned_rows(store, name: str, scale: str) -> list[dict]:
    """The index rows of the runs the sweep's record plans now at `scale` (none before it first ran):
    a run an earlier plan of the sweep trained (another tuned rate, an edited spec) is not the card's."""
    planned = store.planned_ids(name) or set()
    return [r for r in store.runs(spec=name, scale=scale) if r.get("id") in planned]


def stability(store, spec_name: str, scale: str, unigram: float | None) -> dict:
    """Also "arithmetic": how the runs computed (status.json's "arithmetic", train/determinism.py), one
    entry per distinct torch version, CPU capability (or GPU), thread count and subnormal flushing,
    with how many runs used it, most first. A run retrained under the same arithmetic repeats its
    numbers bit for bit; under other arithmetic it may not, so two cards' numbers for one run identity
    can differ (a run resumed under other arithmetic counts under each; one trained before reslab
    recorded it, under {})."""
    designs: dict[str, dict] = {}
    machines: dict[str, set[str]] = {}  # arithmetic (JSON text) -> the run ids that used it
    for name in (tune_name(spec_name), spec_name):
        for r in _planned_rows(store, name, scale):
            status = r.get("status")
            if status not in ("completed", "diverged"):
                continue
            for key in _arithmetic_keys(Path(r["path"])):
                machines.setdefault(key, set()).add(r.get("id"))
            variant, lr = r.get("variant"), _lr(r)
            d = designs.setdefault(variant, {"runs": 0, "diverged": 0, "plateau": 0, "spikes": 0,
                                             "runs_with_spikes": 0, "by_lr": {}})
            cell = d["by_lr"].setdefault(lr, {"runs": 0, "diverged": 0, "plateau": 0, "spikes": 0})
            spikes = _run_events(Path(r["path"]))
            best = r.get("best_val_loss")
            plateau = status == "completed" and _finite(best) and is_collapsed(best, None, unigram, 0.1)
            for target in (d, cell):
                target["runs"] += 1
                target["diverged"] += status == "diverged"
                target["plateau"] += bool(plateau)
                target["spikes"] += spikes
            d["runs_with_spikes"] += spikes > 0
    for d in designs.values():
        d["by_lr"] = dict(sorted(d["by_lr"].items(), key=lambda kv: kv[0]))
        d["stable_lrs"] = [lr for lr, c in d["by_lr"].items() if not c["diverged"] and not c["plateau"]]
    arithmetic = [{**json.loads(k), "runs": len(ids)}
                  for k, ids in sorted(machines.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
    return {"designs": designs, "rule": SPIKE_RULE, "arithmetic": arithmetic}


def _arithmetic_keys(path: Path) -> set[str]:
    entries = RunFolder(path).read_status().get("arithmetic") or [{}]
    return {json.dumps({k: v for k, v in e.items() if k != "from_step"}, sort_keys=True)
            for e in entries if isinstance(e, dict)}
