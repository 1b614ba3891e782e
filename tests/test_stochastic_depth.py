"""Stochastic depth / LayerDrop (model.stochastic_depth): the rates, the draw, the formula in float64,
training only, zero gradients through a dropped layer, exact resume, stacked seeds, refusals."""

from __future__ import annotations

import pytest
import torch

from reslab.config import ModelConfig
from reslab.errors import ReslabError
from reslab.model.gpt import GPT
from reslab.model.registry import resolve
from reslab.model.stochastic_depth import drop_rates, keep_factors
from reslab.train import loop as loop_mod
from reslab.train.loop import train, train_stacked

from .train_helpers import (LogLines, curve_rows, interrupt_before_update, resumed_steps, tiny_config, train_curve,
                            train_losses, write_corpus)

QUIET = dict(log=lambda *_: None)


def _cfg(**kw) -> ModelConfig:
    base = dict(design="pre-ln", vocab_size=65, n_layer=4, n_head=4, n_embd=32, block_size=16, dropout=0.0,
                stochastic_depth=0.5)
    return ModelConfig(**{**base, **kw})


def test_rates_follow_the_two_rules():
    assert drop_rates(0.4, "linear", 4) == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert drop_rates(0.4, "uniform", 3) == [0.4, 0.4, 0.4]
    with pytest.raises(ValueError, match="rule"):
        drop_rates(0.4, "cubic", 3)


def test_the_draw_depends_on_seed_and_step_only_and_keeps_the_expectation():
    rates = drop_rates(0.6, "linear", 6)
    assert keep_factors(7, 3, rates) == keep_factors(7, 3, rates)
    draws = [keep_factors(7, t, rates) for t in range(4000)]
    assert draws != [keep_factors(8, t, rates) for t in range(4000)]
    for layer, p in enumerate(rates):
        ks = [d[layer] for d in draws]
        assert set(ks) == {0.0, 1.0 / (1.0 - p)}
        # 4000 draws: the dropped fraction is p within 5 standard errors, E[k] = 1 within 0.1
        assert abs(ks.count(0.0) / len(ks) - p) < 5 * (p * (1 - p) / len(ks)) ** 0.5 + 1e-9
        assert abs(sum(ks) / len(ks) - 1.0) < 0.1


def _reference_pre_ln(model: GPT, idx: torch.Tensor, keep: list[float]) -> torch.Tensor:
    """x <- x + k_l A(N1 x); x <- x + k_l M(N2 x), from the modules' weights, then N_f and the head."""
    x = model.embed(idx)
    for block, k in zip(model.blocks, keep):
        x = x + k * block.attn(block.norm1(x))
        x = x + k * block.mlp(block.norm2(x))
    return model.lm_head(model.stream.final_norm(x))


def test_formula_in_float64_in_training_and_the_plain_network_in_evaluation():
    torch.manual_seed(0)
    model = GPT(_cfg(), seed=3).double()
    idx = torch.randint(0, 65, (2, 16))
    rates = drop_rates(0.5, "linear", 4)
    for step in range(6):
        model.set_step(step)
        keep = keep_factors(model.layer_drop_seed, step, rates)
        model.train()
        got = model(idx)
        torch.testing.assert_close(got, _reference_pre_ln(model, idx, keep), rtol=1e-12, atol=1e-12)
        # a wrong formula (Huang et al.'s test-time factor 1 - p_l used in training) differs
        wrong = [0.0 if k == 0 else 1 - p for k, p in zip(keep, rates)]
        assert not torch.allclose(got, _reference_pre_ln(model, idx, wrong))
        model.eval()
        torch.testing.assert_close(model(idx), _reference_pre_ln(model, idx, [1.0] * 4), rtol=1e-12, atol=1e-12)
    plain = GPT(_cfg(stochastic_depth=0.0), seed=3).double().eval()
    assert torch.equal(plain(idx), model(idx))  # same weights: the option adds no parameter


