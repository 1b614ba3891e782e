"""The parallel block (GPT-J, PaLM, GPT-NeoX): attention and MLP read the same input, side by side.

    parallel                  x = x + A(N1(x)) + M(N2(x))      (GPT-NeoX: two norms per layer)
    shared_norm = true        x = x + A(N(x))  + M(N(x))       (GPT-J, PaLM: one norm per layer)

    x ──┬───────────────────────────(+)──>
        ├─ N1 ── A ───────────────┤
        └─ N2 ── M ───────────────┘

Both branches go through one residual point, out = s*x + a*(gain * alpha * (A + M)): a runtime
gain, ProRes' alpha(l, t) and a learned branch scale multiply the two branches together, as they
multiply the one update of this layer. The skip cannot be dropped (there is one, and without it
the layer is A + M, a different design), so attn_res / ffn_res are refused.

Options ([model.options]): shared_norm. Peers: litgpt `parallel_residual = True` (with
`shared_attention_norm` for one norm), HF transformers `use_parallel_residual` (GPT-NeoX).
"""

from __future__ import annotations

from ..config import ModelConfig
from ..registry import design_options
from . import base


class ParallelBlock(base.Block):
    """x = x + A(N1(x)) + M(N2(x)); with shared_norm, N2 = N1 (one module, one set of weights)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.shared_norm = design_options(cfg, layer).shared_norm
        self.norm1, self.attn = base.norm(cfg), base.attention(cfg, layer)
        self.norm2 = None if self.shared_norm else base.norm(cfg)
        self.mlp = base.mlp(cfg)
        self.residual = base.residual(cfg)

    def forward(self, x, carry=None):
        n1 = self.norm1(x)
        n2 = n1 if self.norm2 is None else self.norm2(x)
        return self.residual(x, self.attn(n1, carry) + self.mlp(n2))
