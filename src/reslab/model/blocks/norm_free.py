"""Normalisation replaced, the block part: GPAS (Gradient-Preserving Activation Scaling).

The norms of this family (derf, seednorm, rmsnorm-nogain) are norm kinds in model/norms.py and
compose with every design that takes them (`norm = "derf"`); GPAS changes the block, so it is here.

GPAS: Chen, Xu, Liu, ..., Yin, Yang 2025, "GPAS: Accelerating Convergence of LLM Pretraining via
Gradient-Preserving Activation Scaling" (arXiv 2506.22049; code github.com/dandingsky/GPAS,
peft_pretraining/modeling_llama.py, `GPASBlock` and norm_type "pre_gpas"). A pre-ln layer whose
stream is scaled down after each sublayer's residual add, while the gradient passes unscaled:

    x' = x + A(N1(x));    x = x' - SiLU(alpha_l) * sg(x')
    x' = x + M(N2(x));    x = x' - SiLU(alpha_l) * sg(x')

sg is the stop-gradient: the forward value is (1 - SiLU(alpha_l)) x', the backward pass treats
sg(x') as a constant, so d x / d x' = I (the gradient reaching x' is the one leaving x, unscaled)
and d x / d alpha_l = -SiLU'(alpha_l) x'. alpha_l is ONE learned scalar per layer, shared by the
layer's two sublayers (the official code builds one GPASBlock per decoder layer and applies it
after both adds), 0 at init: SiLU(0) = 0, so the model starts as pre-ln. The head reads N(x_L).

    x ──┬──────────────(+)── x' ──(-SiLU(a_l) sg(x'))──┬──────────────(+)── x' ──(-SiLU(a_l) sg(x'))──>
        └─ N1 ── A ─────┘                              └─ N2 ── M ─────┘

Where the paper leaves a choice, reslab's reading: the scale is the official code's SiLU (its
`act_fn` default; other activations were options there); alpha is learned (the paper's figure also
allows a fixed one; not offered); GPAS on pre-ln only (the paper also pairs it with Sandwich-LN,
DeepNorm, Mix-LN and LNS: not built here). The official 7B runs clip alpha's gradient separately;
reslab's optimiser treats alpha like every other scalar (never weight-decayed, clipped globally).

speedrun-lambdas: the per-sublayer residual / post lambdas of modded-nanogpt's newest stored record
(train_gpt.py at f411b3d3, 2026-08-01: `resid_lambdas`, `post_lambdas`, both of shape (L, 2)), on
reslab's `speedrun` design (blocks/speedrun.py; its x0 / U-net / value-embedding / backout paths
and options unchanged). The record's update of layer l, sublayer k (attention, then MLP), with its
weightless RMS norm N:

    x = r_(l,k) x + p_(l,k) F_k(N(x))          r = sqrt(1.1) (1.1 per layer), p = 1 at init

(the record also adds its x0 / bigram gates in the attention update and uses MUDD coefficients
on its last layer; reslab keeps its own x0 mix a_l x + b_l x_0 before the block, and the lambdas on
every layer). The record trains r with 5x the Adam learning rate; reslab does not (one optimiser
setting for every scalar). The record's norm is `norm = "rmsnorm-nogain"`; the design's default
stays speedrun's, so speedrun vs speedrun-lambdas differ by the lambdas alone. In reslab r_(l,1)
(`attn_residual.skip_lambda`) and speedrun's a_l (`resid_lambda`, the x0 mix before the block) both
multiply x: a redundant pair, a_l starting at 1. They are a design,
not a speedrun option: a new option would change every speedrun run's identity (the resolved
options table is hashed whole).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from ..residual import Residual
from .pre_norm import PreLNBlock
from .speedrun import SpeedrunBlock


class GPASBlock(PreLNBlock):
    """x' = x + F(N(x)); x = x' - SiLU(alpha_l) sg(x') after each sublayer, alpha_l one per layer."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.gpas_alpha = nn.Parameter(torch.empty(()))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.gpas_alpha)   # SiLU(0) = 0: pre-ln at init

    def scale_down(self, x: torch.Tensor) -> torch.Tensor:
        # the value is (1 - SiLU(a)) x; the subtracted copy is detached, so x's gradient is unscaled
        return x - F.silu(self.gpas_alpha) * x.detach()

    def forward(self, x, carry=None):
        x = self.scale_down(self.attn_residual(x, self.attn(self.norm1(x), carry)))
        x = self.scale_down(self.mlp_residual(x, self.mlp(self.norm2(x))))
        return x


RESID_LAMBDA_INIT = 1.1 ** 0.5      # the record's sqrt(1.1) per sublayer, 1.1 per layer


class SublayerLambdas(nn.Module):
    """One residual point with the record's lambdas: residual(r x, p branch) = r x + p F."""

    def __init__(self, residual: Residual):
        super().__init__()
        self.residual = residual
        self.skip_lambda = nn.Parameter(torch.empty(()))     # r (the record's resid_lambdas), multiplies the skip
        self.post_lambda = nn.Parameter(torch.empty(()))     # p (post_lambdas), multiplies the branch
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.skip_lambda, RESID_LAMBDA_INIT)
        nn.init.ones_(self.post_lambda)

    def forward(self, x: torch.Tensor, branch: torch.Tensor) -> torch.Tensor:
        return self.residual(self.skip_lambda * x, self.post_lambda * branch)


class SpeedrunLambdasBlock(SpeedrunBlock):
    """The speedrun block with x = r x + p F(N(x)) at both residual points."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.attn_residual = SublayerLambdas(self.attn_residual)
        self.mlp_residual = SublayerLambdas(self.mlp_residual)
