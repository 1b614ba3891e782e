"""Blocks that rescale or renormalise the BRANCH before it joins the skip.

    reordered-ln  x = x + N1(A(x));                   x = x + N2(M(x))            (OLMo 2)
    layerscale    x = x + diag(l1) A(N1(x));          x = x + diag(l2) M(N2(x))    (CaiT)

    reordered-ln:  x ──┬─────────────────(+)──┬─────────────────(+)──>   final N before the head
                       └── A ── N1 ───────┘   └── M ── N2 ───────┘
    layerscale:    x ──┬─────────────────────(+)──┬─────────────────────(+)──>   final N
                       └── N1 ── A ── *l1 ────┘   └── N2 ── M ── *l2 ────┘

reordered-ln: Team OLMo 2024, "2 OLMo 2 Furious". The norm moves from the branch INPUT (pre-ln)
to the branch OUTPUT: the branch reads the raw stream, and what it adds is normalised, so each
layer adds a bounded amount. The stream is never normalised until the final norm.

layerscale: Touvron, Cord, Sablayrolles, Synnaeve, Jegou 2021, "Going deeper with Image
Transformers" (CaiT). lambda is a learned PER-CHANNEL scale of the BRANCH (never the skip),
initialised to a small eps chosen by depth: 0.1 up to 18 layers, 1e-5 up to 24, 1e-6 beyond
(zoo.cait_layerscale_init; branch_scale_init overrides it). It is the residual point's
branch_weight (residual.py) with branch_scale = "channel".

Both compose with the learned scales of every residual point (skip_scale: s multiplies the
skip), with the runtime branch gain and ProRes alpha (which multiply the branch):
    out = s * x + a * (gain * alpha * branch).
"""

from __future__ import annotations

from ..config import ModelConfig
from . import base


class ReorderedLNBlock(base.Block):
    """OLMo 2's reordered norm: x = x + N1(A(x));  x = x + N2(M(x)).  The branch input is not normalised."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.attn, self.attn_norm, self.attn_residual = base.attention(cfg, layer), base.norm(cfg), base.residual(cfg, cfg.attn_res)
        self.mlp, self.mlp_norm, self.mlp_residual = base.mlp(cfg), base.norm(cfg), base.residual(cfg, cfg.ffn_res)

    def branch_outputs(self):
        # The output norm would undo a scaled W_P / W2, so an init-mode gain scales its affine instead.
        return [self.attn_norm, self.mlp_norm]

    def forward(self, x):
        x = self.attn_residual(x, self.attn_norm(self.attn(x)))
        x = self.mlp_residual(x, self.mlp_norm(self.mlp(x)))
        return x


def layerscale_init(cfg: ModelConfig) -> float:
    """lambda's initial value: branch_scale_init where the model's branch scale is per channel
    (design layerscale: CaiT's eps by depth unless set), else CaiT's eps by depth (a layerscale
    layer chosen per layer inside another design)."""
    from ..zoo import cait_layerscale_init  # the zoo registers this module's blocks
    if cfg.branch_scale == "channel" and cfg.branch_scale_init is not None:
        return cfg.branch_scale_init
    return cait_layerscale_init(cfg.n_layer)


class LayerScaleBlock(base.Block):
    """CaiT's LayerScale: x = x + diag(l1) A(N1(x));  x = x + diag(l2) M(N2(x)).

    Pre-ln with a learned per-channel scale on each branch output: l1 = attn_residual.branch_weight,
    l2 = mlp_residual.branch_weight, shape (C,), both initialised to eps (layerscale_init)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        eps = layerscale_init(cfg)
        self.norm1, self.attn = base.norm(cfg), base.attention(cfg, layer)
        self.attn_residual = base.residual(cfg, cfg.attn_res, branch_scale="channel", branch_scale_init=eps)
        self.norm2, self.mlp = base.norm(cfg), base.mlp(cfg)
        self.mlp_residual = base.residual(cfg, cfg.ffn_res, branch_scale="channel", branch_scale_init=eps)

    def forward(self, x):
        x = self.attn_residual(x, self.attn(self.norm1(x)))     # x + l1 * A(N1(x))
        x = self.mlp_residual(x, self.mlp(self.norm2(x)))       # x + l2 * M(N2(x))
        return x
