"""Section 2 of the card: in Xiong et al.'s setting the probe finds their law (the last layer's
gradient ~ L^-1/2 for Pre-LN, ~ L^0 for Post-LN), and the card reads a design against both."""

from __future__ import annotations

import math

import pytest
import torch

from reslab.assess.signal import probe_designs, reading, signal_summary
from reslab.config import ModelConfig


@pytest.fixture(scope="module")
def law():
    base = ModelConfig(n_embd=32, n_head=2, block_size=32)
    models = {"pre-ln": base, "post-ln": ModelConfig(**{**base.__dict__, "design": "post-ln"})}
    return signal_summary({"xiong": probe_designs(models, (6, 12, 24, 48), seeds=2, mode="xiong")})


def test_xiongs_law_holds_in_its_setting(law):
    designs = law["modes"]["xiong"]["designs"]
    assert designs["pre-ln"]["last_w2_grad~depth"] == pytest.approx(-0.5, abs=0.12)
    assert designs["post-ln"]["last_w2_grad~depth"] == pytest.approx(0.0, abs=0.12)
    assert designs["pre-ln"]["reading"].startswith("like pre-ln")
    assert designs["post-ln"]["reading"].startswith("like post-ln")


def test_reading_is_relative_to_the_baselines_measured_beside_it():
    assert reading(-0.4, -0.5, 0.0).startswith("like pre-ln")
    assert reading(-0.1, -0.5, 0.0).startswith("like post-ln")
    assert "no reading" in reading(0.0, 0.05, 0.1)  # the baselines themselves do not differ
    assert reading(math.nan, -0.5, 0.0).startswith("not measured")
    assert "exactly 0" in reading(math.nan, -0.5, 0.0, zero=True)


def test_a_branch_scaled_by_zero_reads_as_a_zero_gradient_not_as_a_missing_weight():
    # skipinit's a2 = 0 at init: dL/dW2 is exactly 0 although W2 exists; pre-ln's is not
    models = {d: ModelConfig(design=d, n_embd=32, n_head=2, block_size=32) for d in ("skipinit", "pre-ln", "post-ln")}
    summary = signal_summary({"default": probe_designs(models, (2, 4), seeds=1, mode="default")})
    designs = summary["modes"]["default"]["designs"]
    assert "exactly 0" in designs["skipinit"]["reading"]
    assert "exactly 0" not in designs["pre-ln"]["reading"]


def test_a_design_that_refuses_the_setting_is_named_not_dropped_silently():
    models = {"ngpt": ModelConfig(design="ngpt", n_embd=32, n_head=2, block_size=32),
              "pre-ln": ModelConfig(n_embd=32, n_head=2, block_size=32)}
    rows, skipped = probe_designs(models, (2, 4), seeds=1, mode="xiong")  # ngpt's MLP is always SwiGLU
    assert list(skipped) == ["ngpt"] and "SwiGLU" in skipped["ngpt"]
    assert {r["design"] for r in rows} == {"pre-ln"}
    rows, skipped = probe_designs(models, (2, 4), seeds=1, mode="default")  # as trained: both
    assert not skipped and {r["design"] for r in rows} == {"ngpt", "pre-ln"}


def test_a_design_whose_init_is_part_of_it_keeps_it_in_xiongs_setting():
    from reslab.assess.render import _signal_blocks
    from reslab.assess.signal import SEQ, _build
    from reslab.model.gpt import GPT
    from reslab.probe.settings import own_init, own_inits, zero_query_key

    def cfg(design, **kw):
        return ModelConfig(design=design, n_embd=32, n_head=2, block_size=32, **kw)

    assert {d: own_init(cfg(d)) for d in ("pre-ln", "post-ln", "keel", "skipinit", "fixup", "t-fixup",
                                           "sub-ln", "deepnorm", "sas")} == {
        "pre-ln": None, "post-ln": None, "keel": None, "skipinit": None, "fixup": "fixup",
        "t-fixup": "t-fixup", "sub-ln": "sub-ln", "deepnorm": "deepnorm", "sas": "identity"}
    assert own_init(cfg("post-ln", init="ds-init")) == "ds-init"  # an init set on purpose is kept too
    assert own_init(cfg("pre-ln", init="xavier")) is None
    assert own_inits({"a": cfg("post-ln", init="ds-init"), "b": cfg("pre-ln"), "c": cfg("fixup")}) == \
        {"a": "ds-init", "c": "fixup"}
    from reslab.probe.settings import config_for  # `reslab probe --mode xiong` follows the same rule
    assert [config_for(d, "xiong", 6, 32, 2, 32).init for d in ("t-fixup", "pre-ln")] == ["t-fixup", "xavier"]

    def weights(net):
        return {k: v.clone() for k, v in net.state_dict().items()}

    def reference(design, init):  # Xiong's setting written out: the init, ReLU MLP, W_Q = W_K = 0
        net = GPT(ModelConfig(design=design, n_embd=32, n_head=2, block_size=SEQ, n_layer=6, dropout=0.0,
                              init=init, mlp="relu"), seed=3)
        zero_query_key(net)
        return weights(net)

    probed = weights(_build(cfg("t-fixup"), 6, "xiong", 3))
    kept, xavier = reference("t-fixup", "t-fixup"), reference("t-fixup", "xavier")
    assert probed.keys() == kept.keys()
    assert all(torch.equal(probed[k], kept[k]) for k in kept)
    assert not all(torch.equal(probed[k], xavier[k]) for k in xavier)  # the control: Xavier differs
    pre = weights(_build(cfg("pre-ln"), 6, "xiong", 3))
    assert all(torch.equal(pre[k], v) for k, v in reference("pre-ln", "xavier").items())

    models = {"t-fixup": cfg("t-fixup"), "pre-ln": cfg("pre-ln"), "post-ln": cfg("post-ln")}
    summary = signal_summary({"xiong": probe_designs(models, (2, 4), seeds=1, mode="xiong")}, own_inits(models))
    text = [b[1] for b in _signal_blocks({"signal": summary}) if b[0] == "p"]
    assert sum("keeps its own init (t-fixup)" in t for t in text) == 1
    assert not any("pre-ln keeps" in t or "post-ln keeps" in t for t in text)
