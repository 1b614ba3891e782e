"""Figures of a sweep report, written as PNG files (matplotlib, Agg; no display needed).

Every function takes `runs`, a list of run records ({"id", "variant", "seed", "status", "path",
"collapsed"}; `path` is the run folder or None), and `colors` from variant_colors(), so a variant has
the same colour in every figure. Each writes one PNG atomically and returns True, or returns False
and writes nothing when none of the runs has the data the figure needs.

Figures are matplotlib.figure.Figure objects that pyplot never sees: no global figure list, so
nothing is left open after a save, and an interactive pyplot session elsewhere is not disturbed.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from ..fileio import JsonlLog, atomic_path

METRICS_FILE = "metrics.jsonl"
DIAGNOSTICS_FILE = "diagnostics.jsonl"
FIGSIZE = (7.0, 4.5)
DPI = 110
STEP_LABEL = "step (optimizer updates)"


# ---- colours -------------------------------------------------------------------------------------
# Twelve line colours in an order where each next one is far from all before it, so that a report's
# first few variants (most have 2 to 6) never get neighbouring hues: tab10's orange and red, given to
# attn-only and attn-only-nanogpt, read as one line where the curves overlap. Every pair of the twelve
# is at least 93 apart in RGB (0-255 per channel), any five at least 143. No grey: the reference
# levels are drawn in grey. Black stays: those lines are dashed and labelled.
DISTINCT = ("#1f77b4", "#ff7f0e", "#2ca02c", "#e7298a", "#000000", "#8c564b",
            "#66ccee", "#9467bd", "#bcbd22", "#d62728", "#f781bf", "#00008b")


def _palette() -> list[str]:
    """DISTINCT, then the tab10 / tab20 / tab20b / tab20c shades not in it (distinct up to 60)."""
    out: list[str] = list(DISTINCT)
    for name in ("tab10", "tab20", "tab20b", "tab20c"):
        for c in colormaps[name].colors:
            h = to_hex(c)
            if h not in out:
                out.append(h)
    return out[:60]


def variant_colors(variants: list[str]) -> dict[str, str]:
    """variant -> hex colour, assigned in the given order (duplicates ignored); cycles past 60."""
    pal = _palette()
    unique = list(dict.fromkeys(variants))
    return {v: pal[i % len(pal)] for i, v in enumerate(unique)}


# ---- reading -----------------------------------------------------------------------------------
def _rows(run: dict, name: str) -> list[dict]:
    path = run.get("path")
    if not path:
        return []
    return [r for r in JsonlLog(Path(path) / name).read() if isinstance(r, dict)]


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _series(rows: list[dict], key: str, positive: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of the rows with a finite `key` (> 0 if positive), sorted by step; a step
    logged twice keeps its last value."""
    by_step: dict[int, float] = {}
    for r in rows:
        v, s = r.get(key), r.get("step")
        if _finite(v) and _finite(s) and (v > 0 or not positive):
            by_step[int(s)] = float(v)
    steps = np.array(sorted(by_step), dtype=np.int64)
    return steps, np.array([by_step[s] for s in steps], dtype=np.float64)


def _grouped(runs: list[dict], colors: dict[str, str], series) -> dict[str, list[tuple[dict, tuple]]]:
    """variant (in colour order, then first appearance) -> [(run, series(run))] for runs with data."""
    order = list(colors) + [r.get("variant") for r in runs if r.get("variant") not in colors]
    out: dict[str, list] = {}
    for run in runs:
        s = series(run)
        if s is not None and len(s[0]):
            out.setdefault(run.get("variant"), []).append((run, s))
    return {v: out[v] for v in dict.fromkeys(order) if v in out}


def _common_mean(items: list[tuple[np.ndarray, np.ndarray]]):
    """(steps, mean, min, max, std) over the series at the steps all of them share."""
    common = items[0][0]
    for steps, _ in items[1:]:
        common = np.intersect1d(common, steps)
    if not len(common):
        return None
    stack = np.array([vals[np.searchsorted(steps, common)] for steps, vals in items])
    return common, stack.mean(0), stack.min(0), stack.max(0), stack.std(0)


