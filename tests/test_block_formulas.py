"""Every block design against its formula, written out independently (shared/spec/variants.md).

Each test builds a small model (n_embd=16, n_head=2, T=5, B=2) in float64, overwrites every
parameter with seeded random values (so no weight, gain or norm is at a trivial value), and
compares one block's output with the formula recomputed here from the raw weight tensors
(`c_attn.weight`, `c_proj.weight`, `c_fc.weight`, norm weights and biases, the design's scalars)
with plain torch ops. The block's own forward, and the forward of its submodules, are never
used on the reference side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import reslab

B, T, C, H = 2, 5, 16, 2
VOCAB, BLOCK = 11, 8
EPS = 1e-5                    # ModelConfig.norm_eps default, written here on purpose
TOL = dict(rtol=1e-10, atol=1e-10)


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread


# ---------------------------------------------------------------------------------------------
# building and randomising
# ---------------------------------------------------------------------------------------------
def make(design: str, L: int = 2, **fields) -> reslab.GPT:
    """A float64 eval-mode model whose every parameter holds a seeded random, non-trivial value."""
    model = reslab.build_model(design, n_layer=L, n_embd=C, n_head=H, block_size=BLOCK,
                               vocab_size=VOCAB, dropout=0.0, seed=0, **fields)
    model = model.double().eval()
    randomize_(model)
    return model


@torch.no_grad()
def randomize_(model: torch.nn.Module, seed: int = 1234) -> None:
    """Matrices ~ N(0, 1/fan_in); biases ~ 0.2 N(0, 1); every other parameter (norm weights,
    admin w, shaped-attention alpha/beta/gamma, ReZero g, SAS gains) ~ 1 + 0.25 N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        r = torch.randn(p.shape, generator=g, dtype=torch.float64)
        if p.dim() >= 2:
            p.copy_(r / math.sqrt(p.shape[-1]))
        elif name.endswith("bias"):
            p.copy_(0.2 * r)
        else:
            p.copy_(1.0 + 0.25 * r)


def stream_input(seed: int = 7) -> torch.Tensor:
    """A residual-stream input that is far from normalised (scale 1.5, offset 0.3)."""
    g = torch.Generator().manual_seed(seed)
    return 1.5 * torch.randn(B, T, C, generator=g, dtype=torch.float64) + 0.3


def token_input(seed: int = 3) -> torch.Tensor:
    return torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(seed))


def assert_differs(a: torch.Tensor, b: torch.Tensor, min_gap: float = 1e-3) -> None:
    """The comparison can fail: the formula under test is distinguishable from a wrong one."""
    assert (a - b).abs().max().item() > min_gap



def assert_refused(design: str, field: str, **fields) -> None:
    """Building `design` with `fields` fails with exactly one line, which starts with `field` (the
    config field it names), as every bad model input must."""
    with pytest.raises(reslab.ConfigError) as e:
        reslab.resolve(reslab.ModelConfig(design=design, n_layer=2, **fields))
    assert len(e.value.errors) == 1, e.value.errors
    assert e.value.errors[0].startswith(field) and "\n" not in e.value.errors[0], e.value.errors

# ---------------------------------------------------------------------------------------------
# reference primitives, from raw weight tensors only
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ref:
    """What the reference formula needs to know, stated by the test (not read from the model)."""
    L: int = 2
    norm: str = "layernorm"       # layernorm | rmsnorm | none
    mlp: str = "gelu"             # gelu | gelu-tanh | relu | swiglu
    shaped: bool = False          # shaped attention
    vp: bool = False              # value / projection identity (layer 1: I + W_V)
    rope: bool = False
    attn_res: bool = True
    ffn_res: bool = True
    gain: float = 1.0             # runtime branch gain
    prores: tuple = ()            # ProRes alpha per layer (index l-1); () = all 1
    s: float = 1.0                # resi-dual stream scale
    norm_free: bool = False       # sas / sas-p: only layer 1 has norms

    def c(self, layer: int) -> float:
        """Everything that multiplies a branch output of this layer: gain * alpha(l)."""
        return self.gain * (self.prores[layer - 1] if self.prores else 1.0)

    def norm_kind(self, layer: int) -> str:
        return "none" if self.norm_free and layer > 1 else self.norm


