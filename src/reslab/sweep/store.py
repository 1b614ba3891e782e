"""The results store: run folders are the truth; a SQLite index makes them queryable.

    <store>/
        index.sqlite            runs, their memberships in specs, and the specs (WAL mode)
        specs/<name>.json       each spec as last run: its source and its planned runs
        links.json              runs that `reslab train` (or `reslab compare`) listed, wherever their
                                folders are: {"runs": [{"path", "id", "config", timings}]}; their
                                folders are left as they are (no sweep.json is written into them)
        runs/<label>-<id>/      one run folder per run identity (see train/run_folder.py), plus
            sweep.json          {"id", "config": planned config, "members": [{spec, variant, scale, grid, seed}]}
            worker.log          the run's output when a sweep trained it

Only the orchestrating process writes the index. Everything in it can be rebuilt from the folders
(`reslab runs reindex`), so losing or corrupting index.sqlite loses nothing.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

from ..errors import ConfigError, ReslabError
from ..fileio import read_json, write_json
from ..spec.record import SpecRecord, parse_record
from ..train.run_folder import RunFolder

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, path TEXT NOT NULL, label TEXT, design TEXT, status TEXT, error TEXT,
    step INTEGER, steps INTEGER, best_val_loss REAL, final_val_loss REAL, last_train_loss REAL,
    spike_score_loss REAL, params INTEGER, tokens_per_s REAL, corpus TEXT,
    started_at REAL, finished_at REAL, wall_s REAL, config TEXT
);
CREATE TABLE IF NOT EXISTS members (
    spec TEXT NOT NULL, run_id TEXT NOT NULL, variant TEXT NOT NULL, scale TEXT NOT NULL,
    grid TEXT NOT NULL, seed INTEGER NOT NULL,
    PRIMARY KEY (spec, variant, scale, grid, seed)
);
CREATE TABLE IF NOT EXISTS specs (name TEXT PRIMARY KEY, file TEXT, updated_at REAL);
"""
RUN_COLUMNS = ("id", "path", "label", "design", "status", "error", "step", "steps", "best_val_loss",
               "final_val_loss", "last_train_loss", "spike_score_loss", "params", "tokens_per_s", "corpus",
               "started_at", "finished_at", "wall_s", "config")
