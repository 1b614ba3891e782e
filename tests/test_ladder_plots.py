"""The figures of a scale ladder's report section (report/ladder_plots.py), on a hand-made section:
files written, what each figure draws (read back from the unsaved Figure), the confidence band
against a hand computation and against fit_slope's own interval, and the empty cases."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
import scipy.stats
from matplotlib.collections import PolyCollection
from matplotlib.container import ErrorbarContainer

from reslab.report import ladder_plots as lp
from reslab.report.plots import variant_colors
from reslab.report.trend import fit_slope

PNG_SIG = b"\x89PNG\r\n\x1a\n"
RUNGS = [("w32", 196608), ("w64", 786432), ("w128", 3145728)]
COLORS = variant_colors(["pre-ln", "resi-dual", "post-ln"])


def _point(rung: str, n: int, values: list[float]) -> dict:
    mean = sum(values) / len(values)
    ci = (mean - 0.03, mean + 0.03) if len(values) >= 3 else (None, None)
    return {"rung": rung, "params": n, "values": values, "mean": mean, "ci_low": ci[0],
            "ci_high": ci[1], "n": len(values)}


def _section() -> dict:
    """pre-ln: all rungs, a fit and an extrapolation; resi-dual: rung w64 missing; post-ln: two seeds
    at w32 (no interval) and a failed fit. One effect with a slope interval, one without (a rung
    with two seeds)."""
    pre = [_point("w32", 196608, [1.81, 1.83, 1.80]), _point("w64", 786432, [1.60, 1.62, 1.61]),
           _point("w128", 3145728, [1.45, 1.46, 1.44])]
    resi = [_point("w32", 196608, [1.71, 1.72, 1.70]), _point("w128", 3145728, [1.38, 1.37, 1.39])]
    post = [_point("w32", 196608, [1.90, 1.93]), _point("w64", 786432, [1.70, 1.69, 1.72]),
            _point("w128", 3145728, [1.66, 1.60, 1.62])]
    fit = {"fit": True, "E": 1.2, "A": 40.0, "alpha": 0.33, "se_E": 0.05, "se_A": 5.0,
           "se_alpha": 0.02, "residual_sd": 0.01, "df": 6, "n_max": 3145728, "b": 0.3, "reason": None}
    grid = np.geomspace(196608, 2.0e8, 20)
    curve = [[float(n), float(1.2 + 40.0 * n ** -0.33)] for n in grid]
    eff_pts = [_point("w32", 196608, [-0.10, -0.12, -0.09]), _point("w64", 786432, [-0.13, -0.15, -0.12]),
               _point("w128", 3145728, [-0.16, -0.19, -0.17])]
    few_pts = [_point("w32", 196608, [0.05, 0.07]), _point("w128", 3145728, [0.04, 0.02, 0.03])]
    values = lambda pts: {p["params"]: p["values"] for p in pts}  # noqa: E731
    return {
        "over": "width (n_embd) at 16 layers",
        "rungs": [{"name": r, "params": n, "tokens": 1.0e6} for r, n in RUNGS],
        "designs": [
            {"name": "pre-ln", "color_key": "pre-ln", "points": pre, "fit": fit, "curve": curve,
             "extrapolation": {"n": 2.0e8, "prediction": 1.27, "low": 1.2, "high": 1.34,
                               "label": "paper-scale rung w1024"}},
            {"name": "resi-dual", "color_key": "resi-dual", "points": resi, "fit": None, "curve": [],
             "extrapolation": None},
            {"name": "post-ln", "color_key": "post-ln", "points": post,
             "fit": {**fit, "fit": False, "reason": "no fit: A at its bound 0"}, "curve": [],
             "extrapolation": None},
        ],
        "effects": [
            {"id": "resi-gain", "a": "resi-dual", "b": "pre-ln", "color_key": "resi-dual",
             "points": eff_pts, "slope": fit_slope(values(eff_pts)), "label": "grows"},
            {"id": "post-gap", "a": "post-ln", "b": "pre-ln", "color_key": "post-ln",
             "points": few_pts, "slope": fit_slope(values(few_pts)), "label": "undetermined"},
        ],
    }


# ---- files --------------------------------------------------------------------------------------
@pytest.mark.parametrize("plot", [lp.plot_ladder_loss, lp.plot_ladder_effect])
def test_writes_a_png_and_leaves_no_pyplot_figure(tmp_path, plot):
    before = plt.get_fignums()
    path = tmp_path / "sub" / "fig.png"
    assert plot(_section(), COLORS, path) is True
    data = path.read_bytes()
    assert data.startswith(PNG_SIG) and len(data) > 20_000
    assert plt.get_fignums() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["fig.png"]  # no temporary file left


EMPTY = [
    None,
    {},
    {"over": "width", "rungs": [], "designs": [], "effects": []},
    # entries whose points have nothing to draw: no points, or values and mean all missing
    {"designs": [{"name": "a", "points": []}],
     "effects": [{"id": "e", "a": "a", "b": "b", "points": [], "slope": None}]},
    {"designs": [{"name": "a", "points": [{"rung": "w32", "params": 1000, "values": [], "mean": None}]}],
     "effects": [{"id": "e", "points": [{"rung": "w32", "params": 1000, "values": [float("nan")],
                                          "mean": None}]}]},
]


@pytest.mark.parametrize("section", EMPTY)
@pytest.mark.parametrize("plot", [lp.plot_ladder_loss, lp.plot_ladder_effect])
def test_nothing_to_draw_returns_false_and_touches_nothing(tmp_path, plot, section):
    old = tmp_path / "old.png"
    old.write_bytes(b"an earlier figure")
    assert plot(section, COLORS, tmp_path / "new.png") is False
    assert plot(section, COLORS, old) is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.png"]
    assert old.read_bytes() == b"an earlier figure"


def test_effect_whose_points_are_not_those_of_its_slope_is_refused(tmp_path):
    section = _section()
    section["effects"][0]["points"][0]["values"].pop()
    with pytest.raises(ValueError, match="'resi-gain' has 8 seed points but its slope was fitted to 9"):
        lp.plot_ladder_effect(section, COLORS, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("bad, where", [
    ({"designs": {"name": "a"}}, "'designs' must be a list"),
    ({"designs": [{"name": "a", "points": [{"rung": "w32", "values": [1.0]}]}]},
     "designs[0] ('a') points[0] needs 'params'"),
    ({"effects": [{"id": "e", "points": [{"params": -5, "values": [0.1]}]}]},
     "effects[0] ('e') points[0] needs 'params'"),
    ({"effects": [{"id": "e", "points": [{"params": 5, "values": 0.1}]}]},
     "effects[0] ('e') points[0] 'values' must be a list"),
    ({"designs": [{"name": "a", "points": [{"params": 5, "values": [1.0]}], "curve": [[5, 1.0, 2]]}]},
     "designs[0] ('a') curve[0] must be a pair"),
])
def test_malformed_section_names_the_place(tmp_path, bad, where):
    plot = lp.plot_ladder_effect if "effects" in bad else lp.plot_ladder_loss
    with pytest.raises(ValueError) as err:
        plot(bad, COLORS, tmp_path / "x.png")
    assert where in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "x.png").exists()


# ---- what the loss figure draws -------------------------------------------------------------------
def _legend_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_loss_figure_legend_fit_and_no_fit():
    ax = lp.ladder_loss_figure(_section(), COLORS).axes[0]
    assert _legend_texts(ax) == ["pre-ln: α = 0.33 ± 0.02", "resi-dual: no fit", "post-ln: no fit",
                                 "extrapolation (prediction interval)"]
    assert ax.get_xscale() == "log"
    assert "non-embedding parameters" in ax.get_xlabel()


def test_loss_figure_error_bars_only_where_an_interval_exists():
    section = _section()
    ax = lp.ladder_loss_figure(section, COLORS).axes[0]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    with_ci = sum(p["ci_low"] is not None for d in section["designs"] for p in d["points"])
    assert with_ci == 7  # post-ln's two-seed w32 has none
    assert len(bars) == with_ci + 1  # + the extrapolation's prediction interval


def test_loss_figure_extrapolation_is_apart_from_the_measured_line():
    ax = lp.ladder_loss_figure(_section(), COLORS).axes[0]
    labels = [t.get_text() for t in ax.texts]
    assert labels == ["extrapolation: paper-scale rung w1024"]
    color = COLORS["pre-ln"]
    solid = [ln for ln in ax.get_lines() if ln.get_linestyle() == "-" and ln.get_color() == color
             and len(ln.get_xdata()) > 1]
    assert solid, "the measured line of pre-ln"
    for ln in solid:
        assert max(ln.get_xdata()) < 1e7  # ends at the largest measured rung, not at 2e8
    hollow = [ln for ln in ax.get_lines() if list(ln.get_xdata()) == [2.0e8] and ln.get_marker() == "D"]
    assert len(hollow) == 1 and hollow[0].get_markerfacecolor() == "white"
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--" and len(ln.get_xdata()) > 1]
    assert len(dashed) == 1  # only pre-ln has a curve


def test_loss_figure_missing_rung_and_seed_dots():
    ax = lp.ladder_loss_figure(_section(), COLORS).axes[0]
    dots = [ln for ln in ax.get_lines() if ln.get_marker() == "."]
    assert [len(ln.get_xdata()) for ln in dots] == [9, 6, 8]  # every seed, resi-dual lacks w64
    assert [t.get_text() for t in ax.get_xticklabels()] == ["197k\nw32", "786k\nw64", "3.1M\nw128", "200M"]


@pytest.mark.parametrize("n, text", [(512, "512"), (196608, "197k"), (786432, "786k"),
                                     (3145728, "3.1M"), (12582912, "12.6M"), (2.0e8, "200M"),
                                     (1.5e9, "1.5B"), (999_400, "999k"), (999_999, "1M")])
def test_format_params(n, text):
    assert lp.format_params(n) == text


def test_loss_legend_keeps_a_small_standard_error_visible():
    section = _section()
    section["designs"][0]["fit"].update(alpha=0.0761, se_alpha=0.0042)
    ax = lp.ladder_loss_figure(section, COLORS).axes[0]
    assert _legend_texts(ax)[0] == "pre-ln: α = 0.0761 ± 0.0042"


# ---- what the effect figure draws -----------------------------------------------------------------
def test_effect_figure_one_panel_per_effect_with_band_only_when_tested():
    section = _section()
    fig = lp.ladder_effect_figure(section, COLORS)
    tested, untested = [ax for ax in fig.axes if ax.get_visible()]
    slope = section["effects"][0]["slope"]
    assert tested.get_title() == (
        f"resi-dual − pre-ln: grows\nslope {slope['slope']:+.3f} nats per doubling "
        f"(95% CI {slope['ci_low']:+.3f} to {slope['ci_high']:+.3f})")
    assert untested.get_title().endswith("(no interval)")
    assert untested.get_title().startswith("post-ln − pre-ln: undetermined")
    assert len([c for c in tested.collections if isinstance(c, PolyCollection)]) == 1
    assert not [c for c in untested.collections if isinstance(c, PolyCollection)]
    # the x axis is log2 N, so the fitted line is straight and passes through a + b log2 N
    line = [ln for ln in tested.get_lines() if len(ln.get_xdata()) == 50][0]
    x, y = line.get_xdata(), line.get_ydata()
    np.testing.assert_allclose(x[[0, -1]], [math.log2(196608), math.log2(3145728)])
    np.testing.assert_allclose(y, slope["intercept"] + slope["slope"] * x, rtol=0, atol=1e-12)
    assert any(ln.get_ydata()[0] == 0.0 and len(ln.get_xdata()) == 2 for ln in tested.get_lines())
    bars = [c for c in untested.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 1  # the two-seed rung has none


# ---- the band ------------------------------------------------------------------------------------
def test_effect_band_equals_hand_computation():
    xs = [17.0, 17.0, 17.0, 19.0, 19.0, 21.0, 21.0, 21.0]
    a, b, s = 0.4, -0.03, 0.012
    grid = [17.0, 18.5, 21.0]
    mid, low, high = lp.effect_band(xs, a, b, s, grid)
    n, x_mean = 8, sum(xs) / 8  # 19.0
    sxx = 3 * 4.0 + 2 * 0.0 + 3 * 4.0
    assert x_mean == 19.0 and sxx == 24.0
    q = scipy.stats.t.ppf(0.975, 6)
    for i, x in enumerate(grid):
        half = q * s * math.sqrt(1 / n + (x - x_mean) ** 2 / sxx)
        assert mid[i] == pytest.approx(a + b * x, abs=1e-15)
        assert low[i] == pytest.approx(a + b * x - half, rel=1e-12)
        assert high[i] == pytest.approx(a + b * x + half, rel=1e-12)


def test_effect_band_matches_fit_slope_at_the_largest_rung():
    section = _section()
    slope = section["effects"][0]["slope"]
    xs = [math.log2(p["params"]) for p in section["effects"][0]["points"] for _ in p["values"]]
    top = math.log2(3145728)
    _, low, high = lp.effect_band(xs, slope["intercept"], slope["slope"], slope["residual_sd"], [top])
    assert low[0] == pytest.approx(slope["effect_ci_low"], rel=1e-10)
    assert high[0] == pytest.approx(slope["effect_ci_high"], rel=1e-10)


@pytest.mark.parametrize("xs, message", [([17.0, 19.0], "at least 3 points"),
                                         ([18.0, 18.0, 18.0], "no line")])
def test_effect_band_refuses_what_has_no_band(xs, message):
    with pytest.raises(ValueError, match=message):
        lp.effect_band(xs, 0.0, 0.1, 0.01, [18.0])
