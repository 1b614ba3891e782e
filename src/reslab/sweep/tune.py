"""[tune]'s store-reading half: each row's choice from its tuning runs' folders, the extension of a
row whose best is an end of its values, the log lines, and a sweep's plan as it stands.

The table, its values, seeds and pick rule are reslab.spec.tune's (with the two phases a tuning
scale runs in); the tuning runs are planned by reslab.spec.tune_plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, ReslabError
from ..fileio import read_json
from ..spec.expand import PlannedRun, expand, tuned_key
from ..spec.more_seeds import comparison_seeds
from ..spec.tune import TuningChoice, ValueResult, grid_edge, next_value, pick, row_key, row_of, row_seeds
from ..spec.tune_plan import tuning_runs, tuning_scales
from ..train.run_folder import RunFolder


def _status(store, run) -> dict:
    folder = store.folder_for(run.id, run.label)
    return RunFolder(folder).read_status() if folder.is_dir() else {}



def tuning_plan(spec, store, scales: list[str] | None = None,
                runs: list | None = None) -> tuple[list, list[TuningChoice]]:
    """(every tuning run known now, each row's choice), from the tuning runs' folders (the truth,
    not the index). Without `extend` the runs are the grid's (`runs`, default tuning_runs(spec,
    scales)). With it, a row whose choice sits at an end of its values gains the next value's runs
    (next_value), and chooses again once they finish, up to tune.extend values a side; the plan
    therefore grows as runs finish, and a sweep trains it until it stops growing.

    One TuningChoice per row (reslab.spec.tune), in the plan's row order."""
    t = spec.tune
    runs = list(tuning_runs(spec, scales) if runs is None else runs)
    rows: dict[str, dict] = {}
    for run in runs:
        scale, variant, point = row_of(run, t.axis)
        row = rows.setdefault(row_key(scale, variant, point),
                              {"scale": scale, "variant": variant, "grid": point, "runs": {}})
        row["runs"].setdefault(run.grid[t.axis], []).append(run)
    at_value: dict = {}  # value -> every row's runs at it (an extension's, planned once)
    statuses: dict[str, tuple] = {}

    def result(run) -> tuple:
        if run.id not in statuses:
            st = _status(store, run)
            statuses[run.id] = (st.get("status", "pending"), st.get(t.metric))
        return statuses[run.id]

    choices = []
    for key, row in rows.items():
        extended = {"top": 0, "bottom": 0}
        seeds = row_seeds(t, row["variant"], row["grid"])
        while True:
            values = sorted(row["runs"])
            value, table, note = pick(values, {v: [result(r) for r in rs] for v, rs in row["runs"].items()},
                                      len(seeds))
            edge = grid_edge(value, values)
            if value is None or edge is None or extended[edge] >= t.extend:
                break
            new = next_value(values, edge)
            if new is None:
                break
            if new not in at_value:
                try:
                    at_value[new] = tuning_runs(spec, scales, values=[new])
                except ConfigError as e:  # e.g. a learning rate below optim.min_lr: the grid ends here
                    at_value[new] = e
            if isinstance(at_value[new], ConfigError):
                reason = at_value[new].errors[0].rsplit("}: ", 1)[-1]
                note = "; ".join(filter(None, [note, f"cannot try {new:g} beyond the {edge}: {reason}"]))
                break
            added = [r for r in at_value[new] if row_key(*row_of(r, t.axis)) == key]
            row["runs"][new] = added
            runs += added
            extended[edge] += 1
        choices.append(TuningChoice(scale=row["scale"], variant=row["variant"], grid=row["grid"], axis=t.axis,
                                    metric=t.metric, seeds=list(seeds), value=value,
                                    values=[ValueResult(**e) for e in table], edge=edge, extended=extended,
                                    note=note))
    return runs, choices


def choose(spec, store, scales: list[str] | None = None, runs: list | None = None) -> list[TuningChoice]:
    """Each tuning row's choice (tuning_plan's second half)."""
    return tuning_plan(spec, store, scales, runs)[1]


def tuned_values(choices: list[TuningChoice]) -> dict:
    """tuned_key -> value for expand(), from the rows that have a value."""
    return {tuned_key(c.scale, c.variant, c.grid): c.value for c in choices if c.value is not None}


def _row_text(c: TuningChoice) -> str:
    return (c.scale + " " if c.scale else "") + "-".join([c.variant] + [f"{k}={v}" for k, v in c.grid.items()])


def choice_line(spec_name: str, c: TuningChoice) -> str:
    """One line per row for the sweep's log: the chosen value and each value's mean."""
    def cell(e: ValueResult):
        if e.diverged or e.failed:
            return f"{e.value:g} {e.diverged} diverged/{e.failed} failed"
        return f"{e.value:g} {e.mean:.4f}" if e.mean is not None else f"{e.value:g} -"
    head = f"tuned {spec_name} {_row_text(c)}: {c.axis} = "
    head += "(none yet)" if c.value is None else f"{c.value:g}"
    notes = [c.note] if c.note else []
    ext = c.extended
    if c.edge:
        notes.append(f"the {c.edge} of its values" + (f", {ext[c.edge]} of them beyond the grid"
                                                     if ext.get(c.edge) else "") + ": its best may lie beyond")
    elif any(ext.values()):
        side = "top" if ext.get("top") else "bottom"
        notes.append(f"the grid extended by {ext[side]} at the {side}")
    tail = f" [{'; '.join(notes)}]" if notes else ""
    return f"{head}  ({c.metric} mean over {len(c.seeds)} tuning seeds: " + \
        ", ".join(cell(e) for e in c.values) + ")" + tail


def extension_line(spec_name: str, c: TuningChoice, extend: int) -> str:
    """The log line of a row that tries values beyond an end of its grid (tune.extend = `extend`)."""
    side = "top" if c.extended["top"] else "bottom"
    waiting = [e.value for e in c.values if e.unfinished]
    return (f"tuned {spec_name} {_row_text(c)}: its best so far is the {side} "
            f"of its values; trying {', '.join(f'{v:g}' for v in waiting)} ({c.extended[side]} of at most "
            f"{extend} beyond the grid)")



@dataclass(frozen=True)
class SweepPlan:
    """What a sweep of a spec would do now (plan)."""
    tuning: list[PlannedRun]          # every tuning run known now
    choices: list[TuningChoice]       # each tuning row's choice so far
    comparison: list[PlannedRun]      # the comparison runs known now: untuned scales and tuned rows
    after: dict[str, int]             # scale -> comparison runs that wait for their rows' tuning


def plan(spec, store, scales: list[str] | None = None) -> SweepPlan:
    """What a sweep of `spec` would do now, without writing anything."""
    truns, choices = tuning_plan(spec, store, scales) if tuning_scales(spec, scales) else ([], [])
    comparison = expand(spec, scales, tuned=tuned_values(choices))
    after: dict[str, int] = {}
    for c in choices:
        if c.value is None:
            after[c.scale] = after.get(c.scale, 0) + len(comparison_seeds(spec, c.scale, c.variant, c.grid))
    return SweepPlan(tuning=truns, choices=choices, comparison=comparison, after=after)



def folder_config(path) -> dict | None:
    """A run folder's planned config (sweep.json), or None."""
    try:
        return read_json(Path(path) / "sweep.json", "sweep membership").get("config")
    except (ReslabError, OSError, AttributeError, TypeError):
        return None
