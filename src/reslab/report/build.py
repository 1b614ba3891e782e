"""Build a sweep's report from the results store: statistics per variant, collapse flags, published
numbers, missing runs, figures; then render it (render.py) into one folder.

    rows       a row is a variant (and grid point) at one scale; its seeds are its runs
    values     best (and final) val loss of each run that completed; diverged runs are counted,
               never averaged; failed / unfinished runs are listed as missing
    tests      each row against the baseline: paired t-test when both ran the same seeds (same init
               and data order), Welch otherwise; Holm's correction across the rows (stats.py)
    reference  the unigram and bigram levels of the runs' data (reslab.data.reference, cached in the
               prepared folder): report["reference"] is that dict (None when the data cannot be
               read, report["reference_error"] then says why); each row's "below_bigram" is the
               bigram level minus its mean best val loss (positive = learned beyond bigram counts),
               and a row (or run) at or above the bigram level is flagged
               "not_learned_beyond_bigram". The collapse rule uses the unigram level, also kept as
               report["unigram_entropy"] for older callers.
    smoke      a scale named "smoke" is reserved for pipeline tests and is never a result
               (is_result_scale): the title says "smoke: not a result", report["is_result"] is
               False, no row carries a test or p-value, and report["claims"] is [].

cells, what build_report hands to the claims (claims.evaluate_claims) and learning-rate
(tuning.lr_section) sections: a list with one entry per table row, in table order,
    {"variant": the spec's variant name, "grid": the row's grid point as a dict ({} without a grid,
     e.g. {"optim.lr": 0.001}), "row": the row's name as in the table,
     "runs": [{"seed": int, "status": str, "best_val_loss": float | None,
               "final_val_loss": float | None, "path": str (the run folder)}]}
where runs lists the row's runs that have a folder in the store (completed, diverged, failed or
unfinished; planned runs never started are only in report["missing"]); a loss that is missing or
not finite is None.
"""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import time
from pathlib import Path

import numpy as np

from ..errors import ReslabError
from ..spec.exclude import describe_exclude
from ..spec.more_seeds import describe
from ..spec.record import SpecRecord
from ..spec.rows import row_name
from ..spec.schema import NOT_A_RESULT, is_result_scale
from ..spec.tune import TuningChoice
from ..sweep.store import Store
from ..spec.ladder import rung_sizes, rungs_at
from . import claims, ladder, plots, stats, tuning
from .ladder_plots import plot_ladder_effect, plot_ladder_loss

FIGURES = (("val_loss.png", "Validation loss", plots.plot_val_loss),
           ("train_loss_spikes.png", "Training loss and spike events", plots.plot_train_loss_spikes),
           ("layer0_grad.png", "Layer-0 gradient norm (diagnostics)", plots.plot_layer0_grad),
           ("hidden_growth.png", "Hidden-state growth per layer (diagnostics)", plots.plot_hidden_growth),
           ("prores_alpha.png", "ProRes alpha per layer", plots.plot_prores_alpha))
def _reference(config: dict) -> tuple[dict | None, dict, str | None]:
    """(reference levels, data meta, None) of a run's data, or (None, meta or {}, why not)."""
    from ..data import prepare_dataset
    from ..data.config import DataConfig
    from ..data.reference import reference_levels
    from ..typed import from_dict

    try:
        data = prepare_dataset(from_dict(DataConfig, config["data"]), progress=False, log=lambda *_: None)
    except (ReslabError, OSError, KeyError, TypeError) as e:
        return None, {}, f"the runs' data could not be prepared ({_one_line(e)})"
    try:
        return reference_levels(data), data.meta, None
    except (ReslabError, OSError) as e:
        return None, data.meta, _one_line(e)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text or type(e).__name__


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _choose_scale(record: SpecRecord, scale: str | None) -> str:
    scales = list(dict.fromkeys(r.scale for r in record.runs))
    if scale is None:
        if len(scales) > 1:
            raise ReslabError(f"--scale: this sweep ran at scales {', '.join(scales)}; choose one")
        return scales[0]
    if scale not in scales:
        raise ReslabError(f"--scale {scale}: this sweep has {', '.join(s or '(none)' for s in scales)}")
    return scale


