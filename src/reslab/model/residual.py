"""The residual add as one named, hookable point.

    out = x + gain * alpha * branch          (skip kept)
    out =     gain * alpha * branch          (skip removed: the partial-residual ablation)

`gain` (runtime branch gain) and `alpha` (ProRes) multiply the BRANCH, never the skip. Designs
that scale the skip (DeepNorm's a, Admin's w, SAS's a_FF) write that factor in their block, where
it can be read beside the formula. Diagnostics attach forward hooks to these modules.
"""

from __future__ import annotations

import torch
from torch import nn


class Residual(nn.Module):
    def __init__(self, skip: bool = True, gain: float = 1.0, prores: bool = False):
        super().__init__()
        self.skip = skip
        self.gain = gain
        self.prores = prores
        # alpha is a buffer (not a Python float) and is always multiplied in when ProRes is on (x * 1.0
        # is exact), so a compiled model never recompiles when alpha changes or reaches 1. It is
        # saved with the weights, and set_alpha() rewrites it in place after every optimizer step.
        self.register_buffer("alpha", torch.ones(()), persistent=prores)

    def set_alpha(self, value: float) -> None:
        self.alpha.fill_(value)

    def forward(self, x: torch.Tensor, branch: torch.Tensor) -> torch.Tensor:
        if self.gain != 1.0:
            branch = self.gain * branch
        if self.prores:
            branch = self.alpha * branch
        return x + branch if self.skip else branch

    def extra_repr(self) -> str:
        return f"skip={self.skip}, gain={self.gain}, prores={self.prores}"
