"""Loss against learning rate in reports: the [tune] phase's curves and chosen values, and the
learning-rate sensitivity of each design (Wortsman et al. 2023).

    lr_section(spec, tuned, store, spec_name, scale, cells, out) -> dict | None
        None when the spec neither tunes at this scale nor has a learning-rate grid; otherwise
        {"tuning": {...} | None, "sensitivity": {...} | None, "figures": [{"title", "file"}]},
        its figures drawn into `out` (lr_tuning.png, lr_sensitivity.png). The caller lists
        "figures" in the report's figure section.
    lr_blocks(report) -> blocks for render.py, from report["lr"] (none when it is missing)
    check_held(tuning, cells, bigram) -> {row name: why} for the rows whose tuned value did not
        hold on their comparison seeds (see the function); also marks each tuning row's "held"

A tuned value is chosen on a few tuning seeds. Where a design trains at a rate on one seed and
stays at the unigram plateau on another, the tuning seed can pick a rate that the comparison seeds
do not survive (ProRes's post-ln rows at 8 layers, 2026-12-02). Such a row is not "the design at
its own best rate", so the report says so and no claim on it gets a verdict (claims.py).

Sensitivity (Wortsman et al. 2023), per design (a variant with every grid axis but the learning
rate fixed) and seed, over the grid's learning rates:

    S = mean_lr min(L(lr), cap) - min_lr min(L(lr), cap)

Wortsman et al. cap at the loss at initialisation; the default cap here is lower, the unigram level
of the training data, so a run that learns no more than character frequencies counts as failed.

L is the run's final (or best) validation loss; a diverged or failed run counts as the cap. The
minimum is taken over the capped losses too, which is the plain minimum whenever any learning rate
beats the cap (and keeps S >= 0 when none does). A seed enters only when it has a result at every
learning rate of the design. The report gives the mean of S over seeds with its 95% t-interval
(none below 3 seeds) and the learning rate with the lowest mean capped loss (ties to the smaller).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..errors import ReslabError
from ..spec.ladder import effective_grid
from ..spec.rows import row_name
from ..spec.schema import SweepSpec, TuneOptions
from ..spec.tune import TuningChoice, grid_edge, pick, row_seeds, row_values, tune_name  # grid_edge: also study_docs'
from ..sweep.tune import folder_config
from . import stats
from .claims import run_fails

DASH = "—"
LR_AXIS = "optim.lr"
CAP_REASON = ("the unigram entropy of the training data: a run no better than predicting character "
              "frequencies has not learned anything a learning rate could be credited with")
FINISHED = ("completed", "diverged", "failed")
TUNING_FIGURE = "lr_tuning.png"
SENSITIVITY_FIGURE = "lr_sensitivity.png"


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _grid(value) -> dict:
    if isinstance(value, dict):
        return value
    try:
        out = json.loads(value or "{}")
    except (TypeError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


def _tune_at(spec: SweepSpec, scale: str) -> TuneOptions | None:
    return spec.tune if spec.tune is not None and spec.tune.tunes(scale) else None


def _sensitivity_options(spec: SweepSpec, scale: str) -> dict | None:
    """The sensitivity settings when the scale's grid has the axis: the spec's, else the defaults
    for a learning-rate grid."""
    opts = spec.report.sensitivity
    axis = (opts.axis if opts else None) or LR_AXIS
    values = effective_grid(spec, scale).get(axis)
    if not isinstance(values, list) or len(values) < 2:
        return None
    return {"axis": axis, "cap": opts.cap if opts else None, "cap_reason": (opts.cap_reason if opts else ""),
            "metric": opts.metric if opts else "final_val_loss"}


def lr_section(spec: SweepSpec, tuned: list[TuningChoice], store, spec_name: str, scale: str, cells: list[dict],
               out) -> dict | None:
    """The report's learning-rate section (see the module docstring); `tuned`: the choices the sweep
    recorded at this scale."""
    tune = _tune_at(spec, scale)
    sens = _sensitivity_options(spec, scale)
    if tune is None and sens is None:
        return None
    from . import plots

    out = Path(out)
    section: dict = {"tuning": None, "sensitivity": None, "figures": []}
    if tune is not None:
        section["tuning"] = tuning_table(tune, tuned, store, spec_name, scale)
        if _draw_tuning(section["tuning"], out / TUNING_FIGURE, plots):
            section["figures"].append({"title": f"Tuning: validation loss against {tune.axis}, chosen "
                                                "values marked", "file": TUNING_FIGURE})
        else:
            (out / TUNING_FIGURE).unlink(missing_ok=True)  # a stale figure from an earlier report
    if sens is not None:
        cap, reason = sens["cap"], sens["cap_reason"]
        if cap is None:
            cap, reason = _unigram_cap(cells), reason or CAP_REASON
        section["sensitivity"] = sensitivity(cells, sens["axis"], cap, sens["metric"])
        section["sensitivity"]["cap_reason"] = reason or "given by the spec"
        if _draw_sensitivity(section["sensitivity"], out / SENSITIVITY_FIGURE, plots):
            which = "final" if sens["metric"] == "final_val_loss" else "best"
            section["figures"].append({"title": f"Learning-rate sensitivity: {which} validation loss against "
                                                f"{sens['axis']}, mean over seeds", "file": SENSITIVITY_FIGURE})
        else:
            (out / SENSITIVITY_FIGURE).unlink(missing_ok=True)
    return section


# ---- tuning ----------------------------------------------------------------------------------------
def tuning_table(tune: TuneOptions, tuned: list[TuningChoice], store, spec_name: str, scale: str) -> dict:
    """Per row: each value's mean metric over the row's tuning seeds and its n, and the chosen value
    (as the sweep recorded it in `tuned`; recomputed by the same rule where the record has none). A
    row's values are the grid's and any it added beyond an end (tune.extend); "values" is their
    union. A row's "seeds" are tune.seeds unless a [[tune.rows]] entry gives it its own."""
    axis, metric, values = tune.axis, tune.metric, sorted(tune.values)
    out = {"axis": axis, "metric": metric, "values": values, "seeds": list(tune.seeds), "rows": [], "note": None,
           "grid": list(values), "extend": tune.extend}
    try:
        planned = store.spec_record(tune_name(spec_name)).runs_at(scale)
    except ReslabError:
        out["note"] = "The tuning runs have not been started yet."
        return out
    index = {r["id"]: r for r in store.runs(spec=tune_name(spec_name), scale=scale)}
    rows: dict[str, dict] = {}
    for m in planned:
        point = {k: v for k, v in m.grid.items() if k != axis}
        key = json.dumps([m.variant, point], sort_keys=True)
        row = rows.setdefault(key, {"variant": m.variant, "grid": point,
                                    "name": row_name(m.variant, point), "results": {}})
        r = index.get(m.id) or {}
        row["results"].setdefault(m.grid.get(axis), []).append((r.get("status") or "pending", r.get(metric)))
    chosen = {json.dumps([c.variant, c.grid], sort_keys=True): c for c in tuned}
    for key, row in rows.items():
        row_vals = sorted(v for v in row["results"] if _finite(v))
        own_seeds = row_seeds(tune, row["variant"], row["grid"])
        value, table, note = pick(row_vals, row["results"], len(own_seeds))
        if key in chosen:
            value, note = chosen[key].value, chosen[key].note
        own = sorted(row_values(tune, row["variant"], row["grid"]))
        added = [v for v in row_vals if v not in own]
        out["rows"].append({"variant": row["variant"], "grid": row["grid"], "name": row["name"],
                            "values": table, "chosen": value, "note": note, "edge": grid_edge(value, row_vals),
                            "own_values": own, "added": added, "seeds": own_seeds})
    out["values"] = sorted(set(values).union(*(set(r["own_values"]) | set(r["added"]) for r in out["rows"])))
    return out


