"""Attending across depth: DeepCrossAttention (dca), Mixture-of-Depths Attention (moda) and
Depth-Attention (depth-attention).

All keep what earlier layers wrote (the depth stream, blocks/depth.py) and let a layer's attention
read it selectively, instead of reading only the running sum.

DeepCrossAttention (Heddes, Javanmard, Axiotis, Fu, Bateni, Mirrokni 2025, arXiv 2502.06785).
The sources are the layer outputs X_0 = emb, X_1, ..., X_(l-1) (X_j is what layer j ADDS, so their
sum is pre-ln's stream). A GRN-v3 ("generalized residual network") combines them with learned,
input-dependent weights, one combination each for the queries, keys and values of layer l:

    w[s, i] = b[s, i] + ReLU(u_s . RMS(X_i))        b[s, i] (C,) per channel; u_s (C,); s = q, k, v
    x_s     = sum_(i<l) w[s, i] (.) X_i
    a       = A(N_q(x_q), N_k(x_k), N_v(x_v))          queries, keys, values from their own inputs
    h       = x_q + a;   X_l = a + M(N2(h))           the layer's output, appended to the sources
    head:     N_final(sum_(i<=L) w_out[i] (.) X_i)     one more GRN-v3 with a single output

      X_0, X_1, ..., X_(l-1) ── GRN_l ──> x_q, x_k, x_v
      x_q ── N_q ─┐
      x_k ── N_k ─┼── A ── a ──(+ x_q)── h ── N2 ── M ── m
      x_v ── N_v ─┘
      X_l = a + m ──> appended to the sources

RMS is an RMSNorm without a gain (a gain g would only rescale u: u . (g z) = (g u) . z). At init
b = 1, so every x_s is the plain sum of the sources, pre-ln's stream; with u = 0 the model IS
pre-ln (tested). u is drawn by the init scheme (small, not 0): ReLU's gradient at exactly 0 is 0
in PyTorch, so a u started at 0 would never move and the weights would stay static.
Readings: the paper's equations were NOT available to read here (the search tools hold only its
abstract and first page). The structure above follows the peer implementation read,
lucidrains/deep-cross-attention (`GRN`, `DCABlock`, `DCAGPT`, after its pull request #1, "Aligning
implementation of GRNv3 compared to the paper", whose thread says the paper's bias varies per layer
AND per channel and that the ReLU acts on the input-dependent term before the bias is added),
except that (1) every earlier output is kept (that code keeps only the first k and last k layers,
its reading of the paper's k, which it flags as uncertain), (2) reslab's norm kind is used for N_q,
N_k, N_v, N2 (that code uses RMSNorm, and a gain in the GRN's RMSNorm), and (3) u is not 0 at init
(see above; that code starts it at 0).
The stream's x is h + M(N2(h)) = x_q + X_l (after the last layer: the head's mix).

Mixture-of-Depths Attention (Zhu, Fang, Liao, ... Wang 2026, arXiv 2603.15619). A pre-ln block
whose attention also attends across depth: the query of token t in layer l scores the keys of the
SAME token in every earlier layer besides the sequence keys of its own layer, all in ONE softmax:

    p = softmax_j( [ q_t . k_s / sqrt(d)  for s <= t ]  ++  [ q_t . k^(i)_t / sqrt(d)  for i < l ] )
    o_t = sum_(s<=t) p_s v_s  +  sum_(i<l) p_i v^(i)_t                       per head
    x = x + W_P o (N1(x));  x = x + M(N2(x));  layer l writes its (k, v) to the depth stream

k^(i), v^(i) are layer i's own attention keys and values (after QK-norm and RoPE; at one position
RoPE rotates q_t and k_t alike, so depth scores do not depend on it). Layer 1 has no depth keys
and is pre-ln's layer 1. Readings: this follows the authors' code (hustvl/MoDA: the reference
`naive_mixture_of_depth_causal_ref` of their Triton kernel for the joint softmax, and
`vision_tasks/deit/models.py`, whose depth cache holds each earlier layer's attention k, v). The
paper's figure for language models also draws a "Linear KV Projection" beside the FFN that writes
a second (k, v) per layer; its details were not readable here (no text of the paper), so reslab
does not add it. The paper reports post-norm working better with MoDA; reslab's block is
pre-norm, as the authors' released code is. GQA (their G groups) is not in reslab: G = 1.
The attention is computed with an explicit (T + l - 1) x T-wide score matrix per head, not their
kernel, so it is for the lab's small scales.

Depth-Attention (Zeng, Hao, Wang, Song, Li, Song, Liu, He, Wang, Lin 2026, arXiv 2606.05014). A
pre-ln block whose VALUES are mixed across depth before the sequence attention reads them: the
query of token t in layer l first attends over the keys of the same token in the layers J(l) it
reads and in itself, per head, and the mixed value takes the value's place (and its slot in the
key-value cache):

    p_j     = softmax_j( q_t . k^(j)_t / sqrt(d) )          j in J(l) and l (earlier keys and its own)
    v~^(l)_t = sum_(j in J(l)) p_j v~^(j)_t  +  p_l v^(l)_t   v~^(j): what layer j stored, v^(l): its own
    o_t     = sum_(s<=t) softmax_s( q_t . k_s / sqrt(d) ) v~^(l)_s      the usual causal attention
    x = x + W_P o (N1(x));  x = x + M(N2(x));  layer l stores (k^(l), v~^(l))
    J(l)    = { j < l : (j - 1) mod stride = 0 }                  (options.stride; 1: every j < l)

      layer l:  N1(x) ── q, k, v ──┬── depth softmax over (k^(J(l)), k) at each token ── v~ ──┐
                                   └── q, k ─────────────────────────────────── causal attention ─┴── W_P
No parameter is added. Layer 1 has only its own key (p = 1): it is pre-ln's layer 1 (tested).
Readings: the method section was not readable here; the formula follows the depth_softmax mode of a
co-author's code (hyq718/Depth-Attention, modeling_llama_depth_attention.py, and its test of the
mixing formula), which agrees with what reslab had read from the abstract: (1) the layer's own key
and value take part in the depth softmax; (2) an earlier layer contributes the value its cache slot
holds, its depth-mixed v~ (that code stores each layer's (k, v~) and reads them back); (3) the depth
scores use 1/sqrt(d), q and k after RoPE (at one position the rotations cancel, as for MoDA). That
code reads every stride-th earlier layer from the first (`depth_attention_stride`; its released 3B
model: 48 layers, stride 24, so layers 1 and 25): options.stride here, 1 (every earlier layer) by
default, the reading reslab's studies ran. Left out: its window of the few layers just before l
(`depth_recent_window`, 0 in every released config), its k-norm after RoPE (reslab's qk_norm acts
before it; the two agree while the norm's gain is uniform, as at init), its GQA pooling of queries
for depth scores (reslab has no GQA), an optional norm of v~, and its other modes (head-0 scoring,
cross-attention over whole layers).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import CausalSelfAttention
from ..config import ModelConfig
from ..registry import design_options
from . import base
from .depth import DepthState, unit_rms, weighted_sum


# ---- DeepCrossAttention -------------------------------------------------------------------------
class GRN(nn.Module):
    """GRN-v3 with S outputs over n sources: mix_s = sum_i (b[s, i] + ReLU(u_s . RMS(X_i))) (.) X_i."""

    def __init__(self, cfg: ModelConfig, n_sources: int, n_out: int):
        super().__init__()
        self.score = nn.Linear(cfg.n_embd, n_out, bias=False)                 # u: drawn by the init scheme
        self.bias = nn.Parameter(torch.empty(n_out, n_sources, cfg.n_embd))   # b: 1 at init
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.ones_(self.bias)

    def forward(self, sources: list, units: list) -> torch.Tensor:
        """(S, B, T, C). The static and the dynamic part are summed source by source and kept apart:
        b (S, 1, 1, C) and ReLU(.) (S, B, T, 1) are small, so autograd keeps no (S, B, T, C) weight per
        source (which would make the activation memory grow as L^2)."""
        static = [b[:, None, None, :] for b in self.bias.unbind(1)]
        dynamic = [F.relu(self.score(u)).permute(2, 0, 1).unsqueeze(-1) for u in units]
        return weighted_sum(static, sources) + weighted_sum(dynamic, sources)


class DCABlock(base.Block):
    """x_q, x_k, x_v = GRN_l(X_0..X_(l-1)); h = x_q + A(N_q x_q, N_k x_k, N_v x_v); X_l = a + M(N2(h))."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.eps = cfg.norm_eps
        self.gain = cfg.branch_gain if cfg.gain_mode == "runtime" else 1.0   # multiplies a and m
        self.qkv_mix = GRN(cfg, n_sources=layer, n_out=3)                     # emb and the l-1 earlier outputs
        self.norm_q, self.norm_k, self.norm_v = base.norm(cfg), base.norm(cfg), base.norm(cfg)
        self.attn = base.attention(cfg, layer)
        self.norm2, self.mlp = base.norm(cfg), base.mlp(cfg)
        self.out_mix = GRN(cfg, n_sources=layer + 1, n_out=1) if layer == cfg.n_layer else None  # the head's

    def branch(self, out: torch.Tensor) -> torch.Tensor:
        return out if self.gain == 1.0 else self.gain * out

    def forward(self, state: DepthState) -> DepthState:
        sources = state.sources
        units = state.units or (unit_rms(sources[0], self.eps),)            # layer 1: the embedding's
        xq, xk, xv = self.qkv_mix(list(sources), list(units))
        a = self.branch(self.attn(xq, views=(self.norm_q(xq), self.norm_k(xk), self.norm_v(xv))))
        h = xq + a
        m = self.branch(self.mlp(self.norm2(h)))
        out = a + m
        sources, units = sources + (out,), units + (unit_rms(out, self.eps),)
        x = h + m if self.out_mix is None else self.out_mix(list(sources), list(units))[0]
        return DepthState(x=x, sources=sources, units=units)


