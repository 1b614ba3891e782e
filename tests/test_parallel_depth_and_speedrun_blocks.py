"""The parallel block, mixing across depth, the speedruns' skips, NormFormer, LAuReL and
frac-connections: each design against its formula, recomputed here from raw weight tensors.

Same method as test_block_formulas.py: float64 models whose every parameter is randomised, a
block's (or the whole model's) output against the formula written out with plain torch ops (the
block's and its submodules' forwards are never used on the reference side), and for each a
plausible wrong formula that gives something else, so the comparison can fail.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import reslab
from reslab.errors import ConfigError
from tests.test_block_formulas import (
    BLOCK,
    TOL,
    VOCAB,
    A,
    C,
    H,
    M,
    N,
    Ref,
    assert_differs,
    make,
    pre_ln,
    ref_embed,
    stream_input,
    token_input,
)

FORMULA_TESTED = {"parallel", "denseformer", "attn-res", "speedrun", "mudd", "lime", "normformer", "laurel",
                  "frac-connections"}


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread


def ref_attention(attn, xq, xk=None, xv=None, *, extra=None, qk_norm=False, head_gains=None, xsa=None):
    """Causal attention from raw weights (2 heads), with the options the later designs add to it: queries, keys and
    values from three inputs (MUDD, LIMe), extra values (value embeddings), QK-norm (RMSNorm per
    head, gain per channel), a gain per head's output (NormFormer) and XSA (xsa: the factor g per
    head, shape (2,), of y_i - g (<y_i, v_i> / <v_i, v_i>) v_i)."""
    xk = xq if xk is None else xk
    xv = xq if xv is None else xv
    Bx, Tx, Cx = xq.shape
    W, b = attn.c_attn.weight, attn.c_attn.bias
    q, k, v = (t @ W[i * Cx:(i + 1) * Cx].T + b[i * Cx:(i + 1) * Cx] for i, t in enumerate((xq, xk, xv)))
    if extra is not None:
        v = v + extra
    d = Cx // 2
    heads = lambda t: t.reshape(Bx, Tx, 2, d).transpose(1, 2)
    q, k, v = heads(q), heads(k), heads(v)
    if qk_norm:
        q = q / torch.sqrt((q ** 2).mean(-1, keepdim=True) + 1e-5) * attn.q_norm.weight
        k = k / torch.sqrt((k ** 2).mean(-1, keepdim=True) + 1e-5) * attn.k_norm.weight
    future = torch.ones(Tx, Tx, dtype=torch.bool).triu(1)
    P = torch.softmax((q @ k.transpose(-1, -2) / d ** 0.5).masked_fill(future, float("-inf")), dim=-1)
    y = P @ v
    if xsa is not None:
        y = y - xsa.reshape(1, 2, 1, 1) * (y * v).sum(-1, keepdim=True) / (v * v).sum(-1, keepdim=True) * v
    if head_gains is not None:
        y = y * head_gains.reshape(1, 2, 1, 1)
    return y.transpose(1, 2).reshape(Bx, Tx, Cx) @ attn.c_proj.weight.T + attn.c_proj.bias


def check_whole_model(design, L, ref, wrongs=(), **fields):
    """The model's logits equal ref(model, idx) to float64 rounding, and differ from each wrong(model, idx)."""
    model = make(design, L=L, **fields)
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        torch.testing.assert_close(logits, ref(model, idx), **TOL)
        for wrong in wrongs:
            assert_differs(logits, wrong(model, idx))
    return model


# ---------------------------------------------------------------------------------------------
# parallel: x = x + A(N1(x)) + M(N2(x)); shared_norm: N2 = N1
# ---------------------------------------------------------------------------------------------
def parallel(r: Ref, blk, x, l: int, shared: bool = False):
    n1 = N(r, blk.norm1, x)
    n2 = n1 if shared else N(r, blk.norm2, x)
    return x + r.c(l) * (A(r, blk.attn, n1, l) + M(r, blk.mlp, n2))


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("layer", [1, 2])
def test_parallel_block(shared, layer):
    model = make("parallel", options={"shared_norm": shared})
    blk, x = model.blocks[layer - 1], stream_input()
    with torch.no_grad():
        out = blk(x)
        torch.testing.assert_close(out, parallel(Ref(), blk, x, layer, shared), **TOL)
        # wrong formulas: the sequential pre-ln block over the same weights, and (two norms) one norm
        parts = SimpleNamespace(norm1=blk.norm1, norm2=blk.norm2 or blk.norm1, attn=blk.attn, mlp=blk.mlp)
        seq = pre_ln(Ref(), parts, x, layer)
        assert_differs(out, seq)
        if not shared:
            assert_differs(out, parallel(Ref(), blk, x, layer, shared=True))
    assert (blk.norm2 is None) == shared


def test_parallel_shared_norm_has_one_norm_per_layer():
    two, one = make("parallel"), make("parallel", options={"shared_norm": True})
    per_norm = 2 * 16  # LayerNorm weight + bias at width 16
    assert two.param_counts()["total"] - one.param_counts()["total"] == 2 * per_norm  # 2 layers


def test_parallel_gain_and_prores_multiply_both_branches():
    L, warm, t = 3, 10, 5
    model = make("parallel", L=L, prores="linear", prores_warmup=warm, branch_gain=3.0, gain_mode="runtime")
    model.set_step(t)
    alphas = tuple(reslab.prores_alpha("linear", l, t, L, warm) for l in range(1, L + 1))
    r = Ref(L=L, prores=alphas, gain=3.0)
    x = stream_input()
    for layer in range(1, L + 1):
        blk = model.blocks[layer - 1]
        with torch.no_grad():
            out = blk(x)
            torch.testing.assert_close(out, parallel(r, blk, x, layer), **TOL)
            assert_differs(out, parallel(Ref(L=L), blk, x, layer))


