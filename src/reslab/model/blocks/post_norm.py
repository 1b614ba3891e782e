"""Post-norm blocks: the sum of skip and branch is normalised, so the stream stays at unit scale.

    post-ln   x = N1(x + A(x));            x = N2(x + M(x))
    deepnorm  x = N1(a*x + A(x));          x = N2(a*x + M(x)),     a = (2L)^(1/4)  (constant)
    admin     x = N1(w1*x + A(x));         x = N2(w2*x + M(x)),    w per channel, trainable,
              initialised to sqrt((S+1)/ln(S+1) - 1), S = 2L residual sublayers
    b2t       y = N1(x + A(x));            out = N2(y + M(y) + x)  (a skip from the block input)

    post-ln:  x ──┬──(+)── N1 ──┬──(+)── N2 ──>
                  └─A──┘        └─M──┘

post-ln takes the forward's AttentionCarry (`carry`), which its attention reads and updates for the
value residual (ResFormer) and residual attention (RealFormer); see attention.py.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..config import ModelConfig
from . import base


class PostLNBlock(base.Block):
    """x = N1(x + A(x));  x = N2(x + M(x))."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.attn, self.attn_residual, self.norm1 = base.attention(cfg, layer), base.residual(cfg, cfg.attn_res), base.norm(cfg)
        self.mlp, self.mlp_residual, self.norm2 = base.mlp(cfg), base.residual(cfg, cfg.ffn_res), base.norm(cfg)

    def forward(self, x, carry=None):
        x = self.norm1(self.attn_residual(x, self.attn(x, carry)))
        x = self.norm2(self.mlp_residual(x, self.mlp(x)))
        return x


def deepnorm_alpha(n_layer: int) -> float:
    """DeepNet's skip scale for a decoder-only model: (2L)^(1/4)."""
    return (2 * n_layer) ** 0.25


def deepnorm_beta(n_layer: int) -> float:
    """DeepNet's init scale for v, out-proj, fc1, fc2 of a decoder-only model: (8L)^(-1/4)."""
    return (8 * n_layer) ** -0.25


def admin_omega(n_layer: int) -> float:
    """Admin's closed-form skip weight, w = sqrt((S+1)/ln(S+1) - 1) with S = 2L sublayers."""
    S = 2 * n_layer
    return math.sqrt((S + 1) / math.log(S + 1) - 1)


class DeepNormBlock(PostLNBlock):
    """x = N1(a*x + A(x));  x = N2(a*x + M(x)),  a = (2L)^(1/4)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.a = deepnorm_alpha(cfg.n_layer)

    def forward(self, x):
        x = self.norm1(self.attn_residual(self.a * x, self.attn(x)))
        x = self.norm2(self.mlp_residual(self.a * x, self.mlp(x)))
        return x


class AdminBlock(PostLNBlock):
    """x = N1(w1*x + A(x));  x = N2(w2*x + M(x)),  w trainable per channel, closed-form init."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.w1 = nn.Parameter(torch.empty(cfg.n_embd))
        self.w2 = nn.Parameter(torch.empty(cfg.n_embd))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.w1, admin_omega(self.n_layer))
        nn.init.constant_(self.w2, admin_omega(self.n_layer))

    def forward(self, x):
        x = self.norm1(self.attn_residual(self.w1 * x, self.attn(x)))
        x = self.norm2(self.mlp_residual(self.w2 * x, self.mlp(x)))
        return x


class B2TBlock(PostLNBlock):
    """Bottom-to-top: y = N1(x + A(x));  out = N2(y + M(y) + x)."""

    def forward(self, x):
        y = self.norm1(self.attn_residual(x, self.attn(x)))
        return self.norm2(self.mlp_residual(y, self.mlp(y)) + x)
