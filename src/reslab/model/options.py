"""The own hyperparameters of built-in designs, set in TOML as [model.options].

Plain dataclasses without torch, so the registry checks them and `reslab variants` lists them
without building a model. Each block reads its own with `design_options(cfg)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal, Optional

MAX_HYPER_STREAMS = 64       # hyper-connections use n = 2..8
MAX_SINKHORN_ITERS = 10_000


def _whole(name: str, value, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        span = f"in {lo}..{hi:,}" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be a whole number {span}, got {value!r}")


def _positive(name: str, value) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value!r}")


# The designs below had their hyperparameters as [model] fields (model.gate_bias, ...) before; those
# old spellings are read, and their run identities kept, by model/spellings.py.
@dataclass(frozen=True)
class GatedOptions:
    bias: float = 2.0              # b_g, the update gate's bias: z = sig(... - b_g) (identity-leaning at init)


@dataclass(frozen=True)
class HyperOptions:
    streams: int = 4               # n parallel residual streams
    mixing: Literal["free", "sinkhorn"] = "free"  # sinkhorn: mHC's doubly stochastic stream mixing
    dynamic: bool = False          # the weights also depend on the input (DHC)
    sinkhorn_iters: int = 20       # Sinkhorn-Knopp iterations (mixing = "sinkhorn")

    def __post_init__(self):
        _whole("streams", self.streams, 1, MAX_HYPER_STREAMS)
        _whole("sinkhorn_iters", self.sinkhorn_iters, 1, MAX_SINKHORN_ITERS)
        if self.sinkhorn_iters != 20 and self.mixing != "sinkhorn":
            raise ValueError("sinkhorn_iters needs mixing = 'sinkhorn'")
        if self.mixing == "sinkhorn" and self.streams < 2:
            raise ValueError("mixing = 'sinkhorn' needs at least 2 streams (a 1 x 1 doubly stochastic "
                             "matrix is the constant 1); use 'free' for streams = 1")


@dataclass(frozen=True)
class NGPTOptions:
    alpha_init: float = 0.05       # the eigen learning rates alpha_A, alpha_M at init

    def __post_init__(self):
        _positive("alpha_init", self.alpha_init)


@dataclass(frozen=True)
class SASOptions:
    norm_free: bool = False        # drop every norm except the first layer's (the final norm too)
    ff_gain: float = 0.1           # initial b_FF, the trainable MLP-branch gain


@dataclass(frozen=True)
class ResiDualOptions:
    # s: bounds the dual stream for fp16; no effect on the function (the conformance kit checks so)
    scale: float = field(default=1.0, metadata={"range_only": True})

    def __post_init__(self):
        _positive("scale", self.scale)


@dataclass(frozen=True)
class MixLNOptions:
    post_layers: Optional[int] = None  # how many first layers are post-ln (default: ceil(L/4))

    def __post_init__(self):
        if self.post_layers is not None:
            _whole("post_layers", self.post_layers, 0)

    def filled(self, cfg) -> "MixLNOptions":
        """The default depends on the depth: ceil(n_layer / 4), Mix-LN's choice."""
        return self if self.post_layers is not None else replace(self, post_layers=math.ceil(cfg.n_layer / 4))


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


# Post-LN kept trainable (blocks/post_ln_trainable.py). Values are checked by the designs'
# check= functions in zoo.py, one line naming model.options.<field>.
@dataclass(frozen=True)
class HybridNormOptions:
    first_block_pre_norm: bool = False  # HybridNorm*: block 1 is Pre-Norm on both sublayers (QKV-norm kept)


@dataclass(frozen=True)
class KeelOptions:
    alpha: Optional[float] = None  # the skip weight; None: the paper's rule, alpha = 2L (every sublayer)

@dataclass(frozen=True)
class SkipInitOptions:
    alpha_init: float = 0.0        # each branch's multiplier alpha at init (SkipInit: 0, or a small constant)


@dataclass(frozen=True)
class MVSplitOptions:
    alpha_init: float = 0.0        # alpha at init: the leaky replacement of the trunk mean (0 keeps it)
    beta_init: float = 0.03        # beta at init: the gain of the centred update (the paper's code: 0.03)


# ---- inside the block (blocks/canon.py, blocks/altup.py); their checks are in zoo.py ----
CANON_POINTS = "ABCD"
MAX_CANON_KERNEL = 64
MAX_ALTUP_BLOCKS = 16


@dataclass(frozen=True)
class CanonOptions:
    points: str = "ABCD"           # where the Canon layers sit: A before attention, B on [Q; K; V], C before the MLP, D on W1 x
    kernel: int = 4                # each output mixes its token and the kernel - 1 tokens before it (PhysicsLM4's canon_kernel)
    residual: bool = True          # h + conv(h) (the paper's recommendation for Transformers); false: conv(h) alone


@dataclass(frozen=True)
class AltUpOptions:
    K: int = 2                     # the stream is K sub-blocks of width C; layer l computes on sub-block (l - 1) mod K
    recycled: bool = False         # Recycled-AltUp: sub-blocks 2..K copy the embedding (no wider token table)


# ---- across depth (blocks/cross_depth.py); the check is in zoo.py ----
MAX_DEPTH_STRIDE = 1024


@dataclass(frozen=True)
class DepthAttentionOptions:
    stride: int = 1                # layer l reads the earlier layers i (from 1) with (i - 1) mod stride = 0: 1 = every one
