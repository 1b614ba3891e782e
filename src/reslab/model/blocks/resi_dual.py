"""ResiDual (Pre-Post-LN): two residual streams, xa normalised after every sublayer (post-ln),
xd the plain sum of every branch output (pre-ln's stream), scaled by s to stay in fp16 range.

    start:          xa = emb,  xd = s*emb
    every sublayer: f = F(xa);  xd = xd + s*f;  xa = N(xa + f)
    head input:     y = xa + N_final(xd)      (see DualStream in gpt.py)
"""

from __future__ import annotations

from ..config import ModelConfig
from ..registry import design_options
from . import base


class ResiDualBlock(base.Block):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.s = design_options(cfg).scale
        self.attn, self.norm1 = base.attention(cfg, layer), base.norm(cfg)
        self.mlp, self.norm2 = base.mlp(cfg), base.norm(cfg)
        self.attn_residual, self.attn_dual_residual = base.residual(cfg), base.residual(cfg)
        self.mlp_residual, self.mlp_dual_residual = base.residual(cfg), base.residual(cfg)

    def forward(self, stream):
        xa, xd = stream
        f = self.attn(xa)
        xd = self.attn_dual_residual(xd, self.s * f)
        xa = self.norm1(self.attn_residual(xa, f))
        f = self.mlp(xa)
        xd = self.mlp_dual_residual(xd, self.s * f)
        xa = self.norm2(self.mlp_residual(xa, f))
        return xa, xd
