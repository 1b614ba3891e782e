"""Normalisation replaced by initialisation: skipinit, fixup, t-fixup, sub-ln (blocks/init_based.py) and the inits fixup,
t-fixup, ds-init, sub-ln (model/init.py).

Formulas: the method of test_block_formulas.py. Float64 models whose every parameter is randomised
(so no scalar sits at its init value of 0 or 1), one block's output against the formula recomputed here
from raw weight tensors with plain torch ops (the block's and its submodules' forwards are never used on
the reference side), tolerance 1e-10, and for each design a plausible wrong formula that must differ.
Inits: the initial weights against each paper's rule, with exact zeros, the exact Xavier-uniform bound
times the depth factor (the largest |w| of n draws lies within a factor 1 - 10/n of the bound, or the
draw is from the wrong bound, with probability e^-10) and a std within 6 standard errors for n draws.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

import reslab
from reslab.config import ModelConfig
from tests.test_block_formulas import (
    assert_refused,
    C,
    H,
    TOL,
    A,
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

FORMULA_TESTED = {"skipinit", "fixup", "t-fixup", "sub-ln"}

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread

NONE = Ref(norm="none")


def gelu(h):
    return 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))


def run(model, layer, ref_fn, x=None):
    """Block `layer` of model against ref_fn(block, x); returns (output, block, x)."""
    blk = model.blocks[layer - 1]
    x = stream_input() if x is None else x
    with torch.no_grad():
        out, ref = blk(x), ref_fn(blk, x)
    torch.testing.assert_close(out, ref, **TOL)
    return out, blk, x


# ---------------------------------------------------------------------------------------------
# reference formulas
# ---------------------------------------------------------------------------------------------
def skipinit_ref(blk, x, shared=False):
    # h = x + a1*A(x);  out = h + a2*M(h)   (shared: one scalar for both branches, rezero's form)
    a1 = blk.alpha_attn
    a2 = a1 if shared else blk.alpha_mlp
    h = x + a1 * A(NONE, blk.attn, x)
    return h + a2 * M(NONE, blk.mlp, h)


def fixup_ref(blk, x, scalars=True):
    # h = x + m1*A(x + b1);  out = h + m2*W2(act(W1(h + b2) + b3) + b4);  last block: out + b_head
    z = torch.zeros(())
    b1, b2, b3, b4 = (blk.b1, blk.b2, blk.b3, blk.b4) if scalars else (z, z, z, z)
    m1, m2 = (blk.m1, blk.m2) if scalars else (1.0, 1.0)
    h = x + m1 * A(NONE, blk.attn, x + b1)
    u = gelu(lin(h + b2, blk.mlp.c_fc.weight, blk.mlp.c_fc.bias) + b3)
    out = h + m2 * lin(u + b4, blk.mlp.c_proj.weight, blk.mlp.c_proj.bias)
    return out + blk.b_head if blk.b_head is not None and scalars else out


def t_fixup_ref(blk, x):
    # h = x + A(x);  out = h + M(h)
    h = x + A(NONE, blk.attn, x)
    return h + M(NONE, blk.mlp, h)


_NO_PROJ = SimpleNamespace(weight=torch.eye(C, dtype=torch.float64), bias=None)


def sub_ln_ref(blk, x, sub=True):
    # h = x + W_P N_a(Attn(N1 x));  out = h + W2 N_f(gelu(W1 N2 h))   (sub=False: plain pre-ln)
    r = Ref()
    attn = blk.attn
    heads = A(r, SimpleNamespace(c_attn=attn.c_attn, c_proj=_NO_PROJ), N(r, blk.norm1, x))   # before W_P
    heads = N(r, attn.c_proj.norm, heads) if sub else heads
    h = x + lin(heads, attn.c_proj.weight, attn.c_proj.bias)
    mlp = blk.mlp
    u = gelu(lin(N(r, blk.norm2, h), mlp.c_fc.weight, mlp.c_fc.bias))
    u = N(r, mlp.mid_norm, u) if sub else u
    return h + lin(u, mlp.c_proj.weight, mlp.c_proj.bias)


# ---------------------------------------------------------------------------------------------
# block formulas, each with a wrong formula that must differ
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layer", [1, 2])
def test_skipinit(layer):
    model = make("skipinit")
    out, blk, x = run(model, layer, skipinit_ref)
    with torch.no_grad():
        assert_differs(out, skipinit_ref(blk, x, shared=True))   # one alpha per layer (rezero) is another model
    assert all(not list(m.parameters()) for m in blk.modules() if isinstance(m, torch.nn.Identity))


@pytest.mark.parametrize("layer", [1, 2])
@pytest.mark.parametrize("bias", [False, True])
def test_fixup(layer, bias):
    model = make("fixup", bias=bias)
    out, blk, x = run(model, layer, fixup_ref)
    assert (blk.b_head is not None) == (layer == 2)               # the bias before the head: last block only
    assert (blk.mlp.c_fc.bias is not None) == bias
    with torch.no_grad():
        assert_differs(out, fixup_ref(blk, x, scalars=False))     # without the scalar biases and multipliers


@pytest.mark.parametrize("mlp", ["relu", "swiglu"])
def test_fixup_other_activations(mlp):
    """Scalar biases before W1, before the activation (both SwiGLU halves) and before W2."""
    model = make("fixup", mlp=mlp)
    blk, x = model.blocks[0], stream_input()
    with torch.no_grad():
        h = x + blk.m1 * A(NONE, blk.attn, x + blk.b1)
        pre = lin(h + blk.b2, blk.mlp.c_fc.weight) + blk.b3
        if mlp == "relu":
            u = pre.clamp_min(0.0)
        else:
            n = pre.shape[-1] // 2
            u = pre[..., :n] * torch.sigmoid(pre[..., :n]) * pre[..., n:]
        ref = h + blk.m2 * lin(u + blk.b4, blk.mlp.c_proj.weight)
        torch.testing.assert_close(blk(x), ref, **TOL)


@pytest.mark.parametrize("layer", [1, 2])
def test_t_fixup(layer):
    model = make("t-fixup")
    out, blk, x = run(model, layer, t_fixup_ref)
    with torch.no_grad():  # the post-ln Transformer it comes from, with LayerNorm kept, is another model
        ln = torch.nn.LayerNorm(C, dtype=torch.float64)
        h = ln(x + A(NONE, blk.attn, x))
        assert_differs(out, ln(h + M(NONE, blk.mlp, h)))


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("layer", [1, 2])
def test_sub_ln(layer, norm):
    model = make("sub-ln", norm=norm)
    r = Ref(norm=norm)

    def ref(blk, x, sub=True):
        attn, mlp = blk.attn, blk.mlp
        heads = A(r, SimpleNamespace(c_attn=attn.c_attn, c_proj=_NO_PROJ), N(r, blk.norm1, x))
        h = x + lin(N(r, attn.c_proj.norm, heads) if sub else heads, attn.c_proj.weight, attn.c_proj.bias)
        u = gelu(lin(N(r, blk.norm2, h), mlp.c_fc.weight, mlp.c_fc.bias))
        return h + lin(N(r, mlp.mid_norm, u) if sub else u, mlp.c_proj.weight, mlp.c_proj.bias)

    out, blk, x = run(model, layer, ref)
    with torch.no_grad():
        assert_differs(out, ref(blk, x, sub=False))               # pre-ln on the same weights: no Sub-LN


def test_sub_ln_norm_sits_before_w_p_not_after():
    """NormFormer's placement, N_a after W_P, is another model."""
    model = make("sub-ln")
    blk, x = model.blocks[0], stream_input()
    r = Ref()
    with torch.no_grad():
        after = x + N(r, blk.attn.c_proj.norm, A(r, blk.attn, N(r, blk.norm1, x)))   # x + N_a(W_P Attn(N1 x))
        assert_differs(blk.attn_residual(x, blk.attn(blk.norm1(x))), after)


