"""mix-pre-post: each sublayer's update is a learned mix of the pre-ln and post-ln placements.

    u = x + F(N1(x))                     the pre-ln update of one sublayer (F = attention or MLP)
    x = (1 - m) * u + m * N2(u)          m = sigmoid(b), one learned b per sublayer

    m = 0 is pre-ln (the stream is never normalised); m = 1 normalises the stream after every
    sublayer, as post-ln does (x = N(x + F(.))). The network learns, layer by layer, how much of
    each it wants. Options ([model.options]): mix_init, m at initialisation; learn_mix = false
    keeps m fixed at mix_init.

    x ──┬────────────── (+) ── u ──┬────────────── (1-m) ──(+)──>
        └─ N1 ── F ──────┘         └── N2 ──────── m ──────┘

This file is the whole plugin: a block built from reslab's parts, its options, and one call to
reslab.register_design. It never touches reslab's own files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

import reslab
from reslab.model.blocks import base

__version__ = "0.1.0"


@dataclass(frozen=True)
class MixOptions:
    mix_init: float = 0.5       # m at initialisation, in (0, 1)
    learn_mix: bool = True      # false: m stays at mix_init

    def __post_init__(self):
        if not 0.0 < self.mix_init < 1.0:
            raise ValueError(f"mix_init must be in (0, 1), got {self.mix_init}")


class MixPrePostBlock(base.Block):
    """u = x + A(N1(x)); x = (1-m_A) u + m_A P1(u); then the same for the MLP with N2, P2, m_M."""

    def __init__(self, cfg, layer: int):
        super().__init__(cfg, layer)
        self.options = reslab.design_options(cfg)
        # pre-ln's parts under pre-ln's names (norm1, attn, norm2, mlp), plus the two post norms
        self.norm1, self.attn, self.attn_residual = base.norm(cfg), base.attention(cfg, layer), \
            base.residual(cfg, cfg.attn_res)
        self.norm2, self.mlp, self.mlp_residual = base.norm(cfg), base.mlp(cfg), base.residual(cfg, cfg.ffn_res)
        self.post_norm1, self.post_norm2 = base.norm(cfg), base.norm(cfg)
        # b = logit(m): one per sublayer; a buffer when the mix is fixed, so it is saved but not trained
        logits = torch.empty(2)
        if self.options.learn_mix:
            self.mix_logit = nn.Parameter(logits)
        else:
            self.register_buffer("mix_logit", logits)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        m = self.options.mix_init
        with torch.no_grad():
            self.mix_logit.fill_(math.log(m / (1.0 - m)))

    def mix(self) -> torch.Tensor:
        """(m_A, m_M), each in (0, 1)."""
        return torch.sigmoid(self.mix_logit)

    def forward(self, x, carry=None):
        m_attn, m_mlp = self.mix()
        u = self.attn_residual(x, self.attn(self.norm1(x), carry))
        x = (1 - m_attn) * u + m_attn * self.post_norm1(u)
        u = self.mlp_residual(x, self.mlp(self.norm2(x)))
        x = (1 - m_mlp) * u + m_mlp * self.post_norm2(u)
        return x


reslab.register_design(
    "mix-pre-post", MixPrePostBlock,
    formula="u = x + F(N1(x)); x = (1 - m) u + m N2(u), m = sigmoid(b) learned per sublayer "
            "(m = 0: pre-ln; m = 1: the stream normalised after every sublayer, as in post-ln)",
    reference="reslab example plugin (examples/mix-pre-post)",
    options=MixOptions,
    prores=True,                  # its residual points are reslab's, so ProRes' alpha applies
    partial_residual=True,        # attn_res / ffn_res drop u's skip, as in pre-ln
    attention_carry=True,         # passes the attention carry (value residual, residual attention)
)
