"""Post-LN kept trainable: hybridnorm, keel, sdd (model/blocks/post_ln_trainable.py).

Same method as test_block_formulas.py: float64 models whose every parameter is randomised, one
block's output against the paper's equations recomputed here from raw weight tensors with plain
torch ops (the block's and its submodules' forwards are never used on the reference side), and
for each design a plausible wrong formula that must give something else.

    HybridNorm (arXiv 2503.04598, eq. 5-7):  Y = MHA_QKV(X) + X;  X' = FFN(N(Y)) + N(Y)
        HybridNorm*, block 1:                Y = MHA_QKV(N(X)) + X;  X' = FFN(N(Y)) + Y
    KEEL (arXiv 2601.19895, eq. 8, sec. 3.1): x' = N_out(alpha x + F(N_in(x))), alpha = 2L;
        block 1: no N_out on the attention, no alpha on either sublayer
    SDD (arXiv 2502.15499, eq. 1, sec. 4.1):  every Linear y = alpha * norm(V x) in a Post-Norm block;
        alpha = 1/sqrt(L) on W_P and W2 at init, 1 elsewhere
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import reslab
from reslab.config import ModelConfig
from reslab.train.config import OptimConfig
from reslab.train.optim import parameter_groups
from tests.test_block_formulas import (
    assert_refused,
    EPS,
    A,
    TOL,
    C,
    H,
    M,
    N,
    Ref,
    assert_differs,
    check_block,
    lin,
    make,
    ref_embed,
    rope,
    stream_input,
    token_input,
)
from tests.test_scaled_and_gated_blocks import Nx

FORMULA_TESTED = {"hybridnorm", "keel", "sdd"}

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread

RMS = Ref(norm="rmsnorm")    # hybridnorm's and keel's default norm


# ---------------------------------------------------------------------------------------------
# reference primitives
# ---------------------------------------------------------------------------------------------
def rms(x, weight=None):
    """x / sqrt(mean(x^2) + eps) over the last axis, times a gain if given."""
    y = x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + EPS)
    return y if weight is None else y * weight


def heads(t):
    B, T, _ = t.shape
    return t.reshape(B, T, H, C // H).transpose(1, 2)


def attend(q, k, v):
    """Causal softmax(q k^T / sqrt(d)) v per head, heads merged back to (B, T, C)."""
    T = q.shape[-2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    P = torch.softmax(scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")), -1)
    y = P @ v
    return y.transpose(1, 2).reshape(y.shape[0], T, C)


def A_qkv(attn, x, v_norm: bool = True):
    """HybridNorm's eq. 5 per head: softmax(N(Q) N(K)^T / sqrt(d)) N(V), then W_O; N = RMSNorm over
    each head's channels with its gain. v_norm=False: QK-norm only (the wrong-formula control)."""
    W, b = attn.c_attn.weight, attn.c_attn.bias
    q, k, v = (heads(lin(x, W[i * C:(i + 1) * C], None if b is None else b[i * C:(i + 1) * C])) for i in range(3))
    q, k = rms(q, attn.q_norm.weight), rms(k, attn.k_norm.weight)
    if v_norm:
        v = rms(v, attn.v_norm.weight)
    return lin(attend(q, k, v), attn.c_proj.weight, attn.c_proj.bias)


def sdd_lin(x, layer, parts: int = 1):
    """SDD's eq. 1, y = alpha * norm(V x): each of `parts` slices of V x RMS-normalised (no gain), then
    alpha per output. A bias (absent by default) is added before the norm."""
    z = x @ layer.weight.T
    if layer.bias is not None:
        z = z + layer.bias
    z = torch.cat([rms(p) for p in z.chunk(parts, dim=-1)], dim=-1)
    return z * layer.scale.weight


def A_sdd(attn, x, parts: int = 3):
    q, k, v = sdd_lin(x, attn.c_attn, parts).split(C, dim=-1)
    return sdd_lin(attend(heads(q), heads(k), heads(v)), attn.c_proj)


def M_sdd(mlp, x, kind: str = "gelu", parts: int | None = None):
    h = sdd_lin(x, mlp.c_fc, parts or (2 if kind == "swiglu" else 1))
    if kind == "swiglu":
        gate, up = h.chunk(2, dim=-1)
        h = F.silu(gate) * up
    else:
        h = 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))
    return sdd_lin(h, mlp.c_proj)


# ---------------------------------------------------------------------------------------------
# reference blocks
# ---------------------------------------------------------------------------------------------
def hybridnorm_ref(r, blk, x, l, v_norm=True):
    # Y = MHA_QKV(X) + X;  X' = FFN(N(Y)) + N(Y)                                        (eq. 6)
    y = x + A_qkv(blk.attn, x, v_norm)
    n = N(r, blk.norm, y)
    return n + M(r, blk.mlp, n)


