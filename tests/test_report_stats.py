"""Tests of reslab.report.stats against numbers computed by a different route (by hand, or with
a different scipy/numpy function than the one the module uses)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.stats

from reslab.report.stats import (
    COLLAPSE_RULE_TEXT,
    collapse_rule_text,
    compare,
    holm,
    is_collapsed,
    median_interval,
    perplexity,
    summarize,
    t_interval,
    unigram_entropy,
)

BASE = {0: 3.10, 1: 3.05, 2: 3.20, 3: 3.12}
OTHER = {0: 3.00, 1: 2.98, 2: 3.15, 3: 3.01}


# ---------------------------------------------------------------------------------- summarize


def test_summarize_matches_scipy_t_interval():
    xs = [3.10, 3.05, 3.20, 3.12, 2.99]
    s = summarize(xs)
    mean = float(np.mean(xs))
    sem = float(scipy.stats.sem(xs))  # std(ddof=1)/sqrt(n)
    lo, hi = scipy.stats.t.interval(0.95, len(xs) - 1, loc=mean, scale=sem)
    assert s["n"] == 5
    assert s["mean"] == pytest.approx(mean, rel=1e-12)
    assert s["std"] == pytest.approx(float(np.std(xs, ddof=1)), rel=1e-12)
    assert s["ci_low"] == pytest.approx(lo, rel=1e-12)
    assert s["ci_high"] == pytest.approx(hi, rel=1e-12)
    assert s["values"] == xs
    assert all(type(s[k]) is float for k in ("mean", "std", "ci_low", "ci_high"))


def test_t_interval_other_level_and_small_n():
    lo, hi = t_interval(10.0, 2.0, 4, level=0.90)
    elo, ehi = scipy.stats.t.interval(0.90, 3, loc=10.0, scale=2.0 / math.sqrt(4))
    assert (lo, hi) == pytest.approx((elo, ehi), rel=1e-12)
    with pytest.raises(ValueError):
        t_interval(10.0, 2.0, 1)


def test_summarize_two_values_has_std_but_no_interval():
    s = summarize([1.0, 2.0])
    assert s["n"] == 2
    assert s["mean"] == 1.5
    assert s["std"] == pytest.approx(math.sqrt(0.5))  # ((0.5^2 + 0.5^2) / 1) ** 0.5
    assert s["ci_low"] is None and s["ci_high"] is None


def test_summarize_one_and_zero_values():
    one = summarize([2.5])
    assert one["n"] == 1 and one["mean"] == 2.5
    assert one["std"] is None and one["ci_low"] is None and one["ci_high"] is None
    zero = summarize([])
    assert zero["n"] == 0
    assert zero["mean"] is None and zero["std"] is None and zero["ci_low"] is None
    assert zero["values"] == []


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_summarize_rejects_non_finite(bad):
    with pytest.raises(ValueError, match="non-finite"):
        summarize([1.0, bad, 2.0])


# ------------------------------------------------------------------------------------ compare


def test_compare_same_seeds_is_paired_and_matches_hand_computation():
    r = compare(BASE, OTHER)
    assert r["test"] == "paired"
    d = np.array([OTHER[s] - BASE[s] for s in sorted(BASE)])
    n = len(d)
    mean_d, sd_d = d.mean(), d.std(ddof=1)
    t = mean_d / (sd_d / math.sqrt(n))
    p = 2 * scipy.stats.t.sf(abs(t), n - 1)
    j = 1 - 3 / (4 * (n - 1) - 1)
    assert r["t"] == pytest.approx(t, rel=1e-9)
    assert r["t"] < 0  # other is lower: sign is other - baseline
    assert r["p"] == pytest.approx(p, rel=1e-9)
    assert r["df"] == n - 1
    assert r["hedges_g"] == pytest.approx(j * mean_d / sd_d, rel=1e-9)
    mb, mo = np.mean(list(BASE.values())), np.mean(list(OTHER.values()))
    assert r["diff"] == pytest.approx(mo - mb, rel=1e-9)
    assert r["diff_pct"] == pytest.approx(100 * (mo - mb) / mb, rel=1e-9)
    assert r["n_baseline"] == 4 and r["n_other"] == 4
    assert r["note"] is None


def test_compare_paired_ignores_dict_order():
    shuffled = {s: OTHER[s] for s in (3, 1, 0, 2)}
    assert compare(BASE, shuffled)["t"] == pytest.approx(compare(BASE, OTHER)["t"], rel=1e-12)


def _hand_welch(b, o):
    b, o = np.asarray(b, float), np.asarray(o, float)
    nb, no = len(b), len(o)
    vb, vo = b.var(ddof=1) / nb, o.var(ddof=1) / no
    t = (o.mean() - b.mean()) / math.sqrt(vb + vo)
    df = (vb + vo) ** 2 / (vb**2 / (nb - 1) + vo**2 / (no - 1))
    p = 2 * scipy.stats.t.sf(abs(t), df)
    sp = math.sqrt(((nb - 1) * b.var(ddof=1) + (no - 1) * o.var(ddof=1)) / (nb + no - 2))
    g = (1 - 3 / (4 * (nb + no) - 9)) * (o.mean() - b.mean()) / sp
    return t, df, p, g


@pytest.mark.parametrize(
    "base, other",
    [
        ({0: 3.10, 1: 3.05, 2: 3.20}, {3: 3.00, 4: 2.98, 5: 3.15, 6: 3.01}),  # disjoint seeds
        ({0: 3.10, 1: 3.05, 2: 3.20}, {0: 3.00, 1: 2.98, 2: 3.15, 3: 3.01}),  # partial overlap
        ({0: 3.10, 1: 3.05, 2: 3.20, 3: 3.12}, {0: 3.00, 1: 2.98, 2: 3.15}),  # subset
    ],
)
def test_compare_different_or_partial_seeds_is_welch(base, other):
    r = compare(base, other)
    assert r["test"] == "welch"
    t, df, p, g = _hand_welch(list(base.values()), list(other.values()))
    assert r["t"] == pytest.approx(t, rel=1e-9)
    assert r["df"] == pytest.approx(df, rel=1e-9)
    assert r["p"] == pytest.approx(p, rel=1e-9)
    assert r["hedges_g"] == pytest.approx(g, rel=1e-9)
    # the df also agrees with scipy's own Welch result
    ref = scipy.stats.ttest_ind(list(other.values()), list(base.values()), equal_var=False)
    assert r["df"] == pytest.approx(float(ref.df), rel=1e-9)
    assert r["note"] is None


def test_compare_result_is_json_serializable_plain_floats():
    for r in (compare(BASE, OTHER), compare({0: 1.0, 1: 1.5, 2: 1.2}, {5: 2.0, 6: 2.4})):
        json.dumps(r)
        for k in ("diff", "diff_pct", "t", "p", "df", "hedges_g"):
            assert type(r[k]) is float, (k, type(r[k]))


def test_compare_zero_variance_paired_gives_note_and_no_p():
    base = {0: 1.0, 1: 2.0, 2: 3.0}
    other = {s: v + 0.5 for s, v in base.items()}
    r = compare(base, other)
    assert r["test"] == "paired"
    assert r["p"] is None and r["t"] is None and r["df"] is None and r["hedges_g"] is None
    assert isinstance(r["note"], str) and r["note"]
    assert r["diff"] == pytest.approx(0.5)
    assert r["diff_pct"] == pytest.approx(25.0)


def test_compare_zero_variance_welch_gives_note_and_no_p():
    r = compare({0: 1.0, 1: 1.0}, {2: 2.0, 3: 2.0})
    assert r["test"] == "welch"
    assert r["p"] is None and r["t"] is None and r["hedges_g"] is None
    assert r["note"]
    assert r["diff"] == pytest.approx(1.0) and r["diff_pct"] == pytest.approx(100.0)


def test_compare_too_few_values():
    r = compare({0: 1.0}, {1: 2.0, 2: 2.5})
    assert r["test"] == "welch"
    assert r["p"] is None and r["df"] is None and r["note"]
    assert r["diff"] == pytest.approx(1.25)
    # one shared seed only: no pairing possible, no test
    r1 = compare({0: 1.0}, {0: 2.0})
    assert r1["test"] == "welch" and r1["p"] is None and r1["note"]
    assert r1["diff"] == pytest.approx(1.0)
    # an empty side: no diff either
    r0 = compare({}, {0: 2.0, 1: 3.0})
    assert r0["diff"] is None and r0["diff_pct"] is None and r0["p"] is None and r0["note"]


def test_compare_rejects_non_finite():
    with pytest.raises(ValueError):
        compare({0: 1.0, 1: float("nan")}, {0: 1.0, 1: 2.0})


# --------------------------------------------------------------------------------------- holm


def test_holm_hand_worked_example_with_monotonicity():
    # sorted: d=0.005, a=0.01, c=0.03, b=0.04 ; m = 4 (e is None, not counted)
    # raw:    4*0.005=0.02, 3*0.01=0.03, 2*0.03=0.06, 1*0.04=0.04
    # monotone running max: 0.02, 0.03, 0.06, 0.06  (b raised from 0.04 to 0.06)
    adj = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005, "e": None})
    assert list(adj) == ["a", "b", "c", "d", "e"]
    assert adj["d"] == pytest.approx(0.02)
    assert adj["a"] == pytest.approx(0.03)
    assert adj["c"] == pytest.approx(0.06)
    assert adj["b"] == pytest.approx(0.06)
    assert adj["e"] is None


def test_holm_caps_at_one_and_handles_ties():
    adj = holm({"x": 0.6, "y": 0.7})
    assert adj == {"x": 1.0, "y": 1.0}  # 2*0.6 -> 1 ; max(1, 0.7) -> 1
    one = holm({"y": 0.02, "x": 0.02, "z": 0.5})
    two = holm({"x": 0.02, "z": 0.5, "y": 0.02})
    assert one == two
    # 3*0.02 = 0.06, then max(0.06, 2*0.02=0.04) = 0.06, then max(0.06, 0.5) = 0.5
    assert one["x"] == pytest.approx(0.06) and one["y"] == pytest.approx(0.06)
    assert one["z"] == pytest.approx(0.5)
    assert holm({}) == {} and holm({"a": None}) == {"a": None}


# --------------------------------------------------------------------------- collapse, entropy


def test_unigram_entropy_literal():
    expected = -(0.25 * math.log(0.25) * 2 + 0.5 * math.log(0.5))
    assert unigram_entropy([1, 1, 2]) == pytest.approx(expected, rel=1e-12)
    assert unigram_entropy(np.array([0, 1, 0, 1, 2])) == pytest.approx(expected, rel=1e-12)
    assert unigram_entropy([7, 7]) == pytest.approx(0.6931471805599453, rel=1e-12)  # ln 2
    with pytest.raises(ValueError):
        unigram_entropy([0, 0])


@pytest.mark.parametrize(
    "value, no_skip, entropy, expected",
    [
        (2.96, 3.0, 5.0, True),  # within margin below the no-skip value
        (3.20, 3.0, 5.0, True),  # above the no-skip value
        (2.90, 3.0, 5.0, False),  # clearly better than both references
        (4.96, None, 5.0, True),  # within margin of the entropy, no no-skip reference
        (5.50, None, 5.0, True),  # above the entropy
        (4.90, None, 5.0, False),
        (2.96, None, 5.0, False),  # near where no-skip would be, but it is absent
        (2.96, 3.0, None, True),
        (2.90, 3.0, None, False),
        (9.00, None, None, False),  # no reference at all
    ],
)
def test_is_collapsed(value, no_skip, entropy, expected):
    assert is_collapsed(value, no_skip, entropy, margin=0.05) is expected


def test_is_collapsed_boundary_and_far_above():
    # exactly `margin` below a reference counts as collapsed ("within margin", inclusive)
    assert is_collapsed(2.5, 3.0, None, margin=0.5) is True
    assert is_collapsed(2.25, 3.0, None, margin=0.5) is False
    assert is_collapsed(3.5, None, 4.0, margin=0.5) is True
    assert is_collapsed(1000.0, 3.0, 5.0, margin=0.0) is True
    assert is_collapsed(float("inf"), 3.0, None, margin=0.0) is True


def test_is_collapsed_rejects_nan():
    with pytest.raises(ValueError):
        is_collapsed(float("nan"), 3.0, 5.0, 0.05)


def test_collapse_rule_text():
    full = collapse_rule_text(0.05, 4.12345, "noskip")
    assert "0.05 nats" in full and "4.123 nats" in full and "noskip" in full
    assert full.startswith("a run is collapsed when its best val loss is within")
    no_entropy = collapse_rule_text(0.1, None, "noskip")
    assert "0.1 nats" in no_entropy and "noskip" in no_entropy and "entropy" not in no_entropy
    no_variant = collapse_rule_text(0.1, 2.5, None)
    assert "2.500 nats" in no_variant and "no-skip" not in no_variant
    assert "the unigram level of the data" in full and "the unigram level of the data" in no_variant
    assert collapse_rule_text(0.1, None, None).startswith("no collapse rule applied")
    assert "{" not in COLLAPSE_RULE_TEXT.format(margin=0.1, entropy=2.5)


# ---------------------------------------------------------------------------------- perplexity


def test_perplexity():
    assert perplexity(None) is None
    assert perplexity(0.0) == 1.0
    assert perplexity(math.log(20.0)) == pytest.approx(20.0, rel=1e-12)


def test_two_pairs_give_a_paired_test_but_no_effect_size():
    r = compare({1: 1.0, 2: 2.0}, {1: 1.5, 2: 2.7})
    d = np.array([0.5, 0.7])
    t = d.mean() / (d.std(ddof=1) / math.sqrt(2))
    assert r["test"] == "paired" and r["t"] == pytest.approx(t, rel=1e-9)
    assert r["p"] == pytest.approx(2 * scipy.stats.t.sf(abs(t), 1), rel=1e-9)
    assert r["hedges_g"] is None and "3 seed pairs" in r["note"]


# ---------------------------------------------------------------------------------- median_interval
def _coverage(n: int, k: int) -> float:
    """P(X_(k) <= median <= X_(n+1-k)) by counting: 1 - 2 sum_{i<k} C(n, i) / 2^n."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n


@pytest.mark.parametrize("n, level, k", [(11, 0.95, 2), (11, 0.90, 3), (17, 0.95, 5), (6, 0.95, 1), (40, 0.99, 12)])
def test_median_interval_takes_the_order_statistics_of_the_wanted_coverage(n, level, k):
    assert _coverage(n, k) >= level > _coverage(n, k + 1)  # k by hand: the largest that still covers
    values = [float(v) for v in np.random.default_rng(n).permutation(np.arange(10, 10 + n))]
    assert median_interval(values, level) == (10.0 + k - 1, 10.0 + n - k)


def test_median_interval_is_none_with_too_few_values_and_refuses_bad_input():
    assert _coverage(5, 1) < 0.95 and median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None
    assert median_interval([]) is None
    with pytest.raises(ValueError, match="non-finite"):
        median_interval([1.0, float("nan")] * 4)
    with pytest.raises(ValueError, match="level"):
        median_interval([1.0] * 8, level=1.0)
