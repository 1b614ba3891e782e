"""Causal self-attention: standard, shaped (SAS), and with identity value / projection.

Standard (per head):   A(x) = softmax(Q K^T / sqrt(d) + causal mask) V,  then W_P
Shaped attention:      A = beta * softmax(...) + alpha * I - gamma * C,  C_ij = 1/i for j <= i
                       computed without a T x T matrix: A v = beta * sdpa(q, k, v) + alpha * v
                       - gamma * running_mean(v), with alpha = beta = gamma = 1 at init and W_Q = 0,
                       so softmax(...) = C and A = I at init.
Value / projection:    "linear" (W_V), "identity" (V = x, no parameters) or "identity+linear"
                       (V = (I + W_V) x with W_V = 0 at init: SAS's first layer). With vp identity
                       the output projection W_P is the identity too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


def causal_running_mean(v: torch.Tensor) -> torch.Tensor:
    """C v along the sequence axis (-2): position i averages positions 1..i."""
    positions = torch.arange(1, v.shape[-2] + 1, device=v.device, dtype=v.dtype)
    return v.cumsum(dim=-2) / positions[:, None]


def uniform_causal_matrix(T: int, device=None, dtype=None) -> torch.Tensor:
    """C: row i holds 1/i in columns 1..i."""
    tril = torch.ones(T, T, device=device, dtype=dtype).tril()
    return tril / tril.sum(dim=-1, keepdim=True)


def rotate_rope(x: torch.Tensor, base: float) -> torch.Tensor:
    """Rotary position embedding (rotate-half form, as in Llama) on (B, H, T, d)."""
    T, d = x.shape[-2], x.shape[-1]
    inv_freq = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    angles = torch.arange(T, device=x.device, dtype=torch.float32)[:, None] * inv_freq[None, :]
    cos = torch.cat([angles.cos(), angles.cos()], dim=-1).to(x.dtype)
    sin = torch.cat([angles.sin(), angles.sin()], dim=-1).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


@dataclass
class AttentionCarry:
    """What attention passes from layer to layer within ONE forward (GPT.forward makes a fresh one):
    the first layer's values (ResFormer's value residual) and the last pre-softmax scores
    (RealFormer's residual attention). Nothing in it outlives the forward."""
    first_values: torch.Tensor | None = None
    scores: torch.Tensor | None = None


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, *, bias: bool = True, dropout: float = 0.0,
                 shaped: bool = False, value: str = "linear", rope_base: float | None = None):
        super().__init__()
        assert value in ("linear", "identity", "identity+linear")
        self.n_head, self.n_embd = n_head, n_embd
        self.shaped, self.value, self.rope_base = shaped, value, rope_base
        self.attn_dropout = dropout
        if value == "linear":
            self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)     # [W_Q; W_K; W_V]
            self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)         # W_P
        else:
            self.c_qk = nn.Linear(n_embd, 2 * n_embd, bias=bias)       # [W_Q; W_K]
            if value == "identity+linear":
                self.c_v = nn.Linear(n_embd, n_embd, bias=False)       # V = x + W_V x
            self.c_proj = nn.Identity()                                # W_P = I
        if shaped:
            # One (alpha, beta, gamma) per head, broadcast over (T, d).
            self.shape_alpha = nn.Parameter(torch.ones(n_head, 1, 1))
            self.shape_beta = nn.Parameter(torch.ones(n_head, 1, 1))
            self.shape_gamma = nn.Parameter(torch.ones(n_head, 1, 1))
        self.resid_dropout = nn.Dropout(dropout)

    def reset_parameters(self) -> None:
        if self.shaped:
            for p in (self.shape_alpha, self.shape_beta, self.shape_gamma):
                nn.init.ones_(p)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        B, T, C = t.shape
        return t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)

    def qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys, values as (B, H, T, d), with rotary positions applied if configured."""
        if self.value == "linear":
            q, k, v = self.c_attn(x).split(self.n_embd, dim=-1)
        else:
            q, k = self.c_qk(x).split(self.n_embd, dim=-1)
            v = x + self.c_v(x) if self.value == "identity+linear" else x
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        if self.rope_base is not None:
            q, k = rotate_rope(q, self.rope_base), rotate_rope(k, self.rope_base)
        return q, k, v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x)
        p = self.attn_dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        if self.shaped:
            y = self.shape_beta * y + self.shape_alpha * v - self.shape_gamma * causal_running_mean(v)
        y = y.transpose(1, 2).reshape(x.shape)
        return self.resid_dropout(self.c_proj(y))

    @torch.no_grad()
    def attention_matrix(self, x: torch.Tensor) -> torch.Tensor:
        """The (B, H, T, T) matrix that mixes values, built explicitly (for tests and diagnostics)."""
        q, k, _ = self.qkv(x)
        T = x.shape[1]
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        probs = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        if not self.shaped:
            return probs
        eye = torch.eye(T, device=x.device, dtype=x.dtype)
        C = uniform_causal_matrix(T, device=x.device, dtype=x.dtype)
        return self.shape_beta * probs + self.shape_alpha * eye - self.shape_gamma * C
