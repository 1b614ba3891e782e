"""Training diagnostics: values of a known tiny network against hand computation, the loss-spike
score on hand-made series, rows written at the right steps, a measurement that does not perturb
training (bit-identical losses with dropout on), and a resume that keeps diagnostics.jsonl whole."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from reslab.config import ModelConfig
from reslab.diagnostics import Diagnostics, read_rows, spike_score
from reslab.diagnostics.stats import parameter_groups
from reslab.errors import ConfigError
from reslab.model.gpt import GPT
from reslab.train.config import build_run_config
from reslab.train.loop import train
from tests.train_helpers import LogLines, curve_rows, resumed_steps, tiny_run, train_losses, val_losses, write_corpus
from tests.kill_helpers import SAFETY_NET_S


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path)


def _config(corpus: Path, cache: Path, diagnostics: dict | None = None, **overrides):
    cfg = tiny_run(corpus, cache, **overrides)
    if diagnostics is not None:
        cfg["diagnostics"] = diagnostics
    return build_run_config(cfg)


_losses, _vals = train_losses, val_losses



def quiet(*_):
    pass


# ---- a known tiny network, by hand -------------------------------------------------------------------
def _tiny_model() -> tuple[GPT, torch.Tensor, torch.Tensor]:
    cfg = ModelConfig(design="pre-ln", vocab_size=11, n_layer=2, n_head=2, n_embd=8, block_size=6,
                      dropout=0.0, bias=True, tie_weights=True)
    model = GPT(cfg, seed=3)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # larger than init so that attention is far from uniform
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    x = torch.randint(0, 11, (2, 6), generator=g)
    y = torch.randint(0, 11, (2, 6), generator=g)
    return model, x, y


def _by_hand(model: GPT, x: torch.Tensor):
    """The pre-ln forward written out with explicit matrices and an explicit softmax."""
    C, H = 8, 2
    d = C // H
    T = x.shape[1]

    def ln(t, mod):
        mu = t.mean(-1, keepdim=True)
        var = ((t - mu) ** 2).mean(-1, keepdim=True)
        return (t - mu) / torch.sqrt(var + mod.eps) * mod.weight + mod.bias

    h = model.wte.weight[x] + model.wpe.weight[:T]
    states, probs = [h], []
    for blk in model.blocks:
        a = ln(h, blk.norm1)
        qkv = a @ blk.attn.c_attn.weight.T + blk.attn.c_attn.bias
        q, k, v = (t.reshape(2, T, H, d).transpose(1, 2) for t in qkv.split(C, dim=-1))
        s = q @ k.transpose(-2, -1) / math.sqrt(d)
        s = s.masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))
        e = torch.exp(s - s.max(-1, keepdim=True).values)
        p = e / e.sum(-1, keepdim=True)
        probs.append(p)
        y = (p @ v).transpose(1, 2).reshape(2, T, C) @ blk.attn.c_proj.weight.T + blk.attn.c_proj.bias
        h = h + y
        m = ln(h, blk.norm2) @ blk.mlp.c_fc.weight.T + blk.mlp.c_fc.bias
        m = F.gelu(m) @ blk.mlp.c_proj.weight.T + blk.mlp.c_proj.bias
        h = h + m
        states.append(h)
    logits = ln(h, model.stream.final_norm) @ model.wte.weight.T
    return states, probs, logits


def test_diagnostics_of_a_tiny_network_match_hand_computation():
    model, x, y = _tiny_model()
    model.train()  # measure() must switch to eval and back
    with torch.no_grad():
        states, probs, logits = _by_hand(model, x)
        torch.testing.assert_close(logits, model(x), rtol=1e-5, atol=1e-5)  # the hand forward is right

    diag = Diagnostics(model, (x, y), interval=5)
    row = diag.measure(0, snapshot=True)
    assert model.training and all(p.grad is None for p in model.parameters())
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())

    names = ["embed", "block0", "block1"]
    tol = dict(rel=1e-5, abs=1e-6)
    with torch.no_grad():
        for name, h in zip(names, states):
            token_norms = [math.sqrt(sum(float(v) ** 2 for v in h[b, t])) for b in range(2) for t in range(6)]
            assert row[f"hidden_norm.{name}"] == pytest.approx(sum(token_norms) / 12, **tol)
            cos = []
            for b in range(2):
                pairs = [float(h[b, t] @ h[b, s] / (h[b, t].norm() * h[b, s].norm()))
                         for t in range(6) for s in range(6) if s != t]
                cos.append(sum(pairs) / len(pairs))
            assert row[f"cos_sim.{name}"] == pytest.approx(sum(cos) / 2, **tol)
        assert row["growth_ratio"] == pytest.approx(row["hidden_norm.block1"] / row["hidden_norm.embed"], **tol)

        def plain_ln(t):
            return (t - t.mean(-1, keepdim=True)) / torch.sqrt(t.var(-1, unbiased=False, keepdim=True) + 1e-5)

        for i in range(2):
            change = (plain_ln(states[i + 1]) - plain_ln(states[i])).norm(dim=-1).mean()
            assert row[f"adjacent_change.block{i}"] == pytest.approx(float(change), **tol)
            for hd in range(2):
                ent = []
                for b in range(2):
                    for t in range(6):
                        ps = [float(p) for p in probs[i][b, hd, t, : t + 1]]
                        ent.append(-sum(p * math.log(p) for p in ps if p > 0))
                assert row[f"attn_entropy.block{i}.head{hd}"] == pytest.approx(sum(ent) / len(ent), **tol)
            assert row[f"prores_alpha.block{i}"] == 1.0
            assert row[f"branch_gain.block{i}.attn_residual"] == 1.0

    # gradient norms: a separate plain backward on a copy, grouped by hand
    ref = copy.deepcopy(model).eval()
    _, loss = ref(x, y)
    loss.backward()
    assert row["loss"] == pytest.approx(loss.item(), rel=1e-6)
    grads = dict(ref.named_parameters())

    def gnorm(*names):
        return math.sqrt(sum(float(grads[n].grad.pow(2).sum()) for n in names))

    assert row["grad_norm.embed"] == pytest.approx(gnorm("wte.weight", "wpe.weight"), **tol)
    for i in range(2):
        pre = f"blocks.{i}."
        attn = [pre + n for n in ("attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias")]
        mlp = [pre + n for n in ("mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")]
        norms = [pre + n for n in ("norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias")]
        assert row[f"grad_norm.block{i}.attn"] == pytest.approx(gnorm(*attn), **tol)
        assert row[f"grad_norm.block{i}.mlp"] == pytest.approx(gnorm(*mlp), **tol)
        assert row[f"grad_norm.block{i}.norms"] == pytest.approx(gnorm(*norms), **tol)
        assert row[f"grad_norm.block{i}"] == pytest.approx(gnorm(*attn, *mlp, *norms), **tol)
    assert row["grad_norm.final_norm"] == pytest.approx(gnorm("stream.final_norm.weight", "stream.final_norm.bias"), **tol)
    assert row["grad_norm.total"] == pytest.approx(gnorm(*grads), **tol)
    assert "grad_norm.head" not in row  # tied to wte: counted once, under embed

    # update ratio: change one matrix by a known delta
    before = model.blocks[0].mlp.c_fc.weight.detach().clone()
    group = [p.detach().clone() for n, p in model.named_parameters() if n.startswith("blocks.0.mlp.")]
    delta = torch.full_like(before, 0.01)
    with torch.no_grad():
        model.blocks[0].mlp.c_fc.weight.add_(delta)
    ratios = diag.update_ratios()
    expected = float(delta.norm()) / math.sqrt(sum(float(p.pow(2).sum()) for p in group))
    assert ratios["update_ratio.block0.mlp"] == pytest.approx(expected, rel=1e-5)
    assert ratios["update_ratio.block0.attn"] == 0.0 and ratios["update_ratio.block1"] == 0.0


def test_parameter_groups_cover_every_parameter_once_per_level():
    for design in ("pre-ln", "rezero", "admin", "sas", "resi-dual", "sandwich-ln"):
        model = GPT(ModelConfig(design=design, n_layer=2, n_head=2, n_embd=8, block_size=8, tie_weights=False))
        groups = parameter_groups(model)
        names = [n for n, _ in model.named_parameters()]
        assert sorted(groups["total"]) == sorted(names)
        top = [n for k, v in groups.items() if k in ("embed", "embed_norm", "final_norm", "head", "block0", "block1")
               for n in v]
        assert sorted(top) == sorted(names), design
        subs = [n for k, v in groups.items() if k.count(".") == 1 for n in v]
        assert sorted(subs) == sorted(groups["block0"] + groups["block1"]), design
    rezero = parameter_groups(GPT(ModelConfig(design="rezero", n_layer=1, n_head=2, n_embd=8, block_size=8)))
    assert rezero["block0.scalars"] == ["blocks.0.g"]


# ---- loss-spike score ------------------------------------------------------------------------------
def test_spike_score_on_hand_made_series():
    assert spike_score([1.0] * 10 + [5.0]) == pytest.approx(1 / 9)          # 9 steps with >= 2 earlier values
    alternating = [1.0, 2.0] * 5 + [4.0]  # last: mean 1.5, sample std sqrt(2.5/9) = 0.527
    assert spike_score(alternating, threshold=7) == 0.0                      # 4 < 1.5 + 7 * 0.527
    assert spike_score(alternating, threshold=3) == pytest.approx(1 / 9)     # 4 > 1.5 + 3 * 0.527
    series = [5.0, 5.0, 1.0, 1.0, 1.0, 2.0]
    assert spike_score(series, window=2) == pytest.approx(1 / 4)             # 2 > mean of [1, 1], std 0
    assert spike_score(series, window=1000) == 0.0
    assert spike_score([1.0, float("nan"), 1.0, float("inf"), 1.0, 3.0]) == pytest.approx(1 / 2)  # non-finite dropped
    assert spike_score([1.0, 2.0]) is None


def test_diagnostics_config_is_validated_with_paths(tmp_path, corpus):
    with pytest.raises(ConfigError) as e:
        _config(corpus, tmp_path / "c", {"enabled": True, "interval": 0, "batch_size": 0, "spike_window": 1,
                                         "spike_threshold": 0.0})
    text = "\n".join(e.value.errors)
    for field in ("interval", "batch_size", "spike_window", "spike_threshold"):
        assert f"diagnostics.{field}" in text


# ---- in the training loop ------------------------------------------------------------------------
def test_measuring_does_not_perturb_training(tmp_path, corpus):
    """Dropout on (0.1): any draw from the global RNG, any touched .grad or optimizer state would show."""
    off = train(_config(corpus, tmp_path / "c"), tmp_path / "off", log=quiet)
    on = train(_config(corpus, tmp_path / "c", {"enabled": True, "interval": 3}), tmp_path / "on", log=quiet)
    assert _losses(on.path) == _losses(off.path)  # bit-identical
    assert _vals(on.path) == _vals(off.path)
    assert not (off.path / "diagnostics.jsonl").exists()
    for run in (off.path, on.path):  # spike scores are written with diagnostics on or off
        status = json.loads((run / "status.json").read_text())
        assert status["spike_score_loss"] is not None and status["spike_score_grad_norm"] is not None


@pytest.mark.parametrize("residuals", [{}, {"model.attn_res": False}, {"model.ffn_res": False}])
def test_rows_at_the_expected_steps_with_the_expected_keys(tmp_path, corpus, residuals):
    run = train(_config(corpus, tmp_path / "c", {"enabled": True}, **residuals), tmp_path / "r", log=quiet)
    rows = read_rows(run.path / "diagnostics.jsonl")
    assert [r["step"] for r in rows] == [0, 10, 20, 30]  # default cadence: train.eval_interval (10)
    for r in rows:
        for key in ("loss", "grad_norm.embed", "grad_norm.block0", "grad_norm.block0.attn", "grad_norm.block1.mlp",
                    "grad_norm.block1.norms", "grad_norm.final_norm", "grad_norm.total", "param_norm.block1",
                    "hidden_norm.embed", "hidden_norm.block0", "hidden_norm.block1", "growth_ratio",
                    "adjacent_change.block0", "adjacent_change.block1", "cos_sim.block1",
                    "attn_entropy.block0.head0", "attn_entropy.block1.head1", "prores_alpha.block1",
                    "branch_gain.block0.mlp_residual"):
            assert key in r and math.isfinite(r[key]), key
        assert r["growth_ratio"] == pytest.approx(r["hidden_norm.block1"] / r["hidden_norm.embed"])
        final = r["step"] == 30
        assert ("update_ratio.block0" in r) != final and ("train_grad_norm.block0" in r) != final

    every7 = train(_config(corpus, tmp_path / "c", {"enabled": True, "interval": 7}, **residuals),
                   tmp_path / "r7", log=quiet)
    assert [r["step"] for r in read_rows(every7.path / "diagnostics.jsonl")] == [0, 7, 14, 21, 28, 30]


def test_a_resume_keeps_diagnostics_whole(tmp_path, corpus, monkeypatch):
    import reslab.train.loop as loop

    over = {"train.steps": 30, "train.checkpoint_interval": 10}
    diag = {"enabled": True, "interval": 5}
    whole = train(_config(corpus, tmp_path / "c", diag, **over), tmp_path / "whole", log=quiet)

    real_lr = loop.learning_rate

    def killed_at_27(step, *args):
        if step == 27:  # rows for 20 and 25 are written, the last checkpoint is at 20
            raise KeyboardInterrupt
        return real_lr(step, *args)

    monkeypatch.setattr(loop, "learning_rate", killed_at_27)
    with pytest.raises(KeyboardInterrupt):
        train(_config(corpus, tmp_path / "c", diag, **over), tmp_path / "cut", log=quiet)
    assert [r["step"] for r in read_rows(tmp_path / "cut" / "diagnostics.jsonl")][-1] == 25
    monkeypatch.setattr(loop, "learning_rate", real_lr)
    log = LogLines()
    train(_config(corpus, tmp_path / "c", diag, **over), tmp_path / "cut", log=log)
    assert resumed_steps(log) == [20], log  # from the checkpoint, not a fresh start
    assert curve_rows(tmp_path / "cut") == curve_rows(whole.path)  # metrics too: file order, no duplicates

    rows = read_rows(tmp_path / "cut" / "diagnostics.jsonl")
    assert [r["step"] for r in rows] == [0, 5, 10, 15, 20, 25, 30]  # no duplicates, none missing
    assert rows == read_rows(whole.path / "diagnostics.jsonl")     # and the very same values


@pytest.mark.parametrize("design", ["resi-dual", "sas", "rezero", "admin", "deepnorm"])
def test_every_stream_and_design_scalar_is_reported(design):
    model = GPT(ModelConfig(design=design, vocab_size=11, n_layer=2, n_head=2, n_embd=8, block_size=6), seed=1)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randint(0, 11, (2, 6), generator=g), torch.randint(0, 11, (2, 6), generator=g)
    row = Diagnostics(model, (x, y), interval=1).measure(0)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert row["hidden_stream"] == ("xa" if design == "resi-dual" else "x")
    if design == "resi-dual":
        assert {"hidden_norm_xd.embed", "hidden_norm_xd.block1"} <= set(row)
    expected = {"sas": ["g_attn", "a_ff", "b_ff", "attn.shape_alpha", "attn.shape_beta", "attn.shape_gamma"],
                "rezero": ["g"], "admin": ["w1", "w2"], "deepnorm": ["a"], "resi-dual": []}[design]
    for name in expected:
        assert f"scalar.block1.{name}" in row, name
    if design == "rezero":
        assert row["scalar.block0.g"] == 0.0 and row["grad_norm.block0.scalars"] > 0


def test_bench_diagnostics_quick_runs(tmp_path):
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "diag.json"
    proc = subprocess.run([sys.executable, str(root / "bench" / "bench_diagnostics.py"), "--quick", "--json", str(out)],
                          cwd=root, capture_output=True, text=True, timeout=SAFETY_NET_S)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["losses_identical"] and result["measurements_per_run"] == 3
