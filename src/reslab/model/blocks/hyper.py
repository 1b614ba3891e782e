"""Hyper-connections: n parallel residual streams, read, mixed and written by learned weights.

    Zhu, Zeng, Huang, Zhong, Xu, Zhou 2024, "Hyper-Connections" (ICLR 2025)         hyper_mixing = "free"
    Xie, Wei, et al. 2025 (DeepSeek-AI), "mHC: Manifold-Constrained Hyper-Connections"   "sinkhorn"

The stream is H = (H_1 .. H_n), shape (B, T, n, C). Every sublayer k (attention, then MLP, of
every layer; k counts sublayers from 0) has its own connection weights: read A_m in R^n,
mixing A_r in R^{n x n}, write B in R^n. The sublayer is pre-norm:

    enter:        H_i  = emb                                   for every stream i
    sublayer k:   h    = sum_i A_m[i] H_i                      (what the sublayer reads)
                  y    = F(N(h))                               (attention or MLP)
                  H'_j = sum_i A_r[i, j] H_i  +  B[j] * y      (mix the streams, write y)
    exit:         head input = N_final(sum_i H_i)

    H_1 ─┬──────────────────[A_r]──(+)──> H'_1
    H_2 ─┼──────────────────[A_r]──(+)──> H'_2        [A_r]: every H'_j is a mix of all H_i
     ⋮   └─[A_m]─ h ─ N ─ F ─ y ─[B]─┘ (B[j] * y into every stream j)

The SKIP of stream j is the mix sum_i A_r[i, j] H_i; the BRANCH is B[j] * y. The runtime
branch_gain g multiplies the BRANCH only: H'_j = sum_i A_r[i, j] H_i + g * B[j] * y (the
`Residual` point of the sublayer does the add). In code the mixing is applied as H' = M @ H with
M = A_r^T (M[j, i] = the weight of old stream i in new stream j), the convention of mHC's H_res.

Initialisation (HC paper, "equivalent to Pre-Norm at initialisation"):
    A_m = e_(k mod n),  A_r = I,  B = (1, .., 1).
All streams then stay equal to pre-ln's x at every sublayer (exactly: the reads and mixes only
multiply by 1 and add 0), so the model is pre-ln. The head reads N_final(sum_i H_i) = N_final(n x):
N_final's eps is multiplied by n^2, so N_final(n x) = N_final(x) exactly for LayerNorm / RMSNorm
(with the plain eps the head would see pre-ln's x with eps / n^2, a visible change at GPT-2 init,
where the stream is of size ~0.02). With norm = "dyt", which is not scale-invariant, the head
reads DyT(sum_i H_i) as the formula says, and is not pre-ln's head at init.
Diagnostics and the init-time probe measure the streams' mean (1/n) sum_i H_i: N_final of it is
what the head reads, and it is on pre-ln's scale (pre-ln's x itself at init).

hyper_dynamic (DHC: the HC paper's dynamic hyper-connections and its pseudo-code): every weight
gains a term that depends on the token's streams, through N (a norm of the model's kind, over C,
applied to every stream; the paper's is LayerNorm) and tanh:
    Hn     = N(H)                                   (B, T, n, C)
    A_m(H) = A_m + s_alpha * tanh(Hn W_m)           W_m in R^C       A_m(H)[i]    from stream i
    A_r(H) = A_r + s_alpha * tanh(Hn W_r)           W_r in R^{C x n} A_r(H)[i, :] from stream i
    B(H)   = B   + s_beta  * tanh(Hn W_b)           W_b in R^C       B(H)[j]      from stream j
    W_m, W_r, W_b = 0 and s_alpha = s_beta = 0.01 at init (so DHC starts as static HC, as pre-ln).
One s_alpha for A_m and A_r, one s_beta for B, as in the paper's code.

hyper_mixing = "sinkhorn" (mHC's parameterisation): A_r is replaced by a doubly stochastic matrix
and the read / write weights are made non-negative:
    H_pre  = sigmoid(b_pre)                 read weights (A_m), each in (0, 1)
    H_post = 2 * sigmoid(b_post)            write weights (B), each in (0, 2)
    H_res  = SinkhornKnopp(b_res)           M, the mixing: H' = H_res @ H + H_post * y
    SinkhornKnopp(R): M = exp(R); sinkhorn_iters times: M = M / column sums; M = M / row sums.
    Rows then sum to 1 up to rounding; columns converge: with mHC's 20 iterations, 99.6% of 4 x 4
    draws R ~ N(0, 1) are within 1e-5 (the slowest off by up to ~1e-3), every draw within 2e-7
    after 50 iterations, every draw of R ~ N(0, 0.25) within 1e-9 after 20 (measured; the tests
    check 1e-5).
With hyper_dynamic the logits get mHC's input-dependent term, from the token's n streams
flattened to one vector of nC values and RMS-normalised (no learned gain: phi absorbs it):
    x~ = RMSNorm(vec(H));   logits = b + alpha * (x~ phi)       phi_pre, phi_post in R^{nC x n},
    phi_res in R^{nC x n^2} (reshaped row-major to n x n: entry [j, i] = column j*n + i), phi = 0
    and alpha_pre = alpha_post = alpha_res = 0.01 at init.
The initial b below is this implementation's choice (not taken from mHC), made to start as pre-ln
as HC's init does:
    b_pre = logit(1/n)  (the sublayer reads the mean of the streams),  b_post = 0 (H_post = 1),
    b_res = 0 on the diagonal, -8 off it: H_res has diagonal 1/(1 + (n-1) e^-8) and off-diagonal
    e^-8/(1 + (n-1) e^-8), so max|H_res - I| = (n-1) e^-8 / (1 + (n-1) e^-8) < (n-1) * 3.36e-4
    (1.0e-3 for n = 4). Because the streams are equal at init and H_res's rows sum to 1, the
    model is pre-ln at init up to rounding. mHC needs n >= 2 (the registry refuses n = 1: sigmoid
    read weights cannot reach 1, and a 1 x 1 doubly stochastic matrix is the constant 1).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..config import ModelConfig
from ..registry import design_options
from ..norms import make_norm
from . import base

DYNAMIC_SCALE_INIT = 0.01     # s_alpha, s_beta (HC) and alpha_pre / post / res (mHC) at init
SINKHORN_OFF_DIAGONAL = -8.0  # b_res off the diagonal at init (0 on it): H_res within 1e-3 of I for n = 4


class _TokensMajor(torch.autograd.Function):
    """(n, n, tokens) -> a contiguous (tokens, n, n), and the gradient back into a contiguous
    (n, n, tokens). With a plain permute + contiguous the gradient would arrive strided, and every
    step of Sinkhorn-Knopp's backward would run on strided tensors (3.7x slower on a CPU)."""
    generate_vmap_rule = True   # stacked seeds (torch.func.vmap) batch it like any permute

    @staticmethod
    def forward(m):
        return m.permute(2, 0, 1).contiguous()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad.permute(1, 2, 0).contiguous()


