"""[[claims]]: the spec check (one line per problem, at its path) and the verdicts, with every
number checked against scipy's own tests and intervals (a different route from claims.py's)."""

from __future__ import annotations

import math
import re
import tomllib
from types import SimpleNamespace

import pytest
import scipy.stats

from reslab.errors import ConfigError
from reslab.report import claims as claims_mod
from reslab.report.claims import claim_blocks, evaluate_claims
from reslab.spec import claims as spec_claims
from reslab.spec.claims import check_claims
from reslab.spec.load import parse_spec

REF = {"unigram": 3.35, "bigram": 2.48}


def runs(values: dict, status: dict | None = None, metric_nan: tuple = ()) -> list[dict]:
    status = status or {}
    out = []
    for seed, v in values.items():
        v = math.nan if seed in metric_nan else v
        out.append({"seed": seed, "status": status.get(seed, "completed"), "best_val_loss": v,
                    "final_val_loss": None if v is None else v + 0.01})
    return out


def row(variant: str, values: dict, grid: dict | None = None, **kw) -> dict:
    grid = grid or {}
    name = "-".join([variant] + [f"{k.rsplit('.', 1)[-1]}={v}" for k, v in grid.items()])
    return {"variant": variant, "grid": grid, "row": name, "runs": runs(values, **kw)}


def claim(kind: str, cid: str = "c", **kw) -> dict:
    return {"id": cid, "statement": "a sentence", "source": "seed 000, table 1", "kind": kind, **kw}


def one(c: dict, cells: list[dict], reference=REF, scale="tiny") -> dict:
    (r,) = evaluate_claims([c], cells, reference, scale)
    return r


A = {1: 2.55, 2: 2.58, 3: 2.56}
B = {1: 2.50, 2: 2.52, 3: 2.49}


# ---------------------------------------------------------------------------- difference


def test_paired_difference_supported_matches_scipy():
    r = one(claim("difference", a="attn-only", b="full", op="<", threshold=0.15),
            [row("full", B), row("attn-only", A)])
    d = [A[s] - B[s] for s in (1, 2, 3)]
    want = scipy.stats.ttest_rel([A[s] for s in (1, 2, 3)], [B[s] + 0.15 for s in (1, 2, 3)],
                                 alternative="less")
    assert r["test"] == "paired t" and r["n"] == 3
    assert r["estimate"] == pytest.approx(0.06, abs=1e-12)
    assert r["p_for"] == pytest.approx(want.pvalue, rel=1e-9)
    assert r["p_against"] == pytest.approx(1 - want.pvalue, rel=1e-9)
    assert r["p"] == r["p_for"] and r["direction"] == "for"
    assert r["p_holm"] == pytest.approx(want.pvalue, rel=1e-9)  # the only claim: Holm changes nothing
    lo, hi = scipy.stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert (r["ci_low"], r["ci_high"]) == (pytest.approx(lo, rel=1e-9), pytest.approx(hi, rel=1e-9))
    assert r["verdict"] == "reproduced"
    assert "attn-only - full = +0.0600" in r["reason"] and "< 0.05" in r["reason"]
    assert r["rows"] == [["attn-only"], ["full"]]


def test_difference_contradicted_is_not_reproduced():
    # the claim says attn-only is better (a - b < 0); every seed says it is worse
    r = one(claim("difference", a="attn-only", b="full", op="<", threshold=0.0),
            [row("full", B), row("attn-only", A)])
    want = scipy.stats.ttest_rel(list(A.values()), list(B.values()), alternative="greater")
    assert r["direction"] == "against"
    assert r["p"] == pytest.approx(want.pvalue, rel=1e-9)
    assert r["verdict"] == "not reproduced" and "contradict" in r["reason"]


