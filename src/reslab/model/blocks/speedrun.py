"""The speedruns' skips (modded-nanogpt's records, nanochat): a pre-ln model with four extra paths.

    x_0 = N_emb(emb)                                  (both speedruns normalise the embedding)
    before block l:
        x0 re-injection   x = a_l x + b_l x_0                     a_l = 1, b_l = 0 at init (record #9)
        U-net skip        x = x + w_l x_m,  m = L + 1 - l         for the decoder half, l > L - L//2:
                          layer m <= L//2 of the encoder half, its output x_m; w_l = 1 at init (record #11)
    block l (pre-ln):     x = x + A(N1(x));  x = x + M(N2(x))
        value embeddings  in A, v = W_V N1(x) + g * E_l[token]    on every other layer, the last one
                          included (nanochat's choice); g = 3 sigmoid(W_g N1(x)[:, :, :12]) per head,
                          E_l a token table of its own per layer (records #14, #15; nanochat ve_gate)
    head:
        backout           y = x_L - lambda x_k,  k = L // 2       lambda = 0.2 at init (record #40,
                          nanochat backout_lambda); x_k = x_0 when L = 1
                          head input = N_final(y)

Each path is an option ([model.options]): x0, unet, value_embeds, backout (all on), so the
speedrun-skips study removes them one at a time; backout_layer sets k (-1: L // 2). With every
path off the model is pre-ln with a normalised embedding. The scalars a, b, w and lambda are
learned per layer and never weight-decayed (they are not Linear / Embedding weights).

Where reslab differs from the records, on purpose: the inits are the early records' (x0 at
(1, 0) and U-net weights at 1, so the model starts as pre-ln plus value embeddings); nanochat
starts a_l at 1.15 - 0.1 l/(L-1) and b_l at 0.2 - 0.15 l/(L-1), and later records gate the U-net
skips with sigmoid(w). nanochat's backout reads the output of layer L/2 + 1 (0-based index L/2);
reslab's k = L // 2 counts from 1.

    x_0 ──┬──────────[b_l]───────────────────────┐
          │   U-net: x_m ──[w_l]──┐              │
    x ───[a_l]─────────(+)────────(+)── pre-ln block l ──> ... ── x_L ──(-lambda x_k)── N ── head
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..config import ModelConfig
from ..norms import make_norm
from ..registry import design_options
from .pre_norm import PreLNBlock

VE_GATE_CHANNELS = 12          # nanochat's gate reads the first 12 channels of the attention input


@dataclass(frozen=True)
class SpeedrunState:
    x: torch.Tensor                   # the residual stream
    x0: torch.Tensor                  # the normalised embedding, re-injected before every block
    tokens: torch.Tensor | None       # (B, T) token ids, for the value embeddings
    skips: tuple = ()                 # the encoder half's outputs x_1 .. x_(L//2), for the U-net
    backout: torch.Tensor | None = None   # x_k, subtracted (times lambda) before the head


def backout_layer(cfg: ModelConfig) -> int:
    k = design_options(cfg).backout_layer
    return cfg.n_layer // 2 if k == -1 else k


def has_value_embed(layer: int, n_layer: int) -> bool:
    """Every other layer, the last one included (nanochat's has_ve, with layers counted from 1)."""
    return (layer - n_layer) % 2 == 0


class SpeedrunStream(nn.Module):
    """x_0 = N_emb(emb); head input = N_final(x_L - lambda x_k)."""

    takes_tokens = True

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        opts = design_options(cfg)
        norm = lambda kind: make_norm(kind, cfg.n_embd, bias=cfg.bias, eps=cfg.norm_eps, alpha=cfg.dyt_alpha)
        self.embed_norm = norm(cfg.norm if cfg.embed_norm else "none")
        self.final_norm = norm(cfg.norm)
        self.backout_k = backout_layer(cfg) if opts.backout else None
        self.backout_lambda = nn.Parameter(torch.empty(())) if opts.backout else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.backout_lambda is not None:
            nn.init.constant_(self.backout_lambda, 0.2)

    def enter(self, emb: torch.Tensor, tokens: torch.Tensor | None = None) -> SpeedrunState:
        x0 = self.embed_norm(emb)
        return SpeedrunState(x=x0, x0=x0, tokens=tokens, backout=x0 if self.backout_k == 0 else None)

    def exit(self, state: SpeedrunState) -> torch.Tensor:
        y = state.x if self.backout_lambda is None else state.x - self.backout_lambda * state.backout
        return self.final_norm(y)



class SpeedrunBlock(PreLNBlock):
    """x = a x + b x_0; x = x + w x_(L+1-l) (decoder half); pre-ln block with value embeddings."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        opts = design_options(cfg)
        L, half = cfg.n_layer, cfg.n_layer // 2
        self.reinject = opts.x0
        self.resid_lambda = nn.Parameter(torch.empty(())) if opts.x0 else None
        self.x0_lambda = nn.Parameter(torch.empty(())) if opts.x0 else None
        self.encoder = opts.unet and layer <= half                    # keeps its output for the U-net
        self.mirror = L + 1 - layer if opts.unet and L + 1 - layer <= half < layer else None
        self.unet_weight = nn.Parameter(torch.empty(())) if self.mirror is not None else None
        if opts.value_embeds and has_value_embed(layer, L):
            self.value_embed = nn.Embedding(cfg.vocab_size, cfg.n_embd)
            self.ve_gate = nn.Linear(min(VE_GATE_CHANNELS, cfg.n_embd), cfg.n_head, bias=False)
        else:
            self.value_embed = self.ve_gate = None
        self.keeps_backout = opts.backout and layer == backout_layer(cfg)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            for p, value in ((self.resid_lambda, 1.0), (self.x0_lambda, 0.0), (self.unet_weight, 1.0)):
                if p is not None:
                    p.fill_(value)

    def value_embedding(self, n1: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """g * E_l[token] as (B, T, C): g = 3 sigmoid(W_g n1[..., :12]), one gate per head."""
        B, T, C = n1.shape
        gate = 3 * torch.sigmoid(self.ve_gate(n1[..., :self.ve_gate.in_features]))     # (B, T, H)
        ve = self.value_embed(tokens).view(B, T, gate.shape[-1], -1)
        return (gate.unsqueeze(-1) * ve).reshape(B, T, C)

    def forward(self, state: SpeedrunState) -> SpeedrunState:
        x = state.x
        if self.reinject:
            x = self.resid_lambda * x + self.x0_lambda * state.x0
        if self.mirror is not None:
            x = x + self.unet_weight * state.skips[self.mirror - 1]
        n1 = self.norm1(x)
        if self.value_embed is not None:
            if state.tokens is None:
                raise ValueError("value embeddings need the token ids (GPT.forward passes them to the stream)")
            extra = self.value_embedding(n1, state.tokens)
        else:
            extra = None
        x = self.attn_residual(x, self.attn(n1, extra_values=extra))
        x = self.mlp_residual(x, self.mlp(self.norm2(x)))
        skips = state.skips + (x,) if self.encoder else state.skips
        return SpeedrunState(x=x, x0=state.x0, tokens=state.tokens, skips=skips,
                             backout=x if self.keeps_backout else state.backout)
