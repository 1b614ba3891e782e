"""[ladder]: rungs as a grid axis, their sizes and token budgets, shared identities, the checks,
and trend claims' verdicts (the statistics themselves: tests/test_trend_stats.py)."""

from __future__ import annotations

import copy
import io
import json
import math
import os
import signal
import subprocess
import sys

import pytest
import scipy.stats

from reslab.errors import ConfigError
from reslab.model.gpt import GPT
from reslab.report.build import build_report
from reslab.report.claims import evaluate_claims
from reslab.spec.expand import expand
from reslab.spec.ladder import non_embedding_params, rung_sizes, rung_tokens
from reslab.spec.load import parse_spec
from reslab.spec.tune_plan import tuning_runs
from reslab.sweep.runner import run_sweep
from reslab.sweep.store import Store
from reslab.train.config import build_run_config
from tests.kill_helpers import checkpoint_steps, kill_seed, last_step, lock_is_free, status, wait_until
from tests.sweep_helpers import curves, spec_dict, write_spec
from tests.train_helpers import resumed_steps

RUNGS = {"w8": {"model": {"n_embd": 8, "n_head": 2}}, "w16": {"model": {"n_embd": 16, "n_head": 2}},
         "w32": {"model": {"n_embd": 32, "n_head": 2}}}


def ladder_spec(tmp, exponent=0.0, k=2.0, evals=None, **extra) -> dict:
    data = spec_dict(tmp, seeds=(1, 2, 3))
    data["base"]["train"].pop("steps")
    data["ladder"] = {"over": "width", "tokens_per_param": k, "exponent": exponent, "rungs": copy.deepcopy(RUNGS),
                      **extra}
    if evals:
        data["ladder"]["evals"] = evals
    return data


@pytest.mark.parametrize("design,mlp", [("pre-ln", "gelu"), ("resi-dual", "gelu"), ("pre-ln", "swiglu")])
def test_the_size_is_the_blocks_attention_and_mlp_weight_matrices(design, mlp):
    """N = n_layer x (4 d^2 + 2 d h) (3 d h gated) equals the count of the model's 2-D weights
    outside the embeddings, taken from a built model."""
    cfg = build_run_config({"model": {"design": design, "mlp": mlp, "n_layer": 3, "n_embd": 48, "n_head": 4,
                                      "block_size": 16, "vocab_size": 65}})
    counted = sum(p.numel() for n, p in GPT(cfg.model).named_parameters()
                  if p.ndim == 2 and n.startswith("blocks.") and (".attn." in n or ".mlp." in n))
    assert non_embedding_params(cfg) == counted


@pytest.mark.parametrize("exponent", [0.0, 0.5, 1.0])
def test_each_rung_trains_its_token_budget(tmp_path, exponent):
    spec = parse_spec(ladder_spec(tmp_path, exponent=exponent, evals=4))
    sizes = rung_sizes(spec, "")
    assert list(sizes) == ["w8", "w16", "w32"]
    n0 = sizes["w8"]
    runs = expand(spec)
    assert len(runs) == 2 * 3 * 3  # variants x rungs x seeds
    for run in runs:
        n = sizes[run.grid["rung"]]
        tokens = 2.0 * n0 * (n / n0) ** exponent
        per_update = run.config.train.batch_size * run.config.model.block_size * run.config.train.grad_accum
        assert run.config.train.steps == max(1, round(tokens / per_update))
        assert run.config.train.eval_interval == math.ceil(run.config.train.steps / 4)
        assert run.config.model.n_embd == RUNGS[run.grid["rung"]]["model"]["n_embd"]
    assert rung_tokens(spec, "") == pytest.approx({r: 2.0 * n0 * (n / n0) ** exponent for r, n in sizes.items()})
    assert {r.label.split("-s")[0] for r in runs} >= {"full-rung=w8", "none-rung=w32"}


