"""Tests of reslab.report.trend: the slope of an effect per doubling of N and the power law of loss
against N, checked against numbers computed by another route (scipy.stats.linregress, t
quantiles by hand, the noncentral t) and by simulation with fixed seeds (no timing anywhere)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import scipy.optimize
import scipy.stats

from reslab.report.trend import (
    GROWS,
    SHRINKS,
    UNDETERMINED,
    _degenerate,
    fit_power_law,
    fit_slope,
    power_law_prediction,
    slope_tests,
    trend_label,
)

# a fixed ladder: 3 rungs, unequal seeds (3, 3, 4), effect A - B growing more negative with N
LADDER = {
    1e5: [-0.050, -0.041, -0.062],
    2e5: [-0.071, -0.066, -0.080],
    4e5: [-0.090, -0.101, -0.084, -0.097],
}


def _points(effects):
    xs = [math.log2(n) for n, ys in effects.items() for _ in ys]
    ys = [y for vals in effects.values() for y in vals]
    return xs, ys


# ---- fit_slope --------------------------------------------------------------------------------------


def test_fit_slope_matches_linregress_and_hand_interval():
    f = fit_slope(LADDER)
    xs, ys = _points(LADDER)
    r = scipy.stats.linregress(xs, ys)
    assert abs(f["slope"] - r.slope) < 1e-12
    assert abs(f["intercept"] - r.intercept) < 1e-12
    assert abs(f["se_slope"] - r.stderr) < 1e-12
    assert abs(f["se_intercept"] - r.intercept_stderr) < 1e-12
    assert abs(f["p"] - r.pvalue) < 1e-12
    assert f["n"] == 10 and f["df"] == 8
    assert f["rungs"] == [1e5, 2e5, 4e5] and f["seeds"] == [3, 3, 4]
    q = scipy.stats.t.ppf(0.975, 8)
    assert f["ci_low"] == pytest.approx(r.slope - q * r.stderr, abs=1e-12)
    assert f["ci_high"] == pytest.approx(r.slope + q * r.stderr, abs=1e-12)
    # the fitted effect at the largest N, and its standard error, by hand
    x_top, x_bar = math.log2(4e5), float(np.mean(xs))
    s = math.sqrt(sum((y - r.intercept - r.slope * x) ** 2 for x, y in zip(xs, ys)) / 8)
    se_top = s * math.sqrt(1 / 10 + (x_top - x_bar) ** 2 / sum((x - x_bar) ** 2 for x in xs))
    assert f["effect_at_largest"] == pytest.approx(r.intercept + r.slope * x_top, abs=1e-12)
    assert f["se_effect_at_largest"] == pytest.approx(se_top, abs=1e-12)
    assert f["effect_ci_high"] - f["effect_at_largest"] == pytest.approx(q * se_top, abs=1e-12)
    assert f["residual_sd"] == pytest.approx(s, abs=1e-12)
    assert f["note"] is None
    assert all(type(f[k]) is float for k in ("slope", "se_slope", "p", "ci_low", "t"))


def test_fit_slope_refuses_a_single_rung():
    with pytest.raises(ValueError, match="at least 2 distinct rungs, got 1"):
        fit_slope({1e5: [0.1, 0.2, 0.3]})


def test_fit_slope_gives_no_test_below_three_seeds_at_a_rung():
    effects = {1e5: [-0.05, -0.04, -0.06], 2e5: [-0.07, -0.066], 4e5: [-0.09, -0.10, -0.085]}
    f = fit_slope(effects)
    r = scipy.stats.linregress(*_points(effects))
    assert abs(f["slope"] - r.slope) < 1e-12  # the slope is still given
    assert f["se_slope"] is None and f["ci_low"] is None and f["p"] is None
    assert "at least 3 seeds" in f["note"] and "200000 (2)" in f["note"]
    t = slope_tests(f, ">", 0.0)
    assert t["p_for"] is None and t["p_against"] is None and t["note"] == f["note"]
    assert trend_label(f, -1, 0.1) == UNDETERMINED


def test_fit_slope_with_no_residual_degree_of_freedom():
    f = fit_slope({1e5: [0.10], 4e5: [0.04]})
    assert f["slope"] == pytest.approx((0.04 - 0.10) / 2, abs=1e-15)
    assert f["df"] == 0 and f["se_slope"] is None and "df = 0" in f["note"]


def test_fit_slope_zero_residual_variance_is_exact():
    # every seed on the line 0.4 - 0.025 * log2 N
    effects = {n: [0.4 - 0.025 * math.log2(n)] * 3 for n in (1e5, 2e5, 4e5)}
    f = fit_slope(effects)
    assert f["slope"] == pytest.approx(-0.025, abs=1e-14)
    assert f["se_slope"] == 0.0 and f["ci_low"] == f["ci_high"] == f["slope"]
    assert f["p"] is None and "zero residual variance" in f["note"]
    t = slope_tests(f, "<", 0.0)
    assert t["holds"] is True and t["p_for"] is None
    assert slope_tests(f, "within", 0.01)["holds"] is False
    assert trend_label(f, -1) == GROWS


# ---- slope_tests ------------------------------------------------------------------------------------


def test_slope_tests_one_sided_against_hand_t():
    f = fit_slope(LADDER)
    r = scipy.stats.linregress(*_points(LADDER))
    df = 8
    for c in (0.0, -0.01, -0.03):
        t = (r.slope - c) / r.stderr
        lt, gt = slope_tests(f, "<", c), slope_tests(f, ">", c)
        assert lt["t"] == pytest.approx(t, rel=1e-10) and gt["t"] == pytest.approx(t, rel=1e-10)
        assert lt["p_for"] == pytest.approx(scipy.stats.t.cdf(t, df), rel=1e-10)
        assert lt["p_against"] == pytest.approx(scipy.stats.t.sf(t, df), rel=1e-10)
        assert gt["p_for"] == pytest.approx(scipy.stats.t.sf(t, df), rel=1e-10)
        assert gt["p_against"] == pytest.approx(scipy.stats.t.cdf(t, df), rel=1e-10)
        assert lt["p"] == min(lt["p_for"], lt["p_against"])
    # the slope (about -0.021) is well below 0: "< 0" supported, "> 0" contradicted
    assert slope_tests(f, "<", 0.0)["direction"] == "for"
    assert slope_tests(f, ">", 0.0)["direction"] == "against"


@pytest.mark.parametrize("c", [0.005, 0.02, 0.03, 0.06])
def test_slope_tests_within_against_hand_tost(c):
    f = fit_slope(LADDER)
    r = scipy.stats.linregress(*_points(LADDER))
    b, se, df = r.slope, r.stderr, 8
    t_low, t_high = (b + c) / se, (b - c) / se
    p_for = max(1 - scipy.stats.t.cdf(t_low, df), scipy.stats.t.cdf(t_high, df))
    p_against = min(1.0, 2 * min(1 - scipy.stats.t.cdf(t_high, df), scipy.stats.t.cdf(t_low, df)))
    w = slope_tests(f, "within", c)
    assert w["t_low"] == pytest.approx(t_low, rel=1e-10)
    assert w["t_high"] == pytest.approx(t_high, rel=1e-10)
    assert w["p_for"] == pytest.approx(p_for, rel=1e-9, abs=1e-15)
    assert w["p_against"] == pytest.approx(p_against, rel=1e-9, abs=1e-15)
    assert w["direction"] == ("for" if p_for <= p_against else "against")


def test_slope_tests_within_decides_both_ways():
    f = fit_slope(LADDER)  # slope about -0.021, se about 0.0028
    assert slope_tests(f, "within", 0.06)["p_for"] < 1e-4  # well inside +-0.06
    assert slope_tests(f, "within", 0.005)["p_against"] < 1e-3  # well outside +-0.005


def test_slope_tests_refuse_bad_op_and_threshold():
    f = fit_slope(LADDER)
    with pytest.raises(ValueError, match="op must be one of"):
        slope_tests(f, "<=", 0.0)
    with pytest.raises(ValueError, match="'within' needs a threshold c > 0"):
        slope_tests(f, "within", 0.0)
    with pytest.raises(ValueError, match="threshold c must be finite"):
        slope_tests(f, ">", math.nan)


# ---- trend_label ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lo", "hi", "sign", "c", "label"),
    [
        (-0.05, -0.01, -1, None, GROWS),  # effect more negative with N, paper: A lower
        (-0.05, -0.01, +1, None, SHRINKS),
        (0.01, 0.05, +1, None, GROWS),
        (0.01, 0.05, -1, None, SHRINKS),
        (-0.004, 0.006, -1, 0.01, "stays within +-0.01 per doubling"),
        (-0.004, 0.016, -1, 0.01, UNDETERMINED),  # across 0 and beyond c
        (-0.004, 0.006, -1, None, UNDETERMINED),
        (0.001, 0.005, +1, 0.01, GROWS),  # off zero says the direction, however small
        (None, None, +1, 0.01, UNDETERMINED),
    ],
)
def test_trend_label(lo, hi, sign, c, label):
    assert trend_label({"ci_low": lo, "ci_high": hi}, sign, c) == label


def test_trend_label_refuses_bad_sign_and_threshold():
    with pytest.raises(ValueError, match="published_sign must be -1 or \\+1"):
        trend_label({"ci_low": 0.1, "ci_high": 0.2}, 0)
    with pytest.raises(ValueError, match="c must be a finite number > 0"):
        trend_label({"ci_low": 0.1, "ci_high": 0.2}, 1, -0.1)


# ---- power and null rates on synthetic ladders ------------------------------------------------------
#
# 3 rungs (N = 1e5, 2e5, 4e5) x 3 seeds, noise sd 0.01: log2 N = x0, x0+1, x0+2, so Sxx = 6,
# se(b) = 0.01 / sqrt(6) = 0.0041 and df = 7. The replicates are fitted at once with numpy; the
# vectorised fit is checked against fit_slope on a few of them.

LADDER_N = (1e5, 2e5, 4e5)
SEEDS, SD, R = 3, 0.01, 2000
X = np.repeat(np.log2(LADDER_N), SEEDS)
DF = X.size - 2
ALPHA = 0.05


def _ladders(slope: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return -0.1 + slope * (X - X[0]) + rng.normal(0.0, SD, size=(R, X.size))


def _vector_fit(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    xc = X - X.mean()
    b = (y - y.mean(axis=1, keepdims=True)) @ xc / (xc @ xc)
    a = y.mean(axis=1) - b * X.mean()
    resid = y - a[:, None] - b[:, None] * X
    se = np.sqrt((resid**2).sum(axis=1) / DF / (xc @ xc))
    return b, se


def _band(p: float) -> tuple[float, float]:
    """The 99.9% binomial band of a rate p over R replicates."""
    return (scipy.stats.binom.ppf(0.0005, R, p) / R, scipy.stats.binom.isf(0.0005, R, p) / R)


def _power(slope: float) -> float:
    """Analytic power of the one-sided test of b > 0 at ALPHA: noncentral t, delta = b / se(b)."""
    delta = slope / (SD / math.sqrt(float(((X - X.mean()) ** 2).sum())))
    return float(scipy.stats.nct.sf(scipy.stats.t.ppf(1 - ALPHA, DF), DF, delta))


def test_vectorised_fit_equals_fit_slope():
    y = _ladders(0.03, seed=11)
    b, se = _vector_fit(y)
    for i in (0, 1, 977, R - 1):
        f = fit_slope({n: list(y[i, k * SEEDS:(k + 1) * SEEDS]) for k, n in enumerate(LADDER_N)})
        assert f["slope"] == pytest.approx(b[i], abs=1e-12)
        assert f["se_slope"] == pytest.approx(se[i], abs=1e-12)
        assert slope_tests(f, ">", 0.0)["p_for"] == pytest.approx(
            scipy.stats.t.sf(b[i] / se[i], DF), rel=1e-9)


def test_a_planted_slope_is_found_at_its_analytic_power():
    # 0.03 nats per doubling: power about 1; 0.005: power about 0.3, a two-sided check of the rate
    for slope, seed in ((0.03, 1), (0.005, 2)):
        b, se = _vector_fit(_ladders(slope, seed))
        rate = float(np.mean(scipy.stats.t.sf(b / se, DF) < ALPHA))
        lo, hi = _band(_power(slope))
        assert rate >= lo, (slope, rate, _power(slope))
        if slope == 0.005:
            assert rate <= hi, (slope, rate, _power(slope))


def test_a_null_slope_is_declared_at_the_nominal_rate():
    b, se = _vector_fit(_ladders(0.0, seed=3))
    t = b / se
    lo, hi = _band(ALPHA)
    two_sided = float(np.mean(2 * scipy.stats.t.sf(np.abs(t), DF) < ALPHA))
    assert lo <= two_sided <= hi
    assert float(np.mean(scipy.stats.t.sf(t, DF) < ALPHA)) <= hi  # "> 0", p_for
    assert float(np.mean(scipy.stats.t.cdf(t, DF) < ALPHA)) <= hi  # "< 0", p_for


def test_within_tests_keep_their_level():
    c = 0.01
    # on the boundary b = c the claim |b| < c is false: TOST's p_for rejects at most ALPHA
    b, se = _vector_fit(_ladders(c, seed=4))
    p_for = np.maximum(scipy.stats.t.sf((b + c) / se, DF), scipy.stats.t.cdf((b - c) / se, DF))
    assert float(np.mean(p_for < ALPHA)) <= _band(ALPHA)[1]
    # at b = 0 the claim is true: p_against rejects at most ALPHA (here far less)
    b, se = _vector_fit(_ladders(0.0, seed=5))
    p_against = np.minimum(1.0, 2 * np.minimum(scipy.stats.t.sf((b - c) / se, DF),
                                               scipy.stats.t.cdf((b + c) / se, DF)))
    assert float(np.mean(p_against < ALPHA)) <= _band(ALPHA)[1]
    # the vectorised p's are slope_tests' on a replicate
    y = _ladders(0.0, seed=5)
    f = fit_slope({n: list(y[0, k * SEEDS:(k + 1) * SEEDS]) for k, n in enumerate(LADDER_N)})
    assert slope_tests(f, "within", c)["p_against"] == pytest.approx(p_against[0], rel=1e-9)


# ---- fit_power_law ----------------------------------------------------------------------------------

E0, A0, ALPHA0, NOISE = 1.5, 40.0, 0.3, 0.005
POWER_N = tuple(1e5 * 2**k for k in range(5))  # 1e5 .. 1.6e6


def _losses(rng, n_values=POWER_N, seeds=3):
    return {n: list(E0 + A0 * n**-ALPHA0 + rng.normal(0.0, NOISE, seeds)) for n in n_values}


def test_fit_power_law_recovers_planted_parameters_within_3_se():
    fit = fit_power_law(_losses(np.random.default_rng(20261204)))
    assert fit["fit"] is True and fit["reason"] is None
    assert fit["df"] == 12 and fit["n"] == 15 and fit["n_max"] == 1.6e6
    for key, true in (("E", E0), ("A", A0), ("alpha", ALPHA0)):
        assert abs(fit[key] - true) < 3 * fit["se_" + key], (key, fit[key], fit["se_" + key])
    # df * s^2 / sigma^2 is chi-square with df degrees of freedom: inside its 99.9% interval
    lo, hi = scipy.stats.chi2.ppf([0.0005, 0.9995], 12)
    assert lo <= 12 * fit["residual_sd"] ** 2 / NOISE**2 <= hi


def test_power_law_standard_errors_equal_a_fit_in_raw_n():
    """The delta-method se of A (fitted as B = A N_max^-alpha) equals curve_fit's own in raw N."""
    pts = _losses(np.random.default_rng(5))
    fit = fit_power_law(pts)
    n = np.array([k for k, v in pts.items() for _ in v])
    y = np.array([x for v in pts.values() for x in v])
    params, pcov = scipy.optimize.curve_fit(lambda n, e, a, al: e + a * n**-al, n, y,
                                            p0=[fit["E"], fit["A"], fit["alpha"]])
    assert params == pytest.approx([fit["E"], fit["A"], fit["alpha"]], rel=1e-5)
    assert np.sqrt(np.diag(pcov)) == pytest.approx([fit["se_E"], fit["se_A"], fit["se_alpha"]], rel=1e-4)


