"""The two figures of a scale ladder's report section, written as PNG files (matplotlib, Agg).

Both read `section`, the JSON-able dict of report/ladder.py: "over" (what grows between rungs),
"rungs" ({name, params, tokens}, smallest first), "designs" (per design its per-rung points, the
power-law fit, the sampled curve and an optional extrapolation) and "effects" (per trend claim the
per-rung points of A minus B and fit_slope's dict). `colors` comes from plots.variant_colors and
is keyed by each entry's color_key, so a design has the same colour here as in every other figure.

In the conventions of plots.py: Figure objects that pyplot never sees, atomic writes, FIGSIZE and
DPI; each function writes one PNG and returns True, or returns False and writes nothing (nor
removes anything) when the section has no point to draw.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import scipy.stats
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter, NullLocator

from .plots import DPI, FIGSIZE, _color, _legend, _save

__all__ = ["effect_band", "format_params", "plot_ladder_effect", "plot_ladder_loss"]

LEVEL = 0.95
N_LABEL = "N = non-embedding parameters"
# Designs sharing a rung are drawn side by side, shifted by this fraction of a doubling each, so
# their error bars do not hide one another; the fitted curves stay at the true N.
DODGE_DOUBLINGS = 0.06


# ---- small pure helpers --------------------------------------------------------------------
def format_params(n: float) -> str:
    """A parameter count as a short tick label: 196608 -> 197k, 786432 -> 786k, 3145728 -> 3.1M."""
    for unit, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        # from 999.5 of a unit on, the rounded label is the next unit's 1 (1M, not 1e+03k)
        if n >= unit * 0.9995:
            v = n / unit
            # two significant figures below 10 (3.1M), three above (197k, 12.6M)
            return f"{v:.3g}{suffix}" if v >= 10 else f"{v:.2g}{suffix}"
    return f"{n:.3g}"


def effect_band(xs: Sequence[float], intercept: float, slope: float, residual_sd: float,
                grid: Sequence[float], level: float = LEVEL
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The confidence band of the mean effect a + b x of an ordinary least-squares line.

    xs: the x (log2 N) of every point the line was fitted to; grid: where to evaluate. With n
    points, x mean xbar, Sxx = sum (x - xbar)^2 and q = t_{(1+level)/2, n-2}:
        mid = a + b x,   half = q * s * sqrt(1/n + (x - xbar)^2 / Sxx)
    Returns (mid, mid - half, mid + half) at the grid. Raises ValueError for fewer than 3 points
    (df < 1) or when every point has the same x (Sxx = 0: no line).
    """
    x = np.asarray(xs, dtype=np.float64)
    g = np.asarray(grid, dtype=np.float64)
    n = len(x)
    if n < 3:
        raise ValueError(f"effect_band: a band needs at least 3 points (df = n - 2 >= 1), got {n}")
    x_mean = float(x.mean())
    sxx = float(np.sum((x - x_mean) ** 2))
    if sxx <= 0.0:
        raise ValueError(f"effect_band: every point is at x = {x_mean:g}, so there is no line")
    q = float(scipy.stats.t.ppf((1.0 + level) / 2.0, n - 2))
    mid = intercept + slope * g
    half = q * residual_sd * np.sqrt(1.0 / n + (g - x_mean) ** 2 / sxx)
    return mid, mid - half, mid + half


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _entries(section, key: str) -> list[Mapping]:
    """section[key] as a list of dicts; a section that is None or lacks the key has none."""
    if not isinstance(section, Mapping):
        return []
    items = section.get(key) or []
    if not isinstance(items, Sequence) or isinstance(items, str):
        raise ValueError(f"ladder section: {key!r} must be a list, got {type(items).__name__}")
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ValueError(f"ladder section: {key}[{i}] must be a dict, got {type(item).__name__}")
    return list(items)


