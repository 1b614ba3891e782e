"""MUDD connections (Xiao et al. 2025, MUDDFormer): multiway dynamic dense connections.

After every block the next block's inputs are mixes of all block outputs so far, with weights
that depend on the current position's hidden state, one mix per input stream: the query, key
and value inputs of the next attention and the residual stream (q, k, v, r).

    X_0 = emb;  block 1 reads x_q = x_k = x_v = x_r = X_0
    block l:    h   = x_r + A(N_q(x_q), N_k(x_k), N_v(x_v))     queries, keys, values from their own
                                                             inputs (layer 1: one norm N1 for all)
                X_l = h + M(N2(h))
    after it:   w   = W2 GELU(W1 RMS(X_l)) + b               (B, T, S, l+1): per position, per stream
                x_s = sum_{j=0..l} w[s, j] X_j               for s in q, k, v, r (S = 4)
    last block: one stream only (S = 1): head input = N_final(sum_j w[j] X_j)

RMS is an RMSNorm without a gain. W1: C -> S(l+1), W2: S(l+1) -> S(l+1), one pair per layer
(the hidden size is MUDDFormer's S(l+1), without its rounding to multiples of 64). b (S, l+1) is
the static part. Initialisation: W2 = 0 and b = 1 on the newest output X_l, 0 elsewhere, so every
x_s is X_l and the model is pre-ln until the weights move (tested: pre-ln's logits up to
rounding once pre-ln's weights are copied in). W1 follows reslab's init scheme (N(0, init_std));
MUDDFormer's own training code draws it N(0, 1/sqrt(C)). Peer code read: MUDDFormer's PyTorch
inference model (`MultiwayDynamicDenseBlock`, `dense_bs`), which gives the structure, and its
authors' Jax training code (xiaoda99/praxis, `praxis/layers/transformers.py`), whose init is the
same: `dynamic_dense_conn2` = 0 and `dense_bias_init_method = 'current_only'` (b = e_l).

The stream's x is x_r, the residual input of the next block (after the last block: the head's mix).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from . import base
from .depth import DepthState, weighted_sum

STREAMS = ("q", "k", "v", "r")


def rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm without a gain (MUDDFormer's RMSnormNoscale)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


class MUDDBlock(base.Block):
    """A pre-norm block whose attention reads separate q / k / v inputs, then its dense connection."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.eps = cfg.norm_eps
        self.attn = base.attention(cfg, layer)
        if layer == 1:
            self.norm1 = base.norm(cfg)
        else:
            self.norm_q, self.norm_k, self.norm_v = base.norm(cfg), base.norm(cfg), base.norm(cfg)
        self.norm2, self.mlp = base.norm(cfg), base.mlp(cfg)
        self.attn_residual, self.mlp_residual = base.residual(cfg), base.residual(cfg)
        self.n_streams = 1 if layer == cfg.n_layer else len(STREAMS)
        width = self.n_streams * (layer + 1)                            # S streams x (l + 1) sources
        self.dense_in = nn.Linear(cfg.n_embd, width, bias=False)         # W1: drawn by the init scheme
        self.dense_out = nn.Parameter(torch.empty(width, width))         # W2: a plain parameter, so the
        self.dense_bias = nn.Parameter(torch.empty(self.n_streams, layer + 1))   # scheme leaves it at 0
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """W2 = 0 and b = e_l (the newest output) for every stream: every mix starts as X_l."""
        with torch.no_grad():
            self.dense_bias.zero_()
            self.dense_bias[:, -1] = 1.0
            self.dense_out.zero_()

    def weights(self, out: torch.Tensor) -> torch.Tensor:
        """w (B, T, S, l+1) = W2 GELU(W1 RMS(X_l)) + b."""
        w = F.linear(F.gelu(self.dense_in(rms(out, self.eps))), self.dense_out)
        return w.view(*out.shape[:-1], self.n_streams, self.layer + 1) + self.dense_bias

    def forward(self, state: DepthState) -> DepthState:
        res = state.x
        if self.layer == 1:
            n = self.norm1(res)
            a = self.attn(n)
        else:
            xq, xk, xv = state.views
            a = self.attn(res, views=(self.norm_q(xq), self.norm_k(xk), self.norm_v(xv)))
        h = self.attn_residual(res, a)
        out = self.mlp_residual(h, self.mlp(self.norm2(h)))
        sources = state.sources + (out,)
        w = self.weights(out).permute(3, 2, 0, 1).unsqueeze(-1)         # (l+1, S, B, T, 1)
        mixes = weighted_sum(list(w), sources)                            # (S, B, T, C)
        if self.n_streams == 1:                                          # the last block: the head's mix
            return DepthState(x=mixes[0], sources=sources)
        return DepthState(x=mixes[3], sources=sources, views=(mixes[0], mixes[1], mixes[2]))
