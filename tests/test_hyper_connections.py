"""Hyper-connections (Zhu et al. 2024) and mHC's Sinkhorn mixing (Xie et al. 2025): blocks/hyper.py.

Formula tests follow test_block_formulas.py: float64, every parameter randomised (randomize_), the
reference recomputed here from the raw parameter tensors (a_m, a_r, b, w_*, s_*, b_pre/post/res,
phi_*, alpha_*, the sublayers' weights) with plain torch ops, never the module's own forward, and
a check that a wrong formula gives something else. Then: Sinkhorn-Knopp, the initialisation
(pre-ln at init, exactly for n = 1 and, as the HC paper says, for n = 4), refusals, the meta
device, vmap batching, diagnostics and the init-time probe on the (B, T, n, C) stream.
"""

from __future__ import annotations

import math

import pytest
import torch

import reslab
from reslab.config import ModelConfig
from reslab.model.gpt import GPT
from reslab.model.registry import DESIGNS

from .conftest import CPU_ONLY_FALLBACK, meta_built, slow_vmap_ops
from .test_block_formulas import (
    BLOCK,
    EPS,
    TOL,
    VOCAB,
    A,
    B,
    C,
    M,
    N,
    Ref,
    T,
    assert_differs,
    make,
    randomize_,
    token_input,
)

FORMULA_TESTED = {"hyper-connections"}
DESIGN = "hyper-connections"

# ([model.options], what the reference needs to know) for the four forms of the design
FORMS = {
    "static": {"streams": 4},
    "dynamic": {"streams": 4, "dynamic": True},
    "sinkhorn": {"streams": 4, "mixing": "sinkhorn", "sinkhorn_iters": 7},
    "sinkhorn-dynamic": {"streams": 3, "mixing": "sinkhorn", "dynamic": True},
}


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread


# ---------------------------------------------------------------------------------------------
# the reference, from raw tensors
# ---------------------------------------------------------------------------------------------
def streams_input(n: int, seed: int = 7) -> torch.Tensor:
    """(B, T, n, C) streams, all different, far from normalised."""
    g = torch.Generator().manual_seed(seed)
    return 1.5 * torch.randn(B, T, n, C, generator=g, dtype=torch.float64) + 0.3


def ref_sinkhorn(R: torch.Tensor, iters: int) -> torch.Tensor:
    """exp(R), then `iters` times: divide by column sums, divide by row sums."""
    Mx = torch.exp(R)
    for _ in range(iters):
        Mx = Mx / Mx.sum(dim=-2, keepdim=True)
        Mx = Mx / Mx.sum(dim=-1, keepdim=True)
    return Mx


def hc_weights(r: Ref, hc, H, dynamic: bool):
    """HC / DHC: (A_m (B,T,n), A_r (B,T,n,n) with A_r[i, j] = stream i into stream j, B (B,T,n))."""
    Bx, Tx, n, _ = H.shape
    A_m = hc.a_m.expand(Bx, Tx, n)
    A_r = hc.a_r.expand(Bx, Tx, n, n)
    Bw = hc.b.expand(Bx, Tx, n)
    if dynamic:
        Hn = N(r, hc.norm, H)                                              # per stream, over C
        A_m = A_m + hc.s_alpha * torch.tanh(torch.einsum("btic,c->bti", Hn, hc.w_m))
        A_r = A_r + hc.s_alpha * torch.tanh(torch.einsum("btic,cj->btij", Hn, hc.w_r))
        Bw = Bw + hc.s_beta * torch.tanh(torch.einsum("btjc,c->btj", Hn, hc.w_b))
    return A_m, A_r, Bw


