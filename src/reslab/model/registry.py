"""Design registry: name -> block, formula, reference, defaults, and what the design allows.

`resolve(cfg)` fills every field the user left as None with the design's default and refuses
combinations that have no meaning for the design, one line per problem, naming the field.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Callable

from ..config import ModelConfig, check_shapes, raise_if
from .blocks.post_norm import AdminBlock, B2TBlock, DeepNormBlock, PostLNBlock
from .blocks.pre_norm import LNSBlock, PreLNBlock, SandwichBlock
from .blocks.resi_dual import ResiDualBlock
from .blocks.rezero import ReZeroBlock
from .blocks.simplified import SASBlock, SASPBlock

NORMED = ("layernorm", "rmsnorm")
ALL_NORMS = ("layernorm", "rmsnorm", "none")


@dataclass(frozen=True)
class Design:
    name: str
    formula: str
    reference: str
    block: Callable[[ModelConfig, int], object]   # (resolved config, layer from 1) -> Block
    stream: str = "single"                        # "single" or "dual" (ResiDual)
    final_norm: bool = True                       # a norm between the last block and the head
    norms: tuple = NORMED                         # allowed values of `norm`
    defaults: dict = field(default_factory=dict)  # design defaults for fields left as None
    partial_residual: bool = True                 # attn_res / ffn_res may be switched off
    prores: bool = False                          # composes with a ProRes schedule
    attention_options: bool = False               # shaped_attention / vp_identity may be set
    simplified: bool = False                      # norm_free / sas_ff_gain apply


def _mix_ln_block(cfg: ModelConfig, layer: int):
    return PostLNBlock(cfg, layer) if layer <= cfg.mix_ln_post_layers else PreLNBlock(cfg, layer)


_DESIGNS = [
    Design("pre-ln", "x = x + F(N(x)); final N before the head",
           "Radford et al. 2019 (GPT-2); Xiong et al. 2020", PreLNBlock,
           norms=ALL_NORMS, prores=True, attention_options=True),
    Design("post-ln", "x = N(x + F(x))", "Vaswani et al. 2017", PostLNBlock,
           final_norm=False, prores=True),
    Design("sandwich-ln", "x = x + N2(F(N1(x)))", "Ding et al. 2021 (CogView)", SandwichBlock,
           prores=True, defaults={"embed_norm": False}),
    Design("peri-ln", "x = x + N_out(F(N_in(x))); N on the embedding (embed_norm)",
           "Kim et al. 2025 (Peri-LN)", SandwichBlock, prores=True, defaults={"embed_norm": True}),
    Design("mix-ln", "first ceil(L/4) layers post-ln (x = N(x + F(x))), the rest pre-ln",
           "Li et al. 2024 (Mix-LN)", _mix_ln_block, prores=True),
    Design("deepnorm", "x = N(a*x + F(x)), a = (2L)^(1/4); v, out-proj, fc1, fc2 init x (8L)^(-1/4)",
           "Wang et al. 2022 (DeepNet)", DeepNormBlock, final_norm=False, prores=True,
           defaults={"init": "deepnorm"}),
    Design("lns", "x = x + F(N(x) / sqrt(l)); final N unscaled",
           "Sun et al. 2025 (LayerNorm Scaling)", LNSBlock, prores=True),
    Design("admin", "x = N(w*x + F(x)), w per channel, init sqrt((S+1)/ln(S+1) - 1), S = 2L",
           "Liu et al. 2020 (Admin)", AdminBlock, final_norm=False),
    Design("b2t", "y = N1(x + A(x)); out = N2(y + M(y) + x)",
           "Takase et al. 2023 (B2T connection)", B2TBlock, final_norm=False, partial_residual=False),
    Design("rezero", "x = x + g*F(x), no norm, g per layer, g = 0 at init",
           "Bachlechner et al. 2020 (ReZero)", ReZeroBlock, final_norm=False, norms=("none",),
           defaults={"norm": "none"}),
    Design("resi-dual", "f = F(xa); xd = xd + s*f; xa = N(xa + f); head reads xa + N(xd)",
           "Xie et al. 2023 (ResiDual)", ResiDualBlock, stream="dual", final_norm=False,
           partial_residual=False),
    Design("sas", "h = g*SA(N1(x)); out = a*h + b*M(N2(h)); SA shaped, value/proj = I",
           "He & Hofmann 2024 (Simplifying Transformer Blocks)", SASBlock, attention_options=True,
           simplified=True, defaults={"init": "identity", "attn_res": False, "ffn_res": True,
                                      "shaped_attention": True, "vp_identity": True}),
    Design("sas-p", "out = g*SA(N(x)) + b*M(N(x)), parallel, no skip; SA shaped, value/proj = I",
           "He & Hofmann 2024 (Simplifying Transformer Blocks)", SASPBlock, attention_options=True,
           simplified=True, partial_residual=False,
           defaults={"init": "identity", "attn_res": False, "ffn_res": False,
                     "shaped_attention": True, "vp_identity": True}),
]

DESIGNS: dict[str, Design] = {d.name: d for d in _DESIGNS}

# Defaults every design shares, for fields no design overrides.
_COMMON_DEFAULTS = {"norm": "layernorm", "init": "gpt2", "attn_res": True, "ffn_res": True,
                    "embed_norm": False, "shaped_attention": False, "vp_identity": False}


def get_design(name: str) -> Design:
    if name not in DESIGNS:
        raise_if([f"model.design: unknown design {name!r}; choose one of {', '.join(DESIGNS)}"])
    return DESIGNS[name]


def _refusals(cfg: ModelConfig, d: Design, given: ModelConfig) -> list[str]:
    """Combinations that mean nothing for design d. `given` is the config before defaults."""
    errors = []
    if cfg.norm not in d.norms:
        errors.append(f"model.norm: {d.name} allows {', '.join(map(repr, d.norms))}, got {cfg.norm!r}")
    for flag in ("attn_res", "ffn_res"):
        if not d.partial_residual and getattr(given, flag) is not None \
                and getattr(given, flag) != d.defaults.get(flag, True):
            errors.append(f"model.{flag}: {d.name} has a fixed skip structure; leave {flag} unset "
                          "(partial residuals apply to pre-ln, post-ln, sandwich-ln, peri-ln, mix-ln, "
                          "deepnorm, lns, admin, rezero, sas)")
    if cfg.prores != "none" and not d.prores:
        allowed = ", ".join(n for n, x in DESIGNS.items() if x.prores)
        errors.append(f"model.prores: ProRes composes with {allowed}; not with {d.name}")
    if not d.attention_options:
        for flag in ("shaped_attention", "vp_identity"):
            if getattr(given, flag):
                errors.append(f"model.{flag}: only pre-ln, sas and sas-p take {flag}; not {d.name}")
    if not d.simplified:
        if cfg.norm_free:
            errors.append(f"model.norm_free: only sas and sas-p take norm_free (use norm = 'none' "
                          f"for a norm-free pre-ln); not {d.name}")
        if cfg.sas_ff_gain != ModelConfig.sas_ff_gain:
            errors.append(f"model.sas_ff_gain: only sas and sas-p have b_FF; not {d.name}")
    if d.stream != "dual" and cfg.resi_dual_scale != 1.0:
        errors.append(f"model.resi_dual_scale: only resi-dual has a dual stream; not {d.name}")
    if d.name != "mix-ln" and given.mix_ln_post_layers is not None:
        errors.append(f"model.mix_ln_post_layers: only mix-ln takes it; not {d.name}")
    if d.name == "mix-ln" and not 0 <= cfg.mix_ln_post_layers <= cfg.n_layer:
        errors.append(f"model.mix_ln_post_layers: must be in 0..n_layer={cfg.n_layer}, "
                      f"got {cfg.mix_ln_post_layers}")
    if cfg.embed_norm and cfg.norm == "none":
        errors.append("model.embed_norm: there is no norm to apply (norm = 'none')")
    if cfg.gain_mode == "init" and cfg.vp_identity:
        errors.append("model.gain_mode: 'init' scales the branches' output weights, and with "
                      "vp_identity the attention branch has none; use gain_mode = 'runtime'")
    if cfg.init == "identity" and not cfg.shaped_attention:
        errors.append("model.init: 'identity' makes shaped attention start as the identity (W_Q = 0); "
                      "it needs shaped_attention = true")
    if cfg.init == "t-fixup" and cfg.norm != "none":
        errors.append(f"model.init: 't-fixup' replaces normalisation; it needs norm = 'none', "
                      f"got {cfg.norm!r}")
    return errors


def resolve(cfg: ModelConfig) -> ModelConfig:
    """The config with every design default filled in; raises ConfigError listing every problem."""
    errors = check_shapes(cfg)
    if cfg.design not in DESIGNS:
        errors.append(f"model.design: unknown design {cfg.design!r}; choose one of {', '.join(DESIGNS)}")
    raise_if(errors)
    d = DESIGNS[cfg.design]
    filled = {}
    for f in dataclasses.fields(cfg):
        if getattr(cfg, f.name) is None:
            if f.name == "mix_ln_post_layers":
                filled[f.name] = math.ceil(cfg.n_layer / 4) if d.name == "mix-ln" else None
            else:
                filled[f.name] = d.defaults.get(f.name, _COMMON_DEFAULTS.get(f.name))
    resolved = dataclasses.replace(cfg, **filled)
    raise_if(_refusals(resolved, d, cfg))
    return resolved