def _index_rows(store: Store, spec_name: str) -> dict[tuple, dict]:
    """(run id, variant, scale, grid json, seed) -> the index row of that membership.

    The identity is part of the key because a sweep planned again in the same store (its spec
    edited, a row re-tuned to another value, a default that enters run identities changed) keeps
    its earlier runs as members under the same variant, grid point and seed: the report reads the
    runs its record plans now, never a superseded run in their place."""
    out = {}
    for r in store.runs(spec=spec_name):
        out[(r["id"], r["variant"], r["scale"], r["grid"], r["seed"])] = r
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
            "failed": sum(r["status"] == "failed" for r in runs), "is_baseline": is_baseline,
            "below_bigram": None, "not_learned_beyond_bigram": False, "extra": extra}


def build_report(store: Store, spec_name: str, scale: str | None = None, out_dir: str | Path | None = None,
                 probe: bool = True) -> tuple[dict, Path]:
    """The report dict of one sweep at one scale, with its figures drawn into out_dir."""
    record = store.spec_record(spec_name)
    spec = record.spec
    scale = _choose_scale(record, scale)
    is_result = is_result_scale(scale)
    out = Path(out_dir) if out_dir else store.root / "reports" / (spec_name + (f"-{scale}" if scale else ""))
    out.mkdir(parents=True, exist_ok=True)
    index = _index_rows(store, spec_name)

    planned = record.runs_at(scale)
    by_row: dict[str, list[dict]] = {}
    row_key: dict[str, tuple[str, str]] = {}  # row name -> (variant, grid point as JSON)
    missing, run_list = [], []
    for m in planned:
        grid = json.dumps(m.grid, sort_keys=True)
        row = index.get((m.id, m.variant, m.scale, grid, m.seed))
        name = row_name(m.variant, m.grid)
        by_row.setdefault(name, [])
        row_key[name] = (m.variant, grid)
        status = row["status"] if row else "pending"
        if status not in ("completed", "diverged"):
            reason = status + (f": {row['error']}" if row and row.get("error") else "")
            missing.append({"variant": name, "seed": m.seed, "scale": scale, "reason": reason})
        if row:
            by_row[name].append(dict(row, variant=name))

    baseline = spec.baseline
    table = [_table_row(n, rs, sum(1 for m in planned if row_name(m.variant, m.grid) == n), row_key[n][0] == baseline)
             for n, rs in by_row.items()]
    _compare_to_baseline(table, by_row, row_key, baseline, tests=is_result)
    _add_tuned_values(table, row_key, record.tuned_at(scale))

    opts = spec.report
    reference, data_meta, reference_error, data_of = _reference_for(by_row)
    _bigram_flags(table, by_row, reference, data_of)

    # collapse: within a margin of the no-skip variant's mean, or of the unigram level
    unigram = reference["unigram"] if reference else None
    no_skip = opts.no_skip
    no_skip_mean = {row_key[t["variant"]][1]: t["best"]["mean"] for t in table
                    if row_key[t["variant"]][0] == no_skip}  # grid point -> the no-skip variant's mean there
    margin = opts.collapse_margin
    for t in table:
        variant, grid = row_key[t["variant"]]
        for r in by_row[t["variant"]]:
            ref = None if variant == no_skip else no_skip_mean.get(grid)
            r["collapsed"] = (r["status"] == "completed" and _finite(r["best_val_loss"])
                              and stats.is_collapsed(r["best_val_loss"], ref, unigram, margin))
            t["collapsed"] += r["collapsed"]
            r["not_learned_beyond_bigram"] = bool(r.get("not_learned_beyond_bigram"))  # False: no levels
            run_list.append({k: r.get(k) for k in ("id", "variant", "seed", "status", "best_val_loss",
                                                  "final_val_loss", "collapsed", "not_learned_beyond_bigram",
                                                  "error")})

    cells = [{"variant": row_key[name][0], "grid": json.loads(row_key[name][1]), "row": name,
              "runs": [{"seed": r["seed"], "status": r["status"],
                        "best_val_loss": r["best_val_loss"] if _finite(r.get("best_val_loss")) else None,
                        "final_val_loss": r["final_val_loss"] if _finite(r.get("final_val_loss")) else None,
                        "path": r["path"]} for r in rs]}
             for name, rs in by_row.items()]

    colors = plots.variant_colors(list(by_row))
    plot_runs = [dict(r, path=r["path"]) for rs in by_row.values() for r in rs]
    figures = []
    for file, title, draw in FIGURES:
        extra = {"reference": reference} if draw is plots.plot_val_loss else {}
        if draw(plot_runs, colors, out / file, **extra):
            figures.append({"title": title, "file": file})
        else:
            (out / file).unlink(missing_ok=True)  # a stale figure from an earlier report
    notes = list(opts.notes)
    if data_meta and not data_meta.get("comparable", True) and (opts.published or
                                                                "fallback" in data_meta.get("source", "")):
        notes.insert(0, f"Data: {data_meta.get('source')}. These losses are not comparable with published "
                        "numbers measured on TinyShakespeare or another corpus.")
    if any(m.grid for m in planned):
        notes.append("Each row is compared with the baseline variant at the same grid point "
                     f"({', '.join(sorted({k for m in planned for k in m.grid}))}).")
    notes.append("Means, intervals and tests use completed runs only; diverged runs are counted in the "
                 "'diverged' column and never averaged; failed or unfinished runs are listed as missing.")
    if probe and opts.probe:
        figures += _probe_section(opts.probe, out, notes)

    lr = tuning.lr_section(spec, record.tuned_at(scale), store, spec_name, scale, cells, out)
    if lr:
        figures += list(lr.get("figures") or [])
    unheld = tuning.check_held((lr or {}).get("tuning"), cells, reference["bigram"] if reference else None)
    rungs = {"sizes": rung_sizes(spec, scale), "exponent": spec.ladder.exponent} if rungs_at(spec, scale) else None
    shallow = {t["variant"]: stats.short_of_regime(t["variant"], t["below_bigram"]) for t in table
               if t.get("below_bigram") is not None and t["below_bigram"] < stats.BELOW_BIGRAM}
    verdicts = claims.evaluate_claims(spec.claims, cells, reference, scale, unheld, rungs,
                                      shallow) if is_result else []
    ladder_part = ladder.ladder_section(spec, scale, cells, verdicts)
    if ladder_part:
        figures += _ladder_figures(ladder_part, plots.variant_colors(list(spec.variants)), out)
    title = f"{spec_name}" + (f" ({scale} scale)" if scale else "")
    report = {
        "title": title if is_result else f"{title} — {NOT_A_RESULT}",
        "is_result": is_result,
        "spec": {"name": spec_name, "description": spec.description, "question": spec.question,
                 "scale": scale, "baseline": baseline, "seeds": list(spec.seeds),
                 "more_seeds": describe(spec.more_seeds, scale),
                 "exclude": describe_exclude(spec.exclude, scale)},
        "generated": f"{time.strftime('%Y-%m-%d %H:%M')} on {platform.node() or 'this machine'} "
                     f"({platform.processor() or platform.machine()})",
        # the no-skip variant is named only where it ran at this scale (a scale may leave it out)
        "collapse_rule": stats.collapse_rule_text(margin, unigram, no_skip if no_skip_mean else None),
        "reference": reference,
        "reference_error": reference_error,
        "unigram_entropy": unigram,  # the unigram level, under the name older callers read
        "table": table,
        "lr": lr,
        "claims": verdicts,
        "ladder": ladder_part,
        "published": [dataclasses.asdict(p) for p in opts.published],
        "runs": run_list, "missing": missing, "notes": notes, "figures": figures,
    }
    return report, out


