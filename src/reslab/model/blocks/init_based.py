"""Blocks whose training stability comes from the initialisation instead of (or beside) a norm.

    skipinit   x = x + a1*A(x);                      x = x + a2*M(x)                     no norm
    fixup      x = x + m1*A(x + b1);                 x = x + m2*W2(act(W1(x + b2) + b3) + b4)
               (the last block also adds b_head: the head reads x_L + b_head)        no norm
    t-fixup    x = x + A(x);                         x = x + M(x)                        no norm
    sub-ln     x = x + W_P N_a(Attn(N1(x)));        x = x + W2 N_f(act(W1 N2(x)));      final N

    skipinit:  x ──┬────────────(+)──┬────────────(+)──>      fixup:  x ──┬──────────────────(+)──>
                   └─ A ── *a1 ──┘   └─ M ── *a2 ──┘                      └─ +b1 ── A ── *m1 ──┘
    sub-ln:    x ──┬─────────────────────────────────────────(+)──>   (the MLP alike: W2 N_f(act(W1 N2 x)))
                   └─ N1 ── softmax(QK^T/sqrt(d)) V ── N_a ── W_P ──┘

Each design's init is in model/init.py (init = "fixup", "t-fixup", "sub-ln"; DS-Init is an init alone,
"ds-init", for post-ln: its paper's model is post-ln).

skipinit: De & Smith 2020, "Batch Normalization Biases Residual Blocks Towards the Identity Function
in Deep Networks" (arXiv 2002.10444). A learned scalar alpha at the end of EACH residual branch,
initialised to 0 (or a small constant: options.alpha_init), and no normalisation. What differs from
rezero: reslab's rezero has ONE scalar g per layer, shared by the attention and MLP branches (ReZero's
RZTXEncoderLayer, in the copies of it read in public repositories, multiplies both sublayers by one
resweight); SkipInit has one per branch, so a1 and a2 learn apart. The rule was read in summaries of the
paper (its abstract, Papers with Code's method page), not in its full text, and no code of the authors
was found; the paper studies ResNets, so reslab applies the rule as stated, one alpha per residual
branch, to both sublayers, and keeps reslab's default init (gpt2) for the weights.

fixup: Zhang, Dauphin, Ma 2019, "Fixup Initialization: Residual Learning Without Normalization" (arXiv
1901.09321). Its rules: (1) the classification layer and the last layer of each residual branch start at
0; (2) the other layers inside the branches are a standard init times L^(-1/(2m-2)) (L residual
branches, m layers per branch); (3) a scalar multiplier (1 at init) in every branch and a scalar bias (0
at init) before each linear layer and element-wise activation. For a Transformer, reslab transcribes
the authors' own Transformer code (hongyi-zhang/Fixup, fairseq/models/transformer_zero.py and
modules/multihead_attention_zero.py), which reads rule (3) this way: one bias before the attention (none
between the attention's heads and W_P), biases before W1, before the activation and before W2, one
multiplier per branch, and one bias before the output projection (the head), which reslab keeps in the
last block. The code subtracts its biases (x - b); reslab adds them (x + b), the same model with b's
sign flipped. The per-unit biases of the Linear layers are off by default (bias = false), as in that code.
The rules were read in the paper's summary (Papers with Code's method page) and in that code, not in the
paper's full text. reslab keeps its own MLP (gelu by default; that code uses ReLU: mlp = "relu") and its
own embedding init N(0, std) (that code: N(0, d^(-1/2)) times sqrt(d) in the forward).

t-fixup: Huang, Perez, Ba, Volkovs 2020, "Improving Transformer Optimization Through Better
Initialization" (ICML). The post-ln Transformer with every LayerNorm removed (the authors' code:
--dont-use-layernorm), so the block is a plain residual sum; all of T-Fixup is its init.

sub-ln: Wang et al. 2022, "Foundation Transformers" (Magneto, arXiv 2210.06423). Pre-ln plus one more
norm inside each sublayer: N_a on the attention's output before W_P, N_f on the MLP's hidden units
before W2 (microsoft/torchscale: inner_attn_ln, ffn_layernorm). NormFormer's attention norm differs: it
normalises AFTER W_P. The extra norms are of the model's kind (layernorm, rmsnorm or dyt).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from ..mlp import ACTIVATIONS
from ..registry import design_options
from . import base


class SkipInitBlock(base.Block):
    """x = x + a1*A(x);  x = x + a2*M(x);  a1, a2 learned scalars, options.alpha_init (0) at init."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.alpha_init = design_options(cfg).alpha_init
        self.attn, self.attn_residual = base.attention(cfg, layer), base.residual(cfg, cfg.attn_res)
        self.mlp, self.mlp_residual = base.mlp(cfg), base.residual(cfg, cfg.ffn_res)
        self.alpha_attn = nn.Parameter(torch.empty(()))
        self.alpha_mlp = nn.Parameter(torch.empty(()))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.alpha_attn, self.alpha_init)
        nn.init.constant_(self.alpha_mlp, self.alpha_init)

    def forward(self, x):
        x = self.attn_residual(x, self.alpha_attn * self.attn(x))
        x = self.mlp_residual(x, self.alpha_mlp * self.mlp(x))
        return x


