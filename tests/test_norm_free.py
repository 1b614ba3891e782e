"""Normalisation replaced: the norm kinds derf, seednorm, rmsnorm-nogain and the designs gpas, speedrun-lambdas.

Same method as test_block_formulas.py: float64 models whose every parameter is randomised, the
output against its formula recomputed here from raw parameter tensors with plain torch ops (the
block's and its submodules' forwards are never used on the reference side), tolerance 1e-10, and
for each formula a plausible wrong one that must give something else. GPAS is also checked on its
gradient: the stop-gradient leaves d x / d x' = I, which a plain scaling would not.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import reslab
from reslab.errors import ConfigError
from reslab.model.blocks.speedrun import SpeedrunState
from reslab.model.norms import Derf
from tests.test_block_formulas import (
    EPS,
    TOL,
    A,
    C,
    M,
    N,
    Ref,
    assert_differs,
    make,
    ref_embed,
    stream_input,
    token_input,
)

FORMULA_TESTED = {"gpas"}
NEW_NORMS = ("derf", "seednorm", "rmsnorm-nogain")

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread


# ---------------------------------------------------------------------------------------------
# the norms, written out from their equations
# ---------------------------------------------------------------------------------------------
def rms(x):
    return torch.sqrt((x * x).mean(-1, keepdim=True) + EPS)


def Nz(norm: str, mod, x):
    """Derf: gamma erf(alpha x + s) + beta, alpha and s scalars (Chen et al. 2025, Eq. 10; shapes as
    x-transformers' Derf). SeeDNorm: [tanh(x beta^T) alpha + gamma] * x / RMS(x), alpha, beta, gamma
    per channel (Cai et al. 2025). rmsnorm-nogain: x / RMS(x). Others as test_block_formulas."""
    if norm == "derf":
        assert mod.alpha.shape == () and mod.shift.shape == () and mod.weight.shape == (C,)
        # erf from its series-free definition is not in torch; math.erf per element, float64
        z = (mod.alpha * x + mod.shift).detach().double()
        e = torch.tensor([math.erf(v) for v in z.flatten().tolist()], dtype=torch.float64).view(z.shape)
        y = e * mod.weight
        return y + mod.bias if mod.bias is not None else y
    if norm == "seednorm":
        assert mod.alpha.shape == mod.beta.shape == mod.weight.shape == (C,)
        d = (x * mod.beta).sum(-1, keepdim=True)                  # x beta^T: one number per token
        return (torch.tanh(d) * mod.alpha + mod.weight) * x / rms(x)
    if norm == "rmsnorm-nogain":
        assert not list(mod.parameters()), "the weightless RMS norm has no parameter"
        return x / rms(x)
    return N(Ref(norm=norm), mod, x)


def small_beta_(model, seed: int = 5) -> None:
    """SeeDNorm's beta ~ 0.1 N(0, 1), so that tanh(x beta^T) is not saturated (randomize_ puts every
    vector near 1, where |x beta^T| ~ 5 and tanh ~ +-1 would hide a wrong dot product)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".beta"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g, dtype=torch.float64))


def pre_ln_ref(blk, x, norm):
    h = x + A(Ref(), blk.attn, Nz(norm, blk.norm1, x))
    return h + M(Ref(), blk.mlp, Nz(norm, blk.norm2, h))


@pytest.mark.parametrize("norm", NEW_NORMS)
def test_each_norm_against_its_equation(norm):
    model = make("pre-ln", norm=norm)
    small_beta_(model)
    x = stream_input()
    for mod in (model.blocks[0].norm1, model.blocks[1].norm2, model.stream.final_norm):
        with torch.no_grad():
            torch.testing.assert_close(mod(x), Nz(norm, mod, x), **TOL)


