"""ReZero: no norms; each layer's branches enter through one trainable scalar g, zero at init.

    x = x + g*A(x);  x = x + g*M(x)
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from . import base


class ReZeroBlock(base.Block):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.attn, self.attn_residual = base.attention(cfg, layer), base.residual(cfg, cfg.attn_res)
        self.mlp, self.mlp_residual = base.mlp(cfg), base.residual(cfg, cfg.ffn_res)
        self.g = nn.Parameter(torch.zeros(()))

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.g)

    def forward(self, x):
        x = self.attn_residual(x, self.g * self.attn(x))
        x = self.mlp_residual(x, self.g * self.mlp(x))
        return x