class FixupBlock(base.Block):
    """x = x + m1*A(x + b1);  x = x + m2*W2(act(W1(x + b2) + b3) + b4);  last block: + b_head.
    b's are scalar biases (0 at init), m's scalar multipliers (1 at init), all learned."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.attn, self.attn_residual = base.attention(cfg, layer), base.residual(cfg, cfg.attn_res)
        self.mlp, self.mlp_residual = base.mlp(cfg), base.residual(cfg, cfg.ffn_res)
        self.b1, self.b2, self.b3, self.b4 = (nn.Parameter(torch.empty(())) for _ in range(4))
        self.m1, self.m2 = nn.Parameter(torch.empty(())), nn.Parameter(torch.empty(()))
        # the bias before the classification layer: the head reads x_L + b_head (GPT has no slot for it)
        self.b_head = nn.Parameter(torch.empty(())) if layer == cfg.n_layer else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for b in (self.b1, self.b2, self.b3, self.b4) + ((self.b_head,) if self.b_head is not None else ()):
            nn.init.zeros_(b)
        nn.init.ones_(self.m1)
        nn.init.ones_(self.m2)

    def _mlp(self, x):
        """W2(act(W1(x + b2) + b3) + b4), from the MLP module's weights. SwiGLU: b3 enters both halves."""
        h = self.mlp.c_fc(x + self.b2) + self.b3
        if self.mlp.kind == "swiglu":
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = ACTIVATIONS[self.mlp.kind](h)
        return self.mlp.dropout(self.mlp.c_proj(h + self.b4))

    def forward(self, x):
        x = self.attn_residual(x, self.m1 * self.attn(x + self.b1))
        x = self.mlp_residual(x, self.m2 * self._mlp(x))
        return x + self.b_head if self.b_head is not None else x


class TFixupBlock(base.Block):
    """x = x + A(x);  x = x + M(x): post-ln with its norms removed (T-Fixup's init does the rest)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.attn, self.attn_residual = base.attention(cfg, layer), base.residual(cfg, cfg.attn_res)
        self.mlp, self.mlp_residual = base.mlp(cfg), base.residual(cfg, cfg.ffn_res)

    def forward(self, x):
        x = self.attn_residual(x, self.attn(x))
        x = self.mlp_residual(x, self.mlp(x))
        return x


class NormedLinear(nn.Linear):
    """y = W N(x) + b: a Linear that normalises its input first (Sub-LN's norm before W_P). Still an
    nn.Linear, so the init schemes and init-mode gains treat it as the attention's W_P."""

    def __init__(self, norm: nn.Module, in_features: int, out_features: int, bias: bool = True):
        super().__init__(in_features, out_features, bias=bias)
        self.norm = norm

    def forward(self, x):
        return super().forward(self.norm(x))


class SubLNBlock(base.Block):
    """x = x + W_P N_a(Attn(N1(x)));  x = x + W2 N_f(act(W1 N2(x)))."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.norm1, self.attn, self.attn_residual = base.norm(cfg), base.attention(cfg, layer), base.residual(cfg, cfg.attn_res)
        # W_P reads the heads' output through N_a (the attention's own W_P is replaced, not kept)
        self.attn.c_proj = NormedLinear(base.norm(cfg), cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.norm2, self.mlp, self.mlp_residual = base.norm(cfg), base.mlp(cfg, mid_norm=True), base.residual(cfg, cfg.ffn_res)

    def forward(self, x):
        x = self.attn_residual(x, self.attn(self.norm1(x)))
        x = self.mlp_residual(x, self.mlp(self.norm2(x)))
        return x