@pytest.mark.parametrize("bias", [True, False])
def test_derf_formula_and_its_controls(bias):
    model = make("pre-ln", norm="derf", bias=bias)
    mod, x = model.blocks[0].norm1, stream_input()
    assert (mod.bias is not None) == bias
    with torch.no_grad():
        out = mod(x)
        torch.testing.assert_close(out, Nz("derf", mod, x), **TOL)
        y = torch.tanh(mod.alpha * x + mod.shift) * mod.weight        # DyT's tanh in erf's place
        assert_differs(out, y + mod.bias if bias else y)
        y = torch.erf(mod.alpha * x) * mod.weight                     # the shift s left out
        assert_differs(out, y + mod.bias if bias else y)


def test_seednorm_formula_and_its_controls():
    model = make("pre-ln", norm="seednorm")
    small_beta_(model)
    mod, x = model.blocks[0].norm1, stream_input()
    with torch.no_grad():
        out = mod(x)
        torch.testing.assert_close(out, Nz("seednorm", mod, x), **TOL)
        assert_differs(out, mod.weight * x / rms(x))                          # RMSNorm: no dynamic gain
        d = (x / rms(x) * mod.beta).sum(-1, keepdim=True)                     # beta read on the normalised x
        assert_differs(out, (torch.tanh(d) * mod.alpha + mod.weight) * x / rms(x))
        e = torch.tanh(x * mod.beta)                                          # element-wise, no dot product
        assert_differs(out, (e * mod.alpha + mod.weight) * x / rms(x))


def test_rmsnorm_nogain_and_its_control():
    model = make("pre-ln", norm="rmsnorm-nogain")
    mod, x = model.blocks[0].norm1, stream_input()
    with torch.no_grad():
        out = mod(x)
        torch.testing.assert_close(out, x / rms(x), **TOL)
        mu = x.mean(-1, keepdim=True)                                         # LayerNorm without affine
        assert_differs(out, (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + EPS))
        torch.testing.assert_close(mod(3.0 * x), out, rtol=1e-4, atol=1e-4)  # scale-invariant (up to eps)


def test_init_values():
    """Derf: alpha 0.5, s 0, gamma 1, beta 0 (x-transformers' inits); SeeDNorm: gamma 1, alpha 1,
    beta 0, so it is RMSNorm at init; the weightless norm has no parameter at all."""
    derf = reslab.build_model("pre-ln", norm="derf", n_layer=1, n_embd=C, n_head=2, block_size=8, vocab_size=11)
    m = derf.blocks[0].norm1
    assert m.alpha.item() == 0.5 and m.shift.item() == 0.0
    assert torch.equal(m.weight, torch.ones(C)) and torch.equal(m.bias, torch.zeros(C))
    seed = reslab.build_model("pre-ln", norm="seednorm", n_layer=1, n_embd=C, n_head=2, block_size=8, vocab_size=11)
    m = seed.blocks[0].norm1
    assert torch.equal(m.weight, torch.ones(C)) and torch.equal(m.alpha, torch.ones(C))
    assert torch.equal(m.beta, torch.zeros(C))
    x = stream_input().float()
    torch.testing.assert_close(m(x), F.rms_norm(x, (C,), eps=EPS))
    plain = reslab.build_model("pre-ln", norm="rmsnorm-nogain", n_layer=1, n_embd=C, n_head=2, block_size=8,
                               vocab_size=11)
    ln = reslab.build_model("pre-ln", norm="rmsnorm", n_layer=1, n_embd=C, n_head=2, block_size=8, vocab_size=11)
    n_gains = 3 * C                                            # norm1, norm2, final norm
    assert sum(p.numel() for p in ln.parameters()) - sum(p.numel() for p in plain.parameters()) == n_gains