def sinkhorn_knopp(logits: torch.Tensor, iters: int) -> torch.Tensor:
    """exp(logits) over the last two axes, made doubly stochastic (mHC eq. 9): `iters` rounds of
    column normalisation then row normalisation. Rows sum to 1 up to rounding (the last step);
    columns to within the method's convergence. Subtracting the max first cannot change the
    result (every normalisation removes a common factor) and keeps exp finite."""
    shape, n = logits.shape, logits.shape[-1]
    x = logits.reshape(-1, n, n)
    # the matrices are laid out (n, n, tokens): a row or column sum then adds n contiguous planes,
    # and each division broadcasts over a contiguous axis. The same arithmetic as on (tokens, n, n),
    # bit for bit, about 4.5x faster forward and backward on a CPU for dynamic mHC's 4 x 4 per token.
    m = torch.exp(x - x.amax(dim=(-2, -1), keepdim=True)).permute(1, 2, 0).contiguous()
    for _ in range(iters):
        m = m / m.sum(dim=0, keepdim=True)      # every column sums to 1
        m = m / m.sum(dim=1, keepdim=True)      # every row sums to 1
    return _TokensMajor.apply(m).reshape(shape)  # contiguous: a strided M sends bmm down a per-token loop


def read_streams(read: torch.Tensor, H: torch.Tensor) -> torch.Tensor:
    """h = sum_i read[i] H_i: (..., n) weights, (B, T, n, C) streams -> (B, T, C). (A broadcast
    product and sum: 2.5-3x faster on a CPU than a batch of (1, n) @ (n, C) products.)"""
    return (read.unsqueeze(-1) * H).sum(dim=-2)