def test_power_law_prediction_by_hand_and_extrapolation_flag():
    fit = fit_power_law(_losses(np.random.default_rng(6)))
    at_top = power_law_prediction(fit, 1.6e6)
    cov, s = np.asarray(fit["cov"]), fit["residual_sd"]
    # at N = N_max the gradient in (E, B, alpha) is (1, 1, 0)
    se = math.sqrt(cov[0, 0] + 2 * cov[0, 1] + cov[1, 1] + s**2)
    assert at_top["prediction"] == pytest.approx(fit["E"] + fit["A"] * 1.6e6 ** -fit["alpha"], rel=1e-12)
    assert at_top["se"] == pytest.approx(se, rel=1e-10)
    assert at_top["high"] - at_top["prediction"] == pytest.approx(scipy.stats.t.ppf(0.975, 12) * se, rel=1e-10)
    assert at_top["extrapolation"] is False
    assert power_law_prediction(fit, 3e5)["extrapolation"] is False
    assert power_law_prediction(fit, 1.7e6)["extrapolation"] is True


def test_power_law_prediction_intervals_cover():
    """95% prediction intervals for a new run at a held-out N: inside (3e5) and beyond (3.2e6) the
    fitted range; the rate over 400 replicates lies in the 99.9% binomial band of 0.95."""
    rng = np.random.default_rng(8)
    reps, hits = 400, {3e5: 0, 3.2e6: 0}
    for _ in range(reps):
        fit = fit_power_law(_losses(rng))
        assert fit["fit"]
        for n in hits:
            p = power_law_prediction(fit, n)
            y = E0 + A0 * n**-ALPHA0 + rng.normal(0.0, NOISE)
            hits[n] += p["low"] <= y <= p["high"]
    lo, hi = scipy.stats.binom.ppf(0.0005, reps, 0.95) / reps, scipy.stats.binom.isf(0.0005, reps, 0.95) / reps
    for n, h in hits.items():
        assert lo <= h / reps <= hi, (n, h / reps, lo, hi)


