"""Build a sweep's report from the results store: statistics per variant, collapse flags, published
numbers, missing runs, figures; then render it (render.py) into one folder.

    rows       a row is a variant (and grid point) at one scale; its seeds are its runs
    values     best (and final) val loss of each run that completed; diverged runs are counted,
               never averaged; failed / unfinished runs are listed as missing
    tests      each row against the baseline: paired t-test when both ran the same seeds (same init
               and data order), Welch otherwise; Holm's correction across the rows (stats.py)
"""

from __future__ import annotations

import json
import math
import platform
import time
from pathlib import Path

import numpy as np

from ..errors import ReslabError
from ..sweep.store import Store
from . import plots, stats

FIGURES = (("val_loss.png", "Validation loss", plots.plot_val_loss),
           ("train_loss_spikes.png", "Training loss and spike events", plots.plot_train_loss_spikes),
           ("layer0_grad.png", "Layer-0 gradient norm (diagnostics)", plots.plot_layer0_grad),
           ("hidden_growth.png", "Hidden-state growth per layer (diagnostics)", plots.plot_hidden_growth),
           ("prores_alpha.png", "ProRes alpha per layer", plots.plot_prores_alpha))
UNIGRAM_TOKENS = 10_000_000  # the unigram entropy is estimated on at most this many training tokens


def row_name(member: dict) -> str:
    grid = member["grid"] if isinstance(member["grid"], dict) else json.loads(member["grid"] or "{}")
    return "-".join([member["variant"]] + [f"{k.rsplit('.', 1)[-1]}={v:g}" if isinstance(v, float)
                                           else f"{k.rsplit('.', 1)[-1]}={v}" for k, v in grid.items()])


def _unigram_entropy(config: dict) -> tuple[float | None, dict]:
    """Unigram entropy (nats) of the training split of a run's data, and the data's meta."""
    from ..data import prepare_dataset
    from ..data.config import DataConfig
    from ..typed import from_dict

    try:
        data = prepare_dataset(from_dict(DataConfig, config["data"]), progress=False, log=lambda *_: None)
    except (ReslabError, OSError):
        return None, {}
    tokens = np.asarray(data.train[:UNIGRAM_TOKENS])
    return stats.unigram_entropy(np.bincount(tokens, minlength=data.vocab_size)), data.meta


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _choose_scale(record: dict, scale: str | None) -> str:
    scales = list(dict.fromkeys(r["scale"] for r in record["runs"]))
    if scale is None:
        if len(scales) > 1:
            raise ReslabError(f"--scale: this sweep ran at scales {', '.join(scales)}; choose one")
        return scales[0]
    if scale not in scales:
        raise ReslabError(f"--scale {scale}: this sweep has {', '.join(s or '(none)' for s in scales)}")
    return scale


def _index_rows(store: Store, spec_name: str) -> dict[tuple, dict]:
    """(variant, scale, grid json, seed) -> the index row of that run."""
    out = {}
    for r in store.runs(spec=spec_name):
        out[(r["variant"], r["scale"], r["grid"], r["seed"])] = r
    return out


def _table_row(name: str, runs: list[dict], planned: int, is_baseline: bool) -> dict:
    done = [r for r in runs if r["status"] == "completed" and _finite(r["best_val_loss"])]
    best = stats.summarize([r["best_val_loss"] for r in done])
    final = stats.summarize([r["final_val_loss"] for r in done if _finite(r["final_val_loss"])])
    extra = {}
    params = [r["params"] for r in runs if r.get("params")]
    if params:
        extra["params"] = params[0]
    rates = [r["tokens_per_s"] for r in done if r.get("tokens_per_s")]
    if rates:
        extra["tokens/s"] = float(np.median(rates))
    spikes = [r["spike_score_loss"] for r in done if _finite(r.get("spike_score_loss"))]
    if spikes:
        extra["spike score"] = float(np.mean(spikes))
    return {"variant": name, "n": best["n"], "n_planned": planned, "best": best, "final": final,
            "ppl": stats.perplexity(best["mean"]), "diff": None, "diff_pct": None, "test": None,
            "collapsed": 0, "diverged": sum(r["status"] == "diverged" for r in runs),
            "failed": sum(r["status"] == "failed" for r in runs), "is_baseline": is_baseline, "extra": extra}