def lin(x, w, b=None):
    y = x @ w.T
    return y if b is None else y + b


def N(r: Ref, mod, x, layer: int = 1):
    """LayerNorm / RMSNorm / nothing, written out; weight and bias read from the module."""
    kind = r.norm_kind(layer)
    if kind == "none":
        assert not list(mod.parameters()), "a norm that should be absent has parameters"
        return x
    if kind == "layernorm":
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        y = (x - mu) / torch.sqrt(var + EPS) * mod.weight
        return y + mod.bias if mod.bias is not None else y
    if kind == "rmsnorm":
        return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + EPS) * mod.weight
    raise AssertionError(kind)


def rope(t, base: float = 10000.0):
    """Rotary positions, rotate-half layout: pair (i, i + d/2) rotated by angle pos * base^(-2i/d)."""
    d = t.shape[-1]
    half = d // 2
    pos = torch.arange(t.shape[-2], dtype=torch.float64)[:, None]
    theta = pos * base ** (-2.0 * torch.arange(half, dtype=torch.float64) / d)
    a, b = t[..., :half], t[..., half:]
    return torch.cat([a * theta.cos() - b * theta.sin(), b * theta.cos() + a * theta.sin()], -1)


def A(r: Ref, attn, x, layer: int = 1):
    """Causal self-attention from raw weights: per head softmax(QK^T/sqrt(d) + mask) V, then W_P.
    Shaped: the mixing matrix is beta*softmax + alpha*I - gamma*C (C_ij = 1/i for j <= i).
    vp identity: V = x (layer > 1) or x + W_V x (layer 1), and W_P = I."""
    Bx, Tx, Cx = x.shape
    d = Cx // H
    if r.vp:
        Wqk = attn.c_qk.weight
        bqk = attn.c_qk.bias
        q = lin(x, Wqk[:Cx], None if bqk is None else bqk[:Cx])
        k = lin(x, Wqk[Cx:], None if bqk is None else bqk[Cx:])
        v = x + x @ attn.c_v.weight.T if layer == 1 else x
    else:
        W, b = attn.c_attn.weight, attn.c_attn.bias
        q, k, v = (lin(x, W[i * Cx:(i + 1) * Cx], None if b is None else b[i * Cx:(i + 1) * Cx])
                   for i in range(3))
    heads = lambda t: t.reshape(Bx, Tx, H, d).transpose(1, 2)          # (B, H, T, d)
    q, k, v = heads(q), heads(k), heads(v)
    if r.rope:
        q, k = rope(q), rope(k)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    future = torch.ones(Tx, Tx, dtype=torch.bool).triu(1)
    P = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    if r.shaped:
        eye = torch.eye(Tx, dtype=x.dtype)
        Cmat = torch.tensor([[1.0 / (i + 1) if j <= i else 0.0 for j in range(Tx)] for i in range(Tx)],
                            dtype=x.dtype)
        alpha = attn.shape_alpha.reshape(H, 1, 1)
        beta = attn.shape_beta.reshape(H, 1, 1)
        gamma = attn.shape_gamma.reshape(H, 1, 1)
        P = beta * P + alpha * eye - gamma * Cmat
    y = (P @ v).transpose(1, 2).reshape(Bx, Tx, Cx)
    if r.vp:
        return y
    return lin(y, attn.c_proj.weight, attn.c_proj.bias)


def M(r: Ref, mlp, x):
    """W2 act(W1 x + b1) + b2; SwiGLU: W2 (silu(W_gate x) * W_up x), c_fc = [W_gate; W_up]."""
    h = lin(x, mlp.c_fc.weight, mlp.c_fc.bias)
    if r.mlp == "swiglu":
        n = h.shape[-1] // 2
        h = F.silu(h[..., :n]) * h[..., n:]
    elif r.mlp == "gelu":
        h = 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))
    elif r.mlp == "gelu-tanh":
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3)))
    elif r.mlp == "relu":
        h = h.clamp_min(0.0)
    else:
        raise AssertionError(r.mlp)
    return lin(h, mlp.c_proj.weight, mlp.c_proj.bias)