def test_a_rung_shares_its_identity_with_the_same_run_of_a_plain_spec(tmp_path):
    """A run is its config: a study that trained width 16 for the rung's steps has the same run."""
    spec = parse_spec(ladder_spec(tmp_path))
    rung = next(r for r in expand(spec) if r.grid["rung"] == "w16" and r.variant == "full" and r.seed == 2)
    plain = spec_dict(tmp_path, seeds=(2,), steps=rung.config.train.steps)
    plain["base"]["model"].update(n_embd=16, n_head=2)
    other = next(r for r in expand(parse_spec(plain)) if r.variant == "full")
    assert other.id == rung.id
    # and a --set of train.steps wins over the budget (a quick look), changing the identity
    quick = expand(parse_spec(dict(ladder_spec(tmp_path), overrides={"train": {"steps": 3}})))
    assert {r.config.train.steps for r in quick} == {3}
    # a --set batch size keeps the rung's tokens: the updates follow it
    wide = expand(parse_spec(dict(ladder_spec(tmp_path), overrides={"train": {"batch_size": 8}})))
    steps = {r.grid["rung"]: r.config.train.steps for r in expand(spec)}
    assert all(r.config.train.steps == round(steps[r.grid["rung"]] / 2) for r in wide)


BAD = [
    (lambda d: d["ladder"].update(rungs={"w8": d["ladder"]["rungs"]["w8"]}), "ladder.rungs: a ladder needs at least 2 rungs, got 1"),
    (lambda d: d["ladder"].update(rungs={"w32": d["ladder"]["rungs"]["w32"], "w8": d["ladder"]["rungs"]["w8"]}),
     "ladder.rungs: at scale (none) each rung must be larger than the one before"),
    (lambda d: d["ladder"]["rungs"]["w16"].update(train={"steps": 10}),
     "ladder.rungs.w16.train.steps: the ladder sets each rung's train.steps"),
    (lambda d: d["variants"]["none"].update(train={"steps": 10}), "variants.none.train.steps: the ladder sets"),
    (lambda d: d.update(grid={"rung": [1, 2]}), "grid.rung: the ladder's axis is named 'rung'"),
    (lambda d: d["ladder"].update(tokens_per_param=0), "ladder.tokens_per_param: must be in (0, 1e+06], got 0"),
    (lambda d: d["ladder"].update(exponent=3), "ladder.exponent: must be in [0, 2]"),
    (lambda d: d["ladder"].update(evals=0), "ladder.evals: must be at least 1, got 0"),
    (lambda d: d["ladder"]["rungs"]["w16"].update(model={"n_embd": 16, "n_head": 3}), "n_head"),
    (lambda d: d["ladder"].update(scale_rungs={"cpu": ["w8", "w16"]}), "ladder.scale_rungs.cpu: unknown scale"),
    (lambda d: d["ladder"].update(colour="red"), "ladder.colour: unknown key"),
    (lambda d: d.update(claims=[dict(TREND, a={"variant": "full", "rung": "w8"})]),
     "claims[0].a.rung: a trend spans every rung; name no rung"),
    (lambda d: d.update(claims=[dict(TREND, op="within", threshold=0.0)]),
     "claims[0].threshold: \"within\" needs a positive bound"),
    (lambda d: d.update(claims=[dict(TREND, published="=")]), "claims[0].published: expected \"<\" or \">\""),
    (lambda d: d.update(claims=[dict(TREND, op="<=")]), "claims[0].op: expected \"<\", \">\" or \"within\""),
]
TREND = {"id": "t", "statement": "s", "source": "x", "kind": "trend", "a": "none", "b": "full", "op": ">",
         "threshold": 0.0}


@pytest.mark.parametrize("edit,expected", BAD, ids=[b[1][:40] for b in BAD])
def test_a_bad_ladder_is_one_line_naming_its_key(tmp_path, edit, expected):
    data = ladder_spec(tmp_path)
    edit(data)
    with pytest.raises(ConfigError) as e:
        parse_spec(data)
    assert any(expected in line for line in e.value.errors), e.value.errors


