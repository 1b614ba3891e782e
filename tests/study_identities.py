"""The planned run identities of every built-in study and every example sweep spec, at every scale.

`python -m tests.study_identities` rewrites tests/golden/study_identities.json; test_spec_identities.py
recomputes the same list and asserts it is unchanged. Moving code never changes a run identity, so
this file is regenerated only by a change that means to move identities (and says so in its commit).

Per spec and scale: the comparison runs known before training (expand), the tuning runs
(tuning_runs), and for a scale that tunes, the comparison runs once every row has chosen the
first of its values (so the tuned value's merge into the identity is covered too), and for a
built-in study, the comparison runs at the number of seeds `reslab study run` takes there.
"""

from __future__ import annotations

import sys
from pathlib import Path

from reslab.fileio import write_json
from reslab.plugins import load_plugins
from reslab.studies import load_study, study_names
from reslab.spec.expand import expand, tuned_key, with_seeds
from reslab.spec.load import load_spec
from reslab.spec.tune import row_values
from reslab.spec.tune_plan import tuning_runs

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "study_identities.json"
EXAMPLES = {"mix-pre-post": ("examples/mix-pre-post/compare.toml", "examples/mix-pre-post/src",
                             "reslab_mix_pre_post")}


def _runs(runs) -> list[str]:
    return [f"{r.id} {r.label}" for r in runs]


def _first_values(spec, tuning) -> dict:
    """Every tuning row at the first of its values: a stand-in for a finished tuning."""
    out = {}
    for run in tuning:
        point = {k: v for k, v in run.grid.items() if k != spec.tune.axis}
        out[tuned_key(run.scale, run.variant, point)] = row_values(spec.tune, run.variant, point)[0]
    return out


def spec_identities(spec) -> dict:
    out = {}
    for scale in list(spec.scales) or [""]:
        at = [scale] if scale else None
        tuning = tuning_runs(spec, at)
        entry = {"comparison": _runs(expand(spec, at)), "tuning": _runs(tuning)}
        if tuning:
            entry["tuned_comparison"] = _runs(expand(spec, at, tuned=_first_values(spec, tuning)))
        n = spec.study.seeds.get(scale) if spec.study else None
        if n:  # `reslab study run` takes this many seeds by default (with_seeds)
            entry["study_seeds"] = _runs(expand(with_seeds(spec, n), at))
        out[scale] = entry
    return out


def identities() -> dict:
    out = {f"study:{name}": spec_identities(load_study(name)) for name in study_names()}
    for name, (path, src, module) in EXAMPLES.items():
        if src not in sys.path:
            sys.path.insert(0, str(ROOT / src))
        load_plugins([module])
        out[f"example:{name}"] = spec_identities(load_spec(ROOT / path))
    return out


def main() -> None:
    data = identities()
    write_json(GOLDEN, data)
    n = sum(len(v) for s in data.values() for e in s.values() for v in e.values())
    print(f"wrote {GOLDEN}: {len(data)} specs, {n} planned runs")


if __name__ == "__main__":
    main()
