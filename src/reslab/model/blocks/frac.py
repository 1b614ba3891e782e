"""Frac-connections (Zhu et al. 2025, "Frac-Connections: Fractional Extension of Hyper-Connections").

Hyper-connections widen the stream to n copies of width C; frac-connections keep one stream of
width C and cut it into m fractions of width d = C / m instead, H = (H_1 .. H_m), each (B, T, d).
Every sublayer k (attention, then MLP, of every layer) has its own weights: read Gamma (m x m),
mixing A (m x m), write beta (m):

    sublayer k:   u_f  = sum_g Gamma[g, f] H_g                  the m fractions the sublayer reads,
                  y    = F(N(concat_f u_f))                      concatenated back to width C
                  H'_f = sum_g A[g, f] H_g  +  beta[f] * y_f      y_f: fraction f of y
    enter / exit: H = the embedding cut into fractions; head input = N_final(concat_f H_f)

Initialisation: Gamma = I, A = I, beta = 1, so u = H, H' = H + y, and the model is pre-ln exactly.
The paper writes the weights as one (m + 1) x 2m matrix [[0, beta], [Gamma, A]] (HC's layout with
fractions in place of copies).
options.dynamic (the paper's dynamic FC, as DHC): each weight gains a term from the fractions,
through N_d (a norm of the model's kind over the d channels of a fraction) and tanh:
    Gamma(H)[g, :] = Gamma[g, :] + s_alpha tanh(N_d(H_g) W_Gamma)     W_Gamma in R^{d x m}
    A(H)[g, :]     = A[g, :]     + s_alpha tanh(N_d(H_g) W_A)         W_A in R^{d x m}
    beta(H)[f]     = beta[f]     + s_beta  tanh(N_d(H_f) w_beta)      w_beta in R^d
    W = 0 and s_alpha = s_beta = 0.01 at init (it starts as the static FC, as pre-ln).
The runtime branch_gain g multiplies the write: H'_f = sum_g A[g, f] H_g + g beta[f] y_f.
Peer: lucidrains/hyper-connections (`num_fracs`); its static weights were laid out in another order
than its einsum reads them (found by running it, 2026-12: with m = 2 both fractions read H_1), so
this follows the paper's formula, not that code.

    H_1 ─┬──────────[A]──(+)──> H'_1
    H_2 ─┼──────────[A]──(+)──> H'_2
         └─[Gamma]─ concat ─ N ─ F ─ y ─ split ─[beta]─┘ (beta[f] y_f into fraction f)
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from ..norms import make_norm
from ..registry import design_options
from . import base
from .hyper import mix_streams

DYNAMIC_SCALE_INIT = 0.01  # s_alpha, s_beta at init, as hyper-connections'


class FracConnection(nn.Module):
    """FC's weights of one sublayer: static Gamma, A, beta, and with `dynamic` the tanh terms."""

    def __init__(self, cfg: ModelConfig, fracs: int, dynamic: bool):
        super().__init__()
        m, d = fracs, cfg.n_embd // fracs
        self.m, self.dynamic = m, dynamic
        self.gamma = nn.Parameter(torch.empty(m, m))   # Gamma[g, f]: fraction g into read fraction f
        self.mix = nn.Parameter(torch.empty(m, m))     # A[g, f]: fraction g into new fraction f
        self.beta = nn.Parameter(torch.empty(m))       # beta[f]: y_f into new fraction f
        if dynamic:
            self.norm = make_norm(cfg.norm, d, bias=cfg.bias, eps=cfg.norm_eps, alpha=cfg.dyt_alpha)
            self.w_gamma = nn.Parameter(torch.empty(d, m))
            self.w_mix = nn.Parameter(torch.empty(d, m))
            self.w_beta = nn.Parameter(torch.empty(d))
            self.s_alpha = nn.Parameter(torch.empty(()))
            self.s_beta = nn.Parameter(torch.empty(()))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Gamma = A = I, beta = 1 (pre-ln); dynamic W = 0, s = 0.01."""
        eye = torch.eye(self.m, device=self.gamma.device)
        self.gamma.copy_(eye)
        self.mix.copy_(eye)
        self.beta.fill_(1.0)
        if self.dynamic:
            for w in (self.w_gamma, self.w_mix, self.w_beta):
                w.zero_()
            self.s_alpha.fill_(DYNAMIC_SCALE_INIT)
            self.s_beta.fill_(DYNAMIC_SCALE_INIT)

    def forward(self, H: torch.Tensor):
        """(Gamma, A, beta) for fractions H (B, T, m, d): shapes (m, m), (m, m), (m) when static,
        with a leading (B, T) when dynamic."""
        gamma, mix, beta = self.gamma, self.mix, self.beta
        if self.dynamic:
            Hn = self.norm(H)
            gamma = gamma + self.s_alpha * torch.tanh(Hn @ self.w_gamma)
            mix = mix + self.s_alpha * torch.tanh(Hn @ self.w_mix)
            beta = beta + self.s_beta * torch.tanh(Hn @ self.w_beta)
        return gamma, mix, beta


def combine(weights: torch.Tensor, H: torch.Tensor) -> torch.Tensor:
    """out_f = sum_g weights[g, f] H_g: (..., m, m) weights, (B, T, m, d) fractions -> (B, T, m, d).
    This is hyper-connections' stream mixing with the transposed matrix (M[f, g] = weights[g, f]),
    so it shares that product and its layout choices (hyper.mix_streams)."""
    return mix_streams(weights.transpose(-2, -1), H)


class FracBlock(base.Block):
    """One layer, two frac-connected pre-norm sublayers; the stream is x (B, T, C), cut into
    fractions inside each sublayer."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        opts = design_options(cfg)
        self.m = opts.fracs
        self.attn_fc, self.norm1, self.attn = (FracConnection(cfg, opts.fracs, opts.dynamic), base.norm(cfg),
                                               base.attention(cfg, layer))
        self.mlp_fc, self.norm2, self.mlp = (FracConnection(cfg, opts.fracs, opts.dynamic), base.norm(cfg),
                                             base.mlp(cfg))
        self.attn_residual, self.mlp_residual = base.residual(cfg), base.residual(cfg)

    def sublayer(self, x, connection, norm, f, residual):
        H = x.unflatten(-1, (self.m, -1))                              # (B, T, m, d)
        gamma, mix, beta = connection(H)
        y = f(norm(combine(gamma, H).flatten(-2)))                     # y = F(N(concat_f u_f))
        write = beta.unsqueeze(-1) * y.unflatten(-1, (self.m, -1))     # beta[f] y_f
        return residual(combine(mix, H).flatten(-2), write.flatten(-2))

    def forward(self, x):
        x = self.sublayer(x, self.attn_fc, self.norm1, self.attn, self.attn_residual)
        return self.sublayer(x, self.mlp_fc, self.norm2, self.mlp, self.mlp_residual)
