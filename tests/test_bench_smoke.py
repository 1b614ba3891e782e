"""The benchmark scripts in bench/ must keep running: each --quick run finishes in seconds, exits 0
and prints its tables. And bench/reference_gpt.py must stay the same architecture as reslab's pre-ln."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import reslab

from .conftest import bench_module
from tests.kill_helpers import SAFETY_NET_S

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=SAFETY_NET_S)
    assert proc.returncode == 0, f"{script} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def _reference_module():
    return bench_module("reference_gpt")


def test_bench_engine_quick(tmp_path):
    out = tmp_path / "engine.json"
    proc = _run("bench_engine.py", "--quick", "--threads", "1", "--json", str(out))
    text = proc.stdout
    for needle in ("contender", "ms/step", "tokens/s", "engine overhead vs bare", "reslab model vs reference",
                   "bare loops, median ms per phase"):
        assert needle in text, f"missing {needle!r} in:\n{text}"
    for name in ("engine", "bare", "reference (bias False)", "reference (bias True)"):
        assert f"\n{name} " in text
    res = json.loads(out.read_text())
    rows = {r["contender"]: r for r in res["rows"]}
    assert set(rows) == {"engine", "bare", "reference (bias False)", "reference (bias True)"}
    for r in rows.values():
        assert r["step_ms"] > 0 and math.isfinite(r["tokens_per_s"])
    # The bare loop repeats the engine's arithmetic exactly: same model, batches, schedule, clip.
    assert res["summary"]["engine_vs_bare_max_abs_loss_diff"] <= 1e-5
    # The reference with the model's bias setting has exactly reslab's parameter count.
    same = rows[res["summary"]["reference_same_architecture"]]
    assert same["params"] == rows["bare"]["params"]


def test_bench_engine_nanogpt_cpu_run_mode(tmp_path):
    """The --nanogpt-cpu-run mode, cut to 3 steps (the full run takes minutes)."""
    from reslab.data import DataConfig
    from reslab.data.corpus import tinyshakespeare_candidates

    if not any(p.is_file() for p in tinyshakespeare_candidates(DataConfig())):
        pytest.skip("TinyShakespeare is not available locally")
    out = tmp_path / "run.json"
    proc = _run("bench_engine.py", "--nanogpt-cpu-run", "--run-steps", "3", "--threads", "1",
                "--progress", "off", "--json", str(out))
    assert "final val loss" in proc.stdout and "best val loss" in proc.stdout and "wall time" in proc.stdout
    res = json.loads(out.read_text())
    assert res["status"] == "completed" and res["steps"] == 3
    assert [s for s, _ in res["evaluations"]] == [0, 3]
    assert math.isfinite(res["final_val_loss"]) and res["best_val_loss"] <= res["evaluations"][0][1]


def test_bench_designs_quick(tmp_path):
    out = tmp_path / "designs.json"
    proc = _run("bench_designs.py", "--quick", "--threads", "1", "--json", str(out))
    text = proc.stdout
    for needle in ("## setup", "design", "tokens/s vs pre-ln", "vs pre-ln, same round", "pre-ln", "post-ln"):
        assert needle in text, f"missing {needle!r} in:\n{text}"
    rows = {r["label"]: r for r in json.loads(out.read_text())["setups"][0]["rows"]}
    assert rows["pre-ln"]["tokens_per_s_vs_pre_ln_same_round"] == 1.0   # its own rounds: exactly 1
    assert {label: r["error"] for label, r in rows.items() if r["error"]} == {}   # every design and extra builds
    assert {"pre-ln + derf", "pre-ln + seednorm", "dca", "moda", "depth-attention"} <= set(rows)
    for r in rows.values():   # the same-round ratio is a median of per-round ratios: within their range
        per_round = [b / d for b, d in zip(rows["pre-ln"]["step_ms_round_medians"], r["step_ms_round_medians"])]
        assert min(per_round) <= r["tokens_per_s_vs_pre_ln_same_round"] <= max(per_round)


def test_bench_depth_memory_quick(tmp_path):
    """The activation memory is counted, not timed: every design's saved bytes grow with depth,
    the designs that keep earlier outputs save more than pre-ln, and no more than in proportion to
    depth (a mix that stacked every source at every layer would grow as L^2: AttnRes did, 6.5x
    pre-ln at 16 layers, before its mixes went source by source)."""
    out = tmp_path / "depth.json"
    _run("bench_depth_memory.py", "--quick", "--json", str(out))
    results = json.loads(out.read_text())["results"]
    assert [r["depth"] for r in results] == [4, 8]
    for label in ("pre-ln", "attn-res (full)", "denseformer", "speedrun", "parallel"):
        assert results[1]["rows"][label]["saved_mib"] > results[0]["rows"][label]["saved_mib"]
    shallow, deep = results[0]["rows"], results[1]["rows"]
    assert deep["pre-ln"]["saved_ratio"] == 1.0
    for label in ("attn-res (full)", "attn-res (block of 4 layers)", "denseformer", "hyper-connections (n=4)",
                  "dca", "moda", "depth-attention"):
        assert 1.0 < deep[label]["saved_ratio"] < 1.1 * shallow[label]["saved_ratio"], label
    bad = subprocess.run([sys.executable, str(BENCH / "bench_depth_memory.py"), "--designs", "nope"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown row 'nope'" in bad.stderr


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [dict(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=65),
                                   dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=50)])
def test_reference_gpt_matches_reslab_pre_ln(bias, shape):
    ref = _reference_module()
    model = reslab.build_model("pre-ln", bias=bias, tie_weights=True, dropout=0.0, **shape)
    reference = ref.ReferenceGPT(ref.RefConfig(bias=bias, dropout=0.0, **shape))
    assert reference.num_params() == model.param_counts()["total"]
    # Same architecture, tensor by tensor: the same multiset of parameter shapes.
    shapes = lambda m: sorted(tuple(p.shape) for p in m.parameters())  # noqa: E731
    assert shapes(reference) == shapes(model)


def _reference_to_reslab_name(name: str) -> str:
    """The reference's parameter name -> reslab's pre-ln name for the same tensor."""
    for theirs, ours in (("layers.", "blocks."), (".ln_1.", ".norm1."), (".ln_2.", ".norm2."), (".attn.qkv.", ".attn.c_attn."),
                         ("ln_f.", "stream.final_norm.")):
        name = name.replace(theirs, ours)
    return name


@pytest.mark.parametrize("bias", [True, False])
def test_reference_gpt_computes_reslab_pre_ln_logits(bias):
    """Equal parameter shapes do not make equal models (a post-LN or ReLU reference has the same
    ones): the same weights, copied tensor by tensor, must give the same logits in float64. The
    weights are drawn at random, biases and LayerNorm gains included, so none of them is an
    identity the arithmetic could skip."""
    ref = _reference_module()
    shape = dict(n_layer=3, n_head=2, n_embd=32, block_size=16, vocab_size=50)
    reference = ref.ReferenceGPT(ref.RefConfig(bias=bias, dropout=0.0, **shape)).double().eval()
    model = reslab.build_model("pre-ln", bias=bias, tie_weights=True, dropout=0.0, **shape).double().eval()
    g = torch.Generator().manual_seed(0)
    ours = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in reference.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3 + (1.0 if "ln" in name else 0.0))
            ours.pop(_reference_to_reslab_name(name)).copy_(p)
    assert not ours, f"reslab parameters with no counterpart in the reference: {sorted(ours)}"
    assert model.lm_head.weight is model.wte.weight  # the tied head took the copied embedding
    idx = torch.randint(0, shape["vocab_size"], (3, shape["block_size"]), generator=g)
    with torch.no_grad():
        expected, got = reference(idx), model(idx)
    got = got[0] if isinstance(got, tuple) else got
    assert got.dtype == torch.float64 and got.shape == expected.shape
    assert (got - expected).abs().max().item() < 1e-10, (got - expected).abs().max().item()


def test_reference_gpt_init_and_loss():
    ref = _reference_module()
    cfg = ref.RefConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=65, bias=True)
    model = ref.ReferenceGPT(cfg, seed=0)
    assert model.head.weight is model.wte.weight
    layer = model.layers[0]
    assert layer.attn.c_proj.weight.std().item() == pytest.approx(0.02 / math.sqrt(2 * cfg.n_layer), rel=0.2)
    assert layer.mlp.c_fc.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert torch.count_nonzero(layer.mlp.c_fc.bias) == 0
    idx = torch.randint(0, 65, (3, 16), generator=torch.Generator().manual_seed(0))
    targets = torch.randint(0, 65, (3, 16), generator=torch.Generator().manual_seed(1))
    logits, loss = model(idx, targets)
    assert logits.shape == (3, 16, 65)
    assert loss.item() == pytest.approx(math.log(65), abs=0.1)  # small init: near-uniform predictions
    # causal: the first position's logits do not depend on later tokens
    idx2 = idx.clone()
    idx2[:, 1:] = (idx2[:, 1:] + 1) % 65
    assert torch.allclose(model(idx2)[:, 0], logits[:, 0], atol=1e-6)
    assert _seeded_init_is_reproducible(ref, cfg)


def _seeded_init_is_reproducible(ref, cfg) -> bool:
    a, b = ref.ReferenceGPT(cfg, seed=3), ref.ReferenceGPT(cfg, seed=3)
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_bench_cpu_autocast_smoke(tmp_path):
    """bf16 autocast on CPU against float32: both sides timed in alternation, medians and the ratio."""
    out = tmp_path / "autocast.json"
    proc = _run("bench_cpu_autocast.py", "--smoke", "--json", str(out))
    assert "smoke: not a result" in proc.stdout
    res = json.loads(out.read_text())
    assert res["shape"]["threads"] == 1
    for what in ("matmul", "train_step"):
        r = res[what]
        assert r["float32_ms"] > 0 and r["bf16_ms"] > 0
        assert r["ratio_bf16_to_float32"] == pytest.approx(r["bf16_ms"] / r["float32_ms"])
        assert len(r["rounds"]["float32"]) == len(r["rounds"]["bf16"]) == 1


def test_bench_denormal_smoke(tmp_path):
    """The same run flushing subnormals and keeping them: both timed, the ratio, the losses compared."""
    out = tmp_path / "denormal.json"
    proc = _run("bench_denormal.py", "--smoke", "--json", str(out))
    assert "smoke: not a result" in proc.stdout
    res = json.loads(out.read_text())
    assert res["flush_s"] > 0 and res["keep_s"] > 0 and res["steps"] == 12
    assert res["ratio_keep_to_flush"] == pytest.approx(res["keep_s"] / res["flush_s"])
    assert res["same_losses"] is True  # 12 updates produce no subnormal: the same numbers either way


def test_bench_cost_noise_smoke(tmp_path):
    """The card's speed ratio measured repeatedly, A/A and A/B, both estimators from the same steps."""
    out = tmp_path / "noise.json"
    proc = _run("bench_cost_noise.py", "--smoke", "--threads", "1", "--json", str(out))
    assert "smoke: not a result" in proc.stdout
    res = json.loads(out.read_text())
    assert res["smoke"] is True and res["repeats"] == 2 and set(res["pairs"]) == {"A/A pre-ln", "A/B keel"}
    for per_plan in res["pairs"].values():
        for by in per_plan.values():
            for s in by.values():
                assert len(s["values"]) == 2 and all(v > 0 for v in s["values"])
                assert s["spread"] == pytest.approx(max(s["values"]) - min(s["values"]))
                assert s["largest_off_1"] == pytest.approx(max(abs(v - 1) for v in s["values"]))
    table = _run("bench_cost_noise.py", "--markdown", str(out)).stdout.splitlines()
    assert table[0].startswith("| pair | timing |") and len(table) == 2 + 2  # a row per pair and plan
    assert table[2].startswith("| A/A pre-ln | 2 rounds x 2 steps | ")
