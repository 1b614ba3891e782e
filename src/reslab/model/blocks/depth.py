"""The depth stream: designs that mix the outputs of earlier layers, not only add the last one.

A standard residual stream is one tensor, the running sum x_l = x_0 + f_1 + ... + f_l. The designs
of this family (DenseFormer, Attention Residuals, ...) read a learned mix of earlier outputs
instead, so they keep those outputs. Their stream is a DepthState:

    x        the tensor the design treats as its stream after this layer: what the next layer
             starts from and what the head reads after the last one (each design's docstring
             says which tensor it is); probes and diagnostics measure this one
    sources  the earlier outputs kept for mixing, oldest first (sources[0] is the embedding for
             every design here)
    partial  a running sum that is not yet a source (Block Attention Residuals' current block),
             or None
    views    separate inputs (x_q, x_k, x_v) for the next layer's attention projections (MUDD),
             or None
    units    sources[i] / RMS(sources[i]), kept beside the sources for the designs that score them
             (Attention Residuals), so each is normalised once
    kv       the earlier layers' attention keys and values ((k, v) per layer, (B, H, T, d) each),
             for the designs whose attention reads them across depth (MoDA); () otherwise

    enter:   x = emb, sources = (emb,), partial = None      (emb = N_emb(emb) with embed_norm)
    exit:    head input = N_final(x)

Memory: every kept source is a (B, T, C) activation that autograd also keeps, so a depth stream
holds O(L) more activations than the sum does (bench/bench_designs.py measures it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..config import ModelConfig
from ..norms import make_norm


@dataclass(frozen=True)
class DepthState:
    x: torch.Tensor
    sources: tuple
    partial: torch.Tensor | None = None
    views: tuple | None = None
    units: tuple = ()
    kv: tuple = ()


class DepthStream(nn.Module):
    """enter: x = sources[0] = emb (N_emb(emb) with embed_norm);  exit: N_final(x) (no final norm
    for designs without one)."""

    def __init__(self, cfg: ModelConfig, final_norm: bool):
        super().__init__()
        norm = lambda kind: make_norm(kind, cfg.n_embd, bias=cfg.bias, eps=cfg.norm_eps, alpha=cfg.dyt_alpha)
        self.embed_norm = norm(cfg.norm if cfg.embed_norm else "none")
        self.final_norm = norm(cfg.norm if final_norm else "none")

    def enter(self, emb: torch.Tensor) -> DepthState:
        x0 = self.embed_norm(emb)
        return DepthState(x=x0, sources=(x0,))

    def exit(self, state: DepthState) -> torch.Tensor:
        return self.final_norm(state.x)



def unit_rms(v: torch.Tensor, eps: float) -> torch.Tensor:
    """v / RMS(v) over the channels: an RMSNorm without its gain."""
    return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)


def depth_softmax_mix(values: list, units: list, query: torch.Tensor) -> torch.Tensor:
    """sum_i softmax_i(q . unit_rms(v_i)) v_i over the earlier outputs v_i: attention across depth
    with one learned query q (C,), RMS-normalised keys (no source wins by its size alone) and the
    raw outputs as values. `units` are the v_i / RMS(v_i), computed once per source and kept: a
    sublayer then adds only (B, T) weights to what autograd keeps, not a stacked copy of every source
    (which made the activation memory grow as L^2)."""
    w = torch.stack([torch.matmul(u, query) for u in units]).softmax(dim=0)    # (n, B, T)
    return weighted_sum([wi.unsqueeze(-1) for wi in w], values)


def weighted_sum(weights: list, values) -> torch.Tensor:
    """sum_j weights[j] * values[j], source by source. Stacking the sources first would make
    autograd keep a copy of all of them at every layer (activation memory growing as L^2); this
    keeps only the weights beside the sources that already exist. Each weight broadcasts against
    its (B, T, C) source: a scalar, (B, T, 1), or (S, B, T, 1) for S mixes at once."""
    out = weights[0] * values[0]
    for w, v in zip(weights[1:], values[1:]):
        out = out + w * v
    return out