def test_a_trend_claim_needs_a_ladder(tmp_path):
    data = spec_dict(tmp_path)
    data["claims"] = [TREND]
    with pytest.raises(ConfigError, match=r"claims\[0\]\.kind: a trend claim needs a \[ladder\]"):
        parse_spec(data)


# ---- trend claims on synthetic cells --------------------------------------------------------------
SIZES = {"w8": 1_000, "w16": 4_000, "w32": 16_000}


def _cells(effects: dict[str, list[float]], base: float = 2.0, status=None) -> list[dict]:
    """Report cells of variants a and b over the rungs: b at `base`, a at base + the effect, per seed."""
    cells = []
    for variant in ("a", "b"):
        for rung, eff in effects.items():
            runs = []
            for seed, e in enumerate(eff, start=1):
                value = base + 0.01 * seed + (e if variant == "a" else 0.0)
                runs.append({"seed": seed, "status": (status or {}).get((variant, rung, seed), "completed"),
                             "best_val_loss": value, "final_val_loss": value, "path": None})
            cells.append({"variant": variant, "grid": {"rung": rung}, "row": f"{variant}-rung={rung}", "runs": runs})
    return cells


def _claim(**kw) -> dict:
    return dict({"id": "trend", "statement": "a's gain grows", "source": "s", "kind": "trend", "a": "a", "b": "b",
                 "op": "<", "threshold": 0.0, "published": "<"}, **kw)


EFFECTS = {"w8": [-0.02, -0.03, -0.025], "w16": [-0.05, -0.045, -0.06], "w32": [-0.08, -0.07, -0.09]}


def test_a_trend_claims_slope_and_p_equal_scipys_on_the_paired_differences():
    (r,) = evaluate_claims([_claim()], _cells(EFFECTS), None, "cpu", ladder={"sizes": SIZES, "exponent": 0.5})
    x = [math.log2(SIZES[rung]) for rung, e in EFFECTS.items() for _ in e]
    y = [v for e in EFFECTS.values() for v in e]
    ref = scipy.stats.linregress(x, y)
    assert r["estimate"] == pytest.approx(ref.slope, abs=1e-12)
    t = ref.slope / ref.stderr
    assert r["p_for"] == pytest.approx(float(scipy.stats.t.cdf(t, len(x) - 2)), rel=1e-9)
    half = scipy.stats.t.ppf(0.975, len(x) - 2) * ref.stderr
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((ref.slope - half, ref.slope + half), abs=1e-12)
    assert r["verdict"] == "reproduced" and r["p_holm"] == r["p"]
    assert r["trend"]["label"] == "the published effect grows with size"
    assert r["trend"]["slope_per_compute_doubling"] == pytest.approx(ref.slope / 1.5)
    assert [p["n"] for p in r["trend"]["points"]] == [3, 3, 3]


def test_trend_claims_join_the_holm_family_and_within_is_an_equivalence():
    flat = {r: [0.001, -0.001, 0.0005] for r in SIZES}
    claims = [_claim(), _claim(id="flat", op="within", threshold=0.02, published=None)]
    cells = _cells(EFFECTS) + [dict(c, variant=c["variant"] + "2", row=c["row"] + "2") for c in _cells(flat)]
    claims[1].update(a="a2", b="b2")
    out = evaluate_claims(claims, cells, None, "cpu", ladder={"sizes": SIZES, "exponent": 0.0})
    p = sorted([out[0]["p"], out[1]["p"]])
    holm = sorted([r["p_holm"] for r in out])
    assert holm == pytest.approx([min(1.0, 2 * p[0]), min(1.0, max(2 * p[0], p[1]))])
    assert out[1]["verdict"] == "reproduced" and out[1]["trend"]["label"] == "stays within +-0.02 per doubling"


