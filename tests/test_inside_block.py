"""Inside the block: gated attention (attn_gate), Canon layers (canon), AltUp (altup), QK-norm's
coverage, and hyper-connections with more than four streams.

Same method as test_block_formulas.py: float64 models whose every parameter is randomised, each block
(and whole model) against its formula recomputed here from raw weight tensors with plain torch ops (the
block's and its submodules' forwards are never used on the reference side; the Canon reference is a
loop over the kernel taps, not a convolution), tolerance 1e-10, and for each design a wrong formula
that must differ.
"""

from __future__ import annotations

import math

import pytest
import torch

import reslab
from reslab.errors import ConfigError
from tests.test_block_formulas import (EPS, TOL, C, H, M, N, Ref, assert_differs, lin, make, pre_ln, rope,
                                       stream_input, token_input)
from tests.test_hyper_connections import hyper_block, ref_logits, streams_input

from .conftest import meta_built

FORMULA_TESTED = {"canon", "altup"}

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread

SIG = lambda t: 1.0 / (1.0 + torch.exp(-t))  # noqa: E731


# ---------------------------------------------------------------------------------------------
# reference primitives, from raw tensors
# ---------------------------------------------------------------------------------------------
def LN(mod, x, eps: float = EPS):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * mod.weight + mod.bias


def canon_ref(w, h, residual: bool = True):
    """out_t = (h_t if residual) + sum_j w[:, j] h_(t-K+1+j), h_s = 0 for s < 0: a loop over the taps."""
    K, T = w.shape[1], h.shape[1]
    out = torch.zeros_like(h)
    for j in range(K):
        shift = K - 1 - j                                     # tap j reads `shift` tokens back
        if shift < T:
            out[:, shift:] += w[:, j] * h[:, :T - shift]
    return h + out if residual else out


def attn_ref(attn, x, *, gate: str = "off", qkv_w=None, qk_norm: bool = False, use_rope: bool = False,
             residual: bool = True):
    """Causal attention (H heads) from raw weights: [Q;K;V] = W x + b, Canon-B on [Q;K;V] (qkv_w), QK-norm,
    RoPE, softmax(QK^T/sqrt(d)) V per head, then the output gate sigmoid(x W_g + b_g), then W_P."""
    Bx, Tx, Cx = x.shape
    d = Cx // H
    qkv = lin(x, attn.c_attn.weight, attn.c_attn.bias)
    heads = lambda t: t.reshape(Bx, Tx, H, d).transpose(1, 2)          # noqa: E731
    merge = lambda t: t.transpose(1, 2).reshape(Bx, Tx, Cx)              # noqa: E731
    q, k, v = (heads(t) for t in qkv.split(Cx, dim=-1))
    if qk_norm:
        q = q / torch.sqrt((q ** 2).mean(-1, keepdim=True) + EPS) * attn.q_norm.weight
        k = k / torch.sqrt((k ** 2).mean(-1, keepdim=True) + EPS) * attn.k_norm.weight
    if qkv_w is not None:                                                 # Canon-B, after QK-norm
        q, k, v = (heads(t) for t in canon_ref(qkv_w, torch.cat([merge(q), merge(k), merge(v)], -1),
                                               residual).split(Cx, dim=-1))
    if use_rope:
        q, k = rope(q), rope(k)
    future = torch.ones(Tx, Tx, dtype=torch.bool).triu(1)
    P = torch.softmax((q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(future, float("-inf")), dim=-1)
    y = P @ v                                                             # (B, H, T, d)
    if gate != "off":
        s = SIG(lin(x, attn.c_gate.weight, attn.c_gate.bias))             # (B, T, H) or (B, T, C)
        y = y * (s.transpose(1, 2)[..., None] if gate == "head" else heads(s))
    return lin(merge(y), attn.c_proj.weight, attn.c_proj.bias)


def mlp_ref(mlp, x, d_w=None, residual: bool = True):
    """W2 gelu(canon_D(W1 x + b1)) + b2 (exact GELU)."""
    h = lin(x, mlp.c_fc.weight, mlp.c_fc.bias)
    if d_w is not None:
        h = canon_ref(d_w, h, residual)
    h = 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))
    return lin(h, mlp.c_proj.weight, mlp.c_proj.bias)


