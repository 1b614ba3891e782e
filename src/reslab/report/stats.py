"""Statistics for a table that compares training variants over seeds.

Everything here is a pure function of plain Python numbers and returns plain Python floats
(never numpy scalars), so results can go straight into JSON.

Conventions, stated once:
  * std is the sample standard deviation, s = sqrt(sum((x - mean)^2) / (n - 1)).
  * Confidence intervals are two-sided Student-t intervals,
    mean +- t_{(1+level)/2, n-1} * s / sqrt(n).
  * With fewer than 3 seeds no interval is reported, on purpose: with n = 2 the t quantile has
    1 degree of freedom (t_{0.975,1} = 12.7) and the "interval" says nothing useful.
  * p-values are two-sided.
  * Non-finite values (NaN, +-inf: a diverged run) are never averaged; the caller must drop them
    (and report them separately). Passing one raises ValueError.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import scipy.stats

from ..spec.schema import is_result_scale

__all__ = [
    "COLLAPSE_RULE_TEXT",
    "UNIGRAM_LEVEL_TEXT",
    "collapse_rule_text",
    "compare",
    "holm",
    "is_collapsed",
    "is_result",
    "median_interval",
    "perplexity",
    "summarize",
    "t_interval",
    "unigram_entropy",
]


# --------------------------------------------------------------------------------------------
# helpers


BELOW_BIGRAM = 0.3  # nats: a row compared in a verdict must end at least this far below the bigram level


def short_of_regime(name: str, below_bigram: float) -> str:
    """Why `name`'s row is too close to the bigram level for a verdict, with how far from it it ended
    (above it, when its mean loss is worse than a bigram model's)."""
    if below_bigram < 0:
        return (f"{name} ends {-below_bigram:.3f} nats above the bigram level (a verdict needs its mean "
                f"{BELOW_BIGRAM} below)")
    return f"{name} ends only {below_bigram:.3f} nats below the bigram level (a verdict needs {BELOW_BIGRAM})"


def _finite_floats(values: Iterable[float], what: str) -> list[float]:
    """Return `values` as a list of Python floats; raise ValueError on any NaN or infinity."""
    out = [float(v) for v in values]
    bad = [v for v in out if not math.isfinite(v)]
    if bad:
        raise ValueError(
            f"{what}: non-finite value(s) {bad} given; drop diverged runs (NaN/inf) before "
            "computing statistics and report them separately"
        )
    return out


def _mean(xs: list[float]) -> float:
    return math.fsum(xs) / len(xs)


def _std(xs: list[float]) -> float:
    """Sample standard deviation, ddof = 1: sqrt(sum((x - mean)^2) / (n - 1)). Needs n >= 2."""
    m = _mean(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


# --------------------------------------------------------------------------------------------
# one variant


def t_interval(mean: float, std: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Two-sided Student-t confidence interval for a mean.

    (low, high) = mean -+ t_{(1+level)/2, n-1} * std / sqrt(n), with std the ddof=1 sample std.
    Needs n >= 2 (raises ValueError otherwise). Note `summarize` reports no interval below
    n = 3 by design; this helper itself does not impose that.
    """
    if n < 2:
        raise ValueError(f"t_interval needs n >= 2 values, got n={n}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"t_interval level must be in (0, 1), got {level}")
    q = float(scipy.stats.t.ppf((1.0 + level) / 2.0, n - 1))
    half = q * float(std) / math.sqrt(n)
    return float(mean) - half, float(mean) + half


def median_interval(values: Iterable[float], level: float = 0.95) -> tuple[float, float] | None:
    """Distribution-free two-sided interval for a median: order statistics k and n + 1 - k of the
    sorted values, with k the largest for which the coverage 1 - 2 P(Binomial(n, 1/2) <= k - 1) is at
    least `level` (n = 11 at 0.95: the 2nd and 10th, coverage 0.988). It assumes only independent
    draws, no shape, so a heavy tail (a stall of the machine) moves it no more than one value. None
    where n is too small for any k (n <= 5 at 0.95)."""
    xs = sorted(_finite_floats(values, "median_interval"))
    if not 0.0 < level < 1.0:
        raise ValueError(f"median_interval level must be in (0, 1), got {level}")
    n, best = len(xs), 0
    for k in range(1, n // 2 + 1):
        if 1.0 - 2.0 * float(scipy.stats.binom.cdf(k - 1, n, 0.5)) >= level:
            best = k
    return (xs[best - 1], xs[n - best]) if best else None


def summarize(values: list[float]) -> dict:
    """Mean, sample std and 95% t-interval of one variant's per-seed values.

    Keys: n; mean (None if n = 0); std (ddof = 1, None if n < 2); ci_low, ci_high
    (mean -+ t_{0.975, n-1} * std / sqrt(n), None if n < 3: with fewer than 3 seeds no interval
    is given, by design); values (the input as floats).
    Raises ValueError if any value is NaN or infinite: the caller passes only finite values.
    """
    xs = _finite_floats(values, "summarize")
    n = len(xs)
    mean = _mean(xs) if n >= 1 else None
    std = _std(xs) if n >= 2 else None
    ci_low = ci_high = None
    if n >= 3:
        ci_low, ci_high = t_interval(mean, std, n, 0.95)
    return {"n": n, "mean": mean, "std": std, "ci_low": ci_low, "ci_high": ci_high, "values": xs}


# --------------------------------------------------------------------------------------------
# two variants


def _hedges_j(df: int) -> float:
    """Small-sample correction of Hedges: J = 1 - 3 / (4 * df - 1)."""
    return 1.0 - 3.0 / (4.0 * df - 1.0)


def compare(baseline: Mapping[int, float], other: Mapping[int, float]) -> dict:
    """Compare `other` against `baseline`; both map seed -> value.

    Choice of test:
      * paired t-test (scipy.stats.ttest_rel) on d_i = other_i - baseline_i when both have the
        same set of seeds and it has at least 2 seeds:
            t = mean(d) / (sd(d) / sqrt(n)),  df = n - 1;
      * otherwise Welch's t-test (scipy.stats.ttest_ind, equal_var=False):
            t = (mean_o - mean_b) / sqrt(s_b^2/n_b + s_o^2/n_o),
            df = (s_b^2/n_b + s_o^2/n_o)^2 / ((s_b^2/n_b)^2/(n_b-1) + (s_o^2/n_o)^2/(n_o-1))
            (Welch-Satterthwaite).
    p is two-sided: p = 2 * P(T_df > |t|).

    Effect size (Hedges' g):
      * Welch:  g = J * (mean_o - mean_b) / s_pooled,
                s_pooled = sqrt(((n_b-1) s_b^2 + (n_o-1) s_o^2) / (n_b + n_o - 2)),
                J = 1 - 3 / (4 (n_b + n_o) - 9);
      * paired: g_z = J * mean(d) / sd(d),  J = 1 - 3 / (4 (n-1) - 1)
                (J = 0 for n = 2 pairs: one degree of freedom carries no usable effect size,
                so g is None there and the note says so, rather than a misleading 0).

    Returns keys test ("paired" | "welch"), n_baseline, n_other, diff = mean_o - mean_b,
    diff_pct = 100 * diff / mean_b (None if mean_b = 0), t, p, df, hedges_g, note.
    When no test is possible (fewer than 2 values on a side, fewer than 2 pairs, or zero
    variance so that t is undefined) t, p, df and hedges_g are None and note says why; diff and
    diff_pct are still given whenever both sides have at least one value. note is None otherwise.
    Raises ValueError on non-finite values.
    """
    b = dict(zip(map(int, baseline), _finite_floats(baseline.values(), "compare baseline")))
    o = dict(zip(map(int, other), _finite_floats(other.values(), "compare other")))
    n_b, n_o = len(b), len(o)
    paired = set(b) == set(o) and n_b >= 2

    diff = diff_pct = None
    if n_b >= 1 and n_o >= 1:
        mean_b, mean_o = _mean(list(b.values())), _mean(list(o.values()))
        diff = mean_o - mean_b
        diff_pct = 100.0 * diff / mean_b if mean_b != 0.0 else None

    result = {
        "test": "paired" if paired else "welch",
        "n_baseline": n_b,
        "n_other": n_o,
        "diff": diff,
        "diff_pct": diff_pct,
        "t": None,
        "p": None,
        "df": None,
        "hedges_g": None,
        "note": None,
    }

    if paired:
        seeds = sorted(b)
        d = [o[s] - b[s] for s in seeds]
        sd_d = _std(d)
        if sd_d == 0.0:
            result["note"] = "no test: the seed-matched differences are all equal (zero variance)"
            return result
        res = scipy.stats.ttest_rel([o[s] for s in seeds], [b[s] for s in seeds])
        n = len(d)
        result.update(
            t=float(res.statistic),
            p=float(res.pvalue),
            df=float(n - 1),
            hedges_g=_hedges_j(n - 1) * _mean(d) / sd_d if n >= 3 else None,
        )
        if n < 3:
            result["note"] = "Hedges' g needs at least 3 seed pairs (its small-sample factor is 0 at 2)"
        return result

    if n_b < 2 or n_o < 2:
        result["note"] = (
            f"no test: Welch's t-test needs at least 2 values per side "
            f"(baseline has {n_b}, other has {n_o})"
        )
        return result

    xb, xo = list(b.values()), list(o.values())
    s_b, s_o = _std(xb), _std(xo)
    if s_b == 0.0 and s_o == 0.0:
        result["note"] = "no test: both variants have zero variance"
        return result
    res = scipy.stats.ttest_ind(xo, xb, equal_var=False)
    vb, vo = s_b**2 / n_b, s_o**2 / n_o
    df = (vb + vo) ** 2 / (vb**2 / (n_b - 1) + vo**2 / (n_o - 1))
    s_pooled = math.sqrt(((n_b - 1) * s_b**2 + (n_o - 1) * s_o**2) / (n_b + n_o - 2))
    result.update(
        t=float(res.statistic),
        p=float(res.pvalue),
        df=float(df),
        hedges_g=_hedges_j(n_b + n_o - 2) * (_mean(xo) - _mean(xb)) / s_pooled,
    )
    return result


# --------------------------------------------------------------------------------------------
# many comparisons


def holm(pvalues: Mapping[str, float | None]) -> dict[str, float | None]:
    """Holm-Bonferroni adjusted p-values (step-down).

    Sort the m non-None p-values ascending, p_(1) <= ... <= p_(m) (ties broken by key, so the
    order is deterministic); then
        adjusted p_(i) = max_{j <= i} min(1, (m - j + 1) * p_(j)),
    which makes the adjusted values monotone in the sorted order. None entries stay None and
    are not counted in m. Output has the same keys as the input.
    """
    for k, p in pvalues.items():
        if p is not None and not (math.isfinite(p) and 0.0 <= p <= 1.0):
            raise ValueError(f"holm: p-value for {k!r} must be in [0, 1], got {p}")
    present = sorted(
        (float(p), str(k), i, k) for i, (k, p) in enumerate(pvalues.items()) if p is not None
    )
    m = len(present)
    adjusted: dict = {}
    running = 0.0
    for j, (p, _, _, key) in enumerate(present, start=1):
        running = max(running, min(1.0, (m - j + 1) * p))
        adjusted[key] = running
    return {k: adjusted.get(k) if p is not None else None for k, p in pvalues.items()}


# --------------------------------------------------------------------------------------------
# collapse rule


# "unigram level": the validation loss of the training split's add-one unigram model
# (reslab.data.reference), the loss of a model that ignores context
UNIGRAM_LEVEL_TEXT: str = "the unigram level of the data ({entropy:.3f} nats, a context-free count model)"
COLLAPSE_RULE_TEXT: str = (
    "a run is collapsed when its best val loss is within {margin} nats of (or above) the "
    "no-skip variant's mean or " + UNIGRAM_LEVEL_TEXT
)


def unigram_entropy(token_counts) -> float:
    """Unigram entropy in nats: H = -sum_i p_i ln p_i with p_i = c_i / sum(c); zero counts ignored.

    This is the loss of a model that ignores context and predicts the token frequencies.
    """
    c = np.asarray(token_counts, dtype=np.float64).ravel()
    if c.size and (not np.all(np.isfinite(c)) or np.any(c < 0)):
        raise ValueError("unigram_entropy: counts must be finite and non-negative")
    c = c[c > 0]
    if c.size == 0:
        raise ValueError("unigram_entropy: all counts are zero")
    p = c / c.sum()
    return float(-np.sum(p * np.log(p)))


def is_collapsed(
    value: float, no_skip: float | None, unigram_entropy: float | None, margin: float
) -> bool:
    """True when value >= ref - margin for a reference ref in {no_skip, unigram_entropy}.

    That is: the run's value (best val loss, nats) is within `margin` nats of, or above, the
    no-skip variant's value or the unigram level (reports pass the unigram reference level of
    reslab.data.reference; any context-free loss works). A None reference is skipped; with both
    None nothing can be called collapsed (False). Raises ValueError for a NaN value (a
    diverged run is not judged by this rule) or a negative margin; +inf counts as above.
    """
    if math.isnan(value):
        raise ValueError("is_collapsed: value is NaN (diverged run); report it separately")
    if not margin >= 0.0:
        raise ValueError(f"is_collapsed: margin must be >= 0, got {margin}")
    refs = [r for r in (no_skip, unigram_entropy) if r is not None]
    return any(value >= r - margin for r in refs)


def collapse_rule_text(margin: float, entropy: float | None, no_skip_variant: str | None) -> str:
    """The collapse rule as one sentence (COLLAPSE_RULE_TEXT with the given references); `entropy`
    is the unigram level (the parameter keeps its older name).

    The no-skip variant is named when given; a reference that is None (entropy None, or no
    no-skip variant) is left out of the sentence.
    """
    if entropy is not None and no_skip_variant is not None:
        return COLLAPSE_RULE_TEXT.format(margin=margin, entropy=entropy).replace(
            "the no-skip variant's mean", f"the no-skip variant's mean ({no_skip_variant})"
        )
    head = f"a run is collapsed when its best val loss is within {margin} nats of (or above) "
    if no_skip_variant is not None:
        return head + f"the no-skip variant's mean ({no_skip_variant})"
    if entropy is not None:
        return head + UNIGRAM_LEVEL_TEXT.format(entropy=entropy)
    return "no collapse rule applied: neither a no-skip variant nor the unigram level is known"


# --------------------------------------------------------------------------------------------


def perplexity(loss: float | None) -> float | None:
    """Perplexity = exp(loss) for a loss in nats; None for None (inf if exp overflows)."""
    if loss is None:
        return None
    try:
        return float(math.exp(loss))
    except OverflowError:
        return math.inf


def is_result(report: dict) -> bool:
    """Whether a report may state results (tests, p-values, verdicts): its is_result, else the rule
    of its scale (an older report without the key)."""
    if isinstance(report.get("is_result"), bool):
        return report["is_result"]
    return is_result_scale((report.get("spec") or {}).get("scale"))