def test_a_trend_with_fewer_than_three_seeds_at_a_rung_has_no_verdict():
    status = {("a", "w16", 3): "diverged"}
    (r,) = evaluate_claims([_claim()], _cells(EFFECTS, status=status), None, "cpu",
                           ladder={"sizes": SIZES, "exponent": 0.0})
    assert r["verdict"] == "inconclusive" and r["p"] is None and r["p_holm"] is None
    assert "every rung needs at least 3 seeds" in r["reason"] and "1 pair with a diverged run dropped" in r["reason"]
    # a rung without any pair is named; with one rung left there is no slope at all
    cells = [c for c in _cells(EFFECTS) if c["grid"]["rung"] != "w32"]
    (r,) = evaluate_claims([_claim()], cells, None, "cpu", ladder={"sizes": SIZES, "exponent": 0.0})
    assert "no pair at rung w32" in r["reason"] and r["estimate"] is not None
    (r,) = evaluate_claims([_claim()], [c for c in cells if c["grid"]["rung"] == "w8"], None, "cpu",
                           ladder={"sizes": SIZES, "exponent": 0.0})
    assert r["reason"].startswith("pairs at 1 rung(s): a slope needs at least 2") and r["estimate"] is None


def test_a_trend_without_a_ladder_at_this_scale_is_not_tested():
    (r,) = evaluate_claims([_claim()], _cells(EFFECTS), None, "cpu", ladder=None)
    assert r["verdict"] == "not tested at this scale"


# ---- a ladder sweep end to end -----------------------------------------------------------------
def test_a_ladder_sweep_resumes_after_sigkill_and_its_report_rules_on_the_trend(tmp_path):
    """A 3-rung ladder (2 designs x 3 seeds) trained once without interruption, and once with the
    sweep SIGKILLed while a run of the largest rung is mid-training (observed in its metrics): the
    rerun finishes every run once with the reference's curves, and the report's trend claim is
    the least-squares slope of the per-seed differences read back from the store."""
    data = ladder_spec(tmp_path, k=4.0, evals=4)
    data["base"]["train"]["checkpoint_interval"] = 4
    data["claims"] = [dict(TREND, op="within", threshold=1.0)]
    path = write_spec(tmp_path, data)
    spec = parse_spec(data)
    ref = Store(tmp_path / "ref")
    run_sweep(spec, ref, jobs=2, stream=io.StringIO(), log=lambda *_: None)
    store_dir = tmp_path / "store"
    runs = expand(spec)
    largest = [Store(store_dir).folder_for(r.id, r.label) for r in runs if r.grid["rung"] == "w32"]
    steps = next(r.config.train.steps for r in runs if r.grid["rung"] == "w32")
    cmd = [sys.executable, "-m", "reslab.cli", "sweep", "run", str(path), "--store", str(store_dir), "--jobs", "2"]
    seed, caught = kill_seed(), None
    for target in largest:  # until a kill lands while a run of the largest rung is mid-training
        kill_at = max(2, steps // 2)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: last_step(target) >= kill_at or proc.poll() is not None, f"{target.name} reach {kill_at}",
                   seed)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        wait_until(lambda: lock_is_free(target), "the workers die with the sweep", seed)
        if status(target) == "running" and last_step(target) < steps:
            caught = target
            break
    assert caught is not None, "no kill landed while a run of the largest rung was mid-training"
    resume_from = max(checkpoint_steps(caught), default=0)
    assert resume_from > 0  # checkpoint_interval 4: the rerun has a checkpoint to resume from
    final = subprocess.run(cmd, capture_output=True, text=True)
    assert final.returncode == 0, final.stderr
    ours = {p.name: p for p in (store_dir / "runs").iterdir()}
    theirs = {p.name: p for p in (tmp_path / "ref" / "runs").iterdir()}
    assert ours.keys() == theirs.keys() and len(ours) == 2 * 3 * 3
    for name, folder in ours.items():
        assert curves(folder) == curves(theirs[name]), name
    assert resume_from in resumed_steps((caught / "worker.log").read_text().splitlines())  # it resumed
    store = Store(store_dir)
    report, _ = build_report(store, "demo", probe=False)
    (claim,) = report["claims"]
    index = {(r["variant"], json.loads(r["grid"])["rung"], r["seed"]): r["best_val_loss"] for r in store.runs(spec="demo")}
    sizes = rung_sizes(spec, "")
    x = [math.log2(sizes[rung]) for rung in sizes for s in (1, 2, 3)]
    y = [index[("none", rung, s)] - index[("full", rung, s)] for rung in sizes for s in (1, 2, 3)]
    assert claim["estimate"] == pytest.approx(scipy.stats.linregress(x, y).slope, abs=1e-12)
    section = report["ladder"]
    assert [r["name"] for r in section["rungs"]] == ["w8", "w16", "w32"]
    assert {d["name"] for d in section["designs"]} == {"full", "none"}
    assert all(len(d["points"]) == 3 and d["fit"] is not None for d in section["designs"])
    assert section["effects"][0]["slope"]["slope"] == claim["estimate"]
    assert json.dumps(report)  # the report is stored as JSON


