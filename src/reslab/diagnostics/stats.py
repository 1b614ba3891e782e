"""Training diagnostics as pure functions (no model state, no RNG, no side effects).

Naming of layers, used by every key of diagnostics.jsonl:
    embed       the embeddings (wte, wpe): "layer 0" in the sense of "the stream before any block".
                Its hidden state is the stream as it enters block0 (after the embedding norm, if
                the design has one; no dropout, since diagnostics run in eval mode).
    block{i}    the i-th transformer block, COUNTED FROM 0 as in nanoGPT's transformer.h[i]; so
                study 000's "layer-0 gradient norm" is grad_norm.block0 (the model's own
                `block.layer` counts from 1: block{i} has layer = i + 1).

Formulas (x is a (B, T, C) hidden state, x_bt its token vectors):
    group norm            ||g|| = sqrt(sum over the group's tensors of sum g^2)
    update ratio          ||p_after - p_before|| / ||p_before||  (both over the whole group)
    hidden norm           mean over b, t of ||x_bt||_2
    growth ratio          hidden_norm(after the last block) / hidden_norm(embed)
    adjacent change       mean over b, t of ||N(x_next)_bt - N(x_prev)_bt||_2, N = LayerNorm
                          without parameters (eps 1e-5): ResiDual's representation-collapse measure
    cosine similarity     per sequence b: mean over t != s of cos(x_bt, x_bs); then mean over b
                          (1.0 = every token has the same direction: rank collapse)
    attention entropy     per head h: H_bht = -sum_s P_bhts log P_bhts over the keys s <= t of the
                          causal SOFTMAX P (for shaped attention the softmax part only, before the
                          beta*P + alpha*I - gamma*C mix); mean over b and query positions t (nats).
                          With residual_attention (RealFormer) P is the softmax of the ACCUMULATED
                          scores S_l = QK^T/sqrt(d) + S_{l-1}, the matrix the layer really applies;
                          with value_residual (ResFormer) P is unchanged, but in layers l > 1 it
                          mixes lambda1 V_l + lambda2 V_1 rather than V_l
    spike score           see spike_score()
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..model.norms import Derf, DyT, SeeDNorm

NORM_TYPES = (nn.LayerNorm, nn.RMSNorm, DyT, Derf, SeeDNorm)


# ---- parameter groups ----------------------------------------------------------------------------
def parameter_groups(model: nn.Module) -> dict[str, list[str]]:
    """Group key -> names of the model's parameters (as in model.named_parameters(); a tied head
    appears once, under embed).

        embed            wte.*, wpe.*
        embed_norm       stream.embed_norm.*         (only if it has parameters)
        block{i}         every parameter of block i (0-based)
        block{i}.attn    its attention  (W_QKV, W_P, shaped attention's alpha/beta/gamma)
        block{i}.mlp     its MLP
        block{i}.norms   its LayerNorm / RMSNorm / DyT / Derf / SeeDNorm parameters (DyT: alpha, gamma, beta)
        block{i}.scalars everything else in the block: ReZero g, Admin w1/w2, SAS g_attn/a_ff/b_ff,
                         the residual points' learned skip / branch scales (skip_weight, branch_weight)
        final_norm       stream.final_norm.*
        head             lm_head.weight, only when it is not tied to wte
        total            every parameter
    Groups without parameters are left out.
    """
    groups: dict[str, list[str]] = {}

    def add(key: str, name: str) -> None:
        groups.setdefault(key, []).append(name)

    owner: dict[int, str] = {}  # id(param) -> "block{i}.<sub>"
    for i, block in enumerate(getattr(model, "blocks", [])):
        for mname, module in block.named_modules():
            first = mname.split(".")[0] if mname else ""
            if first == "attn":
                sub = "attn"
            elif first == "mlp":
                sub = "mlp"
            elif isinstance(module, NORM_TYPES):
                sub = "norms"
            else:
                sub = "scalars"
            for p in module.parameters(recurse=False):
                owner.setdefault(id(p), f"block{i}.{sub}")
    for name, p in model.named_parameters():
        add("total", name)
        if name.startswith(("wte.", "wpe.")):
            add("embed", name)
        elif name.startswith("stream.embed_norm."):
            add("embed_norm", name)
        elif name.startswith("stream."):
            add("final_norm", name)
        elif name.startswith("lm_head."):
            add("head", name)
        elif id(p) in owner:
            key = owner[id(p)]
            add(key.split(".")[0], name)
            add(key, name)
        else:
            add("other", name)
    return groups


def group_norm(tensors: Iterable[torch.Tensor | None]) -> float:
    """sqrt(sum of squares) over all the tensors (None, e.g. an unused parameter's grad, counts 0)."""
    total = 0.0
    for t in tensors:
        if t is not None:
            total += float(t.detach().float().pow(2).sum())
    return math.sqrt(total)


def grouped_norms(named: dict[str, torch.Tensor | None], groups: dict[str, list[str]]) -> dict[str, float]:
    """group key -> group_norm of the named tensors in that group."""
    return {key: group_norm(named.get(n) for n in names) for key, names in groups.items()}


def update_ratios(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor],
                  groups: dict[str, list[str]]) -> dict[str, float | None]:
    """group key -> ||p_after - p_before|| / ||p_before|| (None when ||p_before|| = 0, e.g. ReZero's g)."""
    out: dict[str, float | None] = {}
    for key, names in groups.items():
        den = group_norm(before[n] for n in names)
        num = group_norm(after[n].detach().float() - before[n].float() for n in names)
        out[key] = num / den if den > 0 else None
    return out


# ---- hidden states -----------------------------------------------------------------------------
def hidden_norm(x: torch.Tensor) -> float:
    """mean over tokens (all leading axes) of the L2 norm of each token's vector."""
    return float(x.detach().float().norm(dim=-1).mean())


def growth_ratio(norms: Sequence[float]) -> float | None:
    """final / initial hidden norm (None if the initial one is 0)."""
    return norms[-1] / norms[0] if norms[0] > 0 else None


def adjacent_change(x_prev: torch.Tensor, x_next: torch.Tensor, eps: float = 1e-5) -> float:
    """mean over tokens of ||N(x_next) - N(x_prev)||_2, N a LayerNorm without parameters."""
    a = F.layer_norm(x_prev.detach().float(), x_prev.shape[-1:], eps=eps)
    b = F.layer_norm(x_next.detach().float(), x_next.shape[-1:], eps=eps)
    return float((b - a).norm(dim=-1).mean())


def mean_pairwise_cosine(x: torch.Tensor, eps: float = 1e-8) -> float:
    """Rank collapse: per sequence, mean cos(x_t, x_s) over pairs t != s; then mean over sequences."""
    x = x.detach().float()
    if x.dim() == 2:
        x = x[None]
    T = x.shape[-2]
    if T < 2:
        return float("nan")
    u = x / x.norm(dim=-1, keepdim=True).clamp_min(eps)
    sims = u @ u.transpose(-2, -1)                        # (B, T, T)
    off = sims.sum(dim=(-2, -1)) - sims.diagonal(dim1=-2, dim2=-1).sum(-1)
    return float((off / (T * (T - 1))).mean())


# ---- attention -------------------------------------------------------------------------------------
@torch.no_grad()
def attention_probs(attn: nn.Module, x: torch.Tensor,
                    prev_scores: torch.Tensor | None = None) -> torch.Tensor:
    """The causal softmax P (B, H, T, T) of a CausalSelfAttention on input x (the softmax part
    only, also for shaped attention). prev_scores: the previous layer's pre-softmax scores
    S_{l-1} with residual_attention (RealFormer), added before the softmax; None = none."""
    q, k, _ = attn.qkv(x)
    q, k = q.float(), k.float()
    T = x.shape[1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if prev_scores is not None:
        scores = scores + prev_scores.float()
    mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)


def attention_entropy(probs: torch.Tensor) -> list[float]:
    """Per head: -sum_s P log P over keys (0 log 0 = 0), mean over batch and query positions (nats)."""
    p = probs.detach().float()
    plogp = torch.where(p > 0, p * p.clamp_min(1e-30).log(), torch.zeros_like(p))
    ent = -plogp.sum(dim=-1)                              # (B, H, T)
    return [float(v) for v in ent.mean(dim=(0, 2))]


# ---- loss spikes ---------------------------------------------------------------------------------
def spike_score(values: Sequence[float], window: int = 1000, threshold: float = 7.0) -> float | None:
    """OLMo-2-style loss-spike score: the fraction of steps whose value exceeds
    mean + threshold * std of the up to `window` values before it.

    Non-finite values are dropped first. A step is scored when at least 2 earlier values exist
    (std is the sample standard deviation, ddof = 1, over min(window, available) earlier values);
    the score is (scored steps that spike) / (scored steps), None when no step can be scored.
    Example: 10 equal values then one larger value -> 1 spike among 9 scored steps -> 1/9.
    """
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if len(xs) < 3:
        return None
    t = np.asarray(xs, dtype=np.float64)
    spikes, scored = 0, 0
    for i in range(2, len(xs)):
        prev = t[max(0, i - window):i]
        mean, std = float(prev.mean()), float(prev.std(ddof=1))
        scored += 1
        if xs[i] > mean + threshold * std:
            spikes += 1
    return spikes / scored
