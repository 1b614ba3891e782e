"""AltUp (Alternating Updates): a K times wider token representation, one layer computing on one sub-block.

Baykal, Cutler, Dikkala, Ghosh, Panigrahy, Wang 2023, "Alternating Updates for Efficient
Transformers" (NeurIPS 2023, arXiv 2301.13310). The stream of each token is K sub-blocks x_1..x_K of
width C (a K*C-wide representation); a layer of width C stays the layer of a C-wide model. Layer l:

    predict   x^_i = sum_j p_ij x_j                  for i = 1..K    (p: K x K learned scalars of the layer)
    compute   x~   = L(x^_a),  a = ((l - 1) mod K) + 1                (L: a pre-ln layer, x + A(N1 x), then + M(N2 .))
    correct   x'_i = x^_i + g_i (x~ - x^_a)          for i = 1..K    (g: K learned scalars of the layer)

        x_1 ─┐            ┌─ x^_1 ───────────────────────────(+ g_1 d)──> x'_1
        x_2 ─┼─ p (K x K) ┼─ x^_2 ── L ── x~ ── d = x~ - x^_2 ─(+ g_2 d)──> x'_2     (layer 2 of K = 2)
             ┘            └─ ...                           ...

Embedding: the paper widens the token embedding to K*C. reslab's embedding (wte + wpe, width C) is
sub-block 1; sub-blocks 2..K come from an extra token table of width (K - 1) C (no positions), drawn
by the init scheme like wte. options.recycled: sub-blocks 2..K are copies of sub-block 1 and there is
no extra table (Recycled-AltUp, as secondary summaries of the paper describe it: replicate the narrow
embedding, sum the sub-blocks at the output). Head: N_final(sum_i x_i), N_final's eps times K^2 (so it is N of the
mean, as hyper-connections' head).

Readings (the paper's own text was not available here; what was read is Hugging Face transformers'
Gemma 3n implementation of AltUp, `Gemma3nTextAltUp` in models/gemma3n/modeling_gemma3n.py, which
cites the paper):
- L runs on the PREDICTED active sub-block x^_a, and the innovation is x~ - x^_a: as Gemma 3n's
  predict / correct.
- Init p = I, g = 1 (Gemma 3n adds the identity to its predictions and 1 to its correction
  coefficients, so zero weights mean these values): at init every sub-block receives layer l's update
  of sub-block a. With K = 1 the block is pre-ln exactly.
- The active sub-block alternates, a = ((l - 1) mod K) + 1 (the method's name; Gemma 3n instead fixes
  one active index and makes p, g depend on the input through a router: not offered here).
- The head reads the sum of the sub-blocks (Gemma 3n averages its streams after per-stream
  projections; reslab has none).
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from ..norms import make_norm
from ..registry import design_options
from .pre_norm import PreLNBlock


class AltUpStream(nn.Module):
    """enter: x_1 = N_emb(emb), x_i = E_i[token] for i = 2..K, as (B, T, K, C);
    exit: N_final(sum_i x_i), eps times K^2."""
    takes_tokens = True

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        opts = design_options(cfg)
        self.K = opts.K
        self.embed_norm = make_norm(cfg.norm if cfg.embed_norm else "none", cfg.n_embd,
                                    bias=cfg.bias, eps=cfg.norm_eps, alpha=cfg.dyt_alpha)
        # sub-blocks 2..K of the widened token embedding (absent with K = 1)
        self.wide_wte = nn.Embedding(cfg.vocab_size, (self.K - 1) * cfg.n_embd) if self.K > 1 and not opts.recycled \
            else None
        self.final_norm = make_norm(cfg.norm, cfg.n_embd, bias=cfg.bias, eps=cfg.norm_eps * self.K ** 2,
                                    alpha=cfg.dyt_alpha)

    def enter(self, emb: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed_norm(emb).unsqueeze(-2)                               # (B, T, 1, C)
        if self.wide_wte is None:                                            # K = 1, or recycled: K copies
            return x.expand(*x.shape[:-2], self.K, x.shape[-1])
        rest = self.wide_wte(idx).view(*idx.shape, self.K - 1, emb.shape[-1])
        return torch.cat([x, rest.to(x.dtype)], dim=-2)

    def exit(self, X: torch.Tensor) -> torch.Tensor:
        return self.final_norm(X.sum(dim=-2))


class AltUpBlock(PreLNBlock):
    """predict x^ = p x; compute x~ = PreLN(x^_a); correct x' = x^ + g (x~ - x^_a); a = (l - 1) mod K (from 0)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        K = design_options(cfg).K
        self.active = (layer - 1) % K
        self.predict = nn.Parameter(torch.empty(K, K))      # p[i, j]: sub-block j into prediction i
        self.correct = nn.Parameter(torch.empty(K))         # g[i]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.predict.copy_(torch.eye(self.predict.shape[0]))
            self.correct.fill_(1.0)

    def forward(self, X, carry=None):
        pred = torch.einsum("ij,btjc->btic", self.predict.to(X.dtype), X)
        xa = pred[:, :, self.active]
        delta = super().forward(xa, carry) - xa                  # x~ - x^_a
        return pred + self.correct.to(X.dtype)[:, None] * delta.unsqueeze(-2)