def build_report(store: Store, spec_name: str, scale: str | None = None, out_dir: str | Path | None = None,
                 probe: bool = True) -> tuple[dict, Path]:
    """The report dict of one sweep at one scale, with its figures drawn into out_dir."""
    record = store.load_spec_record(spec_name)
    spec = record["spec"]
    scale = _choose_scale(record, scale)
    out = Path(out_dir) if out_dir else store.root / "reports" / (spec_name + (f"-{scale}" if scale else ""))
    out.mkdir(parents=True, exist_ok=True)
    index = _index_rows(store, spec_name)

    planned = [m for m in record["runs"] if m["scale"] == scale]
    by_row: dict[str, list[dict]] = {}
    row_key: dict[str, tuple[str, str]] = {}  # row name -> (variant, grid point as JSON)
    missing, run_list = [], []
    for m in planned:
        grid = json.dumps(m["grid"], sort_keys=True)
        row = index.get((m["variant"], m["scale"], grid, m["seed"]))
        name = row_name(m)
        by_row.setdefault(name, [])
        row_key[name] = (m["variant"], grid)
        status = row["status"] if row else "pending"
        if status not in ("completed", "diverged"):
            reason = status + (f": {row['error']}" if row and row.get("error") else "")
            missing.append({"variant": name, "seed": m["seed"], "scale": scale, "reason": reason})
        if row:
            by_row[name].append(dict(row, variant=name))

    baseline = spec.get("baseline")
    table = [_table_row(n, rs, sum(1 for m in planned if row_name(m) == n), row_key[n][0] == baseline)
             for n, rs in by_row.items()]
    _compare_to_baseline(table, by_row, row_key, baseline)

    # collapse: within a margin of the no-skip variant's mean, or of the unigram entropy
    opts = spec.get("report", {})
    entropy, data_meta = _unigram_entropy(json.loads(next(iter(index.values()))["config"])) if index else (None, {})
    no_skip = opts.get("no_skip")
    no_skip_mean = {row_key[t["variant"]][1]: t["best"]["mean"] for t in table
                    if row_key[t["variant"]][0] == no_skip}  # grid point -> the no-skip variant's mean there
    margin = opts.get("collapse_margin", 0.1)
    for t in table:
        variant, grid = row_key[t["variant"]]
        for r in by_row[t["variant"]]:
            ref = None if variant == no_skip else no_skip_mean.get(grid)
            r["collapsed"] = (r["status"] == "completed" and _finite(r["best_val_loss"])
                              and stats.is_collapsed(r["best_val_loss"], ref, entropy, margin))
            t["collapsed"] += r["collapsed"]
            run_list.append({k: r.get(k) for k in ("id", "variant", "seed", "status", "best_val_loss",
                                                  "final_val_loss", "collapsed", "error")})

    colors = plots.variant_colors(list(by_row))
    plot_runs = [dict(r, path=r["path"]) for rs in by_row.values() for r in rs]
    figures = []
    for file, title, draw in FIGURES:
        if draw(plot_runs, colors, out / file):
            figures.append({"title": title, "file": file})
        else:
            (out / file).unlink(missing_ok=True)  # a stale figure from an earlier report
    notes = list(opts.get("notes", []))
    if data_meta and not data_meta.get("comparable", True) and (opts.get("published") or
                                                                "fallback" in data_meta.get("source", "")):
        notes.insert(0, f"Data: {data_meta.get('source')}. These losses are not comparable with published "
                        "numbers measured on TinyShakespeare or another corpus.")
    if any(m["grid"] for m in planned):
        notes.append("Each row is compared with the baseline variant at the same grid point "
                     f"({', '.join(sorted({k for m in planned for k in m['grid']}))}).")
    notes.append("Means, intervals and tests use completed runs only; diverged runs are counted in the "
                 "'diverged' column and never averaged; failed or unfinished runs are listed as missing.")
    if probe and opts.get("probe"):
        figures += _probe_section(opts["probe"], out, notes)

    report = {
        "title": f"{spec_name}" + (f" ({scale} scale)" if scale else ""),
        "spec": {"name": spec_name, "description": spec.get("description", ""), "question": spec.get("question", ""),
                 "scale": scale, "baseline": baseline, "seeds": spec.get("seeds", [])},
        "generated": f"{time.strftime('%Y-%m-%d %H:%M')} on {platform.node() or 'this machine'} "
                     f"({platform.processor() or platform.machine()})",
        "collapse_rule": stats.collapse_rule_text(margin, entropy, no_skip),
        "unigram_entropy": entropy,
        "table": table,
        "published": [dict(p) for p in opts.get("published", [])],
        "runs": run_list, "missing": missing, "notes": notes, "figures": figures,
    }
    return report, out


def _compare_to_baseline(table: list[dict], by_row: dict, row_key: dict, baseline: str | None) -> None:
    """Each row against the baseline variant at the same grid point; Holm over all comparisons."""
    def values(name):
        return {r["seed"]: r["best_val_loss"] for r in by_row[name]
                if r["status"] == "completed" and _finite(r["best_val_loss"])}

    base_row = {grid: name for name, (variant, grid) in row_key.items() if variant == baseline}
    tests = {}
    for t in table:
        base_name = base_row.get(row_key[t["variant"]][1])
        if t["is_baseline"] or base_name is None:
            continue
        base, other = values(base_name), values(t["variant"])
        if base and other:
            result = stats.compare(base, other)
            t.update(diff=result["diff"], diff_pct=result["diff_pct"], test=result)
            tests[t["variant"]] = result["p"]
    for name, p in stats.holm(tests).items():
        row = next(t for t in table if t["variant"] == name)
        row["test"]["p_holm"] = p


def _probe_section(settings: dict, out: Path, notes: list[str]) -> list[dict]:
    """The init-time probe the spec asks for: its CSV, its plots vs layer and depth, its fitted slopes."""
    from ..probe.plots import plot_all
    from ..probe.run import format_table, run_probe, slopes_table

    probe_dir = out / "probe"
    rows = run_probe(settings["designs"], settings["depths"], seeds=settings.get("seeds", 3),
                     mode=settings.get("mode", "default"), width=settings.get("width", 64), out_dir=probe_dir)
    paths = plot_all(rows, probe_dir)
    notes.append("Init-time probe (no training), fitted log-log exponents:\n\n```\n"
                 + format_table(slopes_table(rows)) + "\n```")
    return [{"title": f"Probe: {p.stem.replace('_', ' ')}", "file": f"probe/{p.name}"} for p in paths]