def check_held(tuning: dict | None, cells: list[dict], bigram: float | None) -> dict[str, str]:
    """Rows whose tuned value did not hold: at the chosen value the tuning seeds' mean learned
    beyond the bigram level, but more than half of the row's comparison runs did not (the fails
    rule of claims: diverged, non-finite, or at or above the bigram level). Each tuning row gets "held": None
    (nothing to judge: no levels, no choice or no comparison run yet), True or False, and
    "comparison": {"mean", "n", "not_beyond"}. Returns {row name: the reason, with its numbers}."""
    out: dict[str, str] = {}
    if not isinstance(tuning, dict):
        return out
    metric = tuning.get("metric") or "best_val_loss"
    by_name = {c.get("row"): c for c in cells or []}
    for r in tuning.get("rows") or []:
        r["held"] = None
        cell = by_name.get(r.get("name"))
        at = next((e for e in r.get("values") or [] if e.get("value") == r.get("chosen")), None)
        if not _finite(bigram) or cell is None or at is None or not _finite(at.get("mean")):
            continue
        judged = [(run, run_fails(run, metric, bigram)) for run in cell.get("runs") or []]
        judged = [(run, fails) for run, fails in judged if fails is not None]
        if not judged:
            continue
        short = sum(fails for _, fails in judged)
        finite = [run[metric] for run, _ in judged if _finite(run.get(metric))]
        mean = sum(finite) / len(finite) if finite else None
        r["comparison"] = {"mean": mean, "n": len(judged), "not_beyond": short}
        r["held"] = not (at["mean"] < bigram and 2 * short > len(judged))
        if not r["held"]:
            seeds = len(r.get("seeds") or tuning.get("seeds") or [])
            out[r["name"]] = (f"{r['name']}'s tuned {tuning.get('axis', LR_AXIS)} = {_v(r['chosen'])} did not hold: "
                              f"its {seeds} tuning seed(s) reached {_loss(at['mean'])} there, but {short} of "
                              f"{len(judged)} comparison runs did not learn beyond the bigram level "
                              f"({_loss(bigram)}; their mean {_loss(mean)}), so the row is not the design at "
                              f"its own best rate")
    return out


