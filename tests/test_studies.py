"""Built-in studies: every spec validates and expands to the runs it promises; a study runs end to
end (sweep, store, report) at a micro scale."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from reslab.studies import load_study, study_names
from reslab.spec.expand import expand, with_seeds
from reslab.spec.tune_plan import all_planned, tuning_scales
from tests.train_helpers import write_corpus

# study -> scale -> (runs with the study's default seeds for that scale, variants x grid points)
EXPECTED = {  # tuned cpu scales: tuning runs (rows x values x tuning seeds) + comparison runs (rows x seeds)
    "partial-residual": {"smoke": (5, 5), "cpu": (12, 4), "paper": (24, 8), "paper-124m": (24, 8)},
    "ln-placement": {"smoke": (8, 8), "cpu": (60, 8), "paper": (24, 8)},
    "resi-dual": {"smoke": (18, 18), "cpu": (30, 4), "paper": (54, 18)},
    "prores": {"smoke": (20, 20), "cpu": (68, 8), "paper": (30, 30)},
    "gain-confound": {"smoke": (9, 9), "cpu": (45, 9), "paper": (27, 9)},
    "simplified-blocks": {"smoke": (6, 6), "cpu": (48, 6), "paper": (18, 6)},
    "depth-scaling": {"smoke": (40, 40), "cpu": (64, 10), "paper": (80, 40)},
    "lr-sensitivity": {"smoke": (10, 10), "cpu": (105, 35), "paper": (105, 35)},
    "depth-mixing": {"smoke": (20, 20), "cpu": (74, 10), "paper": (60, 20)},
    "speedrun-skips": {"smoke": (6, 6), "cpu": (54, 6), "paper": (18, 6)},
    "norm-by-init": {"smoke": (12, 12), "cpu": (72, 12), "paper": (36, 12)},
    "norm-free": {"smoke": (18, 18), "cpu": (84, 14), "paper": (54, 18)},
    # ladders: rows = variants x rungs
    "resi-dual-ladder": {"smoke": (6, 6), "cpu": (36, 6), "paper": (18, 6)},
    "hyper-connections-ladder": {"smoke": (6, 6), "cpu": (36, 6), "paper": (18, 6)},
    "mlp-skip-ladder": {"smoke": (6, 6), "cpu": (36, 6), "paper": (18, 6)},
}


def test_the_catalogue_is_the_expected_one():
    assert set(EXPECTED) == set(study_names())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_study_expands_to_the_runs_it_promises(name):
    spec = load_study(name)
    assert spec.question and spec.study and spec.study.source
    assert set(spec.scales) == set(EXPECTED[name])
    for scale, (n_runs, n_rows) in EXPECTED[name].items():
        planned = with_seeds(spec, spec.study.seeds[scale])
        known, after_tuning = all_planned(planned, [scale])  # a tuned scale's comparison runs come later
        assert len(known) + after_tuning == n_runs, scale
        axis = spec.tune.axis if tuning_scales(spec, [scale]) else None
        rows = {(r.variant, json.dumps({k: v for k, v in r.grid.items() if k != axis}, sort_keys=True))
                for r in known}
        assert len(rows) == n_rows, scale
        assert {r.config.model.design for r in known} <= set(spec.study.designs)
        assert spec.study.estimates[scale].runs == n_runs  # the cost estimate is for this plan
        if scale in ("smoke", "cpu"):
            assert all(r.config.train.device == "cpu" for r in known)
        if scale == "cpu":  # an answer needs intervals and tests: at least 3 seeds
            assert spec.study.seeds[scale] >= 3 and "cpu" in (spec.default_scales or [])


def test_partial_residual_paper_scale_is_the_published_setup():
    spec = load_study("partial-residual")
    (ten_m,) = [r for r in expand(with_seeds(spec, 1), ["paper"]) if r.variant == "attn-only"]
    c = ten_m.config
    assert (c.model.n_layer, c.model.n_head, c.model.n_embd, c.model.block_size) == (6, 6, 384, 256)
    assert (c.train.batch_size, c.train.steps, c.train.eval_interval, c.model.dropout) == (64, 3000, 100, 0.2)
    assert (c.optim.lr, c.optim.min_lr, c.optim.warmup_steps, c.optim.beta2) == (3e-4, 3e-5, 100, 0.95)
    assert not c.model.ffn_res and c.model.attn_res and c.model.tie_weights and c.train.eval_mode == "fixed"
    (big,) = [r for r in expand(with_seeds(spec, 1), ["paper-124m"]) if r.variant == "full-nanogpt"]
    b = big.config
    assert (b.model.n_layer, b.model.n_embd, b.model.block_size, b.data.tokenizer) == (12, 768, 1024, "gpt2")
    assert (b.train.batch_size, b.train.grad_accum, b.train.steps, b.optim.warmup_steps) == (16, 8, 20000, 2000)
    assert not b.model.tie_weights and b.train.eval_mode == "random"


def test_a_study_runs_end_to_end_at_micro_scale(tmp_path):
    corpus = write_corpus(tmp_path)
    micro = ["--set", "data.corpus=text", "--set", f"data.path={corpus}", "--set", f"data.cache_dir={tmp_path}",
             "--set", "model.n_layer=1", "--set", "model.n_embd=16", "--set", "model.n_head=2",
             "--set", "model.block_size=16", "--set", "train.steps=4", "--set", "train.eval_interval=2",
             "--set", "train.eval_iters=1", "--set", "train.batch_size=2", "--set", "diagnostics.interval=2"]
    proc = subprocess.run([sys.executable, "-m", "reslab.cli", "study", "run", "partial-residual", "--scale", "smoke", "--seeds", "1",
                           "--jobs", "2", "--store", str(tmp_path / "store"), *micro],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = tmp_path / "store" / "reports" / "partial-residual-smoke"
    assert proc.stdout.strip().splitlines()[-1] == str(out)
    assert "study partial-residual, scale smoke: 5 runs" in proc.stderr
    assert "smoke: not a result" in proc.stderr
    report = json.loads((out / "report.json").read_text())
    rows = {r["variant"] for r in report["table"]}
    assert rows == {"full", "attn-only", "ffn-only", "none", "attn-only-nanogpt"}
    md = (out / "report.md").read_text()
    assert all(f"| {row}" in md for row in rows)
    assert {f["file"] for f in report["figures"]} >= {"val_loss.png", "layer0_grad.png", "hidden_growth.png"}
    assert report["published"] and "study 000" in md
    assert "smoke: not a result" in md and not report["claims"]  # the pipeline only: no verdicts
    # the main job's store read back as data, and two of its rows compared as any runs can be
    import reslab
    from reslab.cli import main

    runs = reslab.load_runs(tmp_path / "store", spec="partial-residual")
    assert set(runs["variant"]) == rows and len(runs) == 5 and (runs["model.n_layer"] == 1).all()
    assert len(reslab.load_curves(tmp_path / "store", spec="partial-residual", metric="val_loss")) >= 5 * 2
    two = runs[runs["variant"].isin(["full", "ffn-only"])]["path"].tolist()
    assert main(["compare", *two, "--by", "model.attn_res", "--store", str(tmp_path / "store"),
                 "--out", str(tmp_path / "cmp")]) == 0
    assert {r["variant"] for r in json.loads((tmp_path / "cmp" / "report.json").read_text())["table"]} == \
        {"attn_res=True", "attn_res=False"}


def test_the_terminal_summary_ends_with_a_line_per_verdict():
    from reslab.cli.study import verdict_lines

    claims = [{"id": "attn-only-near-full", "verdict": "reproduced", "estimate": 0.1312, "ci_low": 0.1201,
               "ci_high": 0.1423, "p_holm": 0.0123},
              {"id": "none-collapses", "verdict": "not tested at this scale", "estimate": None}]
    lines = verdict_lines({"claims": claims})
    assert lines[0].startswith("verdicts on the published claims")
    assert "reproduced" in lines[1] and "attn-only-near-full: estimate +0.1312 [+0.1201, +0.1423], " \
                                           "p (Holm) 0.0123" in lines[1]
    assert lines[2].split() == ["not", "tested", "at", "this", "scale", "none-collapses:", "estimate", "-"]
    assert verdict_lines({"claims": []}) == []