def mhc_weights(r: Ref, hc, H, dynamic: bool, iters: int):
    """mHC: (sigmoid(pre), SinkhornKnopp(res)^T in the A_r[i, j] convention, 2*sigmoid(post))."""
    Bx, Tx, n, Cx = H.shape
    pre, post, res = (hc.b_pre.expand(Bx, Tx, n), hc.b_post.expand(Bx, Tx, n),
                      hc.b_res.expand(Bx, Tx, n, n))
    if dynamic:
        x = H.reshape(Bx, Tx, n * Cx)
        x = x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + EPS)       # RMSNorm over nC, no gain
        pre = pre + hc.alpha_pre * torch.einsum("btk,kn->btn", x, hc.phi_pre)
        post = post + hc.alpha_post * torch.einsum("btk,kn->btn", x, hc.phi_post)
        res = res + hc.alpha_res * torch.einsum("btk,kn->btn", x, hc.phi_res).reshape(Bx, Tx, n, n)
    H_res = ref_sinkhorn(res, iters)                   # H_res[j, i]: stream i into new stream j
    return 1.0 / (1.0 + torch.exp(-pre)), H_res.transpose(-1, -2), 2.0 / (1.0 + torch.exp(-post))


def sublayer(r: Ref, H, weights, norm_mod, f):
    """h = sum_i A_m[i] H_i;  y = F(N(h));  H'_j = sum_i A_r[i, j] H_i + gain * B[j] y."""
    A_m, A_r, Bw = weights
    n = H.shape[2]
    h = sum(A_m[..., i, None] * H[:, :, i] for i in range(n))
    y = f(N(r, norm_mod, h))
    return torch.stack([sum(A_r[..., i, j, None] * H[:, :, i] for i in range(n)) + r.gain * Bw[..., j, None] * y
                        for j in range(n)], dim=2)


def hyper_block(r: Ref, blk, H, layer: int, form: dict):
    dynamic = form.get("dynamic", False)
    sinkhorn = form.get("mixing") == "sinkhorn"
    iters = form.get("sinkhorn_iters", 20)
    for hc, norm_mod, f in ((blk.attn_hc, blk.norm1, lambda x: A(r, blk.attn, x, layer)),
                            (blk.mlp_hc, blk.norm2, lambda x: M(r, blk.mlp, x))):
        w = mhc_weights(r, hc, H, dynamic, iters) if sinkhorn else hc_weights(r, hc, H, dynamic)
        H = sublayer(r, H, w, norm_mod, f)
    return H


def final_norm(mod, x, eps: float):
    """LayerNorm with the given eps, weight and bias read from the module."""
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * mod.weight + mod.bias


def ref_logits(model, idx, form: dict, L: int, r: Ref | None = None):
    """emb -> n copies -> blocks -> N_final(sum_i H_i) with eps * n^2 -> head."""
    r, n = r or Ref(), form["streams"]
    emb = model.wte.weight[idx] + model.wpe.weight[: idx.shape[1]]
    H = torch.stack([emb] * n, dim=2)
    for layer in range(1, L + 1):
        H = hyper_block(r, model.blocks[layer - 1], H, layer, form)
    return final_norm(model.stream.final_norm, H.sum(dim=2), EPS * n ** 2) @ model.lm_head.weight.T


# ---------------------------------------------------------------------------------------------
# formulas
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("layer", [1, 2])
def test_one_layer_against_the_formula(form, layer):
    fields = FORMS[form]
    model = make(DESIGN, options=fields)
    blk = model.blocks[layer - 1]
    H = streams_input(fields["streams"])
    with torch.no_grad():
        out = blk(H)
        ref = hyper_block(Ref(), blk, H, layer, fields)
        torch.testing.assert_close(out, ref, **TOL)
        # the test can fail: a wrong formula gives something else
        if form == "static":      # mixing ignored (A_r = I)
            for hc in (blk.attn_hc, blk.mlp_hc):
                hc.a_r.copy_(torch.eye(fields["streams"]))
            assert_differs(out, blk(H))
        elif form == "dynamic":   # the static weights alone
            assert_differs(out, hyper_block(Ref(), blk, H, layer, {**fields, "dynamic": False}))
        elif form == "sinkhorn":  # a different number of Sinkhorn iterations
            assert_differs(out, hyper_block(Ref(), blk, H, layer, {**fields, "sinkhorn_iters": 1}), 1e-6)
        else:                     # mHC without its input-dependent term
            assert_differs(out, hyper_block(Ref(), blk, H, layer, {**fields, "dynamic": False}))


