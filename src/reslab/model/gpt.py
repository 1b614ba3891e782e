"""The GPT-style decoder: embeddings -> residual stream through the blocks -> head.

    emb  = s wte(tokens) + wpe(positions)        (no wpe with rope or pos = "none"; s = 1 unless
                                                 embed_scale = "learned": one scalar, sqrt(C) at init)
    h    = stream.enter(dropout(emb))            single stream, ResiDual's (xa, xd), n hyper-streams,
                                                 the depth stream of earlier outputs (blocks/depth.py), ...
    h    = block_L( ... block_1(h))              each block is its layer's design's formula (layer_designs);
                                                 value_residual / residual_attention: the blocks also pass
                                                 an AttentionCarry from layer to layer
    y    = stream.exit(h)                        final norm / ResiDual's xa + N(xd) / nothing
    logits = head(y)                             head = wte^T when weights are tied
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .attention import AttentionCarry
from .blocks.altup import AltUpStream
from .blocks.depth import DepthState, DepthStream
from .blocks.hyper import HyperStream
from .blocks.ngpt import NGPTStream, unit_rows_
from .blocks.speedrun import SpeedrunState, SpeedrunStream
from .init import init_weights
from .norms import make_norm
from .prores import prores_alpha
from .stochastic_depth import drop_rates, keep_factors
from .options import SASOptions
from .registry import design_options, get_design, layer_design, resolve


class SingleStream(nn.Module):
    """x_0 = N_emb(emb) if embed_norm;  head input = N_final(x_L) if the design has a final norm."""

    def __init__(self, cfg: ModelConfig, final_norm: bool):
        super().__init__()
        self.embed_norm = make_norm(cfg.norm if cfg.embed_norm else "none", cfg.n_embd,
                                    bias=cfg.bias, eps=cfg.norm_eps, alpha=cfg.dyt_alpha)
        opts = design_options(cfg)
        norm_free = isinstance(opts, SASOptions) and opts.norm_free  # sas / sas-p without norms keep only the first layer's
        self.final_norm = make_norm(cfg.norm if final_norm and not norm_free else "none", cfg.n_embd,
                                    bias=cfg.bias, eps=cfg.norm_eps, alpha=cfg.dyt_alpha_final or cfg.dyt_alpha)

    def enter(self, emb: torch.Tensor) -> torch.Tensor:
        return self.embed_norm(emb)

    def exit(self, x: torch.Tensor) -> torch.Tensor:
        return self.final_norm(x)


class DualStream(nn.Module):
    """ResiDual: xa = emb, xd = s*emb;  head input y = xa + N_final(xd).

    N_final's eps is multiplied by s^2, so N_final(s*z) = N_final(z) exactly: s bounds the
    magnitude of xd (for fp16) without changing the function."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.s = design_options(cfg).scale
        self.final_norm = make_norm(cfg.norm, cfg.n_embd, bias=cfg.bias, eps=cfg.norm_eps * self.s ** 2,
                                    alpha=cfg.dyt_alpha)

    def enter(self, emb: torch.Tensor):
        return emb, self.s * emb

    def exit(self, stream) -> torch.Tensor:
        xa, xd = stream
        return xa + self.final_norm(xd)


# Design.stream -> the module that turns the embedding into the blocks' stream and back.
STREAMS = {"single": lambda cfg, design: SingleStream(cfg, design.final_norm),
           "ngpt": lambda cfg, design: NGPTStream(cfg),
           "dual": lambda cfg, design: DualStream(cfg),
           "hyper": lambda cfg, design: HyperStream(cfg),
           "depth": lambda cfg, design: DepthStream(cfg, design.final_norm),
           "speedrun": lambda cfg, design: SpeedrunStream(cfg),
           "altup": lambda cfg, design: AltUpStream(cfg)}

# Streams whose state is an object with the stream tensor in .x (probes and diagnostics read it).
STATE_TYPES = (DepthState, SpeedrunState)