# ---- Mixture-of-Depths Attention ----------------------------------------------------------------
def moda_attention(attn: CausalSelfAttention, x: torch.Tensor, depth_kv: tuple) -> tuple:
    """W_P o with o from one softmax over the causal sequence keys and the same token's keys of the
    earlier layers (depth_kv: ((k, v), ...) oldest first). Returns (output (B, T, C), (k, v))."""
    q, k, v = attn.qkv(x)                                                    # (B, H, T, d)
    p_drop = attn.attn_dropout if attn.training else 0.0
    if not depth_kv:                                                         # layer 1: plain attention
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p_drop, is_causal=True)
    else:
        T = q.shape[-2]
        seq = attn.scores(q, k)                                              # (B, H, T, T), float32 or wider
        seq = seq.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        depth = torch.stack([(q * ki).sum(-1) for ki, _ in depth_kv], dim=-1)   # (B, H, T, n): q_t . k^(i)_t
        logits = torch.cat([seq, depth.to(seq.dtype) / math.sqrt(q.shape[-1])], dim=-1)
        p = F.dropout(logits.softmax(dim=-1), p=p_drop, training=attn.training).to(v.dtype)
        y = p[..., :T] @ v
        for i, (_, vi) in enumerate(depth_kv):
            y = y + p[..., T + i, None] * vi
    return attn.finish(y, v, x), (k, v)