def skip(keep: bool, x):
    return x if keep else torch.zeros_like(x)


# ---------------------------------------------------------------------------------------------
# reference blocks: one function per formula of variants.md
# ---------------------------------------------------------------------------------------------
def pre_ln(r, blk, x, l):
    # h = (x if attn_res) + c*A(N1 x);  out = (h if ffn_res) + c*M(N2 h)
    h = skip(r.attn_res, x) + r.c(l) * A(r, blk.attn, N(r, blk.norm1, x), l)
    return skip(r.ffn_res, h) + r.c(l) * M(r, blk.mlp, N(r, blk.norm2, h))


def post_ln(r, blk, x, l):
    # h = N1((x if attn_res) + c*A(x));  out = N2((h if ffn_res) + c*M(h))
    h = N(r, blk.norm1, skip(r.attn_res, x) + r.c(l) * A(r, blk.attn, x, l))
    return N(r, blk.norm2, skip(r.ffn_res, h) + r.c(l) * M(r, blk.mlp, h))


def sandwich(r, blk, x, l):
    # h = x + c*N_out(A(N_in x));  out = h + c*N_out'(M(N_in' h))
    h = skip(r.attn_res, x) + r.c(l) * N(r, blk.attn_norm_out, A(r, blk.attn, N(r, blk.attn_norm_in, x), l))
    return skip(r.ffn_res, h) + r.c(l) * N(r, blk.mlp_norm_out, M(r, blk.mlp, N(r, blk.mlp_norm_in, h)))


def mix_ln(r, blk, x, l):
    # first ceil(L/4) layers post-ln, the rest pre-ln
    return (post_ln if l <= math.ceil(r.L / 4) else pre_ln)(r, blk, x, l)


def deepnorm(r, blk, x, l):
    # x = N(a*x + c*F(x)),  a = (2L)^(1/4)
    a = (2 * r.L) ** 0.25
    h = N(r, blk.norm1, skip(r.attn_res, a * x) + r.c(l) * A(r, blk.attn, x, l))
    return N(r, blk.norm2, skip(r.ffn_res, a * h) + r.c(l) * M(r, blk.mlp, h))


def lns(r, blk, x, l):
    # pre-ln with N(x)/sqrt(l) on both sublayer inputs
    k = 1.0 / math.sqrt(l)
    h = skip(r.attn_res, x) + r.c(l) * A(r, blk.attn, k * N(r, blk.norm1, x), l)
    return skip(r.ffn_res, h) + r.c(l) * M(r, blk.mlp, k * N(r, blk.norm2, h))


def admin(r, blk, x, l):
    # x = N(w*x + c*F(x)), w per channel (read from the block: it is trainable)
    h = N(r, blk.norm1, skip(r.attn_res, blk.w1 * x) + r.c(l) * A(r, blk.attn, x, l))
    return N(r, blk.norm2, skip(r.ffn_res, blk.w2 * h) + r.c(l) * M(r, blk.mlp, h))


def b2t(r, blk, x, l):
    # y = N1(x + A(x));  out = N2(y + M(y) + x)
    y = N(r, blk.norm1, x + r.c(l) * A(r, blk.attn, x, l))
    return N(r, blk.norm2, y + r.c(l) * M(r, blk.mlp, y) + x)


def rezero(r, blk, x, l):
    # x = x + g*F(x), no norm
    h = skip(r.attn_res, x) + r.c(l) * blk.g * A(r, blk.attn, x, l)
    return skip(r.ffn_res, h) + r.c(l) * blk.g * M(r, blk.mlp, h)


def resi_dual(r, blk, stream, l):
    # for each sublayer: f = F(xa); xd = xd + s*f; xa = N(xa + f)
    xa, xd = stream
    f = r.c(l) * A(r, blk.attn, xa, l)
    xd = xd + r.s * f
    xa = N(r, blk.norm1, xa + f)
    f = r.c(l) * M(r, blk.mlp, xa)
    xd = xd + r.s * f
    xa = N(r, blk.norm2, xa + f)
    return xa, xd


