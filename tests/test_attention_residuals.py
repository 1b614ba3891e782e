"""ResFormer's value residual and RealFormer's residual attention, options of the attention of
pre-ln, post-ln, sandwich-ln, peri-ln and mix-ln.

    value residual      V_l' = lambda1_l V_l + lambda2_l V_1   for l > 1  (Zhou et al. 2024)
    residual attention  S_l = Q_l K_l^T / sqrt(d) + S_{l-1},  P_l = softmax(mask(S_l))  (He et al. 2020)

Whole-model references are written here from raw weight tensors (c_attn.weight, c_proj.weight,
norm weights, value_lambda1/2) with plain torch ops, carrying V_1 and S_{l-1} from layer to layer
by hand; the model's own forward is never used on the reference side. float64, every parameter
randomised (test_block_formulas.randomize_), so no lambda sits at its 0.5 init.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

import reslab
from reslab.config import ModelConfig
from reslab.errors import ConfigError
from reslab.model.attention import AttentionCarry
from reslab.model.gpt import GPT
from reslab.train.loop import train

from .conftest import CPU_ONLY_FALLBACK, CountingBackend, slow_vmap_ops
from .test_block_formulas import (
    TOL,
    H,
    M,
    N,
    Ref,
    assert_differs,
    lin,
    make,
    rope,
    stream_input,
    token_input,
)
from .train_helpers import tiny_config, write_corpus

# These are options of existing designs, not designs: no entry for the design-formula registry check.
FORMULA_TESTED: set[str] = set()

L3 = 3   # three layers: layer 3 reads S_2 = S_1 + ... (accumulation) and V_1 skips two layers


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread


# ---------------------------------------------------------------------------------------------
# reference: attention with the carried V_1 and S_{l-1}, from raw weights only
# ---------------------------------------------------------------------------------------------
class Carried:
    """The reference's own layer-to-layer state (not the model's AttentionCarry)."""

    def __init__(self):
        self.V1 = None        # layer 1's values, (B, H, T, d)
        self.S = None         # the last layer's unmasked pre-softmax scores, (B, H, T, T)
        self.P = {}           # layer -> the softmax matrix that layer applied
        self.inputs = {}      # layer -> the attention's input


def A_carry(attn, x, layer: int, st: Carried, vr: bool, ra: bool, use_rope: bool = False):
    """Per head: V' = l1 V + l2 V_1 (vr, layer > 1); S = QK^T/sqrt(d) (+ S_{l-1} if ra);
    P = softmax(S + causal mask); y = P V'; then W_P."""
    st.inputs[layer] = x
    Bx, Tx, Cx = x.shape
    d = Cx // H
    W, b = attn.c_attn.weight, attn.c_attn.bias
    q, k, v = (lin(x, W[i * Cx:(i + 1) * Cx], b[i * Cx:(i + 1) * Cx]) for i in range(3))
    heads = lambda t: t.reshape(Bx, Tx, H, d).transpose(1, 2)
    q, k, v = heads(q), heads(k), heads(v)
    if use_rope:
        q, k = rope(q), rope(k)
    if vr:
        if layer == 1:
            st.V1 = v
        else:
            v = attn.value_lambda1 * v + attn.value_lambda2 * st.V1
    S = q @ k.transpose(-1, -2) / math.sqrt(d)
    if ra:
        if st.S is not None:
            S = S + st.S
        st.S = S
    future = torch.ones(Tx, Tx, dtype=torch.bool).triu(1)
    P = torch.softmax(S.masked_fill(future, float("-inf")), dim=-1)
    st.P[layer] = P
    y = (P @ v).transpose(1, 2).reshape(Bx, Tx, Cx)
    return lin(y, attn.c_proj.weight, attn.c_proj.bias)


R = Ref()  # layernorm, gelu, full skips


def pre_ln(blk, x, l, st, vr, ra, use_rope=False):
    # h = x + A(N1 x);  out = h + M(N2 h)
    h = x + A_carry(blk.attn, N(R, blk.norm1, x), l, st, vr, ra, use_rope)
    return h + M(R, blk.mlp, N(R, blk.norm2, h))


