"""Section 2 of the card: in Xiong et al.'s setting the probe finds their law (the last layer's
gradient ~ L^-1/2 for Pre-LN, ~ L^0 for Post-LN), and the card reads a design against both."""

from __future__ import annotations

import math

import pytest

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


def test_a_design_that_refuses_the_setting_is_named_not_dropped_silently():
    models = {"ngpt": ModelConfig(design="ngpt", n_embd=32, n_head=2, block_size=32),
              "pre-ln": ModelConfig(n_embd=32, n_head=2, block_size=32)}
    rows, skipped = probe_designs(models, (2, 4), seeds=1, mode="xiong")  # ngpt's MLP is always SwiGLU
    assert list(skipped) == ["ngpt"] and "SwiGLU" in skipped["ngpt"]
    assert {r["design"] for r in rows} == {"pre-ln"}
    rows, skipped = probe_designs(models, (2, 4), seeds=1, mode="default")  # as trained: both
    assert not skipped and {r["design"] for r in rows} == {"ngpt", "pre-ln"}
