"""The feed-forward sublayer M(x) = W2 act(W1 x), or SwiGLU: W2 (silu(W_gate x) * W_up x).
With mid_norm (NormFormer): M(x) = W2 N(act(W1 x)), a norm over the hidden units."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu-tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


class MLP(nn.Module):
    def __init__(self, n_embd: int, hidden: int, kind: str = "gelu", bias: bool = True, dropout: float = 0.0,
                 mid_norm: nn.Module | None = None):
        super().__init__()
        self.kind = kind
        self.mid_norm = mid_norm
        # c_fc is W1 (for SwiGLU: W_gate and W_up stacked); c_proj is W2, the branch's output weight.
        self.c_fc = nn.Linear(n_embd, 2 * hidden if kind == "swiglu" else hidden, bias=bias)
        self.c_proj = nn.Linear(hidden, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.pre_act = None    # a module on W1 x before the activation: Canon-D (blocks/canon.py) sets it

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.c_fc(x)
        if self.pre_act is not None:
            h = self.pre_act(h)
        if self.kind == "swiglu":
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = ACTIVATIONS[self.kind](h)
        if self.mid_norm is not None:
            h = self.mid_norm(h)
        return self.dropout(self.c_proj(h))