def test_power_law_degenerate_cases_give_no_fit():
    few = fit_power_law({1e5: [3.0], 2e5: [2.5], 4e5: [2.3]})
    assert few["fit"] is False and few["reason"] == "no fit: 3 points for 3 parameters leave df = 0 (< 1)"
    # losses rising with N: the best power law flattens out, alpha runs to its bound 0
    rising = fit_power_law({n: [2 + 0.1 * math.log2(n / 1e5) + d for d in (0, 1e-3, -1e-3)]
                            for n in POWER_N})
    assert rising["fit"] is False and rising["reason"].startswith("no fit: alpha = ")
    assert "at its bound" in rising["reason"]
    # flat losses: no fall with N, A runs to 0
    flat = fit_power_law({n: [2.0, 2.0, 2.0] for n in POWER_N})
    assert flat["fit"] is False and flat["reason"].startswith("no fit: A at its bound 0")
    # losses that fall towards a floor below 0 (L = 40 N^-0.3 - 0.02): E runs to its bound 0
    rng = np.random.default_rng(0)
    floor = fit_power_law({n: list(A0 * n**-ALPHA0 - 0.02 + rng.normal(0.0, NOISE, 3)) for n in POWER_N})
    assert floor["fit"] is False and floor["reason"].startswith("no fit: E at its bound 0")
    p = power_law_prediction(flat, 1e5)
    assert p["prediction"] is None and p["low"] is None and p["reason"] == flat["reason"]
    inf_cov = np.full((3, 3), np.inf)
    assert "infinite" in _degenerate(1.5, 0.5, 0.3, inf_cov)
    assert _degenerate(1.5, 0.5, 0.3, np.eye(3)) is None


