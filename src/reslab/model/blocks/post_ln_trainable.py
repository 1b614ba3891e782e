"""Post-LN kept trainable: three 2025-26 designs that keep a normalised stream and fix what makes
post-ln hard to train. x is the stream entering a layer, l counts layers from 1, L = n_layer,
N a norm of the model's kind (cfg.norm), A / M the attention / MLP sublayers.

HybridNorm (Zhuo et al. 2025, arXiv 2503.04598; eq. 5-7 of the paper and the official code,
github.com/BryceZhuo/HybridNorm, dense_model/olmo/model.py):

    attn_QKV(Q, K, V) = softmax(N(Q) N(K)^T / sqrt(d_k)) N(V)              QKV-norm, per head
    Y       = MHA_QKV(X) + X                     no norm on the attention input
    X_(l+1) = FFN(N(Y)) + N(Y)                   the FFN's skip carries the NORMALISED Y
    HybridNorm* (options.first_block_pre_norm), block 1 only:
    Y_0 = MHA_QKV(N(X_0)) + X_0;   X_1 = FFN(N(Y_0)) + Y_0               Pre-Norm, QKV-norm kept

    X ──┬── A_qkv ──(+)── N ──┬── M ──(+)──>    final N before the head
        └────────────┘        └───────┘

  Readings: the Q, K, V norms are reslab's QK-norm (RMSNorm over each head's channels, a gain per
  channel, before RoPE) with the same norm on V (attention.py's v_norm); the official 1.2B config
  uses RMSNorm everywhere, so the design's default norm is rmsnorm, and with another cfg.norm only
  the two block norms change kind. The official model applies a final norm (ln_f) before the head.

KEEL (Chen & Wei 2026, "Post-LayerNorm Is Back", arXiv 2601.19895; eq. 8 / 16 and section 3.1):

    x_(l+1) = N_out(alpha x_l + F(N_in(x_l)))    for every sublayer F (A, then M)
    alpha = 2L, the paper's "L" being the count of sublayers (attention and FFN); options.alpha sets it
    block 1: the attention sublayer has no N_out and no alpha (x + A(N_in(x)), Pre-LN); the MLP
    sublayer has no alpha (N_out(x + M(N_in(x))))    ("Input Layer Initialization", section 3.1)

    x ──┬── N_in ── A ──(+)── N_out ──>      the skip weighted by alpha
        └── *alpha ──────┘

  Readings: the paper's norms are RMS-based with a learned gain and no bias, so the default norm is
  rmsnorm; no special init (reslab's gpt2 scheme); no final norm (the stream leaves N_out normalised).

SDD, Scale-Distribution Decoupling (Wang et al. 2025, arXiv 2502.15499; eq. 1 and section 4.1):
every fully-connected layer of the attention and the FFN becomes

    y = alpha (.) norm(V x),   norm(z) = z / sqrt(mean(z^2) + eps)   (no gain: alpha is the scale)

inside a Post-Norm block, x = N1(x + A(x)); x = N2(x + M(x)). alpha is a vector over the layer's
outputs, 1/sqrt(L) at init for the attention output W_P and the FFN output W2, 1 for the others.

  Readings: Q, K and V are three layers (the paper's figure 2), so the fused [W_Q; W_K; W_V] is
  normalised in three parts, and SwiGLU's [W_gate; W_up] in two; eps = cfg.norm_eps (the paper
  writes none); a bias, if the model has one, is added before the norm (the paper has none, so the
  design's default is bias = false). The weight init stays reslab's (the paper's N(0, 1/sqrt(2.5 d))
  has no effect on norm(V x) beyond eps).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..config import ModelConfig
from ..registry import design_options
from . import base
from .post_norm import PostLNBlock


# ---- HybridNorm ----
class HybridNormBlock(base.Block):
    """Y = A_qkv(X) + X;  X' = M(N(Y)) + N(Y).  HybridNorm* block 1: Y = A_qkv(N1(X)) + X;  X' = M(N(Y)) + Y."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.pre_norm = layer == 1 and design_options(cfg).first_block_pre_norm
        self.attn_norm = base.norm(cfg) if self.pre_norm else None     # HybridNorm*'s block-1 input norm
        self.attn, self.attn_residual = base.attention(cfg, layer, qkv_norm=True), base.residual(cfg, cfg.attn_res)
        self.norm, self.mlp, self.mlp_residual = base.norm(cfg), base.mlp(cfg), base.residual(cfg, cfg.ffn_res)

    def forward(self, x):
        if self.pre_norm:
            y = self.attn_residual(x, self.attn(self.attn_norm(x)))
            return self.mlp_residual(y, self.mlp(self.norm(y)))
        y = self.attn_residual(x, self.attn(x))
        n = self.norm(y)                        # the FFN's input AND its skip: post-norm on the FFN
        return self.mlp_residual(n, self.mlp(n))


