"""Zoo IV, the depth family: mean-variance split residuals (mv-split, mv-split-pre), DeepCrossAttention
(dca) and Mixture-of-Depths Attention (moda), each against its formula recomputed here from raw weight
tensors.

Same method as test_block_formulas.py: float64 models whose every parameter is randomised, a block's
(or the whole model's) output against the formula written out with plain torch ops (the block's and
its submodules' forwards are never used on the reference side), and for each a plausible wrong
formula that gives something else, so the comparison can fail.
"""

from __future__ import annotations

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
    stream_input,
    token_input,
)

FORMULA_TESTED = {"mv-split", "mv-split-pre"}

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