def _ladder_figures(section: dict, colors: dict, out: Path) -> list[dict]:
    """The ladder's two figures (loss against N, each trend's effect against N), drawn into out;
    colours by design (variant), as the ladder's rows span every rung."""
    made = []
    for file, title, draw in ((ladder.LOSS_FIGURE, "Scale ladder: loss against non-embedding parameters",
                               plot_ladder_loss),
                              (ladder.EFFECT_FIGURE, "Scale ladder: each trend's effect against parameters",
                               plot_ladder_effect)):
        if draw(section, colors, out / file):
            made.append({"title": title, "file": file})
        else:
            (out / file).unlink(missing_ok=True)  # a stale figure from an earlier report
    section["figures"] = [m["file"] for m in made]
    return made


def _reference_for(by_row: dict[str, list[dict]]) -> tuple[dict | None, dict, str | None, dict]:
    """(levels, data meta, why there are none, row -> whether its runs train on the levels' data).
    The levels are those of the first run's data; a row whose runs use other data gets none."""
    configs = {name: [json.loads(r["config"]) for r in rs if r.get("config")] for name, rs in by_row.items()}
    first = next((c for cs in configs.values() for c in cs), None)
    if first is None:
        return None, {}, "no run of this scale has been recorded yet", {}
    reference, meta, error = _reference(first)

    def same_data(c: dict) -> bool:  # where the tokens are cached does not change them
        strip = lambda d: {k: v for k, v in (d or {}).items() if k != "cache_dir"}  # noqa: E731
        return strip(c.get("data")) == strip(first.get("data"))

    data_of = {name: bool(cs) and all(same_data(c) for c in cs) for name, cs in configs.items()}
    if reference and not all(data_of.values()):
        reference = dict(reference, note="the rows use different data; these levels are those of "
                                         + ", ".join(n for n, ok in data_of.items() if ok)
                                         + " and the other rows get no below-bigram value")
    return reference, meta, error, data_of


