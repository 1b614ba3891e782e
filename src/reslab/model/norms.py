"""Normalisations: LayerNorm, RMSNorm, or none (an identity that keeps the code uniform)."""

from __future__ import annotations

from torch import nn


def make_norm(kind: str, dim: int, *, bias: bool = True, eps: float = 1e-5) -> nn.Module:
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=eps, bias=bias)
    if kind == "rmsnorm":
        return nn.RMSNorm(dim, eps=eps)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"unknown norm {kind!r}")
