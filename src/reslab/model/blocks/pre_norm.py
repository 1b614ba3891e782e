"""Pre-norm blocks: the branch reads a normalised copy; the stream itself is never normalised.

    pre-ln       x = x + A(N1(x));              x = x + M(N2(x))
    lns          x = x + A(N1(x) / sqrt(l));    x = x + M(N2(x) / sqrt(l))
    sandwich-ln  x = x + N2(A(N1(x)));          x = x + N4(M(N3(x)))     (peri-ln: same block)

pre-ln and sandwich-ln take the forward's AttentionCarry (`carry`), which their attention reads and
updates for the value residual (ResFormer) and residual attention (RealFormer); see attention.py.

    pre-ln:  x ──┬──────────────────(+)──┬──────────────────(+)──>
                 └─ N1 ── A ──────────┘  └─ N2 ── M ──────────┘
"""

from __future__ import annotations

import math

from ..config import ModelConfig
from . import base


class PreLNBlock(base.Block):
    """x = x + A(N1(x));  x = x + M(N2(x)).  attn_res / ffn_res = False drop the skip (study 000)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        # dyt_alpha_attn / _mlp (pre-ln only; None elsewhere): DyT's LLaMA recipe, a steeper tanh before attention
        self.norm1, self.attn, self.attn_residual = (base.norm(cfg, alpha=cfg.dyt_alpha_attn), base.attention(cfg, layer),
                                                     base.residual(cfg, cfg.attn_res))
        self.norm2, self.mlp, self.mlp_residual = (base.norm(cfg, alpha=cfg.dyt_alpha_mlp), base.mlp(cfg),
                                                   base.residual(cfg, cfg.ffn_res))

    def forward(self, x, carry=None):
        x = self.attn_residual(x, self.attn(self.norm1(x), carry))
        x = self.mlp_residual(x, self.mlp(self.norm2(x)))
        return x


class LNSBlock(PreLNBlock):
    """LayerNorm Scaling: x = x + A(N1(x) / sqrt(l));  x = x + M(N2(x) / sqrt(l))."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.depth_scale = 1.0 / math.sqrt(layer)

    def forward(self, x):
        x = self.attn_residual(x, self.attn(self.norm1(x) * self.depth_scale))
        x = self.mlp_residual(x, self.mlp(self.norm2(x) * self.depth_scale))
        return x


class SandwichBlock(base.Block):
    """Sandwich / Peri-LN: x = x + N_out(A(N_in(x)));  x = x + N_out(M(N_in(x)))."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.attn_norm_in, self.attn, self.attn_norm_out = base.norm(cfg), base.attention(cfg, layer), base.norm(cfg)
        self.mlp_norm_in, self.mlp, self.mlp_norm_out = base.norm(cfg), base.mlp(cfg), base.norm(cfg)
        self.attn_residual, self.mlp_residual = base.residual(cfg, cfg.attn_res), base.residual(cfg, cfg.ffn_res)

    def branch_outputs(self):
        # N_out would undo a scaled W_P / W2, so an init-mode gain scales N_out's affine instead.
        return [self.attn_norm_out, self.mlp_norm_out]

    def forward(self, x, carry=None):
        x = self.attn_residual(x, self.attn_norm_out(self.attn(self.attn_norm_in(x), carry)))
        x = self.mlp_residual(x, self.mlp_norm_out(self.mlp(self.mlp_norm_in(x))))
        return x