def _bigram_flags(table: list[dict], by_row: dict, reference: dict | None, data_of: dict) -> None:
    """Each row's distance below the bigram level, and the rows and runs not below it."""
    if not reference:
        return
    bigram = reference["bigram"]
    for t in table:
        if not data_of.get(t["variant"]):
            continue
        mean = t["best"]["mean"]
        if _finite(mean):
            t["below_bigram"] = bigram - mean
            t["not_learned_beyond_bigram"] = mean >= bigram
        for r in by_row[t["variant"]]:
            r["not_learned_beyond_bigram"] = (r["status"] == "completed" and _finite(r["best_val_loss"])
                                              and r["best_val_loss"] >= bigram)


def _add_tuned_values(table: list[dict], row_key: dict, tuned: list[TuningChoice]) -> None:
    """Each row's own value of the tuned axis ([tune]) as a column, so the comparison says at which
    learning rate each design ran."""
    for choice in tuned:
        if choice.value is None:
            continue
        key = (choice.variant, json.dumps(choice.grid, sort_keys=True))
        for t in table:
            if row_key[t["variant"]] == key:
                t["extra"][f"{choice.axis.rsplit('.', 1)[-1]} (tuned)"] = choice.value
                t["tuned_edge"] = choice.edge  # an end of the values the row tried (tune.extend may add some)


def _compare_to_baseline(table: list[dict], by_row: dict, row_key: dict, baseline: str | None,
                         tests: bool = True) -> None:
    """Each row against the baseline variant at the same grid point; Holm over all comparisons.
    With tests=False (a scale that is no result) only the differences are kept: no test, no p."""
    def values(name):
        return {r["seed"]: r["best_val_loss"] for r in by_row[name]
                if r["status"] == "completed" and _finite(r["best_val_loss"])}

    base_row = {grid: name for name, (variant, grid) in row_key.items() if variant == baseline}
    pvalues = {}
    for t in table:
        base_name = base_row.get(row_key[t["variant"]][1])
        if t["is_baseline"] or base_name is None:
            continue
        base, other = values(base_name), values(t["variant"])
        if base and other:
            result = stats.compare(base, other)
            t.update(diff=result["diff"], diff_pct=result["diff_pct"], test=result if tests else None)
            pvalues[t["variant"]] = result["p"]
    if not tests:
        return
    for name, p in stats.holm(pvalues).items():
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
