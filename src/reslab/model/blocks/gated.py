"""GTrXL's gated residual: a GRU-type gate replaces the add of each sublayer.

Parisotto et al. 2020, "Stabilizing Transformers for Reinforcement Learning" (GTrXL), Sec. 3,
with the GRU gate (their best variant). For each sublayer F (attention A, then MLP M):

    y = ReLU(F(N(x)))                              the branch, pre-normed, then ReLU (as GTrXL)
    r = sigmoid(W_r y + U_r x)                     reset gate
    z = sigmoid(W_z y + U_z x - b_g)               update gate; b_g > 0 closes it at init
    h = tanh(W_g y + U_g (r * x))                  candidate
    x_out = (1 - z) * x + z * h

    x ──┬─────────────────────────────┬── (1-z)*x + z*h ──>
        └── N ── F ── ReLU ── y ──── gate(x, y)

There is no add: the gate weighs the SKIP by (1 - z) and the candidate h by z, per channel and
token, both learned. b_g is a learned per-channel bias, initialised to options.bias (2.0:
z ~ sigmoid(-2) ~ 0.12), so every block starts close to the identity map, which the paper credits
for the stability. W_* and U_* are C x C Linear maps without bias, initialised by the model's
init scheme like every Linear. A runtime branch_gain multiplies y (the BRANCH); gain_mode "init"
scales W_P / W2, and ReLU(g * F) = g * ReLU(F) for g > 0, so both agree at init.
A final norm sits before the head, as in pre-ln.
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from ..registry import design_options
from . import base


class GRUGate(nn.Module):
    """g(x, y) = (1 - z) * x + z * h, the GRU gate of GTrXL; x the stream, y the branch output."""

    def __init__(self, dim: int, gate_bias: float):
        super().__init__()
        self.gate_bias = float(gate_bias)
        self.W_r, self.U_r = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.W_z, self.U_z = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.W_g, self.U_g = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.b_g = nn.Parameter(torch.empty(dim))    # the update gate's bias, subtracted
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # only b_g: the six matrices are Linear weights, written by the model's init scheme
        nn.init.constant_(self.b_g, self.gate_bias)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        r = torch.sigmoid(self.W_r(y) + self.U_r(x))
        z = torch.sigmoid(self.W_z(y) + self.U_z(x) - self.b_g)
        h = torch.tanh(self.W_g(y) + self.U_g(r * x))
        return (1 - z) * x + z * h

    def extra_repr(self) -> str:
        return f"gate_bias={self.gate_bias}"


class GatedBlock(base.Block):
    """x = gate1(x, ReLU(A(N1(x))));  x = gate2(x, ReLU(M(N2(x))))."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.gain = cfg.branch_gain if cfg.gain_mode == "runtime" else 1.0
        b_g = design_options(cfg, layer).bias  # layer: gated may be one layer's design (layer_designs)
        self.norm1, self.attn, self.attn_gate = base.norm(cfg), base.attention(cfg, layer), GRUGate(cfg.n_embd, b_g)
        self.norm2, self.mlp, self.mlp_gate = base.norm(cfg), base.mlp(cfg), GRUGate(cfg.n_embd, b_g)

    def _branch(self, y: torch.Tensor) -> torch.Tensor:
        y = torch.relu(y)
        return self.gain * y if self.gain != 1.0 else y

    def forward(self, x):
        x = self.attn_gate(x, self._branch(self.attn(self.norm1(x))))
        x = self.mlp_gate(x, self._branch(self.mlp(self.norm2(x))))
        return x