def post_ln(blk, x, l, st, vr, ra, use_rope=False):
    # h = N1(x + A(x));  out = N2(h + M(h))
    h = N(R, blk.norm1, x + A_carry(blk.attn, x, l, st, vr, ra, use_rope))
    return N(R, blk.norm2, h + M(R, blk.mlp, h))


def sandwich(blk, x, l, st, vr, ra, use_rope=False):
    # h = x + N_out(A(N_in x));  out = h + N_out'(M(N_in' h))
    h = x + N(R, blk.attn_norm_out, A_carry(blk.attn, N(R, blk.attn_norm_in, x), l, st, vr, ra, use_rope))
    return h + N(R, blk.mlp_norm_out, M(R, blk.mlp, N(R, blk.mlp_norm_in, h)))


def mix_ln(blk, x, l, st, vr, ra, use_rope=False):
    # L = 3: ceil(3/4) = 1 post-ln layer, then pre-ln
    return (post_ln if l <= 1 else pre_ln)(blk, x, l, st, vr, ra, use_rope)


REF = {"pre-ln": pre_ln, "post-ln": post_ln, "sandwich-ln": sandwich, "peri-ln": sandwich, "mix-ln": mix_ln}
FINAL_NORM = {"pre-ln": True, "post-ln": False, "sandwich-ln": True, "peri-ln": True, "mix-ln": True}


def reference_logits(model, design, idx, vr, ra, use_rope=False, st=None):
    """embedding -> every layer with the carried V_1 / S -> final norm -> head, from raw weights."""
    st = st if st is not None else Carried()
    h = model.wte.weight[idx]
    if model.wpe is not None:                       # learned positions (none with rope)
        h = h + model.wpe.weight[: idx.shape[1]]
    if design == "peri-ln":
        h = N(R, model.stream.embed_norm, h)
    for layer, blk in enumerate(model.blocks, start=1):
        h = REF[design](blk, h, layer, st, vr, ra, use_rope)
    if FINAL_NORM[design]:
        h = N(R, model.stream.final_norm, h)
    else:
        assert not list(model.stream.final_norm.parameters())
    return h @ model.lm_head.weight.T


OPTIONS = {"vr": dict(value_residual=True), "ra": dict(residual_attention=True),
           "both": dict(value_residual=True, residual_attention=True)}


# ---------------------------------------------------------------------------------------------
# whole-model formulas
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("design,option", [
    ("pre-ln", "vr"), ("pre-ln", "ra"), ("post-ln", "ra"), ("pre-ln", "both"), ("sandwich-ln", "vr"),
    ("post-ln", "vr"), ("sandwich-ln", "ra"), ("peri-ln", "both"), ("mix-ln", "both")])
def test_whole_model_formula(design, option):
    vr, ra = option in ("vr", "both"), option in ("ra", "both")
    model = make(design, L=L3, **OPTIONS[option])
    lambdas = [p for n, p in model.named_parameters() if "value_lambda" in n]
    assert len(lambdas) == (2 * (L3 - 1) if vr else 0)          # layers 2..L, none in layer 1
    assert all(abs(float(p.detach()) - 0.5) > 1e-3 for p in lambdas)      # randomised away from the init
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        ref = reference_logits(model, design, idx, vr, ra)
        torch.testing.assert_close(logits, ref, **TOL)
        # the option matters: the plain formula (same weights) gives something else
        assert_differs(logits, reference_logits(model, design, idx, False, False))
        if option == "both":  # each half matters on its own
            assert_differs(logits, reference_logits(model, design, idx, True, False))
            assert_differs(logits, reference_logits(model, design, idx, False, True))


def test_rope_applies_to_q_and_k_before_the_carried_scores():
    model = make("pre-ln", L=L3, pos="rope", value_residual=True, residual_attention=True)
    idx = token_input()
    with torch.no_grad():
        logits = model(idx)
        ref = reference_logits(model, "pre-ln", idx, True, True, use_rope=True)
        # rotary angles are computed in float32 by the model: float32-tight, as test_pre_ln_rope
        torch.testing.assert_close(logits, ref, rtol=1e-5, atol=1e-5)
        assert_differs(logits, reference_logits(model, "pre-ln", idx, True, True, use_rope=False))