# ---------------------------------------------------------------------------------------------
# whole models: embedding -> blocks -> head (fixup's head bias, sub-ln's final norm, no norm elsewhere)
# ---------------------------------------------------------------------------------------------
WHOLE = {"skipinit": (skipinit_ref, False), "fixup": (fixup_ref, False), "t-fixup": (t_fixup_ref, False),
         "sub-ln": (sub_ln_ref, True)}


@pytest.mark.parametrize("design", sorted(WHOLE))
@pytest.mark.parametrize("tied", [True, False])
def test_whole_model(design, tied):
    ref_fn, final_norm = WHOLE[design]
    model = make(design, L=3, tie_weights=tied)
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        h = ref_embed(model, idx)
        for blk in model.blocks:
            h = ref_fn(blk, h)
        y = N(Ref(), model.stream.final_norm, h) if final_norm else h
        if not final_norm:
            assert not list(model.stream.final_norm.parameters())
        torch.testing.assert_close(logits, y @ model.lm_head.weight.T, **TOL)
        if design == "fixup":                                     # the head reads x_L + b_head
            assert_differs(logits, (h - model.blocks[-1].b_head) @ model.lm_head.weight.T)
        if design == "sub-ln":                                    # and sub-ln's through the final norm
            assert_differs(logits, h @ model.lm_head.weight.T)


# ---------------------------------------------------------------------------------------------
# the inits
# ---------------------------------------------------------------------------------------------
CI, LI = 64, 6           # width and depth of the init checks: 4096 draws per C x C matrix


