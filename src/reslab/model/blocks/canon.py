"""Canon layers: a short causal depthwise convolution, with a residual, at up to four points of a pre-ln block.

Allen-Zhu 2025, "Physics of Language Models: Part 4.1, Architecture Design and the Magic of Canon
Layers" (arXiv 2512.17351). One Canon layer on a sequence h_1..h_T, per channel c:

    canon(h)_t = h_t + sum_(j=0..K-1) w[c, j] * h_(t-K+1+j)      (h_s = 0 for s < 1; K = options.kernel = 4)

so w[:, K-1] weighs the token itself and w[:, 0] the token K-1 places back; no bias, no activation
(the official defaults canon_bias = False, canon_activation = False). options.residual = false drops
the leading h_t. The four points (options.points; default "ABCD", every point, as PhysicsLM4's
canon_set = "ABCD"):

    x ──┬───────────────────────────────────────────────────(+)─┬─────────────────────────────────(+)──>
        └─ N1 ─ [A] ─ W_Q,W_K,W_V ─ [B] ─ RoPE ─ SDPA ─ W_P ─┘  └─ N2 ─ [C] ─ W1 ─ [D] ─ act ─ W2 ─┘

    A  h = canon(N1(x)), the attention's input            (C channels)
    B  [Q; K; V] = canon([Q; K; V]) after the projections  (3C channels), after QK-norm, before RoPE
    C  h = canon(N2(x)), the MLP's input                  (C channels)
    D  W1 h = canon(W1 h) before the activation            (the MLP's hidden units; for SwiGLU, W1 = [W_gate; W_up]
                                                              and both halves are mixed, as PhysicsLM4 convolves
                                                              cat(gate, up))

Readings (the paper's own text was not available here; its official code was read) where a choice is
left open or reslab's block differs from the official Llama:
- Where each point sits follows the official code, facebookresearch/PhysicsLM4 `huggingface/
  modeling_llama_canon.py` (LlamaCanonDecoderLayer, LlamaCanonAttention, LlamaCanonMLP) and
  `canon_helper.py` (ShortConvolution: nn.Conv1d(groups=D, padding=K-1), output cut to the first T steps).
- reslab's MLP may be GELU (one W1): D then mixes W1 x, the pre-activation, the closest analogue.
- Init: the official model keeps nn.Conv1d's default, U(-1/sqrt(K), 1/sqrt(K)) for a depthwise kernel
  (fan_in = K); reslab draws the same law from the run's init generator (model/init.py), whatever the
  init scheme. With the residual, a Canon layer is not the identity at init.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from ..registry import design_options
from .pre_norm import PreLNBlock


class CanonConv(nn.Module):
    """canon(h) = h + causal depthwise conv of h along the sequence; h is (B, T, D)."""

    def __init__(self, dim: int, kernel: int, residual: bool = True):
        super().__init__()
        self.residual = residual
        self.weight = nn.Parameter(torch.empty(dim, kernel))    # w[c, j]: j = kernel-1 is the token itself

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        D, K = self.weight.shape
        # left-pad with K-1 zeros, so output t sees inputs t-K+1..t only (causal)
        out = F.conv1d(F.pad(h.transpose(1, 2), (K - 1, 0)), self.weight.unsqueeze(1).to(h.dtype), groups=D)
        out = out.transpose(1, 2)
        return h + out if self.residual else out


class CanonBlock(PreLNBlock):
    """pre-ln with Canon layers at options.points: x = x + A(canon_A(N1 x)); x = x + M(canon_C(N2 x)),
    with canon_B on [Q; K; V] inside A and canon_D on W1 h inside M."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        opts = design_options(cfg, layer)
        make = lambda dim: CanonConv(dim, opts.kernel, opts.residual)  # noqa: E731
        self.canon_a = make(cfg.n_embd) if "A" in opts.points else None
        self.canon_c = make(cfg.n_embd) if "C" in opts.points else None
        if "B" in opts.points:
            self.attn.qkv_mix = make(3 * cfg.n_embd)      # applied in CausalSelfAttention.qkv
        if "D" in opts.points:
            self.mlp.pre_act = make(self.mlp.c_fc.out_features)   # applied in MLP.forward

    def forward(self, x, carry=None):
        h = self.norm1(x)
        if self.canon_a is not None:
            h = self.canon_a(h)
        x = self.attn_residual(x, self.attn(h, carry))
        h = self.norm2(x)
        if self.canon_c is not None:
            h = self.canon_c(h)
        return self.mlp_residual(x, self.mlp(h))
