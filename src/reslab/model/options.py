"""The own hyperparameters of built-in designs, set in TOML as [model.options].

Plain dataclasses without torch, so the registry checks them and `reslab variants` lists them
without building a model. Each block reads its own with `design_options(cfg)`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParallelOptions:
    shared_norm: bool = False      # one norm feeds both branches (GPT-J, PaLM); false: N1, N2 (GPT-NeoX)


@dataclass(frozen=True)
class DenseFormerOptions:
    dilation: int = 1              # each depth-weighted average reads every dilation-th earlier output
    period: int = 1                # an average after every period-th block only

    def __post_init__(self):
        for name in ("dilation", "period"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")


@dataclass(frozen=True)
class AttnResOptions:
    block_layers: int = 0          # 0: full AttnRes (every sublayer output a source); n: Block AttnRes, groups of n layers

    def __post_init__(self):
        if isinstance(self.block_layers, bool) or not isinstance(self.block_layers, int) or self.block_layers < 0:
            raise ValueError(f"block_layers must be a whole number >= 0, got {self.block_layers!r}")


@dataclass(frozen=True)
class SpeedrunOptions:
    x0: bool = True                # x = a_l x + b_l x_0 before every block
    unet: bool = True              # decoder layer l adds w_l x_(L+1-l), the mirrored encoder output
    value_embeds: bool = True      # v + g E_l[token] on every other layer (the last included)
    backout: bool = True           # the head reads x_L - lambda x_k
    backout_layer: int = -1        # k, counted from 1 (0: the embedding); -1: L // 2

    def __post_init__(self):
        k = self.backout_layer
        if isinstance(k, bool) or not isinstance(k, int) or k < -1:
            raise ValueError(f"backout_layer must be -1 (L // 2) or a layer 0..L-1, got {k!r}")


@dataclass(frozen=True)
class NormFormerOptions:
    head_scale: bool = True        # each attention head's output times a learned gamma_h before W_P
    attn_out_norm: bool = True     # a norm on the attention branch's output: x + N(A(N1(x)))
    ffn_mid_norm: bool = True      # a norm after the MLP's activation: W2 N(act(W1 N2(x)))


@dataclass(frozen=True)
class LaurelOptions:
    rw: bool = True                # RW: alpha F + beta x, (alpha, beta) = softmax(w), w = 0 at init
    rank: int = 16                 # LR: beta (x + B A x) with rank r (B = 0 at init); 0: no LR term
    pa: bool = False               # PA: + B' A' sum_(j<i) gamma_j x_j over earlier residual points' inputs (rank r)

    def __post_init__(self):
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 0:
            raise ValueError(f"rank must be a whole number >= 0, got {self.rank!r}")
        if self.pa and self.rank == 0:
            raise ValueError("pa needs a rank >= 1 (its map B' A' is low-rank)")


@dataclass(frozen=True)
class FracOptions:
    fracs: int = 2                 # m: the stream of width C is cut into m fractions of width C / m
    dynamic: bool = False          # the weights also depend on the fractions (dynamic FC, as DHC)

    def __post_init__(self):
        if isinstance(self.fracs, bool) or not isinstance(self.fracs, int) or self.fracs < 1:
            raise ValueError(f"fracs must be a whole number >= 1, got {self.fracs!r}")