class EmbedScale(nn.Module):
    """s wte(token), s one learned scalar starting at sqrt(C): DyT's LLaMA recipe (the authors' LLaMA
    code multiplies the shared embedding's output by it, before any norm sees the stream)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.scale = nn.Parameter(torch.empty(()))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.scale, self.dim ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig, seed: int = 0):
        super().__init__()
        cfg = resolve(cfg)
        self.config = cfg
        self.design = get_design(cfg.design)
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd) if cfg.pos == "learned" else None
        self.embed_scale = EmbedScale(cfg.n_embd) if cfg.embed_scale == "learned" else None
        self.drop = nn.Dropout(cfg.dropout)
        self.stream = STREAMS[self.design.stream](cfg, self.design)
        self.blocks = nn.ModuleList(layer_design(cfg, layer).block_factory()(cfg, layer)
                                    for layer in range(1, cfg.n_layer + 1))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_weights:
            self.lm_head.weight = self.wte.weight
        self.prores_step = 0
        # stochastic depth draws update t's dropped layers from (layer_drop_seed, t); the trainers set
        # it to the run's dropout stream, so a resumed run drops the layers its first part would have
        self.layer_drop_seed = seed
        self.init_weights(seed)

    # ---- initialisation and ProRes -------------------------------------------------------------
    def init_weights(self, seed: int = 0) -> None:
        """(Re)initialise every parameter and buffer from `seed` alone (also after meta-device build)."""
        if self.config.tie_weights:  # moving off the meta device gives each module its own tensor
            self.lm_head.weight = self.wte.weight
        init_weights(self, self.config, torch.Generator().manual_seed(seed))
        self.set_step(0)
        self.after_optimizer_step()  # designs that keep weights on a manifold (nGPT) start on it

    def set_step(self, t: int) -> None:
        """Tell the model how many optimizer updates are done; sets every ProRes alpha(l, t) and, with
        stochastic depth, the keep factors k_l of update t, drawn from (layer_drop_seed, t)."""
        self.prores_step = t
        cfg = self.config
        if cfg.stochastic_depth > 0:
            rates = drop_rates(cfg.stochastic_depth, cfg.stochastic_depth_rule, cfg.n_layer)
            for block, k in zip(self.blocks, keep_factors(self.layer_drop_seed, t, rates)):
                for r in block.residuals():
                    r.set_keep(k)
        if cfg.prores == "none":
            return
        for block in self.blocks:
            alpha = prores_alpha(cfg.prores, block.layer, t, cfg.n_layer, cfg.prores_warmup)
            for r in block.residuals():
                r.set_alpha(alpha)

    def seed_buffers(self) -> dict[str, torch.Tensor]:
        """Buffers that differ between seeds at the same step (stochastic depth's k_l): a stack of
        seeds passes each member's own, stacked like the weights (train/stacked.py). Called every
        update, so without stochastic depth it returns at once instead of scanning the buffers."""
        if self.config.stochastic_depth == 0:
            return {}
        return {name: b for name, b in self.named_buffers() if name.endswith(".keep")}

    @torch.no_grad()
    def after_optimizer_step(self) -> None:
        """Called by the trainers after every optimizer step: designs that keep their weights on a
        manifold (nGPT's unit-norm rows) project them back here. A no-op for every other design."""
        if self.design.stream != "ngpt":
            return  # the only design on a manifold: nothing to scan in any other training step
        for m in self.modules():
            if m is not self and hasattr(m, "after_optimizer_step"):
                m.after_optimizer_step()
        unit_rows_(self.wte.weight)  # token-embedding rows (and an untied head's) on the sphere too
        if not self.config.tie_weights:
            unit_rows_(self.lm_head.weight)

    def prores_alphas(self) -> list[float]:
        """alpha of every layer at the current step (all 1.0 without ProRes)."""
        cfg = self.config
        return [prores_alpha(cfg.prores, l, self.prores_step, cfg.n_layer, cfg.prores_warmup)
                for l in range(1, cfg.n_layer + 1)]

    # ---- forward ---------------------------------------------------------------------------------
    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.config.block_size}")
        x = self.wte(idx)
        if self.embed_scale is not None:
            x = self.embed_scale(x)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx.device))
        return self.drop(x)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """Logits (B, T, V); with targets, also the mean cross-entropy loss."""
        emb = self.embed(idx)
        # the speedrun stream also keeps the token ids (its value embeddings look them up)
        h = self.stream.enter(emb, idx) if getattr(self.stream, "takes_tokens", False) else self.stream.enter(emb)
        if self.config.value_residual or self.config.residual_attention:
            carry = AttentionCarry()  # this forward's layer-to-layer attention state, nothing kept
            for block in self.blocks:
                h = block(h, carry=carry)
        else:
            for block in self.blocks:
                h = block(h)
        logits = self.lm_head(self.stream.exit(h))
        if hasattr(self.stream, "scale_logits"):  # nGPT: z = s_z * (E h), s_z per vocabulary entry
            logits = self.stream.scale_logits(logits)
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1), ignore_index=-1)
        return logits, loss

    # ---- sizes -----------------------------------------------------------------------------------
    def param_counts(self) -> dict[str, int]:
        """total; embedding = every token or position table (wte, wpe, and a design's own: AltUp's wider
        token table, the speedrun's value embeddings) + the head when untied; non_embedding = the rest,
        the N of a scaling law (Kaplan et al. 2020 leave lookup tables out of it)."""
        total = sum(p.numel() for p in self.parameters())  # a tied head is counted once
        tables = {id(m.weight): m.weight.numel() for m in self.modules() if isinstance(m, nn.Embedding)}
        embedding = sum(tables.values())
        if not self.config.tie_weights:
            embedding += self.lm_head.weight.numel()
        return {"total": total, "embedding": embedding, "non_embedding": total - embedding}

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None, generator: torch.Generator | None = None,
                 vocab_limit: int | None = None) -> torch.Tensor:
        """Sample tokens; vocab_limit keeps ids below the tokenizer's size when the model's is larger."""
        for _ in range(max_new_tokens):
            logits = self(idx[:, -self.config.block_size:])[:, -1, :vocab_limit] / max(temperature, 1e-8)
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = torch.multinomial(logits.softmax(-1), 1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
        return idx