def test_difference_with_noise_is_inconclusive():
    a = {1: 2.50, 2: 2.60, 3: 2.45}
    b = {1: 2.52, 2: 2.50, 3: 2.49}
    r = one(claim("difference", a="x", b="y", op="<", threshold=0.0), [row("x", a), row("y", b)])
    want = scipy.stats.ttest_rel(list(a.values()), list(b.values()), alternative="greater")
    assert r["p"] == pytest.approx(want.pvalue, rel=1e-9) and r["p"] > 0.05
    assert r["verdict"] == "inconclusive" and ">= 0.05" in r["reason"]


def test_welch_when_the_seed_sets_differ():
    b = {1: 2.50, 2: 2.52, 3: 2.49, 4: 2.55}
    r = one(claim("difference", a="x", b="y", op=">", threshold=0.01), [row("x", A), row("y", b)])
    want = scipy.stats.ttest_ind(list(A.values()), [v + 0.01 for v in b.values()], equal_var=False,
                                 alternative="greater")
    assert r["test"].startswith("Welch t")
    assert r["p_for"] == pytest.approx(want.pvalue, rel=1e-9)
    ci = scipy.stats.ttest_ind(list(A.values()), list(b.values()), equal_var=False).confidence_interval(0.95)
    assert r["ci_low"] == pytest.approx(ci.low, rel=1e-9) and r["ci_high"] == pytest.approx(ci.high, rel=1e-9)
    assert r["estimate"] == pytest.approx(sum(A.values()) / 3 - sum(b.values()) / 4, rel=1e-12)


def test_diverged_pairs_are_dropped_and_counted():
    a = {**A, 4: 9.0, 5: 2.57}
    b = {**B, 4: 2.51, 5: 2.50}
    r = one(claim("difference", a="x", b="y", op="<", threshold=0.15),
            [row("x", a, status={4: "diverged"}), row("y", b, metric_nan=(5,))])
    kept = [a[s] - b[s] for s in (1, 2, 3)]
    assert r["n"] == 3 and r["estimate"] == pytest.approx(sum(kept) / 3, rel=1e-12)
    assert "2 seed pairs with a diverged run dropped" in r["reason"]
    want = scipy.stats.ttest_1samp(kept, 0.15, alternative="less")
    assert r["p_for"] == pytest.approx(want.pvalue, rel=1e-9)


def test_fewer_than_three_pairs_give_no_p_and_no_verdict():
    r = one(claim("difference", a="x", b="y", op="<", threshold=0.15),
            [row("x", {1: 2.55, 2: 2.58}), row("y", {1: 2.50, 2: 2.52})])
    assert r["p"] is None and r["p_holm"] is None and r["verdict"] == "inconclusive"
    assert r["reason"].startswith("n = 2 < 3")
    assert r["estimate"] == pytest.approx(0.055, abs=1e-12)


def test_zero_variance_is_decided_by_the_point_estimate():
    a, b = {1: 1.5, 2: 2.5, 3: 3.5}, {1: 1.0, 2: 2.0, 3: 3.0}  # every difference exactly 0.5
    r = one(claim("difference", a="x", b="y", op="<", threshold=0.15), [row("x", a), row("y", b)])
    assert r["p"] is None and r["verdict"] == "not reproduced"
    assert "zero variance" in r["reason"] and "point estimate" in r["reason"]
    r = one(claim("difference", a="x", b="y", op=">", threshold=0.15), [row("x", a), row("y", b)])
    assert r["verdict"] == "reproduced"