def _draw_tuning(table: dict, path: Path, plots) -> bool:
    lines = [(r, [(e["value"], e["mean"]) for e in r["values"]
                  if e["mean"] is not None and not e["diverged"] and not e["failed"]]) for r in table["rows"]]
    lines = [(r, pts) for r, pts in lines if pts]
    if not lines:
        return False
    from matplotlib.figure import Figure

    colors = plots.variant_colors([r["name"] for r, _ in lines])
    fig = Figure(figsize=plots.FIGSIZE)
    ax = fig.add_subplot()
    for r, pts in lines:
        xs, ys = zip(*pts)
        ax.plot(xs, ys, "o-", color=colors[r["name"]], label=r["name"], lw=1.5, ms=4)
        best = [y for x, y in pts if x == r["chosen"]]
        if best:
            ax.plot([r["chosen"]], best, marker="*", ms=16, color=colors[r["name"]], mec="black", ls="none")
        bad = [e["value"] for e in r["values"] if e["diverged"] or e["failed"]]
        if bad:  # a value with a diverged or failed tuning run: marked on the top edge
            ax.plot(bad, [1.0] * len(bad), "x", color=colors[r["name"]], ms=8, transform=ax.get_xaxis_transform())
    ax.set_xscale("log")
    ax.set_xlabel(table["axis"] + " (log scale)")
    counts = {len(r.get("seeds") or table["seeds"]) for r, _ in lines}
    over = f"{counts.pop()} tuning seeds" if len(counts) == 1 else "each row's tuning seeds"
    ax.set_ylabel(f"{table['metric'].replace('_', ' ')}, mean over {over}")
    ax.set_title("Tuning: * = chosen value, x on top = a diverged or failed tuning run")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


def _save(fig, path: Path) -> bool:
    from ..fileio import atomic_path
    from .plots import DPI

    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, bbox_inches="tight")
    fig.clear()
    return True


# ---- sensitivity -----------------------------------------------------------------------------------
def _unigram_cap(cells: list[dict]) -> float | None:
    """The unigram entropy (nats) of the training split of the cells' runs' data, or None."""
    for cell in cells:
        for run in cell.get("runs") or []:
            config = folder_config(run["path"]) if run.get("path") else None
            if config:
                return _entropy(config)
    return None


def _entropy(config: dict) -> float | None:
    import numpy as np

    from ..data import prepare_dataset
    from ..data.config import DataConfig
    from ..typed import from_dict

    try:
        data = prepare_dataset(from_dict(DataConfig, config["data"]), progress=False, log=lambda *_: None)
    except (ReslabError, OSError, KeyError, TypeError):
        return None
    tokens = np.asarray(data.train[:10_000_000])
    return stats.unigram_entropy(np.bincount(tokens, minlength=data.vocab_size))


def seed_sensitivity(losses: list[float], cap: float) -> float:
    """S of one seed over its learning rates: losses are already capped (a failed run = cap)."""
    capped = [min(x, cap) for x in losses]
    return math.fsum(capped) / len(capped) - min(capped)