def _kept(items: list[tuple[dict, tuple]]) -> list[tuple]:
    """The series that enter a variant's mean: those of runs that did not diverge (all of them if
    every run diverged), so one early divergence does not cut the mean curve short."""
    return [s for run, s in items if run.get("status") != "diverged"] or [s for _, s in items]


def _color(colors: dict[str, str], variant: str) -> str:
    return colors.get(variant) or variant_colors([variant])[variant]


# ---- figure plumbing -----------------------------------------------------------------------------
def _new(title: str, xlabel: str, ylabel: str, log_y: bool = False):
    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_title(title, fontsize=11)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if log_y:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3, which="both" if log_y else "major")
    return fig, ax


def _legend(ax, n_entries: int) -> None:
    """Inside at the best place when short; outside on the right when long (never over the data)."""
    if n_entries == 0:
        return
    if n_entries <= 5:
        ax.legend(loc="best", fontsize=8, framealpha=0.85)
    else:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0.0)


def _plain_log_ticks(ax) -> None:
    """Log-y tick labels as plain numbers (0.8, 2, 1e+03) instead of 8x10^-1; minor ticks are
    labelled only when the axis spans less than a decade (otherwise they would crowd)."""
    lo, hi = ax.get_ylim()
    fmt = FuncFormatter(lambda y, _: f"{y:g}")
    ax.yaxis.set_major_formatter(fmt)
    ax.yaxis.set_minor_formatter(fmt if lo > 0 and hi / lo < 10 else NullFormatter())


def _save(fig: Figure, path) -> bool:
    path = Path(path)
    for ax in fig.axes:
        if ax.get_yscale() == "log":
            _plain_log_ticks(ax)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, bbox_inches="tight")
    fig.clear()
    return True


def _seed_label(run: dict) -> str:
    return f"seed {run.get('seed')}"


# ---- spikes ------------------------------------------------------------------------------------
def spike_indices(values, window: int = 1000, threshold: float = 7.0) -> list[int]:
    """Indices (into `values`) of loss-spike events, by the rule of diagnostics.stats.spike_score:
    value > mean + threshold * std (ddof 1) of the up to `window` finite values before it, scored
    once at least 2 earlier finite values exist. Non-finite values are skipped (never spikes)."""
    idx = [i for i, v in enumerate(values) if v is not None and _finite(float(v))]
    xs = np.array([float(values[i]) for i in idx], dtype=np.float64)
    out = []
    for j in range(2, len(xs)):
        prev = xs[max(0, j - window):j]
        if xs[j] > prev.mean() + threshold * prev.std(ddof=1):
            out.append(idx[j])
    return out


# ---- the figures -------------------------------------------------------------------------------
REFERENCE_LINES = (("bigram", "#444444"), ("unigram", "#999999"))  # (level, line colour)


