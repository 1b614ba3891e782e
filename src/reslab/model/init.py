"""Initialisation schemes. Every parameter is written here from one torch.Generator, so the init
does not depend on (or disturb) the global RNG that data order or dropout might use.

    gpt2       every weight N(0, std); output projections (attn W_P, MLP W2) N(0, std/sqrt(2L))
    deepnorm   Xavier-normal; W_V, W_P, W1, W2 multiplied by b = (8L)^(-1/4)   (DeepNet)
    t-fixup    Xavier-uniform; W_V, W_P, W1, W2 multiplied by (9L)^(-1/4); token embedding
               N(0, 1/sqrt(d)) multiplied by (9L)^(-1/4)                          (T-Fixup, decoder rule)
    identity   gpt2, then W_Q = 0 (shaped attention = I) and the extra first-layer W_V = 0  (SAS)
    xavier     Xavier-normal everywhere in the blocks (the setting of Xiong et al. 2020)
    fixup      W_P, W2 (and an untied head) = 0; [W_Q; W_K; W_V] Xavier-uniform over the fused
               matrix times K^(-1/6), W1 Xavier-uniform times K^(-1/2), K = 2L residual branches (Fixup)
    ds-init    Xavier-uniform with its bound times 1/sqrt(l) in layer l (alpha = 1)   (DS-Init)
    sub-ln     Xavier-uniform; W_V, W_P, W1, W2 multiplied by sqrt(log(2L))           (Magneto)
Embeddings (and an untied head) are N(0, std) in every scheme but t-fixup (and fixup's head); biases
are 0; norms are 1 and 0. Canon layers' depthwise kernels (blocks/canon.py) are
U(-1/sqrt(K), 1/sqrt(K)) in every scheme, as nn.Conv1d's default that the paper's code keeps.

Where the papers leave a choice open (blocks/init_based.py has the designs):
t-fixup  The paper gives (9N)^(-1/4) for the decoder and 0.67 N^(-1/4) for the encoder (the authors'
         code, layer6ai-labs/T-Fixup, alike); a GPT is a decoder, so reslab uses (9L)^(-1/4) (before,
         reslab used the encoder's 0.67 L^(-1/4) with Xavier-normal). The code keeps fairseq's Xavier gain
         1/sqrt(2) on W_Q, W_K (the fused-matrix bound) and multiplies token embeddings by sqrt(d) in the
         forward; reslab takes the paper's words: Xavier (gain 1) on every matrix, and N(0, d^(-1/2)) times
         (9L)^(-1/4) for the token embedding, with no sqrt(d) factor (so a tied head reads the same matrix).
         Learned positions keep N(0, std) (fairseq's positions are sinusoidal and unscaled).
fixup    The paper's rule L^(-1/(2m-2)) as the authors' Transformer code applies it (hongyi-zhang/Fixup,
         fairseq): the attention's fused in-projection [W_Q; W_K; W_V], Xavier-uniform over the whole
         3C x C matrix, times K^(-1/6), W_P = 0; W1 times K^(-1/2) (m = 2), W2 = 0; K is the code's
         num_blocks, the residual branches (2 per encoder layer + 3 per decoder layer there; 2 per layer
         in a GPT). So the code does not read the attention as m = 2 through W_V, W_P only.
ds-init  The paper: W ~ U(-gamma alpha/sqrt(l), gamma alpha/sqrt(l)), gamma = sqrt(6/(d_i + d_o)),
         on every weight matrix of layer l (l from 1); reslab takes alpha = 1 (its code's
         initializer_gain = 1). Its code (bzhangGo/zero, TF variance_scaling(alpha/sqrt(l), fan_avg,
         uniform)) gives a bound gamma sqrt(alpha) l^(-1/4) instead; reslab follows the paper's formula.
sub-ln   Magneto for a decoder-only model: gamma = sqrt(log 2N) on v_proj, out_proj, fc1, fc2 (read in
         microsoft/torchscale, architecture/decoder.py; the paper's own text was not read). torchscale
         draws q, k, v Xavier-uniform with gain 1/sqrt(2), out_proj with gain 1, and leaves fc1, fc2 at
         PyTorch's default Linear init; reslab takes Xavier-uniform with gain 1 for all six (Magneto's
         init is "derived from DeepNet", whose init is Xavier), then gamma on the four.
After the scheme, gain_mode = "init" multiplies each branch's last affine map (W_P and W2, or
the output norm of sandwich / peri-ln) by branch_gain.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .attention import CausalSelfAttention
from .blocks.base import output_projections
from .blocks.canon import CanonConv
from .blocks.post_norm import deepnorm_beta
from .mlp import MLP


def _normal_(t: torch.Tensor, std: float, g: torch.Generator) -> None:
    t.copy_(torch.empty(t.shape, dtype=torch.float32).normal_(0.0, std, generator=g).to(t))


def _xavier_(t: torch.Tensor, g: torch.Generator, gain: float = 1.0) -> None:
    fan_out, fan_in = t.shape
    _normal_(t, gain * math.sqrt(2.0 / (fan_in + fan_out)), g)


def _xavier_uniform_(t: torch.Tensor, g: torch.Generator, gain: float = 1.0) -> None:
    """U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)) over t's own shape (a fused matrix counts whole)."""
    fan_out, fan_in = t.shape
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    t.copy_(torch.empty(t.shape, dtype=torch.float32).uniform_(-bound, bound, generator=g).to(t))