def sensitivity(cells: list[dict], axis: str, cap: float | None, metric: str = "final_val_loss") -> dict:
    """Per design: per-seed S, their mean with a 95% t-interval (n >= 3), the mean capped loss per
    learning rate and the best learning rate. cap None: no cap could be found (nothing computed)."""
    out = {"axis": axis, "cap": cap, "metric": metric, "designs": [], "lrs": []}
    if cap is None:
        out["note"] = "No cap: the spec gives none and the corpus's unigram entropy could not be computed."
        return out
    designs: dict[str, dict] = {}
    for cell in cells:
        grid = _grid(cell.get("grid"))
        if axis not in grid or not _finite(grid[axis]):
            continue
        rest = {k: v for k, v in grid.items() if k != axis}
        name = row_name(cell.get("variant"), rest)
        d = designs.setdefault(name, {"design": name, "variant": cell.get("variant"), "grid": rest, "by_seed": {}})
        for run in cell.get("runs") or []:
            status, value = run.get("status"), run.get(metric)
            if status == "completed" and _finite(value):
                loss, kind = min(float(value), cap), ("capped" if value > cap else "ok")
            elif status in FINISHED:  # diverged, failed, or completed without a finite loss
                loss, kind = cap, (status if status != "completed" else "failed")
            else:
                continue  # not finished: this seed has no result at this learning rate
            d["by_seed"].setdefault(run.get("seed"), {})[grid[axis]] = loss
            d.setdefault("kinds", {})[(run.get("seed"), grid[axis])] = kind
        d.setdefault("lrs", set()).add(grid[axis])
    all_lrs: set = set()
    for d in designs.values():
        lrs = sorted(d.pop("lrs"))
        all_lrs |= set(lrs)
        complete = {s: v for s, v in d["by_seed"].items() if all(lr in v for lr in lrs)}
        per_seed = {s: seed_sensitivity([v[lr] for lr in lrs], cap) for s, v in complete.items()}
        summary = stats.summarize(list(per_seed.values()))
        means = {}
        for lr in lrs:
            vals = [v[lr] for v in d["by_seed"].values() if lr in v]
            means[lr] = math.fsum(vals) / len(vals) if vals else None
        best_lr = None
        for lr in lrs:  # ascending: a tie keeps the smaller learning rate
            if means[lr] is not None and (best_lr is None or means[lr] < means[best_lr]):
                best_lr = lr
        d.update(lrs=lrs, per_seed=[{"seed": s, "sensitivity": x} for s, x in per_seed.items()],
                 seeds_incomplete=sorted((s for s in d["by_seed"] if s not in complete), key=str),
                 mean=summary["mean"], std=summary["std"], ci_low=summary["ci_low"], ci_high=summary["ci_high"],
                 n=summary["n"], mean_loss=[{"lr": lr, "mean": means[lr]} for lr in lrs], best_lr=best_lr,
                 best_loss=means.get(best_lr) if best_lr is not None else None,
                 never_below_cap=all(x >= cap for v in d["by_seed"].values() for x in v.values()),
                 points=[{"seed": s, "lr": lr, "loss": x, "kind": d["kinds"][(s, lr)]}
                         for s, v in d["by_seed"].items() for lr, x in v.items()])
        out["designs"].append(d)
        del d["by_seed"]
        d.pop("kinds", None)
    out["lrs"] = sorted(all_lrs)
    return out


def _draw_sensitivity(sens: dict, path: Path, plots) -> bool:
    designs = [d for d in sens["designs"] if any(p["loss"] is not None for p in d["points"])]
    if not designs:
        return False
    from matplotlib.figure import Figure

    colors = plots.variant_colors([d["design"] for d in designs])
    fig = Figure(figsize=plots.FIGSIZE)
    ax = fig.add_subplot()
    cap = sens["cap"]
    for d in designs:
        c = colors[d["design"]]
        pts = [(e["lr"], e["mean"]) for e in d["mean_loss"] if e["mean"] is not None]
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, "-", color=c, lw=1.8, label=f"{d['design']} (mean over seeds)")
        for kinds, marker in ((("ok", "capped"), "o"), (("diverged", "failed"), "x")):
            pts = [(p["lr"], p["loss"]) for p in d["points"] if p["kind"] in kinds]
            if pts:  # x: a diverged or failed run, drawn at the cap it counts as
                ax.plot(*zip(*pts), marker, color=c, ms=3 if marker == "o" else 7, alpha=0.6, ls="none")
        if d.get("best_lr") is not None and d.get("best_loss") is not None:
            ax.plot([d["best_lr"]], [d["best_loss"]], marker="*", ms=13, color=c, mec="black", ls="none")
    ax.axhline(cap, ls="--", color="grey", lw=1.2, label=f"cap {cap:.2f} nats")
    ax.set_xscale("log")
    ax.set_xlabel(sens["axis"] + " (log scale)")
    which = "final" if sens["metric"] == "final_val_loss" else "best"
    ax.set_ylabel(f"{which} validation loss (nats), capped")
    ax.set_title("Loss against learning rate: dots = seeds, x = diverged or failed, * = best")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


