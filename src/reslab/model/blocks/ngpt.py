"""nGPT, the normalized Transformer: every hidden state and every weight row lives on the unit sphere.

Loshchilov, Hsieh, Sun, Ginsburg 2024, "nGPT: Normalized Transformer with Representation Learning
on the Hypersphere" (arXiv:2410.01131; reference code NVIDIA/ngpt).

    Norm(x) = x / ||x||  over the channel dimension (no mean, no eps-in-sqrt, no affine weight)

    stream   h_0 = Norm(emb);   no final norm;   logits z = s_z * (E_out h_L),  s_z per vocabulary entry
    block    h_A = Norm(A(h));   h = Norm(h + alpha_A * (h_A - h))
             h_M = Norm(M(h));   h = Norm(h + alpha_M * (h_M - h))

        h ──┬──────────────────────────(lerp)── Norm ──┬──────────────────────────(lerp)── Norm ──>
            └── A ── Norm ── h_A ─────────┘            └── M ── Norm ── h_M ─────────┘
                        h + alpha_A * (h_A - h)                     h + alpha_M * (h_M - h)

    The update is a step of length alpha from h towards h_A on the sphere (a linear interpolation,
    then a retraction by Norm). alpha_A, alpha_M in R^C are per-channel "eigen learning rates". They
    multiply the DIFFERENCE (h_A - h): the skip is weighted by (1 - alpha), the branch by alpha, so
    each alpha scales the skip and the branch at once (by 1 - alpha and alpha); no other scale
    touches either.

    attention  q = s_qk * Norm(rope(W_q h)),  k = s_qk * Norm(rope(W_k h))   per head, s_qk in R^C
               A(h) = W_o softmax(q k^T * sqrt(d_k) + causal mask) (W_v h)
               (q, k have norm ~ s_qk, so the usual 1/sqrt(d_k) would make the softmax almost uniform;
               sqrt(d_k) restores a useful temperature)
    MLP        u = s_u * (W_u h),   v = s_v * sqrt(C) * (W_v h),   M(h) = W_o (u * SiLU(v))
               (W_v h is a cosine in [-1, 1]; sqrt(C) moves it to where SiLU is non-linear)

    weights    after every optimizer step (and once at init) each weight is put back on the sphere
               along the embedding dimension: the rows of W_q, W_k, W_v, W_u, W_v(mlp) (maps from
               C), the columns of both output projections W_o (maps to C), the token-embedding rows
               and the head rows (GPT.after_optimizer_step does the embedding and the head).

The paper's scale trick (its section 2.5): a scaler s with wanted initial value s_init is stored as
a parameter initialised to s_scale and used as  s_eff = s * (s_init / s_scale),  so that Adam's step
on it acts like a step of size lr * s_init / s_scale on s_eff. The values used here, as in the paper:

    alpha_A, alpha_M   s_init = options.alpha_init (0.05)   s_scale = 1/sqrt(C)
    s_qk               s_init = 1                            s_scale = 1/sqrt(C)
    s_u, s_v           s_init = 1                            s_scale = 1
    s_z                s_init = 1                            s_scale = 1/sqrt(C)

No biases and no LayerNorm / RMSNorm anywhere (cfg.bias is not used). The MLP is always SwiGLU;
its width is the SwiGLU width of the config (2/3 of mlp_ratio * C, rounded to 8; the paper's 4C
per half is mlp_ratio = 6). Differences from the reference code, both following the paper's
equations: alpha is used as is (the code takes |alpha|), and the lerp starts from h itself (the
code re-normalises h first, which is the identity on the sphere).
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from ..registry import design_options
from ..attention import rotate_rope
from . import base


def unit(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Norm(x) = x / ||x|| along `dim` (the norm is floored at 1e-12 only to keep 0 / 0 out)."""
    return F.normalize(x, p=2.0, dim=dim, eps=1e-12)


@torch.no_grad()
def unit_rows_(weight: torch.Tensor, dim: int = 1) -> None:
    """Put a weight back on the sphere in place: dim=1 normalises rows, dim=0 columns.
    In place, so a stacked-seed view (train/stacked.py) writes its own slice of the stack."""
    weight.copy_(unit(weight, dim=dim))


class Scaler(nn.Module):
    """A learned vector used as s_eff = s * (s_init / s_scale), stored s initialised to s_scale."""

    def __init__(self, size: int, init: float, scale: float):
        super().__init__()
        self.init, self.scale = init, scale
        self.s = nn.Parameter(torch.full((size,), scale))

    def reset_parameters(self) -> None:
        nn.init.constant_(self.s, self.scale)

    def forward(self) -> torch.Tensor:
        return self.s * (self.init / self.scale)

    def extra_repr(self) -> str:
        return f"size={self.s.shape[0]}, init={self.init}, scale={self.scale:.4g}"