def sas(r, blk, x, l):
    # h = g_attn*SA(N1 x) (no attention skip by default);  out = a_FF*h + b_FF*M(N2 h)
    h = skip(r.attn_res, x) + r.c(l) * blk.g_attn * A(r, blk.attn, N(r, blk.norm1, x, l), l)
    return skip(r.ffn_res, blk.a_ff * h) + r.c(l) * blk.b_ff * M(r, blk.mlp, N(r, blk.norm2, h, l))


def sas_p(r, blk, x, l):
    # out = g_attn*SA(N x) + b_FF*M(N x), one shared norm, no skip
    n = N(r, blk.norm, x, l)
    return r.c(l) * blk.g_attn * A(r, blk.attn, n, l) + r.c(l) * blk.b_ff * M(r, blk.mlp, n)


REF = {"pre-ln": pre_ln, "post-ln": post_ln, "sandwich-ln": sandwich, "peri-ln": sandwich,
       "mix-ln": mix_ln, "deepnorm": deepnorm, "lns": lns, "admin": admin, "b2t": b2t,
       "rezero": rezero, "resi-dual": resi_dual, "sas": sas, "sas-p": sas_p}

# The spec's knobs of each design when every field is left at its default.
DEFAULT_REF = {"rezero": Ref(norm="none"),
               "sas": Ref(shaped=True, vp=True, attn_res=False, ffn_res=True),
               "sas-p": Ref(shaped=True, vp=True)}

# Which designs put a norm between the last block and the head (pre-ln and lns by the spec;
# the pre-norm family alike; the post-norm designs end normalised already; rezero has no norm).
FINAL_NORM = {"pre-ln": True, "post-ln": False, "sandwich-ln": True, "peri-ln": True,
              "mix-ln": True, "deepnorm": False, "lns": True, "admin": False, "b2t": False,
              "rezero": False, "sas": True, "sas-p": True}


def check_block(model, ref_fn, r: Ref, layer: int, x=None):
    """Block `layer` (from 1) of `model` against ref_fn; returns (model output, reference)."""
    blk = model.blocks[layer - 1]
    assert blk.layer == layer
    x = stream_input() if x is None else x
    with torch.no_grad():
        out = blk(x)
        ref = ref_fn(r, blk, x, layer)
    torch.testing.assert_close(out, ref, **TOL)
    return out, ref


# ---------------------------------------------------------------------------------------------
# coverage of the registry
# ---------------------------------------------------------------------------------------------
def test_every_registered_design_has_a_reference_formula():
    """The norm-placement and partial-skip designs' formulas are here; the other designs' are in
    their families' files (attention residuals, hyper-connections, nGPT, scaled and gated blocks,
    parallel / depth-mixing / speedrun blocks)."""
    from . import (test_attention_residuals, test_cross_depth, test_hyper_connections, test_init_schemes,
                   test_inside_block, test_ngpt, test_norm_free, test_parallel_depth_and_speedrun_blocks,
                   test_post_ln_trainable, test_scaled_and_gated_blocks)

    families = (test_attention_residuals, test_hyper_connections, test_ngpt, test_scaled_and_gated_blocks,
                test_parallel_depth_and_speedrun_blocks, test_post_ln_trainable, test_init_schemes, test_norm_free,
                test_cross_depth, test_inside_block)
    elsewhere = set().union(*(m.FORMULA_TESTED for m in families))
    assert not set(REF) & elsewhere
    from reslab.model.registry import DESIGNS

    built_in = {n for n in reslab.designs() if DESIGNS[n].plugin is None}  # not an installed plugin's (the example's)
    assert set(REF) | elsewhere == built_in
    assert set(FINAL_NORM) | {"resi-dual"} == set(REF)


# ---------------------------------------------------------------------------------------------
# pre-ln and the partial-residual ablation
# ---------------------------------------------------------------------------------------------
PARTIAL = {"full": (True, True), "attn-only": (True, False), "ffn-only": (False, True),
           "none": (False, False)}


