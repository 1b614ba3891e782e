"""Causal self-attention: standard, shaped (SAS), identity value / projection, and two carries
from layer to layer (ResFormer's value residual, RealFormer's residual attention).

Standard (per head):   A(x) = softmax(Q K^T / sqrt(d) + causal mask) V,  then W_P
Shaped attention:      A = beta * softmax(...) + alpha * I - gamma * C,  C_ij = 1/i for j <= i
                       computed without a T x T matrix: A v = beta * sdpa(q, k, v) + alpha * v
                       - gamma * running_mean(v), with alpha = beta = gamma = 1 at init and W_Q = 0,
                       so softmax(...) = C and A = I at init.
Value / projection:    "linear" (W_V), "identity" (V = x, no parameters) or "identity+linear"
                       (V = (I + W_V) x with W_V = 0 at init: SAS's first layer). With vp identity
                       the output projection W_P is the identity too.

Value residual (Zhou et al. 2024, "Value Residual Learning For Alleviating Attention Concentration
in Transformers", ResFormer), per head, V_l of shape (B, H, T, d):
    layer 1:     V_1 is used as usual and kept in carry.first_values
    layer l > 1: V_l' = lambda1_l * V_l + lambda2_l * V_1       used in place of V_l
                 lambda1_l, lambda2_l: two learned scalars of layer l, both value_residual_init (0.5)
    The lambdas scale VALUES inside the attention, neither the skip nor the branch output of the
    residual stream. Gradients reach layer 1's W_V through every later layer (V_1 is not detached).

Residual attention (He et al. 2020, "RealFormer: Transformer Likes Residual Attention"), per head:
    S_l = Q_l K_l^T / sqrt(d) + S_{l-1}       (S_0 = 0; S_l kept unmasked in carry.scores)
QK-norm (qk_norm): Q, K <- RMSNorm(Q), RMSNorm(K) per head (a gain per head channel), before RoPE.
V-norm (v_norm): V <- RMSNorm(V) per head as well; with qk_norm it is HybridNorm's QKV-norm
    (Zhuo et al. 2025, arXiv 2503.04598: softmax(N(Q) N(K)^T / sqrt(d)) N(V)).
Head scale (NormFormer): each head's output A_h times a learned gamma_h before W_P.
Exclusive self-attention (XSA, arXiv 2603.09078), per head and token i, before W_P:
    y_i <- y_i - g (<y_i, v_i> / <v_i, v_i>) v_i      the output's component along the token's own value removed
    xsa = "full": g = 1 (the paper); "gated": g = tanh(a_h), a_h learned per head, 0 at init (modded-nanogpt
    record #82: XSA starts switched off and each head learns how much of it to use).
    P_l = softmax(causal_mask(S_l))           (the mask is applied anew in every layer)
    A_l = P_l V_l                             (V_l' with the value residual)
    SDPA cannot return scores, so with residual attention the attention is computed explicitly
    (a T x T matrix per head); without it the fused SDPA path (flash on GPUs) is used unchanged.

    Neither option scales the skip or the branch output: both act inside the attention.

            layer 1               layer 2                        layer 3
    scores  S1 = Q1K1/sqrt(d) ──> S2 = Q2K2/sqrt(d) + S1 ──────> S3 = Q3K3/sqrt(d) + S2    (RealFormer)
    values  V1 ──────┬──────────> V2' = l1 V2 + l2 V1            V3' = l1 V3 + l2 V1       (ResFormer)
                     └───────────────────────────────────────────────────^
    Accumulated scores are kept in float32 (float64 stays float64) even under bf16 autocast.

Gated attention (Qiu et al. 2025, arXiv 2505.06708, position G1), per head h and token i, last before W_P:
    y_i,h <- y_i,h * sigmoid(x_i W_g + b_g)[h]    attn_gate = "head": one gate per head (W_g: C -> H)
    y_i,h <- y_i,h * sigmoid(x_i W_g + b_g)[h, :] attn_gate = "elementwise": one per head channel (C -> C)
    x is the attention's input (N1(x) in a pre-ln block; the query's input with MUDD's separate views).
    W_g is drawn by the init scheme like any Linear, b_g = 0: every gate is about 1/2 at init.
Canon-B (blocks/canon.py) sets qkv_mix, a causal mix along the sequence of [Q; K; V] after QK-norm, before RoPE.
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


VALUE_RESIDUAL_ROLES = ("off", "first", "mix")
XSA_MODES = ("off", "full", "gated")
GATE_MODES = ("off", "head", "elementwise")


class CausalSelfAttention(nn.Module):
    """value_residual: "off"; "first" (layer 1: keeps V_1 in the carry); "mix" (layer > 1:
    V' = lambda1 V + lambda2 V_1). residual_attention: add the previous layer's scores (RealFormer).
    Both read and write the AttentionCarry that GPT.forward passes through the layers."""

    def __init__(self, n_embd: int, n_head: int, *, bias: bool = True, dropout: float = 0.0,
                 shaped: bool = False, value: str = "linear", rope_base: float | None = None,
                 value_residual: str = "off", value_residual_init: float = 0.5,
                 residual_attention: bool = False, qk_norm: bool = False, norm_eps: float = 1e-5,
                 head_scale: bool = False, xsa: str = "off", v_norm: bool = False, gate: str = "off"):
        super().__init__()
        assert value in ("linear", "identity", "identity+linear")
        assert value_residual in VALUE_RESIDUAL_ROLES
        # the registry refuses these combinations; the asserts guard direct construction
        assert not (shaped and (residual_attention or value_residual != "off"))
        self.n_head, self.n_embd = n_head, n_embd
        self.shaped, self.value, self.rope_base = shaped, value, rope_base
        self.value_residual, self.value_residual_init = value_residual, value_residual_init
        self.residual_attention = residual_attention
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
        if value_residual == "mix":
            # ResFormer's lambda1 (this layer's values) and lambda2 (layer 1's values): 0-dim scalars
            self.value_lambda1 = nn.Parameter(torch.empty(()))
            self.value_lambda2 = nn.Parameter(torch.empty(()))
        if qk_norm:  # QK-norm: each head's queries and keys RMS-normalised, one gain per head channel
            self.q_norm = nn.RMSNorm(n_embd // n_head, eps=norm_eps)
            self.k_norm = nn.RMSNorm(n_embd // n_head, eps=norm_eps)
        else:
            self.q_norm = self.k_norm = None
        # V-norm (HybridNorm): each head's values RMS-normalised too, one gain per head channel
        self.v_norm = nn.RMSNorm(n_embd // n_head, eps=norm_eps) if v_norm else None
        # NormFormer's head scale: each head's output times a learned gamma_h (1 at init), before W_P
        self.head_gain = nn.Parameter(torch.empty(n_head, 1, 1)) if head_scale else None
        assert xsa in XSA_MODES
        self.xsa = xsa
        # XSA's gate a_h (tanh(a_h) = 0 at init: the plain attention); none with xsa = "full" (g = 1)
        self.xsa_gate = nn.Parameter(torch.empty(n_head, 1, 1)) if xsa == "gated" else None
        assert gate in GATE_MODES
        self.gate = gate
        # gated attention's W_g (+ b_g): one logit per head ("head") or per head channel ("elementwise")
        self.c_gate = None if gate == "off" else nn.Linear(n_embd, n_head if gate == "head" else n_embd, bias=bias)
        self.qkv_mix = None    # a module on [Q; K; V] (B, T, 3C) before RoPE: Canon-B (blocks/canon.py) sets it
        self.resid_dropout = nn.Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.head_gain is not None:
            nn.init.ones_(self.head_gain)
        if self.xsa_gate is not None:
            nn.init.zeros_(self.xsa_gate)
        if self.shaped:
            for p in (self.shape_alpha, self.shape_beta, self.shape_gamma):
                nn.init.ones_(p)
        if self.value_residual == "mix":
            nn.init.constant_(self.value_lambda1, self.value_residual_init)
            nn.init.constant_(self.value_lambda2, self.value_residual_init)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        B, T, C = t.shape
        return t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)

    def qkv(self, x: torch.Tensor, views: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys, values as (B, H, T, d), with rotary positions applied if configured.
        views = (x_q, x_k, x_v): each projection reads its own input (MUDD's multiway inputs)."""
        if views is not None:
            if self.value != "linear":
                raise ValueError("separate query / key / value inputs need trained value weights (value = 'linear')")
            weights = self.c_attn.weight.split(self.n_embd)
            biases = (None,) * 3 if self.c_attn.bias is None else self.c_attn.bias.split(self.n_embd)
            q, k, v = (F.linear(t, w, b) for t, w, b in zip(views, weights, biases))
        elif self.value == "linear":
            q, k, v = self.c_attn(x).split(self.n_embd, dim=-1)
        else:
            q, k = self.c_qk(x).split(self.n_embd, dim=-1)
            v = x + self.c_v(x) if self.value == "identity+linear" else x
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        if self.q_norm is not None:  # before the rotation, as OLMo 2 and Gemma 3 do
            q, k = self.q_norm(q), self.k_norm(k)
        if self.v_norm is not None:  # before any value mixing, as HybridNorm's official code does
            v = self.v_norm(v)
        if self.qkv_mix is not None:  # Canon-B: after QK-norm, before RoPE, as PhysicsLM4's LlamaCanon
            merged = torch.cat([t.transpose(1, 2).flatten(2) for t in (q, k, v)], dim=-1)
            q, k, v = (self._heads(t) for t in self.qkv_mix(merged).split(self.n_embd, dim=-1))
        if self.rope_base is not None:
            q, k = rotate_rope(q, self.rope_base), rotate_rope(k, self.rope_base)
        return q, k, v

    def scores(self, q: torch.Tensor, k: torch.Tensor,
               prev_scores: torch.Tensor | None = None) -> torch.Tensor:
        """Unmasked pre-softmax scores Q K^T / sqrt(d) (+ S_{l-1}), (B, H, T, T). Low-precision
        inputs are accumulated in float32: RealFormer sums the scores over every layer."""
        acc = torch.promote_types(q.dtype, torch.float32)      # float64 stays float64
        s = (q @ k.transpose(-2, -1)).to(acc) * (1.0 / math.sqrt(q.shape[-1]))
        return s if prev_scores is None else s + prev_scores

    @staticmethod
    def causal_softmax(scores: torch.Tensor) -> torch.Tensor:
        """softmax over keys s <= t (future keys get -inf; the diagonal is never masked, so no NaN)."""
        T = scores.shape[-1]
        future = torch.ones(T, T, dtype=torch.bool, device=scores.device).triu(1)
        return scores.masked_fill(future, float("-inf")).softmax(dim=-1)

    def _mix_values(self, v: torch.Tensor, carry: AttentionCarry | None) -> torch.Tensor:
        """ResFormer: keep V_1 (layer 1), or V' = lambda1 * V + lambda2 * V_1 (layers > 1)."""
        if self.value_residual == "off":
            return v
        if carry is None:
            raise ValueError("value_residual needs the AttentionCarry of this forward (GPT.forward "
                             "passes one to every block)")
        if self.value_residual == "first":
            carry.first_values = v
            return v
        if carry.first_values is None:
            raise ValueError("value_residual: no first-layer values in the carry; layer 1 must run first")
        return self.value_lambda1 * v + self.value_lambda2 * carry.first_values

    def _residual_attention(self, q, k, v, carry: AttentionCarry | None) -> torch.Tensor:
        """RealFormer: S_l = QK^T/sqrt(d) + S_{l-1}, P_l = softmax(mask(S_l)), dropout on P, P V."""
        if carry is None:
            raise ValueError("residual_attention needs the AttentionCarry of this forward (GPT.forward "
                             "passes one to every block)")
        s = self.scores(q, k, carry.scores)                      # carry.scores is None in layer 1
        carry.scores = s                                         # rebound, never written in place
        probs = F.dropout(self.causal_softmax(s), p=self.attn_dropout, training=self.training)
        return probs.to(v.dtype) @ v

    def forward(self, x: torch.Tensor, carry: AttentionCarry | None = None,
                extra_values: torch.Tensor | None = None, views: tuple | None = None) -> torch.Tensor:
        """carry: this forward's AttentionCarry, needed (and updated) when value_residual or
        residual_attention is on; ignored otherwise. extra_values (B, T, C): added to the values
        before attending (the speedruns' value embeddings, v + g * E_ve[token]). views: separate
        (x_q, x_k, x_v) inputs of the three projections (MUDD); x then only gives the shape."""
        q, k, v = self.qkv(x, views)
        v = self._mix_values(v, carry)
        if extra_values is not None:
            v = v + self._heads(extra_values)
        if self.residual_attention:
            y = self._residual_attention(q, k, v, carry)
        else:
            p = self.attn_dropout if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        if self.shaped:
            y = self.shape_beta * y + self.shape_alpha * v - self.shape_gamma * causal_running_mean(v)
        return self.finish(y, v, x if views is None else views[0])

    def finish(self, y: torch.Tensor, v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """What follows the attention weights on every path (this forward's and the attentions across
        depth, blocks/cross_depth.py): XSA, NormFormer's head gains, the output gate read from x (the
        query's input), the heads merged, W_P. y, v: (B, H, T, d); x: (B, T, C)."""
        if self.xsa != "off":
            y = y - self.exclusive_part(y, v)
        if self.head_gain is not None:
            y = self.head_gain * y                                   # (H, 1, 1) over (B, H, T, d)
        if self.c_gate is not None:
            y = y * self.output_gate(x)
        y = y.transpose(1, 2).reshape(x.shape)
        return self.resid_dropout(self.c_proj(y))

    def output_gate(self, x: torch.Tensor) -> torch.Tensor:
        """Gated attention: sigmoid(x W_g + b_g) as (B, H, T, 1) (one per head) or (B, H, T, d) (per channel)."""
        g = torch.sigmoid(self.c_gate(x))
        return g.transpose(1, 2).unsqueeze(-1) if self.gate == "head" else self._heads(g)

    def exclusive_part(self, y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """XSA: g (<y_i, v_i> / <v_i, v_i>) v_i per head and token, the part of y that XSA removes."""
        along = (y * v).sum(-1, keepdim=True) / (v * v).sum(-1, keepdim=True).clamp_min(1e-8) * v
        return along if self.xsa_gate is None else torch.tanh(self.xsa_gate) * along

    @torch.no_grad()
    def attention_matrix(self, x: torch.Tensor, prev_scores: torch.Tensor | None = None) -> torch.Tensor:
        """The (B, H, T, T) matrix that mixes values, built explicitly (for tests and diagnostics).

        Residual attention: called alone, this module cannot know the previous layer's scores;
        pass prev_scores = S_{l-1} (carry.scores as it was before this layer ran), else S_0 = 0 is
        assumed, which is exact for layer 1 only. Value residual: the matrix is unchanged, but in
        layers l > 1 it mixes V_l' = lambda1 V_l + lambda2 V_1, not V_l."""
        q, k, _ = self.qkv(x)
        T = x.shape[1]
        probs = self.causal_softmax(self.scores(q, k, prev_scores)).to(x.dtype)
        if not self.shaped:
            return probs
        eye = torch.eye(T, device=x.device, dtype=x.dtype)
        C = uniform_causal_matrix(T, device=x.device, dtype=x.dtype)
        return self.shape_beta * probs + self.shape_alpha * eye - self.shape_gamma * C
