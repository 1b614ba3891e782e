"""What `reslab variants` lists beyond each design's own row: the [model] settings that compose with
many designs (model options, norms, inits), each with its formula, and which designs take each one.

Which designs take a setting is not read from the designs' capability flags: it is asked of
`resolve` itself, with a config of the design and the setting (plus the companion settings it
needs, e.g. t-fixup's norm = 'none'). So the listing says exactly what a config would be allowed,
including a design's own refusals (HybridNorm's built-in QKV-norm refuses qk_norm), and a plugin's
design is listed as its own checks decide.

This module imports no torch.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import get_args

from ..errors import ConfigError
from .config import Init, ModelConfig
from .design import ALL_NORMS

# (key in a design's --json row, setting as written in a config, formula, the fields set to ask resolve
# whether a design takes it). `reslab variants` lists them after the designs, with the designs taking each.
MODEL_OPTIONS = (
    ("qk_norm", "qk_norm = true",
     "Q, K <- RMSNorm(Q), RMSNorm(K) per head (a gain per channel), before RoPE", {"qk_norm": True}),
    ("residual_update", "residual_update = \"orthogonal\"",
     "x + F - (<F, s x> / <s x, s x>) s x at every residual point", {"residual_update": "orthogonal"}),
    ("xsa", "xsa = \"full\" | \"gated\"",
     "y_i - g (<y_i, v_i> / <v_i, v_i>) v_i per head, before W_P; g = 1, or tanh(a_h) with a_h = 0 at init "
     "(not with shaped attention)", {"xsa": "full"}),
    ("attn_gate", "attn_gate = \"head\" | \"elementwise\"",
     "y <- y * sigmoid(x W_g + b_g) per head (one gate per head and token, or one per head channel), x the "
     "attention's input, before W_P (gated attention, G1)", {"attn_gate": "head"}),
    ("stochastic_depth", "stochastic_depth = p",
     "training only: layer l's branches dropped for an update with probability p_l (rule linear: p l / L; "
     "uniform: p), kept ones times 1 / (1 - p_l); drawn from (seed, update)", {"stochastic_depth": 0.1}),
    ("embed_scale", "embed_scale = \"learned\"",
     "x_0 = s wte(token) (+ wpe), s one learned scalar, sqrt(C) at init (DyT's LLaMA recipe)",
     {"embed_scale": "learned"}),
    ("dyt_alpha_recipe", "dyt_alpha_attn, dyt_alpha_mlp, dyt_alpha_final = a",
     "with norm = \"dyt\" | \"derf\": the initial alpha of N1, N2 and the final norm, each (default dyt_alpha; "
     "DyT's LLaMA recipe, 7B: 0.8, 0.2, 0.2)", {"norm": "dyt", "dyt_alpha_attn": 0.8}),
)

# model.norm: the formulas of model/norms.py (its docstring has the readings and references).
NORM_FORMULAS = {
    "layernorm": "y = (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta",
    "rmsnorm": "y = x / sqrt(mean(x^2) + eps) * gamma",
    "rmsnorm-nogain": "y = x / sqrt(mean(x^2) + eps), no learned parameter (modded-nanogpt's records)",
    "dyt": "y = gamma * tanh(alpha x) + beta, alpha one learned scalar, dyt_alpha (0.5) at init "
           "(Zhu et al. 2025, DyT)",
    "derf": "y = gamma * erf(alpha x + s) + beta, alpha and s one learned scalar each, dyt_alpha and 0 at init "
            "(Chen et al. 2025, Derf, arXiv 2512.10938)",
    "seednorm": "y = (tanh(x . beta) * alpha + gamma) * x / sqrt(mean(x^2) + eps), alpha, beta, gamma per channel, "
                "1, 0, 1 at init (Cai et al. 2025, SeeDNorm, arXiv 2510.22777)",
    "none": "y = x",
}

# model.init: the schemes of model/init.py (its docstring has the readings), with the settings each needs.
INIT_FORMULAS = {
    "gpt2": ("every weight N(0, std); output projections (W_P, W2) N(0, std / sqrt(2L))", {}),
    "xavier": ("Xavier-normal everywhere in the blocks (Xiong et al. 2020's setting)", {}),
    "deepnorm": ("Xavier-normal; W_V, W_P, W1, W2 times (8L)^(-1/4) (DeepNet)", {}),
    "t-fixup": ("Xavier-uniform; W_V, W_P, W1, W2 times (9L)^(-1/4); token embedding N(0, d^(-1/2)) times "
                "(9L)^(-1/4) (T-Fixup, decoder rule)", {"norm": "none"}),
    "fixup": ("W_P, W2 (and an untied head) = 0; [W_Q; W_K; W_V] Xavier-uniform times K^(-1/6), W1 times "
              "K^(-1/2), K = 2L branches (Fixup)", {}),
    "ds-init": ("Xavier-uniform with its bound times 1/sqrt(l) in layer l (DS-Init)", {}),
    "sub-ln": ("Xavier-uniform; W_V, W_P, W1, W2 times sqrt(log(2L)) (Magneto)", {}),
    "identity": ("gpt2, then W_Q = 0 (shaped attention starts as I) and the extra first-layer W_V = 0 (SAS)",
                 {"shaped_attention": True}),
}

# Fields whose resolved value each design's row shows (its defaults that matter most when comparing).
SHOWN_DEFAULTS = ("norm", "init", "bias", "attn_res", "ffn_res", "embed_norm", "branch_scale", "mlp")


@lru_cache(maxsize=None)
def _accepts(design: str, settings: tuple) -> bool:
    from .registry import resolve

    try:
        resolve(ModelConfig(design=design, **dict(settings)))
    except ConfigError:
        return False
    return True


def accepts(design: str, settings: dict) -> bool:
    """Whether a config of `design` with `settings` (and every other field at its default) resolves."""
    return _accepts(design, tuple(sorted(settings.items())))


def settings_rows(designs: list[str]) -> dict[str, list[dict]]:
    """The model options, norms and inits, each {setting, formula, designs (those of `designs` that
    take it), needs (the companion settings it was asked with)}, as `reslab variants --settings` lists them."""
    def row(setting: str, formula: str, probe: dict, needs: dict | None = None) -> dict:
        return {"setting": setting, "formula": formula, "needs": needs or {},
                "designs": [d for d in designs if accepts(d, probe)]}

    return {
        "model_options": [row(s, f, p) for _, s, f, p in MODEL_OPTIONS],
        "norms": [row(f"norm = \"{n}\"", NORM_FORMULAS[n], {"norm": n}) for n in ALL_NORMS],
        "inits": [row(f"init = \"{name}\"", formula, {"init": name, **needs}, needs)
                  for name, (formula, needs) in INIT_FORMULAS.items()],
    }


def design_row(summary: dict) -> dict:
    """A design's `reslab variants --json` row: its summary, with what it takes asked of resolve
    (replacing the flags' approximation), its inits and its resolved defaults."""
    from .registry import resolve

    name = summary["name"]
    row = dict(summary)
    row["norms"] = [n for n in ALL_NORMS if accepts(name, {"norm": n})]
    row.update({key: accepts(name, probe) for key, _, _, probe in MODEL_OPTIONS})
    row["residual_update"] = ["add", "orthogonal"] if row["residual_update"] else ["add"]  # the values it takes
    row["inits"] = [i for i, (_, needs) in INIT_FORMULAS.items() if accepts(name, {"init": i, **needs})]
    resolved = resolve(ModelConfig(design=name))
    row["defaults"] = {f: getattr(resolved, f) for f in SHOWN_DEFAULTS}
    return row


def check_tables() -> list[str]:
    """Problems with the tables above against ModelConfig (a norm or init without a formula, a probe
    naming no field); the tests assert none."""
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    problems = [f"norm {n!r} has no formula" for n in ALL_NORMS if n not in NORM_FORMULAS]
    problems += [f"norm {n!r} is not a model.norm value" for n in NORM_FORMULAS if n not in ALL_NORMS]
    problems += [f"init {i!r} has no formula" for i in get_args(Init) if i not in INIT_FORMULAS]
    problems += [f"init {i!r} is not a model.init value" for i in INIT_FORMULAS if i not in get_args(Init)]
    problems += [f"option {s!r} probes unknown field {k!r}" for _, s, _, p in MODEL_OPTIONS for k in p
                 if k not in fields]
    return problems
