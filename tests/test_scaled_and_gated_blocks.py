"""DyT, learned skip / branch scales, reordered-ln, layerscale, gated.

Same method as test_block_formulas.py: float64 models whose every parameter is randomised, one
block's output against its formula recomputed here from raw weight tensors with plain torch ops
(the block's and its submodules' forwards are never used on the reference side), plus a check
that the comparison could fail (a plausible wrong formula gives something else).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import reslab
from reslab.config import ModelConfig
from reslab.diagnostics import stats
from reslab.errors import ConfigError
from reslab.model.gpt import GPT
from reslab.train.config import OptimConfig
from reslab.train.optim import parameter_groups
from tests.test_block_formulas import (
    TOL,
    A,
    C,
    M,
    N,
    Ref,
    assert_differs,
    lin,
    make,
    ref_embed,
    stream_input,
    token_input,
)

from .conftest import meta_built

FORMULA_TESTED = {"reordered-ln", "layerscale", "gated"}

SHAPE = {"scalar": (), "channel": (C,)}


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread


# ---------------------------------------------------------------------------------------------
# reference primitives
# ---------------------------------------------------------------------------------------------
def Nx(norm: str, mod, x):
    """LayerNorm / RMSNorm / none as in test_block_formulas; DyT written out:
    gamma * tanh(alpha * x) + beta, alpha one scalar, gamma / beta per channel."""
    if norm == "dyt":
        assert mod.alpha.shape == () and mod.weight.shape == (C,)
        y = torch.tanh(mod.alpha * x) * mod.weight
        return y + mod.bias if mod.bias is not None else y
    return N(Ref(norm=norm), mod, x)


def scale(mod, name: str, kind: str):
    """The learned scale `name` of a residual point, checked to have the shape `kind` says
    (absent for "none", where it multiplies by 1)."""
    p = getattr(mod, name)
    if kind == "none":
        assert p is None, f"{name} should be absent"
        return 1.0
    assert p is not None and tuple(p.shape) == SHAPE[kind], (name, kind)
    return p


def add(res, x, f, keep: bool = True, s: str = "none", a: str = "none", c: float = 1.0):
    """out = s*x + a*(c*f) (keep), a*(c*f) (skip removed: there is no s at all); c = gain * alpha."""
    branch = scale(res, "branch_weight", a) * (c * f)
    if not keep:
        assert res.skip_weight is None, "a removed skip has no skip scale"
        return branch
    return scale(res, "skip_weight", s) * x + branch


def pre_ln_ref(blk, x, norm="layernorm", s="none", a="none", attn_res=True, ffn_res=True, c=1.0):
    # h = s1*x + a1*c*A(N1 x);  out = s2*h + a2*c*M(N2 h)
    r = Ref()
    h = add(blk.attn_residual, x, A(r, blk.attn, Nx(norm, blk.norm1, x)), attn_res, s, a, c)
    return add(blk.mlp_residual, h, M(r, blk.mlp, Nx(norm, blk.norm2, h)), ffn_res, s, a, c)


def post_ln_ref(blk, x, norm="layernorm", s="none", a="none", attn_res=True, ffn_res=True):
    # h = N1(s1*x + a1*A(x));  out = N2(s2*h + a2*M(h))
    r = Ref()
    h = Nx(norm, blk.norm1, add(blk.attn_residual, x, A(r, blk.attn, x), attn_res, s, a))
    return Nx(norm, blk.norm2, add(blk.mlp_residual, h, M(r, blk.mlp, h), ffn_res, s, a))


def reordered_ref(blk, x, norm="layernorm", s="none", a="none", c=1.0):
    # h = x + c*N1(A(x));  out = h + c*N2(M(h))     (norm on the branch output only)
    r = Ref()
    h = add(blk.attn_residual, x, Nx(norm, blk.attn_norm, A(r, blk.attn, x)), True, s, a, c)
    return add(blk.mlp_residual, h, Nx(norm, blk.mlp_norm, M(r, blk.mlp, h)), True, s, a, c)


def layerscale_ref(blk, x, norm="layernorm", s="none", c=1.0):
    # h = x + diag(l1) c*A(N1 x);  out = h + diag(l2) c*M(N2 h), l per channel
    return pre_ln_ref(blk, x, norm, s=s, a="channel", c=c)


def gate_ref(g, x, y):
    """GTrXL's GRU gate from the raw W_*, U_*, b_g."""
    r = torch.sigmoid(lin(y, g.W_r.weight) + lin(x, g.U_r.weight))
    z = torch.sigmoid(lin(y, g.W_z.weight) + lin(x, g.U_z.weight) - g.b_g)
    h = torch.tanh(lin(y, g.W_g.weight) + lin(r * x, g.U_g.weight))
    return (1 - z) * x + z * h


