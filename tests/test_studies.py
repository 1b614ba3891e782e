"""Built-in studies: every spec validates and expands to the runs it promises; a study runs end to
end (sweep, store, report) at a micro scale."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from reslab.studies import load_study, study_names
from reslab.sweep.spec import expand, with_seeds
from tests.train_helpers import write_corpus

# study -> scale -> (runs with the study's default seeds for that scale, variants x grid points)
EXPECTED = {
    "partial-residual": {"tiny": (16, 8), "paper": (24, 8), "paper-124m": (24, 8)},
    "ln-placement": {"tiny": (16, 8), "paper": (24, 8)},
    "resi-dual": {"tiny": (18, 18), "paper": (54, 18)},
    "prores": {"tiny": (20, 20), "paper": (30, 30)},
    "gain-confound": {"tiny": (9, 9), "paper": (27, 9)},
    "simplified-blocks": {"tiny": (12, 6), "paper": (18, 6)},
    "depth-scaling": {"tiny": (40, 40), "paper": (80, 40)},
}


def test_the_catalogue_is_the_expected_one():
    assert set(EXPECTED) == set(study_names())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_study_expands_to_the_runs_it_promises(name):
    spec = load_study(name)
    assert spec.question and spec.study and spec.study.source
    assert set(spec.scales) == set(EXPECTED[name])
    for scale, (n_runs, n_rows) in EXPECTED[name].items():
        runs = expand(with_seeds(spec, spec.study.seeds[scale]), [scale])
        assert len(runs) == n_runs, scale
        assert len({(r.variant, json.dumps(r.grid, sort_keys=True)) for r in runs}) == n_rows
        assert {r.config.model.design for r in runs} <= set(spec.study.designs)
        assert spec.study.estimates[scale].runs == n_runs  # the cost estimate is for this plan
        if scale == "tiny":
            assert all(r.config.train.device == "cpu" for r in runs)


def test_partial_residual_paper_scale_is_the_published_setup():
    spec = load_study("partial-residual")
    (ten_m,) = [r for r in expand(with_seeds(spec, 1), ["paper"]) if r.variant == "attn-only"
                and r.grid["convention"] == "residualgpt"]
    c = ten_m.config
    assert (c.model.n_layer, c.model.n_head, c.model.n_embd, c.model.block_size) == (6, 6, 384, 256)
    assert (c.train.batch_size, c.train.steps, c.train.eval_interval, c.model.dropout) == (64, 3000, 100, 0.2)
    assert (c.optim.lr, c.optim.min_lr, c.optim.warmup_steps, c.optim.beta2) == (3e-4, 3e-5, 100, 0.95)
    assert not c.model.ffn_res and c.model.attn_res and c.model.tie_weights and c.train.eval_mode == "fixed"
    (big,) = [r for r in expand(with_seeds(spec, 1), ["paper-124m"]) if r.variant == "full"
              and r.grid["convention"] == "nanogpt"]
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
    proc = subprocess.run([sys.executable, "-m", "reslab.cli", "study", "run", "partial-residual", "--seeds", "1",
                           "--jobs", "2", "--store", str(tmp_path / "store"), *micro],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = tmp_path / "store" / "reports" / "partial-residual-tiny"
    assert proc.stdout.strip().splitlines()[-1] == str(out)
    assert "study partial-residual, scale tiny: 8 runs" in proc.stderr
    report = json.loads((out / "report.json").read_text())
    rows = {r["variant"] for r in report["table"]}
    assert rows == {f"{v}-convention={c}" for v in ("full", "attn-only", "ffn-only", "none")
                    for c in ("residualgpt", "nanogpt")}
    md = (out / "report.md").read_text()
    assert all(f"| {row}" in md for row in rows)
    assert {f["file"] for f in report["figures"]} >= {"val_loss.png", "layer0_grad.png", "hidden_growth.png"}
    assert report["published"] and "study 000" in md
