"""Every design x every option, and every design x every PAIR of options: the registry either builds
a model that runs (and the option visibly changes it), or refuses with one line per problem naming
a field the pair set. And no design keeps state that a re-initialisation would lose: building on the
meta device and materialising gives the model built directly."""

from __future__ import annotations

import itertools

import pytest
import torch

import reslab
from reslab.config import ModelConfig
from reslab.errors import ConfigError
from reslab.model.gpt import GPT
from reslab.model.registry import resolve

from .conftest import meta_built

SHAPE = dict(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=13, dropout=0.0)

# Each option is the set of fields it changes; values differ from ModelConfig's defaults.
OPTIONS: dict[str, dict] = {
    "norm=rmsnorm": {"norm": "rmsnorm"},
    "norm=dyt": {"norm": "dyt"},
    "norm=none": {"norm": "none"},
    "dyt_alpha": {"dyt_alpha": 0.3},
    "attn_res=false": {"attn_res": False},
    "ffn_res=false": {"ffn_res": False},
    "branch_gain": {"branch_gain": 2.0},
    "gain_mode=init": {"gain_mode": "init", "branch_gain": 2.0},
    "prores": {"prores": "linear", "prores_warmup": 2},
    "embed_norm": {"embed_norm": True},
    "shaped_attention": {"shaped_attention": True},
    "vp_identity": {"vp_identity": True},
    "options.norm_free": {"options": {"norm_free": True}},          # sas, sas-p
    "options.ff_gain": {"options": {"ff_gain": 0.3}},
    "options.scale": {"options": {"scale": 4.0}},                   # resi-dual
    "options.post_layers": {"options": {"post_layers": 2}},         # mix-ln
    "skip_scale=scalar": {"skip_scale": "scalar"},
    "skip_scale=channel": {"skip_scale": "channel"},
    "branch_scale=scalar": {"branch_scale": "scalar"},
    "branch_scale=channel": {"branch_scale": "channel", "branch_scale_init": 0.5},
    "options.bias": {"options": {"bias": 1.0}},                     # gated
    "value_residual": {"value_residual": True},
    "residual_attention": {"residual_attention": True},
    "options.streams": {"options": {"streams": 2}},                 # hyper-connections
    "options.mixing=sinkhorn": {"options": {"mixing": "sinkhorn"}},
    "options.dynamic": {"options": {"dynamic": True}},
    "options.alpha_init": {"options": {"alpha_init": 0.1}},         # ngpt
    "layer_designs": {"layer_designs": {"1": "post-ln"}},
    "pos=rope": {"pos": "rope"},
    "mlp=swiglu": {"mlp": "swiglu"},
    "bias=false": {"bias": False},
    "untied": {"tie_weights": False},
    "init=xavier": {"init": "xavier"},
    "qk_norm": {"qk_norm": True},                                  # an attention option
    "residual_update=orthogonal": {"residual_update": "orthogonal"},
    "xsa=gated": {"xsa": "gated"},
    "stochastic_depth": {"stochastic_depth": 0.5},
}
DESIGNS = reslab.designs()
# Options that leave the function unchanged on purpose (what they change is tested elsewhere).
NO_EFFECT_BY_DESIGN = {
    ("resi-dual", "options.scale"): "s only bounds xd's magnitude (for fp16); test_model_properties",
}
X = torch.randint(0, SHAPE["vocab_size"], (2, SHAPE["block_size"]), generator=torch.Generator().manual_seed(0))


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread


def _config(design: str, *options: str) -> ModelConfig | None:
    fields: dict = {}
    for name in options:
        for key, value in OPTIONS[name].items():
            if key == "layer_designs" and design == "post-ln":
                value = {"1": "pre-ln"}  # an override by the base design itself would change nothing
            if key == "options":  # two designs' own options go in one table
                value = {**fields.get("options", {}), **value}
            elif key in fields and fields[key] != value:
                return None  # two options that set one field differently: not a pair
            fields[key] = value
    return ModelConfig(design=design, **SHAPE, **fields)


def _outcome(cfg: ModelConfig):
    """The resolved config, or the ConfigError's lines."""
    try:
        return resolve(cfg)
    except ConfigError as e:
        return e.errors


