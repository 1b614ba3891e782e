"""ProRes: progressive residual warmup (study 004), alpha(l, t) as pure functions.

Every layer l (counted from 1) multiplies both of its branch outputs by alpha(l, t), where t is
the number of completed optimizer updates (0 before the first). T is the per-layer warmup length.
Unlike the public code: names match the table in variants.md, warmup T = 0 means "no warmup"
(alpha = 1, not NaN), and fix-* schedules stay fixed for the whole run.
"""

from __future__ import annotations

import math


def _clip(v: float, lo: float = 0.0, hi: float = 1.0) -> float:
    return min(max(v, lo), hi)


def _ramp(t: int, length: float) -> float:
    """clip(t / length, 0, 1); a zero-length ramp is already finished."""
    return 1.0 if length <= 0 else _clip(t / length)


def _stagewise(start: float, t: int, l: int, T: int) -> float:
    """clip(s + (1 - s) * (t - (l - 1) T) / T, s, 1): layer l ramps from s during [(l-1)T, lT]."""
    if T <= 0:
        return 1.0
    return _clip(start + (1.0 - start) * (t - (l - 1) * T) / T, start, 1.0)


# name -> alpha(l, t, L, T)
SCHEDULES = {
    "linear": lambda l, t, L, T: _ramp(t, l * T),
    "sqrt": lambda l, t, L, T: math.sqrt(_ramp(t, l * T)),
    "square": lambda l, t, L, T: _ramp(t, l * T) ** 2,
    "equal": lambda l, t, L, T: _ramp(t, L * T),
    "reverse": lambda l, t, L, T: _ramp(t, (L - l + 1) * T),
    "stagewise-0": lambda l, t, L, T: _stagewise(0.0, t, l, T),
    "stagewise-L": lambda l, t, L, T: _stagewise(1.0 / L, t, l, T),
    "stagewise-sqrtL": lambda l, t, L, T: _stagewise(1.0 / math.sqrt(L), t, l, T),
    "stagewise-sqrtl": lambda l, t, L, T: _stagewise(1.0 / math.sqrt(l), t, l, T),
    "fix-L": lambda l, t, L, T: 1.0 / L,
    "fix-sqrtL": lambda l, t, L, T: 1.0 / math.sqrt(L),
    "fix-sqrtl": lambda l, t, L, T: 1.0 / math.sqrt(l),
}

SCHEDULE_NAMES = ("none", *SCHEDULES)


def prores_alpha(schedule: str, layer: int, step: int, n_layer: int, warmup: int) -> float:
    """alpha(l, t) for layer `layer` (1-based) after `step` optimizer updates."""
    if schedule == "none":
        return 1.0
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown ProRes schedule {schedule!r}; choose one of {', '.join(SCHEDULE_NAMES)}")
    if not 1 <= layer <= n_layer:
        raise ValueError(f"layer {layer} is outside 1..{n_layer}")
    return float(SCHEDULES[schedule](layer, max(step, 0), n_layer, warmup))


def warmup_finished(schedule: str, step: int, n_layer: int, warmup: int) -> bool:
    """True once every layer's alpha is exactly 1 for good (never for fix-* schedules)."""
    if schedule == "none":
        return True
    if schedule.startswith("fix-"):
        return False
    return all(prores_alpha(schedule, l, step, n_layer, warmup) == 1.0 for l in range(1, n_layer + 1))