def test_parallel_whole_model():
    model = make("parallel", L=2, norm="rmsnorm")
    r = Ref(norm="rmsnorm")
    idx = token_input()
    with torch.no_grad():
        h = ref_embed(model, idx)
        for layer in (1, 2):
            h = parallel(r, model.blocks[layer - 1], h, layer)
        ref = N(r, model.stream.final_norm, h) @ model.lm_head.weight.T
        torch.testing.assert_close(model(idx), ref, **TOL)


@pytest.mark.parametrize("fields,needle", [
    ({"attn_res": False}, "model.attn_res"),
    ({"ffn_res": False}, "model.ffn_res"),
    ({"options": {"shared": True}}, "model.options.shared: unknown key; allowed keys are shared_norm"),
    ({"options": {"shared_norm": "yes"}}, "model.options.shared_norm"),
])
def test_parallel_refusals(fields, needle):
    with pytest.raises(ConfigError, match=needle):
        reslab.build_model("parallel", n_layer=2, n_embd=16, n_head=2, block_size=8, vocab_size=11, **fields)


# ---------------------------------------------------------------------------------------------
# DenseFormer: X_l = PreLN_l(Y_(l-1)); Y_l = sum_(j in J(l)) alpha_(l,j) X_j every period-th layer
# ---------------------------------------------------------------------------------------------
def denseformer_logits(model, idx, L: int, dilation: int, period: int, average: bool = True, r=None):
    r = Ref(L=L) if r is None else r
    X = [ref_embed(model, idx)]
    Y = X[0]
    for l in range(1, L + 1):
        blk = model.blocks[l - 1]
        X.append(pre_ln(r, blk, Y, l))
        if average and l % period == 0:
            J = [j for j in range(l + 1) if (l - j) % dilation == 0]      # written out, oldest first
            Y = sum(w * X[j] for w, j in zip(blk.dwa_weights, J))
        else:
            Y = X[l]
    return N(r, model.stream.final_norm, Y) @ model.lm_head.weight.T


@pytest.mark.parametrize("dilation,period", [(1, 1), (2, 1), (1, 2), (2, 3)])
def test_denseformer_whole_model(dilation, period):
    L = 4
    model = make("denseformer", L=L, options={"dilation": dilation, "period": period})
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        torch.testing.assert_close(logits, denseformer_logits(model, idx, L, dilation, period), **TOL)
        assert_differs(logits, denseformer_logits(model, idx, L, dilation, period, average=False))
        other = 2 if dilation == 1 else 1                                 # a wrong dilation
        if all(len(b.dwa_weights) == len([j for j in range(b.layer + 1) if (b.layer - j) % other == 0])
               for b in model.blocks if b.dwa_weights is not None):
            assert_differs(logits, denseformer_logits(model, idx, L, other, period))
    assert [b.dwa_weights is not None for b in model.blocks] == [l % period == 0 for l in range(1, L + 1)]


def test_denseformer_prores_alpha_multiplies_its_blocks_branches():
    L, warm, t = 3, 10, 5
    model = make("denseformer", L=L, prores="linear", prores_warmup=warm)
    model.set_step(t)
    r = Ref(L=L, prores=tuple(reslab.prores_alpha("linear", l, t, L, warm) for l in range(1, L + 1)))
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        torch.testing.assert_close(logits, denseformer_logits(model, idx, L, 1, 1, r=r), **TOL)
        assert_differs(logits, denseformer_logits(model, idx, L, 1, 1))


def test_denseformer_starts_as_pre_ln_exactly():
    """alpha_(l,l) = 1, others 0: the same seed gives pre-ln's logits bit for bit, and the same
    parameters apart from the averages' weights."""
    kw = dict(n_layer=4, n_embd=16, n_head=2, block_size=8, vocab_size=11, seed=3)
    dense = reslab.build_model("denseformer", options={"dilation": 2}, **kw)
    pre = reslab.build_model("pre-ln", **kw)
    idx = token_input()
    with torch.no_grad():
        assert torch.equal(dense(idx), pre(idx))
    extra = set(dict(dense.named_parameters())) - set(dict(pre.named_parameters()))
    assert extra == {f"blocks.{i}.dwa_weights" for i in range(4)}
    assert [b.dwa_weights.tolist() for b in dense.blocks] == [[1.0], [0.0, 1.0], [0.0, 1.0], [0.0, 0.0, 1.0]]


# ---------------------------------------------------------------------------------------------
# Attention Residuals: h_k = sum_(i<k) softmax_i(w_k . RMSNorm(v_i)) v_i
# ---------------------------------------------------------------------------------------------
def depth_mix(values, q):
    """The mix written out: keys RMS-normalised with the query module's own gain, softmax over the
    sources (not over channels or tokens), values unnormalised."""
    V = torch.stack(values)                                               # (n, B, T, C)
    K = V / torch.sqrt((V ** 2).mean(-1, keepdim=True) + 1e-5) * q.key_gain
    w = torch.softmax((K * q.query).sum(-1), dim=0)                       # (n, B, T)
    return (w[..., None] * V).sum(0)


def plain_sum(values, q):
    return sum(values)


def attn_res_logits(model, idx, L: int, block_layers: int = 0, mix=depth_mix, gain: float = 1.0):
    r = Ref(L=L)
    sources, partial = [ref_embed(model, idx)], None
    for l in range(1, L + 1):
        blk = model.blocks[l - 1]
        if block_layers == 0:
            a = gain * A(r, blk.attn, N(r, blk.norm1, mix(sources, blk.attn_query)), l)
            sources.append(a)
            m = gain * M(r, blk.mlp, N(r, blk.norm2, mix(sources, blk.mlp_query)))
            sources.append(m)
        else:
            h = mix(sources + ([partial] if partial is not None else []), blk.attn_query)
            if (l - 1) % block_layers == 0 and partial is not None:       # a new group of layers
                sources.append(partial)
                partial = None
            a = gain * A(r, blk.attn, N(r, blk.norm1, h), l)
            partial = a if partial is None else partial + a
            partial = partial + gain * M(r, blk.mlp, N(r, blk.norm2, mix(sources + [partial], blk.mlp_query)))
    last = model.blocks[-1]
    h = mix(sources + ([partial] if partial is not None else []), last.out_query)
    return N(r, model.stream.final_norm, h) @ model.lm_head.weight.T


