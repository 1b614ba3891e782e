"""Mean-variance split residuals (Lu 2026, "Mean Mode Screaming: Mean--Variance Split Residuals for
1000-Layer Diffusion Transformers", arXiv 2605.06169).

A standard residual point writes x + F. MV-Split splits the write into the token mean and the
centred variation, each with its own learned per-channel gain:

    split(x, F) = x + beta (.) (F - m(F)) + alpha (.) (m(F) - m(x))

    m(z)    the token mean of z (see the causal reading below)
    beta    (C,) the gain of the centred update, init beta_init = 0.03
    alpha   (C,) the leaky replacement of the trunk mean: the mean of the result is
            (1 - alpha) m(x) + alpha m(F); init alpha_init = 0 (the trunk mean is kept)

Two blocks, one per placement seen in the code read:

    mv-split      (the paper's code, erwold/mv-split dit.py: FusedMVSplitNorm1 on both paths)
                  h = N1(split(x, A(x)));  out = N2(split(h, M(h)))     post-norm, no final N
    mv-split-pre  (x-transformers' mv_split_residual: MVSplitResidualUpdate at pre-norm residuals)
                  h = split(x, A(N1(x)));  out = split(h, M(N2(h)))     final N before the head

    post:   x ──┬── A ──> split(x, .) ── N1 ──┬── M ──> split(h, .) ── N2 ──>
                └─────────────^                └────────────^

Readings reslab takes where the sources leave a choice open:
  - Causal means. The paper's model is a bidirectional DiT and both codes average over EVERY token of
    the sequence; in a causal language model that would let position t read later tokens. reslab
    takes the prefix mean m_t(z) = (1/t) sum_(s<=t) z_s (the causal running mean), which equals the
    paper's mean at the last position and keeps the model causal.
  - The paper's code fixes the RMSNorm gain to 1 in its fused kernel (its fallback learns one); reslab
    uses the model's norm with its usual affine parameters.
  - x-transformers' `learned = True` (alpha, beta from a Linear of the mean) is not offered: it is
    not in the paper's code read.
  - The runtime branch gain g multiplies F before the split (F = g A(.)), as at every residual point.
The paper's body was not available to read here (only its abstract and its code); the formula is
the one its code and its fused kernel's docstring state.
"""

from __future__ import annotations

import torch
from torch import nn

from ..attention import causal_running_mean
from ..config import ModelConfig
from ..registry import design_options
from . import base


class MVSplit(nn.Module):
    """One residual point: x + beta (F - m(F)) + alpha (m(F) - m(x)), m the causal running mean."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        opts = design_options(cfg)
        self.alpha_init, self.beta_init = opts.alpha_init, opts.beta_init
        self.gain = cfg.branch_gain if cfg.gain_mode == "runtime" else 1.0
        self.alpha = nn.Parameter(torch.empty(cfg.n_embd))
        self.beta = nn.Parameter(torch.empty(cfg.n_embd))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.alpha, self.alpha_init)
        nn.init.constant_(self.beta, self.beta_init)

    def forward(self, x: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
        f = update if self.gain == 1.0 else self.gain * update
        mean_f = causal_running_mean(f)                       # (B, T, C): position t averages 1..t
        return x + self.beta * (f - mean_f) + self.alpha * (mean_f - causal_running_mean(x))


class MVSplitBlock(base.Block):
    """The paper's DiT block: h = N1(split(x, A(x))); out = N2(split(h, M(h)))."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.attn, self.attn_split, self.norm1 = base.attention(cfg, layer), MVSplit(cfg), base.norm(cfg)
        self.mlp, self.mlp_split, self.norm2 = base.mlp(cfg), MVSplit(cfg), base.norm(cfg)

    def forward(self, x):
        h = self.norm1(self.attn_split(x, self.attn(x)))
        return self.norm2(self.mlp_split(h, self.mlp(h)))


class MVSplitPreBlock(base.Block):
    """x-transformers' placement: h = split(x, A(N1(x))); out = split(h, M(N2(h)))."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.norm1, self.attn, self.attn_split = base.norm(cfg), base.attention(cfg, layer), MVSplit(cfg)
        self.norm2, self.mlp, self.mlp_split = base.norm(cfg), base.mlp(cfg), MVSplit(cfg)

    def forward(self, x):
        h = self.attn_split(x, self.attn(self.norm1(x)))
        return self.mlp_split(h, self.mlp(self.norm2(h)))