def test_holm_runs_over_the_claims_with_a_p():
    cells = [row("full", B), row("attn-only", A), row("ffn-only", {1: 3.35, 2: 3.34, 3: 3.352}),
             row("two", {1: 2.0, 2: 2.1})]
    cs = [claim("difference", "d", a="attn-only", b="full", op="<", threshold=0.15),
          claim("level", "l", a="ffn-only", reference="unigram", op=">", threshold=-0.1),
          claim("difference", "n2", a="two", b="full", op="<", threshold=0.0),  # n = 2: no p, not in Holm
          claim("fails", "f", a="ffn-only")]
    out = {r["id"]: r for r in evaluate_claims(cs, cells, REF, "tiny")}
    p1 = scipy.stats.ttest_rel(list(A.values()), [v + 0.15 for v in B.values()], alternative="less").pvalue
    p2 = scipy.stats.ttest_1samp([3.35 - 3.35, 3.34 - 3.35, 3.352 - 3.35], -0.1, alternative="greater").pvalue
    lo, hi = sorted([p1, p2])
    by_hand = {lo: 2 * lo, hi: max(2 * lo, hi)}  # m = 2: the smaller times 2, then the larger, monotone
    assert out["d"]["p_holm"] == pytest.approx(by_hand[p1], rel=1e-9)
    assert out["l"]["p_holm"] == pytest.approx(by_hand[p2], rel=1e-9)
    assert out["n2"]["p_holm"] is None and out["f"]["p_holm"] is None


def test_a_claim_on_a_row_whose_tuned_rate_did_not_hold_gets_no_verdict():
    collapsed = {1: 3.351, 2: 3.352, 3: 3.350}
    cells = [row("full", B), row("attn-only", A), row("linear", collapsed)]
    cs = [claim("difference", "d", a="attn-only", b="full", op="<", threshold=0.15),
          claim("difference", "cliff", a="linear", b="full", op="<", threshold=0.0),
          claim("fails", "f", a="linear")]
    plain = {r["id"]: r for r in evaluate_claims(cs, cells, REF, "tiny")}
    why = "linear's tuned optim.lr = 0.01 did not hold"
    out = {r["id"]: r for r in evaluate_claims(cs, cells, REF, "tiny", {"linear": why})}
    assert plain["cliff"]["verdict"] == "not reproduced" and plain["f"]["verdict"] == "reproduced"
    for cid in ("cliff", "f"):  # the test's numbers stay; its verdict is named in the reason
        assert out[cid]["verdict"] == "inconclusive"
        assert out[cid]["reason"].startswith(why)
        assert f"the test alone says {plain[cid]['verdict']}" in out[cid]["reason"]
        assert out[cid]["estimate"] == plain[cid]["estimate"] and out[cid]["p_holm"] == plain[cid]["p_holm"]
    assert out["d"] == plain["d"]  # a claim on other rows is untouched
    assert out["cliff"]["unheld"] == ["linear"]
    assert claims_mod.verdict_text(out["cliff"]) == "inconclusive (a tuned rate did not hold)"
    assert claims_mod.verdict_text(plain["cliff"]) == "not reproduced"


def test_unnamed_axes_are_pooled_and_named_ones_are_inherited():
    grid = [{"convention": "tied"}, {"convention": "untied"}]
    cells = [row("full", B, grid[0]), row("full", {1: 2.40, 2: 2.41, 3: 2.45}, grid[1]),
             row("attn-only", A, grid[0]), row("attn-only", {1: 2.49, 2: 2.47, 3: 2.50}, grid[1])]
    r = one(claim("difference", a="attn-only", b="full", op="<", threshold=0.15), cells)
    d = [0.05, 0.06, 0.07, 0.09, 0.06, 0.05]
    assert r["n"] == 6 and r["estimate"] == pytest.approx(sum(d) / 6, rel=1e-9)
    assert scipy.stats.ttest_1samp(d, 0.15, alternative="less").pvalue == pytest.approx(r["p_for"], rel=1e-6)
    # b names no convention: it takes a's
    r = one(claim("difference", a={"variant": "attn-only", "convention": "untied"}, b="full", op="<",
                  threshold=0.15), cells)
    assert r["n"] == 3 and r["rows"] == [["attn-only-convention=untied"], ["full-convention=untied"]]