def gated_ref(blk, x, norm="layernorm", gain=1.0):
    # y = ReLU(F(N(x))) (times a runtime gain);  x = gate(x, y), for F = A then M
    r = Ref()
    y = gain * A(r, blk.attn, Nx(norm, blk.norm1, x)).clamp_min(0.0)
    h = gate_ref(blk.attn_gate, x, y)
    y = gain * M(r, blk.mlp, Nx(norm, blk.norm2, h)).clamp_min(0.0)
    return gate_ref(blk.mlp_gate, h, y)


def run_block(model, layer, ref_fn, x=None, **kw):
    blk = model.blocks[layer - 1]
    x = stream_input() if x is None else x
    with torch.no_grad():
        out, ref = blk(x), ref_fn(blk, x, **kw)
    torch.testing.assert_close(out, ref, **TOL)
    return out, blk, x


# ---------------------------------------------------------------------------------------------
# DyT
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("design,ref_fn", [("pre-ln", pre_ln_ref), ("post-ln", post_ln_ref)])
def test_dyt_formula(design, ref_fn, bias):
    model = make(design, norm="dyt", bias=bias)
    for layer in (1, 2):
        out, blk, x = run_block(model, layer, ref_fn, norm="dyt")
        assert (blk.norm1.bias is not None) == bias
        with torch.no_grad():  # a LayerNorm in its place would give something else
            ln = torch.nn.LayerNorm(C, dtype=torch.float64)
            wrong = type("B", (), dict(blk.named_children(), norm1=ln, norm2=ln))
            assert_differs(out, ref_fn(wrong, x, norm="layernorm"))


def test_dyt_init_and_every_norm_of_the_model_is_dyt():
    model = reslab.build_model("peri-ln", norm="dyt", dyt_alpha=0.8, n_layer=2, n_embd=C, n_head=2,
                               block_size=8, vocab_size=11)
    norms = [m for m in model.modules() if isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm))]
    dyts = [m for m in model.modules() if type(m).__name__ == "DyT"]
    assert not norms and len(dyts) == 2 * 4 + 2          # 4 per sandwich block, embedding, final
    for m in dyts:
        assert m.alpha.shape == () and m.alpha.item() == pytest.approx(0.8)
        assert torch.equal(m.weight, torch.ones(C)) and torch.equal(m.bias, torch.zeros(C))


def test_dyt_is_not_scale_invariant_and_saturates():
    """The property that sets DyT apart from LayerNorm: no division by a statistic."""
    model = make("pre-ln", norm="dyt")
    dyt, x = model.blocks[0].norm1, stream_input()
    with torch.no_grad():
        assert_differs(dyt(3.0 * x), dyt(x))
        big = dyt(torch.full((1, 1, C), 1e6, dtype=torch.float64))
        torch.testing.assert_close(big[0, 0], dyt.weight + dyt.bias, **TOL)   # tanh -> 1


# ---------------------------------------------------------------------------------------------
# learned skip / branch scales at the residual points
# ---------------------------------------------------------------------------------------------
SCALE_CASES = [(s, a) for s in ("none", "scalar", "channel") for a in ("none", "scalar", "channel")
               if (s, a) != ("none", "none")]


