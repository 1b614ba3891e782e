"""Design registry: name -> Design (formula, reference, block, capability flags), and `resolve`.

Every design, built in or from a plugin, enters through `register_design` (the zoo's own are in
model/zoo.py). `resolve(cfg)` fills every field the user left as None with the design's default,
checks the own options ([model.options]) of the designs the model uses and refuses combinations that have no meaning for
the design, one line per problem, naming the field. The refusals are built from the designs'
capability flags, so a message lists the designs that do allow what was asked for, plugins included.

This module imports no torch; a design's block is imported when a model is built.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable

from .config import ModelConfig, check_shapes, raise_if
from ..errors import ConfigError, ReslabError
from ..plugins import load_plugins
from ..typed import from_dict
from .design import ALL_NORMS, NORMED, STREAM_KINDS, Design

__all__ = ["DESIGNS", "Design", "register_design", "get_design", "resolve", "layer_design",
           "parse_layer_designs", "design_options", "NORMED", "ALL_NORMS"]

DESIGNS: dict[str, Design] = {}

# Defaults every design shares, for fields no design overrides.
_COMMON_DEFAULTS = {"norm": "layernorm", "init": "gpt2", "attn_res": True, "ffn_res": True,
                    "embed_norm": False, "shaped_attention": False, "vp_identity": False,
                    "branch_scale": "none", "branch_scale_init": 1.0, "bias": True, "mlp": "gelu"}
_FIELDS = {f.name: f for f in dataclasses.fields(ModelConfig)}
_NAME = re.compile(r"[a-z0-9][a-z0-9+._-]{0,63}")


def _field_default(name: str) -> Any:
    f = _FIELDS[name]
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _fail(name: object, problem: str) -> None:
    raise ReslabError(f"register_design({name!r}): {problem}")


def register_design(name: str, block: Any, *, formula: str, reference: str, stream: str = "single",
                    final_norm: bool = True, norms: tuple = NORMED, defaults: dict | None = None,
                    partial_residual: bool = True, prores: bool = False, attention_options: bool = False,
                    per_layer: bool = False, layer_base: bool = True, learned_scales: bool = False,
                    attention_carry: bool = False, fsdp: bool = True, qk_norm: bool = True,
                    check: Callable | None = None, options: type | None = None,
                    plugin: str | None = None, plugin_version: str | None = None,
                    replace: bool = False) -> Design:
    """Add a block design to the zoo; every reslab path (CLI, sweeps, studies, load_model) can then use it.

    name      lower-case, e.g. "mix-pre-post"; refused if taken, unless replace=True
    block     the block class: Block(cfg, layer) with cfg the resolved ModelConfig and layer counted
              from 1, a subclass of reslab.model.blocks.base.Block (or "module:Class" text, imported
              when the first model is built, so that listing the zoo stays cheap)
    formula   the update the block computes, as `reslab variants` shows it; reference: its paper
    stream    "single" (one residual stream, the usual case), "dual", "hyper", "ngpt", "depth"
              (earlier layers' outputs kept for mixing: model/blocks/depth.py) or "speedrun"
              (x_0, U-net and backout kept beside the stream: model/blocks/speedrun.py) or "altup"
              (K sub-blocks, (B, T, K, C): model/blocks/altup.py)
    flags     final_norm, norms, partial_residual, prores, attention_options, per_layer, layer_base,
              learned_scales, attention_carry, fsdp, qk_norm: what the design allows (see model/design.py)
    defaults  values for ModelConfig fields left unset, e.g. {"norm": "rmsnorm"} (a value or cfg -> value)
    check     (resolved cfg, given cfg) -> list of error lines for the design's own rules
    options   a dataclass of the design's own hyperparameters, set in TOML as [model.options]
              (bool, int, float, str, Literal, Optional, list and dict fields, each with a default;
              __post_init__ may raise ValueError for a bad value; a method filled(cfg) -> options may
              fill a default that depends on the config, as mix-ln's post_layers = ceil(L/4)); blocks
              read them with reslab.design_options(cfg, layer)
    plugin    the registering module (found from the block when not given; None for reslab's own)
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        _fail(name, "a design name is 1-64 lower-case letters, digits and + . _ - (starting with a letter or digit)")
    if name in DESIGNS and not replace:
        owner = DESIGNS[name].plugin or "reslab"
        _fail(name, f"the name is taken (registered by {owner}); choose another or pass replace=True")
    if not (isinstance(block, str) and ":" in block) and not callable(block):
        _fail(name, "block must be a block class (or 'module:Class' text)")
    if stream not in STREAM_KINDS:
        _fail(name, f"stream must be one of {', '.join(STREAM_KINDS)}, got {stream!r}")
    if not norms or not set(norms) <= set(ALL_NORMS):
        _fail(name, f"norms must be a non-empty subset of {', '.join(ALL_NORMS)}, got {norms!r}")
    for key in defaults or {}:
        if key not in _FIELDS:
            _fail(name, f"{key!r} is not a ModelConfig field (a design's own hyperparameters go in options=)")
    if not isinstance(formula, str) or not formula.strip() or not isinstance(reference, str):
        _fail(name, "formula and reference must be text (formula non-empty)")
    if options is not None:
        _check_options_class(name, options)
    if plugin is None:
        module = block.partition(":")[0] if isinstance(block, str) else getattr(block, "__module__", "")
        if module.split(".")[0] != "reslab":
            plugin = module
    if plugin is not None and plugin_version is None:
        plugin_version = _version_of(plugin)
    design = Design(name, formula, reference, block, stream=stream, final_norm=final_norm, norms=tuple(norms),
                    defaults=dict(defaults or {}), partial_residual=partial_residual, prores=prores,
                    attention_options=attention_options, per_layer=per_layer, layer_base=layer_base,
                    learned_scales=learned_scales, attention_carry=attention_carry, fsdp=fsdp,
                    qk_norm=qk_norm, check=check, options=options, plugin=plugin,
                    plugin_version=plugin_version)
    DESIGNS[name] = design
    return design


def _check_options_class(name: str, options: type) -> None:
    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        _fail(name, "options must be a dataclass of the design's own hyperparameters")
    for f in dataclasses.fields(options):
        if f.name.startswith("_"):
            _fail(name, f"options field {f.name!r}: names starting with _ cannot be set from TOML")
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            _fail(name, f"options field {f.name!r} needs a default (a config that leaves it out must build)")
    try:
        from_dict(options, {}, "model.options")
    except TypeError as e:  # a field type that TOML cannot give
        _fail(name, f"options: {e}")
    except (ConfigError, ValueError) as e:
        _fail(name, f"options: its defaults are refused by its own checks ({e})")


def _version_of(module: str) -> str | None:
    """The version of the distribution that provides `module` (or its __version__), if known."""
    from importlib import metadata

    top = module.split(".")[0]
    try:
        for dist in metadata.packages_distributions().get(top, []):
            return metadata.version(dist)
    except Exception:  # noqa: BLE001 - broken metadata elsewhere must not stop a registration
        pass
    import sys

    version = getattr(sys.modules.get(module) or sys.modules.get(top), "__version__", None)
    return str(version) if version is not None else None


def _unknown(name: str) -> str:
    return (f"model.design: unknown design {name!r}; choose one of {', '.join(DESIGNS)} (a design from a "
            f"plugin needs its module loaded: --plugin MODULE, RESLAB_PLUGINS, or an installed "
            f"'reslab.designs' entry point)")


def get_design(name: str) -> Design:
    if name not in DESIGNS:
        load_plugins()  # entry points and RESLAB_PLUGINS, once per process
    if name not in DESIGNS:
        raise_if([_unknown(name)])
    return DESIGNS[name]


def plugin_of_design(name: str) -> tuple[str | None, str | None]:
    """(module, version) of the plugin that registered design `name`, or (None, None) for reslab's own."""
    d = DESIGNS.get(name)
    return (d.plugin, d.plugin_version) if d is not None else (None, None)


def design_options(cfg: ModelConfig, layer: int | None = None):
    """The own hyperparameters ([model.options]) of the model's design, or of layer `layer`'s (counted
    from 1; a per-layer design's), as its options dataclass (None if it has none)."""
    d = get_design(cfg.design) if layer is None else layer_design(cfg, layer)
    if d.options is None:
        return None
    own = {f.name for f in dataclasses.fields(d.options)}  # the table also holds other layers' designs' options
    return from_dict(d.options, {k: v for k, v in cfg.options.items() if k in own}, "model.options")


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _flagged(flag: str) -> list[str]:
    return [n for n, x in DESIGNS.items() if getattr(x, flag)]


def _names(flag: str) -> str:
    return ", ".join(_flagged(flag))


def _refusals(cfg: ModelConfig, d: Design, given: ModelConfig, run_check: bool = True) -> list[str]:
    """Combinations that mean nothing for design d, from the flags. `given` is the config before
    defaults. The design's own check runs only when its options are valid (it may read them)."""
    errors = []
    if cfg.norm not in d.norms:
        errors.append(f"model.norm: {d.name} allows {', '.join(map(repr, d.norms))}, got {cfg.norm!r}")
    for flag in ("attn_res", "ffn_res"):
        if not d.partial_residual and getattr(given, flag) is not None \
                and getattr(given, flag) != d.defaults.get(flag, True):
            errors.append(f"model.{flag}: {d.name} has a fixed skip structure; leave {flag} unset "
                          f"(partial residuals apply to {_names('partial_residual')})")
    if cfg.prores != "none" and not d.prores:
        errors.append(f"model.prores: ProRes composes with {_names('prores')}; not with {d.name}")
    if not d.attention_options:
        for flag in ("shaped_attention", "vp_identity"):
            if getattr(given, flag):
                errors.append(f"model.{flag}: only {_join(_flagged('attention_options'))} "
                              f"take {flag}; not {d.name}")
    if given.embed_norm and d.stream == "dual":
        errors.append(f"model.embed_norm: {d.name} feeds the embedding to both streams unnormalised; "
                      "it has no embedding norm")
    if cfg.embed_norm and cfg.norm == "none" and cfg.norm in d.norms:  # else the norm's line says it
        errors.append("model.embed_norm: there is no norm to apply (norm = 'none')")
    if cfg.gain_mode == "init" and cfg.vp_identity:
        errors.append("model.gain_mode: 'init' scales the branches' output weights, and with "
                      "vp_identity the attention branch has none; use gain_mode = 'runtime'")
    if cfg.init == "identity" and not cfg.shaped_attention:
        errors.append("model.init: 'identity' makes shaped attention start as the identity (W_Q = 0); "
                      "it needs shaped_attention = true")
    if cfg.init == "t-fixup" and cfg.norm != "none" and cfg.norm in d.norms:  # else said above
        errors.append(f"model.init: 't-fixup' replaces normalisation; it needs norm = 'none', "
                      f"got {cfg.norm!r}")
    errors += _option_refusals(cfg, d, given)
    if d.check is not None and run_check:
        errors += list(d.check(cfg, given))
    return errors + _layer_design_refusals(cfg, d)


def _own_attention() -> str:
    """The designs with an attention of their own (qk_norm and xsa do not reach it), comma-separated."""
    return ", ".join(n for n, x in DESIGNS.items() if not x.qk_norm)


def _option_refusals(cfg: ModelConfig, d: Design, given: ModelConfig) -> list[str]:
    """The learned skip / branch scales, the attention residuals and the orthogonal update, where the
    design's flags do not allow them."""
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
    if cfg.residual_update != "add" and not d.learned_scales:
        errors.append(f"model.residual_update: the orthogonal update acts at reslab's residual points, which "
                      f"{_names('learned_scales')} have; not {d.name}")
    if cfg.residual_update != "add" and cfg.attn_res is False and cfg.ffn_res is False:
        errors.append("model.residual_update: there is no skip to project on (attn_res = ffn_res = false)")
    if cfg.stochastic_depth > 0 and not d.learned_scales:
        errors.append(f"model.stochastic_depth: drops branches at reslab's residual points, which "
                      f"{_names('learned_scales')} have; not {d.name}")
    if cfg.stochastic_depth > 0 and (cfg.attn_res is False or cfg.ffn_res is False):
        errors.append("model.stochastic_depth: drops a layer's branches and keeps its skips; with "
                      "attn_res or ffn_res = false a dropped layer would zero the stream")
    if cfg.stochastic_depth_rule != "linear" and cfg.stochastic_depth == 0:
        errors.append("model.stochastic_depth_rule: has no effect with stochastic_depth = 0; set a drop probability")
    if cfg.xsa != "off" and not d.qk_norm:
        errors.append(f"model.xsa: {d.name} has its own attention, which XSA does not reach; it applies to "
                      f"the designs built on reslab's attention (not {_own_attention()})")
    if cfg.xsa != "off" and cfg.shaped_attention:
        errors.append("model.xsa: removes each token's own value from the attention output, which shaped "
                      "attention adds back (alpha I); set one of them to false")
    if cfg.attn_gate != "off" and not d.qk_norm:
        errors.append(f"model.attn_gate: {d.name} has its own attention, which the output gate does not reach; it "
                      f"applies to the designs built on reslab's attention (not {_own_attention()})")
    if cfg.qk_norm and not d.qk_norm:
        errors.append(f"model.qk_norm: {d.name} has its own attention, which QK-norm does not reach; "
                      f"it applies to the designs built on reslab's attention (not {_own_attention()})")
    if cfg.skip_scale != "none" and cfg.attn_res is False and cfg.ffn_res is False:
        errors.append("model.skip_scale: there is no skip to scale (attn_res = ffn_res = false)")
    for needs, what in ((cfg.residual_update != "add", "residual_update = 'orthogonal'"),
                        (cfg.stochastic_depth > 0, "stochastic_depth")):
        if not (needs and cfg.layer_designs):
            continue
        for layer, name in sorted(parse_layer_designs(cfg)[0].items()):
            if not DESIGNS[name].learned_scales:
                errors.append(f"model.layer_designs: layer {layer} is {name}, which has no reslab residual points "
                              f"for {what}; choose one of {_names('learned_scales')}")
                break
    if (cfg.skip_scale != "none" or cfg.branch_scale not in (None, "none")) and cfg.layer_designs:
        for layer, name in sorted(parse_layer_designs(cfg)[0].items()):
            if not DESIGNS[name].learned_scales:
                errors.append(f"model.layer_designs: layer {layer} is {name}, which has no learned skip / branch "
                              f"scales (skip_scale / branch_scale); choose one of {_names('learned_scales')}")
                break
    if given.branch_scale_init not in (None, 1.0) and cfg.branch_scale == "none":  # 1.0: already resolved
        errors.append("model.branch_scale_init: there is no learned branch scale (branch_scale = 'none')")
    if cfg.norm not in ("dyt", "derf") and cfg.dyt_alpha != ModelConfig.dyt_alpha:
        errors.append(f"model.dyt_alpha: only norm = 'dyt' or 'derf' has alpha; got norm = {cfg.norm!r}")
    recipe = [n for n in ("dyt_alpha_attn", "dyt_alpha_mlp", "dyt_alpha_final") if getattr(cfg, n) is not None]
    if recipe and cfg.norm not in ("dyt", "derf"):  # one line for the recipe, named by its first field
        errors.append(f"model.{recipe[0]}: only norm = 'dyt' or 'derf' has alpha; got norm = {cfg.norm!r}")
    elif recipe and (cfg.design != "pre-ln" or cfg.layer_designs):  # LLaMA, the recipe's model, is pre-LN
        errors.append(f"model.{recipe[0]}: sets the alpha of pre-ln's N1, N2 or final norm (DyT's LLaMA recipe); "
                      f"got design {cfg.design!r}{' with layer_designs' if cfg.layer_designs else ''}")
    if cfg.embed_scale != "none" and d.stream == "ngpt":
        errors.append("model.embed_scale: ngpt puts the embedding on the unit sphere, where a scale has no effect")
    if cfg.value_residual_init != ModelConfig.value_residual_init and not cfg.value_residual:
        errors.append("model.value_residual_init: needs value_residual = true")
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
    if d.stream != "single" or not d.layer_base:
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


def _resolved_options(cfg: ModelConfig, d: Design, errors: list[str]) -> dict:
    """[model.options] checked against the options dataclasses of the designs the model uses (its
    design and its per-layer designs), with their defaults filled in."""
    layer_names = [n for n in dict.fromkeys(parse_layer_designs(cfg)[0].values()) if n != d.name]
    used = [x for x in [d] + [DESIGNS[n] for n in layer_names] if x.options is not None]
    if not used:
        if cfg.options:
            errors.append(f"model.options: {d.name} has no options of its own; remove "
                          f"{', '.join(sorted(cfg.options))}")
        return dict(cfg.options)
    fields_of = {x.name: {f.name for f in dataclasses.fields(x.options)} for x in used}
    known = set().union(*fields_of.values())
    for key in sorted(set(cfg.options) - known):
        errors.append(f"model.options.{key}: unknown key; allowed keys are {', '.join(sorted(known))}")
    resolved: dict = {}
    for x in used:
        try:
            opts = from_dict(x.options, {k: v for k, v in cfg.options.items() if k in fields_of[x.name]},
                             "model.options")
        except ConfigError as e:
            errors.extend(e.errors)
            continue
        except (ValueError, TypeError) as e:  # the options dataclass's own __post_init__ checks
            text = " ".join(str(e).split()) or type(e).__name__
            key, _, rest = text.partition(" ")
            # "backout_layer must be ..." names its key, as from_dict's own checks do: model.options.KEY
            named = key in fields_of[x.name] and rest and not rest.startswith("=")
            errors.append(f"model.options.{key}: {rest}" if named else f"model.options: {text}")
            continue
        if hasattr(opts, "filled"):  # defaults that depend on the rest of the config (mix-ln's post_layers)
            opts = opts.filled(cfg)
        resolved.update(dataclasses.asdict(opts))
    return resolved if not errors else dict(cfg.options)


def resolve(cfg: ModelConfig) -> ModelConfig:
    """The config with every design default filled in; raises ConfigError listing every problem."""
    errors = check_shapes(cfg)
    if cfg.design not in DESIGNS:
        try:
            get_design(cfg.design)  # loads plugins before giving up
        except ConfigError as e:
            errors += e.errors
    raise_if(errors)
    d = DESIGNS[cfg.design]
    filled = {}
    for f in dataclasses.fields(cfg):
        if getattr(cfg, f.name) is None:
            default = d.defaults.get(f.name, _COMMON_DEFAULTS.get(f.name))
            filled[f.name] = default(cfg) if callable(default) else default
    options_errors: list[str] = []
    filled["options"] = _resolved_options(cfg, d, options_errors)
    resolved = dataclasses.replace(cfg, **filled)
    raise_if(options_errors + _refusals(resolved, d, cfg, run_check=not options_errors))
    return resolved


from . import zoo  # noqa: E402,F401  - the built-in designs register themselves