# ---- blocks --------------------------------------------------------------------------------------
def _loss(x) -> str:
    return f"{x:.4f}" if _finite(x) else DASH


def _v(x) -> str:
    return f"{x:g}" if _finite(x) else DASH


def _tuning_cell(e: dict, n_seeds: int) -> str:
    text = _loss(e.get("mean"))
    marks = []
    if e.get("n", 0) != n_seeds and e.get("mean") is not None:
        marks.append(f"n={e['n']}")
    for key in ("diverged", "failed", "unfinished"):
        if e.get(key):
            marks.append(f"{e[key]} {key}")
    return text + (f" ({', '.join(marks)})" if marks else "")


def lr_blocks(report: dict) -> list[tuple]:
    """The report blocks of the learning-rate section (figures are listed in the section's
    "figures", which the report's figure section shows)."""
    section = report.get("lr")
    if not isinstance(section, dict):
        return []
    blocks: list[tuple] = []
    tuning = section.get("tuning")
    if isinstance(tuning, dict):
        blocks += _tuning_blocks(tuning)
    return blocks + sensitivity_blocks(report)


def sensitivity_blocks(report: dict) -> list[tuple]:
    """The learning-rate sensitivity's blocks alone (bench/study_docs.py puts them in the docs)."""
    section = report.get("lr")
    sens = section.get("sensitivity") if isinstance(section, dict) else None
    return _sensitivity_blocks(sens) if isinstance(sens, dict) else []


def _tuning_blocks(t: dict) -> list[tuple]:
    axis, values, seeds = t.get("axis", LR_AXIS), t.get("values") or [], t.get("seeds") or []
    head = "Learning rate: each design at its own" if axis == LR_AXIS else f"{axis}: each design at its own"
    metric = str(t.get("metric", "best_val_loss")).replace("_", " ")
    b: list[tuple] = [("h2", head),
                      ("p", f"Before the comparison runs, each row trained at every value of {axis} on "
                            f"{len(seeds)} tuning seed(s) ({', '.join(map(str, seeds))}); each cell is the mean "
                            f"{metric} over them. The comparison runs of a row use its chosen value.")]
    if t.get("note"):
        b.append(("p", str(t["note"])))
    rows, table_rows = [], t.get("rows") or []
    more = [r for r in table_rows if r.get("seeds") and list(r["seeds"]) != list(seeds)]
    if more:  # [[tune.rows]] seeds: rows that train at some rates on some seeds only get more of them
        b.append(("p", "These rows tuned on their own seeds ([[tune.rows]] seeds), their cells the mean over "
                       "those: " + "; ".join(f"{r['name']} on {len(r['seeds'])} ({', '.join(map(str, r['seeds']))})"
                                             for r in more) + "."))
    for r in table_rows:
        by_value = {e["value"]: e for e in r.get("values") or []}
        notes = [r["note"]] if r.get("note") else []
        notes += [f"grid's {r['edge']} edge" + (" after extending it" if r.get("added") else "")] if r.get("edge") else []
        notes += ["did not hold on the comparison seeds"] if r.get("held") is False else []
        chosen = _v(r.get("chosen")) + (f" ({'; '.join(notes)})" if notes else "")
        n_seeds = len(r.get("seeds") or seeds)
        rows.append([str(r.get("name"))] + [_tuning_cell(by_value[v], n_seeds) if v in by_value else DASH
                                            for v in values] + [chosen])
    if rows:
        b.append(("table", ["row"] + [f"{axis.rsplit('.', 1)[-1]} = {_v(v)}" for v in values] + ["chosen"],
                  rows, "l" + "r" * len(values) + "l"))
    grown = [r for r in table_rows if r.get("added")]
    if grown:
        grids = {tuple(r.get("own_values") or t.get("grid") or []) for r in table_rows}
        where = (f"the grid ({', '.join(_v(v) for v in t.get('grid') or [])})" if len(grids) == 1
                 else "the values they were given")
        b.append(("p", f"{len(grown)} of {len(table_rows)} rows chose an end of {where} and tried values beyond "
                       f"it, one geometric step at a time, up to {t.get('extend')} a side (tune.extend): "
                       + "; ".join(f"{r['name']} {', '.join(_v(v) for v in r['added'])}" for r in grown)
                       + ". A cell with — is a value that row did not try."))
    edges = [r for r in table_rows if r.get("edge")]
    if edges:
        top = sum(r["edge"] == "top" for r in edges)
        wider = ("Its grid was already extended as far as tune.extend allows; a larger tune.extend or a "
                 "wider grid settles it." if t.get("extend") else "A wider grid, or tune.extend, settles it.")
        b.append(("p", f"{len(edges)} of {len(table_rows)} rows chose a value at an end of the values they "
                       f"tried ({top} at the top, {len(edges) - top} at the bottom): their best may lie beyond, "
                       f"so they may not be compared at their own best rate. {wider}"))
    unheld = [r for r in table_rows if r.get("held") is False]
    if unheld:
        b.append(("p", f"{len(unheld)} of {len(table_rows)} rows' tuned values did not hold on their comparison "
                       "seeds: the tuning seeds learned beyond the bigram level at the chosen value, most "
                       "comparison runs did not ("
                       + "; ".join(f"{r['name']} at {_v(r['chosen'])}: {r['comparison']['not_beyond']} of "
                                   f"{r['comparison']['n']} runs, mean {_loss(r['comparison']['mean'])}"
                                   for r in unheld)
                       + "). The rate sits where seeds disagree, so these rows are not their designs at their "
                         "own best rate, and no claim on them gets a verdict. More tuning seeds (tune.seeds, or a "
                         "[[tune.rows]] entry's seeds for these rows alone) settle it."))
    b.append(("p", "Rule: the value with the lowest mean over the row's tuning seeds wins; a value with a diverged "
                   "or failed tuning run is worse than any value without; ties go to the smaller value; if "
                   "every value failed, the smallest is taken and the row says so. The tuning seeds are "
                   "disjoint from the comparison seeds, so no comparison run helped choose its own value."))
    return b