@pytest.mark.parametrize("form", list(FORMS))
def test_whole_model_against_the_formula(form):
    L, fields = 2, FORMS[form]
    model = make(DESIGN, L=L, options=fields)
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        torch.testing.assert_close(logits, ref_logits(model, idx, fields, L), **TOL)
        # the head reads the SUM of the streams, not one stream
        n = fields["streams"]
        emb = model.wte.weight[idx] + model.wpe.weight[: idx.shape[1]]
        H = torch.stack([emb] * n, dim=2)
        for layer in (1, 2):
            H = hyper_block(Ref(), model.blocks[layer - 1], H, layer, fields)
        one = final_norm(model.stream.final_norm, H[:, :, 0], EPS) @ model.lm_head.weight.T
        assert_differs(logits, one)


def test_runtime_branch_gain_multiplies_the_write_only():
    fields = FORMS["static"]
    model = make(DESIGN, branch_gain=2.0, gain_mode="runtime", options=fields)
    blk, H = model.blocks[1], streams_input(4)
    with torch.no_grad():
        out = blk(H)
        torch.testing.assert_close(out, hyper_block(Ref(gain=2.0), blk, H, 2, fields), **TOL)
        assert_differs(out, hyper_block(Ref(), blk, H, 2, fields))


def test_rmsnorm_and_dynamic_norm_follow_the_models_norm():
    fields = FORMS["dynamic"]
    model = make(DESIGN, norm="rmsnorm", options=fields)
    blk, H = model.blocks[0], streams_input(4)
    assert isinstance(blk.attn_hc.norm, torch.nn.RMSNorm)
    with torch.no_grad():
        torch.testing.assert_close(blk(H), hyper_block(Ref(norm="rmsnorm"), blk, H, 1, fields), **TOL)


# ---------------------------------------------------------------------------------------------
# Sinkhorn-Knopp
# ---------------------------------------------------------------------------------------------
def test_sinkhorn_is_doubly_stochastic():
    from reslab.model.blocks.hyper import sinkhorn_knopp
    g = torch.Generator().manual_seed(0)
    R = torch.randn(1000, 4, 4, generator=g, dtype=torch.float64)
    torch.testing.assert_close(sinkhorn_knopp(R, 20), ref_sinkhorn(R, 20), **TOL)
    for iters in (20, 50):
        S = sinkhorn_knopp(R, iters)
        assert (S > 0).all()
        assert (S.sum(-1) - 1).abs().max() < 1e-12        # rows: the last normalisation
        cols = (S.sum(-2) - 1).abs().amax(-1)
        if iters == 50:
            assert cols.max() < 1e-5                       # every draw
        else:
            # the default 20 iterations: all but a few slow-converging draws within 1e-5
            assert (cols < 1e-5).float().mean() > 0.99
            assert cols.max() < 1e-2
    # R of the size the model starts near (and randomize_ uses): every draw within 1e-5 at 20
    S = sinkhorn_knopp(0.5 * R, 20)
    assert (S.sum(-2) - 1).abs().max() < 1e-5 and (S.sum(-1) - 1).abs().max() < 1e-12
    # float32, large logits: exp does not overflow (the max is subtracted first)
    S = sinkhorn_knopp(50.0 + R.float(), 20)
    assert torch.isfinite(S).all() and (S.sum(-1) - 1).abs().max() < 1e-5