class MoDABlock(base.Block):
    """x = x + A_depth(N1(x)); x = x + M(N2(x)); A_depth also reads the earlier layers' (k, v) at each token."""

    depth_attention = staticmethod(moda_attention)   # (attn, x, depth_kv) -> (output, (k, v) to store)

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.norm1, self.attn, self.attn_residual = base.norm(cfg), base.attention(cfg, layer), base.residual(cfg, cfg.attn_res)
        self.norm2, self.mlp, self.mlp_residual = base.norm(cfg), base.mlp(cfg), base.residual(cfg, cfg.ffn_res)

    def read(self, stored: tuple) -> tuple:
        """The earlier layers' stored (k, v) this layer attends to: all of them."""
        return stored

    def forward(self, state: DepthState) -> DepthState:
        a, kv = self.depth_attention(self.attn, self.norm1(state.x), self.read(state.kv))
        h = self.attn_residual(state.x, a)
        x = self.mlp_residual(h, self.mlp(self.norm2(h)))
        return DepthState(x=x, sources=state.sources, kv=state.kv + (kv,))


# ---- Depth-Attention ------------------------------------------------------------------------------
def depth_mixed_attention(attn: CausalSelfAttention, x: torch.Tensor, depth_kv: tuple) -> tuple:
    """W_P o with o the causal attention over depth-mixed values v~ (depth_kv: the earlier layers'
    stored (k, v~), oldest first). Returns (output (B, T, C), (k, v~)) for the depth stream."""
    q, k, v = attn.qkv(x)                                                    # (B, H, T, d)
    keys, values = [ki for ki, _ in depth_kv] + [k], [vi for _, vi in depth_kv] + [v]
    acc = torch.promote_types(q.dtype, torch.float32)                        # float64 stays float64
    logits = torch.stack([(q * kj).sum(-1) for kj in keys], dim=-1).to(acc) / math.sqrt(q.shape[-1])
    p = logits.softmax(dim=-1).to(v.dtype)                                   # (B, H, T, l)
    mixed = weighted_sum([p[..., j, None] for j in range(len(values))], values)
    p_drop = attn.attn_dropout if attn.training else 0.0
    y = F.scaled_dot_product_attention(q, k, mixed, dropout_p=p_drop, is_causal=True)
    return attn.finish(y, mixed, x), (k, mixed)


class DepthAttentionBlock(MoDABlock):
    """x = x + A(N1(x)) with A's values first mixed across depth (v~); x = x + M(N2(x)): MoDA's block
    with the other attention across depth."""

    depth_attention = staticmethod(depth_mixed_attention)

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.stride = design_options(cfg, layer).stride

    def read(self, stored: tuple) -> tuple:
        """Layers 1, 1 + stride, 1 + 2 stride, ..., oldest first (stored[i] is layer i + 1's); every
        layer stores its (k, v~) whether or not a later layer reads it."""
        return stored[::self.stride]