@pytest.mark.parametrize("norm", NEW_NORMS)
def test_pre_ln_block_built_with_the_norm(norm):
    """One design built with the norm, at block level: pre-ln with norm = derf / seednorm / nogain."""
    model = make("pre-ln", norm=norm)
    small_beta_(model)
    x = stream_input()
    for layer in (1, 2):
        blk = model.blocks[layer - 1]
        with torch.no_grad():
            out = blk(x)
            torch.testing.assert_close(out, pre_ln_ref(blk, x, norm), **TOL)
            ln = torch.nn.LayerNorm(C, dtype=torch.float64)     # a LayerNorm in its place differs
            wrong = type("B", (), dict(blk.named_children(), norm1=ln, norm2=ln))
            assert_differs(out, pre_ln_ref(wrong, x, "layernorm"))


@pytest.mark.parametrize("norm", NEW_NORMS)
def test_whole_model_with_the_norm(norm):
    """Every norm of the model, the final one included, is the new kind: the logits say so."""
    L = 2
    model = make("pre-ln", L=L, norm=norm)
    small_beta_(model)
    idx = token_input()
    with torch.no_grad():
        h = ref_embed(model, idx)
        for layer in range(1, L + 1):
            h = pre_ln_ref(model.blocks[layer - 1], h, norm)
        torch.testing.assert_close(model(idx), Nz(norm, model.stream.final_norm, h) @ model.lm_head.weight.T, **TOL)
        assert_differs(model(idx), h @ model.lm_head.weight.T)


def test_layerscale_takes_the_new_norms_and_post_ln_refuses_them():
    for norm in NEW_NORMS:
        reslab.build_model("layerscale", norm=norm, n_layer=1, n_embd=C, n_head=2, block_size=8, vocab_size=11)
        with pytest.raises(ConfigError) as e:
            reslab.build_model("post-ln", norm=norm, n_layer=1, n_embd=C, n_head=2, block_size=8, vocab_size=11)
        assert len(e.value.errors) == 1 and e.value.errors[0].startswith("model.norm:")


def test_unknown_norm_is_one_line_naming_the_field():
    with pytest.raises(ConfigError) as e:
        reslab.build_model("pre-ln", norm="erf", n_layer=1, n_embd=C, n_head=2, block_size=8, vocab_size=11)
    assert len(e.value.errors) == 1 and e.value.errors[0].startswith("model.norm:")
    assert "'derf'" in e.value.errors[0] and "'seednorm'" in e.value.errors[0]


def test_dyt_alpha_sets_derfs_initial_alpha_and_is_refused_with_seednorm():
    """One field sets both element-wise norms' initial slope: every Derf of the model starts at it
    (the final norm included), and the output moves with it; a norm without alpha refuses it."""
    kw = dict(n_layer=2, n_embd=C, n_head=2, block_size=8, vocab_size=11)
    torch.manual_seed(0)
    low = reslab.build_model("pre-ln", norm="derf", dyt_alpha=0.05, **kw)
    torch.manual_seed(0)
    default = reslab.build_model("pre-ln", norm="derf", **kw)
    alphas = [m.alpha.item() for m in low.modules() if isinstance(m, Derf)]
    assert len(alphas) == 2 * 2 + 1 and all(a == pytest.approx(0.05) for a in alphas)
    assert all(m.alpha.item() == 0.5 for m in default.modules() if isinstance(m, Derf))
    idx = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(1))
    assert not torch.allclose(low(idx)[0], default(idx)[0])
    with pytest.raises(ConfigError) as e:
        reslab.build_model("pre-ln", norm="seednorm", dyt_alpha=0.3, **kw)
    assert len(e.value.errors) == 1 and e.value.errors[0].startswith("model.dyt_alpha:")


# ---------------------------------------------------------------------------------------------
# GPAS
# ---------------------------------------------------------------------------------------------
def silu(a):
    return a / (1.0 + torch.exp(-a))


def gpas_ref(blk, x, norm="layernorm"):
    """x' = x + A(N1 x); x = (1 - SiLU(a)) x'; x' = x + M(N2 x); x = (1 - SiLU(a)) x' (forward value)."""
    k = 1.0 - silu(blk.gpas_alpha)
    h = k * (x + A(Ref(), blk.attn, Nz(norm, blk.norm1, x)))
    return k * (h + M(Ref(), blk.mlp, Nz(norm, blk.norm2, h)))