def test_attention_matrix_with_previous_scores_is_the_matrix_the_layer_applies():
    """attention_matrix(x, prev_scores=S_{l-1}) is P_l; called alone (S_0 = 0) it is exact for layer 1 only."""
    model = make("pre-ln", L=L3, residual_attention=True)
    idx = token_input()
    st, inputs = Carried(), {}
    with torch.no_grad():
        h = model.wte.weight[idx] + model.wpe.weight[: idx.shape[1]]
        scores_before = {}
        for layer, blk in enumerate(model.blocks, start=1):
            inputs[layer] = N(R, blk.norm1, h)
            scores_before[layer] = st.S
            h = pre_ln(blk, h, layer, st, False, True)
        for layer, blk in enumerate(model.blocks, start=1):
            P = blk.attn.attention_matrix(inputs[layer], prev_scores=scores_before[layer])
            torch.testing.assert_close(P, st.P[layer], **TOL)
        torch.testing.assert_close(model.blocks[0].attn.attention_matrix(inputs[1]), st.P[1], **TOL)
        assert_differs(model.blocks[2].attn.attention_matrix(inputs[3]), st.P[3])


# ---------------------------------------------------------------------------------------------
# layer 1, the lambda = (1, 0) reduction, gradients
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("design", ["pre-ln", "post-ln", "sandwich-ln"])
@pytest.mark.parametrize("option", list(OPTIONS))
def test_layer_one_is_unchanged_by_either_option(design, option):
    """Layer 1 has no previous layer: S_0 = 0 and V_1' = V_1, so its output is the plain block's."""
    plain = make(design, L=L3)
    model = make(design, L=L3, **OPTIONS[option])
    missing, unexpected = model.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and all("value_lambda" in k for k in missing)
    x = stream_input()
    with torch.no_grad():
        carry = AttentionCarry()
        out1 = model.blocks[0](x, carry=carry)
        torch.testing.assert_close(out1, plain.blocks[0](x), **TOL)
        # ... and the carry now holds what layer 2 needs, which does change layer 2
        assert (carry.first_values is not None) == ("value_residual" in OPTIONS[option])
        assert (carry.scores is not None) == ("residual_attention" in OPTIONS[option])
        assert_differs(model.blocks[1](out1, carry=carry), plain.blocks[1](out1))


@pytest.mark.parametrize("design", ["pre-ln", "post-ln"])
def test_value_residual_with_lambda_one_zero_is_the_plain_model_exactly(design):
    plain = make(design, L=L3)
    model = make(design, L=L3, value_residual=True)
    model.load_state_dict(plain.state_dict(), strict=False)
    with torch.no_grad():
        for blk in model.blocks[1:]:
            blk.attn.value_lambda1.fill_(1.0)
            blk.attn.value_lambda2.fill_(0.0)
        idx = token_input()
        assert torch.equal(model(idx), plain(idx))
        model.blocks[2].attn.value_lambda2.fill_(0.25)   # and lambda2 is really read
        assert_differs(model(idx), plain(idx))


def test_gradients_reach_layer_one_values_through_the_value_residual():
    """With layer 1's W_P = 0, its own attention output ignores W_V^1: any gradient on W_V^1 comes
    through the later layers' lambda2 * V_1, and vanishes exactly when every lambda2 = 0."""
    model = make("pre-ln", L=L3, value_residual=True)
    attn1 = model.blocks[0].attn
    with torch.no_grad():
        attn1.c_proj.weight.zero_()
    idx, tgt = token_input(3), token_input(4)

    def wv1_grad():
        model.zero_grad(set_to_none=True)
        model(idx, tgt)[1].backward()
        return attn1.c_attn.weight.grad[2 * attn1.n_embd:].clone()    # the W_V rows of [W_Q; W_K; W_V]

    g = wv1_grad()
    assert g.abs().max() > 1e-6
    assert all(blk.attn.value_lambda2.grad.abs() > 0 for blk in model.blocks[1:])
    assert all(blk.attn.value_lambda1.grad.abs() > 0 for blk in model.blocks[1:])
    with torch.no_grad():
        for blk in model.blocks[1:]:
            blk.attn.value_lambda2.zero_()
    assert torch.equal(wv1_grad(), torch.zeros_like(g))