def _points(entry: Mapping, where: str) -> list[dict]:
    """The entry's points that have a size and at least one finite value, as
    {"rung", "n", "values", "mean", "ci"} (ci: (low, high) or None), smallest N first."""
    raw = entry.get("points") or []
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise ValueError(f"ladder section: {where} 'points' must be a list")
    out = []
    for i, p in enumerate(raw):
        if not isinstance(p, Mapping) or not (_finite(p.get("params")) and p["params"] > 0):
            raise ValueError(f"ladder section: {where} points[{i}] needs 'params', a number > 0")
        raw_values = p.get("values") or []
        if not isinstance(raw_values, Sequence) or isinstance(raw_values, str):
            raise ValueError(f"ladder section: {where} points[{i}] 'values' must be a list")
        values = [float(v) for v in raw_values if _finite(v)]
        if _finite(p.get("mean")):
            mean = float(p["mean"])
        elif values:
            mean = float(np.mean(values))
        else:
            continue  # nothing measured at this rung
        lo, hi = p.get("ci_low"), p.get("ci_high")
        ci = (float(lo), float(hi)) if _finite(lo) and _finite(hi) else None
        out.append({"rung": p.get("rung"), "n": float(p["params"]), "values": values, "mean": mean,
                    "ci": ci})
    return sorted(out, key=lambda p: p["n"])


def _rung_names(section) -> dict[float, str]:
    rungs = (section.get("rungs") or []) if isinstance(section, Mapping) else []
    return {float(r["params"]): str(r.get("name", "")) for r in rungs
            if isinstance(r, Mapping) and _finite(r.get("params"))}


def _tick_label(n: float, names: dict[float, str]) -> str:
    name = names.get(n)
    return f"{format_params(n)}\n{name}" if name else format_params(n)


def _fixed_ticks(ax, positions: list[float], labels: list[str]) -> None:
    """x ticks only where there is a rung (or a prediction), labelled by its size and name; the log
    axis's minor ticks would otherwise print 2x10^5-style labels between them."""
    ax.set_xticks(positions, labels)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def _mean_bars(ax, xs, points: list[dict], color: str, **style) -> None:
    """Per-rung means; with a 95% interval as error bars where it exists (>= 3 seeds)."""
    ax.plot(xs, [p["mean"] for p in points], "o", color=color, ms=6, zorder=3, **style)
    for x, p in zip(xs, points):
        if p["ci"] is not None:
            lo, hi = p["ci"]
            ax.errorbar([x], [p["mean"]], yerr=[[p["mean"] - lo], [hi - p["mean"]]], fmt="none",
                        ecolor=color, elinewidth=1.4, capsize=3, zorder=3)


def _seed_dots(ax, xs, points: list[dict], color: str) -> None:
    sx = [x for x, p in zip(xs, points) for _ in p["values"]]
    sy = [v for p in points for v in p["values"]]
    # above the error bars, which would otherwise hide the seeds that sit on them
    ax.plot(sx, sy, ".", color=color, mec="white", mew=0.4, ms=6, alpha=0.8, zorder=4)


# ---- loss against N -------------------------------------------------------------------------
def _curve(design: Mapping, where: str) -> list[tuple[float, float]]:
    """The design's sampled fitted curve as (N, L) pairs with N > 0; [] without one."""
    out = []
    for i, pair in enumerate(design.get("curve") or []):
        if not (isinstance(pair, Sequence) and len(pair) == 2):
            raise ValueError(f"ladder section: {where} curve[{i}] must be a pair [N, L]")
        if _finite(pair[0]) and _finite(pair[1]) and pair[0] > 0:
            out.append((float(pair[0]), float(pair[1])))
    return out


def _fit_label(name: str, fit) -> str:
    if isinstance(fit, Mapping) and fit.get("fit") and _finite(fit.get("alpha")):
        se = fit.get("se_alpha")
        if not _finite(se):
            return f"{name}: α = {fit['alpha']:.2f}"
        # two decimals, more when the standard error would round to 0.00 (se to 2 figures)
        places = 2 if se >= 0.01 or se <= 0 else min(6, 1 - math.floor(math.log10(se)))
        return f"{name}: α = {fit['alpha']:.{places}f} ± {se:.{places}f}"
    return f"{name}: no fit"


