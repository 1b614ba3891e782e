"""Equivalence claims: a difference claim with op "within" (|a - b| < c), decided by two one-sided
t-tests (TOST) against -c and +c, checked against scipy's one-sided paired and Welch tests."""

from __future__ import annotations

import pytest
import scipy.stats

from reslab.report import stats
from reslab.report.claims import evaluate_claims
from reslab.spec.claims import parse_claim
from tests.test_claims import REF, claim, one, row

BASE = {1: 2.500, 2: 2.520, 3: 2.490, 4: 2.510}
CLOSE = {1: 2.503, 2: 2.519, 3: 2.496, 4: 2.512}   # a - b: +0.003 -0.001 +0.006 +0.002
FAR = {1: 2.560, 2: 2.590, 3: 2.555, 4: 2.575}     # a - b about +0.065


def within(c=0.02):
    return claim("difference", a="new", b="pre-ln", op="within", threshold=c)


def test_close_pairs_are_equivalent_and_p_is_the_larger_of_the_two_one_sided_tests():
    r = one(within(), [row("pre-ln", BASE), row("new", CLOSE)])
    a = [CLOSE[s] for s in sorted(BASE)]
    b = [BASE[s] for s in sorted(BASE)]
    p_low = scipy.stats.ttest_rel(a, [x - 0.02 for x in b], alternative="greater").pvalue   # D > -c
    p_high = scipy.stats.ttest_rel(a, [x + 0.02 for x in b], alternative="less").pvalue     # D < +c
    assert r["p_for"] == pytest.approx(max(p_low, p_high), rel=1e-9)
    assert r["p_against"] == pytest.approx(min(1 - p_low, 1 - p_high), rel=1e-9)
    assert r["direction"] == "for" and r["verdict"] == "reproduced"
    assert r["claim"] == "|new - pre-ln| < 0.02"
    assert "support within ±0.02" in r["reason"]


def test_a_clear_difference_is_not_equivalent():
    r = one(within(), [row("pre-ln", BASE), row("new", FAR)])
    assert r["direction"] == "against" and r["verdict"] == "not reproduced"
    a = [FAR[s] for s in sorted(BASE)]
    b = [BASE[s] for s in sorted(BASE)]
    p_above = scipy.stats.ttest_rel(a, [x + 0.02 for x in b], alternative="greater").pvalue  # D > +c
    assert r["p_against"] == pytest.approx(p_above, rel=1e-9)


def test_noisy_pairs_are_inconclusive_not_equivalent():
    noisy = {1: 2.45, 2: 2.58, 3: 2.47, 4: 2.55}
    r = one(within(), [row("pre-ln", BASE), row("new", noisy)])
    assert r["verdict"] == "inconclusive"


def test_welch_when_the_seeds_differ_matches_scipy():
    other = {5: 2.503, 6: 2.519, 7: 2.496, 8: 2.512}
    r = one(within(), [row("pre-ln", BASE), row("new", other)])
    a, b = list(other.values()), list(BASE.values())
    p_low = scipy.stats.ttest_ind(a, [x - 0.02 for x in b], equal_var=False, alternative="greater").pvalue
    p_high = scipy.stats.ttest_ind(a, [x + 0.02 for x in b], equal_var=False, alternative="less").pvalue
    assert r["test"].startswith("Welch")
    assert r["p_for"] == pytest.approx(max(p_low, p_high), rel=1e-9)


def test_zero_variance_is_decided_by_the_point_estimate():
    shifted = {s: v + 0.01 for s, v in BASE.items()}
    r = one(within(), [row("pre-ln", BASE), row("new", shifted)])
    assert r["p"] is None and r["verdict"] == "reproduced" and "within ±0.02" in r["reason"]
    r = one(within(0.005), [row("pre-ln", BASE), row("new", shifted)])
    assert r["verdict"] == "not reproduced"


def test_within_joins_the_holm_family():
    cells = [row("pre-ln", BASE), row("new", CLOSE)]
    both = evaluate_claims([within(), claim("difference", "d2", a="new", b="pre-ln", op="<", threshold=0.1)],
                           cells, REF, "tiny")
    alone = one(within(), cells)
    assert both[0]["p_holm"] >= alone["p_holm"]
    assert both[0]["p_holm"] == pytest.approx(min(1.0, 2 * min(both[0]["p"], both[1]["p"]))
                                              if both[0]["p"] <= both[1]["p"] else
                                              max(min(1.0, 2 * both[1]["p"]), both[0]["p"]), rel=1e-9)


