"""Attending across depth: mean-variance split residuals (mv-split, mv-split-pre), DeepCrossAttention
(dca), Mixture-of-Depths Attention (moda) and Depth-Attention (depth-attention), each against its
formula recomputed here from raw weight tensors.

Same method as test_block_formulas.py: float64 models whose every parameter is randomised, a block's
(or the whole model's) output against the formula written out with plain torch ops (the block's and
its submodules' forwards are never used on the reference side), and for each a plausible wrong
formula that gives something else, so the comparison can fail.
"""

from __future__ import annotations

import math

import pytest
import torch

import reslab
from reslab.errors import ConfigError
from tests.test_block_formulas import (
    TOL,
    A,
    M,
    N,
    Ref,
    assert_differs,
    check_block,
    make,
    ref_embed,
    rope,
    stream_input,
    token_input,
)
from tests.test_parallel_depth_and_speedrun_blocks import ref_attention

FORMULA_TESTED = {"mv-split", "mv-split-pre", "dca", "moda", "depth-attention"}

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread

SMALL = dict(n_layer=2, n_embd=16, n_head=2, block_size=8, vocab_size=11)


# ---------------------------------------------------------------------------------------------
# MV-Split: split(x, F) = x + beta (F - m(F)) + alpha (m(F) - m(x)), m the causal running mean
# ---------------------------------------------------------------------------------------------
def prefix_mean(z):
    """m_t(z) = (1/t) sum_(s<=t) z_s, position by position (t counted from 1)."""
    return torch.stack([z[:, : t + 1].mean(1) for t in range(z.shape[1])], dim=1)


def whole_mean(z):
    """The paper's bidirectional token mean (every position sees all): the wrong reading for a causal LM."""
    return z.mean(1, keepdim=True).expand_as(z)


def split(sp, x, f, mean=prefix_mean, swap=False):
    alpha, beta = (sp.beta, sp.alpha) if swap else (sp.alpha, sp.beta)
    return x + beta * (f - mean(f)) + alpha * (mean(f) - mean(x))


def mv_split_post(r, blk, x, l, **kw):
    # h = N1(split(x, A(x)));  out = N2(split(h, M(h)))
    h = N(r, blk.norm1, split(blk.attn_split, x, A(r, blk.attn, x, l), **kw))
    return N(r, blk.norm2, split(blk.mlp_split, h, M(r, blk.mlp, h), **kw))


def mv_split_pre(r, blk, x, l, **kw):
    # h = split(x, A(N1(x)));  out = split(h, M(N2(h)))
    h = split(blk.attn_split, x, A(r, blk.attn, N(r, blk.norm1, x), l), **kw)
    return split(blk.mlp_split, h, M(r, blk.mlp, N(r, blk.norm2, h)), **kw)


MV = {"mv-split": (mv_split_post, False), "mv-split-pre": (mv_split_pre, True)}


@pytest.mark.parametrize("design", list(MV))
@pytest.mark.parametrize("layer", [1, 2])
def test_mv_split_block(design, layer):
    ref_fn, _ = MV[design]
    model = make(design)
    out, _ = check_block(model, ref_fn, Ref(), layer)
    x = stream_input()
    blk = model.blocks[layer - 1]
    with torch.no_grad():
        assert_differs(out, ref_fn(Ref(), blk, x, layer, mean=whole_mean))      # the non-causal mean
        assert_differs(out, ref_fn(Ref(), blk, x, layer, swap=True))            # alpha and beta swapped


@pytest.mark.parametrize("design", list(MV))
def test_mv_split_whole_model(design):
    """Embedding, L blocks, the final norm (mv-split-pre only: the post-norm blocks end normalised), head."""
    ref_fn, final = MV[design]
    L = 3
    model = make(design, L=L)
    idx = token_input()
    with torch.no_grad():
        h = ref_embed(model, idx)
        for l in range(1, L + 1):
            h = ref_fn(Ref(L=L), model.blocks[l - 1], h, l)
        if final:
            h = N(Ref(), model.stream.final_norm, h)
        else:
            assert not list(model.stream.final_norm.parameters())
        torch.testing.assert_close(model(idx), h @ model.lm_head.weight.T, **TOL)


