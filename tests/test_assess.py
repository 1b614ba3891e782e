"""The design card's plan and verdicts (reslab.assess): the card's sweeps share run identities with
the studies whose regimes they use, the claims it generates, and the rules that turn them into
better / worse / equivalent; bad requests are one line each."""

from __future__ import annotations

import pytest

from reslab.assess.card import _three_way, comparison_section, depth_section
from reslab.assess.plan import CardRequest, card_claims, card_specs, check_request
from reslab.errors import ReslabError
from reslab.spec.expand import with_seeds
from reslab.spec.tune_plan import all_planned, tuning_runs
from reslab.studies import load_study


def _ids(spec, scale, variant=None):
    runs = all_planned(spec, [scale])[0] + tuning_runs(spec, [scale])
    return {r.id for r in runs if variant is None or r.variant == variant}


@pytest.mark.parametrize("scale", ["smoke", "cpu"])
def test_the_baselines_are_ln_placements_runs(scale):
    main = card_specs(CardRequest("sas", scale=scale))[0]
    study = load_study("ln-placement")
    study = with_seeds(study, study.study.seeds[scale])
    shared = _ids(main, scale, "pre-ln")
    assert shared and shared <= _ids(study, scale, "pre-ln")
    assert not (_ids(main, scale, "sas") & _ids(study, scale))  # the design's own runs are new


def test_assessing_post_ln_against_pre_ln_plans_exactly_ln_placements_tuning():
    main = card_specs(CardRequest("post-ln", against=("pre-ln",), scale="cpu"))[0]
    study = load_study("ln-placement")
    assert {r.id for r in tuning_runs(main, ["cpu"])} == {r.id for r in tuning_runs(study, ["cpu"])}
    assert [list(r.seeds) for r in main.tune.rows] == [[9001, 9002, 9003]]  # the study's rule for post-ln


def test_the_ladder_is_climbed_at_smoke_by_default_and_on_request():
    assert [s.name for s in card_specs(CardRequest("sas", scale="smoke"))] == ["assess-sas", "assess-sas-ladder"]
    assert [s.name for s in card_specs(CardRequest("sas", scale="cpu"))] == ["assess-sas"]
    specs = card_specs(CardRequest("sas", scale="cpu", ladder=True))
    assert specs[1].ladder is not None and set(specs[1].variants) == {"sas", "pre-ln"}
    hcl = load_study("hyper-connections-ladder")
    assert _ids(specs[1], "cpu", "pre-ln") <= _ids(hcl, "cpu", "pre-ln")


def test_options_make_their_own_card_and_reach_only_the_design():
    req = CardRequest("hyper-connections", overrides={"model": {"options": {"streams": 2}}}, scale="cpu")
    main = card_specs(req)[0]
    assert req.label == "hyper-connections+streams-2" and req.label in main.variants
    runs = tuning_runs(main, ["cpu"])
    assert {r.config.model.options["streams"] for r in runs if r.variant == req.label} == {2}
    assert _ids(main, "cpu", "pre-ln") == _ids(card_specs(CardRequest("sas", scale="cpu"))[0], "cpu", "pre-ln")


def test_default_baseline_and_seeds():
    assert CardRequest("sas").baselines == ("pre-ln",)
    assert CardRequest("pre-ln").baselines == ("post-ln",)
    assert CardRequest("sas", against=("pre-ln", "post-ln")).baselines == ("pre-ln", "post-ln")
    assert list(card_specs(CardRequest("sas", scale="cpu"))[0].seeds) == [1337, 42, 123]
    assert len(card_specs(CardRequest("sas", scale="cpu", seeds=5))[0].seeds) == 5


def test_the_claims_of_a_card():
    ids = [c["id"] for c in card_claims(CardRequest("sas", against=("pre-ln", "post-ln")))]
    assert ids == ["better-than-pre-ln-L4", "equivalent-to-pre-ln-L4", "better-than-pre-ln-L16",
                   "equivalent-to-pre-ln-L16", "better-than-post-ln-L4", "equivalent-to-post-ln-L4",
                   "better-than-post-ln-L16", "equivalent-to-post-ln-L16", "improves-with-depth",
                   "needs-warmup-L16", "warmup-free-L16"]
    within = [c for c in card_claims(CardRequest("sas")) if c["op"] == "within"]
    assert {c["threshold"] for c in within} == {0.02}