def test_value_residual_init_sets_both_lambdas():
    for init in (0.5, 0.3):
        model = reslab.build_model("pre-ln", n_layer=3, n_embd=16, n_head=2, block_size=8, vocab_size=11,
                                   value_residual=True, value_residual_init=init)
        assert not hasattr(model.blocks[0].attn, "value_lambda1")
        for blk in model.blocks[1:]:
            assert float(blk.attn.value_lambda1.detach()) == float(blk.attn.value_lambda2.detach()) == pytest.approx(init)
            assert blk.attn.value_lambda1.requires_grad and blk.attn.value_lambda1.shape == ()


# ---------------------------------------------------------------------------------------------
# refusals
# ---------------------------------------------------------------------------------------------
def _refusal(**fields) -> list[str]:
    with pytest.raises(ConfigError) as e:
        reslab.resolve(ModelConfig(n_layer=4, n_embd=16, n_head=2, **fields))
    return e.value.errors


@pytest.mark.parametrize("design", ["deepnorm", "resi-dual", "sas"])
@pytest.mark.parametrize("flag", ["value_residual", "residual_attention"])
def test_refused_on_designs_without_the_carry(design, flag):
    errors = _refusal(design=design, **{flag: True})
    assert any(e.startswith(f"model.{flag}: ") and design in e for e in errors), errors
    assert all("\n" not in e for e in errors)


def test_value_residual_refused_with_vp_identity():
    errors = _refusal(design="pre-ln", value_residual=True, vp_identity=True)
    assert errors == [e for e in errors if e.startswith("model.value_residual: ")] and len(errors) == 1
    assert "vp_identity" in errors[0]


@pytest.mark.parametrize("flag", ["value_residual", "residual_attention"])
def test_refused_with_shaped_attention(flag):
    errors = _refusal(design="pre-ln", shaped_attention=True, **{flag: True})
    assert len(errors) == 1 and errors[0].startswith(f"model.{flag}: ") and "shaped_attention" in errors[0]


@pytest.mark.parametrize("flag", ["value_residual", "residual_attention"])
def test_refused_with_a_per_layer_design_without_the_carry(flag):
    errors = _refusal(design="pre-ln", layer_designs={"2-3": "lns"}, **{flag: True})
    assert len(errors) == 1 and errors[0].startswith("model.layer_designs: layer 2 is lns")
    assert flag in errors[0]
    # designs that pass the carry may be chosen per layer, and then the formula holds across them
    reslab.resolve(ModelConfig(n_layer=4, n_embd=16, n_head=2, layer_designs={"2-3": "post-ln"}, **{flag: True}))


def test_value_residual_init_without_value_residual_is_refused():
    errors = _refusal(design="pre-ln", value_residual_init=0.3)
    assert len(errors) == 1 and errors[0].startswith("model.value_residual_init: ")


def test_per_layer_mix_of_pre_and_post_ln_with_both_options():
    model = make("pre-ln", L=L3, layer_designs={"2": "post-ln"}, value_residual=True, residual_attention=True)
    idx = token_input()
    st = Carried()
    with torch.no_grad():
        h = model.wte.weight[idx] + model.wpe.weight[: idx.shape[1]]
        for layer, blk in enumerate(model.blocks, start=1):
            h = (post_ln if layer == 2 else pre_ln)(blk, h, layer, st, True, True)
        ref = N(R, model.stream.final_norm, h) @ model.lm_head.weight.T
        torch.testing.assert_close(model(idx), ref, **TOL)


# ---------------------------------------------------------------------------------------------
# meta device, vmap, compile
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("design,option", [("pre-ln", "both"), ("post-ln", "vr"), ("sandwich-ln", "ra")])
def test_meta_device_build_equals_direct_build(design, option):
    cfg = ModelConfig(design=design, n_layer=3, n_embd=16, n_head=2, block_size=8, vocab_size=11,
                      dropout=0.0, value_residual_init=0.3 if "vr" in option or option == "both" else 0.5,
                      **OPTIONS[option])
    seed = 5
    with torch.device("meta"):
        m = GPT(cfg)
    m.to_empty(device="cpu")
    m.init_weights(seed)
    direct = GPT(cfg, seed=seed)
    idx = token_input()
    with torch.no_grad():
        assert torch.equal(m.eval()(idx), direct.eval()(idx))
    for (n, a), (_, b) in zip(m.state_dict().items(), direct.state_dict().items()):
        assert torch.equal(a, b), n