@pytest.mark.parametrize("design", list(MV))
def test_mv_split_is_causal(design):
    """The prefix mean keeps position t blind to later tokens (the paper's whole-sequence mean would not)."""
    model = make(design, L=2)
    idx = token_input()
    other = idx.clone()
    other[:, -1] = (other[:, -1] + 1) % 11
    with torch.no_grad():
        torch.testing.assert_close(model(idx)[:, :-1], model(other)[:, :-1], **TOL)


def test_mv_split_init():
    """alpha = alpha_init, beta = beta_init per channel at every residual point (0 and 0.03 by default)."""
    model = reslab.build_model("mv-split", **SMALL)
    model2 = reslab.build_model("mv-split-pre", **SMALL, options={"alpha_init": 0.5, "beta_init": 1.0})
    for blk in model.blocks:
        for sp in (blk.attn_split, blk.mlp_split):
            assert torch.equal(sp.alpha, torch.zeros(16)) and torch.equal(sp.beta, torch.full((16,), 0.03))
    for blk in model2.blocks:
        for sp in (blk.attn_split, blk.mlp_split):
            assert torch.equal(sp.alpha, torch.full((16,), 0.5)) and torch.equal(sp.beta, torch.ones(16))


def test_mv_split_runtime_gain_multiplies_the_update():
    model = make("mv-split-pre", branch_gain=2.0)
    blk, x = model.blocks[0], stream_input()
    with torch.no_grad():
        r = Ref()
        h = split(blk.attn_split, x, 2.0 * A(r, blk.attn, N(r, blk.norm1, x), 1))
        ref = split(blk.mlp_split, h, 2.0 * M(r, blk.mlp, N(r, blk.norm2, h)))
        torch.testing.assert_close(blk(x), ref, **TOL)


@pytest.mark.parametrize("design, fields, needle", [
    ("mv-split", {"options": {"alpha_init": 1.5}}, "model.options.alpha_init: "),
    ("mv-split-pre", {"options": {"alpha_init": -0.1}}, "model.options.alpha_init: "),
    ("mv-split", {"options": {"beta_init": float("inf")}}, "model.options.beta_init: "),
    ("mv-split", {"options": {"gamma": 1.0}}, "model.options.gamma: unknown key"),
    ("mv-split", {"attn_res": False}, "model.attn_res: "),
    ("mv-split-pre", {"skip_scale": "scalar"}, "model.skip_scale: "),
    ("mv-split", {"layer_designs": {"1": "post-ln"}}, "model.layer_designs: "),
])
def test_mv_split_refusals(design, fields, needle):
    with pytest.raises(ConfigError) as e:
        reslab.build_model(design, **(SMALL | fields))
    lines = [line for line in str(e.value).splitlines() if needle in line]
    assert len(lines) == 1, str(e.value)


def assert_causal(model):
    idx = token_input()
    other = idx.clone()
    other[:, -1] = (other[:, -1] + 1) % 11
    with torch.no_grad():
        a, b = model(idx), model(other)
    torch.testing.assert_close(a[:, :-1], b[:, :-1], **TOL)
    assert_differs(a[:, -1], b[:, -1])


# ---------------------------------------------------------------------------------------------
# DCA: x_s = sum_i (b[s,i] + ReLU(u_s . RMS(X_i))) X_i; h = x_q + A(N_q x_q, N_k x_k, N_v x_v); X_l = a + M(N2 h)
# ---------------------------------------------------------------------------------------------
def rms(x):
    return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + 1e-5)


def grn(g, X, S, dynamic=True):
    """S mixes of the sources X_i with weights b[s, i] (per channel) + ReLU(u_s . RMS(X_i)) (per token)."""
    mixes = []
    for s in range(S):
        terms = []
        for i, x in enumerate(X):
            w = g.bias[s, i]
            if dynamic:
                w = w + torch.relu(rms(x) @ g.score.weight[s])[..., None]
            terms.append(w * x)
        mixes.append(sum(terms))
    return mixes