@pytest.mark.parametrize("req, message", [
    (CardRequest("no-such-design"), "DESIGN: unknown design 'no-such-design'"),
    (CardRequest("sas", against=("nope",)), "--against: unknown design 'nope'"),
    (CardRequest("sas", against=("sas",)), "--against: sas is the design assessed"),
    (CardRequest("sas", against=("pre-ln", "pre-ln")), "--against: a baseline is named twice"),
    (CardRequest("sas", scale="huge"), "--scale: 'huge' is not a card scale"),
    (CardRequest("sas", overrides={"model": {"design": "pre-ln"}}), "--set model.design"),
])
def test_bad_requests_are_one_line(req, message):
    with pytest.raises(ReslabError) as e:
        check_request(req)
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("overrides, ladder, message", [
    ({"model": {"n_layer": 8}}, False, "--set model.n_layer: the card sets it itself (its depth axis: L4 4, L16 16)"),
    ({"optim": {"lr": 0.01}}, False, "--set optim.lr: the card sets it itself (it tunes it for every row)"),
    ({"optim": {"warmup_steps": 10}}, False, "--set optim.warmup_steps: the card sets it itself (its warmup axis"),
    ({"train": {"steps": 10}}, False, "--set train.steps: every row of a card keeps the regime's budget"),
    ({"data": {"dataset": "x"}}, False, "--set data.dataset: every row of a card keeps the regime's data"),
    ({"model": {"n_embd": 128}}, True, "--set model.n_embd: the card sets it itself (its rung axis: w64 64, w128"),
    # pre-ln with a setting it already has is pre-ln: the card would compare it with its own baseline
    ({"model": {"norm": "layernorm"}}, False, "--set model.norm=layernorm: pre-ln already has these settings"),
])
def test_a_setting_the_card_cannot_honour_is_one_line(overrides, ladder, message):
    with pytest.raises(ReslabError) as e:
        card_specs(CardRequest("pre-ln", overrides=overrides, ladder=ladder))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


@pytest.mark.parametrize("design, overrides, message", [
    # found when the card's spec is parsed (its variants table) ...
    ("pre-ln", {"model": {"bogus": 1}}, "--set model.bogus: unknown key; allowed keys are attn_gate"),
    ("pre-ln", {"model": {"norm": "nonorm"}}, "--set model.norm: 'nonorm' is not allowed"),
    # ... or when its runs are expanded (a design's options, a value checked against the scale's width)
    ("mv-split", {"model": {"options": {"zz": 1}}}, "--set model.options.zz: unknown key; allowed keys are alpha_init"),
    ("mv-split", {"model": {"options": {"alpha_init": "x"}}}, "--set model.options.alpha_init: expected a number"),
    ("pre-ln", {"model": {"options": {"k": 1}}}, "--set model.options: pre-ln has no options of its own"),
    ("pre-ln", {"model": {"n_head": 7}}, "--set model.n_head: 7 heads do not divide n_embd=64"),
])
def test_a_bad_setting_is_named_as_the_set_the_user_wrote(design, overrides, message):
    # not under the card spec's and variant's internal names (assess-pre-ln+bogus-1: variants.pre-ln+...)
    with pytest.raises(ReslabError) as e:
        card_specs(CardRequest(design, overrides=overrides))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)
    assert "more runs" not in str(e.value)