@pytest.mark.parametrize("block_layers", [0, 1, 2])
def test_attn_res_whole_model(block_layers):
    L = 4
    model = make("attn-res", L=L, options={"block_layers": block_layers})
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        torch.testing.assert_close(logits, attn_res_logits(model, idx, L, block_layers), **TOL)
        # wrong formulas: the plain sum (pre-ln's stream), and the other variant on the same weights
        assert_differs(logits, attn_res_logits(model, idx, L, block_layers, mix=plain_sum))
        assert_differs(logits, attn_res_logits(model, idx, L, 2 if block_layers == 0 else 0))
    assert [b.out_query is not None for b in model.blocks] == [False, False, False, True]


def test_attn_res_runtime_gain_multiplies_every_output():
    model = make("attn-res", L=2, branch_gain=3.0)
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        torch.testing.assert_close(logits, attn_res_logits(model, idx, 2, gain=3.0), **TOL)
        assert_differs(logits, attn_res_logits(model, idx, 2))


@pytest.mark.parametrize("block_layers", [0, 2])
def test_attn_res_starts_as_pre_ln_up_to_the_norms_eps(block_layers):
    """w = 0: uniform weights, so each sublayer reads the mean of the sources where pre-ln reads
    their sum; its pre-norm cannot tell (up to eps), nor can the final norm."""
    kw = dict(n_layer=4, n_embd=16, n_head=2, block_size=8, vocab_size=11, seed=5, norm_eps=1e-24)
    res = reslab.build_model("attn-res", options={"block_layers": block_layers}, **kw).double()
    pre = reslab.build_model("pre-ln", **kw).double()
    shared = {k: v for k, v in res.state_dict().items() if k in pre.state_dict()}
    assert set(shared) == set(pre.state_dict())
    for k, v in pre.state_dict().items():   # the same seed draws the same weights in the same order
        assert torch.equal(shared[k], v), k
    idx = token_input()
    with torch.no_grad():
        torch.testing.assert_close(res(idx), pre(idx), rtol=1e-8, atol=1e-8)
        assert all(torch.equal(b.attn_query.query, torch.zeros(16, dtype=torch.float64)) for b in res.blocks)


@pytest.mark.parametrize("design,fields,needle", [
    ("denseformer", {"options": {"dilation": 0}}, "model.options.dilation: must be a whole number >= 1, got 0"),
    ("denseformer", {"options": {"period": 3}, "n_layer": 2}, "model.options.period: must be at most n_layer=2, got 3"),
    ("denseformer", {"layer_designs": {"2": "post-ln"}}, "model.layer_designs"),
    ("denseformer", {"value_residual": True}, "model.value_residual"),
    ("attn-res", {"options": {"block_layers": -1}}, "model.options.block_layers: must be a whole number >= 0"),
    ("attn-res", {"options": {"block_layers": 5}, "n_layer": 4}, "model.options.block_layers: must be at most n_layer=4"),
    ("attn-res", {"prores": "linear"}, "model.prores"),
    ("attn-res", {"attn_res": False}, "model.attn_res"),
    ("attn-res", {"skip_scale": "scalar"}, "model.skip_scale"),
])
def test_depth_mixing_refusals(design, fields, needle):
    kw = dict(n_layer=2, n_embd=16, n_head=2, block_size=8, vocab_size=11) | fields
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        reslab.build_model(design, **kw)