def t_fixup_scale(n_layer: int) -> float:
    """T-Fixup's decoder factor (9L)^(-1/4) on W_V, W_P, W1, W2 and the token embedding."""
    return (9 * n_layer) ** -0.25


def sub_ln_gamma(n_layer: int) -> float:
    """Magneto's init factor for a decoder-only model, gamma = sqrt(log(2L)), on W_V, W_P, W1, W2."""
    return math.sqrt(math.log(2 * n_layer))


@torch.no_grad()
def _fixup_(block: nn.Module, n_branches: int, g: torch.Generator) -> None:
    """Fixup on one block: each branch's last layer (W_P, W2) = 0; the attention's in-projection
    times K^(-1/6) and W1 times K^(-1/2), both Xavier-uniform, K residual branches."""
    for m in block.modules():
        if isinstance(m, CausalSelfAttention):
            _xavier_uniform_((m.c_attn if m.value == "linear" else m.c_qk).weight, g, n_branches ** (-1 / 6))
            if m.value == "identity+linear":
                _xavier_uniform_(m.c_v.weight, g, n_branches ** (-1 / 6))
        elif isinstance(m, MLP):
            _xavier_uniform_(m.c_fc.weight, g, n_branches ** -0.5)
    for proj in output_projections(block):
        proj.weight.zero_()


def _value_weight(attn: CausalSelfAttention) -> torch.Tensor | None:
    """The W_V rows of the fused [W_Q; W_K; W_V] matrix (None with identity values)."""
    return attn.c_attn.weight[2 * attn.n_embd:] if attn.value == "linear" else None


def _branch_weights(block: nn.Module) -> tuple[list, list]:
    """(q/k weights, v/out/fc1/fc2 weights) of one block, as views that can be written in place."""
    qk, vo = [], []
    for m in block.modules():
        if isinstance(m, CausalSelfAttention):
            C = m.n_embd
            fused = m.c_attn.weight if m.value == "linear" else m.c_qk.weight
            qk += [fused[:C], fused[C:2 * C]]
            if m.value == "linear":
                vo += [_value_weight(m), m.c_proj.weight]
            elif m.value == "identity+linear":
                vo.append(m.c_v.weight)
        elif isinstance(m, MLP):
            vo += [m.c_fc.weight, m.c_proj.weight]
    return qk, vo


@torch.no_grad()
def init_weights(model: nn.Module, cfg, generator: torch.Generator) -> None:
    """Write every parameter of a GPT model according to cfg.init (cfg is resolved)."""
    g, std, L = generator, cfg.init_std, cfg.n_layer
    for m in model.modules():
        if isinstance(m, nn.Linear):
            _normal_(m.weight, std, g)
            if m.bias is not None:
                m.bias.zero_()
        elif isinstance(m, nn.Embedding):
            _normal_(m.weight, std, g)
        elif isinstance(m, CanonConv):
            bound = 1.0 / math.sqrt(m.weight.shape[1])
            m.weight.copy_(torch.empty(m.weight.shape, dtype=torch.float32).uniform_(-bound, bound, generator=g).to(m.weight))
        elif hasattr(m, "reset_parameters"):
            # norms, blocks, attention, residual points, gates, ...: every module that owns parameters
            # or buffers beyond Linear / Embedding rewrites them here, so a model built on the meta
            # device and materialised is the same model as one built directly (tested)
            m.reset_parameters()

    for layer, block in enumerate(model.blocks, start=1):
        qk, vo = _branch_weights(block)
        if cfg.init == "gpt2" or cfg.init == "identity":
            for proj in output_projections(block):
                _normal_(proj.weight, std / math.sqrt(2 * L), g)
        elif cfg.init in ("deepnorm", "xavier"):
            scale = {"deepnorm": deepnorm_beta(L), "xavier": 1.0}[cfg.init]
            for w in qk:
                _xavier_(w, g)
            for w in vo:
                _xavier_(w, g, gain=scale)
        elif cfg.init in ("t-fixup", "sub-ln"):
            scale = t_fixup_scale(L) if cfg.init == "t-fixup" else sub_ln_gamma(L)
            for w in qk:
                _xavier_uniform_(w, g)
            for w in vo:
                _xavier_uniform_(w, g, gain=scale)
        elif cfg.init == "ds-init":
            for w in qk + vo:
                _xavier_uniform_(w, g, gain=1.0 / math.sqrt(layer))
        elif cfg.init == "fixup":
            _fixup_(block, 2 * L, g)
        if cfg.init == "identity":
            for m in block.modules():
                if isinstance(m, CausalSelfAttention):
                    (m.c_attn if m.value == "linear" else m.c_qk).weight[: m.n_embd].zero_()
                    if m.value == "identity+linear":
                        m.c_v.weight.zero_()
        if cfg.gain_mode == "init" and cfg.branch_gain != 1.0:
            for proj in block.branch_outputs():
                proj.weight.mul_(cfg.branch_gain)
                if getattr(proj, "bias", None) is not None:  # RMSNorm (an output norm) has no bias
                    proj.bias.mul_(cfg.branch_gain)
    if cfg.init == "t-fixup":  # the token embedding (and a tied head): N(0, d^(-1/2)) times (9L)^(-1/4)
        _normal_(model.wte.weight, cfg.n_embd ** -0.5 * t_fixup_scale(L), g)
    if cfg.init == "fixup" and not cfg.tie_weights:  # the classification layer starts at 0
        model.lm_head.weight.zero_()