@pytest.mark.parametrize("design, overrides, ladder", [
    ("canon", {"model": {"options": {"points": "ABCD"}}}, False),
    ("canon", {"model": {"options": {"kernel": 4, "residual": True}}}, True),
    ("mv-split", {"model": {"options": {"beta_init": 0.03}}}, False),
])
def test_settings_that_are_the_designs_own_defaults_are_refused(design, overrides, ladder):
    # the same runs as the design's own card, under a name (canon+points-ABCD) a reader takes for another design
    with pytest.raises(ReslabError) as e:
        card_specs(CardRequest(design, overrides=overrides, ladder=ladder))
    assert f"these are {design}'s own settings" in str(e.value) and f"run `reslab assess {design}`" in str(e.value)


def test_settings_that_change_the_design_make_their_own_card():
    from reslab.assess.plan import _design_run_ids

    plain = card_specs(CardRequest("canon"))
    other = card_specs(CardRequest("canon", overrides={"model": {"options": {"points": "AC"}}}))
    assert set(_design_run_ids(plain, "canon", "cpu")).isdisjoint(_design_run_ids(other, "canon+points-AC", "cpu"))


def test_an_error_not_about_a_set_is_kept_where_it_happened():
    from reslab.assess.plan import _as_set_error
    from reslab.errors import ConfigError

    req = CardRequest("pre-ln", overrides={"model": {"norm": "derf"}})
    lines = [f"assess-{req.label}: variant {req.label}, scale cpu, grid {{'depth': 'L16'}}: model.n_layer: too deep",
             f"assess-{req.label}: variants.{req.label}.model.norm: 'derf' is broken",
             "assess-x: variant pre-ln, scale cpu: model.norm: about the baseline"]
    assert _as_set_error(ConfigError(lines), req, f"assess-{req.label}").lines() == [
        lines[0], "--set model.norm: 'derf' is broken", lines[2]]


def test_a_setting_the_ladder_sets_leaves_the_card_and_says_why_it_cannot_climb(tmp_path):
    from reslab.assess.run import card_plan
    from reslab.sweep.store import Store

    req = CardRequest("pre-ln", overrides={"model": {"n_embd": 128}})
    assert len(card_specs(req)) == 1  # 4 and 16 layers at width 128: the card can run
    text = card_plan(req, Store(tmp_path / "store")).text(req, 2)
    assert "not with these settings: --set model.n_embd: the card sets it itself" in "\n".join(text)


@pytest.mark.parametrize("design, overrides, header", [
    ("moda", {}, "assess moda against pre-ln, scale cpu"),
    ("pre-ln", {"model": {"norm": "derf"}},
     "assess pre-ln+norm-derf (pre-ln with --set model.norm=derf) against pre-ln, scale cpu")])
def test_the_plan_header_says_what_a_card_with_settings_is(tmp_path, design, overrides, header):
    # "pre-ln+norm-derf (pre-ln) against pre-ln" read as pre-ln against itself: the settings are spelled out.
    from reslab.assess.run import card_plan
    from reslab.sweep.store import Store

    req = CardRequest(design, overrides=overrides)
    assert card_plan(req, Store(tmp_path / "store")).text(req, 2)[0] == header


@pytest.mark.parametrize("seeds, scale, warned", [
    (1, "cpu", True), (2, "cpu", True), (3, "cpu", False), (None, "cpu", False), (1, "smoke", False)])
def test_the_plan_says_when_too_few_seeds_leave_the_card_without_verdicts(tmp_path, seeds, scale, warned):
    # A card of 1 or 2 seeds trains for most of an hour and can rule on nothing (claims need n >= 3):
    # the plan says so before anything trains. Smoke cards are never results, so they are not warned.
    from reslab.assess.run import card_plan
    from reslab.sweep.store import Store

    req = CardRequest("pre-ln", scale=scale, seeds=seeds)
    lines = [t for t in card_plan(req, Store(tmp_path / "store")).text(req, 2) if t.startswith("  seeds:")]
    expected = [f"  seeds: {seeds} per row; a verdict needs at least 3, so this card will show losses and rule "
                "on nothing (leave --seeds out, or give --seeds 3 or more)"]
    assert lines == (expected if warned else [])


# ---- verdicts --------------------------------------------------------------------------------------
def _claim(verdict, **kw):
    return {"verdict": verdict, "estimate": kw.get("estimate", -0.05), "ci_low": -0.07, "ci_high": -0.03,
            "p_holm": 0.01, "n": 3, "reason": f"because {verdict}"}


