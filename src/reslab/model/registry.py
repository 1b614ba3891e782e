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
from .blocks.gated import GatedBlock
from .blocks.hyper import HyperBlock
from .blocks.ngpt import NGPTBlock
from .blocks.post_norm import AdminBlock, B2TBlock, DeepNormBlock, PostLNBlock
from .blocks.pre_norm import LNSBlock, PreLNBlock, SandwichBlock
from .blocks.resi_dual import ResiDualBlock
from .blocks.rezero import ReZeroBlock
from .blocks.scaled import LayerScaleBlock, ReorderedLNBlock
from .blocks.simplified import SASBlock, SASPBlock

NORMED = ("layernorm", "rmsnorm", "dyt")
ALL_NORMS = ("layernorm", "rmsnorm", "dyt", "none")


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
    per_layer: bool = False                       # may be chosen for single layers (layer_designs)
    learned_scales: bool = False                  # skip_scale / branch_scale apply at its residual points
    attention_carry: bool = False                 # value_residual / residual_attention apply


def _mix_ln_block(cfg: ModelConfig, layer: int):
    return PostLNBlock(cfg, layer) if layer <= cfg.mix_ln_post_layers else PreLNBlock(cfg, layer)


_DESIGNS = [
    Design("pre-ln", "x = x + F(N(x)); final N before the head",
           "Radford et al. 2019 (GPT-2); Xiong et al. 2020", PreLNBlock,
           norms=ALL_NORMS, prores=True, attention_options=True, per_layer=True, learned_scales=True,
           attention_carry=True),
    Design("post-ln", "x = N(x + F(x))", "Vaswani et al. 2017", PostLNBlock,
           final_norm=False, prores=True, per_layer=True, learned_scales=True, attention_carry=True),
    Design("sandwich-ln", "x = x + N2(F(N1(x)))", "Ding et al. 2021 (CogView)", SandwichBlock,
           prores=True, defaults={"embed_norm": False}, per_layer=True, learned_scales=True, attention_carry=True),
    Design("peri-ln", "x = x + N_out(F(N_in(x))); N on the embedding (embed_norm)",
           "Kim et al. 2025 (Peri-LN)", SandwichBlock, prores=True, defaults={"embed_norm": True},
           per_layer=True, learned_scales=True, attention_carry=True),
    Design("mix-ln", "first ceil(L/4) layers post-ln (x = N(x + F(x))), the rest pre-ln",
           "Li et al. 2024 (Mix-LN)", _mix_ln_block, prores=True, learned_scales=True, attention_carry=True),
    Design("deepnorm", "x = N(a*x + F(x)), a = (2L)^(1/4); v, out-proj, fc1, fc2 init x (8L)^(-1/4)",
           "Wang et al. 2022 (DeepNet)", DeepNormBlock, final_norm=False, prores=True,
           defaults={"init": "deepnorm"}, per_layer=True),
    Design("lns", "x = x + F(N(x) / sqrt(l)); final N unscaled",
           "Sun et al. 2025 (LayerNorm Scaling)", LNSBlock, prores=True, per_layer=True, learned_scales=True),
    Design("admin", "x = N(w*x + F(x)), w per channel, init sqrt((S+1)/ln(S+1) - 1), S = 2L",
           "Liu et al. 2020 (Admin)", AdminBlock, final_norm=False, per_layer=True),
    Design("b2t", "y = N1(x + A(x)); out = N2(y + M(y) + x)",
           "Takase et al. 2023 (B2T connection)", B2TBlock, final_norm=False, partial_residual=False,
           per_layer=True),
    Design("rezero", "x = x + g*F(x), no norm, g per layer, g = 0 at init",
           "Bachlechner et al. 2020 (ReZero)", ReZeroBlock, final_norm=False, norms=("none",),
           defaults={"norm": "none"}, per_layer=True),
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

# ---- Zoo II (issue 9): learned scales, reordered norm, gated residual (blocks/scaled.py, gated.py) ----
_DESIGNS += [
    Design("reordered-ln", "x = x + N1(A(x)); x = x + N2(M(x)); norm on the branch output only; final N",
           "Team OLMo 2024 (2 OLMo 2 Furious)", ReorderedLNBlock, prores=True, per_layer=True,
           learned_scales=True),
    # ALL_NORMS as pre-ln: with norm = "none" it is a norm-free pre-ln whose per-channel branch
    # scales start small (SkipInit / ReZero with a vector), a meaningful ablation of LayerScale.
    Design("layerscale", "x = x + diag(l1) A(N1(x)); x = x + diag(l2) M(N2(x)), l per channel, "
           "init eps (0.1 to 18 layers, 1e-5 to 24, 1e-6 beyond)",
           "Touvron et al. 2021 (CaiT, Going deeper with Image Transformers)", LayerScaleBlock,
           norms=ALL_NORMS, defaults={"branch_scale": "channel"}, prores=True, per_layer=True,
           learned_scales=True),
    Design("gated", "y = ReLU(F(N(x))); r = sig(W_r y + U_r x); z = sig(W_z y + U_z x - b_g); "
           "h = tanh(W_g y + U_g(r*x)); x = (1-z)*x + z*h; final N",
           "Parisotto et al. 2020 (GTrXL)", GatedBlock, partial_residual=False, per_layer=True),
]

# ---- Zoo II (issue 9): hyper-connections (blocks/hyper.py) ----
_DESIGNS += [
    Design("hyper-connections", "n streams H_i = emb; per sublayer k: h = sum_i A_m[i] H_i; y = F(N(h)); "
           "H'_j = sum_i A_r[i,j] H_i + B[j] y; head reads N(sum_i H_i); init A_m = e_(k mod n), A_r = I, "
           "B = 1 (pre-ln); hyper_dynamic: + s*tanh(N(H) W); sinkhorn: A_r = SinkhornKnopp(R), "
           "read sigmoid, write 2*sigmoid (mHC)",
           "Zhu et al. 2024 (Hyper-Connections, ICLR 2025); Xie et al. 2025 (mHC: Manifold-Constrained "
           "Hyper-Connections)", HyperBlock, stream="hyper", partial_residual=False),
]

# ---- Zoo II (issue 9): nGPT (blocks/ngpt.py) ----
_DESIGNS += [
    Design("ngpt", "h = Norm(h + alpha_A*(Norm(A(h)) - h)); h = Norm(h + alpha_M*(Norm(M(h)) - h)); "
           "Norm(x) = x/||x||, h_0 = Norm(emb), weight rows on the unit sphere, logits s_z * (E h)",
           "Loshchilov et al. 2024 (nGPT)", NGPTBlock, stream="ngpt", final_norm=False, norms=("none",),
           defaults={"norm": "none", "mlp": "swiglu", "bias": False}, partial_residual=False),
]

DESIGNS: dict[str, Design] = {d.name: d for d in _DESIGNS}

# Defaults every design shares, for fields no design overrides.
_COMMON_DEFAULTS = {"norm": "layernorm", "init": "gpt2", "attn_res": True, "ffn_res": True,
                    "embed_norm": False, "shaped_attention": False, "vp_identity": False,
                    "branch_scale": "none", "bias": True, "mlp": "gelu"}


def cait_layerscale_init(n_layer: int) -> float:
    """LayerScale's initial lambda by depth (Touvron et al. 2021, CaiT): 0.1 up to 18 layers,
    1e-5 up to 24, 1e-6 beyond."""
    return 0.1 if n_layer <= 18 else 1e-5 if n_layer <= 24 else 1e-6


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
    if given.embed_norm and d.stream == "dual":
        errors.append(f"model.embed_norm: {d.name} feeds the embedding to both streams unnormalised; "
                      "it has no embedding norm")
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
    return errors + _zoo2_refusals(cfg, d, given) + _layer_design_refusals(cfg, d)


def _names(flag: str) -> str:
    return ", ".join(n for n, x in DESIGNS.items() if getattr(x, flag))


def _zoo2_refusals(cfg: ModelConfig, d: Design, given: ModelConfig) -> list[str]:
    """Zoo II options (issue 9) that mean nothing for design d."""
    errors = []
    if not d.learned_scales:
        for flag in ("skip_scale", "branch_scale"):
            if getattr(given, flag) not in (None, "none") and getattr(given, flag) != d.defaults.get(flag):
                errors.append(f"model.{flag}: learned skip / branch scales apply to {_names('learned_scales')}; "
                              f"not {d.name}")
    if not d.attention_carry:
        for flag in ("value_residual", "residual_attention"):
            if getattr(cfg, flag):
                errors.append(f"model.{flag}: applies to {_names('attention_carry')}; not {d.name}")
    else:  # pre-ln also takes vp_identity / shaped_attention, which these options cannot use
        if cfg.value_residual and cfg.vp_identity:
            errors.append("model.value_residual: mixes the first layer's W_V values into later layers; "
                          "with vp_identity the values are fixed to x (set one of them to false)")
        for flag in ("value_residual", "residual_attention"):
            if getattr(cfg, flag) and cfg.shaped_attention:
                errors.append(f"model.{flag}: does not compose with shaped_attention "
                              f"(beta*softmax + alpha*I - gamma*C); set one of them to false")
    if d.name == "layerscale" and cfg.branch_scale != "channel":
        errors.append(f"model.branch_scale: layerscale is a per-channel branch scale diag(lambda); it needs "
                      f"'channel', got {cfg.branch_scale!r} (for a scalar one use pre-ln with branch_scale = 'scalar')")
    if cfg.skip_scale != "none" and cfg.attn_res is False and cfg.ffn_res is False:
        errors.append("model.skip_scale: there is no skip to scale (attn_res = ffn_res = false)")
    if (cfg.skip_scale != "none" or cfg.branch_scale not in (None, "none")) and cfg.layer_designs:
        for layer, name in sorted(parse_layer_designs(cfg)[0].items()):
            if not DESIGNS[name].learned_scales:
                errors.append(f"model.layer_designs: layer {layer} is {name}, which has no learned skip / branch "
                              f"scales (skip_scale / branch_scale); choose one of {_names('learned_scales')}")
                break
    if cfg.norm == "dyt" and cfg.resi_dual_scale != 1.0:
        errors.append("model.resi_dual_scale: s relies on N(s*z) = N(z), which DyT (not scale-invariant) "
                      "breaks; use norm = 'layernorm' or 'rmsnorm', or s = 1")
    if given.branch_scale_init not in (None, 1.0) and cfg.branch_scale == "none":  # 1.0: already resolved
        errors.append("model.branch_scale_init: there is no learned branch scale (branch_scale = 'none')")
    if cfg.norm != "dyt" and cfg.dyt_alpha != ModelConfig.dyt_alpha:
        errors.append(f"model.dyt_alpha: only norm = 'dyt' has alpha; got norm = {cfg.norm!r}")
    if cfg.gate_bias != ModelConfig.gate_bias and d.name != "gated" \
            and "gated" not in parse_layer_designs(cfg)[0].values():
        errors.append(f"model.gate_bias: only gated (GTrXL) has a gate; not {d.name}")
    if cfg.value_residual_init != ModelConfig.value_residual_init and not cfg.value_residual:
        errors.append("model.value_residual_init: needs value_residual = true")
    if d.name != "hyper-connections":
        for flag in ("hyper_streams", "hyper_mixing", "hyper_dynamic", "sinkhorn_iters"):
            if getattr(cfg, flag) != getattr(ModelConfig, flag):
                errors.append(f"model.{flag}: only hyper-connections has parallel streams; not {d.name}")
    elif cfg.sinkhorn_iters != ModelConfig.sinkhorn_iters and cfg.hyper_mixing != "sinkhorn":
        errors.append("model.sinkhorn_iters: needs hyper_mixing = 'sinkhorn'")
    elif cfg.hyper_mixing == "sinkhorn" and cfg.hyper_streams < 2:
        errors.append("model.hyper_streams: hyper_mixing = 'sinkhorn' needs at least 2 streams (a 1 x 1 "
                      "doubly stochastic matrix is the constant 1); use 'free' for n = 1")
    if d.name != "ngpt" and cfg.ngpt_alpha_init != ModelConfig.ngpt_alpha_init:
        errors.append(f"model.ngpt_alpha_init: only ngpt has eigen learning rates; not {d.name}")
    if d.name == "ngpt":
        if cfg.mlp != "swiglu":
            errors.append(f"model.mlp: ngpt's MLP is always SwiGLU with its scalers s_u, s_v; "
                          f"leave mlp unset or set 'swiglu', got {cfg.mlp!r}")
        if cfg.bias:
            errors.append("model.bias: ngpt has no biases (every weight row lives on the unit sphere); "
                          "leave bias unset or set false")
        if given.init not in (None, "gpt2"):
            errors.append(f"model.init: ngpt puts every weight row on the unit sphere, so an init "
                          f"scheme's scale has no meaning; leave init unset, got {given.init!r}")
        if cfg.branch_gain != 1.0:
            errors.append("model.branch_gain: ngpt normalises every branch output (Norm(F(h))), which "
                          "cancels a gain; its eigen learning rates alpha_A, alpha_M set the step")
    return errors


def parse_layer_designs(cfg: ModelConfig) -> tuple[dict[int, str], list[str]]:
    """layer_designs {"1-3": "post-ln", "12": "sandwich-ln"} -> ({1: "post-ln", ..., 12: ...}, errors)."""
    layers, errors = {}, []
    for key, name in cfg.layer_designs.items():
        where = f"model.layer_designs.{key}"
        lo, sep, hi = key.partition("-")
        if not (lo.strip().isdigit() and (not sep or hi.strip().isdigit())):
            errors.append(f"{where}: a layer or range of layers counted from 1 ('3' or '1-4'), got {key!r}")
            continue
        first, last = int(lo), int(hi) if sep else int(lo)
        if not 1 <= first <= last <= cfg.n_layer:
            errors.append(f"{where}: layers must lie in 1..n_layer={cfg.n_layer} with first <= last")
            continue
        if name not in DESIGNS or not DESIGNS[name].per_layer:
            errors.append(f"{where}: {name!r} cannot be chosen per layer; choose one of {_names('per_layer')}")
            continue
        for layer in range(first, last + 1):
            if layer in layers:
                errors.append(f"{where}: layer {layer} is already given a design by another key")
                break
            layers[layer] = name
    return layers, errors


def _layer_design_refusals(cfg: ModelConfig, d: Design) -> list[str]:
    if not cfg.layer_designs:
        return []
    if d.stream != "single" or d.name in ("mix-ln", "sas", "sas-p", "ngpt"):
        return [f"model.layer_designs: per-layer designs need a single-stream base design with "
                f"standard blocks; {d.name} has its own layer structure"]
    layers, errors = parse_layer_designs(cfg)
    carried = [f for f in ("value_residual", "residual_attention") if getattr(cfg, f)]
    for layer, name in sorted(layers.items()):
        if carried and not DESIGNS[name].attention_carry:
            errors.append(f"model.layer_designs: layer {layer} is {name}, which does not pass the attention "
                          f"carry that {' and '.join(carried)} {'needs' if len(carried) == 1 else 'need'}; choose one of "
                          f"{', '.join(n for n, x in DESIGNS.items() if x.per_layer and x.attention_carry)}")
            break
    for layer, name in layers.items():
        if cfg.prores != "none" and not DESIGNS[name].prores:
            errors.append(f"model.layer_designs: layer {layer} is {name}, which does not compose with prores")
            break
    return errors


def layer_design(cfg: ModelConfig, layer: int) -> Design:
    """The design of layer `layer` (from 1): the per-layer override, else the model's design."""
    name = parse_layer_designs(cfg)[0].get(layer, cfg.design) if cfg.layer_designs else cfg.design
    return DESIGNS[name]


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
            elif f.name == "branch_scale_init":
                filled[f.name] = cait_layerscale_init(cfg.n_layer) if d.name == "layerscale" else 1.0
            else:
                filled[f.name] = d.defaults.get(f.name, _COMMON_DEFAULTS.get(f.name))
    resolved = dataclasses.replace(cfg, **filled)
    raise_if(_refusals(resolved, d, cfg))
    return resolved