def set_alphas_(model):
    with torch.no_grad():
        for blk in model.blocks:
            blk.gpas_alpha.fill_(0.1 + 0.4 * blk.layer)  # 0.5, 0.9: SiLU 0.31, 0.64 (a != 1: there SiLU = sigmoid)


@pytest.mark.parametrize("norm", ["layernorm", "derf"])
def test_gpas_forward_value(norm):
    model = make("gpas", norm=norm)
    set_alphas_(model)
    x = stream_input()
    for layer in (1, 2):
        blk = model.blocks[layer - 1]
        assert blk.gpas_alpha.shape == ()
        with torch.no_grad():
            out = blk(x)
            torch.testing.assert_close(out, gpas_ref(blk, x, norm), **TOL)
            assert_differs(out, pre_ln_ref(blk, x, norm))                        # no scaling: pre-ln
            k = 1.0 - silu(blk.gpas_alpha)                                       # scaled once per layer
            once = x + A(Ref(), blk.attn, Nz(norm, blk.norm1, x))
            assert_differs(out, k * (once + M(Ref(), blk.mlp, Nz(norm, blk.norm2, once))))
            sig = 1.0 - torch.sigmoid(blk.gpas_alpha)                            # sigmoid for SiLU
            h = sig * (x + A(Ref(), blk.attn, Nz(norm, blk.norm1, x)))
            assert_differs(out, sig * (h + M(Ref(), blk.mlp, Nz(norm, blk.norm2, h))))


def test_gpas_gradient_is_the_stop_gradient_one():
    """With sg, d x / d x' = I at each scaling: the input gradient is that of pre-ln-with-the-scaled-
    forward where the scale is NOT differentiated through x'. Written out: the reference chain runs
    the same formula with x' detached in the subtracted copy, by hand (no module forward), and a
    plain scaling (1 - SiLU(a)) x' gives a different input gradient, scaled by (1 - SiLU(a))."""
    model = make("gpas")
    set_alphas_(model)
    blk = model.blocks[1]
    a = blk.gpas_alpha
    x = stream_input().requires_grad_(True)
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(11), dtype=torch.float64)

    out = blk(x)
    (gx, ga) = torch.autograd.grad(out, (x, a), g)

    def sg_chain(x):
        k = silu(a)
        h1 = x + A(Ref(), blk.attn, N(Ref(), blk.norm1, x))
        h = h1 - k * h1.detach()
        h2 = h + M(Ref(), blk.mlp, N(Ref(), blk.norm2, h))
        return h2 - k * h2.detach(), h1, h2

    x2 = x.detach().clone().requires_grad_(True)
    ref, h1, h2 = sg_chain(x2)
    with torch.no_grad():
        torch.testing.assert_close(out, ref, **TOL)
    (rx, ra) = torch.autograd.grad(ref, (x2, a), g)
    torch.testing.assert_close(gx, rx, **TOL)
    torch.testing.assert_close(ga, ra, **TOL)
    # d out / d a, written out: the two scalings' direct terms, -SiLU'(a) <g, x'_2>, plus the first
    # scaling's effect carried through the MLP sublayer (sg keeps the forward value (1 - SiLU) x').
    dsilu = torch.sigmoid(a) * (1 + a * (1 - torch.sigmoid(a)))
    x3 = x.detach().clone().requires_grad_(True)
    _, h1b, _ = sg_chain(x3)
    h = h1b.detach()
    hv = h * (1 - silu(a.detach()))
    hv.requires_grad_(True)
    h2v = hv + M(Ref(), blk.mlp, N(Ref(), blk.norm2, hv))
    (gh,) = torch.autograd.grad(h2v, hv, g)        # what reaches the first scaling's output (sg: unscaled)
    expect = -dsilu * ((g * h2.detach()).sum() + (gh * h).sum())
    torch.testing.assert_close(ga, expect.detach(), **TOL)

    # the control: a plain scaling without sg scales the input gradient by (1 - SiLU(a)) per step
    def plain_chain(x):
        k = 1.0 - silu(a)
        h = k * (x + A(Ref(), blk.attn, N(Ref(), blk.norm1, x)))
        return k * (h + M(Ref(), blk.mlp, N(Ref(), blk.norm2, h)))

    x4 = x.detach().clone().requires_grad_(True)
    (px,) = torch.autograd.grad(plain_chain(x4), x4, g)
    assert_differs(gx, px)