@pytest.mark.parametrize("better, same, word", [
    ("reproduced", "inconclusive", "better"),
    ("reproduced", "reproduced", "better"),
    ("not reproduced", "inconclusive", "worse"),
    ("inconclusive", "reproduced", "equivalent"),
    ("inconclusive", "not reproduced", "inconclusive"),
    ("inconclusive", "inconclusive", "inconclusive"),
    ("not tested at this scale", "not tested at this scale", "not tested"),
])
def test_three_way_verdicts(better, same, word):
    assert _three_way(_claim(better), _claim(same)) == word


def _row(name, mean, below):
    return {"variant": name, "n": 3, "best": {"mean": mean, "std": 0.01}, "below_bigram": below,
            "diverged": 0, "extra": {"lr (tuned)": 3e-3}}


def _report(below=0.4, better="reproduced"):
    table = [_row(f"{v}-depth={d}-warmup={w}", 2.0, below) for v in ("sas", "pre-ln")
             for d in ("L4", "L16") for w in ("w100", "none")]
    claims = [dict(_claim(better), id=f"better-than-pre-ln-{d}") for d in ("L4", "L16")]
    claims += [dict(_claim("inconclusive"), id=f"equivalent-to-pre-ln-{d}") for d in ("L4", "L16")]
    claims += [dict(_claim("reproduced"), id="improves-with-depth"), dict(_claim("inconclusive"), id="needs-warmup-L16"),
               dict(_claim("reproduced"), id="warmup-free-L16")]
    return {"table": table, "claims": claims}


def test_a_comparison_gets_its_verdict_and_its_numbers():
    (c4, c16) = comparison_section(CardRequest("sas"), _report(), is_result=True)
    assert (c4["depth"], c4["verdict"], c4["estimate"]) == (4, "better", -0.05)
    assert c4["design_row"]["lr"] == 3e-3 and c16["depth"] == 16


def test_no_verdict_where_a_row_is_not_below_the_bigram_bar():
    (c4, _) = comparison_section(CardRequest("sas"), _report(below=0.2), is_result=True)
    assert c4["verdict"] == "no verdict"
    assert c4["why"] == "sas-depth=L4-warmup=w100 ends only 0.200 nats below the bigram level (a verdict needs 0.3)"


def test_smoke_states_no_verdict():
    (c4, _) = comparison_section(CardRequest("sas"), _report(), is_result=False)
    assert c4["verdict"] == "smoke: not a result"
    assert depth_section(CardRequest("sas"), _report(), is_result=False)["warmup"] == "smoke: not a result"


def test_depth_and_warmup_words():
    d = depth_section(CardRequest("sas"), _report(), is_result=True)
    assert d["depth"].startswith("improves with depth")
    assert d["warmup"].startswith("trains without warmup at 16 layers")
    assert set(d["rows"]) == {"sas", "pre-ln"} and set(d["rows"]["sas"]) == {"L4-w100", "L4-none", "L16-w100", "L16-none"}


def test_the_lr_and_stability_tables_render_from_a_card_read_back_from_json():
    import json

    from reslab.assess.render import _lr_blocks, _stability_blocks

    card = {"lr": {"values": [1e-3, 3e-3], "sensitivity": {"sas": {"mean": 0.12, "rows": 4}}, "cap": 3.35,
                   "rows": [{"name": "sas-depth=L4-warmup=w100", "curve": {1e-3: 2.1, 3e-3: 2.0}, "chosen": 3e-3},
                            {"name": "sas-depth=L16-warmup=w100", "curve": {1e-3: 2.2, 3e-3: None},
                             "no_loss": {3e-3: "diverged"}, "chosen": 1e-3}]},
            "stability": {"rule": "r", "designs": {"sas": {"runs": 2, "diverged": 1, "plateau": 0, "spikes": 3,
                                                           "stable_lrs": [1e-3],
                                                           "by_lr": {1e-3: {"runs": 1, "diverged": 0, "plateau": 0, "spikes": 3},
                                                                     3e-3: {"runs": 1, "diverged": 1, "plateau": 0, "spikes": 0}}}}}}
    for c in (card, json.loads(json.dumps(card))):  # float keys, then the text keys of card.json
        (_, _, table) = _lr_blocks(c)[:3]
        assert table[2] == [["sas-depth=L4-warmup=w100", "2.1000", "2.0000", "0.003"],
                            ["sas-depth=L16-warmup=w100", "2.2000", "diverged", "0.001"]]
        (_, _, stab) = _stability_blocks(c)
        assert stab[2] == [["sas", "2", "1", "0", "3", "0.001", "0.001: 1 run, 3 spikes; 0.003: 1 run, 1 diverged"]]