class NGPTStream(nn.Module):
    """h_0 = Norm(emb); the head reads h_L unnormalised (it is on the sphere); z = s_z * (E_out h_L)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.s_z = Scaler(cfg.vocab_size, init=1.0, scale=1.0 / math.sqrt(cfg.n_embd))

    def enter(self, emb: torch.Tensor) -> torch.Tensor:
        return unit(emb)

    def exit(self, h: torch.Tensor) -> torch.Tensor:
        return h

    def scale_logits(self, logits: torch.Tensor) -> torch.Tensor:
        return self.s_z() * logits


class NGPTAttention(nn.Module):
    """A(h) = W_o softmax(q k^T * sqrt(d) + mask) v,  q = s_qk * Norm(rope(W_q h)) per head, same for k."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        C, self.n_head = cfg.n_embd, cfg.n_head
        self.rope_base = cfg.rope_base if cfg.pos == "rope" else None
        self.attn_dropout = cfg.dropout
        self.c_attn = nn.Linear(C, 3 * C, bias=False)   # [W_q; W_k; W_v], unit rows
        self.c_proj = nn.Linear(C, C, bias=False)       # W_o, unit columns
        self.s_qk = Scaler(C, init=1.0, scale=1.0 / math.sqrt(C))
        self.resid_dropout = nn.Dropout(cfg.dropout)

    @torch.no_grad()
    def after_optimizer_step(self) -> None:
        unit_rows_(self.c_attn.weight, dim=1)
        unit_rows_(self.c_proj.weight, dim=0)

    def _qkv(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B, T, C = h.shape
        d = C // self.n_head
        heads = lambda t: t.view(B, T, self.n_head, d).transpose(1, 2)   # (B, H, T, d)
        q, k, v = (heads(t) for t in self.c_attn(h).split(C, dim=-1))
        if self.rope_base is not None:   # a rotation: it keeps the norm, so before or after Norm is alike
            q, k = rotate_rope(q, self.rope_base), rotate_rope(k, self.rope_base)
        s_qk = self.s_qk().view(self.n_head, 1, d)   # per head and channel, after Norm (as the paper)
        return s_qk * unit(q), s_qk * unit(k), v

    def qkv(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For diagnostics, in CausalSelfAttention.qkv's convention (the caller forms q k^T / sqrt(d)):
        q is returned times d, so that q k^T / sqrt(d) is nGPT's score q k^T * sqrt(d)."""
        q, k, v = self._qkv(h)
        return q * q.shape[-1], k, v

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        B, T, C = h.shape
        d = C // self.n_head
        q, k, v = self._qkv(h)
        p = self.attn_dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True, scale=math.sqrt(d))
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(B, T, C)))


class NGPTMLP(nn.Module):
    """M(h) = W_o (u * SiLU(v)),  u = s_u * (W_u h),  v = s_v * sqrt(C) * (W_v h)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        C = cfg.n_embd
        hidden = dataclasses.replace(cfg, mlp="swiglu").mlp_hidden
        self.sqrt_c = math.sqrt(C)
        self.c_fc = nn.Linear(C, 2 * hidden, bias=False)   # [W_u; W_v], unit rows
        self.c_proj = nn.Linear(hidden, C, bias=False)     # W_o, unit columns
        self.s_u = Scaler(hidden, init=1.0, scale=1.0)
        self.s_v = Scaler(hidden, init=1.0, scale=1.0)
        self.dropout = nn.Dropout(cfg.dropout)

    @torch.no_grad()
    def after_optimizer_step(self) -> None:
        unit_rows_(self.c_fc.weight, dim=1)
        unit_rows_(self.c_proj.weight, dim=0)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        u, v = self.c_fc(h).chunk(2, dim=-1)
        u = self.s_u() * u
        v = (self.s_v() * self.sqrt_c) * v
        return self.dropout(self.c_proj(u * F.silu(v)))


class NGPTBlock(base.Block):
    """h = Norm(h + alpha_A * (Norm(A(h)) - h));  h = Norm(h + alpha_M * (Norm(M(h)) - h))."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        C = cfg.n_embd
        self.attn, self.mlp = NGPTAttention(cfg), NGPTMLP(cfg)
        alpha_init = design_options(cfg).alpha_init
        self.alpha_attn = Scaler(C, init=alpha_init, scale=1.0 / math.sqrt(C))   # alpha_A
        self.alpha_mlp = Scaler(C, init=alpha_init, scale=1.0 / math.sqrt(C))    # alpha_M

    def branch_outputs(self) -> list[nn.Module]:
        return []   # Norm(F(h)) would undo any gain on W_o; ngpt refuses branch_gain

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h_a = unit(self.attn(h))
        h = unit(h + self.alpha_attn() * (h_a - h))
        h_m = unit(self.mlp(h))
        h = unit(h + self.alpha_mlp() * (h_m - h))
        return h