def test_sweep_plan_and_study_list_show_the_rungs(tmp_path, capsys):
    from reslab.cli import main

    data = ladder_spec(tmp_path, exponent=1.0)
    path = write_spec(tmp_path, data)
    assert main(["sweep", "plan", str(path), "--store", str(tmp_path / "store")]) in (0, None)
    err = capsys.readouterr().err
    spec = parse_spec(data)
    sizes, tokens = rung_sizes(spec, ""), rung_tokens(spec, "")
    assert "2 tokens per weight at the smallest rung, tokens proportional to N" in err
    for rung, n in sizes.items():
        updates = round(tokens[rung] / (4 * 32))  # batch 4 x context 32
        assert any(line.split()[:4] == ["rung", rung, "N", "="] and f"{n:,}" in line and f"{updates:,} updates" in line
                   and "6 runs" in line for line in err.splitlines()), (rung, err)
    shares = [int(line.rsplit("(", 1)[1].split("%")[0]) for line in err.splitlines() if "of the ladder's compute" in line]
    assert shares == [round(100 * n * n / sum(m * m for m in sizes.values())) for n in sizes.values()]  # 6 N T, T ~ N
    assert main(["study", "list"]) in (0, None)
    out = capsys.readouterr().out
    assert "ladder:   width (n_embd) at 16 layers" in out
    assert "rungs w32 (196,608 weights), w64 (786,432 weights), w128 (3,145,728 weights)" in out


def test_tune_rows_and_more_seeds_select_rungs_like_grid_points(tmp_path):
    data = ladder_spec(tmp_path)
    data["more_seeds"] = [{"match": {"rung": "w32"}, "seeds": [7, 8]}]
    data["tune"] = {"axis": "optim.lr", "values": [1e-3, 3e-3], "seeds": [9001],
                    "rows": [{"match": {"rung": "w32"}, "values": [3e-4, 1e-3]}]}
    spec = parse_spec(data)
    assert sorted({(r.grid["rung"], r.grid["optim.lr"]) for r in tuning_runs(spec)}) == [
        ("w16", 1e-3), ("w16", 3e-3), ("w32", 3e-4), ("w32", 1e-3), ("w8", 1e-3), ("w8", 3e-3)]
    tuned = {("", v, json.dumps({"rung": r}, sort_keys=True)): 1e-3 for v in ("full", "none") for r in RUNGS}
    seeds = {(r.grid["rung"], r.seed) for r in expand(spec, tuned=tuned)}
    assert {s for rung, s in seeds if rung == "w32"} == {1, 2, 3, 7, 8}
    assert {s for rung, s in seeds if rung != "w32"} == {1, 2, 3}
    data["more_seeds"][0]["match"] = {"rung": "w64"}
    with pytest.raises(ConfigError, match="more_seeds\\[0\\].match.rung: 'w64' is not a point of the named grid "
                                          "axis rung; points are w8, w16, w32"):
        parse_spec(data)
