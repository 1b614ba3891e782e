"""What a verb checks before it writes anything into a store or starts runs: the store's sweep
records and run folders (a damaged one is one line naming its key) and what the runs need (data
files, the data cache, this machine's device)."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ReslabError

MEMBER_KEYS = {"spec": str, "variant": str, "scale": str, "grid": dict, "seed": int}


def _rows_problem(rows, kinds: dict, where: str) -> str | None:
    """The first row of a JSON list that is not an object with these keys of these types, as
    'where[i].key: problem' (a bool is no int here, though Python says it is)."""
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            return f"{where}[{i}]: expected an object"
        for key, kind in kinds.items():
            value = row.get(key)
            if not isinstance(value, kind) or isinstance(value, bool):
                return f"{where}[{i}].{key}: expected {kind.__name__}, got {value!r}"
    return None


def check_spec_record(store, name: str) -> None:
    """specs/<name>.json, as a sweep wrote it (its spec, planned runs and tuning choices), checked
    before a sweep rewrites it or a report reads it: a hand-edited or damaged record is one line
    naming its key (Store.spec_record)."""
    if (store.specs_dir / f"{name}.json").exists():
        store.spec_record(name)


def check_runs(runs, local: bool) -> None:
    """What the sweep's runs need before it writes anything, checked once instead of failing every
    run: their data files and cache (prepared here, before the workers start) and, for local
    workers, what this machine must offer (a CUDA device, bf16 autocast, a compiler for
    train.compile; Slurm runs are checked on their own machines)."""
    from ..train.runtime import preflight

    seen = set()
    for run in runs:
        t, d = run.config.train, run.config.data
        key = (t.device, t.dtype, t.compile, d.corpus, d.path, d.tokenizer, d.tokenizer_path, d.cache_dir)
        if key in seen:
            continue
        seen.add(key)
        try:
            check_data_files(run.config)
            if local:
                preflight(run.config)
        except ReslabError as e:
            raise ReslabError(f"{run.label}: {e}") from None


def check_data_files(cfg) -> None:
    """The files a run's data preparation reads, and the cache it writes."""
    from ..data.config import cache_root
    from ..fileio import check_output_dir

    d = cfg.data
    for name, path, needed in (("data.path", d.path, d.corpus == "text"),
                               ("data.tokenizer_path", d.tokenizer_path, d.tokenizer == "hf")):
        if needed and path and not Path(path).expanduser().is_file():
            raise ReslabError(f"{name}: {path}: no such file")
    check_output_dir(cache_root(d), "data.cache_dir" if d.cache_dir else "data cache")


def check_data_cache(cfg) -> None:
    """The data cache is written before the run folder: refuse an unusable one first."""
    from ..data.config import cache_root
    from ..fileio import check_output_dir

    check_output_dir(cache_root(cfg.data), "data.cache_dir" if cfg.data.cache_dir else "data cache")


def _member_problem(meta) -> str | None:
    """What is wrong with a run folder's sweep.json for the index, as 'key: problem', or None."""
    if not isinstance(meta.get("id"), str):
        return f"id: expected a string, got {meta.get('id')!r}"
    if not isinstance(meta.get("config", {}), dict):
        return "config: expected an object"
    members = meta.get("members", [])
    if not isinstance(members, list):
        return "members: expected a list"
    return _rows_problem(members, MEMBER_KEYS, "members")


def check_run_folders(store) -> None:
    """Every run folder the index is rebuilt from, checked first: a damaged sweep.json or status.json
    is one line naming it, and the old index stays as it was."""
    from ..fileio import read_json

    for run_dir in sorted(store.runs_dir.glob("*")) if store.runs_dir.is_dir() else []:
        sweep_file, status_file = run_dir / "sweep.json", run_dir / "status.json"
        if not sweep_file.is_file():
            continue  # not a sweep's run: the index leaves it out
        problem = _member_problem(read_json(sweep_file, "sweep membership"))
        if problem:
            raise ReslabError(f"{sweep_file}: {problem}; repair it or move the run folder out of the store")
        if status_file.exists():
            try:
                status = json.loads(status_file.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                continue  # the index reads an unreadable status as "pending"
            if not isinstance(status, dict):
                raise ReslabError(f"{status_file}: expected a JSON object, got {type(status).__name__}")
