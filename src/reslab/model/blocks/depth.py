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

    enter:   x = emb, sources = (emb,), partial = None      (emb = N_emb(emb) with embed_norm)
    exit:    head input = N_final(x)

Memory: every kept source is a (B, T, C) activation that autograd also keeps, so a depth stream
holds O(L) more activations than the sum does (bench/bench_designs.py measures it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ...config import ModelConfig
from ..norms import make_norm


@dataclass(frozen=True)
class DepthState:
    x: torch.Tensor
    sources: tuple
    partial: torch.Tensor | None = None
    views: tuple | None = None


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

    @staticmethod
    def main(state: DepthState) -> torch.Tensor:
        return state.x


def depth_softmax_mix(values: list, query: torch.Tensor, key_norm: nn.Module) -> torch.Tensor:
    """sum_i softmax_i(q . N(v_i)) v_i over the earlier outputs v_i: attention across depth with
    one learned query q (C,), keys N(v_i) (RMSNorm: no source wins by its size alone), values v_i."""
    v = torch.stack(values)                                          # (n, B, T, C)
    logits = torch.einsum("c,nbtc->nbt", query, key_norm(v))
    return torch.einsum("nbt,nbtc->btc", logits.softmax(dim=0), v)
