"""Normalisations: LayerNorm, RMSNorm, DyT, or none (an identity that keeps the code uniform).

    layernorm  y = (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta
    rmsnorm    y = x / sqrt(mean(x^2) + eps) * gamma
    dyt        y = gamma * tanh(alpha * x) + beta              (element-wise; no statistics)
    none       y = x

DyT: Zhu, Chen, He, LeCun, Liu 2025, "Transformers without Normalization". alpha is ONE learned
scalar per norm, initialised to cfg.dyt_alpha (paper: 0.5); gamma (`weight`) ones and beta (`bias`,
only when bias=True, as LayerNorm(bias=...)) zeros. The affine parameters carry LayerNorm's names,
so an init-mode branch gain that scales an output norm's `weight` / `bias` treats DyT alike.
Unlike LayerNorm / RMSNorm, DyT is NOT scale-invariant: DyT(s*x) != DyT(x).
"""

from __future__ import annotations

import torch
from torch import nn


class DyT(nn.Module):
    """Dynamic Tanh, a drop-in replacement for a norm: y = gamma * tanh(alpha * x) + beta."""

    def __init__(self, dim: int, *, bias: bool = True, alpha: float = 0.5):
        super().__init__()
        self.alpha_init = float(alpha)
        self.alpha = nn.Parameter(torch.empty(()))       # one scalar for the whole norm
        self.weight = nn.Parameter(torch.empty(dim))     # gamma, per channel
        self.register_parameter("bias", nn.Parameter(torch.empty(dim)) if bias else None)  # beta
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.alpha, self.alpha_init)
        nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.tanh(self.alpha * x) * self.weight
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, alpha_init={self.alpha_init}, bias={self.bias is not None}"


def make_norm(kind: str, dim: int, *, bias: bool = True, eps: float = 1e-5, alpha: float = 0.5) -> nn.Module:
    """The norm `kind` over the last dimension. eps applies to layernorm / rmsnorm, alpha (the
    initial tanh slope) to dyt; each is ignored by the others."""
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=eps, bias=bias)
    if kind == "rmsnorm":
        return nn.RMSNorm(dim, eps=eps)
    if kind == "dyt":
        return DyT(dim, bias=bias, alpha=alpha)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"unknown norm {kind!r}")