def test_the_fast_layouts_compute_the_textbook_arithmetic():
    """sinkhorn_knopp runs on (n, n, tokens) planes, read_streams and mix_streams as a broadcast sum
    and an einsum (for speed, see hyper.py). Sinkhorn's values and gradients equal the textbook loop
    on (tokens, n, n) bit for bit in float64, and its output is contiguous (a strided M is slow in
    bmm); the read and the mix equal the matrix products to 1e-13 (the same sums, in another order)."""
    from reslab.model.blocks.hyper import mix_streams, read_streams, sinkhorn_knopp

    g = torch.Generator().manual_seed(1)
    R = torch.randn(2, 5, 4, 4, generator=g, dtype=torch.float64)
    H = torch.randn(2, 5, 4, 6, generator=g, dtype=torch.float64)
    w = torch.randn(4, generator=g, dtype=torch.float64)
    probe = torch.randn(2, 5, 4, 4, generator=g, dtype=torch.float64)  # a loss that weighs every entry

    def grads(fn, *xs):
        xs = [x.clone().requires_grad_() for x in xs]
        out = fn(*xs)
        (out * torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=out.dtype)).sum().backward()
        return out.detach(), [x.grad for x in xs]

    def textbook(R):
        return ref_sinkhorn(R - R.amax(dim=(-2, -1), keepdim=True), 20)
    fast, (dfast,) = grads(lambda r: sinkhorn_knopp(r, 20), R)
    slow, (dslow,) = grads(textbook, R)
    assert torch.equal(fast, slow) and torch.equal(dfast, dslow) and fast.is_contiguous()
    for M in (w.outer(w).reshape(4, 4), probe):        # static (n, n) and per-token (B, T, n, n)
        fast, dfast = grads(mix_streams, M, H)
        slow, dslow = grads(lambda m, h: m @ h, M, H)
        for a, b in zip([fast, *dfast], [slow, *dslow]):   # the same sums, perhaps in another order
            torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13)
    for read in (w, probe[..., 0]):                    # static (n,) and per-token (B, T, n) reads
        fast, dfast = grads(read_streams, read, H)
        slow, dslow = grads(lambda r, h: (r.unsqueeze(-2) @ h).squeeze(-2), read, H)
        torch.testing.assert_close(fast, slow, rtol=1e-13, atol=1e-13)
        for a, b in zip(dfast, dslow):
            torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_sinkhorn_init_is_close_to_the_identity(n):
    model = reslab.build_model(DESIGN, n_layer=1, n_embd=C, n_head=2, block_size=BLOCK, vocab_size=VOCAB,
                               options={"streams": n, "mixing": "sinkhorn"}).double()
    hc = model.blocks[0].attn_hc
    with torch.no_grad():
        _, H_res, _ = hc(streams_input(n))
    e = math.exp(-8.0)
    expected = (torch.eye(n, dtype=torch.float64) * (1 - e) + e) / (1 + (n - 1) * e)
    torch.testing.assert_close(H_res, expected, **TOL)
    gap = (H_res - torch.eye(n, dtype=torch.float64)).abs().max().item()
    assert gap == pytest.approx((n - 1) * e / (1 + (n - 1) * e), rel=1e-9)
    assert gap < (n - 1) * 3.36e-4                          # 1.0e-3 for n = 4


# ---------------------------------------------------------------------------------------------
# initialisation: pre-ln at init
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dynamic", [False, True])
def test_init_values_follow_the_paper(dynamic):
    n = 3
    model = reslab.build_model(DESIGN, n_layer=2, n_embd=C, n_head=2, block_size=BLOCK, vocab_size=VOCAB,
                               options={"streams": n, "dynamic": dynamic})
    for blk in model.blocks:
        for k, hc in ((2 * (blk.layer - 1), blk.attn_hc), (2 * (blk.layer - 1) + 1, blk.mlp_hc)):
            assert torch.equal(hc.a_m, torch.eye(n)[k % n])      # A_m = e_(k mod n)
            assert torch.equal(hc.a_r, torch.eye(n))             # A_r = I
            assert torch.equal(hc.b, torch.ones(n))              # B = 1
            if dynamic:
                assert all(not w.any() for w in (hc.w_m, hc.w_r, hc.w_b))
                assert hc.s_alpha.item() == hc.s_beta.item() == pytest.approx(0.01)
    mhc = reslab.build_model(DESIGN, n_layer=1, n_embd=C, n_head=2, block_size=BLOCK, vocab_size=VOCAB,
                             options={"streams": n, "mixing": "sinkhorn", "dynamic": dynamic}).blocks[0].attn_hc
    torch.testing.assert_close(torch.sigmoid(mhc.b_pre), torch.full((n,), 1 / n))
    assert torch.equal(2 * torch.sigmoid(mhc.b_post), torch.ones(n))
    if dynamic:
        assert all(not p.any() for p in (mhc.phi_pre, mhc.phi_post, mhc.phi_res))
        assert mhc.alpha_pre.item() == mhc.alpha_post.item() == mhc.alpha_res.item() == pytest.approx(0.01)


