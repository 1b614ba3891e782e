"""A plain single-file PyTorch GPT: the yardstick for "a GPT of the same shape, written the usual way".

    x      = wte(idx) + wpe(0..T-1)
    x      = x + attn(ln_1(x))          causal multi-head self-attention, one fused qkv Linear,
    x      = x + mlp(ln_2(x))           F.scaled_dot_product_attention(is_causal=True); GELU MLP 4x
    logits = ln_f(x) @ wte^T            tied head

GPT-2 init: every Linear and Embedding weight N(0, 0.02), biases 0, LayerNorm (1, 0); the two
output projections of each block (attention and MLP `c_proj`) N(0, 0.02 / sqrt(2 * n_layer)).
`bias` switches the biases of every Linear and LayerNorm on or off together.

No residual modules, no hooks, no config resolution: just the arithmetic. It is used by
bench/bench_engine.py to compare reslab's pre-ln model against plain PyTorch of the same shape, and
its parameter count matches reslab's pre-ln with tied weights (tests/test_bench_smoke.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class RefConfig:
    vocab_size: int = 65
    block_size: int = 64
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = False


class SelfAttention(nn.Module):
    def __init__(self, cfg: RefConfig):
        super().__init__()
        if cfg.n_embd % cfg.n_head:
            raise ValueError(f"n_head {cfg.n_head} must divide n_embd {cfg.n_embd}")
        self.n_head = cfg.n_head
        self.dropout = cfg.dropout
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.out_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        h = self.n_head
        # (B, T, 3C) -> (3, B, h, T, C/h)
        q, k, v = self.qkv(x).view(B, T, 3, h, C // h).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                           is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.out_drop(self.c_proj(y))


class FeedForward(nn.Module):
    def __init__(self, cfg: RefConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.c_proj(F.gelu(self.c_fc(x))))


class Layer(nn.Module):
    def __init__(self, cfg: RefConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = SelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = FeedForward(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class ReferenceGPT(nn.Module):
    def __init__(self, cfg: RefConfig, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.head.weight = self.wte.weight  # tied: one matrix, counted once
        self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        out_std = 0.02 / math.sqrt(2 * self.cfg.n_layer)
        for name, m in self.named_modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                if m is self.head:
                    continue  # it is wte's weight
                std = out_std if name.endswith("c_proj") else 0.02
                m.weight.normal_(0.0, std, generator=g)
                if getattr(m, "bias", None) is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.LayerNorm):
                m.reset_parameters()

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        T = idx.shape[1]
        if T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.cfg.block_size}")
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for layer in self.layers:
            x = layer(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # the tied head is listed once

    def optimizer(self, lr: float = 1e-3, betas=(0.9, 0.99), weight_decay: float = 0.1,
                  eps: float = 1e-8) -> torch.optim.AdamW:
        """AdamW with weight decay on every matrix (2-D: Linear weights and embeddings), none on
        biases and LayerNorm gains, as nanoGPT groups them."""
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        rest = [p for p in params if p.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                  {"params": rest, "weight_decay": 0.0}], lr=lr, betas=betas, eps=eps)
