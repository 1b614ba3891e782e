"""PNG plots of probe rows: a metric against depth (log-log, fitted exponent in the legend) and a
metric against the layer index at one depth. Colours are fixed per design across every plot."""

from __future__ import annotations

from pathlib import Path

# Figures are matplotlib.figure.Figure objects that pyplot never sees: no backend is chosen or
# switched (a notebook keeps its own), and no global figure list holds them.
from matplotlib import colormaps
from matplotlib.figure import Figure

from ..fileio import atomic_path
from .run import fit_slope, layer_means, model_means

_PALETTE = colormaps["tab10"].colors
LABELS = {
    "last_w2_grad_norm": "||dL/dW2|| of the last layer",
    "grad_norm": "per-layer gradient norm",
    "grad_var": "per-layer gradient variance",
    "act_grad_norm": "||dL/dx_l||",
    "act_norm": "activation RMS of x_l",
    "adj_change": "||N(x_l) - N(x_{l-1})||",
    "cos_sim": "mean token cosine similarity",
}


def _colours(designs) -> dict[str, tuple]:
    # Order of first appearance decides the colour, so one run's plots all agree.
    return {d: _PALETTE[i % len(_PALETTE)] for i, d in enumerate(designs)}


def _save(fig, path: Path) -> Path:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    return path


def _designs(rows):
    return list(dict.fromkeys(r["design"] for r in rows))


def plot_vs_depth(rows, metric: str, path, title: str = "") -> Path:
    """Seed-mean per-model metric against depth, log-log, one line per design with its exponent."""
    colours = _colours(_designs(rows))
    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.subplots()
    for d, by in model_means(rows, metric).items():
        xs, ys = list(by), list(by.values())
        ax.plot(xs, ys, "o-", color=colours[d], label=f"{d} (slope {fit_slope(xs, ys):+.2f})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    depths = sorted({r["depth"] for r in rows})
    ax.set_xticks(depths, [str(L) for L in depths])
    ax.minorticks_off()
    ax.set_xlabel("depth L (layers)")
    ax.set_ylabel(LABELS.get(metric, metric))
    ax.set_title(title or f"{LABELS.get(metric, metric)} vs depth at init")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, Path(path))


def plot_vs_layer(rows, metric: str, depth: int, path, title: str = "", log: bool = True) -> Path:
    """Seed-mean per-layer metric against the layer index at one depth, one line per design."""
    colours = _colours(_designs(rows))
    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.subplots()
    for d, ys in layer_means(rows, metric, depth).items():
        ks = list(range(1, len(ys) + 1))
        label = f"{d} (slope {fit_slope(ks, ys):+.2f})" if log else d
        ax.plot(ks, ys, "-", color=colours[d], label=label, lw=1.6)
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("layer index l")
    ax.set_ylabel(LABELS.get(metric, metric))
    ax.set_title(title or f"{LABELS.get(metric, metric)} by layer, L = {depth}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, Path(path))


def plot_all(rows, out_dir) -> list[Path]:
    """The standard plots of one probe run into out_dir; returns their paths."""
    if not rows:
        return []
    out, mode = Path(out_dir), rows[0]["mode"]
    deepest = max(r["depth"] for r in rows)
    many_depths = len({r["depth"] for r in rows}) > 1
    paths = []
    if mode == "sim":
        for m in ("grad_norm", "grad_var", "act_grad_norm"):
            paths.append(plot_vs_layer(rows, m, deepest, out / f"{m}_vs_layer.png",
                                       title=f"study 002: {LABELS[m]}, {deepest} Linear+LN layers"))
        return paths
    if many_depths:
        paths.append(plot_vs_depth(rows, "last_w2_grad_norm", out / "last_w2_grad_vs_depth.png"))
    for m, log in (("grad_norm", True), ("act_norm", True), ("adj_change", True), ("cos_sim", False)):
        paths.append(plot_vs_layer(rows, m, deepest, out / f"{m}_vs_layer.png", log=log))
    return paths
