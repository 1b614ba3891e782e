"""LAuReL, the learned augmented residual layer (Menghani et al., ICML 2025), on a pre-ln block.

The paper generalises the residual x_(i+1) = f(x_i) + x_i to x_(i+1) = alpha f(x_i) + g(x_i, x_(i-1), ...).
Here each residual point i of a pre-ln block (attention, then MLP; f its branch, F = A(N1 x) or
M(N2 x)) is one LAuReL layer, in the forms the options switch on:

    RW (rw)        x_(i+1) = alpha F + beta x_i,            (alpha, beta) = 2 softmax(w_i), w_i = 0 at init
    LR (rank r)    x_(i+1) = alpha F + beta (x_i + B A x_i)     A: r x C, B: C x r, B = 0 at init
    PA (pa)        ... + B' A' (sum_(j<i) gamma_(i,j) x_j)       over the earlier residual points' inputs
                                                                 x_0 = emb, gamma = 1 and B' = 0 at init
    without rw: alpha = beta = 1; head input = N_final(x_L); a runtime branch gain g multiplies F

So the model starts as pre-ln exactly, with or without rw (B = B' = 0, and 2 softmax(0) = (1, 1)).
RW's factor 2 keeps alpha + beta = 2, the plain residual's 1 + 1: a bare softmax would start every
point at (1/2, 1/2) and scale the embedding by 2^-(2L), which collapses a deep model's tokens at
init (measured: cosine 1.000 at 24 layers). The paper's body was not available here; the factor 2
and w = 0 follow the reimplementation by MUDDFormer's authors, who train LAuReL as a baseline
(xiaoda99/praxis, praxis/layers/transformers.py: `softmax(laurel_rw_weight) * 2`, weights [1, 1]).
That code applies one LAuReL term per layer, with the low-rank map on the RMS-normed input; here
each residual point is one LAuReL layer, as the paper's x_(i+1) = alpha f(x_i) + ... reads.
A and A' are drawn like every weight (N(0, init_std)), so the added terms start at zero. PA's
low-rank map h_i is linear, so h_i applied to each x_j and summed equals h_i applied to the
gamma-weighted sum: one matmul per point, not one per earlier point. PA keeps every
residual point's input (the depth stream), like DenseFormer; RW and LR keep none.
Peer: HF transformers Gemma3nTextLaurelBlock (an LR term on the attention input, u + RMSNorm(W_R W_L u),
not this form: Gemma 3n adds it beside attention and divides the sum by sqrt 2).

    x_i ──┬──────────────[beta (I + B A)]──────────(+)── x_(i+1)
          └── N ── F ── [alpha] ───────────────────┘ │
    x_0 .. x_(i-1) ── sum_j gamma_j x_j ── B' A' ─────┘  (PA)
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from ..registry import design_options
from . import base
from .depth import DepthState, weighted_sum


class LaurelPoint(nn.Module):
    """One residual point as a LAuReL layer: out = alpha F + beta (x + B A x) + B' A' sum_j gamma_j x_j."""

    def __init__(self, dim: int, *, rw: bool, rank: int, n_previous: int, gain: float = 1.0):
        super().__init__()
        self.gain = gain                                                       # runtime branch gain g: F <- g F
        self.rw_logits = nn.Parameter(torch.empty(2)) if rw else None          # w = (w_alpha, w_beta)
        self.lr_down = nn.Linear(dim, rank, bias=False) if rank else None      # A
        self.lr_up = nn.Parameter(torch.empty(dim, rank)) if rank else None    # B
        self.pa_gamma = nn.Parameter(torch.empty(n_previous)) if n_previous else None
        self.pa_down = nn.Linear(dim, rank, bias=False) if n_previous else None  # A'
        self.pa_up = nn.Parameter(torch.empty(dim, rank)) if n_previous else None  # B'
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """w = 0 (alpha = beta = 1), B = B' = 0, gamma = 1 (A, A' are drawn by the init scheme)."""
        with torch.no_grad():
            for p in (self.rw_logits, self.lr_up, self.pa_up):
                if p is not None:
                    p.zero_()
            if self.pa_gamma is not None:
                self.pa_gamma.fill_(1.0)

    def weights(self) -> tuple:
        """(alpha, beta): 2 softmax(w) with RW (alpha + beta = 2, as in x + F), (1, 1) without."""
        if self.rw_logits is None:
            return 1.0, 1.0
        alpha, beta = 2.0 * self.rw_logits.softmax(dim=0)
        return alpha, beta

    def forward(self, x: torch.Tensor, branch: torch.Tensor, previous: tuple = ()) -> torch.Tensor:
        alpha, beta = self.weights()
        if self.gain != 1.0:
            branch = self.gain * branch
        skip = x if self.lr_down is None else x + self.lr_down(x) @ self.lr_up.T
        out = alpha * branch + beta * skip
        if self.pa_gamma is not None:
            out = out + self.pa_down(weighted_sum(list(self.pa_gamma), previous)) @ self.pa_up.T
        return out


class LaurelBlock(base.Block):
    """Pre-ln with both residual points LAuReL layers; keeps norm1, attn, norm2, mlp as pre-ln names them.
    The stream is a DepthState whose sources are the residual points' inputs so far (PA reads them)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        opts = design_options(cfg)
        self.pa = opts.pa
        first = 2 * (layer - 1)  # residual points before this layer's attention (x_0 .. x_(first-1))
        self.norm1, self.attn = base.norm(cfg), base.attention(cfg, layer)
        self.norm2, self.mlp = base.norm(cfg), base.mlp(cfg)
        gain = cfg.branch_gain if cfg.gain_mode == "runtime" else 1.0
        point = lambda n: LaurelPoint(cfg.n_embd, rw=opts.rw, rank=opts.rank,  # noqa: E731
                                      n_previous=n if opts.pa else 0, gain=gain)
        self.attn_point, self.mlp_point = point(first), point(first + 1)

    def forward(self, state: DepthState) -> DepthState:
        x, seen = state.x, state.sources   # seen = (x_0, ..., x_i) with PA, (x_0,) without
        h = self.attn_point(x, self.attn(self.norm1(x)), seen[:-1])
        seen = seen + (h,) if self.pa else seen
        out = self.mlp_point(h, self.mlp(self.norm2(h)), seen[:-1])
        return DepthState(x=out, sources=seen + (out,) if self.pa else seen)