@pytest.mark.parametrize("config", list(PARTIAL))
@pytest.mark.parametrize("layer", [1, 2])
def test_pre_ln_partial_residuals(config, layer):
    attn_res, ffn_res = PARTIAL[config]
    model = make("pre-ln", attn_res=attn_res, ffn_res=ffn_res)
    r = Ref(attn_res=attn_res, ffn_res=ffn_res)
    out, _ = check_block(model, pre_ln, r, layer)
    if config != "full":  # the flags matter: the full formula gives something else
        assert_differs(out, pre_ln(Ref(), model.blocks[layer - 1], stream_input(), layer))


@pytest.mark.parametrize("config", list(PARTIAL))
def test_post_ln_partial_residuals(config):
    attn_res, ffn_res = PARTIAL[config]
    model = make("post-ln", attn_res=attn_res, ffn_res=ffn_res)
    out, _ = check_block(model, post_ln, Ref(attn_res=attn_res, ffn_res=ffn_res), 2)
    if config != "full":
        assert_differs(out, post_ln(Ref(), model.blocks[1], stream_input(), 2))


@pytest.mark.parametrize("norm,mlp,bias", [("rmsnorm", "gelu", True), ("none", "gelu", True),
                                           ("layernorm", "gelu-tanh", True),
                                           ("layernorm", "relu", False),
                                           ("layernorm", "swiglu", True),
                                           ("rmsnorm", "swiglu", False)])
def test_pre_ln_norm_and_mlp_kinds(norm, mlp, bias):
    model = make("pre-ln", norm=norm, mlp=mlp, bias=bias)
    check_block(model, pre_ln, Ref(norm=norm, mlp=mlp), 1)


