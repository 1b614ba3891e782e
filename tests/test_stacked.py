"""Stacked seeds (reslab/train/stacked.py): K seeds in one process are the same computation as K
separate runs, seed by seed: losses, gradient norms, clipping, AdamW moments, evaluations,
diagnostics, divergence, checkpoints and resume."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from reslab.config import ModelConfig
from reslab.errors import ReslabError
from reslab.model.gpt import GPT
from reslab.model.registry import DESIGNS
from reslab.train import loop as loop_mod
from reslab.train import stacked as stacked_mod
from reslab.train.loop import train, train_stacked
from reslab.train.stacked import clip_per_seed, member_view, stack_key, stack_parameters

from .conftest import CPU_ONLY_FALLBACK, slow_vmap_ops
from .train_helpers import (LogLines, curve_rows, interrupt_before_update, metric_rows, resumed_steps, tiny_config,
                            train_curve, train_losses, val_losses, write_corpus)

SEEDS = (1, 2, 3)
QUIET = dict(log=lambda *_: None)


def _metrics(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _configs(tmp_path, **overrides):
    corpus = write_corpus(tmp_path)
    base = {"model.dropout": 0.0, **overrides}
    return [tiny_config(corpus, tmp_path / "cache", **{**base, "train.seed": s}) for s in SEEDS]


def _assert_same_curves(a, b, rel=1e-4):
    # the same rows in the same file order first: the dicts below would hide a duplicated step
    assert [(r["step"], sorted(r)) for r in metric_rows(a)] == [(r["step"], sorted(r)) for r in metric_rows(b)]
    ta, tb = train_losses(a), train_losses(b)
    assert sorted(ta) == sorted(tb)
    for step in ta:
        assert ta[step] == pytest.approx(tb[step], rel=rel, abs=rel), (a.name, step)
    va, vb = val_losses(a), val_losses(b)
    assert sorted(va) == sorted(vb)
    for step in va:
        assert va[step] == pytest.approx(vb[step], rel=rel, abs=rel), (a.name, step)
    ga = {r["step"]: r["grad_norm"] for r in _metrics(a) if "grad_norm" in r}
    gb = {r["step"]: r["grad_norm"] for r in _metrics(b) if "grad_norm" in r}
    for step in ga:
        assert ga[step] == pytest.approx(gb[step], rel=1e-3, abs=1e-4), (a.name, step)


@pytest.mark.parametrize("overrides", [
    {},
    {"model.design": "resi-dual"},                                   # two streams
    {"model.design": "sas-p", "train.steps": 20},                    # shaped attention, learned scalars
    {"model.prores": "linear", "model.prores_warmup": 4, "train.steps": 20},   # alphas change every step
    {"model.tie_weights": False, "train.grad_accum": 2, "train.steps": 20},
    {"model.norm": "dyt", "model.bias": False, "model.dyt_alpha_attn": 0.8, "model.dyt_alpha_mlp": 0.2,
     "model.embed_scale": "learned", "train.steps": 20},              # 0-d parameters: alphas, the scale
], ids=["pre-ln", "resi-dual", "sas-p", "prores", "untied+accum", "dyt-llama"])
def test_each_stacked_seed_equals_its_separate_run(tmp_path, overrides):
    cfgs = _configs(tmp_path, **overrides)
    results = train_stacked(cfgs, [tmp_path / f"stacked{s}" for s in SEEDS], **QUIET)
    for cfg, s in zip(cfgs, SEEDS):
        train(cfg, tmp_path / f"separate{s}", **QUIET)
    assert [r.status for r in results] == ["completed"] * 3
    for s in SEEDS:
        _assert_same_curves(tmp_path / f"stacked{s}", tmp_path / f"separate{s}")
    # the seeds really differ (different init and data order), so equality above is per seed
    finals = [train_losses(tmp_path / f"stacked{s}")[cfgs[0].train.steps] for s in SEEDS]
    assert len({round(f, 4) for f in finals}) == 3
    # status.json and config.json as a separate run writes them, plus who it was stacked with
    status = json.loads((tmp_path / "stacked1" / "status.json").read_text())
    assert status["status"] == "completed" and status["stacked"] == 3
    assert sorted(status["stacked_with"]) == ["stacked2", "stacked3"]
    # stacked seeds compute with batched kernels: the record says so (its numbers match separate
    # runs to a tolerance, not bit for bit)
    assert [e["stacked"] for e in status["arithmetic"]] == [3] and status["arithmetic"][0]["from_step"] == 0
    for s in SEEDS:
        assert json.loads((tmp_path / f"stacked{s}" / "config.json").read_text())["config"] == \
            json.loads((tmp_path / f"separate{s}" / "config.json").read_text())["config"]


def test_final_weights_and_adamw_moments_match_per_seed(tmp_path):
    cfgs = _configs(tmp_path, **{"train.steps": 20})
    train_stacked(cfgs, [tmp_path / f"stacked{s}" for s in SEEDS], **QUIET)
    for cfg, s in zip(cfgs, SEEDS):
        train(cfg, tmp_path / f"separate{s}", **QUIET)
        a = tmp_path / f"stacked{s}" / "checkpoints" / "step_00000020"
        b = tmp_path / f"separate{s}" / "checkpoints" / "step_00000020"
        for name in ("model.safetensors", "optimizer.safetensors"):
            ta, tb = load_file(str(a / name)), load_file(str(b / name))
            assert sorted(ta) == sorted(tb), name
            for key in ta:
                assert ta[key].shape == tb[key].shape, key
                assert torch.allclose(ta[key], tb[key], rtol=1e-3, atol=1e-5), (s, name, key)
        sa, sb = (json.loads((p / "state.json").read_text()) for p in (a, b))
        assert sa["param_groups"] == sb["param_groups"] and sa["step"] == sb["step"] == 20


def test_clip_per_seed_is_clip_grad_norm_per_seed():
    torch.manual_seed(0)
    shapes = [(5, 3), (7,), (2, 2, 2)]
    scales = [0.01, 1.0, 30.0, 0.3]  # some seeds below the clip, some far above
    grads = [torch.stack([torch.randn(s) * c for c in scales]) for s in shapes]
    expected_norms, expected = [], []
    for k in range(len(scales)):
        params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
        for p, g in zip(params, grads):
            p.grad = g[k].clone()
        expected_norms.append(float(torch.nn.utils.clip_grad_norm_(params, 1.0)))
        expected.append([p.grad for p in params])
    norms = clip_per_seed(grads, 1.0)
    assert torch.allclose(norms, torch.tensor(expected_norms), rtol=1e-6)
    for k in range(len(scales)):
        for g, e in zip(grads, expected[k]):
            assert torch.allclose(g[k], e, rtol=1e-6, atol=1e-9)
    # max_norm inf: norms reported, nothing scaled
    before = [g.clone() for g in grads]
    clip_per_seed(grads, float("inf"))
    assert all(torch.equal(a, b) for a, b in zip(before, grads))


def test_one_seed_diverges_the_others_finish_unchanged(tmp_path):
    cfgs = _configs(tmp_path, **{"train.steps": 20})
    cfgs[1] = cfgs[1].replace(train=cfgs[1].train.__class__(**{**cfgs[1].train.__dict__, "nan_at_step": 7}))
    results = train_stacked(cfgs, [tmp_path / f"stacked{s}" for s in SEEDS], **QUIET)
    assert [r.status for r in results] == ["completed", "diverged", "completed"]
    assert results[1].step == 8
    status = json.loads((tmp_path / "stacked2" / "status.json").read_text())
    assert status["status"] == "diverged" and status["step"] == 8
    assert max(train_losses(tmp_path / "stacked2")) == 7  # nothing logged after the divergence
    for i in (0, 2):
        train(cfgs[i], tmp_path / f"separate{SEEDS[i]}", **QUIET)
        _assert_same_curves(tmp_path / f"stacked{SEEDS[i]}", tmp_path / f"separate{SEEDS[i]}")


def test_killed_stack_resumes_exactly(tmp_path, monkeypatch):
    """A crash three updates after the step-10 checkpoints, then a rerun: it says it resumed from 10,
    and every run's metrics.jsonl equals an uninterrupted stack's, row by row in file order."""
    cfgs = _configs(tmp_path)
    train_stacked(cfgs, [tmp_path / f"whole{s}" for s in SEEDS], **QUIET)

    real_lr = interrupt_before_update(monkeypatch, loop_mod, 13)
    outs = [tmp_path / f"resumed{s}" for s in SEEDS]
    with pytest.raises(KeyboardInterrupt):
        train_stacked(cfgs, outs, **QUIET)
    monkeypatch.setattr(loop_mod, "learning_rate", real_lr)
    assert train_curve(outs[0])[-1][0] == 13
    log = LogLines()
    results = train_stacked(cfgs, outs, log=log)
    assert [r.status for r in results] == ["completed"] * 3
    assert resumed_steps(log) == [10], log
    for s in SEEDS:
        assert curve_rows(tmp_path / f"resumed{s}") == curve_rows(tmp_path / f"whole{s}"), s


def test_a_stacked_checkpoint_resumes_as_a_separate_run(tmp_path, monkeypatch):
    """Checkpoints are per run and in the ordinary format: one seed of a killed stack finishes alone."""
    cfgs = _configs(tmp_path)
    real_save, saves = stacked_mod.save_checkpoint, []

    def crash_at_step_20(*args, **kwargs):
        out = real_save(*args, **kwargs)
        saves.append(args[1])
        if len(saves) == 6:
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(stacked_mod, "save_checkpoint", crash_at_step_20)
    with pytest.raises(KeyboardInterrupt):
        train_stacked(cfgs, [tmp_path / f"stacked{s}" for s in SEEDS], **QUIET)
    result = train(cfgs[0], tmp_path / "stacked1", **QUIET)
    assert result.status == "completed"
    train(cfgs[0], tmp_path / "separate1", **QUIET)
    _assert_same_curves(tmp_path / "stacked1", tmp_path / "separate1")
    assert json.loads((tmp_path / "stacked1" / "status.json").read_text())["stacked"] is None


def test_diagnostics_per_seed_match_separate_runs(tmp_path):
    cfgs = _configs(tmp_path, **{"train.steps": 10, "train.eval_interval": 5})
    cfgs = [c.replace(diagnostics=c.diagnostics.__class__(**{**c.diagnostics.__dict__, "enabled": True,
                                                                 "interval": 5, "batch_size": 2}))
            for c in cfgs]
    train_stacked(cfgs[:2], [tmp_path / "stacked1", tmp_path / "stacked2"], **QUIET)
    train(cfgs[1], tmp_path / "separate2", **QUIET)
    rows = [[json.loads(line) for line in (tmp_path / name / "diagnostics.jsonl").read_text().splitlines()]
            for name in ("stacked2", "separate2")]
    assert [r["step"] for r in rows[0]] == [r["step"] for r in rows[1]] == [0, 5, 10]
    for a, b in zip(*rows):
        assert set(a) == set(b)
        for key, value in a.items():
            if isinstance(value, float):
                assert value == pytest.approx(b[key], rel=1e-3, abs=1e-5), (a["step"], key)
    assert any(k.startswith("train_grad_norm.") for k in rows[0][0])
    assert any(k.startswith("update_ratio.") for k in rows[0][0])


def test_dropout_stacks_draw_independent_masks(tmp_path):
    """With dropout the seeds train (finite, falling losses) on independent masks; curves are another
    draw than the separate runs' (documented), so only the behaviour is checked here."""
    cfgs = _configs(tmp_path, **{"model.dropout": 0.2, "train.steps": 20})
    results = train_stacked(cfgs, [tmp_path / f"stacked{s}" for s in SEEDS], **QUIET)
    assert [r.status for r in results] == ["completed"] * 3
    for s in SEEDS:
        losses = train_losses(tmp_path / f"stacked{s}")
        assert losses[20] < losses[1] - 0.3