def test_gpas_gradient_through_one_scaling_is_the_identity():
    """The scaling alone: x = x' - SiLU(a) sg(x') has d x / d x' = I exactly and d x / d a = -SiLU'(a) x'."""
    model = make("gpas", L=1)
    set_alphas_(model)
    blk = model.blocks[0]
    xp = stream_input().requires_grad_(True)
    g = torch.randn(xp.shape, generator=torch.Generator().manual_seed(12), dtype=torch.float64)
    y = blk.scale_down(xp)
    gx, ga = torch.autograd.grad(y, (xp, blk.gpas_alpha), g)
    a = blk.gpas_alpha.detach()
    with torch.no_grad():
        torch.testing.assert_close(y, (1 - silu(a)) * xp, **TOL)
    torch.testing.assert_close(gx, g, **TOL)
    dsilu = torch.sigmoid(a) * (1 + a * (1 - torch.sigmoid(a)))
    torch.testing.assert_close(ga, -dsilu * (g * xp.detach()).sum(), **TOL)
    assert_differs(gx, (1 - silu(a)) * g)          # a plain scaling's gradient


def test_gpas_starts_as_pre_ln():
    kw = dict(n_layer=2, n_embd=C, n_head=2, block_size=8, vocab_size=11, seed=0)
    gpas, pre = reslab.build_model("gpas", **kw), reslab.build_model("pre-ln", **kw)
    assert all(blk.gpas_alpha.item() == 0.0 for blk in gpas.blocks)
    idx = token_input()
    with torch.no_grad():
        torch.testing.assert_close(gpas(idx), pre(idx))


def test_gpas_whole_model():
    L = 2
    model = make("gpas", L=L)
    set_alphas_(model)
    idx = token_input()
    with torch.no_grad():
        h = ref_embed(model, idx)
        for layer in range(1, L + 1):
            h = gpas_ref(model.blocks[layer - 1], h)
        logits = model(idx)
        torch.testing.assert_close(logits, N(Ref(), model.stream.final_norm, h) @ model.lm_head.weight.T, **TOL)
        p = ref_embed(model, idx)                   # the same weights as pre-ln: the stream differs
        for layer in range(1, L + 1):
            p = pre_ln_ref(model.blocks[layer - 1], p, "layernorm")
        assert_differs(logits, N(Ref(), model.stream.final_norm, p) @ model.lm_head.weight.T)


def test_gpas_refuses_what_it_has_no_meaning_for():
    with pytest.raises(ConfigError) as e:
        reslab.build_model("gpas", options={"gate": "sublayer"}, n_layer=1, n_embd=C, n_head=2, block_size=8,
                           vocab_size=11)
    assert len(e.value.errors) == 1 and e.value.errors[0].startswith("model.options:")


# ---------------------------------------------------------------------------------------------
# speedrun-lambdas: modded-nanogpt's x = r x + p F(N(x)) per sublayer, on reslab's speedrun
# ---------------------------------------------------------------------------------------------
FORMULA_TESTED |= {"speedrun-lambdas"}
OFF = {"x0": False, "unet": False, "value_embeds": False, "backout": False}