def _pair(n: int, dtype=torch.float32, **options):
    """A pre-ln model and a hyper-connections model holding pre-ln's weights (copied)."""
    kw = {"n_layer": 3, "n_embd": C, "n_head": 2, "block_size": BLOCK, "vocab_size": VOCAB, "dropout": 0.0}
    pre = reslab.build_model("pre-ln", seed=11, **kw).to(dtype).eval()
    hyp = reslab.build_model(DESIGN, seed=12, options={"streams": n, **options}, **kw).to(dtype).eval()
    missing, unexpected = hyp.load_state_dict(pre.state_dict(), strict=False)
    assert not unexpected
    assert missing and all("_hc." in k for k in missing)   # only the connection weights are its own
    return pre, hyp


def test_one_stream_static_at_init_is_pre_ln_exactly():
    pre, hyp = _pair(1)
    for blk in hyp.blocks:
        for hc in (blk.attn_hc, blk.mlp_hc):
            assert hc.a_m.tolist() == [1.0] and hc.a_r.tolist() == [[1.0]] and hc.b.tolist() == [1.0]
    idx = token_input()
    with torch.no_grad():
        assert torch.equal(hyp(idx), pre(idx))
        hyp.blocks[0].attn_hc.b.fill_(1.5)                  # the test can fail
        assert_differs(hyp(idx), pre(idx), 1e-6)


@pytest.mark.parametrize("options", [{}, {"dynamic": True}], ids=["static", "dynamic"])
def test_four_streams_at_init_are_pre_ln(options):
    """HC paper: initialised as A_m = e_(k mod n), A_r = I, B = 1, hyper-connections are Pre-Norm.
    True as stated: every stream equals pre-ln's stream after every block, bit for bit; the head
    reads N(sum_i H_i) = N(4x), equal to pre-ln's N(x) because N_final's eps is scaled by n^2.
    With the plain eps it is not (GPT-2 init keeps the stream small, so eps matters)."""
    pre, hyp = _pair(4, torch.float64, **options)
    idx = token_input()
    with torch.no_grad():
        x = pre.stream.enter(pre.embed(idx))
        H = hyp.stream.enter(hyp.embed(idx))
        for bp, bh in zip(pre.blocks, hyp.blocks):
            x, H = bp(x), bh(H)
            assert all(torch.equal(H[:, :, i], x) for i in range(4))
        logits = hyp(idx)
        torch.testing.assert_close(logits, pre(idx), rtol=1e-12, atol=1e-12)
        assert hyp.stream.final_norm.eps == pytest.approx(1e-5 * 16)
        plain = torch.nn.functional.layer_norm(H.sum(2), (C,), hyp.stream.final_norm.weight,
                                               hyp.stream.final_norm.bias, eps=1e-5) @ hyp.lm_head.weight.T
        assert_differs(plain, logits, 1e-4)