@pytest.mark.parametrize("s,a", SCALE_CASES)
@pytest.mark.parametrize("design,ref_fn", [("pre-ln", pre_ln_ref), ("post-ln", post_ln_ref)])
def test_learned_skip_and_branch_scales(design, ref_fn, s, a):
    model = make(design, skip_scale=s, branch_scale=a)
    out, blk, x = run_block(model, 2, ref_fn, s=s, a=a)
    with torch.no_grad():  # the same weights without the scales give something else
        unscaled = ref_fn(type("B", (), dict(blk.named_children(), attn_residual=_Plain, mlp_residual=_Plain)), x)
        assert_differs(out, unscaled)


class _Plain:
    skip_weight = branch_weight = None


@pytest.mark.parametrize("design,ref_fn", [("pre-ln", pre_ln_ref), ("post-ln", post_ln_ref)])
@pytest.mark.parametrize("attn_res,ffn_res", [(False, True), (True, False)])
def test_learned_scales_with_a_removed_skip(design, ref_fn, attn_res, ffn_res):
    """skip removed: out = a * branch, and there is no skip scale to learn at that point."""
    model = make(design, skip_scale="channel", branch_scale="scalar", attn_res=attn_res, ffn_res=ffn_res)
    out, blk, x = run_block(model, 1, ref_fn, s="channel", a="scalar", attn_res=attn_res, ffn_res=ffn_res)
    with torch.no_grad():  # the same formula with the skip kept (s = 1 there) gives something else
        kept = {name: SimpleNamespace(skip_weight=getattr(blk, name).skip_weight
                                      if getattr(blk, name).skip_weight is not None else torch.ones(C),
                                      branch_weight=getattr(blk, name).branch_weight)
                for name in ("attn_residual", "mlp_residual")}
        assert_differs(out, ref_fn(type("B", (), dict(blk.named_children(), **kept)), x, s="channel", a="scalar"))


@pytest.mark.parametrize("s,a", [("scalar", "channel"), ("channel", "scalar")])
def test_learned_scales_init_values_and_shapes(s, a):
    model = reslab.build_model("pre-ln", skip_scale=s, branch_scale=a, branch_scale_init=0.25,
                               n_layer=2, n_embd=C, n_head=2, block_size=8, vocab_size=11)
    for res in (r for blk in model.blocks for r in blk.residuals()):
        assert tuple(res.skip_weight.shape) == SHAPE[s] and torch.all(res.skip_weight == 1.0)
        assert tuple(res.branch_weight.shape) == SHAPE[a] and torch.all(res.branch_weight == 0.25)
        assert res.skip_weight.requires_grad and res.branch_weight.requires_grad
    plain = reslab.build_model("pre-ln", n_layer=1, n_embd=C, n_head=2, block_size=8, vocab_size=11)
    assert all(r.skip_weight is None and r.branch_weight is None for r in plain.blocks[0].residuals())


@pytest.mark.parametrize("design", sorted(n for n in reslab.designs() if reslab.get_design(n).learned_scales))
def test_every_learned_scales_design_has_them_at_every_residual_point(design):
    model = reslab.build_model(design, skip_scale="scalar", branch_scale="channel", n_layer=4, n_embd=C,
                               n_head=2, block_size=8, vocab_size=11)
    points = [r for blk in model.blocks for r in blk.residuals()]
    per_layer = 1 if design == "parallel" else 2  # parallel: one residual point for A + M
    assert len(points) == per_layer * 4
    assert all(r.skip_weight.shape == () and r.branch_weight.shape == (C,) for r in points)


def test_learned_scales_train_and_report_as_design_scalars():
    model = reslab.build_model("pre-ln", norm="dyt", skip_scale="scalar", branch_scale="channel",
                               n_layer=2, n_embd=C, n_head=2, block_size=8, vocab_size=11)
    idx = token_input()
    _, loss = model(idx, idx)
    loss.backward()
    res = model.blocks[0].attn_residual
    assert res.skip_weight.grad is not None and res.skip_weight.grad.abs() > 0
    assert res.branch_weight.grad.abs().sum() > 0 and model.blocks[0].norm1.alpha.grad.abs() > 0
    groups = stats.parameter_groups(model)
    assert "blocks.0.attn_residual.skip_weight" in groups["block0.scalars"]
    assert "blocks.0.mlp_residual.branch_weight" in groups["block0.scalars"]
    assert {"blocks.0.norm1.alpha", "blocks.0.norm1.weight", "blocks.0.norm1.bias"} <= set(groups["block0.norms"])