def set_lambdas_(model):
    """r, p away from init and from each other, different per layer and sublayer."""
    with torch.no_grad():
        for blk in model.blocks:
            l = blk.layer
            blk.attn_residual.skip_lambda.fill_(0.8 + 0.1 * l)
            blk.attn_residual.post_lambda.fill_(0.5 + 0.2 * l)
            blk.mlp_residual.skip_lambda.fill_(1.3 - 0.1 * l)
            blk.mlp_residual.post_lambda.fill_(0.6 + 0.3 * l)


def lambdas_block_ref(blk, x, norm="layernorm", extra=None, lambdas=True):
    """x = r1 x + p1 A(N1 x); x = r2 x + p2 M(N2 x) (lambdas=False: plain pre-ln, the control)."""
    from tests.test_parallel_depth_and_speedrun_blocks import ref_attention

    ra, pa = (blk.attn_residual.skip_lambda, blk.attn_residual.post_lambda) if lambdas else (1.0, 1.0)
    rm, pm = (blk.mlp_residual.skip_lambda, blk.mlp_residual.post_lambda) if lambdas else (1.0, 1.0)
    n1 = Nz(norm, blk.norm1, x)
    x = ra * x + pa * ref_attention(blk.attn, n1, extra=torch.zeros_like(n1) if extra is None else extra(n1))
    return rm * x + pm * M(Ref(), blk.mlp, Nz(norm, blk.norm2, x))


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm-nogain"])
def test_speedrun_lambdas_block(norm):
    model = make("speedrun-lambdas", options=OFF, norm=norm)
    set_lambdas_(model)
    x = stream_input()
    for blk in model.blocks:
        with torch.no_grad():
            out = blk(SpeedrunState(x=x, x0=x, tokens=None)).x
            torch.testing.assert_close(out, lambdas_block_ref(blk, x, norm), **TOL)
            assert_differs(out, lambdas_block_ref(blk, x, norm, lambdas=False))    # plain speedrun
            ra, pa = blk.attn_residual.skip_lambda, blk.attn_residual.post_lambda   # r and p swapped
            rm, pm = blk.mlp_residual.skip_lambda, blk.mlp_residual.post_lambda
            from tests.test_parallel_depth_and_speedrun_blocks import ref_attention
            h = pa * x + ra * ref_attention(blk.attn, Nz(norm, blk.norm1, x), extra=torch.zeros_like(x))
            assert_differs(out, pm * h + rm * M(Ref(), blk.mlp, Nz(norm, blk.norm2, h)))