def val_loss_figure(runs: list[dict], colors: dict[str, str], title: str | None = None,
                    reference: dict | None = None) -> Figure | None:
    """The figure of plot_val_loss (None without data), unsaved, so its axes can be inspected."""
    groups = _grouped(runs, colors, lambda r: _series(_rows(r, METRICS_FILE), "val_loss"))
    if not groups:
        return None
    fig, ax = _new(title or "Validation loss (line: mean over seeds; band: min–max over seeds)",
                   STEP_LABEL, "val loss (nats/token)")
    any_div = False
    plotted: list[np.ndarray] = []
    for variant, items in groups.items():
        c = _color(colors, variant)
        for run, (steps, vals) in items:
            ax.plot(steps, vals, color=c, lw=0.8, alpha=0.35)
            plotted.append(vals)
            if run.get("status") == "diverged":
                ax.plot(steps[-1], vals[-1], "x", color=c, ms=9, mew=2)
                any_div = True
        ok = _kept(items)
        agg = _common_mean(ok)
        if agg is None:
            continue
        steps, mean, lo, hi, _ = agg
        ax.plot(steps, mean, color=c, lw=2.0, label=f"{variant} (mean of {len(ok)})")
        if len(ok) > 1:
            ax.fill_between(steps, lo, hi, color=c, alpha=0.15, lw=0)
    if any_div:
        ax.plot([], [], "x", color="0.3", ms=8, mew=2, label="diverged (last logged value)")
    levels = [(name, float(reference[name]), color) for name, color in REFERENCE_LINES
              if reference and _finite(reference.get(name))]
    for name, level, color in levels:
        ax.axhline(level, color=color, ls="--", lw=1.3, zorder=1.5,
                   label=f"{name} level {level:.3f} (count model)")
    if levels:
        # the y range spans the curves and both levels, so a curve that starts at 4.2 and ends
        # near 1.5 still shows the levels between, and a level beyond the curves is not cut off
        ys = np.concatenate(plotted + [np.array([lv for _, lv, _ in levels])])
        lo, hi = float(ys.min()), float(ys.max())
        pad = 0.04 * (hi - lo) if hi > lo else 0.05
        ax.set_ylim(lo - pad, hi + pad)
    _legend(ax, len(groups) + any_div + len(levels))
    return fig


def plot_val_loss(runs: list[dict], colors: dict[str, str], path, title: str | None = None,
                  reference: dict | None = None) -> bool:
    """Validation loss vs step: per variant the mean over its non-diverged seeds at the steps they
    all share (thick line) with a min-max band, every seed thin; a diverged run ends in an x. With
    `reference` (reslab.data.reference levels) the unigram and bigram levels are labelled dashed
    horizontal lines."""
    fig = val_loss_figure(runs, colors, title, reference)
    return False if fig is None else _save(fig, path)


def plot_train_loss_spikes(runs: list[dict], colors: dict[str, str], path, window: int = 1000,
                           threshold: float = 7.0) -> bool:
    """Training loss vs step, one thin line per run; spike events (spike_indices) marked."""
    groups = _grouped(runs, colors, lambda r: _series(_rows(r, METRICS_FILE), "train_loss"))
    if not groups:
        return False
    fig, ax = _new(f"Training loss per run; ▼ = spike (> mean + {threshold:g}·std of previous "
                   f"{window} steps)", STEP_LABEL, "train loss (nats/token)")
    n_spikes = 0
    for variant, items in groups.items():
        c = _color(colors, variant)
        for k, (run, (steps, vals)) in enumerate(items):
            ax.plot(steps, vals, color=c, lw=0.8, alpha=0.6, label=variant if k == 0 else None)
            idx = spike_indices(vals, window, threshold)
            if idx:
                ax.plot(steps[idx], vals[idx], "v", color=c, mec="black", mew=0.6, ms=7)
                n_spikes += len(idx)
    ax.plot([], [], "v", color="white", mec="black", mew=0.6, ms=7,
            label=f"spike events ({n_spikes})")
    _legend(ax, len(groups) + 1)
    return _save(fig, path)


def plot_layer0_grad(runs: list[dict], colors: dict[str, str], path) -> bool:
    """grad_norm.block0 (diagnostic batch) vs step: mean per variant over its non-diverged seeds,
    every seed thin; log y."""
    key = "grad_norm.block0"
    groups = _grouped(runs, colors, lambda r: _series(_rows(r, DIAGNOSTICS_FILE), key, positive=True))
    if not groups:
        return False
    fig, ax = _new("Gradient norm of block 0 (first block), diagnostic batch; line: mean over seeds",
                   STEP_LABEL, "‖grad‖₂ of block 0 (log scale)", log_y=True)
    for variant, items in groups.items():
        c = _color(colors, variant)
        for _, (steps, vals) in items:
            ax.plot(steps, vals, color=c, lw=0.8, alpha=0.35)
        agg = _common_mean(_kept(items))
        if agg is not None:
            ax.plot(agg[0], agg[1], color=c, lw=2.0, label=f"{variant} (mean of {len(_kept(items))})")
    _legend(ax, len(groups))
    return _save(fig, path)