def _assert_clear_refusal(lines: list[str], options: tuple[str, ...], design: str) -> None:
    fields = {k for name in options for k in OPTIONS[name]}
    assert lines, (design, options)
    for line in lines:
        assert line.startswith("model.") and ": " in line and "\n" not in line, line
    named = {line.split(":", 1)[0].split(".")[1] for line in lines}
    assert named & fields, f"{design} + {options}: refused without naming one of {sorted(fields)}: {lines}"


@torch.no_grad()
def _randomized(model: GPT) -> GPT:
    """Every parameter set from a generator seeded by its name, so two models that share a parameter
    name share its value, and no gain sits at a value (ReZero's g = 0) that hides an option."""
    for name, p in model.named_parameters():
        seed = sum(ord(c) * (i + 1) for i, c in enumerate(name))
        p.copy_(0.5 * torch.randn(p.shape, generator=torch.Generator().manual_seed(seed)) + 0.5)
    model.after_optimizer_step()
    return model


def _runs(cfg: ModelConfig) -> GPT:
    model = GPT(cfg, seed=0)
    logits, loss = model(X, X)
    loss.backward()
    assert torch.isfinite(logits).all() and torch.isfinite(loss)
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())
    return model


@pytest.mark.parametrize("design", DESIGNS)
def test_every_single_option_takes_effect_or_is_refused(design):
    base_cfg = resolve(ModelConfig(design=design, **SHAPE))
    base = GPT(base_cfg, seed=0)
    with torch.no_grad():  # as initialised (init-time gains show here), and randomised (runtime gains)
        base_logits = base(X), _randomized(base)(X)
    for name in OPTIONS:
        outcome = _outcome(_config(design, name))
        if isinstance(outcome, list):
            _assert_clear_refusal(outcome, (name,), design)
            continue
        model = _runs(outcome)
        if outcome == base_cfg or (design, name) in NO_EFFECT_BY_DESIGN:
            continue  # the design's own default (e.g. shaped_attention on sas): nothing to change
        fresh = GPT(outcome, seed=0)
        same_init = fresh.state_dict().keys() == base.state_dict().keys() and all(
            torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), GPT(base_cfg, seed=0).state_dict().values()))
        with torch.no_grad():
            same_forward = torch.equal(model(X), base_logits[0]) and torch.equal(_randomized(model)(X), base_logits[1])
        same_params = [p.shape for p in model.parameters()] == [p.shape for p in base.parameters()]
        assert not (same_forward and same_params and same_init), f"{design} accepts {name} but it changes nothing"


@pytest.mark.parametrize("design", DESIGNS)
def test_every_pair_of_options_builds_and_runs_or_is_refused_clearly(design):
    accepted = refused = 0
    for a, b in itertools.combinations(OPTIONS, 2):
        cfg = _config(design, a, b)
        if cfg is None:
            continue
        outcome = _outcome(cfg)
        if isinstance(outcome, list):
            _assert_clear_refusal(outcome, (a, b), design)
            refused += 1
        else:
            _runs(outcome)
            accepted += 1
    assert accepted > 0 and refused > 0, (design, accepted, refused)


@pytest.mark.parametrize("design", DESIGNS)
def test_meta_device_build_equals_direct_build(design):
    """Every parameter and buffer is rewritten by init_weights: nothing lives outside them."""
    singles = [name for name in OPTIONS if not isinstance(_outcome(_config(design, name)), list)]
    for options in [()] + [(name,) for name in singles]:
        cfg = resolve(_config(design, *options))
        direct, materialised = GPT(cfg, seed=5), meta_built(cfg, seed=5)
        direct_state, meta_state = direct.state_dict(), materialised.state_dict()
        assert direct_state.keys() == meta_state.keys()
        for key in direct_state:
            assert torch.equal(direct_state[key], meta_state[key]), (design, options, key)
        with torch.no_grad():
            assert torch.equal(direct.eval()(X), materialised(X)), (design, options)
            # in training mode too: stochastic depth's keep factors are buffers outside the state dict
            assert torch.equal(direct.train()(X), materialised.train()(X)), (design, options)