@pytest.mark.parametrize("shaped,vp", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("layer", [1, 2])
def test_pre_ln_attention_options(shaped, vp, layer):
    model = make("pre-ln", shaped_attention=shaped, vp_identity=vp)
    r = Ref(shaped=shaped, vp=vp)
    if shaped:
        with torch.no_grad():
            attn = model.blocks[layer - 1].attn
            attn.shape_alpha.copy_(torch.tensor([0.7, 1.4]).view(H, 1, 1))
            attn.shape_beta.copy_(torch.tensor([1.3, 0.6]).view(H, 1, 1))
            attn.shape_gamma.copy_(torch.tensor([0.4, 0.9]).view(H, 1, 1))
    check_block(model, pre_ln, r, layer)


def test_pre_ln_rope():
    model = make("pre-ln", pos="rope")
    blk, x = model.blocks[0], stream_input()
    with torch.no_grad():
        out = blk(x)
        ref = pre_ln(Ref(rope=True), blk, x, 1)
        # the model computes rotary angles in float32, so this one comparison is float32-tight
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        assert_differs(out, pre_ln(Ref(), blk, x, 1))


# ---------------------------------------------------------------------------------------------
# norm placements
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layer", [1, 2])
def test_post_ln(layer):
    check_block(make("post-ln"), post_ln, Ref(), layer)


@pytest.mark.parametrize("design", ["sandwich-ln", "peri-ln"])
@pytest.mark.parametrize("layer", [1, 2])
def test_sandwich_and_peri_ln(design, layer):
    check_block(make(design), sandwich, Ref(), layer)


def test_peri_ln_normalises_the_embedding_and_sandwich_does_not():
    assert isinstance(make("peri-ln").stream.embed_norm, torch.nn.LayerNorm)
    assert isinstance(make("peri-ln", norm="rmsnorm").stream.embed_norm, torch.nn.RMSNorm)
    assert not list(make("sandwich-ln").stream.embed_norm.parameters())


def test_mix_ln_first_quarter_post_ln_rest_pre_ln():
    L = 8                                     # ceil(8/4) = 2 post-ln layers
    model = make("mix-ln", L=L)
    r = Ref(L=L)
    x = stream_input()
    for layer in range(1, L + 1):
        expected, wrong = (post_ln, pre_ln) if layer <= 2 else (pre_ln, post_ln)
        out, _ = check_block(model, expected, r, layer, x)
        with torch.no_grad():
            assert_differs(out, wrong(r, model.blocks[layer - 1], x, layer))


@pytest.mark.parametrize("L,layer", [(2, 1), (3, 3)])
def test_deepnorm(L, layer):
    model = make("deepnorm", L=L)
    out, _ = check_block(model, deepnorm, Ref(L=L), layer)
    with torch.no_grad():  # a = (2L)^(1/4) matters: plain post-ln differs
        assert_differs(out, post_ln(Ref(L=L), model.blocks[layer - 1], stream_input(), layer))


@pytest.mark.parametrize("layer", [1, 2, 3])
def test_lns(layer):
    model = make("lns", L=3)
    out, _ = check_block(model, lns, Ref(L=3), layer)
    if layer > 1:  # 1/sqrt(l) matters
        with torch.no_grad():
            assert_differs(out, pre_ln(Ref(L=3), model.blocks[layer - 1], stream_input(), layer))


@pytest.mark.parametrize("L", [2, 5])
def test_admin_closed_form_and_per_channel_w(L):
    fresh = reslab.build_model("admin", n_layer=L, n_embd=C, n_head=H, block_size=BLOCK,
                               vocab_size=VOCAB, dropout=0.0, seed=0)
    S = 2 * L
    w = math.sqrt((S + 1) / math.log(S + 1) - 1)
    for blk in fresh.blocks:
        for p in (blk.w1, blk.w2):
            assert p.shape == (C,)
            torch.testing.assert_close(p.detach().double(), torch.full((C,), w, dtype=torch.float64),
                                       rtol=1e-6, atol=0)
    model = make("admin", L=L)
    blk, x = model.blocks[L - 1], stream_input()
    # 1) w at its closed-form value, as a plain scalar in the formula
    with torch.no_grad():
        blk.w1.fill_(w)
        blk.w2.fill_(w)
        out = blk(x)
        h = N(Ref(), blk.norm1, w * x + A(Ref(), blk.attn, x))
        ref = N(Ref(), blk.norm2, w * h + M(Ref(), blk.mlp, h))
    torch.testing.assert_close(out, ref, **TOL)
    # 2) w perturbed to distinct per-channel values
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        blk.w1.copy_(w + 0.5 * torch.randn(C, generator=g, dtype=torch.float64))
        blk.w2.copy_(w + 0.5 * torch.randn(C, generator=g, dtype=torch.float64))
    out, _ = check_block(model, admin, Ref(L=L), L, x)
    assert_differs(out, ref)


@pytest.mark.parametrize("layer", [1, 2])
def test_b2t(layer):
    model = make("b2t")
    out, _ = check_block(model, b2t, Ref(), layer)
    with torch.no_grad():  # the x skip into N2 matters
        assert_differs(out, post_ln(Ref(), model.blocks[layer - 1], stream_input(), layer))


@pytest.mark.parametrize("layer", [1, 2])
def test_rezero(layer):
    model = make("rezero")
    blk = model.blocks[layer - 1]
    assert not any(isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm)) for m in model.modules())
    with torch.no_grad():
        blk.g.fill_(0.3)
    out, _ = check_block(model, rezero, Ref(norm="none"), layer)
    assert_differs(out, stream_input())


@pytest.mark.parametrize("layer", [1, 2])
def test_resi_dual_block(layer):
    s = 2.5
    model = make("resi-dual", options={"scale": s})
    blk = model.blocks[layer - 1]
    xa = stream_input(7)
    xd = 3.0 * stream_input(8)
    with torch.no_grad():
        out_a, out_d = blk((xa, xd))
        ref_a, ref_d = resi_dual(Ref(s=s), blk, (xa, xd), layer)
        assert_differs(out_d, resi_dual(Ref(s=1.0), blk, (xa, xd), layer)[1])  # s is used
    torch.testing.assert_close(out_a, ref_a, **TOL)
    torch.testing.assert_close(out_d, ref_d, **TOL)


