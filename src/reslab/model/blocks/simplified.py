"""Simplified blocks (He & Hofmann, study 001). SA is shaped attention with identity value and
projection (see attention.py); g_attn, a_FF, b_FF are trainable scalars.

    sas    h = g_attn * SA(N1(x))                 (no attention skip)
           out = a_FF*h + b_FF*M(N2(h))           a_FF = 1, b_FF = 0.1 at init
    sas-p  out = g_attn*SA(N(x)) + b_FF*M(N(x))   (parallel, one shared norm, no skip at all)

norm_free: every norm but the first layer's is removed.
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from ..registry import design_options
from . import base


class _SimplifiedBlock(base.Block):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        opts = design_options(cfg)
        self.norm_kind = "none" if opts.norm_free and layer > 1 else cfg.norm
        self.ff_gain_init = opts.ff_gain
        self.g_attn = nn.Parameter(torch.ones(()))
        self.b_ff = nn.Parameter(torch.full((), opts.ff_gain))

    def reset_parameters(self) -> None:
        nn.init.ones_(self.g_attn)
        nn.init.constant_(self.b_ff, self.ff_gain_init)


class SASBlock(_SimplifiedBlock):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.norm1, self.attn = base.norm(cfg, self.norm_kind), base.attention(cfg, layer)
        self.norm2, self.mlp = base.norm(cfg, self.norm_kind), base.mlp(cfg)
        self.attn_residual, self.mlp_residual = base.residual(cfg, cfg.attn_res), base.residual(cfg, cfg.ffn_res)
        self.a_ff = nn.Parameter(torch.ones(()))

    def reset_parameters(self) -> None:
        super().reset_parameters()
        nn.init.ones_(self.a_ff)

    def forward(self, x):
        h = self.attn_residual(x, self.g_attn * self.attn(self.norm1(x)))  # attn_res=False: no x
        return self.mlp_residual(self.a_ff * h, self.b_ff * self.mlp(self.norm2(h)))


class SASPBlock(_SimplifiedBlock):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.norm, self.attn, self.mlp = base.norm(cfg, self.norm_kind), base.attention(cfg, layer), base.mlp(cfg)
        # Residual points without a skip: they return (gain * branch) and are hook points.
        self.attn_residual, self.mlp_residual = base.residual(cfg, skip=False), base.residual(cfg, skip=False)

    def forward(self, x):
        n = self.norm(x)
        return self.attn_residual(x, self.g_attn * self.attn(n)) + self.mlp_residual(x, self.b_ff * self.mlp(n))
