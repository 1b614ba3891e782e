"""Named probe settings (modes) and study 002's linear + LayerNorm simulation.

    default   each design with its own defaults (its own init)
    xiong     Xiong et al. 2020, Thm 1: Xavier init, ReLU MLP, W_Q = W_K = 0 in every layer (a design
              whose init is part of it keeps that init: own_init)
    rank      rank collapse (study 001): the attention skip removed, with and without shaped
              attention; `rank_variants` names the probe "designs" of this mode
    sim       study 002: gradients through a stack of Linear + LayerNorm layers (linear_ln_sim)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from ..errors import ReslabError
from ..model.gpt import GPT
from ..model.registry import DESIGNS, resolve

MODES = ("default", "xiong", "rank", "sim")

# The rank mode's "designs": pre-ln without the attention skip, standard vs shaped attention
# (shaped needs init 'identity' so that it starts as A = I, as in SAS), with and without SAS's
# value / projection identity, plus sas and plain pre-ln. Without vp identity the attention branch
# is still the random linear map W_P W_V, whose product over many layers slowly aligns the tokens
# (mean cosine ~0.3 at width 128, 48 layers); with it the tokens keep their embedding similarity.
RANK_VARIANTS: dict[str, dict] = {
    "pre-ln": {"design": "pre-ln"},
    "pre-ln-noskip": {"design": "pre-ln", "attn_res": False},
    "pre-ln-noskip-shaped": {"design": "pre-ln", "attn_res": False, "shaped_attention": True,
                             "init": "identity"},
    "pre-ln-noskip-shaped-vpid": {"design": "pre-ln", "attn_res": False, "shaped_attention": True,
                                  "vp_identity": True, "init": "identity"},
    "sas": {"design": "sas"},
}
SIM_KINDS = ("pre", "post")


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ReslabError(f"--mode: unknown mode {mode!r}; choose one of {', '.join(MODES)}")


def check_design(name: str, mode: str) -> None:
    known = {"rank": list(RANK_VARIANTS), "sim": list(SIM_KINDS)}.get(mode, list(DESIGNS))
    if name not in known:
        raise ReslabError(f"--designs: unknown design {name!r} for mode {mode}; choose from {', '.join(known)}")


def own_init(model: ModelConfig) -> str | None:
    """The init scheme that is part of the design (fixup, t-fixup, sub-ln, deepnorm, sas's identity, or
    one set on purpose, e.g. post-ln with ds-init), or None where the design uses the generic GPT-2
    init. In the xiong mode Xavier stands in for the generic init only: an init-based design under
    Xavier would be another model (T-Fixup under Xavier is a plain residual net without norms)."""
    init = resolve(model).init
    return None if init in ("gpt2", "xavier") else init


def own_inits(models: dict[str, ModelConfig]) -> dict[str, str]:
    """{label: init} for the models that keep their own init in the xiong mode (own_init), in order."""
    return {label: init for label, init in ((k, own_init(m)) for k, m in models.items()) if init}


def config_for(name: str, mode: str, depth: int, width: int, heads: int, seq: int) -> ModelConfig:
    base = {"n_layer": depth, "n_embd": width, "n_head": heads, "block_size": seq, "dropout": 0.0}
    if mode == "rank":
        return ModelConfig(**{**base, **RANK_VARIANTS[name]})
    if mode == "xiong":
        init = own_init(ModelConfig(design=name, **base)) or "xavier"
        return ModelConfig(design=name, init=init, mlp="relu", **base)
    return ModelConfig(design=name, **base)


@torch.no_grad()
def zero_query_key(model: GPT) -> None:
    """W_Q = W_K = 0 in every layer: the first 2C rows of the fused c_attn (or c_qk) weight."""
    for block in model.blocks:
        attn = block.attn
        fused = attn.c_attn if hasattr(attn, "c_attn") else attn.c_qk
        fused.weight[: 2 * attn.n_embd].zero_()
        if fused.bias is not None:
            fused.bias[: 2 * attn.n_embd].zero_()


def build(name: str, mode: str, depth: int, seed: int, width: int, heads: int, seq: int) -> GPT:
    """The probed model of one (design, depth, seed) under a mode (not 'sim')."""
    model = GPT(config_for(name, mode, depth, width, heads, seq), seed=seed)
    if mode == "xiong":
        zero_query_key(model)
    return model


def linear_ln_sim(depth: int, width: int, seed: int, kind: str = "pre", batch: int = 64) -> dict:
    """Study 002: gradients through `depth` layers of Linear (Xavier-normal, no bias) + LayerNorm.

        pre   x_{l+1} = x_l + W_l N(x_l),   output N(x_L)
        post  x_{l+1} = N(x_l + W_l x_l),   output x_L
    Loss: mean of (output . r) over the batch, r a fixed random unit-variance readout, so the
    backward pass starts from a gradient of the same size at every depth. Returns per-layer lists
    (index 0 = layer 1): grad_norm ||dloss/dW_l||, grad_var Var(dloss/dW_l entries), and
    act_grad_norm ||dloss/dx_l|| per example (averaged)."""
    if kind not in SIM_KINDS:
        raise ReslabError(f"linear_ln_sim: kind must be 'pre' or 'post', got {kind!r}")
    g = torch.Generator().manual_seed(seed)
    std = math.sqrt(2.0 / (width + width))  # Xavier-normal
    weights = [nn.Parameter(torch.randn(width, width, generator=g) * std) for _ in range(depth)]
    x = torch.randn(batch, width, generator=g).requires_grad_(True)
    r = torch.randn(width, generator=g)
    xs = []  # the input of each layer, kept to read dloss/dx_l
    for w in weights:
        x.retain_grad()
        xs.append(x)
        if kind == "pre":
            x = x + F.layer_norm(x, (width,)) @ w.T
        else:
            x = F.layer_norm(x + x @ w.T, (width,))
    out = F.layer_norm(x, (width,)) if kind == "pre" else x
    loss = (out @ r).mean()
    loss.backward()
    return {
        "grad_norm": [w.grad.norm().item() for w in weights],
        "grad_var": [w.grad.var().item() for w in weights],
        "act_grad_norm": [t.grad.norm(dim=-1).mean().item() for t in xs],
    }
