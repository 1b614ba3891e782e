"""Properties of designs that the studies rely on: SAS at init, ResiDual's s, gain modes, init."""

import pytest
import torch

import reslab
from reslab.model.gpt import GPT
from tests.conftest import meta_built, small, tokens


# ---- SAS / SAS-P -----------------------------------------------------------------------------------
@pytest.mark.parametrize("design", ["sas", "sas-p"])
def test_shaped_attention_is_the_identity_at_init(design):
    model = GPT(small(design), seed=0).eval()
    x = torch.randn(2, 16, 32)
    eye = torch.eye(16).expand(2, 4, 16, 16)
    for block in model.blocks:
        torch.testing.assert_close(block.attn.attention_matrix(x), eye, atol=1e-6, rtol=0)
        # value and projection are identities too (layer 1: x + W_V x with W_V = 0): SA(x) = x
        torch.testing.assert_close(block.attn(x), x, atol=1e-5, rtol=0)


def test_shaped_attention_moves_away_from_identity_when_trained_weights_change():
    model = GPT(small("sas"), seed=0).eval()
    block = model.blocks[1]
    with torch.no_grad():
        block.attn.c_qk.weight.normal_(0, 0.5)
    x = torch.randn(2, 16, 32)
    assert not torch.allclose(block.attn.attention_matrix(x), torch.eye(16).expand(2, 4, 16, 16), atol=1e-3)


def _removed_by_sas(C: int, H: int, L: int, shared_norm: bool) -> int:
    """Pre-LN params minus SAS params, counted from the formulas: SAS drops W_V, W_P and their
    biases in every layer, keeps a C x C value matrix (no bias) in layer 1, and adds 3 shaped
    scalars per head plus g_attn, b_FF (and a_FF for SAS); SAS-P also drops one LayerNorm per layer."""
    removed = L * (2 * C * C + 2 * C) - C * C
    added = L * (3 * H + (2 if shared_norm else 3))
    if shared_norm:
        removed += L * 2 * C
    return removed - added


@pytest.mark.parametrize("design", ["sas", "sas-p"])
def test_sas_parameter_savings_match_the_removed_matrices(design):
    C, H, L = 64, 4, 6
    pre = GPT(small("pre-ln", n_embd=C, n_head=H, n_layer=L)).param_counts()
    sas = GPT(small(design, n_embd=C, n_head=H, n_layer=L)).param_counts()
    assert pre["total"] - sas["total"] == _removed_by_sas(C, H, L, shared_norm=design == "sas-p")
    assert sas["total"] < pre["total"]


def test_norm_free_sas_keeps_only_the_first_layer_norm():
    model = GPT(small("sas-p", options={"norm_free": True}))
    assert isinstance(model.blocks[0].norm, torch.nn.LayerNorm)
    assert all(isinstance(b.norm, torch.nn.Identity) for b in model.blocks[1:])
    assert isinstance(model.stream.final_norm, torch.nn.Identity)


# ---- ResiDual ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("s", [0.01, 0.125, 8.0])
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_resi_dual_fp16_guard_scale_leaves_float32_output_unchanged(s, norm):
    idx = tokens()
    ref = GPT(small("resi-dual", norm=norm, n_layer=6), seed=2).eval()(idx)
    scaled = GPT(small("resi-dual", norm=norm, n_layer=6, options={"scale": s}), seed=2).eval()(idx)
    assert (scaled - ref).abs().max().item() < 1e-5


# ---- branch gains ------------------------------------------------------------------------------------
@pytest.mark.parametrize("g", [0.25, 0.5, 2.0, 4.0])
@pytest.mark.parametrize("design", ["pre-ln", "post-ln", "sandwich-ln"])
def test_runtime_and_init_gains_agree_at_step_zero(g, design):
    idx = tokens()
    runtime = GPT(small(design, branch_gain=g, gain_mode="runtime"), seed=4).eval()(idx)
    init = GPT(small(design, branch_gain=g, gain_mode="init"), seed=4).eval()(idx)
    plain = GPT(small(design), seed=4).eval()(idx)
    torch.testing.assert_close(runtime, init, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(runtime, plain, atol=1e-3)


def test_init_gain_scales_output_weights_and_runtime_gain_does_not():
    runtime = GPT(small(branch_gain=2.0, gain_mode="runtime"), seed=4)
    init = GPT(small(branch_gain=2.0, gain_mode="init"), seed=4)
    w_rt, w_init = runtime.blocks[0].mlp.c_proj.weight, init.blocks[0].mlp.c_proj.weight
    torch.testing.assert_close(w_init, 2.0 * w_rt)
    assert runtime.blocks[0].mlp_residual.gain == 2.0 and init.blocks[0].mlp_residual.gain == 1.0


# ---- initialisation ------------------------------------------------------------------------------
def _params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("design", reslab.designs())
def test_init_depends_on_the_seed_alone(design):
    torch.manual_seed(1)
    a = _params(GPT(small(design), seed=7))
    torch.manual_seed(12345)
    torch.randn(100)
    b = _params(GPT(small(design), seed=7))
    c = _params(GPT(small(design), seed=8))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a if a[k].numel() > 1)