def test_a_row_worse_than_bigram_is_named_and_said_to_end_above_it():
    (_, c16) = comparison_section(CardRequest("sas"), _report(below=-0.358), is_result=True)
    assert c16["verdict"] == "no verdict"
    assert c16["why"] == ("sas-depth=L16-warmup=w100 ends 0.358 nats above the bigram level "
                          "(a verdict needs its mean 0.3 below)")
    assert depth_section(CardRequest("sas"), _report(below=-0.358), is_result=True)["warmup"] == \
        "no verdict: " + c16["why"]


def test_a_card_with_settings_is_named_by_them_where_that_is_unambiguous():
    def label(**overrides):
        return CardRequest("pre-ln", overrides=overrides).label
    assert label() == "pre-ln"
    assert label(model={"norm": "derf"}) == "pre-ln+norm-derf"
    assert label(model={"options": {"alpha_init": 0.1}}, optim={"weight_decay": 0}) == \
        "pre-ln+alpha_init-0.1+optim.weight_decay-0"
    assert label(model={"attn_gate": "head", "qk_norm": True}) == "pre-ln+attn_gate-head+qk_norm-true"
    # a short hash where a spelled name could stand for two sets of settings, or is not a folder name
    hashed = [label(model={"norm": "2"}),                         # the string "2" would read like 2
              label(model={"options": {"k": [1, 2]}}),            # a list
              label(model={"n_embd": 64, "options": {"n_embd": 3}}),  # both spelled n_embd
              label(model={"norm": "a/b"}),                       # not a folder name
              label(model={"options": {"a_rather_long_option_name": "and_a_long_value_too"}})]
    assert all(h.startswith("pre-ln-") and len(h) == len("pre-ln-") + 6 for h in hashed), hashed
    assert len(set(hashed)) == len(hashed)
    assert label(model={"norm": 2}) != label(model={"norm": "2"})


def test_the_lr_section_says_why_a_rate_has_no_loss():
    from reslab.assess.card import lr_section
    row = {"variant": "fixup", "grid": {"depth": "L16"}, "name": "fixup-depth=L16", "chosen": 3e-3,
           "values": [{"value": 1e-3, "mean": 2.3, "diverged": 0}, {"value": 3e-3, "mean": 2.1, "diverged": 0},
                      {"value": 1e-2, "mean": None, "diverged": 1, "failed": 0},
                      {"value": 3e-2, "mean": None, "diverged": 0, "failed": 0, "unfinished": 1}]}
    section = lr_section({"lr": {"tuning": {"axis": "optim.lr", "values": [1e-3, 3e-3, 1e-2, 3e-2],
                                            "rows": [row]}}}, 3.35)
    assert section["rows"][0]["no_loss"] == {1e-2: "diverged", 3e-2: "unfinished"}


# ---- the plan's estimate counts the design's runs at its own speed -----------------------------------
def _minutes(lines):
    last = [t for t in lines if t.startswith("  estimate: about ")][0]
    return int(last.split("about ")[1].split(" min")[0])


