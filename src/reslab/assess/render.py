"""A design card as blocks (report/render.py's block kinds), then as card.md, card.html and card.json.

The order is the reports' (answer first): the headline with the verdict counts and one line per
verdict beside the main figure, then the sections 1-8 of the card, then where its numbers come from.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..fileio import write_json, write_text
from ..report import page
from ..report.render import _jsonable

DASH = "—"


def _f(x, fmt="{:.4f}") -> str:
    return DASH if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x) else fmt.format(x)


def _mean_std(r: dict) -> str:
    if r.get("mean") is None:
        return DASH
    return _f(r["mean"]) + (f" ± {_f(r['std'])}" if r.get("std") is not None else "")


def _headline_blocks(card: dict) -> list[tuple]:
    """Verdict counts, then one line per verdict (its word in bold), beside the main figure."""
    h = card["headline"]
    counts = None if not card["is_result"] else " · ".join(f"{n} {word}" for word, n in h["counts"].items())
    lines = [(ln["verdict"], ln["text"]) for ln in h["lines"]]
    figure = card["figures"][0] if card.get("figures") else None
    return [("lead", lines, counts or "smoke: not a result", (figure["title"], figure["file"]) if figure else None)]


def _design_blocks(card: dict) -> list[tuple]:
    d = card["design"]
    b = [("h2", "1. The design"),
         ("p", f"{d['label']}: {d['formula']}"),
         ("p", f"Reference: {d['reference']}." + (f" Registered by the plugin {d['plugin']} "
                                                   f"{d.get('plugin_version') or ''}".rstrip() + "." if d.get("plugin") else ""))]
    if d.get("overrides"):
        b.append(("p", f"Settings of its runs beyond the regime's: {d['overrides']}"))
    b.append(("p", f"Parameters at 4 layers: {d.get('params') or DASH:,} against {d['baseline']}'s "
                   f"{d.get('params_baseline') or DASH:,} (ratio {_f(d.get('params_ratio'), '{:.3f}')}). "
                   f"Stream: {d['stream']}; capabilities: {', '.join(d['capabilities']) or 'none'}."
              if isinstance(d.get("params"), int) else "Parameters: not measured."))
    return b


SETTINGS = {"xiong": "Xiong et al.'s setting (Xavier init, ReLU MLP, W_Q = W_K = 0)",
            "default": "as the card trains each design (its own init and MLP)"}


def _signal_blocks(card: dict) -> list[tuple]:
    s = card["signal"]
    b = [("h2", "2. Signal propagation at initialisation"),
         ("p", f"One forward and backward pass of a random batch through each freshly built design; exponents "
               f"of log-log least-squares fits over depth or layer, each point the mean over seeds. The law: {s['law']}.")]
    for mode, m in s["modes"].items():
        if m.get("designs"):
            rows = [[d, _f(v["last_w2_grad~depth"], "{:+.3f}"), _f(v["grad_norm~layer"], "{:+.3f}"),
                     _f(v["act_norm~layer"], "{:+.3f}"), v["reading"]] for d, v in m["designs"].items()]
            b += [("p", f"{SETTINGS.get(mode, mode)}, depths {', '.join(map(str, m['depths']))}, "
                        f"{m['seeds']} seed(s):"),
                  ("table", ["design", "last-layer W2 gradient ~ depth", f"block gradient ~ layer (L = {m['deepest']})",
                             f"stream RMS ~ layer (L = {m['deepest']})", "reading"], rows, "lrrrl")]
        own = (s.get("own_init") or {}) if mode == "xiong" else {}
        for d in (d for d in own if d in (m.get("designs") or {})):
            b.append(("p", f"{d} keeps its own init ({own[d]}) in this setting: the init is part of the design, "
                           f"so Xavier stands in for the generic GPT-2 init only."))
        for d, why in (m.get("skipped") or {}).items():
            b.append(("p", f"{d} was not probed in {SETTINGS.get(mode, mode)}: {why}"))
    b += [("img", f["title"], f["file"]) for f in s.get("figures") or []][:2]
    return b


def _lr_blocks(card: dict) -> list[tuple]:
    lr = card["lr"]
    if not lr["rows"]:
        return [("h2", "3. Loss against learning rate"), ("p", "No tuning at this scale: every row ran at the "
                                                               "regime's one learning rate.")]
    values = lr["values"]
    curves = [{float(k): m for k, m in r["curve"].items()} for r in lr["rows"]]  # JSON keys are text
    no_loss = [{float(k): why for k, why in (r.get("no_loss") or {}).items()} for r in lr["rows"]]
    rows = [[r["name"]] + [no.get(float(v)) or _f(c.get(float(v))) for v in values] + [_f(r.get("chosen"), "{:g}")]
            for r, c, no in zip(lr["rows"], curves, no_loss)]
    retuned = lr.get("retuned") or {}
    b = [("h2", "3. Loss against learning rate"),
         ("p", "Best validation loss of each row's tuning run at each learning rate (tuning seed 9001, or the "
               "mean over a row's own tuning seeds where it has several; each row then trains its comparison "
               "seeds at the rate with the lowest loss; a rate the row did not try is —, one whose run diverged "
               "says so)."),
         ("table", ["row"] + [f"{v:g}" for v in values] + ["chosen"], rows, "l" + "r" * (len(values) + 1))]
    if retuned.get("rows"):
        b.append(("p", "Tuned again: a row whose tuned rate did not hold on its comparison seeds (most of them did "
                       "not learn beyond the bigram level there) tunes once more on several seeds, so that a rate "
                       "at which it trains on some seeds only loses to one at which it trains on all; its table "
                       "row above is the mean over them. "
                 + "; ".join(f"{why} (tuned again on seeds {', '.join(map(str, retuned['seeds'].get(name, [])))})"
                             for name, why in retuned["rows"].items()) + "."))
    if lr["sensitivity"]:
        b.append(("p", "Learning-rate sensitivity (Wortsman et al. 2023: mean over rates of min(loss, cap) minus "
                       f"the best, cap = the unigram level {_f(lr.get('cap'))}), mean over each design's rows: "
                 + "; ".join(f"{d} {_f(v['mean'], '{:.3f}')}" for d, v in lr["sensitivity"].items()) + "."))
    return b


def _comparison_blocks(card: dict) -> list[tuple]:
    rows = []
    for c in card["comparison"]:
        mine, base = c["design_row"], c["baseline_row"]
        interval = (f"[{_f(c['ci_low'], '{:+.4f}')}, {_f(c['ci_high'], '{:+.4f}')}]"
                    if c.get("ci_low") is not None else DASH)
        rows.append([f"{c['baseline']}", str(c["depth"]), _mean_std(mine), _f(mine.get("lr"), "{:g}"),
                     _mean_std(base), _f(base.get("lr"), "{:g}"), _f(c.get("estimate"), "{:+.4f}"), interval,
                     _f(c.get("p_holm"), "{:.3g}"), c["verdict"]])
    return [("h2", "4. The comparison"),
            ("p", f"Each design at its own tuned learning rate, {len(card['seeds'])} seeds ({', '.join(map(str, card['seeds']))}), "
                  f"100 warmup updates. Verdicts: better / worse when the test of design − baseline < 0 "
                  f"decides (Holm p < 0.05 over the card), else equivalent when the two one-sided tests put the "
                  f"difference within ±0.02 nats; no verdict where a row ends less than 0.3 nats below the "
                  f"bigram level ({_f(card['reference'].get('bigram'))})."),
            ("table", ["baseline", "layers", f"{card['label']} best val loss", "lr", "baseline best val loss", "lr",
                       "Δ", "95% CI", "Holm p", "verdict"], rows, "lrrrrrrrrl")]


def _depth_blocks(card: dict) -> list[tuple]:
    d = card["depth"]
    cols = [f"{depth}-{w}" for depth in ("L4", "L16") for w in ("w100", "none")]
    heads = ["4 layers, warmup", "4 layers, none", "16 layers, warmup", "16 layers, none"]
    rows = [[v] + [_mean_std(r[c]) + (f" @ {_f(r[c].get('lr'), '{:g}')}" if r[c].get("lr") else "") for c in cols]
            for v, r in d["rows"].items()]
    return [("h2", "5. Depth and warmup"),
            ("p", f"{card['label']}: {d['depth']}; {d['warmup']}."),
            ("table", ["design"] + heads, rows, "lrrrr")]


def speed_ratio(row: dict) -> str:
    """The round-by-round speed ratio's median with its 95% interval; a card written before rounds
    were paired has only the ratio of the overall medians."""
    if not row.get("tokens_per_s_by_round"):
        return _f((row.get("ratios") or {}).get("tokens_per_s"), "{:.3f}")
    mid = _f((row.get("ratios") or {}).get("tokens_per_s_same_round"), "{:.3f}")
    interval = row.get("tokens_per_s_interval")
    return f"{mid} [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else mid


def _cost_blocks(card: dict) -> list[tuple]:
    b = [("h2", "6. Cost")]
    for depth, c in (card.get("cost") or {}).items():
        if not c or not c.get("rows"):
            continue
        rows = []
        for label, r in c["rows"].items():
            ratio = r.get("ratios") or {}
            rows.append([label, f"{r.get('params'):,}" if isinstance(r.get("params"), int) else DASH,
                         _f(ratio.get("params"), "{:.3f}"),
                         _f((r.get("saved_bytes") or 0) / 2 ** 20, "{:.2f}"), _f(ratio.get("saved_bytes"), "{:.3f}"),
                         _f(r.get("tokens_per_s"), "{:,.0f}"), speed_ratio(r)])
        b += [("p", f"{depth[1:]} layers, batch {c.get('batch_size')} × {c.get('block_size')} tokens, "
                    f"{c.get('threads')} thread(s), {c.get('device', 'cpu')}; ratios to {c['baseline']} from the same run."),
              ("table", ["design", "params", "× params", "saved MiB", "× memory", "tokens/s", "× tokens/s"], rows,
               "lrrrrrr")]
    if len(b) > 1:
        method = next((c.get("method") for c in card["cost"].values() if c and c.get("method")), None)
        if method:
            b.append(("p", method))
    else:
        b.append(("p", "Not measured."))
    return b


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _stability_blocks(card: dict) -> list[tuple]:
    st = card["stability"]
    rows = []
    for design, d in st["designs"].items():
        # float(lr): a card read back from card.json has its rates as text keys
        by = "; ".join(f"{float(lr):g}: {_count(c['runs'], 'run')}" + (f", {c['diverged']} diverged" if c["diverged"] else "")
                       + (f", {c['plateau']} plateau" if c["plateau"] else "")
                       + (f", {_count(c['spikes'], 'spike')}" if c["spikes"] else "")
                       for lr, c in d["by_lr"].items())
        rows.append([design, str(d["runs"]), str(d["diverged"]), str(d["plateau"]), str(d["spikes"]),
                     ", ".join(f"{float(x):g}" for x in d["stable_lrs"]) or DASH, by])
    return [("h2", "7. Stability"),
            ("p", f"Every run the card trained (tuning and comparison), by learning rate; {st['rule']}."),
            ("table", ["design", "runs", "diverged", "plateau", "spikes", "rates that always trained", "by rate"],
             rows, "lrrrrll")]


def _ladder_blocks(card: dict) -> list[tuple]:
    lad = card.get("ladder")
    b = [("h2", "8. Scale ladder")]
    if not lad:
        return b + [("p", "Not climbed: run the card with --ladder to add the width ladder (hyper-connections-ladder's "
                          "regime: 4 layers, widths 64 / 128 / 256, each rung at its own tuned rate).")]
    b += [("ul", lad["trends"] or ["no trend claim could be evaluated"])]
    b += [("img", f["title"], f["file"]) for f in lad.get("figures") or []]
    return b


def card_blocks(card: dict) -> list[tuple]:
    b: list[tuple] = [("h1", card["title"])]
    if not card["is_result"]:
        b.append(("p", "smoke: not a result. The smoke scale checks that every section of the card is produced; "
                       "its numbers are no evidence for or against the design and it states no verdicts."))
    b += _headline_blocks(card)
    b += (_design_blocks(card) + _signal_blocks(card) + _lr_blocks(card) + _comparison_blocks(card)
          + _depth_blocks(card) + _cost_blocks(card) + _stability_blocks(card) + _ladder_blocks(card))
    b.append(("h2", "Where the numbers come from"))
    b.append(("ul", [f"sweep {s['name']}: full report in {s['report']}" + (f" ({s['missing']} runs missing)"
                                                                           if s["missing"] else "")
                     for s in card["sweeps"]]))
    if card.get("wall_s") is not None:
        runs = card["runs"]
        ended = runs["completed"] + runs["diverged"] + runs["failed"]
        found = runs.get("found")  # cards written before 2026-12-05 did not count them
        b.append(("p", f"The call that wrote this card took {card['wall_s'] / 60:.1f} min: "
                       + (f"{ended} runs ended, {found} of them already in the store before it."
                          if found is not None else f"{ended} runs ended, trained by it or found in the store.")))
    if (card.get("stability") or {}).get("arithmetic"):  # cards written before 2026-12-07 (night) lack it
        b.append(("p", arithmetic_text(card["stability"]["arithmetic"])))
    b += [("img", f["title"], f["file"]) for f in card.get("figures") or []][1:]
    return b


def arithmetic_text(entries: list[dict]) -> str:
    """The card's runs by how they computed; a run repeats its numbers bit for bit only under the same."""
    parts = []
    for e in entries:
        if not {k for k in e if k != "runs"}:
            parts.append(f"{_count(e['runs'], 'run')} with no record of it (trained before reslab kept one)")
            continue
        where = f"GPU {e['gpu']}" if e.get("gpu") else f"CPU kernels {e.get('cpu_capability')}"
        parts.append(f"{_count(e['runs'], 'run')} on torch {e.get('torch')}, {where}, "
                     f"{_count(e.get('threads') or 0, 'thread')}" + (", subnormals flushed" if e.get("flush_denormal") else ""))
    return ("Arithmetic of the runs: " + "; ".join(parts) + ". A run retrained under the same arithmetic "
            "repeats its numbers bit for bit; under another (CPU kernels, torch version, threads) it may not.")


def write_card(card: dict, folder: Path) -> dict[str, Path]:
    folder = Path(folder)
    blocks = card_blocks(card)
    md, html = page.page_markdown(blocks), page.page_html(card["title"], blocks, folder)
    page.require_valid_html(html)
    paths = {"md": folder / "card.md", "html": folder / "card.html", "json": folder / "card.json"}
    write_text(paths["md"], md)
    write_text(paths["html"], html)
    write_json(paths["json"], _jsonable(card))
    return paths


def summary_lines(card: dict, folder: Path) -> list[str]:
    """The card's headline on the terminal: its verdicts, then where the whole card is."""
    out = [card["title"]]
    for ln in card["headline"]["lines"]:
        out.append(f"  {ln['verdict']}: {ln['text']}")
    d = card["design"]
    if d.get("params_ratio") is not None:
        out.append(f"  parameters {d['params_ratio']:.3f}x {d['baseline']}'s")
    out.append(f"card: {Path(folder) / 'card.html'} (and card.md, card.json)")
    return out