def hybridnorm_star_ref(r, blk, x, l):
    # block 1 of HybridNorm*: Y = MHA_QKV(N(X)) + X;  X' = FFN(N(Y)) + Y                (eq. 7)
    if l > 1:
        return hybridnorm_ref(r, blk, x, l)
    y = x + A_qkv(blk.attn, N(r, blk.attn_norm, x))
    return y + M(r, blk.mlp, N(r, blk.norm, y))


def keel_ref(r, blk, x, l, alpha=None, first_rule=True):
    # x' = N_out(alpha x + F(N_in(x))) per sublayer (eq. 8); alpha = L sublayers = 2 n_layer;
    # block 1: the attention has no N_out, neither sublayer has alpha (section 3.1)
    a = 2 * r.L if alpha is None else alpha
    if l == 1 and first_rule:
        h = x + A(r, blk.attn, N(r, blk.attn_norm_in, x))
        return N(r, blk.mlp_norm_out, h + M(r, blk.mlp, N(r, blk.mlp_norm_in, h)))
    out1 = blk.attn_norm_out if l > 1 else blk.mlp_norm_out  # (the control: a norm where block 1 has none)
    h = N(r, out1, a * x + A(r, blk.attn, N(r, blk.attn_norm_in, x)))
    return N(r, blk.mlp_norm_out, a * h + M(r, blk.mlp, N(r, blk.mlp_norm_in, h)))


def sdd_ref(r, blk, x, l, kind="gelu", qkv_parts=3):
    # x = N1(x + A_SDD(x));  x = N2(x + M_SDD(x)), every Linear y = alpha * norm(V x)
    h = N(r, blk.norm1, x + A_sdd(blk.attn, x, qkv_parts))
    return N(r, blk.norm2, h + M_sdd(blk.mlp, h, kind))


# ---------------------------------------------------------------------------------------------
# HybridNorm
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layer", [1, 2])
@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_hybridnorm(norm, layer):
    model = make("hybridnorm", norm=norm)
    r = Ref(norm=norm)
    out, _ = check_block(model, hybridnorm_ref, r, layer)
    blk, x = model.blocks[layer - 1], stream_input()
    with torch.no_grad():
        assert_differs(out, hybridnorm_ref(r, blk, x, layer, v_norm=False))   # QK-norm only: V matters
        y = x + A_qkv(blk.attn, x)                                              # post-norm FFN with the raw Y as skip
        assert_differs(out, y + M(r, blk.mlp, N(r, blk.norm, y)))


@pytest.mark.parametrize("layer", [1, 2])
def test_hybridnorm_star_first_block_is_pre_norm(layer):
    model = make("hybridnorm", options={"first_block_pre_norm": True})
    out, _ = check_block(model, hybridnorm_star_ref, RMS, layer)
    assert (model.blocks[layer - 1].attn_norm is not None) == (layer == 1)
    if layer == 1:  # the plain HybridNorm block on the same weights gives something else
        with torch.no_grad():
            assert_differs(out, hybridnorm_ref(RMS, model.blocks[0], stream_input(), 1))


