"""Stochastic depth (Huang et al. 2016) and LayerDrop (Fan et al. 2019), as pure functions.

In training only, layer l's branches are dropped for the whole batch of an update with probability
p_l, and a kept layer's branches are scaled by 1 / (1 - p_l):

    x <- x + k_l F(x),   k_l = 0 with probability p_l, else 1 / (1 - p_l)      (the skip always stays)

    rule "linear"   p_l = p * l / L      (Huang et al.: the first layer almost never dropped, the last at p)
    rule "uniform"  p_l = p              (LayerDrop, x-transformers' layer_dropout)

Huang et al. train with k_l in {0, 1} and multiply by (1 - p_l) at test time; the scale is moved into
training here (E[k_l] = 1), so evaluation, saved models and probes see the plain network.

The draw for update t is a function of (seed, t) alone, not of an RNG's running state: a resumed
run draws the same layers as the run it continues, and each seed of a stack draws its own.
"""

from __future__ import annotations

import hashlib

import torch

RULES = ("linear", "uniform")


def drop_rates(p: float, rule: str, n_layer: int) -> list[float]:
    """p_l for l = 1..L."""
    if rule not in RULES:
        raise ValueError(f"unknown stochastic-depth rule {rule!r}; choose one of {', '.join(RULES)}")
    if rule == "linear":
        return [p * l / n_layer for l in range(1, n_layer + 1)]
    return [p] * n_layer


def _draw_seed(seed: int, step: int) -> int:
    """A 63-bit seed for update `step` of run seed `seed` (the same on every machine)."""
    digest = hashlib.blake2b(f"stochastic-depth:{seed}:{step}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def keep_factors(seed: int, step: int, rates: list[float]) -> list[float]:
    """k_l for update `step`: 0.0 for a dropped layer, 1 / (1 - p_l) for a kept one."""
    u = torch.rand(len(rates), generator=torch.Generator().manual_seed(_draw_seed(seed, step)),
                   dtype=torch.float64, device="cpu").tolist()  # cpu: also inside a meta-device build
    return [0.0 if u_l < p_l else 1.0 / (1.0 - p_l) for u_l, p_l in zip(u, rates)]