def build(design: str, **kw) -> reslab.GPT:
    kw = {"n_layer": LI, "n_embd": CI, "n_head": 4, "block_size": 16, "vocab_size": 97, **kw}
    return reslab.build_model(design, seed=3, **kw)


def xavier_bound(w: torch.Tensor) -> float:
    fan_out, fan_in = w.shape
    return math.sqrt(6.0 / (fan_in + fan_out))


def assert_uniform(w: torch.Tensor, bound: float) -> None:
    """w ~ U(-bound, bound): within the bound, its largest |w| within 1 - 10/n of it, std bound/sqrt(3)."""
    w = w.detach().double().flatten()
    n = w.numel()
    top = w.abs().max().item()
    assert top <= bound * (1 + 1e-6), (top, bound)
    assert top >= bound * (1 - 10 / n), (top, bound)
    std = bound / math.sqrt(3)
    assert abs(w.std().item() - std) <= 6 * 0.45 / math.sqrt(n) * std, (w.std().item(), std)
    assert abs(w.mean().item()) <= 6 * std / math.sqrt(n)


def assert_normal(w: torch.Tensor, std: float) -> None:
    w = w.detach().double().flatten()
    n = w.numel()
    assert abs(w.std().item() - std) <= 6 * std / math.sqrt(2 * n), (w.std().item(), std)
    assert abs(w.mean().item()) <= 6 * std / math.sqrt(n)


def qkv(attn) -> list[torch.Tensor]:
    return list(attn.c_attn.weight.split(attn.n_embd))


def test_fixup_init_zeros_and_depth_factors():
    K = 2 * LI                                                    # residual branches
    model = build("fixup", tie_weights=False)
    assert model.config.bias is False and model.config.init == "fixup"
    assert torch.count_nonzero(model.lm_head.weight) == 0         # the classification layer starts at 0
    for layer, blk in enumerate(model.blocks, start=1):
        assert torch.count_nonzero(blk.attn.c_proj.weight) == 0   # each branch's last layer starts at 0
        assert torch.count_nonzero(blk.mlp.c_proj.weight) == 0
        # the fused in-projection [W_Q; W_K; W_V] (3C x C), Xavier-uniform over it whole, times K^(-1/6)
        assert_uniform(blk.attn.c_attn.weight, math.sqrt(6.0 / (4 * CI)) * K ** (-1 / 6))
        assert_uniform(blk.mlp.c_fc.weight, xavier_bound(blk.mlp.c_fc.weight) * K ** -0.5)   # m = 2
        assert blk.b1.item() == blk.b2.item() == blk.b3.item() == blk.b4.item() == 0.0
        assert blk.m1.item() == blk.m2.item() == 1.0
        assert (blk.b_head is not None) == (layer == LI) and (blk.b_head is None or blk.b_head.item() == 0.0)
    tied = build("fixup")
    assert torch.count_nonzero(tied.lm_head.weight) > 0           # tied: the head is the embedding, kept