FINISHED = ("completed", "diverged")   # a rerun of the spec skips these; "failed" runs are retried


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def run_row_from_folder(run_dir: Path, meta: dict | None = None) -> dict | None:
    """The index row of one run folder from its sweep.json (or `meta`, a linked run's record: id,
    config, timings) and its status.json and metrics."""
    from ..fileio import JsonlLog

    sweep_file = run_dir / "sweep.json"
    if sweep_file.is_file():
        meta = read_json(sweep_file, "sweep membership")
    elif meta is None:
        return None
    status = RunFolder(run_dir).read_status()
    cfg = meta.get("config", {})
    params = (status.get("params") or {}).get("total")
    rates = [r["tokens_per_s"] for r in JsonlLog(run_dir / "metrics.jsonl").read()
             if isinstance(r, dict) and _is_number(r.get("tokens_per_s"))]  # a damaged row is skipped, not fatal
    return {
        "id": meta["id"], "path": str(run_dir), "label": run_dir.name.rsplit("-", 1)[0],
        "design": cfg.get("model", {}).get("design"), "status": status.get("status", "pending"),
        "error": status.get("error"), "step": status.get("step"), "steps": cfg.get("train", {}).get("steps"),
        "best_val_loss": status.get("best_val_loss"), "final_val_loss": status.get("final_val_loss"),
        "last_train_loss": status.get("last_train_loss"), "spike_score_loss": status.get("spike_score_loss"),
        "params": params, "tokens_per_s": sorted(rates)[len(rates) // 2] if rates else None,
        "corpus": status.get("corpus"), "started_at": meta.get("started_at"),
        "finished_at": meta.get("finished_at"), "wall_s": meta.get("wall_s"), "config": json.dumps(cfg),
    }


class Store:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.runs_dir = self.root / "runs"
        self.specs_dir = self.root / "specs"
        self.db_path = self.root / "index.sqlite"
        self._db: sqlite3.Connection | None = None

    # ---- the index ----
    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            self.root.mkdir(parents=True, exist_ok=True)
            try:
                self._db = sqlite3.connect(self.db_path, timeout=30)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(SCHEMA)
            except sqlite3.DatabaseError as e:
                raise ReslabError(f"{self.db_path}: not a usable SQLite index ({e}); rebuild it from the run "
                                  "folders with `reslab runs reindex`") from None
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def upsert_run(self, row: dict) -> None:
        cols = [c for c in RUN_COLUMNS if c in row]
        sql = (f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
               f"ON CONFLICT(id) DO UPDATE SET {', '.join(f'{c}=excluded.{c}' for c in cols if c != 'id')}")
        with self.db:
            self.db.execute(sql, [row[c] for c in cols])

    def add_members(self, run_id: str, members: list[dict]) -> None:
        with self.db:
            for m in members:
                self.db.execute("INSERT OR REPLACE INTO members VALUES (?, ?, ?, ?, ?, ?)",
                                (m["spec"], run_id, m["variant"], m["scale"], json.dumps(m["grid"], sort_keys=True),
                                 m["seed"]))

    def record_spec(self, name: str, file: str) -> None:
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO specs VALUES (?, ?, ?)", (name, file, time.time()))

    def runs(self, spec: str | None = None, variant: str | None = None, status: str | None = None,
             scale: str | None = None) -> list[dict]:
        """Index rows, one per (membership, run), filtered; runs in no spec appear with spec None."""
        sql = ("SELECT m.spec, m.variant, m.scale, m.grid, m.seed, r.* FROM runs r "
               "LEFT JOIN members m ON m.run_id = r.id WHERE 1=1")
        args: list = []
        for col, value in (("m.spec", spec), ("m.variant", variant), ("r.status", status), ("m.scale", scale)):
            if value is not None:
                sql += f" AND {col} = ?"
                args.append(value)
        sql += " ORDER BY m.spec, m.scale, m.variant, m.seed"
        cur = self.db.execute(sql, args)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    def integrity(self) -> str:
        return self.db.execute("PRAGMA integrity_check").fetchone()[0]

    # ---- run folders ----
    def folder_for(self, run_id: str, label: str) -> Path:
        """The run's folder: the one that already holds this identity, else a new runs/<label>-<id>."""
        existing = sorted(self.runs_dir.glob(f"*-{run_id}")) if self.runs_dir.is_dir() else []
        return existing[0] if existing else self.runs_dir / f"{label}-{run_id}"

    def write_membership(self, run_dir: Path, run_id: str, config: dict, member: dict | None = None,
                         **fields) -> None:
        """Create or update the run's sweep.json (atomically), adding `member` if it is new."""
        path = run_dir / "sweep.json"
        meta = read_json(path, "sweep membership") if path.is_file() else {"id": run_id, "config": config,
                                                                            "members": []}
        if meta.get("id") != run_id:  # the same identity may come with another display name: same run
            raise ReslabError(f"{path}: belongs to another run (identity {meta.get('id')}); the store is "
                              "inconsistent — move that folder away and rerun")
        if member is not None and member not in meta["members"]:
            meta["members"].append(member)
        meta.update(fields)
        write_json(path, meta)

    def read_membership(self, run_dir: Path) -> dict:
        return read_json(run_dir / "sweep.json", "sweep membership")

    # ---- single runs (`reslab train`) ----
    def register_single(self, run_dir: Path, config: dict, run_id: str, **fields) -> None:
        """Index a run that `reslab train` trained (in no sweep), wherever its folder is."""
        self.link(run_dir, {"id": run_id, "config": config, **fields})

    def link(self, run_dir: Path, meta: dict) -> None:
        """Index a run folder without writing into it, and remember it so that reindex finds it again."""
        run_dir = Path(run_dir).resolve()
        row = run_row_from_folder(run_dir, meta)
        if row is not None:
            self.upsert_run(row)
        links = [r for r in self.linked_runs() if r["path"] != str(run_dir)]
        write_json(self.root / "links.json", {"runs": links + [{"path": str(run_dir), **meta}]})

    def linked_runs(self) -> list[dict]:
        path = self.root / "links.json"
        if not path.is_file():
            return []
        runs = read_json(path, "linked runs").get("runs", [])
        return [r for r in runs if isinstance(r, dict) and isinstance(r.get("path"), str)
                and isinstance(r.get("id"), str) and isinstance(r.get("config"), dict)]

    # ---- rebuild ----
    def reindex(self) -> int:
        """Rebuild index.sqlite from the run folders and specs/ (atomically: a new file renamed over)."""
        self.close()
        tmp = self.root / f".index.sqlite.{os.getpid()}.tmp"
        tmp.unlink(missing_ok=True)
        fresh = Store(self.root)
        fresh.db_path = tmp
        count = 0
        for run_dir in sorted(self.runs_dir.glob("*")) if self.runs_dir.is_dir() else []:
            row = run_row_from_folder(run_dir)
            if row is None:
                continue
            fresh.upsert_run(row)
            fresh.add_members(row["id"], self.read_membership(run_dir).get("members", []))
            count += 1
        for link in self.linked_runs():
            run_dir = Path(link["path"])
            row = run_row_from_folder(run_dir, link) if run_dir.is_dir() else None
            if row is not None:
                fresh.upsert_run(row)
                count += 1
        for spec_file in sorted(self.specs_dir.glob("*.json")) if self.specs_dir.is_dir() else []:
            fresh.record_spec(spec_file.stem, str(spec_file))
            fresh._claim_planned_slots(spec_file)
        fresh.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        fresh.db.execute("PRAGMA journal_mode=DELETE")  # one self-contained file before the rename
        fresh.close()
        for suffix in ("-wal", "-shm"):
            Path(str(self.db_path) + suffix).unlink(missing_ok=True)
        os.replace(tmp, self.db_path)
        return count

    def _claim_planned_slots(self, spec_file: Path) -> None:
        """Give each membership slot (spec, variant, scale, grid, seed) to the run the spec's record plans
        for it, where that run's folder is indexed. A sweep planned again (its spec edited, a row re-tuned
        to another value, a default that enters run identities changed) leaves its earlier run in the
        same slot; folders are read in name order, which is not the order they were trained in."""
        try:
            planned = read_json(spec_file, "sweep record").get("runs") or []
        except (ReslabError, AttributeError):
            return  # a damaged record is reported by whatever reads it (spec_record)
        indexed = {row[0] for row in self.db.execute("SELECT id FROM runs")}
        keys = ("spec", "variant", "scale", "grid", "seed")
        for m in planned:
            if isinstance(m, dict) and m.get("id") in indexed and all(k in m for k in keys):
                self.add_members(m["id"], [{k: m[k] for k in keys}])

    # ---- specs ----
    def planned_ids(self, name: str) -> set[str] | None:
        """The run identities the sweep's record plans now, at every scale it ran (None when the store
        has no record of it). A run of the sweep not among them was planned by an earlier plan of it
        (an edited spec, a row re-tuned to another value): it is kept in its folder, and its membership
        slot is the planned run's once that one trains. Readers of a sweep's results go by these ids."""
        if not (self.specs_dir / f"{name}.json").is_file():
            return None
        return {r.id for r in self.spec_record(name).runs}

    def mark_planned(self, rows: list[dict]) -> list[dict]:
        """Each index row with "planned": True when its sweep's current plan names the run, False for
        an earlier plan's run still holding its slot, None for a run in no sweep, or of a sweep whose
        record is missing or damaged (a listing still lists; the report names the damage)."""
        plans: dict[str, set[str] | None] = {}
        for row in rows:
            spec = row.get("spec")
            if spec is not None and spec not in plans:
                try:
                    plans[spec] = self.planned_ids(spec)
                except ReslabError:
                    plans[spec] = None
            ids = plans.get(spec) if spec is not None else None
            row["planned"] = None if ids is None else row.get("id") in ids
        return rows

    def save_spec(self, name: str, data: dict) -> Path:
        path = self.specs_dir / f"{name}.json"
        write_json(path, data)
        self.record_spec(name, str(path))
        return path

    def load_spec_record(self, name: str) -> dict:
        path = self.specs_dir / f"{name}.json"
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in self.specs_dir.glob("*.json"))) or "none"
            raise ReslabError(f"{self.root}: no sweep named {name!r} in this store (it has: {known})")
        return read_json(path, "sweep record")

    def spec_record(self, name: str) -> SpecRecord:
        """The sweep's record as typed values (reslab.spec.record); a damaged one is one line naming
        its file and key."""
        record = self.load_spec_record(name)
        try:
            return parse_record(record)
        except ConfigError as e:
            raise ReslabError(f"{self.specs_dir / f'{name}.json'}: {e.errors[0]}; the sweep record is damaged "
                              "(rerun the sweep to rewrite it)") from None