def test_a_dropped_layer_gets_no_gradient_and_a_kept_one_does():
    model = GPT(_cfg(stochastic_depth=0.9, stochastic_depth_rule="uniform"), seed=3)
    step = next(t for t in range(100) if 0.0 in keep_factors(model.layer_drop_seed, t, [0.9] * 4)
                and any(keep_factors(model.layer_drop_seed, t, [0.9] * 4)))
    model.set_step(step)
    keep = keep_factors(model.layer_drop_seed, step, [0.9] * 4)
    idx = torch.randint(0, 65, (2, 16))
    model(idx, idx)[1].backward()
    for block, k in zip(model.blocks, keep):
        grad = block.mlp.c_fc.weight.grad
        assert (grad.abs().max() == 0) == (k == 0.0), (block.layer, k)


def test_a_killed_run_resumes_with_the_same_dropped_layers(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path)
    cfg = tiny_config(corpus, tmp_path / "cache", **{"model.dropout": 0.0, "model.n_layer": 4,
                                                     "model.stochastic_depth": 0.5})
    train(cfg, tmp_path / "whole", **QUIET)
    real_lr = interrupt_before_update(monkeypatch, loop_mod, 13)  # 3 updates past the checkpoint at 10
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "resumed", **QUIET)
    monkeypatch.setattr(loop_mod, "learning_rate", real_lr)
    assert train_curve(tmp_path / "resumed")[-1][0] == 13
    log = LogLines()
    train(cfg, tmp_path / "resumed", log=log)
    assert resumed_steps(log) == [10], log  # resumed, not retrained from step 0
    assert curve_rows(tmp_path / "resumed") == curve_rows(tmp_path / "whole")  # file order, duplicates visible
    # and the option acts: without it the same seed trains another curve
    train(cfg.replace(model=cfg.model.replace(stochastic_depth=0.0)), tmp_path / "plain", **QUIET)
    assert train_losses(tmp_path / "plain") != train_losses(tmp_path / "whole")


def test_each_stacked_seed_draws_its_own_layers_as_its_separate_run(tmp_path):
    corpus = write_corpus(tmp_path)
    cfgs = [tiny_config(corpus, tmp_path / "cache", **{"model.dropout": 0.0, "model.n_layer": 4,
                                                       "model.stochastic_depth": 0.5, "train.seed": s})
            for s in (1, 2)]
    train_stacked(cfgs, [tmp_path / f"stacked{s}" for s in (1, 2)], **QUIET)
    for cfg, s in zip(cfgs, (1, 2)):
        train(cfg, tmp_path / f"separate{s}", **QUIET)
        a, b = train_losses(tmp_path / f"stacked{s}"), train_losses(tmp_path / f"separate{s}")
        assert sorted(a) == sorted(b)
        for step in a:
            assert a[step] == pytest.approx(b[step], rel=1e-4, abs=1e-4), (s, step)


@pytest.mark.parametrize("overrides, words", [
    ({"stochastic_depth": 1.0}, "model.stochastic_depth: a drop probability"),
    ({"stochastic_depth": -0.1}, "model.stochastic_depth: a drop probability"),
    ({"stochastic_depth": float("nan")}, "model.stochastic_depth: a drop probability"),
    ({"design": "ngpt"}, "model.stochastic_depth: drops branches at reslab's residual points"),
    ({"design": "hyper-connections"}, "model.stochastic_depth: drops branches"),
    ({"ffn_res": False}, "a dropped layer would zero the stream"),
    ({"stochastic_depth": 0.0, "stochastic_depth_rule": "uniform"}, "model.stochastic_depth_rule: has no effect"),
    ({"layer_designs": {"2": "rezero"}}, "layer 2 is rezero, which has no reslab residual points for stochastic_depth"),
])
def test_refusals_name_the_field(overrides, words):
    with pytest.raises(ReslabError) as e:
        resolve(_cfg(**overrides))
    assert words in str(e.value)