@pytest.mark.parametrize("design", reslab.designs())
def test_meta_device_build_then_materialise_equals_direct_build(design):
    cfg = small(design, prores="linear" if reslab.get_design(design).prores else "none", prores_warmup=5)
    direct, lazy = GPT(cfg, seed=5).eval(), meta_built(cfg, seed=5)
    idx = tokens()
    assert torch.equal(direct(idx), lazy(idx))
    if cfg.tie_weights:
        assert lazy.lm_head.weight is lazy.wte.weight


def test_gpt2_init_scales_output_projections_by_depth():
    L = 16
    model = GPT(small(n_layer=L, n_embd=128, n_head=4))
    std_proj = model.blocks[0].mlp.c_proj.weight.std().item()
    std_fc = model.blocks[0].mlp.c_fc.weight.std().item()
    assert std_fc == pytest.approx(0.02, rel=0.05)
    assert std_proj == pytest.approx(0.02 / (2 * L) ** 0.5, rel=0.05)


def test_deepnorm_init_scales_value_out_fc1_fc2_but_not_query_key():
    L, C = 6, 128
    model = GPT(small("deepnorm", n_layer=L, n_embd=C, n_head=4))
    attn, mlp = model.blocks[0].attn, model.blocks[0].mlp
    b = (8 * L) ** -0.25
    xavier_cc = (2 / (2 * C)) ** 0.5
    w = attn.c_attn.weight
    assert w[:C].std().item() == pytest.approx(xavier_cc, rel=0.05)         # W_Q untouched
    assert w[C:2 * C].std().item() == pytest.approx(xavier_cc, rel=0.05)    # W_K untouched
    assert w[2 * C:].std().item() == pytest.approx(b * xavier_cc, rel=0.05)  # W_V scaled
    assert attn.c_proj.weight.std().item() == pytest.approx(b * xavier_cc, rel=0.05)
    xavier_fc = (2 / (C + 4 * C)) ** 0.5
    assert mlp.c_fc.weight.std().item() == pytest.approx(b * xavier_fc, rel=0.05)


def test_rezero_starts_as_identity_blocks():
    model = GPT(small("rezero")).eval()
    x = torch.randn(2, 16, 32)
    for block in model.blocks:
        assert torch.equal(block(x), x)


# ---- model pieces ------------------------------------------------------------------------------------
def test_param_counts_tied_and_untied():
    tied = GPT(small(tie_weights=True)).param_counts()
    untied = GPT(small(tie_weights=False)).param_counts()
    assert untied["total"] - tied["total"] == 65 * 32
    assert tied["embedding"] == 65 * 32 + 16 * 32
    assert tied["non_embedding"] == untied["non_embedding"]


@pytest.mark.parametrize("mlp", ["gelu", "gelu-tanh", "relu", "swiglu"])
@pytest.mark.parametrize("pos", ["learned", "rope", "none"])
def test_model_options_train_one_step(mlp, pos):
    model = GPT(small(mlp=mlp, pos=pos, norm="rmsnorm", bias=False, dropout=0.1))
    _, loss = model(tokens(), tokens(seed=1))
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in model.parameters())


def test_rope_is_relative_positions_only():
    from reslab.model.attention import rotate_rope

    q, k = torch.randn(1, 1, 8, 16), torch.randn(1, 1, 8, 16)
    scores = rotate_rope(q, 10000.0) @ rotate_rope(k, 10000.0).transpose(-1, -2)
    # the score of (i, j) depends on i - j: rotating a shifted copy gives the same scores
    q2, k2 = torch.cat([torch.randn(1, 1, 3, 16), q], 2), torch.cat([torch.randn(1, 1, 3, 16), k], 2)
    scores2 = rotate_rope(q2, 10000.0) @ rotate_rope(k2, 10000.0).transpose(-1, -2)
    torch.testing.assert_close(scores2[..., 3:, 3:], scores, atol=1e-4, rtol=1e-4)


def test_sequence_longer_than_block_size_is_refused():
    with pytest.raises(ValueError, match="block_size"):
        GPT(small())(tokens(T=17))


@pytest.mark.parametrize("design,tables", [
    ("altup", lambda L: 65 * 32),                   # the wider token table, (K - 1) x C = 32 wide at K = 2
    ("speedrun", lambda L: ((L + 1) // 2) * 65 * 32),  # a value embedding on every other layer
])
def test_a_designs_own_token_tables_count_as_embedding(design, tables):
    """A scaling law's N leaves lookup tables out: AltUp's wider token table and the speedrun's value
    embeddings are tables too (counted as non-embedding before 2026-12-07)."""
    L = 4
    model = GPT(small(design, n_layer=L))
    counts = model.param_counts()
    own = sum(m.weight.numel() for name, m in model.named_modules()
              if isinstance(m, torch.nn.Embedding) and name not in ("wte", "wpe"))
    assert own == tables(L) > 0
    assert counts["embedding"] == 65 * 32 + 16 * 32 + own
    assert counts["non_embedding"] == counts["total"] - counts["embedding"]