@pytest.mark.parametrize("L", [4, 5])
def test_speedrun_lambdas_whole_model(L):
    """Every speedrun path on (x0 mix, U-net, value embeddings, backout) and the lambdas."""
    model = make("speedrun-lambdas", L=L)
    set_lambdas_(model)
    idx = token_input()
    r = Ref(L=L)

    def logits_ref(lambdas=True):
        first = N(r, model.stream.embed_norm, ref_embed(model, idx))
        x, outs = first, {0: first}
        for l in range(1, L + 1):
            blk = model.blocks[l - 1]
            x = blk.resid_lambda * x + blk.x0_lambda * first
            if l > L // 2 and 1 <= L + 1 - l <= L // 2:
                x = x + blk.unet_weight * outs[L + 1 - l]
            extra = None
            if (L - l) % 2 == 0:
                def extra(n1, blk=blk):
                    g = 3.0 * torch.sigmoid(n1[..., :12] @ blk.ve_gate.weight.T)
                    table = blk.value_embed.weight[idx]
                    return g.repeat_interleave(table.shape[-1] // g.shape[-1], dim=-1) * table
            x = lambdas_block_ref(blk, x, extra=extra, lambdas=lambdas)
            outs[l] = x
        y = x - model.stream.backout_lambda * outs[L // 2]
        return N(r, model.stream.final_norm, y) @ model.lm_head.weight.T

    with torch.no_grad():
        logits = model(idx)
        torch.testing.assert_close(logits, logits_ref(), **TOL)
        assert_differs(logits, logits_ref(lambdas=False))


def test_speedrun_lambdas_init_and_start():
    """r = sqrt(1.1), p = 1 at init: the stream grows by 1.1 per layer where speedrun's does not."""
    kw = dict(n_layer=2, n_embd=C, n_head=2, block_size=8, vocab_size=11, seed=0)
    model = reslab.build_model("speedrun-lambdas", **kw)
    for blk in model.blocks:
        for res in (blk.attn_residual, blk.mlp_residual):
            assert res.skip_lambda.item() == pytest.approx(math.sqrt(1.1)) and res.post_lambda.item() == 1.0
    idx = token_input()
    with torch.no_grad():
        assert_differs(model(idx), reslab.build_model("speedrun", **kw)(idx), min_gap=1e-6)


@pytest.mark.parametrize("fields,needle", [
    ({"options": {"backout_layer": 9}}, "model.options.backout_layer:"),
    ({"options": {"backout": False, "backout_layer": 1}}, "model.options.backout_layer:"),
    ({"options": {"lambdas": True}}, "model.options.lambdas:"),
    ({"skip_scale": "scalar"}, "model.skip_scale:"),
    ({"prores": "linear"}, "model.prores:"),
])
def test_speedrun_lambdas_refusals_are_one_line(fields, needle):
    with pytest.raises(ConfigError) as e:
        reslab.build_model("speedrun-lambdas", n_layer=2, n_embd=C, n_head=2, block_size=8, vocab_size=11, **fields)
    assert len(e.value.errors) == 1 and e.value.errors[0].startswith(needle), e.value.errors


# ---------------------------------------------------------------------------------------------
# DyT's LLaMA recipe (the authors' LLaMA code, other_tasks/LLaMA in jiachenzhu/DyT): alpha starts
# at attn_alpha_init_value in the norm before attention, ffn_ / dec_alpha_init_value in the one
# before the MLP and the final one; the token embedding times one learned scalar, sqrt(C) at init
# ---------------------------------------------------------------------------------------------
RECIPE = dict(norm="dyt", bias=False, dyt_alpha_attn=0.8, dyt_alpha_mlp=0.2, dyt_alpha_final=0.2,
              embed_scale="learned")


def dyt_nobias(mod, x):
    """gamma tanh(alpha x): the LLaMA code's LayerNormParameterized (no beta), alpha one scalar."""
    assert mod.alpha.shape == () and mod.weight.shape == (C,) and mod.bias is None
    return mod.weight * torch.tanh(mod.alpha * x)


def test_dyt_llama_recipe_whole_model_against_its_equations():
    L = 2
    model = make("pre-ln", L=L, **RECIPE)
    idx = token_input()
    s = model.embed_scale.scale
    assert s.shape == () and s.item() != 1.0  # randomised, so a missing scale would show
    with torch.no_grad():
        h = s * model.wte.weight[idx] + model.wpe.weight[: idx.shape[1]]
        for blk in model.blocks:
            h = h + A(Ref(), blk.attn, dyt_nobias(blk.norm1, h))
            h = h + M(Ref(), blk.mlp, dyt_nobias(blk.norm2, h))
        ref = dyt_nobias(model.stream.final_norm, h) @ model.wte.weight.T
        out = model(idx)
        torch.testing.assert_close(out, ref, **TOL)
        # controls: the embedding unscaled; the scale after the positions are added
        h0 = ref_embed(model, idx)
        for blk in model.blocks:
            h0 = h0 + A(Ref(), blk.attn, dyt_nobias(blk.norm1, h0))
            h0 = h0 + M(Ref(), blk.mlp, dyt_nobias(blk.norm2, h0))
        assert_differs(out, dyt_nobias(model.stream.final_norm, h0) @ model.wte.weight.T)
        h1 = s * ref_embed(model, idx)
        for blk in model.blocks:
            h1 = h1 + A(Ref(), blk.attn, dyt_nobias(blk.norm1, h1))
            h1 = h1 + M(Ref(), blk.mlp, dyt_nobias(blk.norm2, h1))
        assert_differs(out, dyt_nobias(model.stream.final_norm, h1) @ model.wte.weight.T)


def test_dyt_llama_recipe_initial_values_sit_where_the_code_puts_them():
    kw = dict(n_layer=3, n_embd=C, n_head=2, block_size=8, vocab_size=11)
    model = reslab.build_model("pre-ln", **RECIPE, **kw)
    f32 = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    for blk in model.blocks:
        assert blk.norm1.alpha == f32(0.8) and blk.norm2.alpha == f32(0.2)
        assert (blk.norm1.weight == 1).all() and blk.norm1.bias is None
    assert model.stream.final_norm.alpha == f32(0.2)
    assert model.embed_scale.scale == f32(C ** 0.5)
    # one field alone: the others keep dyt_alpha; without the recipe there is no scale parameter
    one = reslab.build_model("pre-ln", norm="derf", dyt_alpha=0.3, dyt_alpha_mlp=0.1, **kw)
    assert [b.norm1.alpha.item() for b in one.blocks] == [pytest.approx(0.3)] * 3
    assert [b.norm2.alpha.item() for b in one.blocks] == [pytest.approx(0.1)] * 3
    assert one.stream.final_norm.alpha.item() == pytest.approx(0.3) and one.embed_scale is None
    assert not any("embed_scale" in n for n, _ in one.named_parameters())
    # the scale is one more parameter, counted outside the embedding, and never weight-decayed
    from reslab.train.config import OptimConfig
    from reslab.train.optim import parameter_groups

    assert model.param_counts()["total"] == reslab.build_model("pre-ln", norm="dyt", bias=False, **kw) \
        .param_counts()["total"] + 1
    decay, no_decay = parameter_groups(model, OptimConfig())
    assert "embed_scale.scale" in no_decay and "embed_scale.scale" not in decay


def test_embed_scale_reaches_any_single_stream_design():
    """embed_scale is a [model] field: post-ln with it is post-ln on s E[token] + P[position]."""
    model = make("post-ln", L=1, embed_scale="learned")
    plain = make("post-ln", L=1)
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("embed_scale.")})
    idx = token_input()
    with torch.no_grad():
        assert_differs(model(idx), plain(idx))
        model.embed_scale.scale.fill_(1.0)
        torch.testing.assert_close(model(idx), plain(idx), **TOL)  # s = 1: the same model (same seeds)


