"""Typed configuration of the model. Fields left as None take the design's default.

`reslab.model.registry.resolve` fills those defaults and refuses meaningless combinations; the
checks here are the ones that hold for every design (shapes, ranges).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Literal, Optional

from ..errors import ConfigError
from .prores import SCHEDULE_NAMES
from .spellings import upgrade
from ..typed import Typed

Norm = Literal["layernorm", "rmsnorm", "dyt", "none", "derf", "seednorm", "rmsnorm-nogain"]
LearnedScale = Literal["none", "scalar", "channel"]
Init = Literal["gpt2", "deepnorm", "identity", "t-fixup", "xavier", "fixup", "ds-init", "sub-ln"]
MLPKind = Literal["gelu", "gelu-tanh", "relu", "swiglu"]
Positions = Literal["learned", "rope", "none"]
GainMode = Literal["runtime", "init"]


@dataclass(frozen=True)
class ModelConfig(Typed):
    TABLE = "model"

    design: str = "pre-ln"            # block design, see `reslab variants`
    vocab_size: int = 65               # token ids 0..vocab_size-1 (training sets it from the tokenizer)
    n_layer: int = 6                   # blocks L
    n_head: int = 6                    # attention heads (must divide n_embd)
    n_embd: int = 384                  # width of the residual stream
    block_size: int = 256             # longest context the model accepts
    dropout: float = 0.0              # attention-probability and branch-output dropout
    bias: Optional[bool] = None       # biases in Linear layers and LayerNorm (design default: true; ngpt, sdd, fixup: false)
    tie_weights: bool = True          # head shares the token-embedding matrix
    pos: Positions = "learned"        # learned absolute positions, rotary (RoPE), or none
    rope_base: float = 10000.0         # RoPE frequency base (pos = "rope")
    mlp: Optional[MLPKind] = None     # design default: gelu (ngpt: swiglu)
    mlp_ratio: float = 4.0            # hidden width / n_embd (SwiGLU: 2/3 of it, rounded to 8)
    norm: Optional[Norm] = None       # design default: layernorm (hybridnorm, keel: rmsnorm; rezero, ngpt, skipinit, fixup, t-fixup: none)
    norm_eps: float = 1e-5             # epsilon of every norm
    init: Optional[Init] = None       # design default: gpt2 (deepnorm, fixup, t-fixup, sub-ln: their own; sas*: identity)
    init_std: float = 0.02             # std of the normal init of weights (gpt2 init scales output projections by 1/sqrt(2L))
    # Partial-residual flags (study 000): keep the skip of the attention / MLP sublayer.
    attn_res: Optional[bool] = None
    ffn_res: Optional[bool] = None     # keep the MLP sublayer's skip (false: the partial-residual ablation)
    # Branch gain g multiplies the BRANCH output, never the skip. runtime: g * F(...) in every
    # forward; init: the branch's output weights are multiplied by g once at initialisation.
    branch_gain: float = 1.0
    gain_mode: GainMode = "runtime"    # how branch_gain is applied: runtime or folded into the init
    # ProRes (study 004): alpha(l, t) multiplies both branch outputs of layer l.
    prores: str = "none"
    prores_warmup: int = 1000         # T, per-layer warmup length in optimizer steps
    embed_norm: Optional[bool] = None     # a norm on the embedding (peri-ln default: on)
    shaped_attention: Optional[bool] = None  # beta*softmax + alpha*I - gamma*C (sas, sas-p)
    vp_identity: Optional[bool] = None       # value and projection fixed to identity (sas, sas-p)

    # ---- learned scales, DyT, what attention carries from layer to layer --------------------------
    # Learned scales, named by WHAT they multiply, at every residual point of the design:
    #   skip_scale    x = s * x + F(...)     s learned, 1 at init       (scales the SKIP)
    #   branch_scale  x = x + a * F(...)     a learned, branch_scale_init at init (scales the BRANCH)
    # "scalar": one per residual point; "channel": one per channel (LayerScale's diag(lambda)).
    skip_scale: LearnedScale = "none"
    branch_scale: Optional[LearnedScale] = None   # design default: none (layerscale: channel)
    branch_scale_init: Optional[float] = None     # default 1.0 (layerscale: CaiT's eps by depth)
    dyt_alpha: float = 0.5            # norm = "dyt" / "derf": alpha's init in gamma * tanh(alpha x) + beta / gamma * erf(alpha x + s) + beta
    # DyT's LLaMA recipe (Zhu et al. 2025, their LLaMA code): alpha starts higher in the norm before
    # attention than in the one before the MLP and the final one (7B: 0.8, 0.2, 0.2), and the token
    # embedding is multiplied by one learned scalar that starts at sqrt(n_embd). None: dyt_alpha.
    dyt_alpha_attn: Optional[float] = None   # pre-ln with norm = "dyt" / "derf": N1's alpha at init
    dyt_alpha_mlp: Optional[float] = None    # ... N2's alpha at init
    dyt_alpha_final: Optional[float] = None  # ... the final norm's alpha at init
    embed_scale: Literal["none", "learned"] = "none"  # "learned": x_0 = s wte(token) (+ wpe), s = sqrt(n_embd) at init
    value_residual: bool = False      # ResFormer: layer l > 1 mixes its values with layer 1's
    value_residual_init: float = 0.5  # ResFormer: both mixing weights at init (learned)
    residual_attention: bool = False  # RealFormer: pre-softmax scores carried from layer to layer
    # ---- QK-norm, the residual update, exclusive self-attention, stochastic depth ------------------
    qk_norm: bool = False             # RMSNorm (a gain per head channel) on every head's queries and keys
    # At every residual point: "add" x + F; "orthogonal" x + F - (<F, x> / <x, x>) x, the branch's
    # component along the stream removed (Oh et al. 2025, orthogonal residual update).
    residual_update: Literal["add", "orthogonal"] = "add"
    # Exclusive self-attention (XSA): each head's output loses its component along the token's own
    # value, y_i - g (<y_i, v_i> / |v_i|^2) v_i; "full": g = 1, "gated": g = tanh(a_h), a_h = 0 at init.
    xsa: Literal["off", "full", "gated"] = "off"
    # Gated attention (Qiu et al. 2025, G1): each head's output times sigmoid(x W_g + b_g) before W_P, x the
    # attention's input; "head": one gate per head and token, "elementwise": one per head channel and token.
    attn_gate: Literal["off", "head", "elementwise"] = "off"
    # Stochastic depth / LayerDrop, in training only: layer l's branches are dropped for a whole update
    # with probability p_l (its skip stays), kept ones scaled by 1 / (1 - p_l). "linear": p_l = p l / L
    # (Huang et al. 2016); "uniform": p_l = p (LayerDrop, Fan et al. 2019). Drawn from (seed, update).
    stochastic_depth: float = 0.0     # p, in [0, 1)
    stochastic_depth_rule: Literal["linear", "uniform"] = "linear"  # p_l = p l / L (Huang et al.) or p_l = p (LayerDrop)
    # Per-layer design overrides: layers (counted from 1) -> design, e.g. {"1-3" = "post-ln", "12" = "sandwich-ln"}.
    layer_designs: dict[str, str] = field(default_factory=dict)
    # The design's own hyperparameters ([model.options]), checked against the options dataclass it
    # registered (reslab.register_design); blocks read them with reslab.design_options(cfg, layer).
    # With layer_designs, the table holds the options of every design the model uses.
    options: dict = field(default_factory=dict)

    @classmethod
    def upgrade_keys(cls, data: dict, prefix: str, errors: list[str]) -> dict:
        """Design hyperparameters that were [model] fields (model.gate_bias, ...) move to options."""
        return upgrade(data, prefix or "model", errors)

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def mlp_hidden(self) -> int:
        hidden = self.mlp_ratio * self.n_embd
        if self.mlp == "swiglu":
            return int(8 * round(hidden * 2 / 3 / 8)) or 8
        return int(round(hidden))


# Upper bounds far above any model reslab can train, so that a typo such as n_layer = 1000000 is one
# line instead of minutes of building modules, or an allocation failure deep inside torch.
MAX_SIZES = {
    "vocab_size": 2**32,     # token shards hold uint32 ids
    "n_layer": 10_000,       # DeepNet trained 1,000 layers
    "n_head": 65_536,
    "n_embd": 65_536,        # GPT-3 175B: 12,288
    "block_size": 2**20,
}
MAX_MLP_RATIO = 1024.0


def _choice_errors(cfg: ModelConfig, prefix: str) -> list[str]:
    """A Literal field set to a value it does not list (TOML is type-checked when read; a config
    built in Python, e.g. build_model("pre-ln", gain_mode="x"), is checked here)."""
    errors = []
    hints = typing.get_type_hints(ModelConfig)
    for f in dataclasses.fields(ModelConfig):
        tp, value = hints[f.name], getattr(cfg, f.name)
        if typing.get_origin(tp) is typing.Union:   # Optional[Literal[...]]: None means the design's default
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if value is None or len(args) != 1:
                continue
            tp = args[0]
        if typing.get_origin(tp) is Literal and value not in typing.get_args(tp):
            errors.append(f"{prefix}.{f.name}: {value!r} is not one of "
                          f"{', '.join(repr(a) for a in typing.get_args(tp))}")
    return errors


def check_shapes(cfg: ModelConfig, prefix: str = "model") -> list[str]:
    """Errors that hold for every design: choices, sizes, ranges, divisibility."""
    errors = _choice_errors(cfg, prefix)
    for name, most in MAX_SIZES.items():
        value = getattr(cfg, name)
        if value < 1:
            errors.append(f"{prefix}.{name}: must be a positive integer, got {value}")
        elif value > most:
            errors.append(f"{prefix}.{name}: must be at most {most:,}, got {value:,}")
    sizes_ok = all(1 <= getattr(cfg, n) <= MAX_SIZES[n] for n in ("n_head", "n_embd"))  # else said above
    if sizes_ok and cfg.n_embd % cfg.n_head:
        errors.append(f"{prefix}.n_head: {cfg.n_head} heads do not divide n_embd={cfg.n_embd}; "
                      f"choose a divisor of {cfg.n_embd}")
    elif sizes_ok and cfg.pos == "rope" and cfg.head_dim % 2:
        errors.append(f"{prefix}.pos: rope needs an even head size, got n_embd/n_head={cfg.head_dim}")
    if not 0.0 <= cfg.dropout < 1.0:
        errors.append(f"{prefix}.dropout: must be in [0, 1), got {cfg.dropout}")
    if not 0.0 <= cfg.stochastic_depth < 1.0:
        errors.append(f"{prefix}.stochastic_depth: a drop probability, must be in [0, 1), got {cfg.stochastic_depth}")
    if not 0 < cfg.mlp_ratio <= MAX_MLP_RATIO:
        errors.append(f"{prefix}.mlp_ratio: must be in (0, {MAX_MLP_RATIO:g}], got {cfg.mlp_ratio}")
    elif 1 <= cfg.n_embd <= MAX_SIZES["n_embd"] and cfg.mlp_hidden < 1:
        errors.append(f"{prefix}.mlp_ratio: {cfg.mlp_ratio} * n_embd={cfg.n_embd} leaves the MLP no hidden unit")
    for name in ("norm_eps", "init_std", "rope_base", "dyt_alpha"):
        if not getattr(cfg, name) > 0:
            errors.append(f"{prefix}.{name}: must be positive, got {getattr(cfg, name)}")
    for name in ("dyt_alpha_attn", "dyt_alpha_mlp", "dyt_alpha_final"):
        value = getattr(cfg, name)
        if value is not None and not 0 < value < float("inf"):
            errors.append(f"{prefix}.{name}: must be a positive finite number, got {value}")
    if not (cfg.branch_gain > 0 and cfg.branch_gain < float("inf")):
        errors.append(f"{prefix}.branch_gain: must be a positive finite number, got {cfg.branch_gain}")
    if cfg.prores not in SCHEDULE_NAMES:
        errors.append(f"{prefix}.prores: unknown schedule {cfg.prores!r}; choose one of "
                      f"{', '.join(SCHEDULE_NAMES)}")
    if cfg.prores_warmup < 0:
        errors.append(f"{prefix}.prores_warmup: must be >= 0, got {cfg.prores_warmup}")
    if cfg.branch_scale_init is not None and not abs(cfg.branch_scale_init) < float("inf"):
        errors.append(f"{prefix}.branch_scale_init: must be a finite number, got {cfg.branch_scale_init}")
    errors += _layer_design_keys(cfg, prefix)
    return errors


def _layer_design_keys(cfg: ModelConfig, prefix: str) -> list[str]:
    """layer_designs keys are '3' or '1-4' in ASCII digits: str.isdigit() alone also takes '²', which
    int() cannot read. (Their ranges and designs are checked by the registry.)"""
    errors = []
    for key in cfg.layer_designs:
        lo, sep, hi = key.partition("-")
        if not all(part.strip().isascii() and part.strip().isdigit() for part in ([lo, hi] if sep else [lo])):
            errors.append(f"{prefix}.layer_designs.{key}: a layer or range of layers counted from 1 "
                          f"('3' or '1-4'), got {key!r}")
    return errors


def raise_if(errors: list[str]) -> None:
    if errors:
        raise ConfigError(errors)