def test_the_estimate_counts_the_designs_runs_at_its_speed(tmp_path):
    # moda's card was planned at "about 44 min" from pre-ln's and post-ln's runs, and moda trains at
    # 0.4-0.7x pre-ln's speed: its runs are now counted at the design's speed (timed by design_speed).
    from reslab.assess.run import card_plan
    from reslab.sweep.store import Store

    req = CardRequest("moda")
    plan = card_plan(req, Store(tmp_path / "store"))
    line = plan.lines[0]
    assert set(line.design_todo) == {"L4", "L16"}
    # 16-layer runs weigh about 4 of the 4-layer ones; the design holds half of the runs left
    assert 3.5 < line.design_todo["L16"] / line.design_todo["L4"] < 4
    assert sum(line.design_todo.values()) == pytest.approx(line.work_left / 2)
    plain = _minutes(plan.text(req, 2))
    half = plan.text(req, 2, speed={"L4": 0.5, "L16": 0.5})
    assert abs(_minutes(half) - 1.5 * plain) <= 1  # the design's half of the work takes twice as long
    assert "  speed: moda trains at 0.50x at 4 layers and 0.50x at 16 layers pre-ln's tokens/s (a few steps " \
           "timed just now); the estimate counts its runs at that speed" in half
    slow_deep = _minutes(plan.text(req, 2, speed={"L4": 1.0, "L16": 0.5}))
    slow_shallow = _minutes(plan.text(req, 2, speed={"L4": 0.5, "L16": 1.0}))
    assert (slow_deep - plain) / (slow_shallow - plain) > 2.5  # a slow 16-layer run costs ~4x a slow 4-layer one


def test_the_design_speed_times_the_design_and_the_first_baseline_at_each_depth(tmp_path, monkeypatch):
    import reslab.assess.cost as cost
    from reslab.assess.run import card_plan, design_speed
    from reslab.sweep.store import Store

    calls = []

    def fake(models, baseline, **kw):
        calls.append((sorted(models), {k: m["n_layer"] for k, m in models.items()}, baseline, kw["threads"]))
        return {"rows": {"moda": {"ratios": {"tokens_per_s_same_round": 0.25 * len(calls)}}}}

    monkeypatch.setattr(cost, "measure_cost", fake)
    monkeypatch.setattr("reslab.sweep.runner.cpu_count", lambda: 4)
    req = CardRequest("moda", against=("post-ln", "pre-ln"))
    plan = card_plan(req, Store(tmp_path / "store"))
    assert design_speed(plan, req, jobs=2) == {"L4": 0.25, "L16": 0.5}
    assert calls == [(["moda", "post-ln"], {"moda": 4, "post-ln": 4}, "post-ln", 2),
                     (["moda", "post-ln"], {"moda": 16, "post-ln": 16}, "post-ln", 2)]
    smoke = CardRequest("moda", scale="smoke")
    assert design_speed(card_plan(smoke, Store(tmp_path / "store")), smoke, jobs=2) is None  # no estimate to correct
    for line in plan.lines:  # the design's runs all finished: nothing left to time for the estimate
        line.design_todo = {depth: 0.0 for depth in line.design_todo}
    assert design_speed(plan, req, jobs=2) is None
    assert len(calls) == 2


# ---- a row whose tuned rate did not hold is tuned again ---------------------------------------------
def _tuning_seeds(spec, scale="cpu"):
    """row name -> its tuning seeds, as planned."""
    from reslab.spec.rows import row_name

    out: dict[str, set] = {}
    for r in tuning_runs(spec, [scale]):
        point = {k: v for k, v in r.grid.items() if k != "optim.lr"}
        out.setdefault(row_name(r.variant, {"depth": point["depth"], "warmup": point["warmup"]}), set()).add(r.seed)
    return out