def dca_logits(model, idx, L, one_mix=False, dynamic=True):
    r = Ref(L=L)
    X = [ref_embed(model, idx)]
    for l in range(1, L + 1):
        blk = model.blocks[l - 1]
        xq, xk, xv = grn(blk.qkv_mix, X, 3, dynamic)
        if one_mix:
            xk = xv = xq
        a = ref_attention(blk.attn, N(r, blk.norm_q, xq), N(r, blk.norm_k, xk), N(r, blk.norm_v, xv))
        h = xq + a
        X.append(a + M(r, blk.mlp, N(r, blk.norm2, h)))
    head = grn(model.blocks[-1].out_mix, X, 1, dynamic)[0]
    return N(r, model.stream.final_norm, head) @ model.lm_head.weight.T


def test_dca_whole_model():
    L = 3
    model = make("dca", L=L)
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        torch.testing.assert_close(logits, dca_logits(model, idx, L), **TOL)
        assert_differs(logits, dca_logits(model, idx, L, one_mix=True))      # one mix for q, k and v
        assert_differs(logits, dca_logits(model, idx, L, dynamic=False))     # static weights only
    assert [tuple(b.qkv_mix.bias.shape) for b in model.blocks] == [(3, 1, 16), (3, 2, 16), (3, 3, 16)]
    assert [b.out_mix is None for b in model.blocks] == [True, True, False]
    assert tuple(model.blocks[-1].out_mix.bias.shape) == (1, 4, 16)


def dca_from_pre_ln(kw):
    """A dca model holding a pre-ln model's weights (N1 copied into N_q, N_k, N_v), and the pre-ln model."""
    dca = reslab.build_model("dca", **kw).double()
    pre = reslab.build_model("pre-ln", **kw).double()
    state = dca.state_dict()
    for k, v in pre.state_dict().items():
        if ".norm1." in k:
            for s in "qkv":
                state[k.replace(".norm1.", f".norm_{s}.")] = v
        else:
            state[k] = v
    dca.load_state_dict(state)
    return dca, pre


def test_dca_with_u_zero_is_pre_ln_exactly():
    """b = 1: every mix is the plain sum of the layer outputs, pre-ln's stream; with the input-dependent
    part switched off (u = 0) the logits are pre-ln's up to rounding."""
    kw = dict(n_layer=4, n_embd=16, n_head=2, block_size=8, vocab_size=11, seed=0)
    dca, pre = dca_from_pre_ln(kw)
    idx = token_input()
    with torch.no_grad():
        assert all(torch.equal(b.qkv_mix.bias, torch.ones_like(b.qkv_mix.bias)) for b in dca.blocks)
        assert torch.equal(dca.blocks[-1].out_mix.bias, torch.ones(1, 5, 16, dtype=torch.float64))
        assert_differs(dca(idx), pre(idx), min_gap=1e-9)                      # u is drawn, not 0 ...
        for b in dca.blocks:
            b.qkv_mix.score.weight.zero_()
        dca.blocks[-1].out_mix.score.weight.zero_()
        torch.testing.assert_close(dca(idx), pre(idx), rtol=1e-12, atol=1e-12)   # ... and with u = 0: pre-ln


def test_dca_input_dependent_weights_get_a_gradient():
    """u starts small but not 0, so ReLU passes a gradient and the weights can become input-dependent."""
    model = reslab.build_model("dca", **SMALL)
    model(token_input()).logsumexp(-1).mean().backward()
    for b in model.blocks:
        assert b.qkv_mix.score.weight.grad.abs().sum() > 0


def test_dca_runtime_gain_multiplies_the_layer_outputs():
    L = 2
    model = make("dca", L=L, branch_gain=2.0)
    idx = token_input()
    r = Ref(L=L)
    with torch.no_grad():
        X = [ref_embed(model, idx)]
        for blk in model.blocks:
            xq, xk, xv = grn(blk.qkv_mix, X, 3)
            a = 2.0 * ref_attention(blk.attn, N(r, blk.norm_q, xq), N(r, blk.norm_k, xk), N(r, blk.norm_v, xv))
            X.append(a + 2.0 * M(r, blk.mlp, N(r, blk.norm2, xq + a)))
        ref = N(r, model.stream.final_norm, grn(model.blocks[-1].out_mix, X, 1)[0]) @ model.lm_head.weight.T
        torch.testing.assert_close(model(idx), ref, **TOL)