def _growth(run: dict):
    """(positions, hidden_norm / hidden_norm.embed) from the run's last row with hidden norms:
    position 0 is the embedding output, position i + 1 the stream after block i."""
    rows = [r for r in _rows(run, DIAGNOSTICS_FILE) if _finite(r.get("hidden_norm.embed"))]
    if not rows or rows[-1]["hidden_norm.embed"] <= 0:
        return None
    last, vals = rows[-1], [1.0]
    while _finite(last.get(f"hidden_norm.block{len(vals) - 1}")):
        vals.append(last[f"hidden_norm.block{len(vals) - 1}"] / last["hidden_norm.embed"])
    return np.arange(len(vals)), np.array(vals)


def plot_hidden_growth(runs: list[dict], colors: dict[str, str], path) -> bool:
    """Hidden-state norm relative to the embedding vs depth, from each run's last diagnostics row;
    mean per variant over its non-diverged seeds (at the depths they all have), seeds thin; log y."""
    groups = _grouped(runs, colors, _growth)
    if not groups:
        return False
    fig, ax = _new("Hidden-state growth at the last measurement; line: mean over seeds",
                   "position in the stream (0 = embedding, i+1 = after block i)",
                   "hidden norm / embedding norm (log scale)", log_y=True)
    for variant, items in groups.items():
        c = _color(colors, variant)
        for _, (pos, vals) in items:
            ax.plot(pos, vals, color=c, lw=0.8, alpha=0.35)
        pos, mean = _common_mean(_kept(items))[:2]
        ax.plot(pos, mean, "o-", color=c, lw=2.0, ms=3, label=f"{variant} (mean of {len(_kept(items))})")
    ax.xaxis.get_major_locator().set_params(integer=True)
    _legend(ax, len(groups))
    return _save(fig, path)


def _alphas(run: dict):
    """(steps, alpha array of shape (steps, layers)) from the metrics rows carrying prores_alpha."""
    rows = [r for r in _rows(run, METRICS_FILE)
            if isinstance(r.get("prores_alpha"), list) and r["prores_alpha"] and _finite(r.get("step"))]
    if not rows:
        return None
    n = min(len(r["prores_alpha"]) for r in rows)
    a = np.array([[float(x) if _finite(x) else np.nan for x in r["prores_alpha"][:n]] for r in rows])
    return np.array([int(r["step"]) for r in rows]), a


def _shade(color: str, k: int, n: int) -> tuple:
    """Layer k of n: from a light tint (first layer) to the full colour (last layer)."""
    t = 0.7 * (1 - k / max(n - 1, 1))
    return tuple(x + (1 - x) * t for x in to_rgb(color))


def plot_prores_alpha(runs: list[dict], colors: dict[str, str], path) -> bool:
    """ProRes alpha per layer vs step, one seed (the lowest with data) per variant, one small panel
    per variant; layers as shades of the variant colour (light = first layer, dark = last)."""
    groups = _grouped(runs, colors, _alphas)
    if not groups:
        return False
    n = len(groups)
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(FIGSIZE[0], max(FIGSIZE[1], 2.6 * nrows)), dpi=DPI)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True)
    fig.suptitle("ProRes alpha per layer (light = first layer, dark = last)", fontsize=11)
    for ax, (variant, items) in zip(axes.flat, groups.items()):
        run, (steps, a) = min(items, key=lambda it: (it[0].get("seed") is None, it[0].get("seed") or 0))
        c = _color(colors, variant)
        for k in range(a.shape[1]):
            lab = f"block {k}" if k in (0, a.shape[1] - 1) else None
            ax.plot(steps, a[:, k], color=_shade(c, k, a.shape[1]), lw=1.3, label=lab)
        ax.set_title(f"{variant} ({_seed_label(run)})", fontsize=9)
        ax.set_xlabel(STEP_LABEL, fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right", fontsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel("alpha (branch weight, 0–1)")
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.tight_layout()
    return _save(fig, path)