def test_fit_power_law_refuses_fewer_than_three_rungs():
    with pytest.raises(ValueError, match="at least 3 distinct N, got 2"):
        fit_power_law({1e5: [3.0, 3.1, 3.0], 2e5: [2.8, 2.9, 2.8]})


# ---- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [fit_slope, fit_power_law])
@pytest.mark.parametrize(
    ("points", "message"),
    [
        ({1e5: [0.1, math.nan, 0.2], 2e5: [0.1] * 3, 4e5: [0.1] * 3}, "rung N = 100000.0 has non-finite"),
        ({1e5: [0.1] * 3, 2e5: [0.1, math.inf, 0.2], 4e5: [0.1] * 3}, "rung N = 200000.0 has non-finite"),
        ({0.0: [0.1] * 3, 2e5: [0.1] * 3, 4e5: [0.1] * 3}, "rung size N = 0.0 must be a finite number > 0"),
        ({-1e5: [0.1] * 3, 2e5: [0.1] * 3, 4e5: [0.1] * 3}, "rung size N = -100000.0 must be"),
        ({math.inf: [0.1] * 3, 2e5: [0.1] * 3, 4e5: [0.1] * 3}, "rung size N = inf must be"),
        ({1e5: [], 2e5: [0.1] * 3, 4e5: [0.1] * 3}, "rung N = 100000.0 has no values"),
        ({1e5: 0.1, 2e5: [0.1] * 3, 4e5: [0.1] * 3}, "rung N = 100000.0 has 0.1, not a sequence of numbers"),
        ({1e5: [0.1, "x"], 2e5: [0.1] * 3, 4e5: [0.1] * 3}, "rung N = 100000.0 has [0.1, 'x'], not a sequence"),
        ({1e5: "123", 2e5: [0.1] * 3, 4e5: [0.1] * 3}, "rung N = 100000.0 has '123', not a sequence"),
        ({"1e5": [0.1] * 3, 1e5: [0.1] * 3, 4e5: [0.1] * 3}, "two rungs have the same size N"),
        ({"big": [0.1] * 3, 1e5: [0.1] * 3, 4e5: [0.1] * 3}, "rung size 'big' is not a number"),
        ({}, "no rungs given"),
    ],
)
def test_bad_input_is_refused_by_name(fn, points, message):
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        fn(points)
    assert str(err.value).startswith(fn.__name__ + ": ")


def test_numpy_arrays_and_string_sizes_are_accepted():
    """Rungs may come as numpy arrays and sizes as strings (the keys of a JSON object)."""
    as_arrays = {str(n): np.asarray(v) for n, v in LADDER.items()}
    assert fit_slope(as_arrays)["slope"] == fit_slope(LADDER)["slope"]


def test_bad_prediction_size_is_refused():
    fit = fit_power_law(_losses(np.random.default_rng(9)))
    with pytest.raises(ValueError, match="N = -1.0 must be a finite number > 0"):
        power_law_prediction(fit, -1.0)
