"""`reslab compare RUN...`: the sweep report (tables, statistics, figures, HTML) for any set of runs.

Runs are run folders or run identities of a store, trained by a sweep or by `reslab train`. A
folder outside this store is indexed here (links.json) and left unchanged; its membership in the
comparison is kept in the index and the comparison's record (specs/compare-*.json). They
are grouped by a config field (--by, default model.design): each group is one row of the report,
its runs its seeds, so two runs of one group must differ in train.seed. The comparison is recorded
in the store as a sweep named compare-<hash of the run identities> at the scale "compare", so the
report is built by the same code as every sweep's and can be rebuilt with `reslab report`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..errors import ReslabError
from ..fileio import read_json
from ..spec.schema import ReportOptions, SweepSpec

SCALE = "compare"


def _run_folder(target: str, store) -> Path:
    path = Path(target)
    if (path / "config.json").is_file():
        return path.resolve()
    if path.exists():
        raise ReslabError(f"{target}: not a run folder (no config.json)")
    if store.db_path.is_file():
        rows = store.db.execute("SELECT id, path FROM runs WHERE id LIKE ?", (target + "%",)).fetchall()
        if len(rows) == 1:
            return Path(rows[0][1]).resolve()
        if len(rows) > 1:
            raise ReslabError(f"{target}: names {len(rows)} runs of {store.root}; give more of the identity")
    raise ReslabError(f"{target}: neither a run folder nor a run identity in {store.root}")


def _identity(folder: Path, config: dict) -> str:
    sweep = folder / "sweep.json"
    if sweep.is_file():
        run_id = read_json(sweep, "sweep membership").get("id")
        if isinstance(run_id, str):
            return run_id
    from ..spec.expand import run_identity
    from ..train.config import build_run_config

    return run_identity(build_run_config(config, where=str(folder / "config.json")))


def compare(targets: list[str], store, by: str = "model.design", baseline: str | None = None,
            out_dir: str | Path | None = None) -> tuple[dict, Path]:
    """Record the comparison in `store` (a sweep.store.Store) and build its report; returns (report, folder)."""
    from ..results import flatten
    from ..sweep.store import run_row_from_folder
    from .build import build_report

    if len(targets) < 2:
        raise ReslabError("compare: give at least two runs (run folders or run identities)")
    members, seen = [], {}
    for target in targets:
        folder = _run_folder(target, store)
        config = read_json(folder / "config.json", "run config").get("config")
        if not isinstance(config, dict):
            raise ReslabError(f"{folder / 'config.json'}: config: expected an object")
        fields = flatten(config)
        if by not in fields:
            raise ReslabError(f"--by {by}: not a config field of {folder} (fields are flattened names such "
                              f"as model.design, model.n_layer or optim.lr)")
        # a row is named by its value: the design itself, else "field=value" (e.g. ffn_res=False)
        value = fields[by]
        group = str(value) if by == "model.design" else f"{by.rsplit('.', 1)[-1]}={value}"
        seed = fields.get("train.seed")
        if not isinstance(seed, int):
            raise ReslabError(f"{folder}: train.seed is not set; compare groups runs by their seeds")
        if (group, seed) in seen:
            raise ReslabError(f"{folder} and {seen[(group, seed)]}: both have {by} = {value} and seed {seed}; "
                              f"group them by another field (--by)")
        seen[(group, seed)] = folder
        members.append((folder, config, _identity(folder, config), group, seed))
    groups = list(dict.fromkeys(m[3] for m in members))
    if baseline is not None and baseline not in groups:
        raise ReslabError(f"--baseline {baseline}: no run has {by} = {baseline} (groups: {', '.join(groups)})")
    baseline = baseline or ("pre-ln" if "pre-ln" in groups else groups[0])
    name = "compare-" + hashlib.sha256(json.dumps(sorted(m[2] for m in members)).encode()).hexdigest()[:10]
    planned = []
    for folder, config, run_id, group, seed in members:
        member = {"spec": name, "variant": group, "scale": SCALE, "grid": {}, "seed": seed}
        if store.runs_dir.resolve() in folder.parents and (folder / "sweep.json").is_file():
            store.write_membership(folder, run_id, config, member=member)  # one of this store's runs
            store.upsert_run(run_row_from_folder(folder))
        else:  # a single run, or a run of another store: indexed here, its folder left as it is
            store.link(folder, {"id": run_id, "config": config})
        store.add_members(run_id, [member])
        planned.append({"variant": group, "scale": SCALE, "grid": {}, "seed": seed, "id": run_id,
                        "label": folder.name})
    seeds = sorted({m[4] for m in members})
    other = _other_differences([(group, flatten(config)) for _, config, _, group, _ in members], by)
    spec = SweepSpec(name=name, seeds=seeds, variants={g: {} for g in groups}, baseline=baseline,
                     description=f"{len(members)} runs grouped by {by}: {', '.join(groups)}",
                     question=f"How do the runs compare, grouped by {by}?",  # a record every report reads alike
                     report=ReportOptions(notes=[other] if other else []))
    store.save_spec(name, {"spec": spec.to_dict(), "runs": planned, "source": "reslab compare", "by": by})
    return build_report(store, name, scale=SCALE, out_dir=out_dir, probe=False)


def _other_differences(runs: list[tuple[str, dict]], by: str, most: int = 6) -> str:
    """A note naming the config fields, besides `by` and the seed, in which the compared runs differ
    (n_layer, dropout, a tuned rate): a row's difference to the baseline is then theirs too."""
    fields = sorted({k for _, f in runs for k in f} - {by, "train.seed"})
    differing = []
    for key in fields:
        values = {repr(f.get(key)) for _, f in runs}
        if len(values) > 1:
            by_group: dict[str, set] = {}
            for group, f in runs:
                by_group.setdefault(group, set()).add(repr(f.get(key)))
            differing.append(f"{key} ({'; '.join(f'{g}: ' + ', '.join(sorted(v)) for g, v in by_group.items())})")
    if not differing:
        return ""
    more = f", and {len(differing) - most} more" if len(differing) > most else ""
    return (f"Besides {by} and the seed, these runs differ in {', '.join(differing[:most])}{more}: a row's "
            "difference to the baseline is not the grouping's alone.")
