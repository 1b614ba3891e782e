"""Normalisations: LayerNorm, RMSNorm, DyT, Derf, SeeDNorm, or none (an identity that keeps the code uniform).

    layernorm       y = (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta
    rmsnorm         y = x / sqrt(mean(x^2) + eps) * gamma
    rmsnorm-nogain  y = x / sqrt(mean(x^2) + eps)                    (no learned parameter)
    dyt             y = gamma * tanh(alpha * x) + beta              (element-wise; no statistics)
    derf            y = gamma * erf(alpha * x + s) + beta           (element-wise; no statistics)
    seednorm        y = (tanh(x . beta) * alpha + gamma) * x / sqrt(mean(x^2) + eps)
    none            y = x

DyT: Zhu, Chen, He, LeCun, Liu 2025, "Transformers without Normalization". alpha is ONE learned
scalar per norm, initialised to cfg.dyt_alpha (paper: 0.5); gamma (`weight`) ones and beta (`bias`,
only when bias=True, as LayerNorm(bias=...)) zeros. The affine parameters carry LayerNorm's names,
so an init-mode branch gain that scales an output norm's `weight` / `bias` treats DyT alike.
Unlike LayerNorm / RMSNorm, DyT is NOT scale-invariant: DyT(s*x) != DyT(x). The authors' LLaMA
code starts alpha per position (cfg.dyt_alpha_attn / _mlp / _final: pre-ln's N1, N2, final norm).

rmsnorm-nogain: the weightless RMS norm of modded-nanogpt's records (`F.rms_norm(x, (C,))`, no
gain anywhere in the model). reslab keeps cfg.norm_eps as its eps (the records pass none, so torch
takes the dtype's machine epsilon); like rmsnorm it is scale-invariant.

Derf (Dynamic erf): Chen, Lu, Zhu, Sun, Liu 2025, "Stronger Normalization-Free Transformers"
(arXiv 2512.10938), Derf(x) = gamma * erf(alpha * x + s) + beta. Read from the abstract / summary
pages and from x-transformers' `Derf` (x_transformers.py): alpha and the shift s are ONE learned
scalar each (init 0.5 and 0), gamma per channel (ones), beta per channel (zeros). reslab takes that
reading: alpha starts at cfg.dyt_alpha (default 0.5 = DERF_ALPHA, x-transformers' `init_alpha`; the
one config field sets both element-wise norms' initial slope), and beta exists only with bias=True, as DyT's. Not scale-invariant, bounded by |gamma| + |beta|.

SeeDNorm (Self-Rescaled Dynamic Normalization): Cai, Zhu, Liu, Min 2025 (arXiv 2510.22777),
SeeDNorm(x) = [sigma(x beta^T) alpha + gamma] * x / RMS(x), sigma = tanh, with alpha, beta, gamma
each a learned vector over the channels: x beta^T is ONE number per token (the raw input's dot
product with beta), so the gain gamma is shifted by alpha scaled by how the token's input reads
along beta. The equation is taken from a summary of the paper (its full text and code were not
available to read here); its inits and the multi-head variant the summaries mention were not read.
reslab's reading: gamma = 1, alpha = 1, beta = 0 at init, so the norm starts as RMSNorm exactly
(tanh(0) = 0) and beta gets a gradient from the first step (alpha != 0); the form above only;
RMS(x) = sqrt(mean(x^2) + eps) with cfg.norm_eps. Not scale-invariant (tanh(s x beta^T) moves with s).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
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


DERF_ALPHA = 0.5      # Derf's initial alpha (x-transformers' init_alpha default)


class Derf(nn.Module):
    """Dynamic erf, a drop-in replacement for a norm: y = gamma * erf(alpha * x + s) + beta."""

    def __init__(self, dim: int, *, bias: bool = True, alpha: float = DERF_ALPHA):
        super().__init__()
        self.alpha_init = float(alpha)
        self.alpha = nn.Parameter(torch.empty(()))       # one scalar slope for the whole norm
        self.shift = nn.Parameter(torch.empty(()))       # s, one scalar shift inside the erf
        self.weight = nn.Parameter(torch.empty(dim))     # gamma, per channel
        self.register_parameter("bias", nn.Parameter(torch.empty(dim)) if bias else None)  # beta
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.alpha, self.alpha_init)
        nn.init.zeros_(self.shift)
        nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.erf(self.alpha * x + self.shift) * self.weight
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, alpha_init={self.alpha_init}, bias={self.bias is not None}"


class SeeDNorm(nn.Module):
    """Self-rescaled dynamic norm: y = (tanh(x . beta) * alpha + gamma) * x / RMS(x)."""

    def __init__(self, dim: int, *, eps: float = 1e-5):
        super().__init__()
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.empty(dim))       # gamma, the static gain (RMSNorm's)
        self.alpha = nn.Parameter(torch.empty(dim))        # how far the dynamic term moves each gain
        self.beta = nn.Parameter(torch.empty(dim))         # the direction the raw input is read along
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)
        nn.init.ones_(self.alpha)
        nn.init.zeros_(self.beta)        # tanh(0) = 0: RMSNorm at init

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gain = torch.tanh(x @ self.beta).unsqueeze(-1) * self.alpha + self.weight   # (..., C)
        return gain * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class RMSNormNoGain(nn.Module):
    """y = x / sqrt(mean(x^2) + eps), no parameter (modded-nanogpt's `norm`)."""

    def __init__(self, dim: int, *, eps: float = 1e-5):
        super().__init__()
        self.dim, self.eps = dim, float(eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (self.dim,), eps=self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


def make_norm(kind: str, dim: int, *, bias: bool = True, eps: float = 1e-5, alpha: float = 0.5) -> nn.Module:
    """The norm `kind` over the last dimension. eps applies to layernorm / rmsnorm / rmsnorm-nogain /
    seednorm, alpha (the initial slope inside tanh / erf) to dyt and derf; each is ignored by the others."""
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=eps, bias=bias)
    if kind == "rmsnorm":
        return nn.RMSNorm(dim, eps=eps)
    if kind == "rmsnorm-nogain":
        return RMSNormNoGain(dim, eps=eps)
    if kind == "dyt":
        return DyT(dim, bias=bias, alpha=alpha)
    if kind == "derf":
        return Derf(dim, bias=bias, alpha=alpha)
    if kind == "seednorm":
        return SeeDNorm(dim, eps=eps)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"unknown norm {kind!r}")