def test_grid_axis_by_last_component_and_same_variant_two_points():
    cells = [row("post-ln", {1: 3.3, 2: 3.2, 3: 3.4}, {"model.n_layer": 16, "optim.warmup_steps": 0}),
             row("post-ln", {1: 2.3, 2: 2.25, 3: 2.31}, {"model.n_layer": 16, "optim.warmup_steps": 100}),
             row("post-ln", {1: 2.0, 2: 2.0, 3: 2.1}, {"model.n_layer": 4, "optim.warmup_steps": 0})]
    r = one(claim("difference", a={"variant": "post-ln", "n_layer": 16, "warmup_steps": 0},
                  b={"variant": "post-ln", "optim": {"warmup_steps": 100}}, op=">", threshold=0.0), cells)
    d = [1.0, 0.95, 1.09]
    assert r["estimate"] == pytest.approx(sum(d) / 3, rel=1e-9)
    assert r["p_for"] == pytest.approx(scipy.stats.ttest_1samp(d, 0.0, alternative="greater").pvalue, rel=1e-6)
    assert r["verdict"] == "reproduced"


# ---------------------------------------------------------------------------- level


def test_level_against_a_number_and_the_final_loss():
    vals = {1: 2.20, 2: 2.25, 3: 2.18, 4: 2.22}
    r = one(claim("level", a="x", reference=2.48, op="<", threshold=-0.2, metric="final_val_loss"),
            [row("x", vals)])
    final = [v + 0.01 - 2.48 for v in vals.values()]  # the helper's final loss is best + 0.01
    want = scipy.stats.ttest_1samp(final, -0.2, alternative="less")
    assert r["test"] == "one-sample t" and r["n"] == 4
    assert r["estimate"] == pytest.approx(sum(final) / 4, rel=1e-9)
    assert r["p_for"] == pytest.approx(want.pvalue, rel=1e-9)
    assert r["verdict"] == "reproduced"


def test_level_without_the_reference_cannot_be_judged():
    r = one(claim("level", a="x", reference="bigram", op="<", threshold=0.0), [row("x", A)],
            reference={"unigram": 3.35})
    assert r["verdict"] == "inconclusive" and "no bigram level" in r["reason"] and r["p"] is None


# ---------------------------------------------------------------------------- spread


def test_spread_with_bonferroni_intervals():
    g = {"g1": {1: 2.4673, 2: 2.4701, 3: 2.4660},
         "r2": {1: 2.4680, 2: 2.4705, 3: 2.4671},
         "r4": {1: 2.4669, 2: 2.4699, 3: 2.4668}}
    cells = [row(k, v) for k, v in g.items()]
    r = one(claim("spread", cells=list(g), op="<", threshold=0.004), cells)
    bounds = []
    for x, y in (("g1", "r2"), ("g1", "r4"), ("r2", "r4")):
        ci = scipy.stats.ttest_rel(list(g[x].values()), list(g[y].values())).confidence_interval(1 - 0.05 / 3)
        bounds.append((ci.low, ci.high))
    upper = max(max(abs(lo), abs(hi)) for lo, hi in bounds)
    lower = max(max(lo, -hi, 0.0) for lo, hi in bounds)
    means = [sum(v.values()) / 3 for v in g.values()]
    assert r["estimate"] == pytest.approx(max(means) - min(means), rel=1e-9)
    assert r["ci_low"] == pytest.approx(lower, abs=1e-12) and r["ci_high"] == pytest.approx(upper, rel=1e-9)
    assert upper < 0.004 and r["verdict"] == "reproduced"
    assert r["p"] is None and r["p_holm"] is None and "not in the Holm correction" in r["reason"]
    # a threshold the pair intervals straddle: inconclusive; one below every interval: not reproduced
    assert one(claim("spread", cells=list(g), op="<", threshold=upper * 0.9), cells)["verdict"] == "inconclusive"
    far = cells + [row("r8", {1: 2.60, 2: 2.61, 3: 2.62})]
    r = one(claim("spread", cells=list(g) + ["r8"], op="<", threshold=0.002), far)
    assert r["verdict"] == "not reproduced" and r["test"].endswith("over 6 pairs")


