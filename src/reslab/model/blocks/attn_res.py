"""Attention Residuals (Kimi team 2026, arXiv 2603.15031): each sublayer reads a softmax-weighted
mix of earlier outputs instead of their sum.

Full AttnRes (block_layers = 0). The sources are v_0 = emb and every sublayer's output; sublayer k
(the attention, then the MLP, of every layer) reads

    h_k = sum_{i<k} a_{i,k} v_i,   a_{.,k} = softmax_i(w_k . RMSNorm_k(v_i))      w_k in R^C, learned
    v_k = g F_k(N_k(h_k))                              F = A or M, pre-norm; g the runtime branch_gain

and the head reads N_final(h_out), h_out the same mix over all sources with its own w_out. The keys
are RMS-normalised (each RMSNorm_k with its own gain), so no source wins by its magnitude; the
values are the raw outputs. Every w is 0 at initialisation: the weights start uniform and h_k is
the MEAN of the sources, where pre-ln's stream is their SUM. Pre-norm sublayers and the final
norm do not see that scale, so at initialisation the model is pre-ln up to the norms' eps
(tested).

Block AttnRes (block_layers = n > 0). Layers are grouped n at a time; within a group the outputs
are summed (a standard residual, the partial sum b), and the mix runs over the finished group
sums plus the current partial sum:

    sources: b_0 = emb, then one sum per finished group of n layers;   partial: the current sum
    sublayer k reads h_k = mix_k(sources + [partial]); its output is added to partial; a new group
    starts before the attention of layers 1, n+1, 2n+1, ... (counted from 1), so the embedding is
    a source of its own

This follows the paper's published pseudocode (block_attn_res(blocks, partial_block, proj, norm)):
the query is a learned vector (a Linear C -> 1 without bias in the paper's code), applied to the
normalised stacked values. The head's final mix (w_out) is this implementation's reading: the
paper's code was not available here to check how the output layer aggregates.

The stream's x (what probes and diagnostics measure) is the input the layer's MLP read, h_{2l};
after the last layer it is h_out, the head's input before N_final.
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from ..registry import design_options
from . import base
from .depth import DepthState, depth_softmax_mix, unit_rms


class DepthQuery(nn.Module):
    """One learned pseudo-query w (C,), 0 at init, and the gain g (C,) of the RMSNorm of the keys
    it scores: w . (g * v / RMS(v)) = (w * g) . (v / RMS(v)), so the unit-RMS sources are shared."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.query = nn.Parameter(torch.empty(cfg.n_embd))
        self.key_gain = nn.Parameter(torch.empty(cfg.n_embd))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.query)
        nn.init.ones_(self.key_gain)

    def forward(self, values: list, units: list) -> torch.Tensor:
        return depth_softmax_mix(values, units, self.query * self.key_gain)


class AttnResBlock(base.Block):
    """Sublayer k reads h_k = softmax-mix of earlier outputs (full) or of group sums (block)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.block_layers = design_options(cfg).block_layers
        self.eps = cfg.norm_eps
        self.gain = cfg.branch_gain if cfg.gain_mode == "runtime" else 1.0   # multiplies each output v_k
        self.norm1, self.attn, self.attn_query = base.norm(cfg), base.attention(cfg, layer), DepthQuery(cfg)
        self.norm2, self.mlp, self.mlp_query = base.norm(cfg), base.mlp(cfg), DepthQuery(cfg)
        self.out_query = DepthQuery(cfg) if layer == cfg.n_layer else None   # the head's mix

    def branch(self, out: torch.Tensor) -> torch.Tensor:
        """v_k = g F_k(.): the runtime branch gain multiplies every sublayer output."""
        return out if self.gain == 1.0 else self.gain * out

    def unit(self, v: torch.Tensor) -> torch.Tensor:
        return unit_rms(v, self.eps)

    def forward(self, state: DepthState) -> DepthState:
        if self.block_layers:
            return self._block_forward(state)
        sources = state.sources
        units = state.units or (self.unit(sources[0]),)                  # layer 1: the embedding's
        a = self.branch(self.attn(self.norm1(self.attn_query(list(sources), list(units)))))
        sources, units = sources + (a,), units + (self.unit(a),)
        h = self.mlp_query(list(sources), list(units))
        m = self.branch(self.mlp(self.norm2(h)))
        sources, units = sources + (m,), units + (self.unit(m),)
        if self.out_query is not None:
            h = self.out_query(list(sources), list(units))
        return DepthState(x=h, sources=sources, units=units)

    def _block_forward(self, state: DepthState) -> DepthState:
        # enter gives sources = (emb,) and no partial sum; the first group then starts at layer 1.
        # units: the finished sources' unit-RMS forms; the partial sum's is recomputed when it changes
        sources, partial = state.sources, state.partial
        units = state.units or (self.unit(sources[0]),)
        read = lambda: (list(sources) + ([partial] if partial is not None else []),
                        list(units) + ([self.unit(partial)] if partial is not None else []))
        h = self.attn_query(*read())
        if (self.layer - 1) % self.block_layers == 0 and partial is not None:
            sources, units, partial = sources + (partial,), units + (self.unit(partial),), None  # group done
        a = self.branch(self.attn(self.norm1(h)))
        partial = a if partial is None else partial + a
        h = self.mlp_query(*read())
        partial = partial + self.branch(self.mlp(self.norm2(h)))
        if self.out_query is not None:
            h = self.out_query(*read())
        return DepthState(x=h, sources=sources, partial=partial, units=units)