def test_a_retuned_row_tunes_on_three_seeds_and_every_other_row_keeps_its_runs():
    plain = card_specs(CardRequest("sas", against=("pre-ln", "post-ln")))[0]
    again = card_specs(CardRequest("sas", against=("pre-ln", "post-ln"),
                                   retune=(("sas", "L16", "w100"), ("post-ln", "L16", "none"))))[0]
    before, after = _tuning_seeds(plain), _tuning_seeds(again)
    assert after.pop("sas-depth=L16-warmup=w100") == {9001, 9002, 9003}
    assert before.pop("sas-depth=L16-warmup=w100") == {9001}
    assert after == before  # post-ln without warmup already tunes on 3 seeds (ln-placement's entry): unchanged
    assert before["post-ln-depth=L16-warmup=none"] == {9001, 9002, 9003}
    assert _ids(plain, "cpu") < _ids(again, "cpu")  # runs added, none changed: the store's runs all stay the card's


def test_a_retune_entry_comes_first_and_the_regimes_entry_keeps_its_rows():
    # post-ln at 4 and 16 layers without warmup: ln-placement's one entry takes both; retuning a pre-ln row
    # adds an entry before it, and the regime's entry still takes its rows
    spec = card_specs(CardRequest("post-ln", against=("pre-ln",), retune=(("pre-ln", "L4", "none"),)))[0]
    assert [dict(e.match) for e in spec.tune.rows] == [{"variant": "pre-ln", "depth": "L4", "warmup": "none"},
                                                       {"variant": "post-ln", "warmup": "none"}]


def test_a_regime_entry_left_without_rows_is_dropped_and_its_values_kept():
    from reslab.assess.plan import retune_entries

    data = {"variants": {"sas": {}, "pre-ln": {}},
            "tune": {"seeds": [9001], "values": [1e-3, 1e-2],
                     "rows": [{"match": {"variant": "sas", "depth": "L16"}, "values": [3e-4, 1e-3]}]}}
    retune_entries(data, CardRequest("sas", retune=(("sas", "L16", "w100"), ("sas", "L16", "none"))))
    assert data["tune"]["rows"] == [
        {"match": {"variant": "sas", "depth": "L16", "warmup": w}, "seeds": [9001, 9002, 9003], "values": [3e-4, 1e-3]}
        for w in ("w100", "none")]
    retune_entries(data, CardRequest("sas", retune=(("sas", "L16", "w100"),)))  # already on 3 seeds: unchanged
    assert len(data["tune"]["rows"]) == 2


def _tuning_report(held, chosen=0.01):
    return {"lr": {"tuning": {"seeds": [9001], "rows": [
        {"variant": "sas", "grid": {"depth": "L16", "warmup": "w100"}, "name": "sas-depth=L16-warmup=w100",
         "chosen": chosen, "held": held, "seeds": [9001], "comparison": {"mean": 2.84, "n": 3, "not_beyond": 2}},
        {"variant": "pre-ln", "grid": {"depth": "L16", "warmup": "w100"}, "name": "pre-ln-depth=L16-warmup=w100",
         "chosen": chosen, "held": True, "seeds": [9001]}]}}}


def test_unheld_rows_are_read_from_the_report():
    from reslab.assess.run import unheld_rows

    assert unheld_rows(_tuning_report(held=True)) == {}
    assert unheld_rows(_tuning_report(held=None)) == {}  # nothing to judge yet
    assert unheld_rows(_tuning_report(held=False)) == {("sas", "L16", "w100"): (
        "sas-depth=L16-warmup=w100's tuned rate 0.01 did not hold: its 1 tuning seed(s) learned beyond the bigram "
        "level there, 2 of its 3 comparison runs did not")}