def test_hybridnorm_qkv_norms_and_rope():
    """QKV-norm composes with rotary positions: the norms act before the rotation."""
    model = make("hybridnorm", pos="rope")
    attn = model.blocks[0].attn
    assert all(getattr(attn, f"{t}_norm").weight.shape == (C // H,) for t in "qkv")
    x = stream_input()
    with torch.no_grad():
        W, b = attn.c_attn.weight, attn.c_attn.bias
        q, k, v = (heads(lin(x, W[i * C:(i + 1) * C], b[i * C:(i + 1) * C])) for i in range(3))
        y = attend(rope(rms(q, attn.q_norm.weight)), rope(rms(k, attn.k_norm.weight)), rms(v, attn.v_norm.weight))
        ref = lin(y, attn.c_proj.weight, attn.c_proj.bias)
        out = attn(x)
        # the model computes rotary angles in float32, so this one comparison is float32-tight
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        y = attend(rms(rope(q), attn.q_norm.weight), rms(rope(k), attn.k_norm.weight), rms(v, attn.v_norm.weight))
        assert_differs(out, lin(y, attn.c_proj.weight, attn.c_proj.bias))      # norms after the rotation


def test_v_norm_is_off_elsewhere():
    """The attention option is local: other designs' attention has no V-norm, qk_norm alone adds none."""
    for fields in ({}, {"qk_norm": True}):
        attn = reslab.build_model("pre-ln", n_layer=1, n_embd=C, n_head=H, block_size=8, vocab_size=11,
                                  **fields).blocks[0].attn
        assert attn.v_norm is None and (attn.q_norm is not None) == bool(fields)


# ---------------------------------------------------------------------------------------------
# KEEL
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layer", [1, 2, 3])
def test_keel(layer):
    L = 3
    model = make("keel", L=L)
    r = Ref(norm="rmsnorm", L=L)
    out, _ = check_block(model, keel_ref, r, layer)
    blk, x = model.blocks[layer - 1], stream_input()
    with torch.no_grad():
        assert_differs(out, keel_ref(r, blk, x, layer, alpha=1.0, first_rule=False))   # plain alpha = 1
        if layer == 1:   # the paper's first-block rule matters
            assert_differs(out, keel_ref(r, blk, x, layer, first_rule=False))
        else:            # alpha = L counts sublayers (2 n_layer), not layers
            assert_differs(out, keel_ref(r, blk, x, layer, alpha=float(L)))
    assert blk.attn_alpha == blk.mlp_alpha == (1.0 if layer == 1 else 2.0 * L)
    assert not list(model.blocks[0].attn_norm_out.parameters())      # block 1: no Post-LN on the attention


@pytest.mark.parametrize("norm", ["layernorm", "dyt"])
def test_keel_option_alpha_and_other_norms(norm):
    model = make("keel", L=2, norm=norm, options={"alpha": 2.5})
    x = stream_input()
    blk = model.blocks[1]
    with torch.no_grad():
        r = Ref()
        h = Nx(norm, blk.attn_norm_out, 2.5 * x + A(r, blk.attn, Nx(norm, blk.attn_norm_in, x)))
        ref = Nx(norm, blk.mlp_norm_out, 2.5 * h + M(r, blk.mlp, Nx(norm, blk.mlp_norm_in, h)))
        out = blk(x)
        torch.testing.assert_close(out, ref, **TOL)
        h = Nx(norm, blk.attn_norm_out, 4.0 * x + A(r, blk.attn, Nx(norm, blk.attn_norm_in, x)))
        assert_differs(out, Nx(norm, blk.mlp_norm_out, 4.0 * h + M(r, blk.mlp, Nx(norm, blk.mlp_norm_in, h))))


# ---------------------------------------------------------------------------------------------
# SDD
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layer", [1, 2])
@pytest.mark.parametrize("kind", ["gelu", "swiglu"])
def test_sdd(kind, layer):
    model = make("sdd", mlp=kind)
    r = Ref(mlp=kind)
    out, _ = check_block(model, lambda r_, b, x, l: sdd_ref(r_, b, x, l, kind), r, layer)
    blk, x = model.blocks[layer - 1], stream_input()
    with torch.no_grad():
        assert_differs(out, sdd_ref(r, blk, x, layer, kind, qkv_parts=1))    # Q, K, V normalised as one layer
        h = N(r, blk.norm1, x + A(r, blk.attn, x))                              # plain Post-Norm on the same V
        assert_differs(out, N(r, blk.norm2, h + M(r, blk.mlp, h)))


def test_sdd_alpha_init_and_no_decay():
    L = 4
    model = reslab.build_model("sdd", n_layer=L, n_embd=C, n_head=H, block_size=8, vocab_size=11)
    for blk in model.blocks:
        assert torch.equal(blk.attn.c_attn.scale.weight, torch.ones(3 * C))
        assert torch.equal(blk.mlp.c_fc.scale.weight, torch.ones(blk.mlp.c_fc.out_features))
        for proj in (blk.attn.c_proj, blk.mlp.c_proj):
            torch.testing.assert_close(proj.scale.weight, torch.full((C,), 1 / math.sqrt(L)))
        assert blk.attn.c_attn.bias is None                                     # the design's default: no bias
    _, no_decay = parameter_groups(model, OptimConfig(weight_decay=0.1))
    assert sum(n.endswith("scale.weight") for n in no_decay) == 4 * L       # alpha is a gain: never decayed


def test_sdd_init_gain_scales_the_output_alphas():
    """norm(V x) undoes a scaled W_P / W2, so gain_mode = "init" scales their alpha."""
    kw = dict(n_layer=2, n_embd=C, n_head=H, block_size=8, vocab_size=11)
    plain = reslab.build_model("sdd", **kw)
    gained = reslab.build_model("sdd", branch_gain=2.0, gain_mode="init", **kw)
    for a, b in zip(plain.blocks, gained.blocks):
        for name in ("attn.c_proj", "mlp.c_proj"):
            pa, pb = a.get_submodule(name), b.get_submodule(name)
            torch.testing.assert_close(pb.scale.weight, 2.0 * pa.scale.weight)
            torch.testing.assert_close(pb.weight, pa.weight)


# ---------------------------------------------------------------------------------------------
# the runtime gain and a learned branch scale multiply the branch, never KEEL's alpha x
# ---------------------------------------------------------------------------------------------
def test_keel_runtime_gain_and_branch_scale_multiply_the_branch():
    L, g = 2, 1.5
    model = make("keel", L=L, branch_gain=g, branch_scale="scalar")
    x = stream_input()
    blk = model.blocks[1]
    c1, c2 = g * blk.attn_residual.branch_weight, g * blk.mlp_residual.branch_weight
    r = Ref(norm="rmsnorm", L=L)
    with torch.no_grad():
        h = N(r, blk.attn_norm_out, 4 * x + c1 * A(r, blk.attn, N(r, blk.attn_norm_in, x)))
        ref = N(r, blk.mlp_norm_out, 4 * h + c2 * M(r, blk.mlp, N(r, blk.mlp_norm_in, h)))
        out = blk(x)
        torch.testing.assert_close(out, ref, **TOL)
        assert_differs(out, keel_ref(r, blk, x, 2))                              # without gain and scale


# ---------------------------------------------------------------------------------------------
# whole model: embedding -> blocks -> (final norm) -> head
# ---------------------------------------------------------------------------------------------
WHOLE = {"hybridnorm": ({}, hybridnorm_ref, RMS, True),
         "hybridnorm*": ({"options": {"first_block_pre_norm": True}}, hybridnorm_star_ref, RMS, True),
         "keel": ({}, keel_ref, RMS, False),
         "sdd": ({}, sdd_ref, Ref(), False)}


@pytest.mark.parametrize("case", list(WHOLE))
def test_whole_model(case):
    fields, ref_fn, r, final_norm = WHOLE[case]
    L = 2
    model = make(case.rstrip("*"), L=L, **fields)
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        h = ref_embed(model, idx)
        for layer in range(1, L + 1):
            h = ref_fn(r, model.blocks[layer - 1], h, layer)
        if final_norm:   # hybridnorm: the official model's ln_f before the head
            ref = N(r, model.stream.final_norm, h) @ model.lm_head.weight.T
            assert_differs(logits, h @ model.lm_head.weight.T)
        else:            # keel, sdd: the stream leaves the last Post-Norm normalised
            assert not list(model.stream.final_norm.parameters())
            ref = h @ model.lm_head.weight.T
        torch.testing.assert_close(logits, ref, **TOL)


# ---------------------------------------------------------------------------------------------
# refusals: one line, naming the field
# ---------------------------------------------------------------------------------------------
REFUSALS = [
    ("hybridnorm", {"qk_norm": True}, "model.qk_norm"),
    ("hybridnorm", {"norm": "none"}, "model.norm"),
    ("hybridnorm", {"value_residual": True}, "model.value_residual"),
    ("hybridnorm", {"options": {"first_block_pre_norm": "yes"}}, "model.options.first_block_pre_norm"),
    ("hybridnorm", {"options": {"alpha": 2.0}}, "model.options.alpha: unknown key"),
    ("keel", {"options": {"alpha": -1.0}}, "model.options.alpha"),
    ("keel", {"options": {"alpha": 0.0}}, "model.options.alpha"),
    ("keel", {"options": {"alpha": float("inf")}}, "model.options.alpha"),
    ("keel", {"options": {"alpha": "L"}}, "model.options.alpha"),
    ("keel", {"norm": "none"}, "model.norm"),
    ("keel", {"layer_designs": {"1": "keel"}}, "model.layer_designs"),
    ("sdd", {"options": {"alpha": 2.0}}, "model.options: sdd has no options of its own"),
    ("sdd", {"norm": "none"}, "model.norm"),
    ("sdd", {"shaped_attention": True}, "model.shaped_attention"),
    ("sdd", {"prores": "linear"}, "model.prores"),
    ("keel", {"prores": "linear"}, "model.prores"),
]


@pytest.mark.parametrize("design,fields,field", REFUSALS)
def test_refusals_name_the_field(design, fields, field):
    assert_refused(design, field, **fields)


def test_what_is_allowed():
    for design, fields in [("hybridnorm", {"xsa": "full"}), ("hybridnorm", {"attn_res": False}),
                           ("hybridnorm", {"skip_scale": "scalar", "norm": "dyt"}),
                           ("keel", {"options": {"alpha": 1.5}, "branch_scale": "channel"}),
                           ("sdd", {"stochastic_depth": 0.1, "mlp": "swiglu", "bias": True})]:
        reslab.resolve(ModelConfig(design=design, n_layer=2, **fields))
    assert reslab.resolve(ModelConfig(design="keel", n_layer=2)).norm == "rmsnorm"
    assert reslab.resolve(ModelConfig(design="hybridnorm", n_layer=2)).norm == "rmsnorm"
    assert reslab.resolve(ModelConfig(design="sdd", n_layer=2)).bias is False