def test_every_design_batches_without_the_slow_vmap_fallback():
    """Every op of every design has a vmap batching rule, except CPU flash attention (CUDA's flash,
    memory-efficient and cuDNN attention have one), so on a GPU nothing loops over the seeds."""
    for name in DESIGNS:
        cfg = ModelConfig(design=name, n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=65, dropout=0.1)
        slow, stacked = slow_vmap_ops(cfg)
        assert slow <= CPU_ONLY_FALLBACK, (name, slow)
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in stacked.values()), name


def test_member_views_alias_the_stack():
    cfg = ModelConfig(design="pre-ln", n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=32)
    models = [GPT(cfg, seed=s) for s in (5, 6)]
    expected = models[1].wte.weight.detach().clone()
    stacked = stack_parameters(models, torch.device("cpu"))
    views = [member_view(m, stacked, k, torch.device("cpu")) for k, m in enumerate(models)]
    assert torch.equal(views[1].wte.weight, expected)
    assert views[1].lm_head.weight is views[1].wte.weight  # the tie survives
    with torch.no_grad():
        stacked["wte.weight"][1].add_(1.0)
    assert torch.equal(views[1].wte.weight, expected + 1.0)  # an optimizer step on the stack moves the view


def test_refusals(tmp_path):
    cfgs = _configs(tmp_path)
    other = cfgs[1].replace(model=cfgs[1].model.replace(n_layer=3))
    with pytest.raises(ReslabError, match="same config apart from their name and seeds"):
        train_stacked([cfgs[0], other], [tmp_path / "a", tmp_path / "b"], **QUIET)
    with pytest.raises(ReslabError, match="share one run folder"):
        train_stacked(cfgs[:2], [tmp_path / "a", tmp_path / "a"], **QUIET)
    with pytest.raises(ReslabError, match="2 configs but 1 run folders"):
        train_stacked(cfgs[:2], [tmp_path / "a"], **QUIET)
    assert not (tmp_path / "a").exists()  # nothing written by a refused stack
    assert stack_key(cfgs[0]) == stack_key(cfgs[1].replace(name="other"))
    assert stack_key(cfgs[0]) != stack_key(other)
