"""nGPT (blocks/ngpt.py) against its formulas, written out here from the raw weight tensors.

Loshchilov et al. 2024: Norm(x) = x / ||x||;  h_0 = Norm(emb);
    h = Norm(h + alpha_A * (Norm(A(h)) - h));   h = Norm(h + alpha_M * (Norm(M(h)) - h));
    logits = s_z * (E_out h_L);  weight rows (maps from C) and columns (maps to C) on the unit sphere.
Every scaler is stored as s and used as s * (s_init / s_scale); the (s_init, s_scale) pairs below are
the paper's, stated by the test, not read from the model.

Also: unit-norm weights and hidden states at init and after training steps (reslab.train.loop),
stacked seeds equal separate runs (the after-step normalisation acts per seed), refusals name the
field, and a meta-device build materialises to the same model.
"""

from __future__ import annotations

import math

import pytest
import torch

import reslab
from reslab.config import ModelConfig
from reslab.errors import ConfigError
from reslab.model.gpt import GPT
from reslab.model.io import load_model
from reslab.train.determinism import derive_seed
from reslab.train.loop import train, train_stacked

from .conftest import meta_built
from .test_block_formulas import (
    BLOCK,
    TOL,
    VOCAB,
    B,
    C,
    H,
    assert_differs,
    lin,
    make,
    rope,
    stream_input,
    token_input,
)
from .train_helpers import tiny_config, train_losses, val_losses, write_corpus

FORMULA_TESTED = {"ngpt"}
QUIET = dict(log=lambda *_: None)
ALPHA_INIT = 0.05          # ModelConfig.ngpt_alpha_init default, written here on purpose


def tol(pos: str) -> dict:
    # the model computes rotary angles in float32 (as in test_block_formulas' rope test)
    return dict(rtol=1e-5, atol=1e-5) if pos == "rope" else TOL


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread


# ---------------------------------------------------------------------------------------------
# reference, from raw weights only
# ---------------------------------------------------------------------------------------------
def norm(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True))


def eff(scaler, s_init: float, s_scale: float):
    """The paper's scale trick: the stored parameter times s_init / s_scale."""
    return scaler.s * (s_init / s_scale)


def ref_attention(attn, h, *, rope_on=False, softmax_scale=None):
    """q = s_qk * Norm(rope(W_q h)), k likewise, per head; softmax(q k^T * sqrt(d) + mask) (W_v h); W_o."""
    Bx, Tx, Cx = h.shape
    d = Cx // H
    W = attn.c_attn.weight
    q, k, v = (lin(h, W[i * Cx:(i + 1) * Cx]) for i in range(3))
    heads = lambda t: t.reshape(Bx, Tx, H, d).transpose(1, 2)
    q, k, v = heads(q), heads(k), heads(v)
    if rope_on:
        q, k = rope(q), rope(k)
    s_qk = eff(attn.s_qk, 1.0, 1.0 / math.sqrt(Cx)).reshape(H, 1, d)
    q, k = s_qk * norm(q), s_qk * norm(k)
    scale = math.sqrt(d) if softmax_scale is None else softmax_scale
    future = torch.ones(Tx, Tx, dtype=torch.bool).triu(1)
    P = torch.softmax((q @ k.transpose(-1, -2) * scale).masked_fill(future, float("-inf")), dim=-1)
    y = (P @ v).transpose(1, 2).reshape(Bx, Tx, Cx)
    return lin(y, attn.c_proj.weight)


def ref_mlp(mlp, h, *, v_gain=None):
    """u = s_u * (W_u h);  v = s_v * sqrt(C) * (W_v h);  W_o (u * SiLU(v))."""
    Cx = h.shape[-1]
    uv = lin(h, mlp.c_fc.weight)
    n = uv.shape[-1] // 2
    u = eff(mlp.s_u, 1.0, 1.0) * uv[..., :n]
    v = eff(mlp.s_v, 1.0, 1.0) * (math.sqrt(Cx) if v_gain is None else v_gain) * uv[..., n:]
    return lin(u * (v * torch.sigmoid(v)), mlp.c_proj.weight)