# ---- KEEL ----
def keel_alpha(cfg: ModelConfig) -> float:
    """KEEL's skip weight: options.alpha, else the paper's alpha = L counted in sublayers (2 n_layer)."""
    alpha = design_options(cfg).alpha
    return float(alpha) if alpha is not None else 2.0 * cfg.n_layer


class KeelBlock(base.Block):
    """x = N_out(alpha x + F(N_in(x))) for F = A, M;  block 1: x + A(N_in(x)), then N_out(x + M(N_in(x)))."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        first = layer == 1
        # the paper's first sublayers: no Post-LN on the first attention, no alpha on either
        self.attn_alpha = self.mlp_alpha = 1.0 if first else keel_alpha(cfg)
        self.attn_norm_in, self.attn = base.norm(cfg), base.attention(cfg, layer)
        self.attn_norm_out = nn.Identity() if first else base.norm(cfg)
        self.mlp_norm_in, self.mlp, self.mlp_norm_out = base.norm(cfg), base.mlp(cfg), base.norm(cfg)
        self.attn_residual, self.mlp_residual = base.residual(cfg, cfg.attn_res), base.residual(cfg, cfg.ffn_res)

    def forward(self, x):
        x = self.attn_norm_out(self.attn_residual(self.attn_alpha * x, self.attn(self.attn_norm_in(x))))
        x = self.mlp_norm_out(self.mlp_residual(self.mlp_alpha * x, self.mlp(self.mlp_norm_in(x))))
        return x


# ---- SDD ----
class SDDScale(nn.Module):
    """alpha of one SDD layer, per output. Named `weight` like a norm's gain, so an init-mode branch
    gain scales it (init.py); its own module, so that init rewrites it (a Linear's extras it skips)."""

    def __init__(self, dim: int, init: float):
        super().__init__()
        self.init = float(init)
        self.weight = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.weight, self.init)


class SDDLinear(nn.Linear):
    """y = alpha (.) norm(V x) over each of `parts` equal slices of the outputs (W_Q, W_K, W_V fused)."""

    def __init__(self, linear: nn.Linear, parts: int, alpha_init: float, eps: float):
        super().__init__(linear.in_features, linear.out_features, bias=linear.bias is not None,
                         device=linear.weight.device, dtype=linear.weight.dtype)
        self.parts, self.eps = parts, eps
        self.scale = SDDScale(linear.out_features, alpha_init)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = super().forward(x).unflatten(-1, (self.parts, -1))
        z = z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + self.eps)    # norm: no gain of its own
        return z.flatten(-2) * self.scale.weight


class SDDBlock(PostLNBlock):
    """Post-Norm, x = N1(x + A(x)); x = N2(x + M(x)), every Linear in A and M an SDD layer."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        out, eps = 1.0 / math.sqrt(cfg.n_layer), cfg.norm_eps
        self.attn.c_attn = SDDLinear(self.attn.c_attn, 3, 1.0, eps)             # W_Q, W_K, W_V
        self.attn.c_proj = SDDLinear(self.attn.c_proj, 1, out, eps)             # W_P
        self.mlp.c_fc = SDDLinear(self.mlp.c_fc, 2 if cfg.mlp == "swiglu" else 1, 1.0, eps)  # W1 (W_gate, W_up)
        self.mlp.c_proj = SDDLinear(self.mlp.c_proj, 1, out, eps)               # W2

    def branch_outputs(self):
        # norm(V x) would undo a scaled W_P / W2, so an init-mode gain scales their alpha instead
        return [self.attn.c_proj.scale, self.mlp.c_proj.scale]