def _sensitivity_blocks(s: dict) -> list[tuple]:
    axis, cap = s.get("axis", LR_AXIS), s.get("cap")
    which = "final" if s.get("metric") == "final_val_loss" else "best"
    b: list[tuple] = [("h2", "Learning-rate sensitivity (Wortsman et al. 2023)")]
    if s.get("note"):
        return b + [("p", str(s["note"]))]
    b.append(("p", f"Sensitivity of a design = mean over the {axis} grid of min(L, cap) − min over the grid of "
                   f"min(L, cap), per seed, with L the run's {which} validation loss and a diverged or failed "
                   f"run counted as the cap; then the mean over seeds (± sd) and its 95% t-interval (none below "
                   f"3 seeds). Lower is less sensitive. Cap: {_loss(cap)} nats, {s.get('cap_reason')}. "
                   "(Wortsman et al. cap at the loss at initialisation; a lower cap counts every run that does "
                   "not beat it as failed.)"))
    lrs = s.get("lrs") or []
    rows = []
    for d in s.get("designs") or []:
        means = {e["lr"]: e["mean"] for e in d.get("mean_loss") or []}
        mean, std, n = d.get("mean"), d.get("std"), d.get("n") or 0
        cell = DASH if mean is None else (_loss(mean) + ("" if std is None else f" ± {std:.4f}"))
        if d.get("never_below_cap") and mean is not None:  # S = 0 then says nothing about stability
            cell += " (never below the cap)"
        interval = "n<3: no interval" if n < 3 else f"[{_loss(d.get('ci_low'))}, {_loss(d.get('ci_high'))}]"
        seeds = str(n) + (f" (+{len(d['seeds_incomplete'])} incomplete)" if d.get("seeds_incomplete") else "")
        rows.append([str(d.get("design")), cell, interval, seeds, _v(d.get("best_lr")), _loss(d.get("best_loss"))]
                    + [_loss(means.get(lr)) for lr in lrs])
    if rows:
        b.append(("table", ["design", "sensitivity (mean ± sd)", "95% t-interval", "seeds", f"best {axis}",
                            f"{which} loss at best"] + [f"{_v(lr)}" for lr in lrs],
                  rows, "lrrrrr" + "r" * len(lrs)))
        b.append(("p", f"The columns after 'best' are the mean capped {which} validation loss at each {axis} "
                       "over the seeds with a result there; a seed enters the sensitivity only with a result at "
                       "every value. The best value is the one with the lowest mean (ties to the smaller)."))
    return b
