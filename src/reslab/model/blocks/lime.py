"""LIMe, layer-integrated memory (Gerasimov et al. 2025), in x-transformers' dynamic form.

Every sublayer reads a learned, per-position mix of all the residual-stream states so far, while
the residual add stays on the current state. With s_0 = emb and s_k the stream after k sublayers:

    sublayer k (attention or MLP) on the current state x = s_(k-1):
        w    = softmax_j(W_k RMSNorm_k(x) + c_k)                    one weight per earlier state s_j
        u    = sum_{j<k} w_j s_j                                    (B, T, C)
        x    = x + F(N(u))                                          the skip is x itself
    attention (all but layer 1's): three mixes w^q, w^k, w^v, and queries, keys and values are
        projected from N(u^q), N(u^k), N(u^v)
    head input = N_final(x)

W_k is C -> (views x states) with a bias c_k; RMSNorm_k has a gain. At initialisation W_k is drawn
by the init scheme (GPT-2: N(0, 0.02)) and c_k = 0, so the weights start near uniform: u starts
near the mean of the states, not at x, and the model is not pre-ln at init (as in x-transformers).
Layer 1's attention has a single state to read and reads x directly. This is x-transformers'
`integrate_layers` (`DynamicLIMe`) read in its source; the paper's own LIMe (static per-head
routers over earlier layers' keys and values) was not available here and is not what this
implements.

The stream's x is the residual stream itself; the kept sources are its states after every sublayer.
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from ..norms import make_norm
from . import base
from .depth import DepthState, weighted_sum


class StateMix(nn.Module):
    """w = softmax(W RMSNorm(x) + c) over n states, for `views` mixes: (views, B, T, C) outputs."""

    def __init__(self, cfg: ModelConfig, n_states: int, views: int):
        super().__init__()
        self.n_states, self.views = n_states, views
        self.norm = make_norm("rmsnorm", cfg.n_embd, bias=False, eps=cfg.norm_eps)
        self.to_weights = nn.Linear(cfg.n_embd, views * n_states)

    def forward(self, x: torch.Tensor, states: tuple) -> torch.Tensor:
        w = self.to_weights(self.norm(x)).view(*x.shape[:-1], self.views, self.n_states).softmax(dim=-1)
        return weighted_sum(list(w.permute(3, 2, 0, 1).unsqueeze(-1)), states)   # (views, B, T, C)


class LIMeBlock(base.Block):
    """Pre-norm sublayers whose inputs are mixes of every earlier stream state (skip: the current one)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        states = 2 * layer - 1                                           # s_0 .. s_(2l-2) before attention
        self.norm1, self.attn = base.norm(cfg), base.attention(cfg, layer)
        self.attn_mix = StateMix(cfg, states, views=3) if layer > 1 else None
        self.norm2, self.mlp, self.mlp_mix = base.norm(cfg), base.mlp(cfg), StateMix(cfg, states + 1, views=1)
        self.attn_residual, self.mlp_residual = base.residual(cfg), base.residual(cfg)

    def forward(self, state: DepthState) -> DepthState:
        x, states = state.x, state.sources
        if self.attn_mix is None:
            a = self.attn(self.norm1(x))
        else:
            uq, uk, uv = self.attn_mix(x, states)
            a = self.attn(x, views=(self.norm1(uq), self.norm1(uk), self.norm1(uv)))
        x = self.attn_residual(x, a)
        states = states + (x,)
        (u,) = self.mlp_mix(x, states)
        x = self.mlp_residual(x, self.mlp(self.norm2(u)))
        return DepthState(x=x, sources=states + (x,))
