"""Initialisation schemes. Every parameter is written here from one torch.Generator, so the init
does not depend on (or disturb) the global RNG that data order or dropout might use.

    gpt2       every weight N(0, std); output projections (attn W_P, MLP W2) N(0, std/sqrt(2L))
    deepnorm   Xavier-normal; W_V, W_P, W1, W2 multiplied by b = (8L)^(-1/4)   (DeepNet)
    t-fixup    Xavier-normal; W_V, W_P, W1, W2 multiplied by 0.67 * L^(-1/4)     (T-Fixup)
    identity   gpt2, then W_Q = 0 (shaped attention = I) and the extra first-layer W_V = 0  (SAS)
    xavier     Xavier-normal everywhere in the blocks (the setting of Xiong et al. 2020)
Embeddings (and an untied head) are N(0, std) in every scheme; biases are 0; norms are 1 and 0.
Canon layers' depthwise kernels (blocks/canon.py) are U(-1/sqrt(K), 1/sqrt(K)) in every scheme, as
nn.Conv1d's default that the paper's code keeps.
After the scheme, gain_mode = "init" multiplies each branch's last affine map (W_P and W2, or
the output norm of sandwich / peri-ln) by branch_gain.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .attention import CausalSelfAttention
from .blocks.base import output_projections
from .blocks.canon import CanonConv
from .blocks.post_norm import deepnorm_beta
from .mlp import MLP


def _normal_(t: torch.Tensor, std: float, g: torch.Generator) -> None:
    t.copy_(torch.empty(t.shape, dtype=torch.float32).normal_(0.0, std, generator=g).to(t))


def _xavier_(t: torch.Tensor, g: torch.Generator, gain: float = 1.0) -> None:
    fan_out, fan_in = t.shape
    _normal_(t, gain * math.sqrt(2.0 / (fan_in + fan_out)), g)


def _value_weight(attn: CausalSelfAttention) -> torch.Tensor | None:
    """The W_V rows of the fused [W_Q; W_K; W_V] matrix (None with identity values)."""
    return attn.c_attn.weight[2 * attn.n_embd:] if attn.value == "linear" else None


def _branch_weights(block: nn.Module) -> tuple[list, list]:
    """(q/k weights, v/out/fc1/fc2 weights) of one block, as views that can be written in place."""
    qk, vo = [], []
    for m in block.modules():
        if isinstance(m, CausalSelfAttention):
            C = m.n_embd
            fused = m.c_attn.weight if m.value == "linear" else m.c_qk.weight
            qk += [fused[:C], fused[C:2 * C]]
            if m.value == "linear":
                vo += [_value_weight(m), m.c_proj.weight]
            elif m.value == "identity+linear":
                vo.append(m.c_v.weight)
        elif isinstance(m, MLP):
            vo += [m.c_fc.weight, m.c_proj.weight]
    return qk, vo


@torch.no_grad()
def init_weights(model: nn.Module, cfg, generator: torch.Generator) -> None:
    """Write every parameter of a GPT model according to cfg.init (cfg is resolved)."""
    g, std, L = generator, cfg.init_std, cfg.n_layer
    for m in model.modules():
        if isinstance(m, nn.Linear):
            _normal_(m.weight, std, g)
            if m.bias is not None:
                m.bias.zero_()
        elif isinstance(m, nn.Embedding):
            _normal_(m.weight, std, g)
        elif isinstance(m, CanonConv):
            bound = 1.0 / math.sqrt(m.weight.shape[1])
            m.weight.copy_(torch.empty(m.weight.shape, dtype=torch.float32).uniform_(-bound, bound, generator=g).to(m.weight))
        elif hasattr(m, "reset_parameters"):
            # norms, blocks, attention, residual points, gates, ...: every module that owns parameters
            # or buffers beyond Linear / Embedding rewrites them here, so a model built on the meta
            # device and materialised is the same model as one built directly (tested)
            m.reset_parameters()

    for block in model.blocks:
        qk, vo = _branch_weights(block)
        if cfg.init == "gpt2" or cfg.init == "identity":
            for proj in output_projections(block):
                _normal_(proj.weight, std / math.sqrt(2 * L), g)
        elif cfg.init in ("deepnorm", "t-fixup", "xavier"):
            scale = {"deepnorm": deepnorm_beta(L), "t-fixup": 0.67 * L ** -0.25, "xavier": 1.0}[cfg.init]
            for w in qk:
                _xavier_(w, g)
            for w in vo:
                _xavier_(w, g, gain=scale)
        if cfg.init == "identity":
            for m in block.modules():
                if isinstance(m, CausalSelfAttention):
                    (m.c_attn if m.value == "linear" else m.c_qk).weight[: m.n_embd].zero_()
                    if m.value == "identity+linear":
                        m.c_v.weight.zero_()
        if cfg.gain_mode == "init" and cfg.branch_gain != 1.0:
            for proj in block.branch_outputs():
                proj.weight.mul_(cfg.branch_gain)
                if getattr(proj, "bias", None) is not None:  # RMSNorm (an output norm) has no bias
                    proj.bias.mul_(cfg.branch_gain)