# ---------------------------------------------------------------------------------------------
# reordered-ln (OLMo 2)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "dyt"])
@pytest.mark.parametrize("layer", [1, 2])
def test_reordered_ln(norm, layer):
    model = make("reordered-ln", norm=norm)
    out, blk, x = run_block(model, layer, reordered_ref, norm=norm)
    with torch.no_grad():  # the pre-ln placement of the same norms (on the branch input) differs
        pre = type("B", (), dict(blk.named_children(), norm1=blk.attn_norm, norm2=blk.mlp_norm))
        assert_differs(out, pre_ln_ref(pre, x, norm=norm))


def test_reordered_ln_with_learned_scales():
    model = make("reordered-ln", skip_scale="channel", branch_scale="scalar")
    out, blk, x = run_block(model, 2, reordered_ref, s="channel", a="scalar")
    with torch.no_grad():
        assert_differs(out, reordered_ref(type("B", (), dict(blk.named_children(), attn_residual=_Plain,
                                                                mlp_residual=_Plain)), x))


def test_reordered_ln_init_gain_scales_the_output_norms():
    base = reslab.build_model("reordered-ln", n_layer=2, n_embd=C, n_head=2, block_size=8, vocab_size=11)
    gained = reslab.build_model("reordered-ln", branch_gain=2.0, gain_mode="init", n_layer=2, n_embd=C,
                                n_head=2, block_size=8, vocab_size=11)
    for b0, b1 in zip(base.blocks, gained.blocks):
        assert b1.branch_outputs() == [b1.attn_norm, b1.mlp_norm]
        assert torch.all(b1.attn_norm.weight == 2.0) and torch.all(b1.mlp_norm.weight == 2.0)
        assert torch.equal(b0.mlp.c_proj.weight, b1.mlp.c_proj.weight)     # W2 untouched


# ---------------------------------------------------------------------------------------------
# layerscale (CaiT)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "dyt", "none"])
@pytest.mark.parametrize("layer", [1, 2])
def test_layerscale(norm, layer):
    model = make("layerscale", norm=norm)
    out, blk, x = run_block(model, layer, layerscale_ref, norm=norm)
    assert torch.unique(blk.attn_residual.branch_weight).numel() == C   # a real diag(lambda)
    with torch.no_grad():  # pre-ln without lambda gives something else
        assert_differs(out, pre_ln_ref(type("B", (), dict(blk.named_children(), attn_residual=_Plain,
                                                           mlp_residual=_Plain)), x, norm=norm))


def test_layerscale_with_a_learned_skip_scale():
    model = make("layerscale", skip_scale="scalar")
    run_block(model, 2, layerscale_ref, s="scalar")


@pytest.mark.parametrize("L,eps", [(12, 0.1), (18, 0.1), (20, 1e-5), (24, 1e-5), (30, 1e-6)])
def test_layerscale_cait_init_by_depth(L, eps):
    model = reslab.build_model("layerscale", n_layer=L, n_embd=C, n_head=2, block_size=8, vocab_size=11)
    assert model.config.branch_scale == "channel" and model.config.branch_scale_init == eps
    for blk in model.blocks:
        for res in blk.residuals():
            assert res.branch_weight.shape == (C,) and torch.all(res.branch_weight == torch.tensor(eps))
            assert res.skip_weight is None


