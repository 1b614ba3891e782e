"""DenseFormer: depth-weighted averaging (DWA) after every block (Pagliardini et al. 2024).

    X_0 = emb,  Y_0 = X_0
    X_l = B_l(Y_{l-1})                                  B_l: a pre-ln block, x + A(N1 x), + M(N2 .)
    Y_l = sum_{j in J(l)} alpha_{l,j} X_j               if l % period == 0, else Y_l = X_l
          J(l) = {j : 0 <= j <= l, (l - j) % dilation == 0}
    head input = N_final(Y_L)

alpha_{l,l} = 1 and every other alpha_{l,j} = 0 at initialisation, so a DenseFormer starts as the
pre-ln model exactly. The X_j (block outputs, before averaging) are the sources the averages
read; the stream's x is Y_l. Options ([model.options]): dilation k (each average reads every
k-th earlier output; the embedding only where l % k == 0) and period p (an average after every
p-th block only). Peer: epfml/DenseFormer `DWAModules(n_blocks, dilation, period)`, whose
weights per block cover the same J(l), oldest first.

    X_0 ──────────────┬──────────────────┬─────────...
                      │                  │
    Y_0 ── B_1 ── X_1 ┴─[a_1]─ Y_1 ─ B_2 ─ X_2 ─┴─[a_2]─ Y_2 ...     [a_l]: sum_j alpha_{l,j} X_j
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from ..registry import design_options
from .depth import DepthState, weighted_sum
from .pre_norm import PreLNBlock


def dwa_indices(layer: int, dilation: int) -> list[int]:
    """J(l): the earlier outputs X_j that layer l's average reads, oldest first."""
    return list(range(layer % dilation, layer + 1, dilation))


class DenseFormerBlock(PreLNBlock):
    """X_l = PreLN_l(Y_{l-1}); Y_l = sum_{j in J(l)} alpha_{l,j} X_j (every period-th layer).
    The pre-ln parts keep pre-ln's names (norm1, attn, norm2, mlp); dwa_weights[i] = alpha_{l, J(l)[i]}."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        opts = design_options(cfg)
        self.indices = dwa_indices(layer, opts.dilation) if layer % opts.period == 0 else None
        self.dwa_weights = nn.Parameter(torch.empty(len(self.indices))) if self.indices else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """alpha_{l,l} = 1, the rest 0: the average starts as the block's own output."""
        if self.dwa_weights is not None:
            with torch.no_grad():
                self.dwa_weights.zero_()
                self.dwa_weights[-1] = 1.0

    def forward(self, state: DepthState) -> DepthState:
        out = super().forward(state.x)
        sources = state.sources + (out,)
        if self.dwa_weights is None:
            return DepthState(x=out, sources=sources)
        y = weighted_sum(list(self.dwa_weights), [sources[j] for j in self.indices])
        return DepthState(x=y, sources=sources)