def test_sinkhorn_at_init_is_pre_ln_up_to_rounding():
    """mHC with this init: equal streams, H_res rows summing to 1, read weights 1/n: pre-ln."""
    pre, hyp = _pair(4, torch.float64, mixing="sinkhorn", dynamic=True)
    idx = token_input()
    with torch.no_grad():
        # b_pre = logit(1/4) written in float64 (the float32 value read as float64 reads 1/4 + 1e-8)
        for blk in hyp.blocks:
            blk.attn_hc.reset_parameters()
            blk.mlp_hc.reset_parameters()
        torch.testing.assert_close(hyp(idx), pre(idx), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("design, fields, field", [
    (DESIGN, {"options": {"streams": 0}}, "model.options.streams:"),
    (DESIGN, {"options": {"streams": 65}}, "model.options.streams:"),
    (DESIGN, {"options": {"streams": 1, "mixing": "sinkhorn"}}, "model.options: mixing = 'sinkhorn' needs at least 2"),
    (DESIGN, {"options": {"sinkhorn_iters": 5}}, "model.options.sinkhorn_iters: needs mixing"),
    (DESIGN, {"options": {"mixing": "sinkhorn", "sinkhorn_iters": 0}}, "model.options.sinkhorn_iters:"),
    (DESIGN, {"options": {"mixing": "mhc"}}, "model.options.mixing: 'mhc' is not allowed"),
    (DESIGN, {"attn_res": False}, "model.attn_res"),
    (DESIGN, {"norm": "none"}, "model.norm"),
    (DESIGN, {"prores": "linear"}, "model.prores"),
    (DESIGN, {"skip_scale": "scalar"}, "model.skip_scale"),
    (DESIGN, {"layer_designs": {"1": "post-ln"}}, "model.layer_designs"),
    ("pre-ln", {"options": {"streams": 2}}, "model.options: pre-ln has no options of its own; remove streams"),
    ("resi-dual", {"options": {"dynamic": True}}, "model.options.dynamic: unknown key"),
])
def test_refusals_name_the_field(design, fields, field):
    with pytest.raises(reslab.ConfigError) as e:
        reslab.build_model(design, n_layer=2, n_embd=C, n_head=2, **fields)
    assert len(e.value.errors) == 1 and e.value.errors[0].startswith(field)


@pytest.mark.parametrize("form", list(FORMS))
def test_meta_device_build_then_materialise_equals_direct_build(form):
    cfg = ModelConfig(design=DESIGN, n_layer=2, n_embd=C, n_head=2, block_size=BLOCK, vocab_size=VOCAB,
                      options=FORMS[form])
    direct, lazy = GPT(cfg, seed=5).eval(), meta_built(cfg, seed=5)
    idx = token_input()
    assert torch.equal(direct(idx), lazy(idx))
    # and not by accident: randomised, the connection weights change the function
    randomize_(lazy)
    assert_differs(direct(idx), lazy(idx))


@pytest.mark.parametrize("form", ["dynamic", "sinkhorn-dynamic"])
def test_batches_under_vmap_without_the_slow_fallback(form):
    """As test_stacked's check over every design's defaults, for the non-default forms."""
    cfg = ModelConfig(design=DESIGN, n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=65,
                      dropout=0.1, options=FORMS[form])
    slow, stacked = slow_vmap_ops(cfg)
    assert slow <= CPU_ONLY_FALLBACK, slow
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in stacked.values())


@pytest.mark.parametrize("init", ["gpt2", "xavier", "deepnorm"])
def test_sublayer_weights_follow_the_models_init_scheme(init):
    """Same seed, same scheme: the hyper model's attention / MLP / norm weights are pre-ln's (the
    connections draw nothing from the init generator)."""
    kw = {"n_layer": 3, "n_embd": 32, "n_head": 2, "block_size": BLOCK, "vocab_size": VOCAB, "init": init}
    pre = reslab.build_model("pre-ln", seed=9, **kw).state_dict()
    hyp = reslab.build_model(DESIGN, seed=9, options={"dynamic": True}, **kw).state_dict()
    shared = [k for k in pre if k in hyp]
    assert len(shared) == len(pre)
    assert all(torch.equal(pre[k], hyp[k]) for k in shared)
    other = reslab.build_model(DESIGN, seed=9, **{**kw, "init": "gpt2" if init != "gpt2" else "xavier"})
    assert not torch.equal(other.blocks[0].mlp.c_proj.weight, hyp["blocks.0.mlp.c_proj.weight"])


def test_registry_entry():
    d = DESIGNS[DESIGN]
    assert d.stream == "hyper" and d.final_norm and not d.partial_residual and not d.prores
    assert not d.learned_scales and not d.per_layer and not d.attention_carry
    assert "none" not in d.norms