# ---------------------------------------------------------------------------------------------
# simplified blocks (SAS, SAS-P)
# ---------------------------------------------------------------------------------------------
def set_sas_scalars_(blk) -> None:
    """Distinct per-head alpha/beta/gamma and non-default g_attn, a_FF, b_FF; W_Q non-zero."""
    with torch.no_grad():
        blk.attn.shape_alpha.copy_(torch.tensor([0.7, 1.4]).view(H, 1, 1))
        blk.attn.shape_beta.copy_(torch.tensor([1.3, 0.6]).view(H, 1, 1))
        blk.attn.shape_gamma.copy_(torch.tensor([0.4, 0.9]).view(H, 1, 1))
        blk.g_attn.fill_(0.8)
        blk.b_ff.fill_(0.35)
        if hasattr(blk, "a_ff"):
            blk.a_ff.fill_(1.2)
    assert blk.attn.c_qk.weight[:C].abs().min() > 0          # W_Q randomised (zero at init)
    if blk.layer == 1:
        assert blk.attn.c_v.weight.abs().min() > 0           # first-layer W_V randomised


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("layer", [1, 2])
def test_sas(norm, layer):
    model = make("sas", norm=norm)
    blk = model.blocks[layer - 1]
    set_sas_scalars_(blk)
    r = Ref(norm=norm, shaped=True, vp=True, attn_res=False, ffn_res=True)
    out, _ = check_block(model, sas, r, layer)
    with torch.no_grad():  # shaping matters: unshaped softmax attention gives something else
        assert_differs(out, sas(replace(r, shaped=False), blk, stream_input(), layer))


def test_sas_reference_setup_relu_no_bias_with_attention_skip():
    model = make("sas", norm="rmsnorm", mlp="relu", bias=False, attn_res=True)
    set_sas_scalars_(model.blocks[1])
    check_block(model, sas, Ref(norm="rmsnorm", mlp="relu", shaped=True, vp=True, attn_res=True), 2)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("layer", [1, 2])
def test_sas_p(norm, layer):
    model = make("sas-p", norm=norm)
    set_sas_scalars_(model.blocks[layer - 1])
    check_block(model, sas_p, Ref(norm=norm, shaped=True, vp=True), layer)


@pytest.mark.parametrize("design", ["sas", "sas-p"])
def test_norm_free_keeps_only_the_first_layers_norm(design):
    model = make(design, options={"norm_free": True})
    r = replace(DEFAULT_REF[design], norm_free=True)
    for layer in (1, 2):
        set_sas_scalars_(model.blocks[layer - 1])
        out, _ = check_block(model, REF[design], r, layer)
        if layer > 1:  # with (unit) norms the block would give something else
            blk = model.blocks[layer - 1]
            normed = SimpleNamespace(**dict(blk.named_children()), **dict(blk.named_parameters(recurse=False)))
            for name, child in blk.named_children():
                if name.startswith("norm"):
                    setattr(normed, name, torch.nn.LayerNorm(C, dtype=torch.float64))
            with torch.no_grad():
                assert_differs(out, REF[design](replace(r, norm_free=False), normed, stream_input(), layer))
    assert not list(model.stream.final_norm.parameters())


# ---------------------------------------------------------------------------------------------
# runtime branch gain and ProRes
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("design", ["pre-ln", "post-ln", "deepnorm", "sandwich-ln", "b2t", "sas"])
def test_runtime_branch_gain_multiplies_the_branch_only(design):
    model = make(design, branch_gain=2.0, gain_mode="runtime")
    r = replace(DEFAULT_REF.get(design, Ref()), gain=2.0)
    if design == "sas":
        set_sas_scalars_(model.blocks[1])
    out, _ = check_block(model, REF[design], r, 2)
    with torch.no_grad():
        assert_differs(out, REF[design](replace(r, gain=1.0), model.blocks[1], stream_input(), 2))


def test_runtime_branch_gain_resi_dual():
    model = make("resi-dual", branch_gain=2.0, gain_mode="runtime")
    blk, xa, xd = model.blocks[0], stream_input(7), stream_input(8)
    with torch.no_grad():
        out = blk((xa, xd))
        ref = resi_dual(Ref(gain=2.0), blk, (xa, xd), 1)
    torch.testing.assert_close(out, ref, **TOL)


def linear_prores_alpha(l: int, t: int, T_warm: int) -> float:
    return min(max(t / (l * T_warm), 0.0), 1.0)


