"""Per-layer design overrides (model.layer_designs): any single-stream design for chosen layers."""

from __future__ import annotations

import json

import pytest
import torch

import reslab
from reslab.config import ModelConfig
from reslab.errors import ConfigError
from reslab.model.blocks.post_norm import DeepNormBlock, PostLNBlock
from reslab.model.blocks.pre_norm import PreLNBlock, SandwichBlock
from reslab.model.gpt import GPT
from reslab.model.registry import layer_design, parse_layer_designs, resolve
from reslab.train.config import build_run_config

from .conftest import small, tokens


@pytest.mark.parametrize("L", [4, 8])
def test_mix_ln_is_pre_ln_with_its_first_quarter_post_ln(L):
    """Mix-LN written as an override gives the same model, weight for weight, as the mix-ln design."""
    quarter = -(-L // 4)
    mix = GPT(small("mix-ln", n_layer=L), seed=3)
    override = GPT(small("pre-ln", n_layer=L, layer_designs={f"1-{quarter}": "post-ln"}), seed=3)
    assert [type(b) for b in override.blocks] == [type(b) for b in mix.blocks]
    assert mix.state_dict().keys() == override.state_dict().keys()
    for key, value in mix.state_dict().items():
        assert torch.equal(value, override.state_dict()[key]), key
    x = tokens(seed=4)
    assert torch.equal(mix(x), override(x))


def test_each_layer_gets_its_design_and_the_rest_the_base():
    cfg = small("pre-ln", n_layer=5, layer_designs={"2": "sandwich-ln", "4-5": "deepnorm"})
    model = GPT(cfg, seed=0)
    assert [type(b) for b in model.blocks] == [PreLNBlock, SandwichBlock, PreLNBlock, DeepNormBlock, DeepNormBlock]
    assert [b.layer for b in model.blocks] == [1, 2, 3, 4, 5]
    assert [layer_design(resolve(cfg), l).name for l in range(1, 6)] == \
        ["pre-ln", "sandwich-ln", "pre-ln", "deepnorm", "deepnorm"]
    # the model is its blocks composed: embedding -> block 1..5 -> the base design's final norm -> head
    x = tokens(seed=1)
    with torch.no_grad():
        h = model.embed(x)
        for block in model.blocks:
            h = block(h)
        expected = model.lm_head(model.stream.final_norm(h))
        torch.testing.assert_close(model(x), expected, rtol=0, atol=0)


def test_post_ln_base_with_a_pre_ln_layer_keeps_the_base_final_norm_choice():
    model = GPT(small("post-ln", n_layer=3, layer_designs={"3": "pre-ln"}), seed=0)
    assert [type(b) for b in model.blocks] == [PostLNBlock, PostLNBlock, PreLNBlock]
    assert not list(model.stream.final_norm.parameters())  # post-ln has no final norm


@pytest.mark.parametrize("overrides, message", [
    ({"0": "post-ln"}, "model.layer_designs.0: layers must lie in 1..n_layer=4"),
    ({"2-5": "post-ln"}, "model.layer_designs.2-5: layers must lie in 1..n_layer=4"),
    ({"3-2": "post-ln"}, "model.layer_designs.3-2: layers must lie in 1..n_layer=4 with first <= last"),
    ({"first": "post-ln"}, "model.layer_designs.first: a layer or range of layers counted from 1"),
    ({"1": "sas"}, "model.layer_designs.1: 'sas' cannot be chosen per layer"),
    ({"1": "no-such"}, "model.layer_designs.1: 'no-such' cannot be chosen per layer"),
    ({"1-2": "post-ln", "2": "admin"}, "model.layer_designs.2: layer 2 is already given a design"),
])
def test_bad_overrides_are_refused_with_the_key(overrides, message):
    with pytest.raises(ConfigError) as e:
        resolve(small("pre-ln", n_layer=4, layer_designs=overrides))
    assert any(line.startswith(message) for line in e.value.errors), e.value.errors


@pytest.mark.parametrize("design", ["resi-dual", "sas", "sas-p", "mix-ln"])
def test_designs_with_their_own_layer_structure_take_no_overrides(design):
    with pytest.raises(ConfigError, match="model.layer_designs: per-layer designs need a single-stream base"):
        resolve(small(design, n_layer=4, layer_designs={"1": "post-ln"}))


def test_prores_needs_every_override_to_compose_with_it():
    with pytest.raises(ConfigError, match="layer 1 is admin, which does not compose with prores"):
        resolve(small("pre-ln", n_layer=4, prores="linear", layer_designs={"1": "admin"}))
    resolve(small("pre-ln", n_layer=4, prores="linear", layer_designs={"1": "post-ln"}))


def test_overrides_from_toml_json_and_a_saved_model(tmp_path):
    cfg = build_run_config({"model": {"design": "pre-ln", "n_layer": 4, "n_embd": 32, "n_head": 2,
                                      "layer_designs": {"1-2": "post-ln"}}})
    assert cfg.model.layer_designs == {"1-2": "post-ln"}
    assert resolve(ModelConfig.from_dict(json.loads(json.dumps(cfg.model.to_dict())))) == cfg.model
    with pytest.raises(ConfigError, match=r"run: model.layer_designs.9: layers must lie in 1..n_layer=4"):
        build_run_config({"model": {"n_layer": 4, "layer_designs": {"9": "post-ln"}}}, where="run")
    with pytest.raises(ConfigError, match=r"model.layer_designs.1-2: expected a string"):
        build_run_config({"model": {"n_layer": 4, "layer_designs": {"1-2": 3}}})
    model = GPT(cfg.model, seed=1)
    reslab.save_model(model, tmp_path / "m")
    loaded = reslab.load_model(tmp_path / "m")
    assert [type(b) for b in loaded.blocks] == [PostLNBlock, PostLNBlock, PreLNBlock, PreLNBlock]
    x = tokens(seed=2, vocab=cfg.model.vocab_size)
    assert torch.equal(model(x), loaded(x))


def test_parse_layer_designs_expands_ranges():
    layers, errors = parse_layer_designs(small(n_layer=6, layer_designs={"1-2": "post-ln", "6": "lns"}))
    assert errors == [] and layers == {1: "post-ln", 2: "post-ln", 6: "lns"}