# ---------------------------------------------------------------------------------------------
# diagnostics and the init-time probe see the sum of the streams
# ---------------------------------------------------------------------------------------------
def test_diagnostics_measure_the_mean_of_the_streams(tmp_path):
    from reslab.diagnostics import read_rows
    from reslab.train.config import build_run_config
    from reslab.train.loop import train

    from .train_helpers import tiny_run, write_corpus

    corpus = write_corpus(tmp_path)
    rows = {}
    for name, fields in (("pre", {"model.design": "pre-ln"}),
                         ("hc", {"model.design": DESIGN, "model.options": {"streams": 4}}),
                         ("mhc", {"model.design": DESIGN, "model.options": {"mixing": "sinkhorn", "dynamic": True}})):
        cfg = tiny_run(corpus, tmp_path / "cache", **{"train.steps": 6, "train.eval_interval": 3, **fields})
        cfg["diagnostics"] = {"enabled": True, "interval": 3}
        result = train(build_run_config(cfg), tmp_path / name, log=lambda *_: None)
        assert result.status == "completed"
        rows[name] = read_rows(tmp_path / name / "diagnostics.jsonl")
    pre0, hc0 = rows["pre"][0], rows["hc"][0]
    assert [r["step"] for r in rows["hc"]] == [0, 3, 6]
    assert hc0["hidden_stream"] == "mean" and pre0["hidden_stream"] == "x"
    # step 0: same seed, same sublayer weights, so every stream, and their mean, is pre-ln's x
    assert hc0["loss"] == pytest.approx(pre0["loss"], rel=1e-5)
    for key in ("hidden_norm.embed", "hidden_norm.block0", "hidden_norm.block1", "cos_sim.block1",
                "adjacent_change.block0", "adjacent_change.block1", "attn_entropy.block1"):
        assert hc0[key] == pytest.approx(pre0[key], rel=1e-5, abs=1e-7), key
    # later the streams differ: the rows measure the mean, not stream 0 (checked via growth)
    assert rows["hc"][-1]["hidden_norm.block1"] != pytest.approx(rows["pre"][-1]["hidden_norm.block1"], rel=1e-3)
    for r in rows["hc"] + rows["mhc"]:
        assert all(v is None or not isinstance(v, float) or math.isfinite(v) for v in r.values())
        assert "scalar.block1.mlp_hc.b" in r or "scalar.block1.mlp_hc.b_res" in r
        assert -1.0 <= r["cos_sim.block1"] <= 1.0
    assert rows["mhc"][-1]["grad_norm.block0.scalars"] > 0


def test_probe_runs_on_the_streams(tmp_path):
    from reslab.probe import read_csv, run_probe
    rows = run_probe([DESIGN, "pre-ln"], [2, 4], seeds=1, width=32, heads=4, seq=8, batch=2, out_dir=tmp_path)
    back = read_csv(tmp_path / "probe.csv")
    assert len(back) == len(rows) == 2 * ((1 + 2) + (1 + 4))
    layer = {(r["design"], r["depth"], r["layer"]): r for r in rows if r["kind"] == "layer"}
    for (design, depth, l), r in layer.items():
        if design != DESIGN:
            continue
        p = layer[("pre-ln", depth, l)]
        for key in ("act_norm", "adj_change", "cos_sim"):   # at init 4 streams, and their mean, = pre-ln's x
            assert r[key] == pytest.approx(p[key], rel=1e-5), key
        assert r["grad_norm"] > 0 and math.isfinite(r["grad_norm"])
    model = {(r["design"], r["depth"]): r for r in rows if r["kind"] == "model"}
    for depth in (2, 4):
        assert model[(DESIGN, depth)]["loss"] == pytest.approx(model[("pre-ln", depth)]["loss"], rel=1e-5)
        assert model[(DESIGN, depth)]["last_w2_grad_norm"] == pytest.approx(
            model[("pre-ln", depth)]["last_w2_grad_norm"], rel=1e-4)