def test_layerscale_init_override_and_per_layer_choice():
    model = reslab.build_model("layerscale", branch_scale_init=0.3, n_layer=2, n_embd=C, n_head=2,
                               block_size=8, vocab_size=11)
    assert torch.all(model.blocks[0].attn_residual.branch_weight == 0.3)
    # a layerscale layer inside a pre-ln model: per-channel lambda with CaiT's eps; pre-ln layers plain
    mixed = reslab.build_model("pre-ln", layer_designs={"20": "layerscale"}, n_layer=20, n_embd=C, n_head=2,
                               block_size=8, vocab_size=11)
    assert mixed.blocks[0].attn_residual.branch_weight is None
    assert torch.all(mixed.blocks[19].mlp_residual.branch_weight == torch.full((C,), 1e-5))


# ---------------------------------------------------------------------------------------------
# gated (GTrXL)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "dyt"])
@pytest.mark.parametrize("layer", [1, 2])
def test_gated(norm, layer):
    model = make("gated", norm=norm)
    out, blk, x = run_block(model, layer, gated_ref, norm=norm)
    with torch.no_grad():  # a plain pre-ln add of the same branches gives something else
        r = Ref()
        h = x + A(r, blk.attn, Nx(norm, blk.norm1, x)).clamp_min(0.0)
        assert_differs(out, h + M(r, blk.mlp, Nx(norm, blk.norm2, h)).clamp_min(0.0))


def test_gated_runtime_gain_multiplies_the_branch():
    model = make("gated", branch_gain=2.0)
    out, blk, x = run_block(model, 1, gated_ref, gain=2.0)
    with torch.no_grad():
        assert_differs(out, gated_ref(blk, x))


def test_gated_starts_near_the_identity_with_a_large_gate_bias():
    """W, U random (N(0, 1/fan_in), far larger than at init), b_g = 30: z = sigmoid(W_z y + U_z x - 30)
    is below ~1e-8 for these inputs, so x_out = x within 1e-6. (At b_g = 20 the random W_z y + U_z x
    reaches ~7 here and z ~ 2e-6: the bound holds at b_g = 20 only for the init's small weights.)"""
    x = stream_input()
    for gate_bias, near in ((30.0, True), (0.0, False)):
        model = make("gated", options={"bias": gate_bias})  # every parameter random ...
        for blk in model.blocks:
            for gate in (blk.attn_gate, blk.mlp_gate):
                gate.reset_parameters()                  # ... except b_g, back to its init
                assert torch.all(gate.b_g == gate_bias)
        with torch.no_grad():
            out = model.blocks[1](model.blocks[0](x))
        if near:
            torch.testing.assert_close(out, x, rtol=0, atol=1e-6)
        else:  # b_g = 0: z ~ 1/2, the test above could fail
            assert_differs(out, x, min_gap=0.1)


def test_gated_default_init():
    model = reslab.build_model("gated", n_layer=2, n_embd=C, n_head=2, block_size=8, vocab_size=11)
    gate = model.blocks[0].attn_gate
    assert torch.all(gate.b_g == 2.0) and gate.b_g.shape == (C,)
    for name in ("W_r", "U_r", "W_z", "U_z", "W_g", "U_g"):
        w = getattr(gate, name).weight
        assert w.shape == (C, C) and getattr(gate, name).bias is None
        assert 0.01 < w.std().item() < 0.03                  # the gpt2 scheme's N(0, 0.02)
    assert not model.blocks[0].residuals()                   # no add anywhere: the gate replaced it


# ---------------------------------------------------------------------------------------------
# ProRes alpha(l, t) and the runtime gain multiply the branch of reordered-ln and layerscale
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("design,ref_fn", [("reordered-ln", reordered_ref), ("layerscale", layerscale_ref)])
def test_prores_and_runtime_gain_multiply_the_branch(design, ref_fn):
    L, warm, t, g = 3, 10, 5, 1.5
    model = make(design, L=L, prores="linear", prores_warmup=warm, branch_gain=g, skip_scale="scalar")
    model.set_step(t)
    x = stream_input()
    for layer in range(1, L + 1):
        alpha = min(t / (layer * warm), 1.0)                       # 0.5, 0.25, 1/6
        out, blk, _ = run_block(model, layer, ref_fn, x=x, s="scalar", c=g * alpha)
        with torch.no_grad():
            assert_differs(out, ref_fn(blk, x, s="scalar"))