PRORES_DESIGNS = [n for n in reslab.designs()    # reslab's own (an installed plugin's, the example's, aside)
                  if reslab.get_design(n).prores and reslab.get_design(n).plugin is None]


def test_prores_designs_are_the_spec_list():
    assert set(PRORES_DESIGNS) == {"pre-ln", "post-ln", "sandwich-ln", "peri-ln", "mix-ln",
                                   "deepnorm", "lns", "reordered-ln", "layerscale", "parallel",
                                   "denseformer", "speedrun", "normformer", "canon", "altup"}


@pytest.mark.parametrize("design", [d for d in PRORES_DESIGNS if d in REF])  # tested in their families' files
def test_prores_alpha_multiplies_both_branches(design):
    L, warm, t = 3, 10, 5
    model = make(design, L=L, prores="linear", prores_warmup=warm)
    model.set_step(t)
    alphas = tuple(linear_prores_alpha(l, t, warm) for l in range(1, L + 1))   # 0.5, 0.25, 1/6
    assert alphas == pytest.approx([reslab.prores_alpha("linear", l, t, L, warm) for l in range(1, L + 1)])
    r = Ref(L=L, prores=alphas)
    x = stream_input()
    for layer in range(1, L + 1):
        out, _ = check_block(model, REF[design], r, layer, x)
        with torch.no_grad():
            assert_differs(out, REF[design](Ref(L=L), model.blocks[layer - 1], x, layer))


# ---------------------------------------------------------------------------------------------
# whole model: embedding -> blocks -> stream end -> head
# ---------------------------------------------------------------------------------------------
def ref_embed(model, idx):
    return model.wte.weight[idx] + model.wpe.weight[: idx.shape[1]]


@pytest.mark.parametrize("design", [d for d in REF if d != "resi-dual"])  # the others: their families' files
def test_whole_model_single_stream(design):
    L = 2
    model = make(design, L=L)
    r = replace(DEFAULT_REF.get(design, Ref()), L=L)
    for blk in model.blocks:
        if design in ("sas", "sas-p"):
            set_sas_scalars_(blk)
        if design == "rezero":
            with torch.no_grad():
                blk.g.fill_(0.3 + 0.2 * blk.layer)
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        h = ref_embed(model, idx)
        if design == "peri-ln":                           # N on the embedding
            h = N(r, model.stream.embed_norm, h)
        for layer in range(1, L + 1):
            h = REF[design](r, model.blocks[layer - 1], h, layer)
        if FINAL_NORM[design]:
            h = N(r, model.stream.final_norm, h)
        else:
            assert not list(model.stream.final_norm.parameters())
        ref = h @ model.lm_head.weight.T
    torch.testing.assert_close(logits, ref, **TOL)


def test_pre_ln_final_norm_is_applied():
    model = make("pre-ln", L=1)
    idx = token_input()
    with torch.no_grad():
        x = pre_ln(Ref(L=1), model.blocks[0], ref_embed(model, idx), 1)
        with_norm = N(Ref(), model.stream.final_norm, x) @ model.wte.weight.T
        logits = model(idx)
    torch.testing.assert_close(logits, with_norm, **TOL)
    assert_differs(logits, x @ model.wte.weight.T)


@pytest.mark.parametrize("s", [1.0, 4.0])
def test_whole_model_resi_dual_head_input(s):
    """y = xa + N_final(xd), xa = emb, xd = s*emb at the start; s does not change the function."""
    L = 2
    model = make("resi-dual", L=L, options={"scale": s})
    idx = token_input()
    with torch.no_grad():
        emb = ref_embed(model, idx)
        xa, xd = emb, emb.clone()                     # the s = 1 form of the dual stream
        for layer in range(1, L + 1):
            xa, xd = resi_dual(Ref(L=L, s=1.0), model.blocks[layer - 1], (xa, xd), layer)
        y = xa + N(Ref(), model.stream.final_norm, xd)
        ref = y @ model.lm_head.weight.T
        logits = model(idx)
        assert_differs(logits, xa @ model.lm_head.weight.T)
    torch.testing.assert_close(logits, ref, **TOL)