def gated_pre_ln(blk, x, gate):
    h = x + attn_ref(blk.attn, LN(blk.norm1, x), gate=gate)
    return h + mlp_ref(blk.mlp, LN(blk.norm2, h))


def canon_block(blk, x, points: str, residual: bool = True, **attn_kw):
    w = lambda mod: mod.weight if mod is not None else None               # noqa: E731
    h = LN(blk.norm1, x)
    if "A" in points:
        h = canon_ref(blk.canon_a.weight, h, residual)
    x = x + attn_ref(blk.attn, h, qkv_w=w(blk.attn.qkv_mix) if "B" in points else None, residual=residual, **attn_kw)
    h = LN(blk.norm2, x)
    if "C" in points:
        h = canon_ref(blk.canon_c.weight, h, residual)
    return x + mlp_ref(blk.mlp, h, w(blk.mlp.pre_act) if "D" in points else None, residual)


def altup_block(blk, X, layer: int, K: int, active=None):
    """x^_i = sum_j p_ij x_j; x~ = PreLN(x^_a); x'_i = x^_i + g_i (x~ - x^_a), a = (l-1) mod K."""
    a = (layer - 1) % K if active is None else active
    p, g = blk.predict, blk.correct
    pred = torch.stack([sum(p[i, j] * X[:, :, j] for j in range(K)) for i in range(K)], dim=2)
    delta = pre_ln(Ref(), blk, pred[:, :, a], layer) - pred[:, :, a]
    return torch.stack([pred[:, :, i] + g[i] * delta for i in range(K)], dim=2)


def embed(model, idx):
    return model.wte.weight[idx] + model.wpe.weight[: idx.shape[1]]


def head(model, y, eps: float = EPS):
    return LN(model.stream.final_norm, y, eps) @ model.lm_head.weight.T


# ---------------------------------------------------------------------------------------------
# gated attention (attn_gate)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gate", ["head", "elementwise"])
@pytest.mark.parametrize("layer", [1, 2])
def test_gated_attention_formula(gate, layer):
    model = make("pre-ln", attn_gate=gate)
    blk, x = model.blocks[layer - 1], stream_input()
    assert tuple(blk.attn.c_gate.weight.shape) == ((H, C) if gate == "head" else (C, C))
    with torch.no_grad():
        out = blk(x)
        torch.testing.assert_close(out, gated_pre_ln(blk, x, gate), **TOL)
        assert_differs(out, gated_pre_ln(blk, x, "off"))                  # the gate acts
        other = "elementwise" if gate == "head" else "head"               # a gate of the other shape
        blk.attn.c_gate = torch.nn.Linear(C, H if other == "head" else C).double()
        with torch.no_grad():
            blk.attn.c_gate.weight.copy_(torch.randn(blk.attn.c_gate.weight.shape, dtype=torch.float64,
                                                     generator=torch.Generator().manual_seed(5)))
        blk.attn.gate = other
        assert_differs(out, blk(x))


def test_gated_attention_whole_model_and_gate_after_w_p_differs():
    L, model, idx = 2, make("pre-ln", attn_gate="elementwise"), token_input()
    with torch.no_grad():
        x = embed(model, idx)
        for blk in model.blocks:
            x = gated_pre_ln(blk, x, "elementwise")
        torch.testing.assert_close(model(idx), head(model, x), **TOL)
        # wrong: the gate on the sublayer's output (after W_P) instead of before it
        x = embed(model, idx)
        for blk in model.blocks:
            a = blk.attn
            n = LN(blk.norm1, x)
            x = x + attn_ref(a, n) * SIG(lin(n, a.c_gate.weight, a.c_gate.bias))
            x = x + mlp_ref(blk.mlp, LN(blk.norm2, x))
        assert_differs(model(idx), head(model, x))


