"""NormFormer (Shleifer, Weston, Ott 2021): pre-ln with three extra normalisation operations.

    x = x + N_a(A_gamma(N1(x)))          N_a: a norm on the attention branch's output
                                         A_gamma: each head's output times a learned gamma_h (1 at init)
    x = x + W2 N_f(act(W1 N2(x)))        N_f: a norm over the MLP's hidden units, after the activation
    head input = N_final(x)

Each of the three is an option ([model.options]: head_scale, attn_out_norm, ffn_mid_norm), all on;
with all three off it is pre-ln. The paper's residual scaling (lambda_resid, used only for its
smallest models) is not included.

    x ──┬───────────────────────────────(+)──┬─────────────────────────────────(+)──>
        └─ N1 ── A (heads x gamma) ── N_a ┘  └─ N2 ── W1 ── act ── N_f ── W2 ──┘
"""

from __future__ import annotations

from torch import nn

from ..config import ModelConfig
from ..registry import design_options
from . import base


class NormFormerBlock(base.Block):
    """x = x + N_a(A_gamma(N1(x)));  x = x + W2 N_f(act(W1 N2(x)))."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        opts = design_options(cfg, layer)
        self.norm1, self.attn = base.norm(cfg), base.attention(cfg, layer, head_scale=opts.head_scale)
        self.attn_out_norm = base.norm(cfg) if opts.attn_out_norm else nn.Identity()
        self.norm2, self.mlp = base.norm(cfg), base.mlp(cfg, mid_norm=opts.ffn_mid_norm)
        self.attn_residual = base.residual(cfg, cfg.attn_res)
        self.mlp_residual = base.residual(cfg, cfg.ffn_res)

    def branch_outputs(self):
        # N_a would undo a scaled W_P, so an init-mode gain scales N_a's affine instead (as sandwich-ln)
        outs = base.output_projections(self)
        return outs if isinstance(self.attn_out_norm, nn.Identity) else [self.attn_out_norm, outs[-1]]

    def forward(self, x, carry=None):
        x = self.attn_residual(x, self.attn_out_norm(self.attn(self.norm1(x), carry)))
        x = self.mlp_residual(x, self.mlp(self.norm2(x)))
        return x
