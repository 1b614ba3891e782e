"""Section 2 of the card: signal propagation at initialisation, the design beside pre-ln and post-ln.

Each design is built as the card trains it (its model settings at this scale, its own init and
options) at depths 6 to 96, and one forward + backward pass of a random batch is measured layer by
layer (probe/measure.py: gradient norm of each block's parameters, RMS of the stream, change of the
normalised stream between layers). Xiong et al. 2020 (Theorem 1) state the law these slopes test:
at initialisation Post-LN's gradient of the last layer's weights grows with depth (their bound is
O(d sqrt(ln d)) per layer, independent of L), while Pre-LN's shrinks as O(d sqrt(ln d / L)); so the
exponent of ||dL/dW2 (last layer)|| against L is about -1/2 for Pre-LN and about 0 for Post-LN.

    probe_designs(models, depths, seeds) -> rows (probe/run.py's row format, probe.csv columns)
    signal_summary({mode: (rows, skipped)}, own_inits) -> per mode and design the exponents and the law's reading

Two settings: "xiong", the law's own (Xavier init, ReLU MLP, W_Q = W_K = 0: where Pre-LN's exponent
is -1/2), and "default", each design as the card trains it (its own init: GPT-2's 1/sqrt(2L)
scaling of output projections already flattens Pre-LN's exponent there). A design whose init is
part of it (Fixup, T-Fixup, Sub-LN, DeepNet, SAS) keeps that init in Xiong et al.'s setting too,
since under Xavier it would be another model; the card names those designs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..config import ModelConfig
from ..errors import ReslabError
from ..model.gpt import GPT
from ..probe.measure import probe_model, random_batch
from ..probe.run import depth_slopes, layer_slopes, write_csv
from ..probe.settings import own_init, zero_query_key

SEQ, BATCH = 32, 4
MODES = ("xiong", "default")
SEPARATION = 0.25  # pre-ln's and post-ln's exponents must differ by this much for a reading


def _config(model: ModelConfig, depth: int, mode: str) -> ModelConfig:
    fields = dataclasses.asdict(model)
    fields.update(n_layer=depth, dropout=0.0, block_size=SEQ)
    if mode == "xiong":  # Xiong et al.'s setting: Xavier init, ReLU MLP (W_Q = W_K = 0 after building)
        fields.update(init=own_init(model) or "xavier", mlp="relu")
    return ModelConfig(**fields)


def _build(model: ModelConfig, depth: int, mode: str, seed: int) -> GPT:
    net = GPT(_config(model, depth, mode), seed=seed)
    if mode == "xiong":
        zero_query_key(net)
    return net


def probe_designs(models: dict[str, ModelConfig], depths, seeds: int = 3, mode: str = "xiong",
                  out_dir: Path | None = None) -> tuple[list[dict], dict[str, str]]:
    """probe.csv rows for every (label, depth, seed): the label's model config at that depth, in
    Xiong et al.'s setting (mode "xiong") or as the card trains it (mode "default"); and, per label
    that cannot be built so, why (a design that refuses Xavier init or a ReLU MLP, or whose attention
    has no fused query-key weight to zero)."""
    rows, skipped = [], {}
    for label, model in models.items():
        try:
            _build(model, 1, mode, 0)
        except (ReslabError, AttributeError, ValueError) as e:
            skipped[label] = str(e).splitlines()[0] if str(e) else type(e).__name__
            continue
        for depth in depths:
            for seed in range(seeds):
                net = _build(model, depth, mode, seed)
                idx, targets = random_batch(net.config.vocab_size, BATCH, SEQ, seed)
                res = probe_model(net, idx, targets)
                base = {"mode": mode, "design": label, "depth": depth, "seed": seed}
                rows.append({**base, "kind": "model", "last_w2_grad_norm": res["last_w2_grad_norm"],
                             "loss": res["loss"]})
                for layer in range(depth):
                    rows.append({**base, "kind": "layer", "layer": layer + 1,
                                 **{m: res[m][layer] for m in ("grad_norm", "act_norm", "adj_change", "cos_sim")}})
    if out_dir is not None:
        write_csv(Path(out_dir) / f"probe-{mode}.csv", rows)
    return rows, skipped


def reading(e: float | None, pre: float | None, post: float | None, zero: bool = False) -> str:
    """Which side of Xiong et al.'s law an exponent of the last layer's gradient against depth falls
    on: nearer the exponent measured for pre-ln or for post-ln beside it. zero: the gradient was
    exactly 0 at every depth (a branch scaled by 0 at init, as SkipInit's and ReZero's), so there is
    no exponent to fit, although the design has the weight."""
    def ok(x):
        return x is not None and x == x
    if zero:
        return "no exponent: the gradient is exactly 0 at init at every depth (the MLP branch is scaled by 0)"
    if not ok(e):
        return "not measured (no MLP output projection to probe)"
    if not (ok(pre) and ok(post)):
        return f"exponent {e:+.2f}"
    if abs(pre - post) < SEPARATION:
        return f"pre-ln ({pre:+.2f}) and post-ln ({post:+.2f}) do not differ here: no reading"
    side = "pre-ln" if abs(e - pre) <= abs(e - post) else "post-ln"
    return (f"like {side}: exponent {e:+.2f} against pre-ln's {pre:+.2f} and post-ln's {post:+.2f}"
            + (" (the gradient near the output shrinks as the model deepens)" if side == "pre-ln" else
               " (the gradient near the output stays large as the model deepens: warmup territory)"))


def _zero_gradient(rows: list[dict]) -> set[str]:
    """The designs whose last-layer W2 gradient was exactly 0 in every probed model."""
    values: dict[str, list[float]] = {}
    for r in rows:
        if r["kind"] == "model":
            values.setdefault(r["design"], []).append(r["last_w2_grad_norm"])
    return {d for d, vs in values.items() if all(v == 0 for v in vs)}


def _slopes(rows: list[dict]) -> tuple[int, dict]:
    deepest = max(r["depth"] for r in rows)
    grad_depth = depth_slopes(rows, "last_w2_grad_norm")
    grad_layer = layer_slopes(rows, "grad_norm", deepest)
    act_layer = layer_slopes(rows, "act_norm", deepest)
    return deepest, {d: {"last_w2_grad~depth": grad_depth.get(d), "grad_norm~layer": grad_layer.get(d),
                         "act_norm~layer": act_layer.get(d)} for d in dict.fromkeys(r["design"] for r in rows)}


def signal_summary(by_mode: dict[str, tuple[list[dict], dict]], own_inits: dict | None = None) -> dict:
    """Per mode ("xiong": the law's setting, "default": as the card trains them) and design: the
    exponent of the last layer's MLP-output gradient against depth, and of the per-layer gradient
    norm and stream RMS against the layer index at the deepest depth; the reading of the law.
    own_inits ({label: init}, from own_init) names the designs that kept their own init in Xiong et
    al.'s setting."""
    out = {"modes": {}, "law": LAW, "own_init": dict(own_inits or {})}
    for mode, (rows, skipped) in by_mode.items():
        if not rows:
            out["modes"][mode] = {"designs": {}, "skipped": skipped}
            continue
        deepest, slopes = _slopes(rows)
        pre, post = (slopes.get(n, {}).get("last_w2_grad~depth") for n in ("pre-ln", "post-ln"))
        zero = _zero_gradient(rows)
        for d, v in slopes.items():
            v["reading"] = reading(v["last_w2_grad~depth"], pre, post, zero=d in zero)
        out["modes"][mode] = {"designs": slopes, "skipped": skipped, "deepest": deepest,
                              "seeds": len({r["seed"] for r in rows}),
                              "depths": sorted({r["depth"] for r in rows})}
    return out


LAW = ("Xiong et al. 2020, Theorem 1: at initialisation (Xavier init, W_Q = W_K = 0, ReLU MLP) the gradient of "
       "the last layer's weights is O(d sqrt(ln d)) for Post-LN and O(d sqrt(ln d / L)) for Pre-LN, so its "
       "exponent against depth L is about 0 for Post-LN and -1/2 for Pre-LN")
