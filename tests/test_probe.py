"""Init-time probes (`reslab probe`): each scaling law of variants.md section 7 as a fitted
log-log exponent with a stated tolerance, plus the CSV / PNG / error plumbing. CPU, one thread."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from reslab.errors import ReslabError
from reslab.probe import (
    depth_slopes,
    fit_slope,
    layer_means,
    layer_slopes,
    linear_ln_sim,
    plot_all,
    read_csv,
    run_probe,
)
from reslab.cli.probe import add_parsers as add_probe_parsers

WIDTH, HEADS = 64, 4   # small and fast; the exponents are the same at width 128 (see the report)


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_fit_slope_recovers_a_power_law():
    xs = [1, 2, 4, 8, 16]
    assert fit_slope(xs, [3 * x ** -0.5 for x in xs]) == pytest.approx(-0.5)
    assert math.isnan(fit_slope([1], [1.0]))


def test_xiong_last_layer_w2_gradient_vs_depth():
    # Xiong et al. 2020 Thm 1 (Xavier, ReLU, W_Q = W_K = 0): ||dL/dW2|| of the last layer ~ L^(-1/2)
    # for Pre-LN, flat for Post-LN. Seed means over 3 seeds, depths 6..48.
    rows = run_probe(["pre-ln", "post-ln"], [6, 12, 24, 48], seeds=3, mode="xiong", width=WIDTH, heads=HEADS)
    s = depth_slopes(rows, "last_w2_grad_norm")
    assert -0.65 <= s["pre-ln"] <= -0.35, s
    assert -0.15 <= s["post-ln"] <= 0.15, s
    # the per-layer profiles are reported for both (one gradient norm per layer, all positive)
    prof = layer_means(rows, "grad_norm", 48)
    assert len(prof["pre-ln"]) == 48 and min(prof["pre-ln"] + prof["post-ln"]) > 0


def test_residual_adjacent_layer_change_vs_layer_index():
    # ResiDual Thms 3.3 / 3.6: ||N(x_k) - N(x_{k-1})|| ~ k^(-1/2) for Pre-LN, flat for Post-LN and
    # ResiDual (its post-ln stream xa). Needs branch outputs of order one against the embedding,
    # so the xiong setting (Xavier init) is used: with gpt2 init (std 0.02, output projections
    # 0.02/sqrt(2L)) the embedding dominates x_k at every k and all three curves are flat.
    rows = run_probe(["pre-ln", "post-ln", "resi-dual"], [48], seeds=3, mode="xiong", width=WIDTH, heads=HEADS)
    s = layer_slopes(rows, "adj_change", 48)
    assert -0.65 <= s["pre-ln"] <= -0.35, s
    assert -0.15 <= s["post-ln"] <= 0.15, s
    assert -0.15 <= s["resi-dual"] <= 0.15, s
    # ResiDual's second stream xd is Pre-LN's sum of branch outputs: its change decays the same way
    dual = layer_slopes(rows, "adj_change_dual", 48)["resi-dual"]
    assert -0.65 <= dual <= -0.35, dual


def test_rank_collapse_without_attention_skip_and_none_with_shaped_attention():
    # Study 001: without the attention skip, standard attention (near-uniform causal averaging at
    # init) makes the tokens collinear: mean pairwise cosine similarity -> 1 with depth.
    # Shaped attention (A = I at init) keeps it far below: near its embedding value (~0.01) with
    # SAS's value / projection identity; without it the random W_P W_V products drift up slowly
    # (about 0.03 here, about 0.3 at width 128 and 48 layers), hence the looser bound.
    names = ["pre-ln-noskip", "pre-ln-noskip-shaped", "pre-ln-noskip-shaped-vpid", "sas", "pre-ln"]
    rows = run_probe(names, [24], seeds=2, mode="rank", width=WIDTH, heads=HEADS)
    cos = layer_means(rows, "cos_sim", 24)
    assert cos["pre-ln-noskip"][-1] > 0.95, cos["pre-ln-noskip"][-1]
    assert cos["pre-ln-noskip"][-1] > cos["pre-ln-noskip"][0]       # rises with depth
    assert max(cos["pre-ln-noskip-shaped"]) < 0.3, max(cos["pre-ln-noskip-shaped"])
    for name in ("pre-ln-noskip-shaped-vpid", "sas"):
        assert max(cos[name]) < 0.05, (name, max(cos[name]))
    assert max(cos["pre-ln"]) < 0.3, max(cos["pre-ln"])


def test_study_002_linear_ln_simulation():
    # Study 002: 48 layers of Linear (Xavier) + LayerNorm, gradient of each W_l, 8 seeds averaged.
    # Pre-LN: ||x_l||^2 grows like l, the branch Jacobian shrinks like 1/sqrt(l), so
    # ||dL/dW_l|| ~ l^(-1/2) (variance ~ 1/l). Post-LN: E||(I + W^T) g||^2 / 2 = ||g||^2, flat in
    # expectation (one seed's profile is a log-random walk; its own slope spreads about +-0.3).
    L = np.arange(1, 49)
    means = {k: np.mean([linear_ln_sim(48, WIDTH, s, kind=k)["grad_norm"] for s in range(8)], axis=0)
             for k in ("pre", "post")}
    pre, post = fit_slope(L, means["pre"]), fit_slope(L, means["post"])
    assert -0.6 <= pre <= -0.35, pre
    assert -0.2 <= post <= 0.2, post
    var_pre = fit_slope(L, np.mean([linear_ln_sim(48, WIDTH, s, "pre")["grad_var"] for s in range(8)], 0))
    assert -1.2 <= var_pre <= -0.7, var_pre


def test_csv_and_plots_written(tmp_path):
    rows = run_probe(["pre-ln", "resi-dual"], [2, 4], seeds=2, mode="default", width=32, heads=4,
                     seq=8, batch=2, out_dir=tmp_path)
    back = read_csv(tmp_path / "probe.csv")
    assert len(back) == len(rows) == 2 * 2 * (1 + 2) + 2 * 2 * (1 + 4)
    layer = next(r for r in back if r["kind"] == "layer" and r["design"] == "resi-dual")
    assert {"grad_norm", "act_norm", "adj_change", "cos_sim", "adj_change_dual"} <= set(layer)
    model = next(r for r in back if r["kind"] == "model")
    assert model["last_w2_grad_norm"] > 0
    paths = plot_all(rows, tmp_path)
    assert paths and all(p.stat().st_size > 1000 for p in paths)
    assert not list(tmp_path.glob(".*.tmp"))           # atomic writes leave no temp files
    sim = run_probe(["pre", "post"], [6], seeds=1, mode="sim", width=16)
    assert all(p.stat().st_size > 1000 for p in plot_all(sim, tmp_path / "sim"))


def _cli(argv):
    import argparse
    p = argparse.ArgumentParser(prog="reslab")
    add_probe_parsers(p.add_subparsers(dest="verb", required=True))
    args = p.parse_args(argv)
    return args.func(args)


def test_cli_runs_and_prints_the_folder_last(tmp_path, capsys):
    out = tmp_path / "po"
    assert _cli(["probe", "--designs", "pre-ln,post-ln", "--depths", "2,3", "--seeds", "1", "--width", "16",
                 "--heads", "2", "--seq", "8", "--batch", "2", "--out", str(out)]) == 0
    text = capsys.readouterr().out.strip().splitlines()
    assert text[-1] == str(out) and any("pre-ln" in line for line in text)
    assert (out / "probe.csv").is_file() and (out / "last_w2_grad_vs_depth.png").stat().st_size > 1000


def test_cli_names_the_designs_that_keep_their_own_init_in_xiongs_setting(tmp_path, capsys):
    assert _cli(["probe", "--designs", "t-fixup,pre-ln,fixup", "--depths", "2,3", "--seeds", "1", "--width", "16",
                 "--heads", "2", "--seq", "8", "--batch", "2", "--mode", "xiong", "--out", str(tmp_path / "x")]) == 0
    kept = [line for line in capsys.readouterr().out.splitlines() if line.startswith("kept their own init")]
    assert kept == ["kept their own init (part of the design) instead of Xavier: t-fixup (t-fixup), fixup (fixup)"]


@pytest.mark.parametrize("argv, words", [
    (["--designs", "nope"], "unknown design"),
    (["--depths", "0,6"], "depth"),
    (["--depths", "six"], "--depths"),
    (["--mode", "bogus"], "unknown mode"),
    (["--mode", "sim", "--designs", "pre-ln"], "unknown design"),
    (["--seeds", "0"], "--seeds"),
    (["--width", "30", "--heads", "4"], "--heads"),
])
def test_cli_bad_input_is_one_line_error(tmp_path, argv, words):
    with pytest.raises(ReslabError) as e:
        _cli(["probe", "--out", str(tmp_path / "x"), "--depths", "2", *argv] if "--depths" not in argv
             else ["probe", "--out", str(tmp_path / "x"), *argv])
    assert words in str(e.value) and "\n" not in str(e.value)


def test_an_exponent_with_nothing_to_fit_is_na_with_its_reason():
    """fixup's adjacent-layer change is 0 at init (its branches start at zero): no log to fit."""
    from reslab.probe.run import NO_FIT, fit_slope, format_table

    assert math.isnan(fit_slope([1, 2, 3], [0.0, 0.0, 0.0]))
    text = format_table([{"design": "fixup", "slope": fit_slope([1, 2, 3], [0.0, 0.0, 0.0])},
                         {"design": "pre-ln", "slope": fit_slope([1, 2, 4], [1.0, 2.0, 4.0])}])
    lines = text.splitlines()
    assert lines[1].split() == ["fixup", "n/a"] and lines[2].split() == ["pre-ln", "+1.000"]
    assert lines[-1] == NO_FIT and "nan" not in text
    assert NO_FIT not in format_table([{"design": "pre-ln", "slope": 1.0}])
