"""AdamW with parameter groups, and the learning-rate schedules.

Weight decay applies to the weight matrices of Linear layers (and, if embedding_decay, to the
embeddings); never to norms, biases, or the designs' gains and scalars (ReZero g, Admin w,
shaped-attention alpha/beta/gamma, SAS a_FF/b_FF), whatever their shape.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .config import OptimConfig


def parameter_groups(model: nn.Module, cfg: OptimConfig) -> tuple[list[str], list[str]]:
    """(names with weight decay, names without), each parameter once (a tied head is wte)."""
    linear = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    embedding = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    # A tied head is the token embedding: embedding_decay decides for it too.
    decayed = (linear | embedding) if cfg.embedding_decay else (linear - embedding)
    decay, no_decay = [], []
    for name, p in model.named_parameters():  # named_parameters() lists a shared tensor once
        (decay if id(p) in decayed else no_decay).append(name)
    return decay, no_decay


def build_optimizer(model: nn.Module, cfg: OptimConfig, device_type: str,
                    tensors: dict[str, torch.Tensor] | None = None) -> torch.optim.AdamW:
    """AdamW over `model`'s parameters, or over `tensors` (name -> tensor, e.g. K seeds' parameters
    stacked) grouped by the names of `model`'s parameters."""
    params = dict(model.named_parameters()) if tensors is None else tensors
    decay, no_decay = parameter_groups(model, cfg)
    groups = [{"params": [params[n] for n in decay], "weight_decay": cfg.weight_decay, "names": decay},
              {"params": [params[n] for n in no_decay], "weight_decay": 0.0, "names": no_decay}]
    # Fused AdamW exists for CPU and CUDA; on CPU it is ~3x faster than the for-loop version.
    fused = cfg.fused if cfg.fused is not None else device_type in ("cpu", "cuda")
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
                             fused=fused or None)


def learning_rate(step: int, cfg: OptimConfig, total_steps: int) -> float:
    """The learning rate for update `step` (0-based), nanoGPT's warmup and cosine formulas."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / (cfg.warmup_steps + 1)
    if cfg.schedule == "constant":
        return cfg.lr
    if cfg.schedule == "wsd":
        decay_start = total_steps - int(round(cfg.wsd_decay_fraction * total_steps))
        if step < decay_start:
            return cfg.lr
        frac = (step - decay_start) / max(total_steps - decay_start, 1)
        return cfg.lr + (cfg.min_lr - cfg.lr) * min(frac, 1.0)
    decay_steps = cfg.decay_steps or total_steps
    if step >= decay_steps:
        return cfg.min_lr
    ratio = (step - cfg.warmup_steps) / max(decay_steps - cfg.warmup_steps, 1)
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg.lr - cfg.min_lr)