def test_options_batch_without_the_slow_vmap_fallback():
    """As tests/test_stacked.py's check for every design, with both options on (and dropout on P)."""
    for design in ("pre-ln", "post-ln", "sandwich-ln"):
        for option in OPTIONS.values():
            cfg = ModelConfig(design=design, n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=65,
                              dropout=0.1, **option)
            slow, stacked = slow_vmap_ops(cfg)
            assert slow <= CPU_ONLY_FALLBACK, (design, option, slow)
            assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in stacked.values())
            if "value_residual" in option:
                assert stacked["blocks.1.attn.value_lambda2"].grad.abs().min() > 0




def test_compiles_as_one_graph_and_matches_eager():
    torch._dynamo.reset()
    cfg = ModelConfig(design="pre-ln", n_layer=3, n_head=2, n_embd=16, block_size=8, vocab_size=11,
                      dropout=0.0, value_residual=True, residual_attention=True)
    model = GPT(cfg, seed=0)
    backend = CountingBackend()
    compiled = torch.compile(model, backend=backend, fullgraph=True)   # fullgraph: no graph break
    idx, tgt = token_input(3), token_input(4)
    for _ in range(3):
        _, loss = compiled(idx, tgt)
        loss.backward()
        _, eager = model(idx, tgt)
        assert torch.allclose(loss, eager, rtol=1e-6, atol=1e-6)
    assert backend.compiles == 1
    torch._dynamo.reset()


# ---------------------------------------------------------------------------------------------
# diagnostics and training
# ---------------------------------------------------------------------------------------------
def test_diagnostics_attention_entropy_uses_the_accumulated_scores():
    from reslab.diagnostics import stats
    from reslab.diagnostics.collector import Diagnostics

    model = make("pre-ln", L=L3, residual_attention=True, value_residual=True)
    idx, tgt = token_input(3), token_input(4)
    row = Diagnostics(model, (idx, tgt), interval=1).measure(0)
    st = Carried()
    with torch.no_grad():
        reference_logits(model, "pre-ln", idx, True, True, st=st)
    for layer in range(1, L3 + 1):
        P = st.P[layer]
        ent = -(torch.where(P > 0, P * P.clamp_min(1e-300).log(), torch.zeros_like(P))).sum(-1).mean(dim=(0, 2))
        for h in range(H):
            assert row[f"attn_entropy.block{layer - 1}.head{h}"] == pytest.approx(float(ent[h]), rel=1e-5, abs=1e-6)
    # without the previous scores (what the diagnostic measured before residual attention) layer 3's
    # entropy is another number: the diagnostic reads S_{l-1} from the carry
    alone = stats.attention_entropy(stats.attention_probs(model.blocks[2].attn, st.inputs[3]))
    assert abs(alone[0] - row["attn_entropy.block2.head0"]) > 1e-3


def test_training_with_both_options_and_diagnostics_completes(tmp_path):
    corpus = write_corpus(tmp_path)
    cfg = tiny_config(corpus, tmp_path / "cache", **{"model.value_residual": True,
                                                     "model.residual_attention": True,
                                                     "train.steps": 10, "train.eval_interval": 5})
    cfg = cfg.replace(diagnostics=cfg.diagnostics.__class__(**{**cfg.diagnostics.__dict__, "enabled": True,
                                                                "interval": 5, "batch_size": 2}))
    result = train(cfg, tmp_path / "run", log=lambda *_: None)
    assert result.status == "completed"
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["status"] == "completed"
    rows = [json.loads(line) for line in (tmp_path / "run" / "diagnostics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 5, 10]
    for r in rows:
        for i in range(2):
            assert math.isfinite(r[f"attn_entropy.block{i}"])
        assert r["grad_norm.block0.attn"] > 0