# ---------------------------------------------------------------------------------------------
# MoDA: one softmax over the layer's causal sequence keys and the same token's keys of earlier layers
# ---------------------------------------------------------------------------------------------
def head_gate(attn, x):
    """Gated attention's per-head gate sigmoid(x W_g + b_g), (B, T, H, 1), or 1 without one."""
    if attn.c_gate is None:
        return 1.0
    return torch.sigmoid(x @ attn.c_gate.weight.T + attn.c_gate.bias)[..., None]


def raw_heads(attn, x):
    """q, k, v per head (B, 2, T, d) from the raw [W_Q; W_K; W_V] and its bias (two heads)."""
    Bx, Tx, Cx = x.shape
    W, b = attn.c_attn.weight, attn.c_attn.bias
    heads = lambda t: t.reshape(Bx, Tx, 2, Cx // 2).transpose(1, 2)
    return tuple(heads(x @ W[i * Cx:(i + 1) * Cx].T + b[i * Cx:(i + 1) * Cx]) for i in range(3))


def moda_attention_ref(attn, x, depth, separate=False, rotary=False, mismatch=False, gated=True):
    """Per head: p = softmax([q_t . k_s, s <= t] ++ [q_t . k^(i)_t, i < l]) / sqrt(d); o_t = sum p v.
    separate: the wrong reading with two softmaxes (sequence, depth) whose outputs are added.
    rotary: RoPE on the sequence scores only; the depth scores pair one position with itself, where
    RoPE's rotations cancel, so they are written here from the unrotated q and k. mismatch: the wrong
    pairing of a rotated query with unrotated depth keys."""
    Bx, Tx, Cx = x.shape
    q, k, v = raw_heads(attn, x)
    d = Cx // 2
    qs, ks = (rope(q), rope(k)) if rotary else (q, k)
    out = torch.zeros_like(q)
    for t in range(Tx):
        qt = q[:, :, t]                                                    # (B, H, d)
        logits = [(qs[:, :, t] * ks[:, :, s]).sum(-1) / math.sqrt(d) for s in range(t + 1)]
        values = [v[:, :, s] for s in range(t + 1)]
        qd = qs[:, :, t] if mismatch else qt
        dlogits = [(qd * ki[:, :, t]).sum(-1) / math.sqrt(d) for ki, _ in depth]
        dvalues = [vi[:, :, t] for _, vi in depth]
        if separate and depth:
            ps, pd = torch.stack(logits, -1).softmax(-1), torch.stack(dlogits, -1).softmax(-1)
            o = sum(ps[..., j, None] * values[j] for j in range(len(values)))
            o = o + sum(pd[..., j, None] * dvalues[j] for j in range(len(dvalues)))
        else:
            p = torch.stack(logits + dlogits, -1).softmax(-1)
            o = sum(p[..., j, None] * val for j, val in enumerate(values + dvalues))
        out[:, :, t] = o
    y = (out.transpose(1, 2) * (head_gate(attn, x) if gated else 1.0)).reshape(Bx, Tx, Cx)
    return y @ attn.c_proj.weight.T + attn.c_proj.bias, (k, v)


def moda_logits(model, idx, L, separate=False, no_depth=False, rotary=False, mismatch=False, gated=True):
    r = Ref(L=L)
    h = model.wte.weight[idx] if rotary else ref_embed(model, idx)
    depth = []
    for blk in model.blocks:
        a, kv = moda_attention_ref(blk.attn, N(r, blk.norm1, h), [] if no_depth else depth, separate, rotary,
                                   mismatch, gated)
        h = h + a
        h = h + M(r, blk.mlp, N(r, blk.norm2, h))
        depth.append(kv)
    return N(r, model.stream.final_norm, h) @ model.lm_head.weight.T


def test_moda_whole_model():
    L = 3
    model = make("moda", L=L)
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        torch.testing.assert_close(logits, moda_logits(model, idx, L), **TOL)
        assert_differs(logits, moda_logits(model, idx, L, separate=True))   # two softmaxes, added
        assert_differs(logits, moda_logits(model, idx, L, no_depth=True))   # pre-ln (no depth keys)


def test_moda_takes_the_output_gate():
    """attn_gate reaches MoDA's attention: sigmoid(x W_g + b_g) per head, before W_P (it was once
    built and never applied)."""
    L = 2
    model = make("moda", L=L, attn_gate="head")
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        torch.testing.assert_close(logits, moda_logits(model, idx, L), **TOL)
        assert_differs(logits, moda_logits(model, idx, L, gated=False))


def test_moda_with_rope_scores_depth_keys_without_rotation():
    """With RoPE the sequence scores are rotated; a token's depth keys sit at its own position, where the
    rotations of q_t and k^(i)_t cancel, so the depth scores equal the unrotated q_t . k^(i)_t."""
    L = 3
    model = make("moda", L=L, pos="rope")
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        # the model computes rotary angles in float32 (as test_block_formulas' test_pre_ln_rope notes)
        torch.testing.assert_close(logits, moda_logits(model, idx, L, rotary=True), rtol=1e-6, atol=1e-6)
        assert_differs(logits, moda_logits(model, idx, L, rotary=True, no_depth=True))
        assert_differs(logits, moda_logits(model, idx, L, rotary=True, mismatch=True))


def test_moda_layer_one_is_pre_ln_layer_one():
    """The first layer has no earlier keys: its attention is the plain causal attention."""
    kw = dict(n_layer=1, n_embd=16, n_head=2, block_size=8, vocab_size=11, seed=0)
    moda, pre = reslab.build_model("moda", **kw).double(), reslab.build_model("pre-ln", **kw).double()
    moda.load_state_dict(pre.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(moda(token_input()), pre(token_input()), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Depth-Attention: values mixed across depth (softmax over the token's keys in layers 1..l), then
# the usual causal attention reads them; a layer stores its depth-mixed values
# ---------------------------------------------------------------------------------------------
def depth_attention_ref(attn, x, depth, store_original=False, own=True):
    """Per head, token t of layer l: p = softmax_j(q_t . k^(j)_t / sqrt(d)) over the stored keys of the
    earlier layers and its own; v~_t = sum_j p_j v^(j)_t with the earlier layers' STORED values and its
    own fresh v; o_t = sum_(s<=t) softmax_s(q_t . k_s / sqrt(d)) v~_s. Wrong readings for the controls:
    store_original (a layer stores its unmixed v), own=False (only the earlier layers' keys; layer 1
    then keeps its v)."""
    Bx, Tx, Cx = x.shape
    q, k, v = raw_heads(attn, x)
    d = Cx // 2
    keys = [kj for kj, _ in depth] + ([k] if own or not depth else [])
    values = [vj for _, vj in depth] + ([v] if own or not depth else [])
    mixed = torch.zeros_like(v)
    for t in range(Tx):
        p = torch.stack([(q[:, :, t] * kj[:, :, t]).sum(-1) / math.sqrt(d) for kj in keys], -1).softmax(-1)
        mixed[:, :, t] = sum(p[..., j, None] * vj[:, :, t] for j, vj in enumerate(values))
    out = torch.zeros_like(q)
    for t in range(Tx):
        p = torch.stack([(q[:, :, t] * k[:, :, s]).sum(-1) / math.sqrt(d) for s in range(t + 1)], -1).softmax(-1)
        out[:, :, t] = sum(p[..., s, None] * mixed[:, :, s] for s in range(t + 1))
    y = (out.transpose(1, 2) * head_gate(attn, x)).reshape(Bx, Tx, Cx)
    return y @ attn.c_proj.weight.T + attn.c_proj.bias, (k, v if store_original else mixed)


def read_layers(l, stride=1):
    """J(l): the earlier layers j (from 1) that layer l reads: (j - 1) mod stride = 0."""
    return [j for j in range(1, l) if (j - 1) % stride == 0]


def depth_attention_logits(model, idx, L, no_depth=False, stride=1, **wrong):
    r = Ref(L=L)
    h, depth = ref_embed(model, idx), []
    for l, blk in enumerate(model.blocks, start=1):
        read = [depth[j - 1] for j in read_layers(l, stride)]
        a, kv = depth_attention_ref(blk.attn, N(r, blk.norm1, h), [] if no_depth else read, **wrong)
        h = h + a
        h = h + M(r, blk.mlp, N(r, blk.norm2, h))
        depth.append(kv)
    return N(r, model.stream.final_norm, h) @ model.lm_head.weight.T


@pytest.mark.parametrize("fields", [{}, {"attn_gate": "head"}])
def test_depth_attention_whole_model(fields):
    L = 3
    model = make("depth-attention", L=L, **fields)
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        torch.testing.assert_close(logits, depth_attention_logits(model, idx, L), **TOL)
        assert_differs(logits, depth_attention_logits(model, idx, L, store_original=True))  # unmixed v stored
        assert_differs(logits, depth_attention_logits(model, idx, L, own=False))   # its own key left out
        assert_differs(logits, depth_attention_logits(model, idx, L, no_depth=True))   # pre-ln


def test_depth_attention_read_layers():
    # the authors' released 3B model: 48 layers, stride 24, so every layer after 25 reads layers 1 and 25
    assert read_layers(48, stride=24) == [1, 25] and read_layers(25, stride=24) == [1]
    assert read_layers(6, stride=2) == [1, 3, 5] and read_layers(7, stride=4) == [1, 5]
    assert read_layers(4) == [1, 2, 3] and read_layers(1, stride=3) == []


@pytest.mark.parametrize("stride", [2, 3])
def test_depth_attention_stride(stride):
    L = 6
    model = make("depth-attention", L=L, options={"stride": stride})
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        torch.testing.assert_close(logits, depth_attention_logits(model, idx, L, stride=stride), **TOL)
        assert_differs(logits, depth_attention_logits(model, idx, L))  # every earlier layer read
        assert_differs(logits, depth_attention_logits(model, idx, L, stride=5 - stride))  # another stride


def test_depth_attention_stride_beyond_depth_reads_layer_one_only():
    L = 4
    model = make("depth-attention", L=L, options={"stride": 1000})
    idx = token_input()
    with torch.no_grad():
        torch.testing.assert_close(model(idx), depth_attention_logits(model, idx, L, stride=L), **TOL)


def test_depth_attention_adds_no_parameter_and_layer_one_is_pre_ln():
    kw = dict(n_embd=16, n_head=2, block_size=8, vocab_size=11, seed=0)
    deep = reslab.build_model("depth-attention", n_layer=3, **kw)
    assert deep.param_counts() == reslab.build_model("pre-ln", n_layer=3, **kw).param_counts()
    one, pre = (reslab.build_model(d, n_layer=1, **kw).double() for d in ("depth-attention", "pre-ln"))
    one.load_state_dict(pre.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(one(token_input()), pre(token_input()), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("design", ["dca", "moda", "depth-attention"])
def test_cross_depth_designs_are_causal(design):
    assert_causal(make(design, L=3))


@pytest.mark.parametrize("design, fields, needle", [
    ("dca", {"attn_res": False}, "model.attn_res: "),
    ("dca", {"skip_scale": "scalar"}, "model.skip_scale: "),
    ("dca", {"prores": "linear"}, "model.prores: "),
    ("dca", {"norm": "none"}, "model.norm: "),
    ("dca", {"options": {"k": 2}}, "model.options: dca has no options"),
    ("moda", {"prores": "linear"}, "model.prores: "),
    ("moda", {"value_residual": True}, "model.value_residual: "),
    ("moda", {"shaped_attention": True}, "model.shaped_attention: "),
    ("moda", {"layer_designs": {"1": "post-ln"}}, "model.layer_designs: "),
    ("depth-attention", {"prores": "linear"}, "model.prores: "),
    ("depth-attention", {"value_residual": True}, "model.value_residual: "),
    ("depth-attention", {"options": {"stride": 0}}, "model.options.stride: a whole number in 1..1024"),
    ("depth-attention", {"options": {"stride": 2.5}}, "model.options.stride: "),
    ("depth-attention", {"options": {"stride": True}}, "model.options.stride: "),
    ("depth-attention", {"options": {"window": 2}}, "model.options"),
])
def test_cross_depth_refusals(design, fields, needle):
    with pytest.raises(ConfigError) as e:
        reslab.build_model(design, **(SMALL | fields))
    lines = [line for line in str(e.value).splitlines() if needle in line]
    assert len(lines) == 1, str(e.value)