def ref_block(blk, h, *, alpha_init=ALPHA_INIT, rope_on=False, softmax_scale=None, v_gain=None):
    Cx = h.shape[-1]
    a_A = eff(blk.alpha_attn, alpha_init, 1.0 / math.sqrt(Cx))
    a_M = eff(blk.alpha_mlp, alpha_init, 1.0 / math.sqrt(Cx))
    h_A = norm(ref_attention(blk.attn, h, rope_on=rope_on, softmax_scale=softmax_scale))
    h = norm(h + a_A * (h_A - h))
    h_M = norm(ref_mlp(blk.mlp, h, v_gain=v_gain))
    return norm(h + a_M * (h_M - h))


def ref_model(model, idx, *, alpha_init=ALPHA_INIT, rope_on=False):
    emb = model.wte.weight[idx]
    if model.wpe is not None:   # pos = "learned"
        emb = emb + model.wpe.weight[: idx.shape[1]]
    h = norm(emb)
    for blk in model.blocks:
        h = ref_block(blk, h, alpha_init=alpha_init, rope_on=rope_on)
    s_z = eff(model.stream.s_z, 1.0, 1.0 / math.sqrt(h.shape[-1]))
    return s_z * (h @ model.lm_head.weight.T)


# ---------------------------------------------------------------------------------------------
# formulas
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pos", ["learned", "rope"])
@pytest.mark.parametrize("layer", [1, 2])
def test_block_formula(layer, pos):
    model = make("ngpt", pos=pos, options={"alpha_init": 0.07})
    blk, x = model.blocks[layer - 1], norm(stream_input())
    assert not any(isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm)) for m in model.modules())
    assert all(getattr(m, "bias", None) is None for m in model.modules() if isinstance(m, torch.nn.Linear))
    with torch.no_grad():
        out = blk(x)
        ref = ref_block(blk, x, alpha_init=0.07, rope_on=pos == "rope")
        torch.testing.assert_close(out, ref, **tol(pos))
        # the comparison can fail: each of the paper's choices changes the output
        assert_differs(out, ref_block(blk, x, alpha_init=ALPHA_INIT, rope_on=pos == "rope"))
        assert_differs(out, ref_block(blk, x, alpha_init=0.07, rope_on=pos == "rope",
                                      softmax_scale=1.0 / math.sqrt(C // H)))
        assert_differs(out, ref_block(blk, x, alpha_init=0.07, rope_on=pos == "rope", v_gain=1.0))
        assert_differs(out, ref_block(blk, x, alpha_init=0.07, rope_on=pos != "rope"))
    torch.testing.assert_close(out.norm(dim=-1), torch.ones(B, x.shape[1], dtype=torch.float64), **TOL)


def test_sublayers_and_scalers_at_init():
    """At init every scaler's effective value is its s_init: alpha = options.alpha_init, s_qk = s_u = s_v
    = s_z = 1 (stored: 1/sqrt(C) or 1)."""
    model = reslab.build_model("ngpt", n_layer=2, n_embd=C, n_head=H, block_size=BLOCK, vocab_size=VOCAB,
                               options={"alpha_init": 0.08}, seed=3)
    one_over_sqrt_c = torch.full((C,), 1.0 / math.sqrt(C))
    for blk in model.blocks:
        torch.testing.assert_close(blk.alpha_attn.s.detach(), one_over_sqrt_c)
        torch.testing.assert_close(blk.alpha_mlp.s.detach(), one_over_sqrt_c)
        torch.testing.assert_close(eff(blk.alpha_attn, 0.08, 1 / math.sqrt(C)).detach(), torch.full((C,), 0.08))
        torch.testing.assert_close(blk.attn.s_qk.s.detach(), one_over_sqrt_c)
        assert torch.equal(blk.mlp.s_u.s.detach(), torch.ones_like(blk.mlp.s_u.s))
        assert torch.equal(blk.mlp.s_v.s.detach(), torch.ones_like(blk.mlp.s_v.s))
        assert blk.mlp.c_fc.weight.shape == (2 * ModelConfig(n_embd=C, mlp="swiglu").mlp_hidden, C)
    torch.testing.assert_close(model.stream.s_z.s.detach(), torch.full((VOCAB,), 1.0 / math.sqrt(C)))


@pytest.mark.parametrize("pos,tie", [("learned", True), ("rope", False), ("none", True)])
def test_whole_model(pos, tie):
    """embedding -> Norm -> blocks -> (no final norm) -> s_z * (E_out h)."""
    model = make("ngpt", pos=pos, tie_weights=tie)
    idx = token_input()
    with torch.no_grad():
        if pos == "none":
            assert model.wpe is None
        logits = model(idx)
        ref = ref_model(model, idx, rope_on=pos == "rope")
        torch.testing.assert_close(logits, ref, **tol(pos))
        # s_z is applied: without it the logits differ
        h_only = ref / eff(model.stream.s_z, 1.0, 1.0 / math.sqrt(C))
        assert_differs(logits, h_only)
    assert model.lm_head.weight is model.wte.weight if tie else model.lm_head.weight is not model.wte.weight


# ---------------------------------------------------------------------------------------------
# the sphere: weights and hidden states
# ---------------------------------------------------------------------------------------------
def normalised_weights(model) -> list[tuple[str, torch.Tensor, int]]:
    """(name, weight, dim along which each slice must have unit norm): rows of maps from C,
    columns of maps to C; the token embedding and the head by rows."""
    out = [("wte", model.wte.weight, 1), ("lm_head", model.lm_head.weight, 1)]
    for i, blk in enumerate(model.blocks):
        out += [(f"blocks.{i}.attn.c_attn", blk.attn.c_attn.weight, 1),
                (f"blocks.{i}.attn.c_proj", blk.attn.c_proj.weight, 0),
                (f"blocks.{i}.mlp.c_fc", blk.mlp.c_fc.weight, 1),
                (f"blocks.{i}.mlp.c_proj", blk.mlp.c_proj.weight, 0)]
    return out


def assert_on_sphere(model) -> None:
    for name, w, dim in normalised_weights(model):
        n = w.detach().double().norm(dim=dim)
        assert (n - 1).abs().max().item() < 1e-6, (name, n)


def hidden_norms(model, idx) -> list[torch.Tensor]:
    """Per-token norms of the stream entering the first block and leaving every block."""
    seen = []
    hooks = [model.blocks[0].register_forward_pre_hook(lambda m, args: seen.append(args[0].detach()))]
    hooks += [blk.register_forward_hook(lambda m, args, out: seen.append(out.detach())) for blk in model.blocks]
    with torch.no_grad():
        model.eval()(idx)
    for hk in hooks:
        hk.remove()
    return [h.double().norm(dim=-1) for h in seen]


def assert_unit_hidden(model, idx) -> None:
    norms = hidden_norms(model, idx)
    assert len(norms) == len(model.blocks) + 1
    for n in norms:
        assert (n - 1).abs().max().item() < 1e-5, n


@pytest.mark.parametrize("tie", [True, False])
def test_weights_and_hidden_states_on_the_sphere_at_construction(tie):
    model = GPT(ModelConfig(design="ngpt", n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=40,
                            tie_weights=tie, pos="rope"), seed=4)
    assert_on_sphere(model)
    for blk in model.blocks:  # the output projections are (C, fan_in): their columns are the unit vectors
        assert blk.attn.c_proj.weight.shape == (32, 32) and blk.mlp.c_proj.weight.shape[0] == 32
        assert (blk.mlp.c_proj.weight.norm(dim=1) - 1).abs().max() > 1e-2   # rows are not unit: dim matters
    idx = torch.randint(0, 40, (2, 16), generator=torch.Generator().manual_seed(0))
    assert_unit_hidden(model, idx)
    # a plain model does not have this property, so the check can fail
    plain = GPT(ModelConfig(design="pre-ln", n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=40), seed=4)
    with pytest.raises(AssertionError):
        assert_on_sphere(plain)


@pytest.mark.parametrize("tie", [True, False])
def test_training_keeps_weights_and_hidden_states_on_the_sphere(tmp_path, tie):
    corpus = write_corpus(tmp_path)
    cfg = tiny_config(corpus, tmp_path / "cache", **{
        "model.design": "ngpt", "model.tie_weights": tie, "model.pos": "rope", "model.dropout": 0.0,
        "optim.weight_decay": 0.0, "optim.warmup_steps": 0, "optim.lr": 1e-2,
        "train.steps": 3, "train.eval_interval": 3})
    result = train(cfg, tmp_path / "run", **QUIET)
    assert result.status == "completed"
    trained = load_model(tmp_path / "run" / "checkpoints" / "step_00000003")
    fresh = GPT(trained.config, seed=derive_seed(cfg.train.seed, "init"))   # the run's model at step 0
    assert_on_sphere(fresh)
    # the steps moved the weights (and the scalers), yet every weight is back on the sphere
    for (name, w, _), (_, w0, _) in zip(normalised_weights(trained), normalised_weights(fresh)):
        assert (w - w0).abs().max().item() > 1e-4, name
    assert not torch.equal(trained.blocks[0].alpha_attn.s, fresh.blocks[0].alpha_attn.s)
    assert_on_sphere(trained)
    idx = torch.randint(0, trained.config.vocab_size, (2, 32), generator=torch.Generator().manual_seed(1))
    assert_unit_hidden(trained, idx)


def test_after_optimizer_step_projects_back():
    model = GPT(ModelConfig(design="ngpt", n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=20,
                            tie_weights=False), seed=0)
    with torch.no_grad():
        for _, w, _ in normalised_weights(model):
            w.mul_(torch.rand(w.shape, generator=torch.Generator().manual_seed(w.numel())) + 0.5)
    with pytest.raises(AssertionError):
        assert_on_sphere(model)
    model.after_optimizer_step()
    assert_on_sphere(model)


# ---------------------------------------------------------------------------------------------
# stacked seeds
# ---------------------------------------------------------------------------------------------
def test_stacked_seeds_equal_separate_runs(tmp_path):
    corpus = write_corpus(tmp_path)
    seeds = (1, 2)
    cfgs = [tiny_config(corpus, tmp_path / "cache", **{
        "model.design": "ngpt", "model.dropout": 0.0, "model.tie_weights": False,
        "optim.weight_decay": 0.0, "optim.warmup_steps": 0, "optim.lr": 1e-2,
        "train.steps": 6, "train.eval_interval": 3, "train.seed": s}) for s in seeds]
    results = train_stacked(cfgs, [tmp_path / f"stacked{s}" for s in seeds], **QUIET)
    assert [r.status for r in results] == ["completed"] * 2
    for cfg, s in zip(cfgs, seeds):
        train(cfg, tmp_path / f"separate{s}", **QUIET)
    for s in seeds:
        a, b = tmp_path / f"stacked{s}", tmp_path / f"separate{s}"
        ta, tb = train_losses(a), train_losses(b)
        assert sorted(ta) == sorted(tb) == list(range(1, 7))
        for step in ta:
            assert ta[step] == pytest.approx(tb[step], rel=1e-4, abs=1e-4), (s, step)
        va, vb = val_losses(a), val_losses(b)
        assert sorted(va) == sorted(vb) and va
        for step in va:
            assert va[step] == pytest.approx(vb[step], rel=1e-4, abs=1e-4), (s, step)
        stacked_model = load_model(a / "checkpoints" / "step_00000006")
        separate_model = load_model(b / "checkpoints" / "step_00000006")
        assert_on_sphere(stacked_model)
        for (name, w, _), (_, w_sep, _) in zip(normalised_weights(stacked_model), normalised_weights(separate_model)):
            torch.testing.assert_close(w, w_sep, rtol=1e-4, atol=1e-4, msg=name)
    # the seeds really differ, so the equality above is per seed
    assert train_losses(tmp_path / "stacked1")[6] != pytest.approx(train_losses(tmp_path / "stacked2")[6], abs=1e-6)


# ---------------------------------------------------------------------------------------------
# refusals and meta-device build
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fields,field", [
    (dict(norm="layernorm"), "norm"),
    (dict(attn_res=False), "attn_res"),
    (dict(ffn_res=False), "ffn_res"),
    (dict(prores="linear"), "prores"),
    (dict(skip_scale="scalar"), "skip_scale"),
    (dict(branch_scale="channel"), "branch_scale"),
    (dict(shaped_attention=True), "shaped_attention"),
    (dict(vp_identity=True), "vp_identity"),
    (dict(value_residual=True), "value_residual"),
    (dict(residual_attention=True), "residual_attention"),
    (dict(embed_norm=True), "embed_norm"),
    (dict(mlp="relu"), "mlp"),
    (dict(init="xavier"), "init"),
    (dict(branch_gain=2.0), "branch_gain"),
    (dict(layer_designs={"1": "pre-ln"}), "layer_designs"),
    (dict(options={"alpha_init": 0.0}), "options.alpha_init: must be positive"),
])
def test_refusals_name_the_field(fields, field):
    with pytest.raises(ConfigError) as info:
        GPT(ModelConfig(design="ngpt", n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=20, **fields))
    lines = str(info.value).strip().splitlines()
    assert any(f"model.{field}" in line for line in lines), lines
    assert len(lines) <= 2, lines


def test_alpha_init_is_refused_elsewhere():
    with pytest.raises(ConfigError, match="model.options: pre-ln has no options of its own; remove alpha_init"):
        GPT(ModelConfig(design="pre-ln", n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=20,
                        options={"alpha_init": 0.1}))


@pytest.mark.parametrize("tie,pos", [(True, "learned"), (False, "rope")])
def test_meta_device_build_then_materialise_equals_direct_build(tie, pos):
    cfg = ModelConfig(design="ngpt", n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=20,
                      tie_weights=tie, pos=pos, options={"alpha_init": 0.1})
    direct, lazy = GPT(cfg, seed=5).eval(), meta_built(cfg, seed=5)
    idx = torch.randint(0, 20, (2, 8), generator=torch.Generator().manual_seed(2))
    assert torch.equal(direct(idx), lazy(idx))
    sd_direct, sd_lazy = direct.state_dict(), lazy.state_dict()
    assert sd_direct.keys() == sd_lazy.keys()
    assert all(torch.equal(sd_direct[k], sd_lazy[k]) for k in sd_direct)
    assert (lazy.lm_head.weight is lazy.wte.weight) == tie
    assert_on_sphere(lazy)


def test_diagnostics_attention_probs_use_ngpt_scores():
    """reslab.diagnostics reads attn.qkv and forms q k^T / sqrt(d): that must be nGPT's q k^T * sqrt(d)."""
    from reslab.diagnostics.stats import attention_probs
    model = make("ngpt")
    attn, x = model.blocks[0].attn, norm(stream_input())
    d = C // H
    with torch.no_grad():
        W = attn.c_attn.weight
        heads = lambda t: t.reshape(B, x.shape[1], H, d).transpose(1, 2)
        s_qk = eff(attn.s_qk, 1.0, 1.0 / math.sqrt(C)).reshape(H, 1, d)
        q, k = s_qk * norm(heads(lin(x, W[:C]))), s_qk * norm(heads(lin(x, W[C:2 * C])))
        future = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)
        ref = torch.softmax((q @ k.transpose(-1, -2) * math.sqrt(d)).masked_fill(future, float("-inf")), -1)
        torch.testing.assert_close(attention_probs(attn, x).double(), ref, rtol=1e-5, atol=1e-6)