def test_spread_needs_three_seeds_per_cell():
    r = one(claim("spread", cells=["x", "y"], op="<", threshold=0.1),
            [row("x", A), row("y", {1: 2.5, 2: 2.6})])
    assert r["verdict"] == "inconclusive" and r["reason"].startswith("n = 2 < 3")


# ---------------------------------------------------------------------------- fails / trains


def test_fails_counts_divergence_and_the_bigram_level():
    cells = [row("post-ln", {1: 9.0, 2: 2.50, 3: 3.3}, status={1: "diverged"}),
             row("mixed", {1: 2.1, 2: 2.6, 3: 2.2}),
             row("pre-ln", {1: 2.1, 2: 2.2, 3: 2.15, 4: 2.3}, status={4: "failed"})]
    r = one(claim("fails", a="post-ln"), cells)
    assert r["verdict"] == "reproduced" and r["estimate"] == 1.0 and r["n"] == 3 and r["p"] is None
    # exact interval for 3 of 3: [(0.025)^(1/3), 1]
    assert r["ci_low"] == pytest.approx(0.025 ** (1 / 3), rel=1e-9) and r["ci_high"] == pytest.approx(1.0)
    assert one(claim("trains", a="post-ln"), cells)["verdict"] == "not reproduced"
    assert one(claim("fails", a="mixed"), cells)["verdict"] == "inconclusive"
    r = one(claim("trains", a="pre-ln"), cells)  # the crashed run is not counted either way
    assert r["verdict"] == "reproduced" and r["n"] == 3 and "not completed" in r["reason"]
    assert one(claim("fails", a="pre-ln"), cells)["verdict"] == "not reproduced"
    r = one(claim("fails", a="post-ln"), [row("post-ln", {1: 9.0, 2: 9.0}, status={1: "diverged", 2: "diverged"})])
    assert r["verdict"] == "inconclusive" and r["reason"].startswith("n = 2 < 3")


# ---------------------------------------------------------------------------- scope


def test_scales_and_untested_cells():
    cells = [row("full", B), {"variant": "none", "grid": {}, "row": "none", "runs": []}]
    cs = [claim("fails", "paper-only", a="full", scales=["paper"]),
          claim("fails", "no-runs", a="none"),
          claim("fails", "absent", a="ghost")]
    out = evaluate_claims(cs, cells, REF, "tiny")
    assert [r["id"] for r in out] == ["no-runs", "absent"]
    assert all(r["verdict"] == "not tested at this scale" for r in out)
    assert "no run of none" in out[0]["reason"]


def test_a_malformed_claim_is_reported_not_raised():
    (r,) = evaluate_claims([{"id": "x", "kind": "difference", "a": "full"}], [row("full", B)], REF, "tiny")
    assert r["verdict"] == "inconclusive" and r["reason"].startswith("the claim is malformed: claims[0]")


# ---------------------------------------------------------------------------- blocks


def test_claim_blocks_table_smoke_and_empty():
    out = evaluate_claims([claim("difference", a="attn-only", b="full", op="<", threshold=0.15)],
                          [row("full", B), row("attn-only", A)], REF, "tiny")
    blocks = claim_blocks({"spec": {"scale": "tiny"}, "claims": out})
    assert blocks[0] == ("h2", "Published claims and verdicts")
    kind, headers, body, align = blocks[1]
    assert kind == "table" and len(headers) == len(align) == 9 and headers[-2:] == ["verdict", "reason"]
    assert body[0][0] == "c" and body[0][3] == "+0.0600" and body[0][7] == "reproduced"
    assert blocks[2][0] == "p" and "Holm" in blocks[2][1]
    assert claim_blocks({"spec": {"scale": "smoke"}, "claims": out}) == [("p", "smoke: not a result; no verdicts")]
    assert claim_blocks({"spec": {"scale": "tiny"}, "claims": []}) == []


# ---------------------------------------------------------------------------- the spec check


