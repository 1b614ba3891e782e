"""The residual add as one named, hookable point.

    out = s * x + a * (gain * alpha * branch)      (skip kept)
    out =         a * (gain * alpha * branch)      (skip removed: the partial-residual ablation)
    out = s x + (b - proj(b)),  b = a * (gain * alpha * branch)    (residual_update = "orthogonal":
          the update's component along the stream s x removed, proj(b) = (<b, s x> / (<s x, s x> + eps)) s x)

What multiplies what:
    s      skip_weight, multiplies the SKIP x.            Learned (skip_scale = "scalar" | "channel"),
           initialised to 1; absent (no parameter, s = 1) with skip_scale = "none" or without a skip.
    a      branch_weight, multiplies the BRANCH.           Learned (branch_scale = "scalar" | "channel"),
           initialised to branch_scale_init (LayerScale's diag(lambda) with "channel"); absent
           (no parameter, a = 1) with branch_scale = "none".
    gain   runtime branch gain, a fixed float: multiplies the BRANCH.
    alpha  ProRes alpha(l, t), a buffer set after every optimizer step: multiplies the BRANCH.
    k      stochastic depth's keep factor k_l (0, or 1 / (1 - p_l)), a buffer the model sets for every
           update; multiplies the BRANCH in training only (model/stochastic_depth.py).
"scalar" has shape (), one number for this residual point; "channel" has shape (C,), one per
channel, broadcast over batch and time. s and a are trainable and never weight-decayed (only
Linear / Embedding weights decay). Post-norm blocks normalise this sum: x = N(s*x + a*F(x)).

Designs whose skip factor is part of their formula (DeepNorm's a, Admin's w, SAS's a_FF) write
it in their block, where it can be read beside the formula. Diagnostics attach forward hooks to
these modules and report s and a as the block's learned scalars.
"""

from __future__ import annotations

import torch
from torch import nn

SCALE_SHAPES = ("none", "scalar", "channel")


def _scale(kind: str, dim: int | None) -> nn.Parameter | None:
    """A learned scale of shape () ("scalar") or (dim,) ("channel"); None for "none"."""
    if kind not in SCALE_SHAPES:
        raise ValueError(f"unknown learned scale {kind!r}; choose one of {', '.join(SCALE_SHAPES)}")
    if kind == "none":
        return None
    if kind == "channel" and dim is None:
        raise ValueError("a per-channel scale needs the channel count (dim)")
    return nn.Parameter(torch.empty(() if kind == "scalar" else (dim,)))


def projection_onto(branch: torch.Tensor, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """proj_x(F) = (<F, x> / (<x, x> + eps)) x over the channels of each token (the part to remove)."""
    return (branch * x).sum(-1, keepdim=True) / ((x * x).sum(-1, keepdim=True) + eps) * x


class Residual(nn.Module):
    def __init__(self, skip: bool = True, gain: float = 1.0, prores: bool = False, *,
                 skip_scale: str = "none", branch_scale: str = "none", branch_scale_init: float = 1.0,
                 dim: int | None = None, orthogonal: bool = False, stochastic_depth: bool = False):
        super().__init__()
        self.skip = skip
        self.orthogonal = orthogonal
        self.gain = gain
        self.prores = prores
        self.branch_scale_init = float(branch_scale_init)
        # No skip, nothing to scale: a parameter that never reaches the output would get no gradient.
        self.register_parameter("skip_weight", _scale(skip_scale, dim) if skip else None)
        self.register_parameter("branch_weight", _scale(branch_scale, dim))
        # alpha is a buffer (not a Python float) and is always multiplied in when ProRes is on (x * 1.0
        # is exact), so a compiled model never recompiles when alpha changes or reaches 1. It is
        # saved with the weights, and set_alpha() rewrites it in place after every optimizer step.
        self.register_buffer("alpha", torch.ones(()), persistent=prores)
        # k is drawn afresh for every update from (seed, step), so it is never saved; each seed of a
        # stack gets its own (train/stacked.py passes the members' k stacked, like their weights).
        self.stochastic_depth = stochastic_depth
        if stochastic_depth:
            self.register_buffer("keep", torch.ones(()), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """s = 1, a = branch_scale_init, alpha = 1 (the model's set_step then writes alpha(l, t))."""
        if self.skip_weight is not None:
            nn.init.ones_(self.skip_weight)
        if self.branch_weight is not None:
            nn.init.constant_(self.branch_weight, self.branch_scale_init)
        with torch.no_grad():
            self.alpha.fill_(1.0)

    def set_alpha(self, value: float) -> None:
        self.alpha.fill_(value)

    def set_keep(self, value: float) -> None:
        self.keep.fill_(value)

    def forward(self, x: torch.Tensor, branch: torch.Tensor) -> torch.Tensor:
        if self.gain != 1.0:
            branch = self.gain * branch
        if self.prores:
            branch = self.alpha * branch
        if self.branch_weight is not None:
            branch = self.branch_weight * branch
        if self.stochastic_depth and self.training:
            branch = self.keep * branch
        if not self.skip:
            return branch
        if self.skip_weight is not None:
            x = self.skip_weight * x
        if self.orthogonal:  # the update's component along the (scaled) stream is removed, token by token
            branch = branch - projection_onto(branch, x)
        return x + branch

    def extra_repr(self) -> str:
        text = f"skip={self.skip}, gain={self.gain}, prores={self.prores}"
        if self.orthogonal:
            text += ", orthogonal=True"
        if self.stochastic_depth:
            text += ", stochastic_depth=True"
        if self.skip_weight is not None:
            text += f", skip_weight={tuple(self.skip_weight.shape)}"
        if self.branch_weight is not None:
            text += f", branch_weight={tuple(self.branch_weight.shape)} init {self.branch_scale_init:g}"
        return text