@pytest.mark.parametrize("bad, message", [
    (dict(op="within", threshold=0), "\"within\" needs a positive bound (nats)"),
    (dict(op="within", threshold=-0.02), "\"within\" needs a positive bound (nats)"),
    (dict(op="about", threshold=0.02), "expected \"<\", \">\" or \"within\" (|a - b| < threshold)"),
])
def test_bad_within_claims_are_named(bad, message):
    errors: list[str] = []
    parse_claim(claim("difference", a="new", b="pre-ln", **bad), "claims[0]", errors)
    assert len(errors) == 1 and message in errors[0] and errors[0].startswith("claims[0]")


def test_level_claims_still_refuse_within():
    errors: list[str] = []
    parse_claim(claim("level", a="new", reference="bigram", op="within", threshold=0.1), "claims[0]", errors)
    assert errors and "expected \"<\" or \">\"" in errors[0]


def test_a_trend_over_a_rung_too_close_to_bigram_gets_no_verdict():
    """The slope would lean on a rung whose row did not train 0.3 nats below the bigram level."""
    def rungs(variant, means):
        return [row(variant, {s: m + 0.001 * s for s in (1, 2, 3)}, grid={"rung": r}) for r, m in means.items()]
    cells = rungs("pre-ln", {"w64": 1.90, "w128": 1.80, "w256": 1.77}) + rungs("hc", {"w64": 2.30, "w128": 1.84, "w256": 1.78})
    for c in cells:
        c["runs"][1]["best_val_loss"] += 0.0005 * (c["grid"]["rung"] == "w128")  # some spread in the differences
    trend = claim("trend", a="hc", b="pre-ln", op="<", threshold=0.0)
    ladder = {"sizes": {"w64": 196_608, "w128": 786_432, "w256": 3_145_728}, "exponent": 0.0}
    (free,) = evaluate_claims([trend], cells, REF, "tiny", ladder=ladder)
    (held,) = evaluate_claims([trend], cells, REF, "tiny", ladder=ladder,
                              shallow={"hc-rung=w64": "hc-rung=w64 ends 0.180 nats below the bigram level"})
    assert free["verdict"] == "reproduced"
    assert held["verdict"] == "inconclusive" and held["shallow"] == ["hc-rung=w64"]
    assert held["reason"].startswith("hc-rung=w64 ends 0.180 nats below the bigram level: no verdict (the test "
                                     "alone says reproduced")
    (level,) = evaluate_claims([claim("difference", a="hc", b="pre-ln", op=">", threshold=0.0)],
                               cells, REF, "tiny", shallow={"hc-rung=w64": "x"})
    assert "shallow" not in level  # only trends: a difference claim may be about a row that fails


def test_a_difference_between_rows_that_all_end_near_bigram_gets_no_verdict():
    """Two collapsed designs (norm-free's DyT and Derf) differ by noise; a design that collapsed against
    one that trained is the evidence of a claim (Post-LN fails deep), so that verdict stands."""
    collapsed_a = {s: 3.34 + 0.001 * s for s in (1, 2, 3, 4)}
    collapsed_b = {s: 3.30 + 0.002 * s for s in (1, 2, 3, 4)}
    beats = claim("difference", a="derf", b="dyt", op="<", threshold=0.0)
    cells = [row("dyt", collapsed_a), row("derf", collapsed_b), row("pre-ln", BASE)]
    both = {"derf": stats.short_of_regime("derf", -0.86), "dyt": stats.short_of_regime("dyt", -0.85)}
    (free,) = evaluate_claims([beats], cells, REF, "tiny")
    (held,) = evaluate_claims([beats], cells, REF, "tiny", shallow=both)
    assert free["verdict"] == "reproduced"  # the test alone: derf is 0.04 below dyt on every seed
    assert held["verdict"] == "inconclusive" and held["shallow"] == ["derf", "dyt"]
    assert held["reason"].startswith("derf ends 0.860 nats above the bigram level (a verdict needs its mean "
                                     "0.3 below); dyt ends 0.850 nats above")
    assert "no verdict (the test alone says reproduced" in held["reason"]
    assert held["p"] == free["p"]  # the numbers stay
    one_side = claim("difference", a="dyt", b="pre-ln", op=">", threshold=0.0)
    (fails,) = evaluate_claims([one_side], cells, REF, "tiny", shallow=both)
    assert fails["verdict"] == "reproduced" and "shallow" not in fails
    spread = claim("spread", cells=["derf", "dyt"], op="<", threshold=0.5)
    (sp,) = evaluate_claims([spread], cells, REF, "tiny", shallow=both)
    assert sp["verdict"] == "inconclusive" and sp["shallow"] == ["derf", "dyt"]


def test_short_of_regime_says_above_or_below():
    assert stats.short_of_regime("x", 0.123) == ("x ends only 0.123 nats below the bigram level "
                                                 "(a verdict needs 0.3)")
    assert stats.short_of_regime("x", -0.5) == ("x ends 0.500 nats above the bigram level "
                                                "(a verdict needs its mean 0.3 below)")