def test_an_unheld_row_is_the_reason_of_its_no_verdict_and_the_headline_says_it():
    from reslab.assess.card import headline

    report = _report(below=-0.358)
    why = "sas-depth=L16-warmup=w100's tuned optim.lr = 0.01 did not hold: 2 of 3 comparison runs did not learn"
    for c in report["claims"]:
        if c["id"].endswith("L16") or c["id"] in ("improves-with-depth", "needs-warmup-L16", "warmup-free-L16"):
            c.update(unheld=["sas-depth=L16-warmup=w100"], verdict="inconclusive",
                     reason=f"{why}: no verdict (the test alone says inconclusive: because)")
    (c4, c16) = comparison_section(CardRequest("sas"), report, is_result=True)
    assert (c16["verdict"], c16["why"]) == ("no verdict", why)
    d = depth_section(CardRequest("sas"), report, is_result=True)
    assert d["depth"] == d["warmup"] == f"no verdict: {why}"
    card = {"comparison": [c4, c16], "is_result": True, "depth": d}
    lines = [l["text"] for l in headline(card)["lines"]]
    assert lines[1].endswith(f"({why})")
    assert lines[2:] == ["no verdict, for the reason given above"] * 2  # the long reason once, not 3 times
    d2 = dict(d, warmup="no verdict: sas-depth=L16-warmup=w100 has no completed run")
    assert headline(dict(card, depth=d2))["lines"][3]["text"] == d2["warmup"]  # a new reason is given whole
    assert lines[0].endswith("(sas-depth=L4-warmup=w100 ends 0.358 nats above the bigram level (a verdict needs its "
                             "mean 0.3 below))")


def test_the_lr_section_names_the_rows_tuned_again():
    from reslab.assess.render import _lr_blocks

    card = {"lr": {"values": [1e-3], "sensitivity": {}, "rows": [{"name": "sas-depth=L16-warmup=w100",
                                                                 "curve": {1e-3: 2.1}, "chosen": 1e-3}],
                   "retuned": {"rows": {"sas-depth=L16-warmup=w100": "its tuned rate 0.01 did not hold"},
                               "seeds": {"sas-depth=L16-warmup=w100": [9001, 9002, 9003]}}}}
    text = _lr_blocks(card)[-1][1]
    assert text.startswith("Tuned again: ") and text.endswith(
        "its tuned rate 0.01 did not hold (tuned again on seeds 9001, 9002, 9003).")


def test_the_main_sweep_is_trained_again_once_with_the_unheld_rows_retuned():
    from reslab.assess.run import main_sweep

    req = CardRequest("sas", against=("pre-ln", "post-ln"))
    spec = card_specs(req)[0]
    post = {"variant": "post-ln", "grid": {"depth": "L16", "warmup": "none"}, "name": "post-ln-depth=L16-warmup=none",
            "chosen": 1e-3, "held": False, "seeds": [9001, 9002, 9003], "comparison": {"n": 3, "not_beyond": 2}}

    def run(reports):
        trained, lines = [], []

        def sweep(s):
            trained.append(s)
            return reports[len(trained) - 1]
        return main_sweep(req, spec, sweep, lines.append), trained, lines

    # every row held: one pass
    (req1, spec1, report1, retuned), trained, lines = run([_tuning_report(held=True)])
    assert (req1, spec1, retuned, len(trained), lines) == (req, spec, {}, 1, [])
    # a row already on three tuning seeds did not hold: nothing to tune again, one pass
    held_not = _tuning_report(held=True)
    held_not["lr"]["tuning"]["rows"].append(post)
    (req2, _, _, retuned), trained, _ = run([held_not])
    assert (req2, retuned, len(trained)) == (req, {}, 1)
    # sas at 16 layers did not hold: a second pass on the respecified sweep, and no third whatever it says
    first = _tuning_report(held=False)
    first["lr"]["tuning"]["rows"].append(post)
    (req3, spec3, report3, retuned), trained, lines = run([first, _tuning_report(held=False)])
    assert len(trained) == 2 and trained[1] is spec3 and report3 is not first
    assert req3.retune == (("post-ln", "L16", "none"), ("sas", "L16", "w100"))
    assert _tuning_seeds(spec3)["sas-depth=L16-warmup=w100"] == {9001, 9002, 9003}
    assert retuned == {"rows": {"sas-depth=L16-warmup=w100": unheld_text()},
                       "seeds": {"sas-depth=L16-warmup=w100": [9001, 9002, 9003]}}
    assert lines == ["assess: " + unheld_text() + "; tuning that row again on 3 seeds"]


def unheld_text():
    return ("sas-depth=L16-warmup=w100's tuned rate 0.01 did not hold: its 1 tuning seed(s) learned beyond the "
            "bigram level there, 2 of its 3 comparison runs did not")