def test_gate_reads_the_query_input_with_separate_views():
    """MUDD's attention reads q, k, v from three inputs: the gate reads the query's (Qwen3-Next's gate comes
    out of q_proj)."""
    model = make("mudd", attn_gate="head")
    attn = model.blocks[1].attn
    xq, xk, xv = stream_input(1), stream_input(2), stream_input(3)
    Bx, Tx, Cx = xq.shape
    d = Cx // H
    W, b = attn.c_attn.weight, attn.c_attn.bias
    heads = lambda t: t.reshape(Bx, Tx, H, d).transpose(1, 2)               # noqa: E731
    q, k, v = (heads(lin(t, W[i * Cx:(i + 1) * Cx], b[i * Cx:(i + 1) * Cx])) for i, t in enumerate((xq, xk, xv)))
    P = torch.softmax((q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(
        torch.ones(Tx, Tx, dtype=torch.bool).triu(1), float("-inf")), dim=-1)
    with torch.no_grad():
        out = attn(xq, views=(xq, xk, xv))
        def ref(gate_input):
            s = SIG(lin(gate_input, attn.c_gate.weight, attn.c_gate.bias)).transpose(1, 2)[..., None]
            return lin((P @ v * s).transpose(1, 2).reshape(Bx, Tx, Cx), attn.c_proj.weight, attn.c_proj.bias)

        torch.testing.assert_close(out, ref(xq), **TOL)
        assert_differs(out, ref(xk))                                          # wrong: the gate read the keys' input


@pytest.mark.parametrize("design", ["parallel", "hyper-connections", "canon", "sas"])
def test_gated_attention_reaches_the_designs_on_reslabs_attention(design):
    plain = reslab.build_model(design, n_layer=2, n_embd=C, n_head=H, block_size=8, vocab_size=11, seed=0)
    gated = reslab.build_model(design, n_layer=2, n_embd=C, n_head=H, block_size=8, vocab_size=11, seed=0,
                               attn_gate="head")
    assert all(b.attn.c_gate is not None for b in gated.blocks)
    assert all(b.attn.c_gate is None for b in plain.blocks)
    idx = token_input()
    with torch.no_grad():
        assert_differs(plain(idx), gated(idx), 1e-6)


def test_gated_attention_init_and_refusals():
    model = reslab.build_model("pre-ln", n_layer=2, n_embd=C, n_head=H, block_size=8, vocab_size=11, attn_gate="head")
    g = model.blocks[0].attn.c_gate
    assert torch.all(g.bias == 0) and 0.01 < g.weight.std().item() < 0.04   # the init scheme's N(0, 0.02): gates ~ 1/2
    with pytest.raises(ConfigError) as e:
        reslab.build_model("ngpt", n_layer=2, n_embd=C, n_head=H, vocab_size=11, attn_gate="head")
    assert len(e.value.errors) == 1 and e.value.errors[0].startswith("model.attn_gate: ngpt has its own attention")
    with pytest.raises(ConfigError) as e:
        reslab.build_model("pre-ln", n_layer=2, n_embd=C, n_head=H, vocab_size=11, attn_gate="channel")
    assert len(e.value.errors) == 1 and e.value.errors[0].startswith("model.attn_gate:")


def test_gate_off_adds_no_parameter():
    plain = reslab.build_model("pre-ln", n_layer=2, n_embd=C, n_head=H, block_size=8, vocab_size=11)
    assert not any("c_gate" in n for n, _ in plain.named_parameters())


# ---------------------------------------------------------------------------------------------
# QK-norm: its formula test lives in test_parallel_depth_and_speedrun_blocks.py (test_qk_norm); here it
# is checked with the points it meets in this family (Canon-B after it, the gate after SDPA)
# ---------------------------------------------------------------------------------------------
def test_qk_norm_with_canon_b_and_rope_in_the_papers_order():
    model = make("canon", pos="rope", qk_norm=True, options={"points": "B"})
    blk, x = model.blocks[1], stream_input()
    kw = dict(qk_norm=True, use_rope=True)
    with torch.no_grad():
        out = blk(x)
        # the model computes rotary angles in float32 (as test_pre_ln_rope), so this comparison is float32-tight
        torch.testing.assert_close(out, canon_block(blk, x, "B", **kw), rtol=1e-5, atol=1e-5)
        # wrong order: Canon-B before QK-norm
        W, Cx = blk.attn.c_attn, C
        n = LN(blk.norm1, x)
        qkv = canon_ref(blk.attn.qkv_mix.weight, lin(n, W.weight, W.bias))
        Bx, Tx = x.shape[:2]
        d = Cx // H
        heads = lambda t: t.reshape(Bx, Tx, H, d).transpose(1, 2)          # noqa: E731
        q, k, v = (heads(t) for t in qkv.split(Cx, -1))
        q = rope(q / torch.sqrt((q ** 2).mean(-1, keepdim=True) + EPS) * blk.attn.q_norm.weight)
        k = rope(k / torch.sqrt((k ** 2).mean(-1, keepdim=True) + EPS) * blk.attn.k_norm.weight)
        P = torch.softmax((q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(
            torch.ones(Tx, Tx, dtype=torch.bool).triu(1), float("-inf")), -1)
        h = x + lin((P @ v).transpose(1, 2).reshape(Bx, Tx, Cx), blk.attn.c_proj.weight, blk.attn.c_proj.bias)
        wrong = h + mlp_ref(blk.mlp, LN(blk.norm2, h))
        assert_differs(out, wrong)


def test_qk_norm_has_its_mapping_row_and_formula_test():
    root = __import__("pathlib").Path(__file__).resolve().parent.parent
    assert "| `qk_norm` |" in (root / "docs" / "mapping.md").read_text()
    assert "def test_qk_norm(" in (root / "tests" / "test_parallel_depth_and_speedrun_blocks.py").read_text()


# ---------------------------------------------------------------------------------------------
# Canon layers
# ---------------------------------------------------------------------------------------------
def test_canon_layer_is_causal_and_reads_the_last_taps():
    from reslab.model.blocks.canon import CanonConv

    conv = CanonConv(3, 4).double()
    with torch.no_grad():
        conv.weight.copy_(torch.arange(12, dtype=torch.float64).reshape(3, 4) / 10)
    h = torch.randn(2, 7, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(conv(h), canon_ref(conv.weight, h), **TOL)
        # by hand at t = 5, channel 1: h_5 + w[1,3] h_5 + w[1,2] h_4 + w[1,1] h_3 + w[1,0] h_2
        w = conv.weight[1]
        by_hand = h[:, 5, 1] * (1 + w[3]) + w[2] * h[:, 4, 1] + w[1] * h[:, 3, 1] + w[0] * h[:, 2, 1]
        torch.testing.assert_close(conv(h)[:, 5, 1], by_hand, **TOL)
        bumped = h.clone()
        bumped[:, 4] += 1.0                                              # the future never leaks back
        assert torch.equal(conv(bumped)[:, :4], conv(h)[:, :4])
        assert_differs(conv(bumped)[:, 4:], conv(h)[:, 4:])
        # wrong: the kernel read the other way round (w[:, 0] on the token itself)
        assert_differs(conv(h), canon_ref(conv.weight.flip(1), h))


@pytest.mark.parametrize("points", ["A", "B", "C", "D", "AC", "ABCD"])
@pytest.mark.parametrize("layer", [1, 2])
def test_canon_block_formula(points, layer):
    model = make("canon", options={"points": points})
    blk, x = model.blocks[layer - 1], stream_input()
    with torch.no_grad():
        out = blk(x)
        torch.testing.assert_close(out, canon_block(blk, x, points), **TOL)
        assert_differs(out, pre_ln(Ref(), blk, x, layer))                    # the Canon layers act
    for p in "ABCD":                                                         # only the chosen points exist
        mod = {"A": blk.canon_a, "B": blk.attn.qkv_mix, "C": blk.canon_c, "D": blk.mlp.pre_act}[p]
        assert (mod is not None) == (p in points)


def test_canon_without_residual_and_other_kernel():
    model = make("canon", options={"points": "ABCD", "residual": False, "kernel": 2})
    blk, x = model.blocks[1], stream_input()
    assert tuple(blk.canon_a.weight.shape) == (C, 2) and tuple(blk.attn.qkv_mix.weight.shape) == (3 * C, 2)
    with torch.no_grad():
        out = blk(x)
        torch.testing.assert_close(out, canon_block(blk, x, "ABCD", residual=False), **TOL)
        assert_differs(out, canon_block(blk, x, "ABCD", residual=True))


def test_canon_d_mixes_swiglus_gate_and_up_together():
    model = make("canon", mlp="swiglu", options={"points": "D"})
    blk, x = model.blocks[0], stream_input()
    hidden = blk.mlp.c_fc.out_features
    assert tuple(blk.mlp.pre_act.weight.shape) == (hidden, 4)
    with torch.no_grad():
        h = x + attn_ref(blk.attn, LN(blk.norm1, x))
        u = canon_ref(blk.mlp.pre_act.weight, lin(LN(blk.norm2, h), blk.mlp.c_fc.weight, blk.mlp.c_fc.bias))
        n = hidden // 2
        u = torch.nn.functional.silu(u[..., :n]) * u[..., n:]
        torch.testing.assert_close(blk(x), h + lin(u, blk.mlp.c_proj.weight, blk.mlp.c_proj.bias), **TOL)
        assert_differs(blk(x), h + M(Ref(mlp="swiglu"), blk.mlp, LN(blk.norm2, h)))


def test_canon_whole_model_is_causal():
    L, model, idx = 2, make("canon"), token_input()
    with torch.no_grad():
        x = embed(model, idx)
        for blk in model.blocks:
            x = canon_block(blk, x, "ABCD")
        logits = model(idx)
        torch.testing.assert_close(logits, head(model, x), **TOL)
        changed = idx.clone()
        changed[:, 3] = (changed[:, 3] + 1) % 11
        after = model(changed)
        assert torch.equal(after[:, :3], logits[:, :3])
        assert_differs(after[:, 3:], logits[:, 3:])


def test_canon_init_draws_the_conv1d_default_from_the_init_generator():
    cfg = dict(n_layer=2, n_embd=C, n_head=H, block_size=8, vocab_size=11)
    a = reslab.build_model("canon", seed=3, **cfg)
    b = reslab.build_model("canon", seed=3, **cfg)
    c = reslab.build_model("canon", seed=4, **cfg)
    w = a.blocks[0].canon_a.weight
    assert torch.equal(w, b.blocks[0].canon_a.weight) and not torch.equal(w, c.blocks[0].canon_a.weight)
    assert w.abs().max() <= 0.5 and w.abs().max() > 0.3                     # U(-1/sqrt(4), 1/sqrt(4))
    meta = meta_built(reslab.ModelConfig(design="canon", **cfg), 3)
    for (n1, p1), (_, p2) in zip(a.named_parameters(), meta.named_parameters()):
        assert torch.equal(p1, p2), n1


@pytest.mark.parametrize("options,field", [({"points": "AE"}, "points"), ({"points": ""}, "points"),
                                           ({"points": "AA"}, "points"), ({"kernel": 0}, "kernel"),
                                           ({"kernel": 65}, "kernel"), ({"K": 2}, "K")])
def test_canon_refuses_bad_options_with_one_line(options, field):
    with pytest.raises(ConfigError) as e:
        reslab.build_model("canon", n_layer=2, n_embd=C, n_head=H, vocab_size=11, options=options)
    assert len(e.value.errors) == 1 and e.value.errors[0].startswith(f"model.options.{field}"), e.value.errors


def test_canon_refuses_vp_identity():
    with pytest.raises(ConfigError) as e:
        reslab.build_model("canon", n_layer=2, n_embd=C, n_head=H, vocab_size=11, vp_identity=True)
    assert e.value.errors[0].startswith("model.vp_identity")


# ---------------------------------------------------------------------------------------------
# AltUp
# ---------------------------------------------------------------------------------------------
def altup_input(K: int, seed: int = 7):
    g = torch.Generator().manual_seed(seed)
    return 1.5 * torch.randn(2, 5, K, C, generator=g, dtype=torch.float64) + 0.3


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("layer", [1, 2, 3])
def test_altup_block_formula(K, layer):
    model = make("altup", L=3, options={"K": K})
    blk, X = model.blocks[layer - 1], altup_input(K)
    assert blk.active == (layer - 1) % K
    with torch.no_grad():
        out = blk(X)
        torch.testing.assert_close(out, altup_block(blk, X, layer, K), **TOL)
        # wrong: a fixed active sub-block (Gemma 3n's form) instead of the alternating one
        assert_differs(out, altup_block(blk, X, layer, K, active=(layer % K)))
        # wrong: no correction scalars (g = 1)
        g = blk.correct.clone()
        blk.correct.fill_(1.0)
        assert_differs(out, blk(X))
        blk.correct.copy_(g)


@pytest.mark.parametrize("K", [2, 3])
def test_altup_whole_model(K):
    L, model, idx = 3, make("altup", L=3, options={"K": K}), token_input()
    with torch.no_grad():
        wide = model.stream.wide_wte.weight[idx].reshape(*idx.shape, K - 1, C)
        X = torch.cat([embed(model, idx).unsqueeze(2), wide], dim=2)
        for layer in range(1, L + 1):
            X = altup_block(model.blocks[layer - 1], X, layer, K)
        logits = model(idx)
        torch.testing.assert_close(logits, head(model, X.sum(2), EPS * K ** 2), **TOL)
        assert_differs(logits, head(model, X[:, :, 0]))                     # the head reads every sub-block


def test_recycled_altup_copies_the_embedding():
    L, K = 2, 3
    model, idx = make("altup", L=L, options={"K": K, "recycled": True}), token_input()
    assert model.stream.wide_wte is None
    with torch.no_grad():
        X = torch.stack([embed(model, idx)] * K, dim=2)
        for layer in range(1, L + 1):
            X = altup_block(model.blocks[layer - 1], X, layer, K)
        torch.testing.assert_close(model(idx), head(model, X.sum(2), EPS * K ** 2), **TOL)
        # wrong: the wider table's form (sub-blocks 2..K zero here, i.e. not copied)
        X = torch.cat([embed(model, idx).unsqueeze(2), torch.zeros(*idx.shape, K - 1, C, dtype=torch.float64)], 2)
        for layer in range(1, L + 1):
            X = altup_block(model.blocks[layer - 1], X, layer, K)
        assert_differs(model(idx), head(model, X.sum(2), EPS * K ** 2))


def test_altup_diagnostics_and_probe_read_the_mean_of_the_sub_blocks():
    from reslab.diagnostics.collector import Diagnostics
    from reslab.probe.measure import probe_model

    model = reslab.build_model("altup", n_layer=2, n_embd=C, n_head=H, block_size=8, vocab_size=11)
    idx = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(0))
    row = Diagnostics(model, (idx, idx), interval=1).measure(0)
    assert row["hidden_stream"] == "mean" and math.isfinite(row["hidden_norm.block1"])
    out = probe_model(model, idx, idx)
    assert len(out["act_norm"]) == 2 and all(math.isfinite(v) for v in out["act_norm"])


def test_altup_at_init_with_one_sub_block_is_pre_ln():
    """K = 1, p = g = 1: x + 1 (L(x) - x) = L(x), equal to pre-ln up to float32 rounding (same seed, same draws)."""
    cfg = dict(n_layer=3, n_embd=C, n_head=H, block_size=8, vocab_size=11, seed=5)
    idx = token_input()
    altup, plain = reslab.build_model("altup", options={"K": 1}, **cfg), reslab.build_model("pre-ln", **cfg)
    assert [n for n, _ in plain.named_parameters()] == [n for n, _ in altup.named_parameters()
                                                         if not n.endswith(("predict", "correct"))]
    with torch.no_grad():
        torch.testing.assert_close(altup(idx), plain(idx), rtol=1e-6, atol=1e-6)


def test_altup_init_values():
    model = reslab.build_model("altup", n_layer=2, n_embd=C, n_head=H, block_size=8, vocab_size=11,
                               options={"K": 3})
    for blk in model.blocks:
        assert torch.equal(blk.predict, torch.eye(3)) and torch.equal(blk.correct, torch.ones(3))
    assert tuple(model.stream.wide_wte.weight.shape) == (11, 2 * C)
    assert 0.01 < model.stream.wide_wte.weight.std().item() < 0.04


@pytest.mark.parametrize("options,field", [({"K": 0}, "model.options.K"), ({"K": 17}, "model.options.K"),
                                           ({"K": True}, "model.options.K"), ({"K": 1, "recycled": True},
                                                                              "model.options.recycled"),
                                           ({"points": "A"}, "model.options.points")])
def test_altup_refuses_bad_options_with_one_line(options, field):
    with pytest.raises(ConfigError) as e:
        reslab.build_model("altup", n_layer=2, n_embd=C, n_head=H, vocab_size=11, options=options)
    assert len(e.value.errors) == 1 and e.value.errors[0].startswith(field), e.value.errors


def test_altup_refuses_layer_designs():
    with pytest.raises(ConfigError) as e:
        reslab.build_model("altup", n_layer=2, n_embd=C, n_head=H, vocab_size=11, layer_designs={"1": "post-ln"})
    assert e.value.errors[0].startswith("model.layer_designs")


# ---------------------------------------------------------------------------------------------
# ProRes: alpha(l, t) multiplies both branches of layer l (inside AltUp's computed layer too)
# ---------------------------------------------------------------------------------------------
def test_prores_multiplies_the_branches_of_canon_and_altup():
    L, warm, t = 3, 10, 5
    alphas = [min(t / (l * warm), 1.0) for l in range(1, L + 1)]             # 0.5, 0.25, 1/6
    canon = make("canon", L=L, prores="linear", prores_warmup=warm)
    altup = make("altup", L=L, prores="linear", prores_warmup=warm, options={"K": 2})
    canon.set_step(t)
    altup.set_step(t)
    x, X = stream_input(), altup_input(2)
    with torch.no_grad():
        for layer in range(1, L + 1):
            blk, a = canon.blocks[layer - 1], alphas[layer - 1]
            h = x + a * attn_ref(blk.attn, canon_ref(blk.canon_a.weight, LN(blk.norm1, x)),
                                 qkv_w=blk.attn.qkv_mix.weight)
            ref = h + a * mlp_ref(blk.mlp, canon_ref(blk.canon_c.weight, LN(blk.norm2, h)), blk.mlp.pre_act.weight)
            torch.testing.assert_close(blk(x), ref, **TOL)
            assert_differs(blk(x), canon_block(blk, x, "ABCD"))
            ablk, k = altup.blocks[layer - 1], (layer - 1) % 2
            pred = torch.stack([sum(ablk.predict[i, j] * X[:, :, j] for j in range(2)) for i in range(2)], dim=2)
            xa = pred[:, :, k]
            y = xa + a * attn_ref(ablk.attn, LN(ablk.norm1, xa))
            y = y + a * mlp_ref(ablk.mlp, LN(ablk.norm2, y))
            ref = torch.stack([pred[:, :, i] + ablk.correct[i] * (y - xa) for i in range(2)], dim=2)
            torch.testing.assert_close(ablk(X), ref, **TOL)


# ---------------------------------------------------------------------------------------------
# hyper-connections with more than four streams
# ---------------------------------------------------------------------------------------------
N8 = {"static": {"streams": 8}, "dynamic": {"streams": 8, "dynamic": True},
      "sinkhorn": {"streams": 8, "mixing": "sinkhorn", "sinkhorn_iters": 7}}


@pytest.mark.parametrize("form", list(N8))
def test_hyper_connections_at_eight_streams(form):
    fields = N8[form]
    model = make("hyper-connections", options=fields)
    blk, Hs = model.blocks[1], streams_input(8)
    idx = token_input()
    with torch.no_grad():
        out = blk(Hs)
        torch.testing.assert_close(out, hyper_block(Ref(), blk, Hs, 2, fields), **TOL)
        torch.testing.assert_close(model(idx), ref_logits(model, idx, fields, 2), **TOL)
        if form == "static":      # wrong: mixing ignored (A_r = I)
            for hc in (blk.attn_hc, blk.mlp_hc):
                hc.a_r.copy_(torch.eye(8))
            assert_differs(out, blk(Hs))
        elif form == "dynamic":   # wrong: the static weights alone
            assert_differs(out, hyper_block(Ref(), blk, Hs, 2, {**fields, "dynamic": False}))
        else:                     # wrong: another number of Sinkhorn iterations
            assert_differs(out, hyper_block(Ref(), blk, Hs, 2, {**fields, "sinkhorn_iters": 1}), 1e-6)
    assert tuple(blk.attn_hc.a_r.shape if form != "sinkhorn" else blk.attn_hc.b_res.shape)[-2:] == (8, 8)


def test_hyper_connections_at_eight_streams_train():
    torch.manual_seed(0)
    model = reslab.build_model("hyper-connections", n_layer=2, n_embd=C, n_head=H, block_size=8, vocab_size=11,
                               options={"streams": 8})
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    idx = torch.arange(8).repeat(4, 1) % 11                                   # a learnable pattern
    losses = []
    for _ in range(30):
        _, loss = model(idx[:, :-1].contiguous(), idx[:, 1:].contiguous())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses) and losses[-1] < 0.5 * losses[0]