# ---------------------------------------------------------------------------------------------
# The speedruns' skips: x0 re-injection, U-net skips, value embeddings, backout
# ---------------------------------------------------------------------------------------------
def speedrun_logits(model, idx, L, x0=True, unet=True, value_embeds=True, backout=True, k=None,
                    mirror=lambda l, L: L + 1 - l, gate_scale=3.0):
    r = Ref(L=L)
    k = L // 2 if k is None else k
    first = N(r, model.stream.embed_norm, ref_embed(model, idx))
    x, outs = first, {0: first}
    for l in range(1, L + 1):
        blk = model.blocks[l - 1]
        if x0:
            x = blk.resid_lambda * x + blk.x0_lambda * first
        m = mirror(l, L)
        if unet and l > L // 2 and 1 <= m <= L // 2:
            x = x + (1.0 if blk.unet_weight is None else blk.unet_weight) * outs[m]  # (None: a wrong pairing)
        n1 = N(r, blk.norm1, x)
        extra = torch.zeros_like(n1)
        if value_embeds and (L - l) % 2 == 0:                     # every other layer, the last included
            g = gate_scale * torch.sigmoid(n1[..., :12] @ blk.ve_gate.weight.T)          # (B, T, heads)
            table = blk.value_embed.weight[idx]                                          # (B, T, C)
            extra = (g.repeat_interleave(table.shape[-1] // g.shape[-1], dim=-1)) * table
        x = x + ref_attention(blk.attn, n1, extra=extra)
        x = x + M(r, blk.mlp, N(r, blk.norm2, x))
        outs[l] = x
    y = x - model.stream.backout_lambda * outs[k] if backout else x
    return N(r, model.stream.final_norm, y) @ model.lm_head.weight.T


@pytest.mark.parametrize("L", [4, 5])
def test_speedrun_whole_model(L):
    model = make("speedrun", L=L)
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        torch.testing.assert_close(logits, speedrun_logits(model, idx, L), **TOL)
        # wrong formulas: each path left out, a U-net pairing l with l - L//2, a gate without its 3
        for path in ("x0", "unet", "value_embeds", "backout"):
            assert_differs(logits, speedrun_logits(model, idx, L, **{path: False}))
        assert_differs(logits, speedrun_logits(model, idx, L, mirror=lambda l, L: l - L // 2))
        assert_differs(logits, speedrun_logits(model, idx, L, gate_scale=1.0))
    half = L // 2
    assert [b.mirror for b in model.blocks] == [None] * (L - half) + list(range(half, 0, -1))
    assert [b.value_embed is not None for b in model.blocks][-1] is True


@pytest.mark.parametrize("path", ["x0", "unet", "value_embeds", "backout"])
def test_speedrun_each_path_off(path):
    L = 4
    model = make("speedrun", L=L, options={path: False})
    idx = token_input()
    with torch.no_grad():
        torch.testing.assert_close(model(idx), speedrun_logits(model, idx, L, **{path: False}), **TOL)


def test_speedrun_backout_layer_and_the_embedding():
    model = make("speedrun", L=4, options={"backout_layer": 0})          # x_k = x_0, the embedding
    idx = token_input()
    with torch.no_grad():
        torch.testing.assert_close(model(idx), speedrun_logits(model, idx, 4, k=0), **TOL)
        assert_differs(model(idx), speedrun_logits(model, idx, 4, k=2))
    one = make("speedrun", L=1)                                           # L // 2 = 0: the embedding
    with torch.no_grad():
        torch.testing.assert_close(one(idx), speedrun_logits(one, idx, 1), **TOL)


def test_speedrun_with_every_path_off_is_pre_ln_with_a_normalised_embedding():
    kw = dict(n_layer=4, n_embd=16, n_head=2, block_size=8, vocab_size=11, seed=9)
    off = {"x0": False, "unet": False, "value_embeds": False, "backout": False}
    plain = reslab.build_model("speedrun", options=off, **kw)
    pre = reslab.build_model("pre-ln", embed_norm=True, **kw)
    idx = token_input()
    with torch.no_grad():
        assert torch.equal(plain(idx), pre(idx))
    assert [n for n, _ in plain.named_parameters()] == [n for n, _ in pre.named_parameters()]


@pytest.mark.parametrize("fields,needle", [
    ({"options": {"backout_layer": 4}, "n_layer": 4}, "model.options.backout_layer: the head subtracts"),
    ({"options": {"backout_layer": -2}}, "model.options.backout_layer: must be -1"),
    ({"options": {"backout": False, "backout_layer": 1}}, "model.options.backout_layer: needs backout = true"),
    ({"options": {"unet_skips": True}}, "model.options.unet_skips: unknown key"),
    ({"value_residual": True}, "model.value_residual"),
])
def test_speedrun_refusals(fields, needle):
    kw = dict(n_layer=2, n_embd=16, n_head=2, block_size=8, vocab_size=11) | fields
    with pytest.raises(ConfigError, match=needle):
        reslab.build_model("speedrun", **kw)


# ---------------------------------------------------------------------------------------------
# MUDD: x_s = sum_j w[s, j] X_j, w = W2 GELU(W1 RMS(X_l)) + b, for s = q, k, v, r
# ---------------------------------------------------------------------------------------------
def mudd_logits(model, idx, L, one_mix: bool = False):
    r = Ref(L=L)
    X = [ref_embed(model, idx)]
    xq = xk = xv = xr = X[0]
    for l in range(1, L + 1):
        blk = model.blocks[l - 1]
        if l == 1:                                                     # one input, one norm
            a = ref_attention(blk.attn, N(r, blk.norm1, xr))
        else:
            a = ref_attention(blk.attn, N(r, blk.norm_q, xq), N(r, blk.norm_k, xk), N(r, blk.norm_v, xv))
        h = xr + a
        out = h + M(r, blk.mlp, N(r, blk.norm2, h))
        X.append(out)
        S = 1 if l == L else 4
        z = out / torch.sqrt((out ** 2).mean(-1, keepdim=True) + 1e-5)
        hid = z @ blk.dense_in.weight.T
        hid = 0.5 * hid * (1 + torch.erf(hid / 2 ** 0.5))
        w = (hid @ blk.dense_out.T).reshape(*out.shape[:-1], S, l + 1) + blk.dense_bias      # (B, T, S, l+1)
        if one_mix:
            w = w[..., -1:, :].expand_as(w)
        mix = [sum(w[..., s, j, None] * X[j] for j in range(l + 1)) for s in range(S)]
        if l == L:
            return N(r, model.stream.final_norm, mix[0]) @ model.lm_head.weight.T
        xq, xk, xv, xr = mix


def test_mudd_whole_model():
    L = 4
    model = check_whole_model("mudd", L, lambda m, i: mudd_logits(m, i, L),
                              [lambda m, i: mudd_logits(m, i, L, one_mix=True)])   # one mix for q, k, v, r
    assert [b.n_streams for b in model.blocks] == [4, 4, 4, 1]
    assert [tuple(b.dense_bias.shape) for b in model.blocks] == [(4, 2), (4, 3), (4, 4), (1, 5)]


def test_mudd_starts_as_pre_ln():
    """W2 = 0 and b = e_l: every mix is the newest output, so with pre-ln's weights copied in
    (norm1 into the q / k / v norms) the logits are pre-ln's up to rounding."""
    kw = dict(n_layer=4, n_embd=16, n_head=2, block_size=8, vocab_size=11, seed=0)
    mudd = reslab.build_model("mudd", **kw).double()
    pre = reslab.build_model("pre-ln", **kw).double()
    state = mudd.state_dict()
    for k, v in pre.state_dict().items():
        if ".norm1." in k and not k.startswith("blocks.0."):
            for s in "qkv":
                state[k.replace(".norm1.", f".norm_{s}.")] = v
        else:
            state[k] = v
    mudd.load_state_dict(state)
    idx = token_input()
    with torch.no_grad():
        torch.testing.assert_close(mudd(idx), pre(idx), rtol=1e-12, atol=1e-12)
        assert all(torch.count_nonzero(b.dense_out) == 0 for b in mudd.blocks)
        assert all(torch.count_nonzero(b.dense_in.weight) > 0 for b in mudd.blocks)   # W1 is drawn: W2 can learn


# ---------------------------------------------------------------------------------------------
# LIMe (x-transformers' DynamicLIMe): u = sum_j softmax_j(W RMSNorm(x) + c) s_j; x = x + F(N(u))
# ---------------------------------------------------------------------------------------------
def state_mix(mix, x, states, uniform: bool = False):
    z = x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + 1e-5) * mix.norm.weight
    logits = (z @ mix.to_weights.weight.T + mix.to_weights.bias).reshape(*x.shape[:-1], mix.views, len(states))
    w = torch.softmax(torch.zeros_like(logits) if uniform else logits, dim=-1)
    return [sum(w[..., v, j, None] * states[j] for j in range(len(states))) for v in range(mix.views)]


def lime_logits(model, idx, L, uniform: bool = False):
    r = Ref(L=L)
    x = ref_embed(model, idx)
    states = [x]
    for l in range(1, L + 1):
        blk = model.blocks[l - 1]
        if l == 1:                                                     # one state: x itself
            a = ref_attention(blk.attn, N(r, blk.norm1, x))
        else:
            uq, uk, uv = state_mix(blk.attn_mix, x, states, uniform)
            a = ref_attention(blk.attn, N(r, blk.norm1, uq), N(r, blk.norm1, uk), N(r, blk.norm1, uv))
        x = x + a
        states.append(x)
        (u,) = state_mix(blk.mlp_mix, x, states, uniform)
        x = x + M(r, blk.mlp, N(r, blk.norm2, u))
        states.append(x)
    return N(r, model.stream.final_norm, x) @ model.lm_head.weight.T


def test_lime_whole_model():
    L = 3
    model = check_whole_model("lime", L, lambda m, i: lime_logits(m, i, L),
                              [lambda m, i: lime_logits(m, i, L, uniform=True)])   # learned, not a mean
    assert model.blocks[0].attn_mix is None
    assert [b.mlp_mix.n_states for b in model.blocks] == [2, 4, 6]
    assert [b.attn_mix.n_states for b in model.blocks[1:]] == [3, 5]


# ---------------------------------------------------------------------------------------------
# Options: QK-norm and the orthogonal residual update
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("design", ["pre-ln", "parallel"])
def test_qk_norm(design):
    model = make(design, qk_norm=True)
    blk, x = model.blocks[1], stream_input()
    r = Ref()
    with torch.no_grad():
        out = blk(x)
        if design == "pre-ln":
            h = x + ref_attention(blk.attn, N(r, blk.norm1, x), qk_norm=True)
            ref = h + M(r, blk.mlp, N(r, blk.norm2, h))
            wrong = pre_ln(r, blk, x, 2)
        else:
            ref = x + ref_attention(blk.attn, N(r, blk.norm1, x), qk_norm=True) + M(r, blk.mlp, N(r, blk.norm2, x))
            wrong = parallel(r, blk, x, 2)
        torch.testing.assert_close(out, ref, **TOL)
        assert_differs(out, wrong)
    assert tuple(blk.attn.q_norm.weight.shape) == (8,) and blk.attn.k_norm is not None


@pytest.mark.parametrize("mode", ["full", "gated"])
def test_xsa(mode):
    model = make("pre-ln", xsa=mode)
    blk, x = model.blocks[1], stream_input()
    r = Ref()
    g = torch.ones(2, dtype=torch.float64) if mode == "full" else torch.tanh(blk.attn.xsa_gate.reshape(2))
    with torch.no_grad():
        out = blk(x)
        h = x + ref_attention(blk.attn, N(r, blk.norm1, x), xsa=g)
        ref = h + M(r, blk.mlp, N(r, blk.norm2, h))
        torch.testing.assert_close(out, ref, **TOL)
        assert_differs(out, pre_ln(r, blk, x, 2))
        # wrong formulas: the gate itself instead of tanh of it, or the projection on the input x
        if mode == "gated":
            h = x + ref_attention(blk.attn, N(r, blk.norm1, x), xsa=blk.attn.xsa_gate.reshape(2))
            assert_differs(out, h + M(r, blk.mlp, N(r, blk.norm2, h)))
    if mode == "full":  # with g = 1 each head's output is orthogonal to the token's own value
        attn, xn = blk.attn, N(r, blk.norm1, x)
        with torch.no_grad():
            q, k, v = attn.qkv(xn)
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            z = y - attn.exclusive_part(y, v)
        # (at position 1 the token attends only to itself: y = v, so z = 0)
        assert z[:, :, 0].abs().max() < 1e-12
        assert ((z * v).sum(-1).abs() / (z.norm(dim=-1) * v.norm(dim=-1)))[:, :, 1:].max() < 1e-10
    else:  # the gate starts at 0: an untouched model is the plain attention's, bit for bit
        fresh, plain = reslab.build_model("pre-ln", **SMALL, xsa="gated"), reslab.build_model("pre-ln", **SMALL)
        idx = token_input()
        with torch.no_grad():
            assert torch.equal(fresh(idx), plain(idx))


SMALL = dict(n_layer=2, n_embd=C, n_head=H, block_size=BLOCK, vocab_size=VOCAB, dropout=0.0, seed=0)


def orthogonal(b, x):
    """b minus its projection on x, token by token: b - (<b, x> / (<x, x> + 1e-6)) x."""
    return b - (b * x).sum(-1, keepdim=True) / ((x * x).sum(-1, keepdim=True) + 1e-6) * x


@pytest.mark.parametrize("design", ["pre-ln", "post-ln"])
def test_orthogonal_residual_update(design):
    model = make(design, residual_update="orthogonal")
    blk, x = model.blocks[1], stream_input()
    r = Ref()
    with torch.no_grad():
        out = blk(x)
        if design == "pre-ln":
            h = x + orthogonal(A(r, blk.attn, N(r, blk.norm1, x), 2), x)
            ref = h + orthogonal(M(r, blk.mlp, N(r, blk.norm2, h)), h)
            wrong = pre_ln(r, blk, x, 2)
        else:
            h = N(r, blk.norm1, x + orthogonal(A(r, blk.attn, x, 2), x))
            ref = N(r, blk.norm2, h + orthogonal(M(r, blk.mlp, h), h))
            from tests.test_block_formulas import post_ln
            wrong = post_ln(r, blk, x, 2)
        torch.testing.assert_close(out, ref, **TOL)
        assert_differs(out, wrong)
        # the update it adds is orthogonal to the stream it adds to
        a = blk.attn_residual(x, A(r, blk.attn, N(r, blk.norm1, x), 2)) - x if design == "pre-ln" else None
        if a is not None:
            cos = (a * x).sum(-1).abs() / (a.norm(dim=-1) * x.norm(dim=-1))
            assert cos.max() < 1e-6      # up to the eps in the projection's denominator


def test_orthogonal_residual_projects_on_the_scaled_skip():
    model = make("pre-ln", residual_update="orthogonal", skip_scale="channel")
    res, x = model.blocks[0].attn_residual, stream_input()
    b = torch.randn(x.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        sx = res.skip_weight * x
        torch.testing.assert_close(res(x, b), sx + orthogonal(b, sx), **TOL)
        assert_differs(res(x, b), sx + orthogonal(b, x))


@pytest.mark.parametrize("design,fields,needle", [
    ("ngpt", {"qk_norm": True}, "model.qk_norm: ngpt has its own attention"),
    ("deepnorm", {"residual_update": "orthogonal"}, "model.residual_update: the orthogonal update acts"),
    ("pre-ln", {"residual_update": "orthogonal", "attn_res": False, "ffn_res": False},
     "model.residual_update: there is no skip to project on"),
    ("pre-ln", {"residual_update": "orthogonal", "layer_designs": {"1": "deepnorm"}}, "model.layer_designs: layer 1 is deepnorm"),
    ("pre-ln", {"residual_update": "sideways"}, "model.residual_update"),
    ("ngpt", {"xsa": "full"}, "model.xsa: ngpt has its own attention"),
    ("sas", {"xsa": "gated"}, "model.xsa: removes each token's own value"),
    ("pre-ln", {"xsa": "on"}, "model.xsa"),
])
def test_option_refusals(design, fields, needle):
    kw = dict(n_layer=2, n_embd=16, n_head=2, block_size=8, vocab_size=11) | fields
    with pytest.raises(ConfigError, match=needle):
        reslab.build_model(design, **kw)


# ---------------------------------------------------------------------------------------------
# LAuReL: each residual point x = alpha F + beta (x + B A x) + B' A' sum_(j<i) gamma_j x_j
# ---------------------------------------------------------------------------------------------
def laurel_logits(model, idx, L, rw=True, rank=True, pa=False, softmax=True, pa_self=False, doubled=True):
    """Written out point by point; softmax=False (raw w as alpha, beta), doubled=False (a bare softmax,
    alpha + beta = 1) and pa_self (PA over x_1 .. x_i, the point's own input in place of the
    embedding) are the wrong formulas."""
    r = Ref(L=L)
    xs = [ref_embed(model, idx)]                                     # x_0 .. x_i: every point's input
    x = xs[0]

    def point(p, x, F):
        if rw and p.rw_logits is None:                              # a wrong formula: RW's init halves
            alpha, beta = 0.5, 0.5
        elif rw:
            w = p.rw_logits
            alpha, beta = ((2.0 if doubled else 1.0) * torch.exp(w) / torch.exp(w).sum()) if softmax else w
        else:
            alpha, beta = 1.0, 1.0
        skip = x + (x @ p.lr_down.weight.T) @ p.lr_up.T if rank else x
        out = alpha * F + beta * skip
        previous = xs[1:] if pa_self else xs[:-1]
        if pa and len(xs) > 1:
            mixed = sum(g * xj for g, xj in zip(p.pa_gamma, previous))
            out = out + (mixed @ p.pa_down.weight.T) @ p.pa_up.T
        return out

    for l in range(1, L + 1):
        blk = model.blocks[l - 1]
        x = point(blk.attn_point, x, A(r, blk.attn, N(r, blk.norm1, x), l))
        xs.append(x)
        x = point(blk.mlp_point, x, M(r, blk.mlp, N(r, blk.norm2, x)))
        xs.append(x)
    return N(r, model.stream.final_norm, x) @ model.lm_head.weight.T


@pytest.mark.parametrize("rw,rank,pa", [(True, 4, False), (False, 4, False), (True, 0, False), (True, 4, True),
                                        (False, 4, True)])
def test_laurel_whole_model(rw, rank, pa):
    L = 3
    wrongs = [lambda m, i: laurel_logits(m, i, L, rw=not rw, rank=rank, pa=pa)]
    if rw:
        wrongs += [lambda m, i: laurel_logits(m, i, L, rw, rank, pa, softmax=False),
                   lambda m, i: laurel_logits(m, i, L, rw, rank, pa, doubled=False)]
    if rank:
        wrongs.append(lambda m, i: laurel_logits(m, i, L, rw, 0, pa))
    if pa:
        wrongs += [lambda m, i: laurel_logits(m, i, L, rw, rank, False),
                   lambda m, i: laurel_logits(m, i, L, rw, rank, pa, pa_self=True)]
    model = check_whole_model("laurel", L, lambda m, i: laurel_logits(m, i, L, rw, rank, pa), wrongs,
                              options={"rw": rw, "rank": rank, "pa": pa})
    size = lambda p: 0 if p.pa_gamma is None else len(p.pa_gamma)  # noqa: E731
    gammas = [size(p) for b in model.blocks for p in (b.attn_point, b.mlp_point)]
    assert gammas == ([0, 1, 2, 3, 4, 5] if pa else [0] * 6)       # point i reads x_0 .. x_(i-1)


@pytest.mark.parametrize("rw", [False, True])
def test_laurel_starts_as_pre_ln_exactly(rw):
    """B = B' = 0 and 2 softmax(0) = (1, 1) at init: with or without RW the same seed gives pre-ln's
    logits bit for bit (a bare softmax would start at (1/2, 1/2) and fail this)."""
    kw = dict(n_layer=3, n_embd=16, n_head=2, block_size=8, vocab_size=11, seed=3, dropout=0.0)
    laurel = reslab.build_model("laurel", options={"rw": rw, "pa": True}, **kw)
    idx = token_input()
    with torch.no_grad():
        pre = reslab.build_model("pre-ln", **kw)
        # the same draws in the same order for the shared weights: copy them to compare exactly
        shared = {k: v for k, v in laurel.state_dict().items() if k in pre.state_dict()}
        pre.load_state_dict(shared)
        assert torch.equal(laurel(idx), pre(idx))
        assert [w.item() if rw else w for w in laurel.blocks[0].attn_point.weights()] == [1.0, 1.0]


@pytest.mark.parametrize("fields,needle", [
    ({"options": {"rank": 0, "pa": True}}, "model.options"),
    ({"options": {"rank": 99}}, "model.options.rank: a low-rank map needs rank <= n_embd=16"),
    ({"prores": "linear"}, "model.prores"),
    ({"ffn_res": False}, "model.ffn_res"),
    ({"stochastic_depth": 0.2}, "model.stochastic_depth"),
])
def test_laurel_refusals(fields, needle):
    kw = dict(n_layer=2, n_embd=16, n_head=2, block_size=8, vocab_size=11) | fields
    with pytest.raises(ConfigError, match=needle):
        reslab.build_model("laurel", **kw)


# ---------------------------------------------------------------------------------------------
# frac-connections: y = F(N(concat_f sum_g Gamma[g,f] H_g)); H'_f = sum_g A[g,f] H_g + beta[f] y_f
# ---------------------------------------------------------------------------------------------
def frac_logits(model, idx, L, m, dynamic=False, transpose=False, gain=1.0):
    """Fraction by fraction with explicit sums; transpose (Gamma[f, g], A[f, g]) is the wrong formula."""
    r = Ref(L=L)
    x = ref_embed(model, idx)
    d = x.shape[-1] // m

    def norm_d(mod, h):                                           # LayerNorm over a fraction's d channels
        mu = h.mean(-1, keepdim=True)
        return (h - mu) / torch.sqrt(((h - mu) ** 2).mean(-1, keepdim=True) + 1e-5) * mod.weight + mod.bias

    def sublayer(fc, norm, f, x):
        H = [x[..., g * d:(g + 1) * d] for g in range(m)]
        G, Amix, beta = fc.gamma, fc.mix, fc.beta
        if transpose:
            G, Amix = G.T, Amix.T
        if dynamic:   # row g of Gamma and A from fraction g; beta[f] from fraction f
            G = [[G[g, f] + fc.s_alpha * torch.tanh(norm_d(fc.norm, H[g]) @ fc.w_gamma[:, f]) for f in range(m)]
                 for g in range(m)]
            Amix = [[Amix[g, f] + fc.s_alpha * torch.tanh(norm_d(fc.norm, H[g]) @ fc.w_mix[:, f]) for f in range(m)]
                    for g in range(m)]
            beta = [beta[f] + fc.s_beta * torch.tanh(norm_d(fc.norm, H[f]) @ fc.w_beta) for f in range(m)]
            w = lambda t: t.unsqueeze(-1)  # noqa: E731
        else:
            w = lambda t: t  # noqa: E731
        u = [sum(w(G[g][f]) * H[g] for g in range(m)) for f in range(m)]
        y = f(N(r, norm, torch.cat(u, -1)))
        return torch.cat([sum(w(Amix[g][f]) * H[g] for g in range(m)) + gain * w(beta[f]) * y[..., f * d:(f + 1) * d]
                          for f in range(m)], -1)

    for l in range(1, L + 1):
        blk = model.blocks[l - 1]
        x = sublayer(blk.attn_fc, blk.norm1, lambda h: A(r, blk.attn, h, l), x)
        x = sublayer(blk.mlp_fc, blk.norm2, lambda h: M(r, blk.mlp, h), x)
    return N(r, model.stream.final_norm, x) @ model.lm_head.weight.T


@pytest.mark.parametrize("m,dynamic", [(2, False), (4, False), (4, True), (1, False)])
def test_frac_connections_whole_model(m, dynamic):
    L = 2
    wrongs = [lambda mod, i: frac_logits(mod, i, L, m, dynamic, transpose=True)] if m > 1 else []
    if dynamic:
        wrongs.append(lambda mod, i: frac_logits(mod, i, L, m, False))
    check_whole_model("frac-connections", L, lambda mod, i: frac_logits(mod, i, L, m, dynamic), wrongs,
                      options={"fracs": m, "dynamic": dynamic})


def test_frac_connections_runtime_gain_multiplies_the_write():
    L = 2
    check_whole_model("frac-connections", L, lambda mod, i: frac_logits(mod, i, L, 2, gain=0.5),
                      [lambda mod, i: frac_logits(mod, i, L, 2)], options={"fracs": 2}, branch_gain=0.5)


def test_frac_connections_start_as_pre_ln_exactly():
    kw = dict(n_layer=3, n_embd=16, n_head=2, block_size=8, vocab_size=11, seed=3, dropout=0.0)
    for opts in ({"fracs": 4}, {"fracs": 2, "dynamic": True}):
        frac, pre = reslab.build_model("frac-connections", options=opts, **kw), reslab.build_model("pre-ln", **kw)
        pre.load_state_dict({k: v for k, v in frac.state_dict().items() if k in pre.state_dict()})
        idx = token_input()
        with torch.no_grad():
            torch.testing.assert_close(frac(idx), pre(idx), rtol=0, atol=1e-6)  # dynamic: tanh(0) = 0 exactly
            if "dynamic" not in opts:
                assert torch.equal(frac(idx), pre(idx))


@pytest.mark.parametrize("fields,needle", [
    ({"options": {"fracs": 3}}, "model.options.fracs: 3 fractions must divide n_embd=16"),
    ({"options": {"fracs": 0}}, "model.options"),
    ({"ffn_res": False}, "model.ffn_res"),
    ({"residual_update": "orthogonal"}, "model.residual_update"),
])
def test_frac_connections_refusals(fields, needle):
    kw = dict(n_layer=2, n_embd=16, n_head=2, block_size=8, vocab_size=11) | fields
    with pytest.raises(ConfigError, match=needle):
        reslab.build_model("frac-connections", **kw)


# ---------------------------------------------------------------------------------------------
# NormFormer: x = x + N_a(A_gamma(N1(x))); x = x + W2 N_f(act(W1 N2(x)))
# ---------------------------------------------------------------------------------------------
def normformer(r, blk, x, head_scale=True, attn_out_norm=True, ffn_mid_norm=True):
    gains = blk.attn.head_gain if head_scale else torch.ones(2, dtype=x.dtype)
    a = ref_attention(blk.attn, N(r, blk.norm1, x), head_gains=gains)
    h = x + (N(r, blk.attn_out_norm, a) if attn_out_norm else a)
    u = N(r, blk.norm2, h) @ blk.mlp.c_fc.weight.T + blk.mlp.c_fc.bias
    u = 0.5 * u * (1.0 + torch.erf(u / 2 ** 0.5))
    if ffn_mid_norm:                                                           # over the hidden units
        mu = u.mean(-1, keepdim=True)
        u = (u - mu) / torch.sqrt(((u - mu) ** 2).mean(-1, keepdim=True) + 1e-5) * blk.mlp.mid_norm.weight \
            + blk.mlp.mid_norm.bias
    return h + u @ blk.mlp.c_proj.weight.T + blk.mlp.c_proj.bias


@pytest.mark.parametrize("off", [None, "head_scale", "attn_out_norm", "ffn_mid_norm"])
def test_normformer_block(off):
    opts = {} if off is None else {off: False}
    model = make("normformer", options=opts)
    blk, x = model.blocks[1], stream_input()
    r = Ref()
    kw = {} if off is None else {off: False}
    with torch.no_grad():
        out = blk(x)
        torch.testing.assert_close(out, normformer(r, blk, x, **kw), **TOL)
        assert_differs(out, pre_ln(r, blk, x, 2))                          # the extra operations act
        if off is None:
            for op in ("head_scale", "attn_out_norm", "ffn_mid_norm"):     # each of the three matters
                assert_differs(out, normformer(r, blk, x, **{op: False}))


def test_normformer_with_every_operation_off_is_pre_ln():
    kw = dict(n_layer=3, n_embd=16, n_head=2, block_size=8, vocab_size=11, seed=2)
    off = {"head_scale": False, "attn_out_norm": False, "ffn_mid_norm": False}
    plain, pre = reslab.build_model("normformer", options=off, **kw), reslab.build_model("pre-ln", **kw)
    idx = token_input()
    with torch.no_grad():
        assert torch.equal(plain(idx), pre(idx))


def test_probe_sees_denseformer_as_pre_ln_and_attn_res_diluted():
    """The init-time probe on the depth stream: DenseFormer's averages start as the identity (so
    every measure equals pre-ln's), and AttnRes's head reads the mean of 2L + 1 sources, so the
    last W2 gradient shrinks with depth where pre-ln's does not."""
    from reslab.probe.measure import probe_model, random_batch

    idx, tgt = random_batch(65, 2, 16, seed=0)
    def probe(design, L):
        return probe_model(reslab.build_model(design, n_layer=L, n_embd=32, n_head=2, block_size=16,
                                              vocab_size=65, dropout=0.0, seed=1), idx, tgt)
    for L in (2, 6):
        pre, dense = probe("pre-ln", L), probe("denseformer", L)
        assert pre["act_norm"] == dense["act_norm"] and pre["last_w2_grad_norm"] == dense["last_w2_grad_norm"]
        # a block's gradient norm also counts DenseFormer's own averaging weights
        assert dense["grad_norm"] == pytest.approx(pre["grad_norm"], rel=1e-3) and dense["grad_norm"] != pre["grad_norm"]
    ratio = lambda d: probe(d, 12)["last_w2_grad_norm"] / probe(d, 3)["last_w2_grad_norm"]
    assert ratio("attn-res") < 0.5 < ratio("pre-ln")


def test_variants_text_lists_the_model_wide_options_with_their_formulas(capsys):
    from reslab.cli import main

    assert main(["variants"]) == 0
    out = capsys.readouterr().out
    options = out.split("options that are [model] fields")[1]
    for setting in ("qk_norm = true", 'residual_update = "orthogonal"', 'xsa = "full" | "gated"', "stochastic_depth = p"):
        assert setting in options
    xsa_designs = options.split('xsa = "full"')[1].split("designs: ")[1].split("\n")[0].split(", ")
    assert "pre-ln" in xsa_designs and "ngpt" not in xsa_designs


def test_variants_json_lists_these_designs_with_their_options(capsys):
    """`reslab variants --json`: every design of this file with its own options and defaults, and which
    designs take qk_norm and the orthogonal residual update."""
    import json

    from reslab.cli import main

    assert main(["variants", "--json"]) == 0
    listed = {d["name"]: d for d in json.loads(capsys.readouterr().out)}
    assert listed["parallel"]["options"] == {"shared_norm": False}
    assert listed["denseformer"]["options"] == {"dilation": 1, "period": 1}
    assert listed["attn-res"]["options"] == {"block_layers": 0}
    assert listed["speedrun"]["options"] == {"x0": True, "unet": True, "value_embeds": True, "backout": True,
                                             "backout_layer": -1}
    assert listed["normformer"]["options"] == {"head_scale": True, "attn_out_norm": True, "ffn_mid_norm": True}
    assert listed["laurel"]["options"] == {"rw": True, "rank": 16, "pa": False}
    assert listed["frac-connections"]["options"] == {"fracs": 2, "dynamic": False}
    assert {"mudd", "lime"} <= set(listed) and listed["mudd"]["stream"] == listed["lime"]["stream"] == "depth"
    assert listed["ngpt"]["qk_norm"] is False and listed["pre-ln"]["qk_norm"] is True
    assert listed["pre-ln"]["residual_update"] == ["add", "orthogonal"] and listed["attn-res"]["residual_update"] == ["add"]
    assert listed["pre-ln"]["xsa"] is True and listed["ngpt"]["xsa"] is False
    assert listed["pre-ln"]["stochastic_depth"] is True and listed["hyper-connections"]["stochastic_depth"] is False