def _spec(claims: list[dict]) -> dict:
    return {"name": "s", "seeds": [1, 2, 3], "baseline": "pre-ln",
            "variants": {"pre-ln": {"model": {"design": "pre-ln"}}, "post-ln": {"model": {"design": "post-ln"}}},
            "scales": {"tiny": {"train": {"steps": 5}}, "paper": {"train": {"steps": 10}}},
            "grid": {"depth": {"L4": {"model": {"n_layer": 4}}, "L16": {"model": {"n_layer": 16}}},
                     "optim.warmup_steps": [0, 100]},
            "claims": claims}


def errors_of(claims: list[dict]) -> list[str]:
    with pytest.raises(ConfigError) as e:
        parse_spec(_spec(claims))
    return e.value.errors


def test_valid_claims_parse():
    spec = parse_spec(_spec([
        claim("difference", "a", a={"variant": "post-ln", "depth": "L16", "warmup_steps": 0},
              b={"variant": "post-ln", "warmup_steps": 100}, op=">", threshold=0.0),
        claim("level", "b", a="post-ln", reference="unigram", op=">", threshold=-0.1, scales=["tiny"]),
        claim("spread", "c", cells=["pre-ln", "post-ln"], op="<", threshold=0.002, metric="final_val_loss"),
        claim("trains", "d", a={"variant": "pre-ln", "optim.warmup_steps": 0})]))
    assert [c["id"] for c in spec.claims] == ["a", "b", "c", "d"]


@pytest.mark.parametrize("bad, line", [
    (claim("diff"), "spec: claims[0].kind: unknown kind 'diff'; kinds are difference, level, spread, fails, trains"),
    ({"id": "x", "statement": "s", "source": "x"}, "spec: claims[0].kind: required"),
    (claim("difference", a="pre-ln", op="<", threshold=0), "spec: claims[0].b: required for kind 'difference'"),
    (claim("difference", a="pre-lm", b="post-ln", op="<", threshold=0),
     "spec: claims[0].a.variant: unknown variant 'pre-lm'; variants are post-ln, pre-ln"),
    (claim("fails", a={"variant": "post-ln", "n_layer": 16}),
     'spec: claims[0].a.n_layer: unknown grid axis; axes are depth, optim.warmup_steps '
     '(n_layer is set by the named axis depth: write depth = "L16")'),
    (claim("fails", a={"variant": "post-ln", "depth": "L8"}),
     "spec: claims[0].a.depth: 'L8' is not a point of the named grid axis depth; points are L4, L16"),
    (claim("fails", a={"variant": "post-ln", "warmup_steps": 50}),
     "spec: claims[0].a.warmup_steps: 50 is not a value of grid axis optim.warmup_steps; values are 0, 100"),
    (claim("level", a="pre-ln", reference="trigram", op="<", threshold=0),
     'spec: claims[0].reference: expected "unigram", "bigram" or a number (nats), got \'trigram\''),
    (claim("spread", cells=["pre-ln"], op="<", threshold=0.1),
     "spec: claims[0].cells: a spread needs a list of at least 2 cells, got ['pre-ln']"),
    (claim("level", a="pre-ln", reference="bigram", op="<=", threshold=0), "spec: claims[0].op: expected"),
    (claim("level", a="pre-ln", reference="bigram", op="<", threshold="low"),
     "spec: claims[0].threshold: expected a finite number (nats), got 'low'"),
    (claim("fails", a="pre-ln", op="<"), "spec: claims[0].op: unknown key for kind 'fails'"),
    (claim("fails", a="pre-ln", scales=["huge"]), "spec: claims[0].scales[0]: unknown scale 'huge'; scales are paper, tiny"),
    (claim("fails", a="pre-ln", metric="loss"), "spec: claims[0].metric: 'loss' is not allowed"),
    (claim("difference", a="pre-ln", b="pre-ln", op="<", threshold=0),
     "spec: claims[0].b: the same cell as a (pre-ln); a claim compares different cells"),
    (claim("spread", cells=[{"variant": "pre-ln", "depth": "L4"}, {"variant": "post-ln", "depth": "L16"}, "pre-ln"],
           op="<", threshold=0.1), "spec: claims[0]: some cells name depth with different values (L4, L16)"),
    ({**claim("fails", a="pre-ln"), "statement": ""}, "spec: claims[0].statement: expected a non-empty string"),
])
def test_bad_claims_give_one_line_at_their_path(bad, line):
    errs = errors_of([bad])
    assert any(e.startswith(line) for e in errs), errs
    assert all(e.startswith("spec: claims[0]") for e in errs), errs