# ---------------------------------------------------------------------------------------------
# whole model: embedding -> blocks -> final norm -> head
# ---------------------------------------------------------------------------------------------
WHOLE = {"reordered-ln": ({}, reordered_ref, {}),
         "layerscale": ({}, layerscale_ref, {}),
         "gated": ({}, gated_ref, {}),
         "pre-ln": ({"norm": "dyt", "skip_scale": "channel", "branch_scale": "scalar"}, pre_ln_ref,
                    {"norm": "dyt", "s": "channel", "a": "scalar"})}


@pytest.mark.parametrize("design", list(WHOLE))
def test_whole_model(design):
    fields, ref_fn, kw = WHOLE[design]
    L = 2
    model = make(design, L=L, **fields)
    norm = kw.get("norm", "layernorm")
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        h = ref_embed(model, idx)
        for layer in range(1, L + 1):
            h = ref_fn(model.blocks[layer - 1], h, **kw)
        ref = Nx(norm, model.stream.final_norm, h) @ model.lm_head.weight.T
        torch.testing.assert_close(logits, ref, **TOL)
        assert_differs(logits, h @ model.lm_head.weight.T)             # the final norm is applied


# ---------------------------------------------------------------------------------------------
# refusals: one line, naming the field
# ---------------------------------------------------------------------------------------------
REFUSALS = [
    ("layerscale", {"branch_scale": "none"}, "model.branch_scale"),
    ("layerscale", {"branch_scale": "scalar"}, "model.branch_scale"),
    ("deepnorm", {"skip_scale": "scalar"}, "model.skip_scale"),
    ("gated", {"branch_scale": "channel"}, "model.branch_scale"),
    ("pre-ln", {"dyt_alpha": 0.3}, "model.dyt_alpha"),
    ("pre-ln", {"options": {"bias": 1.0}}, "model.options: pre-ln has no options of its own; remove bias"),
    ("layerscale", {"options": {"bias": 1.0}, "layer_designs": {"1": "reordered-ln"}}, "model.options: layerscale"),
    ("pre-ln", {"options": {"bias": 1.0, "shared_norm": True}, "layer_designs": {"1": "gated"}},
     "model.options.shared_norm: unknown key; allowed keys are bias"),
    ("pre-ln", {"branch_scale_init": 0.1}, "model.branch_scale_init"),
    ("pre-ln", {"skip_scale": "scalar", "attn_res": False, "ffn_res": False}, "model.skip_scale"),
    ("pre-ln", {"skip_scale": "scalar", "layer_designs": {"2": "deepnorm"}}, "model.layer_designs"),
    ("layerscale", {"layer_designs": {"1": "gated"}}, "model.layer_designs"),
    ("gated", {"attn_res": False}, "model.attn_res"),
    ("reordered-ln", {"norm": "none"}, "model.norm"),
    ("resi-dual", {"norm": "dyt", "options": {"scale": 4.0}}, "model.options.scale"),
]


@pytest.mark.parametrize("design,fields,field", REFUSALS)
def test_refusals_name_the_field(design, fields, field):
    with pytest.raises(ConfigError) as e:
        reslab.resolve(ModelConfig(design=design, n_layer=2, **fields))
    assert len(e.value.errors) == 1, e.value.errors
    assert e.value.errors[0].startswith(field) and "\n" not in e.value.errors[0]


def test_options_that_are_allowed():
    for design, fields in [("gated", {"options": {"bias": 5.0}}), ("pre-ln", {"norm": "dyt", "dyt_alpha": 0.3}),
                           ("pre-ln", {"branch_scale": "scalar", "branch_scale_init": 0.1}),
                           ("pre-ln", {"options": {"bias": 5.0}, "layer_designs": {"2": "gated"}}),
                           ("sandwich-ln", {"skip_scale": "channel", "layer_designs": {"2": "layerscale"}}),
                           ("layerscale", {"prores": "linear"}), ("reordered-ln", {"prores": "sqrt"})]:
        reslab.resolve(ModelConfig(design=design, n_layer=2, **fields))