def ladder_loss_figure(section, colors: dict[str, str]) -> Figure | None:
    """The figure of plot_ladder_loss (None without a point), unsaved, so it can be inspected."""
    designs = [(d, _points(d, f"designs[{i}] ({d.get('name')!r})"))
               for i, d in enumerate(_entries(section, "designs"))]
    designs = [(d, pts) for d, pts in designs if pts]
    if not designs:
        return None
    over = section.get("over") or "size"
    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_title(f"Best validation loss against size (over {over})\n"
                 "dots: seeds; marker and bars: mean, 95% interval; dashed: fitted L = E + A·N^-α",
                 fontsize=10)
    ax.set_xlabel(f"{N_LABEL} (log scale)")
    # Linear y: the fitted law has a floor E, so log y would not straighten it, and the designs'
    # differences are read in nats, which a linear axis keeps at one scale across the range.
    ax.set_ylabel("best val loss (nats/token)")
    ax.set_xscale("log")
    ax.grid(True, alpha=0.3)
    ticks: set[float] = set()
    any_extrap = False
    k_mid = (len(designs) - 1) / 2.0
    for k, (d, pts) in enumerate(designs):
        c = _color(colors, d.get("color_key") or d.get("name"))
        shift = 2.0 ** ((k - k_mid) * DODGE_DOUBLINGS)
        xs = [p["n"] * shift for p in pts]
        ticks.update(p["n"] for p in pts)
        _seed_dots(ax, xs, pts, c)
        _mean_bars(ax, xs, pts, c)
        # the measured line joins measured means only; a missing rung is skipped, never invented
        ax.plot(xs, [p["mean"] for p in pts], "-", color=c, lw=1.0, alpha=0.6, zorder=2)
        curve = _curve(d, f"designs[{k}] ({d.get('name')!r})")
        # the legend shows the fitted curve's dash only for a design that has one
        ax.plot([], [], "o--" if curve else "o-", color=c,
                label=_fit_label(d.get("name"), d.get("fit")))
        if curve:
            cx, cy = zip(*curve)
            ax.plot(cx, cy, "--", color=c, lw=1.3, zorder=1.5)
        ex = d.get("extrapolation")
        if (isinstance(ex, Mapping) and _finite(ex.get("n")) and ex["n"] > 0
                and _finite(ex.get("prediction"))):
            any_extrap = True
            n, y = float(ex["n"]), float(ex["prediction"])
            ticks.add(n)
            # hollow marker, dotted interval, not joined to the measured line: a prediction only
            ax.plot([n], [y], "D", mfc="white", mec=c, mew=1.6, ms=7, zorder=3)
            if _finite(ex.get("low")) and _finite(ex.get("high")):
                bars = ax.errorbar([n], [y], yerr=[[y - ex["low"]], [ex["high"] - y]], fmt="none",
                                   ecolor=c, elinewidth=1.2, capsize=4, zorder=3)
                bars[2][0].set_linestyle(":")
            ax.annotate(f"extrapolation: {ex.get('label') or format_params(n)}", (n, y),
                        xytext=(-8, 10), textcoords="offset points", ha="right", fontsize=7, color=c)
    if any_extrap:
        ax.plot([], [], "D", mfc="white", mec="0.3", mew=1.6, ms=7,
                label="extrapolation (prediction interval)")
    names = _rung_names(section)
    pos = sorted(ticks)
    _fixed_ticks(ax, pos, [_tick_label(n, names) for n in pos])
    _legend(ax, len(designs) + any_extrap)
    return fig


def plot_ladder_loss(section, colors: dict[str, str], path) -> bool:
    """Loss against N per design: seeds as dots, per-rung mean with its 95% interval, the fitted
    power law dashed (legend: alpha +- se, or "no fit"), and any extrapolation hollow, with its
    prediction interval dotted and labelled."""
    fig = ladder_loss_figure(section, colors)
    return False if fig is None else _save(fig, path)


# ---- effect against log2 N ------------------------------------------------------------------
def _slope_text(slope) -> str:
    if not isinstance(slope, Mapping) or not _finite(slope.get("slope")):
        return "no slope"
    text = f"slope {slope['slope']:+.3f} nats per doubling"
    if _finite(slope.get("ci_low")) and _finite(slope.get("ci_high")):
        level = slope.get("level") if _finite(slope.get("level")) else LEVEL
        text += f" ({level:.0%} CI {slope['ci_low']:+.3f} to {slope['ci_high']:+.3f})"
    else:
        text += " (no interval)"
    return text


