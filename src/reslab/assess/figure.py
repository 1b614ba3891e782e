"""The card's main figure: every design's best validation loss in each row of the main sweep (4 / 16
layers, with / without warmup), each row at its own tuned rate: the mean over the comparison seeds,
each seed a dot, the bigram level dashed. One glance answers the card's question."""

from __future__ import annotations

from pathlib import Path

from ..report.plots import _new, _save, variant_colors

FIGURE = "card.png"
ROWS = (("L4-w100", "4 layers\nwarmup"), ("L4-none", "4 layers\nno warmup"),
        ("L16-w100", "16 layers\nwarmup"), ("L16-none", "16 layers\nno warmup"))


def draw_card_figure(depth_rows: dict[str, dict[str, dict]], values: dict[str, dict[str, list[float]]],
                     bigram: float | None, path: Path) -> bool:
    """depth_rows: design -> row -> {"mean", ...} (card["depth"]["rows"]); values: design -> row -> the
    per-seed best losses. False (nothing drawn) when no row has a result."""
    if not any(r.get("mean") is not None for rows in depth_rows.values() for r in rows.values()):
        return False
    fig, ax = _new("Best validation loss, each design at its own tuned rate (dots: seeds)", "",
                   "best val loss (nats/token)")
    colors = variant_colors(list(depth_rows))
    n = len(depth_rows)
    for i, (design, rows) in enumerate(depth_rows.items()):
        offset = (i - (n - 1) / 2) * 0.8 / max(n, 1)
        xs, means = [], []
        for x, (key, _) in enumerate(ROWS):
            mean = (rows.get(key) or {}).get("mean")
            for v in (values.get(design) or {}).get(key) or []:
                ax.plot(x + offset, v, "o", color=colors[design], ms=3, alpha=0.5)
            if mean is not None:
                xs.append(x + offset)
                means.append(mean)
        ax.plot(xs, means, "_", color=colors[design], ms=22, mew=2.5, label=design)
    if bigram is not None:
        ax.axhline(bigram, color="#444444", ls="--", lw=1, label=f"bigram level {bigram:.3f}")
    ax.set_xticks(range(len(ROWS)), [label for _, label in ROWS])
    ax.legend(fontsize=8)
    return _save(fig, path)