def test_a_per_layer_design_reads_its_own_options():
    """[model.options] holds the options of every design the model uses: gated layers under a pre-ln
    base take options.bias, a parallel layer its shared_norm, each from its own options class."""
    cfg = ModelConfig(design="pre-ln", n_layer=3, n_embd=C, n_head=2, block_size=8, vocab_size=11,
                      layer_designs={"2": "gated", "3": "parallel"}, options={"bias": 5.0, "shared_norm": True})
    assert reslab.resolve(cfg).options == {"bias": 5.0, "shared_norm": True}
    model = reslab.build_model(cfg)
    assert torch.all(model.blocks[1].attn_gate.b_g == 5.0) and torch.all(model.blocks[1].mlp_gate.b_g == 5.0)
    assert model.blocks[2].norm2 is None  # shared_norm: one norm feeds both branches
    default = reslab.build_model(cfg.replace(options={}))
    assert torch.all(default.blocks[1].attn_gate.b_g == 2.0) and default.blocks[2].norm2 is not None


# ---------------------------------------------------------------------------------------------
# weight decay: only Linear / Embedding weights decay
# ---------------------------------------------------------------------------------------------
def test_scales_dyt_and_gate_bias_are_never_decayed():
    model = reslab.build_model("pre-ln", norm="dyt", skip_scale="channel", branch_scale="scalar",
                               n_layer=2, n_embd=C, n_head=2, block_size=8, vocab_size=11)
    gated = reslab.build_model("gated", norm="dyt", n_layer=2, n_embd=C, n_head=2, block_size=8, vocab_size=11)
    for m, count in ((model, 2 * 4 + 2 * 3 * 2 + 3), (gated, 2 * 2 + 2 * 3 * 2 + 3)):
        decay, no_decay = parameter_groups(m, OptimConfig(weight_decay=0.1))
        new = [n for n in dict(m.named_parameters()) if n.endswith(("skip_weight", "branch_weight", ".alpha", "b_g"))
               or ("norm" in n and n.endswith((".weight", ".bias")))]
        assert len(new) == count and set(new) <= set(no_decay)
    assert "blocks.1.attn_gate.W_z.weight" in decay and "blocks.1.attn_gate.U_g.weight" in decay
    layerscale = reslab.build_model("layerscale", n_layer=2, n_embd=C, n_head=2, block_size=8, vocab_size=11)
    decay, no_decay = parameter_groups(layerscale, OptimConfig(weight_decay=0.1))
    assert "blocks.0.attn_residual.branch_weight" in no_decay and "blocks.0.attn.c_attn.weight" in decay


# ---------------------------------------------------------------------------------------------
# meta device: build lazily, materialise, initialise = the model built directly
# ---------------------------------------------------------------------------------------------
META = [("reordered-ln", {}), ("layerscale", {}), ("gated", {"options": {"bias": 3.0}}),
        ("reordered-ln", {"norm": "dyt", "prores": "linear", "prores_warmup": 5}),
        ("pre-ln", {"norm": "dyt", "dyt_alpha": 0.7, "bias": False}),
        ("post-ln", {"skip_scale": "scalar", "branch_scale": "channel", "branch_scale_init": 0.4}),
        ("peri-ln", {"skip_scale": "channel", "branch_scale": "scalar", "norm": "dyt"}),
        ("layerscale", {"n_layer": 20, "skip_scale": "channel", "norm": "none"})]


@pytest.mark.parametrize("design,fields", META)
def test_meta_device_build_equals_direct_build(design, fields):
    cfg = ModelConfig(**{"design": design, "n_layer": 2, "n_head": 2, "n_embd": C, "block_size": 8,
                         "vocab_size": 11, **fields})
    direct, lazy = GPT(cfg, seed=5).eval(), meta_built(cfg, seed=5)
    idx = token_input()
    assert torch.equal(direct(idx), lazy(idx))
    for (n, p), (_, q) in zip(direct.state_dict().items(), lazy.state_dict().items()):
        assert torch.equal(p, q), n