def _effect_panel(ax, effect: Mapping, pts: list[dict], colors: dict[str, str], names) -> None:
    c = _color(colors, effect.get("color_key") or effect.get("a"))
    xs = [math.log2(p["n"]) for p in pts]
    ax.axhline(0.0, color="0.3", lw=1.0, zorder=1)
    _seed_dots(ax, xs, pts, c)
    _mean_bars(ax, xs, pts, c, label="mean (bars: 95% interval, ≥ 3 seeds)")
    slope = effect.get("slope")
    text = _slope_text(slope)
    if text != "no slope" and _finite(slope.get("intercept")):
        lo_x, hi_x = min(xs), max(xs)
        grid = np.linspace(lo_x, hi_x, 50)
        a, b = float(slope["intercept"]), float(slope["slope"])
        ax.plot(grid, a + b * grid, "-", color=c, lw=1.5, zorder=2, label="fitted line a + b·log2 N")
        seed_xs = [x for x, p in zip(xs, pts) for _ in p["values"]]
        if _finite(slope.get("n")) and slope["n"] != len(seed_xs):
            # the band's x mean and Sxx must be those of the points the line was fitted to
            raise ValueError(f"ladder section: effect {effect.get('id')!r} has {len(seed_xs)} seed "
                             f"points but its slope was fitted to {slope['n']}")
        if _finite(slope.get("se_slope")) and _finite(slope.get("residual_sd")) and len(seed_xs) >= 3:
            level = slope.get("level") if _finite(slope.get("level")) else LEVEL
            _, low, high = effect_band(seed_xs, a, b, float(slope["residual_sd"]), grid, level)
            ax.fill_between(grid, low, high, color=c, alpha=0.18, lw=0, zorder=1.5,
                            label=f"{level:.0%} band of the mean effect")
    label = effect.get("label") or "undetermined"
    ax.set_title(f"{effect.get('a')} − {effect.get('b')}: {label}\n{text}", fontsize=9)
    ax.set_ylabel(f"{effect.get('a')} − {effect.get('b')} (nats)", fontsize=8)
    ax.set_xlabel(f"{N_LABEL} (log2 scale: one step = one doubling)", fontsize=8)
    ax.grid(True, alpha=0.3)
    sizes = sorted({p["n"] for p in pts})
    _fixed_ticks(ax, [math.log2(n) for n in sizes], [_tick_label(n, names) for n in sizes])
    ax.tick_params(labelsize=7)
    ax.legend(loc="best", fontsize=7, framealpha=0.85)


def ladder_effect_figure(section, colors: dict[str, str]) -> Figure | None:
    """The figure of plot_ladder_effect (None without a point), unsaved."""
    effects = [(e, _points(e, f"effects[{i}] ({e.get('id')!r})"))
               for i, e in enumerate(_entries(section, "effects"))]
    effects = [(e, pts) for e, pts in effects if pts]
    if not effects:
        return None
    n = len(effects)
    ncols = min(n, 2)
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(FIGSIZE[0] * (1.0 if ncols == 1 else 1.6), max(FIGSIZE[1], 4.0 * nrows)),
                 dpi=DPI)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    fig.suptitle(f"Effect (A − B, per seed) against size, over {section.get('over') or 'size'}",
                 fontsize=11)
    names = _rung_names(section)
    for ax, (effect, pts) in zip(axes.flat, effects):
        _effect_panel(ax, effect, pts, colors, names)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def plot_ladder_effect(section, colors: dict[str, str], path) -> bool:
    """Per trend effect one panel: A - B against log2 N with a zero line, seeds as dots, per-rung
    mean with its 95% interval, the fitted line and, when the slope has a standard error, the 95%
    confidence band of the mean effect; the title gives the slope per doubling, its interval and
    the trend label."""
    fig = ladder_effect_figure(section, colors)
    return False if fig is None else _save(fig, path)