def test_fixup_starts_as_identity_blocks_and_untied_head_gives_zero_logits():
    model = build("fixup", tie_weights=False).eval()
    x = torch.randn(2, 16, CI, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for blk in model.blocks:
            torch.testing.assert_close(blk(x), x, rtol=0, atol=0)
        assert torch.count_nonzero(model(token_input())) == 0


def test_fixup_learns_from_zero_branches():
    model = build("fixup", n_layer=2, tie_weights=False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    idx = token_input()
    for _ in range(3):
        opt.zero_grad()
        model(idx, idx)[1].backward()
        opt.step()
    assert torch.count_nonzero(model.blocks[0].mlp.c_proj.weight) > 0
    assert model.blocks[0].m1.item() != 1.0


def test_t_fixup_init_decoder_rule():
    model = build("t-fixup")
    s = (9 * LI) ** -0.25
    assert model.config.norm == "none" and s == pytest.approx(0.36889, abs=1e-5)   # 54^(-1/4)
    for blk in model.blocks:
        wq, wk, wv = qkv(blk.attn)
        assert_uniform(wq, xavier_bound(wq))                      # W_Q, W_K: Xavier, untouched
        assert_uniform(wk, xavier_bound(wk))
        for w in (wv, blk.attn.c_proj.weight, blk.mlp.c_fc.weight, blk.mlp.c_proj.weight):
            assert_uniform(w, xavier_bound(w) * s)                # W_V, W_P, W1, W2 times (9L)^(-1/4)
    assert_normal(model.wte.weight, CI ** -0.5 * s)               # token embedding N(0, d^(-1/2)) x (9L)^(-1/4)
    assert_normal(model.wpe.weight, 0.02)                         # learned positions: untouched
    with pytest.raises(AssertionError):                           # the encoder rule 0.67 L^(-1/4) is not it
        assert_uniform(wv, xavier_bound(wv) * 0.67 * LI ** -0.25)


def test_ds_init_depth_scaled_bound_per_layer():
    model = build("post-ln", init="ds-init")
    for layer, blk in enumerate(model.blocks, start=1):
        for w in qkv(blk.attn) + [blk.attn.c_proj.weight, blk.mlp.c_fc.weight, blk.mlp.c_proj.weight]:
            assert_uniform(w, xavier_bound(w) / math.sqrt(layer))
    with pytest.raises(AssertionError):                           # the code's l^(-1/4) reading is not it
        w = model.blocks[3].mlp.c_fc.weight
        assert_uniform(w, xavier_bound(w) * 4 ** -0.25)


def test_sub_ln_init_gamma():
    model = build("sub-ln")
    gamma = math.sqrt(math.log(2 * LI))
    for blk in model.blocks:
        wq, wk, wv = qkv(blk.attn)
        assert_uniform(wq, xavier_bound(wq))
        assert_uniform(wk, xavier_bound(wk))
        for w in (wv, blk.attn.c_proj.weight, blk.mlp.c_fc.weight, blk.mlp.c_proj.weight):
            assert_uniform(w, xavier_bound(w) * gamma)
        for norm in (blk.attn.c_proj.norm, blk.mlp.mid_norm):     # the Sub-LN norms: 1 and 0
            assert torch.equal(norm.weight, torch.ones_like(norm.weight))
            assert torch.equal(norm.bias, torch.zeros_like(norm.bias))
        assert blk.mlp.mid_norm.weight.shape == (4 * CI,)


@pytest.mark.parametrize("alpha_init", [0.0, 0.1])
def test_skipinit_alpha_at_init_and_identity_blocks(alpha_init):
    model = build("skipinit", options={"alpha_init": alpha_init}).eval()
    x = torch.randn(2, 16, CI, generator=torch.Generator().manual_seed(0))
    for blk in model.blocks:
        assert blk.alpha_attn.item() == blk.alpha_mlp.item() == pytest.approx(alpha_init)
        if alpha_init == 0.0:
            with torch.no_grad():
                torch.testing.assert_close(blk(x), x, rtol=0, atol=0)
    rezero = build("rezero")                                      # rezero: one scalar per layer, skipinit two
    n_scalars = lambda m: sum(p.numel() for n, p in m.blocks[0].named_parameters() if p.dim() == 0)
    assert (n_scalars(model), n_scalars(rezero)) == (2, 1)


def test_new_inits_leave_the_other_designs_alone():
    """The added Init values change no existing scheme: gpt2 and deepnorm draw the same weights."""
    for design in ("pre-ln", "deepnorm"):
        a = build(design).state_dict()
        b = build(design).state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a)
    cfg = reslab.resolve(ModelConfig(design="post-ln", init="ds-init"))
    assert cfg.init == "ds-init" and cfg.norm == "layernorm"


# ---------------------------------------------------------------------------------------------
# refusals: one line naming the field
# ---------------------------------------------------------------------------------------------
REFUSALS = [
    ("skipinit", {"options": {"alpha_init": float("inf")}}, "model.options.alpha_init"),
    ("skipinit", {"options": {"alpha_init": float("nan")}}, "model.options.alpha_init"),
    ("skipinit", {"options": {"alpha": 0.1}}, "model.options.alpha"),
    ("skipinit", {"norm": "layernorm"}, "model.norm"),
    ("fixup", {"norm": "rmsnorm"}, "model.norm"),
    ("fixup", {"options": {"alpha_init": 0.0}}, "model.options"),
    ("fixup", {"branch_gain": 2.0, "gain_mode": "init"}, "model.gain_mode"),
    ("t-fixup", {"norm": "layernorm"}, "model.norm"),
    ("t-fixup", {"layer_designs": {"1": "post-ln"}}, "model.layer_designs"),
    ("sub-ln", {"norm": "none"}, "model.norm"),
    ("pre-ln", {"init": "t-fixup"}, "model.init"),
    ("pre-ln", {"init": "fixup-init"}, "model.init"),
]


@pytest.mark.parametrize("design,fields,field", REFUSALS)
def test_refusals_name_the_field(design, fields, field):
    assert_refused(design, field, **fields)


def test_allowed_combinations():
    for design, fields in [("fixup", {"init": "xavier"}), ("fixup", {"branch_gain": 2.0}),
                           ("fixup", {"init": "xavier", "branch_gain": 2.0, "gain_mode": "init"}),
                           ("skipinit", {"options": {"alpha_init": -0.05}}), ("sub-ln", {"norm": "rmsnorm"}),
                           ("post-ln", {"init": "ds-init"}), ("pre-ln", {"init": "sub-ln"})]:
        reslab.resolve(ModelConfig(design=design, n_layer=2, **fields))