def mix_streams(M: torch.Tensor, H: torch.Tensor) -> torch.Tensor:
    """H'_j = sum_i M[j, i] H_i: (..., n, n) mixing, (B, T, n, C) streams -> (B, T, n, C). (einsum
    folds a static M into one matrix product: 3.7x faster on a CPU than M @ H, which broadcasts M
    to every token. A per-token M is made contiguous first: a strided one, such as dynamic HC's
    transposed A_r, sends the batched product down a per-token loop.)"""
    return torch.einsum("...ji,...ic->...jc", M.contiguous() if M.dim() > 2 else M, H)


def write_streams(write: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """B[j] * y into stream j: (..., n) weights, (B, T, C) output -> (B, T, n, C)."""
    return write.unsqueeze(-1) * y.unsqueeze(-2)


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm without a learned gain, over the last axis."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)


class HyperConnection(nn.Module):
    """HC's weights of sublayer k: static A_m, A_r, B, and with `dynamic` DHC's tanh terms."""

    def __init__(self, cfg: ModelConfig, k: int):
        super().__init__()
        opts = design_options(cfg)
        n, C = opts.streams, cfg.n_embd
        self.n, self.k, self.dynamic = n, k, opts.dynamic
        self.a_m = nn.Parameter(torch.empty(n))        # A_m, read
        self.a_r = nn.Parameter(torch.empty(n, n))     # A_r, mix: A_r[i, j] = stream i into stream j
        self.b = nn.Parameter(torch.empty(n))          # B, write
        if self.dynamic:
            self.norm = base.norm(cfg)                 # N of DHC, per stream
            self.w_m = nn.Parameter(torch.empty(C))
            self.w_r = nn.Parameter(torch.empty(C, n))
            self.w_b = nn.Parameter(torch.empty(C))
            self.s_alpha = nn.Parameter(torch.empty(()))
            self.s_beta = nn.Parameter(torch.empty(()))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        # pre-ln at init: read stream k mod n, keep every stream, write y into every stream
        self.a_m.zero_()
        self.a_m[self.k % self.n] = 1.0
        self.a_r.copy_(torch.eye(self.n, device=self.a_r.device))
        self.b.fill_(1.0)
        if self.dynamic:
            for w in (self.w_m, self.w_r, self.w_b):
                w.zero_()
            self.s_alpha.fill_(DYNAMIC_SCALE_INIT)
            self.s_beta.fill_(DYNAMIC_SCALE_INIT)

    def forward(self, H: torch.Tensor):
        """(read (..., n), M (..., n, n) with H' = M @ H, write (..., n)); ... = () when static,
        (B, T) when dynamic."""
        a_m, a_r, b = self.a_m, self.a_r, self.b
        if self.dynamic:
            Hn = self.norm(H)
            a_m = a_m + self.s_alpha * torch.tanh(Hn @ self.w_m)
            a_r = a_r + self.s_alpha * torch.tanh(Hn @ self.w_r)
            b = b + self.s_beta * torch.tanh(Hn @ self.w_b)
        return a_m, a_r.transpose(-2, -1), b


class ManifoldHyperConnection(nn.Module):
    """mHC's weights of sublayer k: sigmoid read, 2*sigmoid write, Sinkhorn-Knopp mixing."""

    def __init__(self, cfg: ModelConfig, k: int):
        super().__init__()
        opts = design_options(cfg)
        n, C = opts.streams, cfg.n_embd
        self.n, self.k, self.dynamic = n, k, opts.dynamic
        self.iters, self.eps = opts.sinkhorn_iters, cfg.norm_eps
        self.b_pre = nn.Parameter(torch.empty(n))
        self.b_post = nn.Parameter(torch.empty(n))
        self.b_res = nn.Parameter(torch.empty(n, n))   # R: H_res = SinkhornKnopp(R)
        if self.dynamic:
            self.phi_pre = nn.Parameter(torch.empty(n * C, n))
            self.phi_post = nn.Parameter(torch.empty(n * C, n))
            self.phi_res = nn.Parameter(torch.empty(n * C, n * n))
            self.alpha_pre = nn.Parameter(torch.empty(()))
            self.alpha_post = nn.Parameter(torch.empty(()))
            self.alpha_res = nn.Parameter(torch.empty(()))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        n = self.n
        self.b_pre.fill_(-math.log(n - 1) if n > 1 else 0.0)   # sigmoid = 1/n: read the mean
        self.b_post.zero_()                                    # 2 * sigmoid(0) = 1
        self.b_res.fill_(SINKHORN_OFF_DIAGONAL)
        self.b_res.diagonal().zero_()
        if self.dynamic:
            for w in (self.phi_pre, self.phi_post, self.phi_res):
                w.zero_()
            for a in (self.alpha_pre, self.alpha_post, self.alpha_res):
                a.fill_(DYNAMIC_SCALE_INIT)

    def forward(self, H: torch.Tensor):
        """(H_pre (..., n), H_res (..., n, n), H_post (..., n)); ... = () static, (B, T) dynamic."""
        pre, post, res = self.b_pre, self.b_post, self.b_res
        if self.dynamic:
            x = _rms(H.flatten(-2), self.eps)                  # (B, T, nC)
            pre = pre + self.alpha_pre * (x @ self.phi_pre)
            post = post + self.alpha_post * (x @ self.phi_post)
            res = res + self.alpha_res * (x @ self.phi_res).unflatten(-1, (self.n, self.n))
        return torch.sigmoid(pre), sinkhorn_knopp(res, self.iters), 2.0 * torch.sigmoid(post)


class HyperBlock(base.Block):
    """One layer, two hyper-connected pre-norm sublayers (k = 2(l-1) for attention, 2(l-1)+1 for MLP)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        connection = ManifoldHyperConnection if design_options(cfg).mixing == "sinkhorn" else HyperConnection
        k = 2 * (layer - 1)
        self.attn_hc, self.norm1, self.attn = connection(cfg, k), base.norm(cfg), base.attention(cfg, layer)
        self.mlp_hc, self.norm2, self.mlp = connection(cfg, k + 1), base.norm(cfg), base.mlp(cfg)
        self.attn_residual, self.mlp_residual = base.residual(cfg), base.residual(cfg)

    @staticmethod
    def sublayer(H, connection, norm, f, residual):
        read, mix, write = connection(H)
        y = f(norm(read_streams(read, H)))                 # y = F(N(sum_i A_m[i] H_i))
        return residual(mix_streams(mix, H), write_streams(write, y))  # H'_j = sum_i A_r[i, j] H_i + g * B[j] y

    def forward(self, H):
        H = self.sublayer(H, self.attn_hc, self.norm1, self.attn, self.attn_residual)
        return self.sublayer(H, self.mlp_hc, self.norm2, self.mlp, self.mlp_residual)


class HyperStream(nn.Module):
    """enter: H_i = N_emb(emb) for every stream (N_emb only with embed_norm);
    exit: head input = N_final(sum_i H_i), N_final's eps multiplied by n^2 (see the module doc)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n = design_options(cfg).streams
        self.embed_norm = make_norm(cfg.norm if cfg.embed_norm else "none", cfg.n_embd,
                                    bias=cfg.bias, eps=cfg.norm_eps, alpha=cfg.dyt_alpha)
        self.final_norm = make_norm(cfg.norm, cfg.n_embd, bias=cfg.bias, eps=cfg.norm_eps * self.n ** 2,
                                    alpha=cfg.dyt_alpha)

    def enter(self, emb: torch.Tensor) -> torch.Tensor:
        x = self.embed_norm(emb)
        return x.unsqueeze(-2).expand(*x.shape[:-1], self.n, x.shape[-1])

    def exit(self, H: torch.Tensor) -> torch.Tensor:
        return self.final_norm(H.sum(dim=-2))
