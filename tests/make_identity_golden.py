"""Record tests/golden/identities.json: `PYTHONPATH=src python -m tests.make_identity_golden`.

The run identity (sweep folder name) and `reslab train`'s config hash of every config the built-in
studies, presets and examples can plan, and of configs that set each design's own hyperparameters
away from their defaults, with the config.json a run folder of this reslab stores for them. Written
once, before a change that must not move any identity; tests/test_identity_golden.py compares.
Regenerate only when identities are meant to change, and say so in the commit message."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from reslab.train.config import config_hash
from reslab.fileio import write_json
from reslab.studies import load_study, study_names
from reslab.fileio import read_toml
from reslab.spec.expand import chosen_scales, expand, run_identity, tuned_key
from reslab.spec.grid import grid_points
from reslab.spec.load import load_spec
from reslab.spec.tune import row_values
from reslab.spec.tune_plan import all_planned
from reslab.train.config import build_run_config, preset_names, preset_path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "identities.json"
EXAMPLE = ROOT / "examples" / "mix-pre-post"

SMALL = {"n_layer": 4, "n_head": 2, "n_embd": 32, "block_size": 16}
# Each design's own hyperparameters, as [model] fields, at non-default values (and combinations).
DESIGN_FIELDS = [
    {"design": "gated", "gate_bias": 0.0},
    {"design": "gated", "gate_bias": -1.5},
    {"design": "pre-ln", "layer_designs": {"2-3": "gated"}},
    {"design": "pre-ln", "layer_designs": {"2-3": "gated"}, "gate_bias": 3.0},
    {"design": "post-ln", "layer_designs": {"1": "gated"}, "gate_bias": 1.0},
    {"design": "hyper-connections", "hyper_streams": 2},
    {"design": "hyper-connections", "hyper_mixing": "sinkhorn"},
    {"design": "hyper-connections", "hyper_dynamic": True},
    {"design": "hyper-connections", "hyper_mixing": "sinkhorn", "sinkhorn_iters": 3},
    {"design": "hyper-connections", "hyper_streams": 8, "hyper_mixing": "sinkhorn", "hyper_dynamic": True,
     "sinkhorn_iters": 7},
    {"design": "hyper-connections", "hyper_streams": 1},
    {"design": "ngpt", "ngpt_alpha_init": 0.2},
    {"design": "ngpt", "ngpt_alpha_init": 0.05, "n_layer": 2},
    {"design": "sas", "norm_free": True},
    {"design": "sas", "sas_ff_gain": 0.5},
    {"design": "sas-p", "norm_free": True, "sas_ff_gain": 0.25},
    {"design": "sas-p", "sas_ff_gain": 0.1},
    {"design": "resi-dual", "resi_dual_scale": 0.5},
    {"design": "resi-dual", "resi_dual_scale": 4.0, "norm": "rmsnorm"},
    {"design": "mix-ln"},
    {"design": "mix-ln", "n_layer": 8},
    {"design": "mix-ln", "n_layer": 9},
    {"design": "mix-ln", "mix_ln_post_layers": 0},
    {"design": "mix-ln", "mix_ln_post_layers": 1},
    {"design": "mix-ln", "mix_ln_post_layers": 4},
    {"design": "mix-ln", "mix_ln_post_layers": 3, "n_layer": 12},
]
# The same designs at their defaults, and with other [model] fields and tables beside them.
DESIGN_DEFAULTS = [{"design": d} for d in ("gated", "hyper-connections", "ngpt", "sas", "sas-p", "resi-dual",
                                           "mix-ln")]


def _entry(label: str, data: dict) -> dict:
    cfg = build_run_config(data)
    return {"label": label, "config": data, "id": run_identity(cfg), "hash": config_hash(cfg),
            "stored": cfg.to_dict()}


def _study_runs(spec) -> list:
    """Every run the study can plan: its tuning runs, its comparison runs at the scales that do not
    tune, and at the scales that tune, each row at each of its values."""
    scales = [s for s in chosen_scales(spec, list(spec.scales) or None)] if spec.scales else None
    runs, _ = all_planned(spec, scales)
    if spec.tune is not None:
        for scale in scales or [""]:
            if not spec.tune.tunes(scale):
                continue
            grid = spec.scale_grid.get(scale, spec.grid)
            rows = [(v, p) for v in spec.variants for p, _ in (grid_points(grid) if grid else [({}, {})])
                    if not (scale in spec.scale_variants and v not in spec.scale_variants[scale])]
            for i in range(max(len(row_values(spec.tune, v, p)) for v, p in rows)):
                tuned = {}
                for v, p in rows:
                    values = row_values(spec.tune, v, p)
                    tuned[tuned_key(scale, v, p)] = values[min(i, len(values) - 1)]
                runs += expand(spec, [scale] if scale else None, tuned=tuned)
    return runs


def planned_ids() -> dict[str, str]:
    """label -> identity of every run the studies, the example and the presets plan."""
    ids: dict[str, str] = {}
    for name in study_names():
        for run in _study_runs(load_study(name)):
            ids[f"study {name} {run.label} {json.dumps(run.grid, sort_keys=True)}"] = run.id
    sys.path.insert(0, str(EXAMPLE / "src"))
    import reslab_mix_pre_post  # noqa: F401  - registers the example's design

    for run in _study_runs(load_spec(EXAMPLE / "compare.toml")):
        ids[f"example mix-pre-post {run.label} {json.dumps(run.grid, sort_keys=True)}"] = run.id
    for name in preset_names():
        cfg = build_run_config(read_toml(str(preset_path(name))))
        ids[f"preset {name}"] = run_identity(cfg)
        ids[f"preset {name} hash"] = config_hash(cfg)
    return ids


def main() -> None:
    ids, entries = planned_ids(), []
    for i, model in enumerate(DESIGN_FIELDS + DESIGN_DEFAULTS):
        entries.append(_entry(f"fields {i}", {"model": {**SMALL, **model}}))
        entries.append(_entry(f"fields {i} with others", {"model": {**SMALL, **model, "dropout": 0.1},
                                                        "optim": {"lr": 3e-3}, "train": {"seed": 7}}))
    write_json(GOLDEN, {"what": "run identities before design hyperparameters moved to [model.options]; "
                                "tests/make_identity_golden.py", "ids": ids, "configs": entries})
    print(f"wrote {GOLDEN}: {len(ids)} planned identities, {len(entries)} configs")


if __name__ == "__main__":
    main()