@pytest.mark.parametrize("fields, needle", [
    (dict(design="post-ln", norm="dyt", dyt_alpha_attn=0.8), "model.dyt_alpha_attn: sets the alpha of pre-ln's"),
    (dict(norm="layernorm", dyt_alpha_mlp=0.2), "model.dyt_alpha_mlp: only norm = 'dyt' or 'derf' has alpha"),
    (dict(norm="dyt", dyt_alpha_final=-1.0), "model.dyt_alpha_final: must be a positive finite number, got -1.0"),
    (dict(norm="dyt", dyt_alpha_attn=float("inf")), "model.dyt_alpha_attn: must be a positive finite number"),
    (dict(norm="dyt", dyt_alpha_attn=0.8, layer_designs={"1": "post-ln"}), "with layer_designs"),
    (dict(design="ngpt", embed_scale="learned"), "model.embed_scale: ngpt puts the embedding on the unit sphere"),
    (dict(embed_scale="fixed"), "model.embed_scale:"),
])
def test_dyt_llama_recipe_refusals_are_one_line(fields, needle):
    fields = {"design": "pre-ln", **fields}
    with pytest.raises(ConfigError) as e:
        reslab.build_model(fields.pop("design"), n_layer=2, n_embd=C, n_head=2, block_size=8, vocab_size=11, **fields)
    assert len(e.value.errors) == 1 and needle in e.value.errors[0], e.value.errors
