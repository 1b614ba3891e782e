"""Statistics of a scale ladder: how a comparison's effect, and a design's loss, move with size.

A ladder runs the same comparison (design A against design B, each at its own tuned learning
rate) at several model sizes, its rungs. This module is pure statistics on plain numbers and
returns plain Python floats, in the conventions of report/stats.py (ddof = 1, two-sided t
intervals, ValueError on non-finite input, no interval and no test below 3 seeds).

1. The slope of an effect against scale. Per rung a size N (non-embedding parameters or compute)
   and the per-seed effects y (A minus B in nats, paired by seed within the rung; seeds at
   different rungs are independent models). Ordinary least squares over all (rung, seed) points:

       y = a + b * log2(N) + e,   e independent N(0, sigma^2)

   so b is the change of the effect per doubling of N. With x = log2 N, n points,
   Sxx = sum (x - mean x)^2, s^2 = sum(residual^2) / (n - 2):
       se(b) = s / sqrt(Sxx),  df = n - 2,  95% interval b -+ t_{0.975, df} * se(b).
   No standard error, interval or test when a rung has fewer than 3 seeds (the rule of every
   verdict in reslab) or when df < 1; the slope itself is still given.

   Tests of a claim about b against a threshold c, as report/claims.py does for a difference:
       p_for     H0: the claim is false,  small when the data support it
       p_against H0: the claim is true,   small when the data contradict it
   "b < c": p_for = P(T_df <= t), p_against = P(T_df >= t), t = (b - c) / se(b); ">" the mirror.
   "within" (|b| < c, c > 0):
       p_for = max(P(T >= (b + c)/se), P(T <= (b - c)/se))   (TOST against -c and +c)
       p_against = min(1, 2 * min(P(T >= (b - c)/se), P(T <= (b + c)/se)))
   Why each is a level-alpha test: a one-sided t-test of b against c has size alpha at b = c and
   less on the rest of its null (the t distribution is shifted away from the rejection side).
   TOST's null "b <= -c or b >= c" is a union; rejecting it needs both one-sided tests to reject,
   and at any point of the null one of them alone already has size <= alpha (intersection-union
   test). p_against's null "-c < b < c" is rejected when either "b > c" or "b < -c" is supported;
   each of those one-sided tests is run at alpha / 2 (the factor 2), so by Bonferroni the
   chance of either rejecting under the null is <= alpha. The report puts these p-values into its
   Holm family with the other claims.

   The trend label is descriptive, from the 95% interval of b and the paper's sign.

2. Loss against parameters, L(N) = E + A * N^(-alpha), fitted by nonlinear least squares
   (scipy.optimize.curve_fit) over every seed's final loss, with A > 0, alpha > 0, E >= 0.
   Standard errors from curve_fit's covariance (s^2 (J'J)^-1); a prediction at N gets a
   prediction interval from the delta method on the parameters plus the residual variance, with
   the t quantile of the fit's df. A fit that fails or is degenerate is returned as "no fit: why",
   never raised: the report then shows the points without a curve. A prediction beyond the
   largest fitted N is marked as an extrapolation, which is never a verdict.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import scipy.optimize
import scipy.stats

__all__ = [
    "GROWS",
    "SHRINKS",
    "UNDETERMINED",
    "fit_power_law",
    "fit_slope",
    "power_law_prediction",
    "slope_tests",
    "trend_label",
]

LEVEL = 0.95
MIN_SEEDS = 3  # below this at any rung: no standard error, no interval, no test (as for claims)
OPS = ("<", ">", "within")

GROWS = "grows"
SHRINKS = "shrinks"
UNDETERMINED = "undetermined"
STAYS_WITHIN = "stays within +-{c:g} per doubling"

# Zero residual variance: points exactly on a line still leave rounding residuals of a few ulps
# of the largest term of the fit, so "zero" means below this fraction of that term.
ZERO_RESIDUAL_REL = 1e-12

# The power law's search: alpha in (0, ALPHA_MAX]. A fit that ends on a bound has no finite
# interval to give (the optimum is not interior), so it is reported as no fit.
ALPHA_MAX = 5.0
# Starting point: alpha on this grid, E and A then solved by linear least squares (for a fixed
# alpha the model is linear in E and A), the best of the grid starts curve_fit. Deterministic.
ALPHA_GRID = tuple(round(0.05 * k, 2) for k in range(1, 41))  # 0.05 .. 2.0
BOUND_REL = 1e-6  # a parameter within this (relative) of its bound counts as at the bound


# ---- input ----------------------------------------------------------------------------------------


def _rungs(points: Mapping[float, Sequence[float]], what: str) -> list[tuple[float, list[float]]]:
    """(N, values) per rung sorted by N, all floats; ValueError naming the problem on bad input."""
    if not isinstance(points, Mapping) or not points:
        raise ValueError(f"{what}: no rungs given (expected a mapping N -> per-seed values)")
    out = []
    for key, values in points.items():
        try:
            n = float(key)
        except (TypeError, ValueError):
            raise ValueError(f"{what}: rung size {key!r} is not a number") from None
        if not math.isfinite(n) or n <= 0.0:
            raise ValueError(f"{what}: rung size N = {key!r} must be a finite number > 0")
        try:
            if isinstance(values, (str, bytes, Mapping)):
                raise TypeError
            xs = [float(v) for v in values]  # any iterable of numbers (a list, a numpy array)
        except (TypeError, ValueError):
            raise ValueError(
                f"{what}: rung N = {key!r} has {values!r}, not a sequence of numbers"
            ) from None
        if not xs:
            raise ValueError(f"{what}: rung N = {key!r} has no values (an empty rung)")
        bad = [v for v in xs if not math.isfinite(v)]
        if bad:
            raise ValueError(
                f"{what}: rung N = {key!r} has non-finite value(s) {bad}; drop diverged runs "
                "(NaN/inf) before fitting and report them separately"
            )
        out.append((n, xs))
    out.sort(key=lambda r: r[0])
    sizes = [n for n, _ in out]
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"{what}: two rungs have the same size N ({sizes})")
    return out


def _t_quantile(df: float, level: float) -> float:
    return float(scipy.stats.t.ppf((1.0 + level) / 2.0, df))


# ---- 1. slope of an effect against log2 N -----------------------------------------------------------


def fit_slope(effects: Mapping[float, Sequence[float]], level: float = LEVEL) -> dict:
    """OLS fit of effect = a + b * log2(N) over every (rung, seed) point.

    Keys: slope (b, per doubling of N), intercept (a, the effect at log2 N = 0), effect_at_largest
    (a + b * log2 max N), their standard errors se_slope, se_intercept, se_effect_at_largest,
    t and p (two-sided, of b = 0), df (n - 2), level, ci_low / ci_high (of b) and
    effect_ci_low / effect_ci_high (at the largest N), residual_sd, n (points), rungs (the N's,
    ascending), seeds (points per rung, same order), log2_n, note.
    The standard errors, t, p and intervals are None when a rung has fewer than 3 seeds or
    df < 1, and note says why. With zero residual variance the line is exact: the standard errors
    are 0, the intervals collapse to the point, t and p are None, and note says so.
    Raises ValueError on bad input (non-finite values, N <= 0, an empty rung) or < 2 rungs.
    """
    rungs = _rungs(effects, "fit_slope")
    if len(rungs) < 2:
        raise ValueError(
            f"fit_slope: a slope needs at least 2 distinct rungs, got {len(rungs)} (N = {rungs[0][0]:g})"
        )
    xs = [math.log2(n) for n, ys in rungs for _ in ys]
    ys = [y for _, vals in rungs for y in vals]
    n = len(ys)
    x_mean, y_mean = math.fsum(xs) / n, math.fsum(ys) / n
    sxx = math.fsum((x - x_mean) ** 2 for x in xs)
    sxy = math.fsum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys))
    b = sxy / sxx
    a = y_mean - b * x_mean
    x_top = math.log2(rungs[-1][0])
    residuals = [y - (a + b * x) for x, y in zip(xs, ys)]
    df = n - 2
    out = {
        "slope": b, "intercept": a, "effect_at_largest": a + b * x_top,
        "se_slope": None, "se_intercept": None, "se_effect_at_largest": None,
        "t": None, "p": None, "df": df, "level": level,
        "ci_low": None, "ci_high": None, "effect_ci_low": None, "effect_ci_high": None,
        "residual_sd": None, "n": n,
        "rungs": [r[0] for r in rungs], "seeds": [len(r[1]) for r in rungs],
        "log2_n": [math.log2(r[0]) for r in rungs], "note": None,
    }
    if df < 1:
        out["note"] = (f"no test: {n} points for a line leave df = {df} (< 1), so no standard error; "
                       "the slope is the line through the points")
        return out
    few = [f"{r[0]:g} ({len(r[1])})" for r in rungs if len(r[1]) < MIN_SEEDS]
    if few:
        out["note"] = (f"no test: every rung needs at least {MIN_SEEDS} seeds; fewer at N = "
                       + ", ".join(few) + "; the slope is given without an interval")
        return out
    s2 = math.fsum(r * r for r in residuals) / df
    scale = max(max(abs(y) for y in ys), abs(a), max(abs(b * x) for x in xs))
    if max(abs(r) for r in residuals) <= ZERO_RESIDUAL_REL * scale:
        out.update(se_slope=0.0, se_intercept=0.0, se_effect_at_largest=0.0, residual_sd=0.0,
                   ci_low=b, ci_high=b, effect_ci_low=out["effect_at_largest"],
                   effect_ci_high=out["effect_at_largest"],
                   note=("zero residual variance: the points lie on a line, the slope is exact and "
                         "has no t-test; the point estimate decides"))
        return out
    se_b = math.sqrt(s2 / sxx)
    se_a = math.sqrt(s2 * (1.0 / n + x_mean**2 / sxx))
    se_top = math.sqrt(s2 * (1.0 / n + (x_top - x_mean) ** 2 / sxx))
    q = _t_quantile(df, level)
    t = b / se_b
    out.update(
        se_slope=se_b, se_intercept=se_a, se_effect_at_largest=se_top, residual_sd=math.sqrt(s2),
        t=t, p=float(2.0 * scipy.stats.t.sf(abs(t), df)),
        ci_low=b - q * se_b, ci_high=b + q * se_b,
        effect_ci_low=out["effect_at_largest"] - q * se_top,
        effect_ci_high=out["effect_at_largest"] + q * se_top,
    )
    return out


def slope_tests(fit: Mapping, op: str, c: float) -> dict:
    """The one-sided tests of a claim "slope op c" on a fit_slope result (formulas: module doc).

    op: "<", ">" or "within" (|b| < c, c > 0). Keys: op, c, slope, se, df, t (for "within" the
    pair t_low = (b + c)/se, t_high = (b - c)/se), p_for, p_against, p (the smaller), direction
    ("for" | "against"), holds (the point estimate's answer, given when there is no test), note.
    Without a standard error (fit's note) every p is None; with zero residual variance the point
    estimate decides (holds) and there is no p, as for a claim of report/claims.py.
    """
    if op not in OPS:
        raise ValueError(f"slope_tests: op must be one of {OPS}, got {op!r}")
    c = float(c)
    if not math.isfinite(c):
        raise ValueError(f"slope_tests: threshold c must be finite, got {c}")
    if op == "within" and not c > 0.0:
        raise ValueError(f"slope_tests: 'within' needs a threshold c > 0 (|slope| < c), got {c:g}")
    b, se, df = float(fit["slope"]), fit["se_slope"], fit["df"]
    holds = abs(b) < c if op == "within" else (b < c if op == "<" else b > c)
    out = {"op": op, "c": c, "slope": b, "se": se, "df": df, "t": None, "t_low": None,
           "t_high": None, "p_for": None, "p_against": None, "p": None, "direction": None,
           "holds": None, "note": fit.get("note")}
    if se is None:
        return out
    if se == 0.0:
        out["holds"] = holds
        return out
    if op == "within":
        t_low, t_high = (b + c) / se, (b - c) / se
        above_low = float(scipy.stats.t.sf(t_low, df))    # H0 b <= -c, small when b > -c
        below_high = float(scipy.stats.t.cdf(t_high, df))  # H0 b >= +c, small when b < +c
        above_high = float(scipy.stats.t.sf(t_high, df))   # H0 b <= +c, small when b > +c
        below_low = float(scipy.stats.t.cdf(t_low, df))    # H0 b >= -c, small when b < -c
        p_for = max(above_low, below_high)
        p_against = min(1.0, 2.0 * min(above_high, below_low))
        out.update(t_low=t_low, t_high=t_high)
    else:
        t = (b - c) / se
        below, above = float(scipy.stats.t.cdf(t, df)), float(scipy.stats.t.sf(t, df))
        # for "<" the null "the claim is false" is b >= c, which small t rejects: p_for = P(T <= t)
        p_for, p_against = (below, above) if op == "<" else (above, below)
        out["t"] = t
    out.update(p_for=p_for, p_against=p_against, p=min(p_for, p_against),
               direction="for" if p_for <= p_against else "against")
    return out


def trend_label(fit: Mapping, published_sign: int, c: float | None = None) -> str:
    """A descriptive word for the slope, from its 95% interval (fit's ci_low, ci_high).

    published_sign: -1 when the paper says A's loss is lower than B's (effect A - B negative),
    +1 otherwise. "grows": the interval lies wholly on the published side of 0 (the effect's
    magnitude in the published direction grows with size); "shrinks": wholly on the other side;
    "stays within +-c per doubling": the interval lies inside (-c, c), when c is given; otherwise
    (and always without an interval, e.g. fewer than 3 seeds at a rung) "undetermined".
    Grows / shrinks are checked first: an interval off zero says the direction, however small.
    """
    if published_sign not in (-1, 1) or isinstance(published_sign, bool):
        raise ValueError(f"trend_label: published_sign must be -1 or +1, got {published_sign!r}")
    if c is not None and not (math.isfinite(c) and c > 0.0):
        raise ValueError(f"trend_label: c must be a finite number > 0 or None, got {c!r}")
    lo, hi = fit.get("ci_low"), fit.get("ci_high")
    if lo is None or hi is None:
        return UNDETERMINED
    # in the published direction: sign * b, whose interval is sign * (lo, hi) reordered
    s_lo, s_hi = sorted((published_sign * lo, published_sign * hi))
    if s_lo > 0.0:
        return GROWS
    if s_hi < 0.0:
        return SHRINKS
    if c is not None and -c < lo and hi < c:
        return STAYS_WITHIN.format(c=c)
    return UNDETERMINED


# ---- 2. power law L(N) = E + A * N^(-alpha) ---------------------------------------------------------
#
# Internally N is divided by the largest fitted N (u = N / N_max in (0, 1]) and the fit is of
# L = E + B * u^(-alpha), B = A * N_max^(-alpha): every parameter is then of the order of the
# losses, which keeps the least-squares problem well conditioned. A and its standard error are
# mapped back to raw N (A = B * N_max^alpha, delta method).


def _model(u, e, b, alpha):
    return e + b * np.power(u, -alpha)


def _start(u: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """The stated starting point: for each alpha of ALPHA_GRID the linear least squares E, B
    (clipped to the bounds: E >= 0, B > 0), and the alpha with the smallest residual sum."""
    best = None
    for alpha in ALPHA_GRID:
        z = np.power(u, -alpha)
        design = np.column_stack([np.ones_like(z), z])
        (e, b), *_ = np.linalg.lstsq(design, y, rcond=None)
        e, b = max(float(e), 0.0), max(float(b), 1e-6)
        sse = float(np.sum((y - e - b * z) ** 2))
        if best is None or sse < best[0]:
            best = (sse, e, b, alpha)
    return best[1], best[2], best[3]


def _degenerate(e: float, b: float, alpha: float, pcov: np.ndarray) -> str | None:
    """Why a converged fit gives no curve with an interval, or None when it does."""
    if alpha <= BOUND_REL or alpha >= ALPHA_MAX * (1.0 - BOUND_REL):
        return (f"alpha = {alpha:.3g} at its bound (0, {ALPHA_MAX:g}]: the losses do not fall like a "
                "power law of N")
    if b <= BOUND_REL * max(1.0, abs(e)):
        return "A at its bound 0: the losses do not fall with N"
    if e <= BOUND_REL:
        return "E at its bound 0: the data do not place the loss floor above 0"
    if not np.all(np.isfinite(pcov)):
        return "the covariance of the parameters is infinite (the data do not determine them)"
    if np.any(np.diag(pcov) < 0.0):
        return "the covariance of the parameters has a negative variance"
    return None


def fit_power_law(points: Mapping[float, Sequence[float]]) -> dict:
    """Fit L(N) = E + A * N^(-alpha) to per-seed final losses (N -> values of one design).

    Keys: fit (True, or False with reason "no fit: ..."), E, A, alpha and se_E, se_A, se_alpha,
    residual_sd, df (n - 3), n, rungs, seeds, n_max (the largest fitted N), and the internal
    parameterisation (b, cov: covariance of (E, B, alpha) with B = A * n_max^-alpha) that
    power_law_prediction uses. A failed or degenerate fit (did not converge, a parameter at its
    bound, infinite covariance, df < 1) has fit False and the estimates it has, never an error.
    Raises ValueError on bad input or fewer than 3 distinct N.
    """
    rungs = _rungs(points, "fit_power_law")
    if len(rungs) < 3:
        raise ValueError(
            f"fit_power_law: a power law needs at least 3 distinct N, got {len(rungs)} "
            f"({', '.join(f'{r[0]:g}' for r in rungs)})"
        )
    n_max = rungs[-1][0]
    u = np.array([n / n_max for n, vals in rungs for _ in vals], dtype=np.float64)
    y = np.array([v for _, vals in rungs for v in vals], dtype=np.float64)
    n = len(y)
    df = n - 3
    out = {"fit": False, "reason": None, "E": None, "A": None, "alpha": None, "se_E": None,
           "se_A": None, "se_alpha": None, "residual_sd": None, "df": df, "n": n,
           "rungs": [r[0] for r in rungs], "seeds": [len(r[1]) for r in rungs], "n_max": n_max,
           "b": None, "cov": None}
    if df < 1:
        out["reason"] = f"no fit: {n} points for 3 parameters leave df = {df} (< 1)"
        return out
    p0 = _start(u, y)
    try:
        with warnings.catch_warnings():
            # an OptimizeWarning means an infinite covariance, which _degenerate reports
            warnings.simplefilter("ignore", scipy.optimize.OptimizeWarning)
            params, pcov = scipy.optimize.curve_fit(
                _model, u, y, p0=p0, bounds=([0.0, 0.0, 0.0], [np.inf, np.inf, ALPHA_MAX]),
                method="trf", max_nfev=2000,
            )
    except (RuntimeError, ValueError) as exc:
        out["reason"] = f"no fit: the least squares did not converge ({exc})"
        return out
    e, b, alpha = (float(v) for v in params)
    a = b * n_max**alpha
    resid = y - _model(u, e, b, alpha)
    out.update(E=e, A=a, alpha=alpha, b=b, residual_sd=float(math.sqrt(np.sum(resid**2) / df)))
    why = _degenerate(e, b, alpha, pcov)
    if why is not None:
        out["reason"] = "no fit: " + why
        return out
    # A = B * n_max^alpha: gradient (dA/dE, dA/dB, dA/dalpha) = (0, n_max^alpha, A ln n_max)
    g = np.array([0.0, n_max**alpha, a * math.log(n_max)])
    out.update(fit=True, se_E=float(math.sqrt(pcov[0, 0])), se_A=float(math.sqrt(g @ pcov @ g)),
               se_alpha=float(math.sqrt(pcov[2, 2])), cov=pcov.tolist())
    return out


def power_law_prediction(fit: Mapping, n: float, level: float = LEVEL) -> dict:
    """The fitted loss at size n with its prediction interval (of one more run's loss).

    pred = E + A n^-alpha; var = g' C g + s^2, with g the gradient of the prediction in (E, B,
    alpha) and C their covariance (delta method) and s the residual sd; interval pred -+
    t_{(1+level)/2, df} sqrt(var). extrapolation is True when n is beyond the largest fitted N:
    such a prediction is labelled and never a verdict. For a fit without a curve (fit False) the
    prediction and interval are None and reason says why.
    """
    n = float(n)
    if not math.isfinite(n) or n <= 0.0:
        raise ValueError(f"power_law_prediction: N = {n!r} must be a finite number > 0")
    if not 0.0 < level < 1.0:
        raise ValueError(f"power_law_prediction: level must be in (0, 1), got {level}")
    out = {"n": n, "prediction": None, "low": None, "high": None, "se": None, "level": level,
           "extrapolation": n > fit["n_max"], "reason": fit.get("reason")}
    if not fit["fit"]:
        return out
    e, b, alpha = fit["E"], fit["b"], fit["alpha"]
    u = n / fit["n_max"]
    z = u ** (-alpha)
    pred = e + b * z
    g = np.array([1.0, z, -b * z * math.log(u)])
    var = float(g @ np.asarray(fit["cov"]) @ g) + fit["residual_sd"] ** 2
    half = _t_quantile(fit["df"], level) * math.sqrt(var)
    out.update(prediction=pred, low=pred - half, high=pred + half, se=math.sqrt(var))
    return out