def test_a_claim_names_the_values_of_its_own_scales_grid():
    """[scale_grid] replaces [grid] at a scale: a claim for that scale may name its values, and a
    claim for another scale may not."""
    data = _spec([claim("fails", "p", a={"variant": "post-ln", "warmup_steps": 400}, scales=["paper"])])
    data["scale_grid"] = {"paper": {"depth": data["grid"]["depth"], "optim.warmup_steps": [0, 400]}}
    assert [c["id"] for c in parse_spec(data).claims] == ["p"]
    data["claims"] = [claim("fails", "t", a={"variant": "post-ln", "warmup_steps": 400}, scales=["tiny"])]
    with pytest.raises(ConfigError) as e:
        parse_spec(data)
    assert e.value.errors == ["spec: claims[0].a.warmup_steps: 400 is not a value of grid axis "
                              "optim.warmup_steps; values are 0, 100"]
    data["claims"] = [claim("fails", "any", a={"variant": "post-ln", "warmup_steps": 400})]  # no scales: any grid
    assert [c["id"] for c in parse_spec(data).claims] == ["any"]


def test_duplicate_ids_and_every_problem_at_once():
    errs = errors_of([claim("fails", "x", a="pre-ln"),
                      claim("fails", "x", a="ghost", scales=["huge"])])
    assert "spec: claims[1].id: duplicate id 'x' (also claims[0])" in errs
    assert any(e.startswith("spec: claims[1].a.variant: unknown variant 'ghost'") for e in errs)
    assert any(e.startswith("spec: claims[1].scales[0]: unknown scale") for e in errs)


def test_claims_on_a_spec_file_are_one_line_each_not_a_traceback(tmp_path):
    import subprocess
    import sys

    import tomli_w

    data = _spec([claim("difference", a="pre-ln", op="<", threshold=0)])
    data["base"] = {"model": {"n_layer": 1, "n_embd": 16, "n_head": 2}}
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(data))
    proc = subprocess.run([sys.executable, "-c", "import sys; from reslab.cli import main; sys.exit(main())",
                           "sweep", "plan", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"{path}: claims[0].b: required for kind 'difference'" in proc.stderr


def test_the_docstring_examples_are_valid_claims():
    doc = spec_claims.__doc__
    blocks = re.findall(r"\n    # [^\n]*\n((?:    [^\n]*\n)+?)(?=\n)", doc.split("Decision rules")[0])
    text = "\n".join("\n".join(line[4:] for line in b.splitlines()) for b in blocks)
    found = tomllib.loads(text)["claims"]
    assert len(found) == 7
    assert {c["kind"] for c in found} == set(spec_claims.KINDS) - {"trains"} | {"fails"}
    spec = SimpleNamespace(
        claims=found, scales={"tiny": {}, "paper": {}}, scale_grid={},
        ladder=SimpleNamespace(rungs={"w32": {}, "w64": {}}, scale_rungs={}),  # the trend example's rungs
        variants={v: {} for v in ("full", "attn-only", "ffn-only", "post-ln", "g1", "runtime-0.25",
                                  "runtime-0.5", "runtime-2", "runtime-4", "resi-dual", "pre-ln", "gated")},
        grid={"depth": {"L4": {}, "L16": {}}, "warmup": {"none": {}, "w100": {}}, "model.n_layer": [4, 24]})
    errs: list[str] = []
    check_claims(spec, errs)
    assert errs == []
