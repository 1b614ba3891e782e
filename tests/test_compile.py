"""torch.compile: the same losses as eager, and no recompilation when a ProRes alpha changes.

On CPU, inductor compiles through the system C++ compiler; the first compile takes tens of seconds,
so this file compiles one small model with inductor and uses a counting backend elsewhere."""

from __future__ import annotations

import shutil

import pytest
import torch
from torch._dynamo.utils import counters

from reslab.model.gpt import GPT
from reslab.train.loop import train

from .conftest import CountingBackend, small, tokens
from .train_helpers import tiny_config, train_losses, val_losses, write_corpus


def _compiler_available() -> bool:
    return shutil.which("g++") is not None or shutil.which("c++") is not None




@pytest.mark.parametrize("schedule", ["linear", "stagewise-L", "fix-sqrtL"])
def test_prores_alpha_changes_do_not_recompile(schedule):
    """alpha(l, t) changes every step and reaches 1 at a different step per layer: one graph for all."""
    torch._dynamo.reset()
    model = GPT(small("pre-ln", n_layer=3, prores=schedule, prores_warmup=2), seed=0)
    backend = CountingBackend()
    compiled = torch.compile(model, backend=backend)
    x, y = tokens(seed=1), tokens(seed=2)
    seen_alphas = set()
    for step in range(12):  # warmups end at steps 2, 4, 6 (linear): alpha passes through 0, fractions and 1
        model.set_step(step)
        seen_alphas.update(model.prores_alphas())
        _, loss = compiled(x, y)
        loss.backward()
        _, eager_loss = model(x, y)
        assert torch.allclose(loss, eager_loss, rtol=1e-6, atol=1e-6), (step, loss, eager_loss)
    assert backend.compiles == 1, f"{schedule}: compiled {backend.compiles} times over 12 steps"
    if schedule == "linear":
        assert {0.0, 1.0} <= seen_alphas and any(0 < a < 1 for a in seen_alphas)
    torch._dynamo.reset()


@pytest.mark.skipif(not _compiler_available(), reason="no C++ compiler: inductor cannot compile on this CPU")
def test_compiled_training_matches_eager(tmp_path, monkeypatch):
    """The trainer with train.compile = true (inductor) gives eager's loss curve within float tolerance,
    and it really compiled: equal numbers alone would also come from a trainer that ignores the flag."""
    torch._dynamo.reset()
    corpus = write_corpus(tmp_path)
    cfgs = {mode: tiny_config(corpus, tmp_path / "cache", **{"train.steps": 12, "train.eval_interval": 6,
                                                              "train.compile": mode == "compiled",
                                                              "model.dropout": 0.0})
            for mode in ("eager", "compiled")}
    real_compile, compiled_modules = torch.compile, {}

    def recording_compile(model, *args, **kwargs):
        compiled_modules.setdefault(mode, []).append(model)  # `mode`: the run the loop below is in
        return real_compile(model, *args, **kwargs)

    monkeypatch.setattr(torch, "compile", recording_compile)
    graphs = {}
    for mode, cfg in cfgs.items():
        counters.clear()
        train(cfg, tmp_path / mode, log=lambda *_: None)
        graphs[mode] = counters["stats"]["unique_graphs"]  # graphs dynamo traced during this run
    assert set(compiled_modules) == {"compiled"}, f"torch.compile was called in the runs {sorted(compiled_modules)}"
    (model,) = compiled_modules["compiled"]  # the model, compiled once
    assert isinstance(model, GPT), type(model)
    # and the compiled module is the one trained: dynamo traced graphs in that run only
    assert graphs["eager"] == 0 and graphs["compiled"] >= 1, graphs
    eager, compiled = train_losses(tmp_path / "eager"), train_losses(tmp_path / "compiled")
    assert sorted(eager) == sorted(compiled) == list(range(1, 13))
    for step in eager:
        assert compiled[step] == pytest.approx(eager[step], rel=2e-4, abs=2e-4), step
    assert eager[12] < eager[1] - 0.3  # it trained: a curve, not a constant, is being compared
    ev, cv = val_losses(tmp_path / "eager"), val_losses(tmp_path / "compiled")
    assert sorted(ev) == sorted(cv) == [0, 6, 12]
    for step in ev:
        assert cv[step] == pytest.approx(ev[step], rel=2e-4, abs=2e-4), step
    torch._dynamo.reset()
