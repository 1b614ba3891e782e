"""Hugging Face GPT-2 folders <-> reslab pre-ln models, with no transformers import and no pickle.

A pre-ln reslab model with learned positions, LayerNorm with biases and a GELU MLP computes exactly
what transformers' GPT2LMHeadModel computes; only the names and the layout differ:

    reslab (nn.Linear, weight [out, in])      Hugging Face GPT-2 (Conv1D, weight [in, out])
    wte.weight, wpe.weight                    transformer.wte.weight, transformer.wpe.weight
    blocks.{i}.norm1 / norm2                  transformer.h.{i}.ln_1 / ln_2
    blocks.{i}.attn.c_attn / attn.c_proj      transformer.h.{i}.attn.c_attn / attn.c_proj  (transposed)
    blocks.{i}.mlp.c_fc / mlp.c_proj          transformer.h.{i}.mlp.c_fc / mlp.c_proj      (transposed)
    stream.final_norm                         transformer.ln_f
    lm_head.weight (untied only)              lm_head.weight (absent when tie_word_embeddings)

A Hugging Face GPT-2 folder is written as config.json + model.safetensors (the format
`GPT2LMHeadModel.from_pretrained` reads). Import reads only safetensors: pytorch_model.bin is a
pickle, and unpickling a file can run arbitrary code.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch

from .model.config import ModelConfig
from .errors import ConfigError, ReslabError
from .fileio import atomic_path, read_json, write_json
from .model.gpt import GPT

HF_CONFIG, HF_WEIGHTS, HF_INDEX = "config.json", "model.safetensors", "model.safetensors.index.json"
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack")

# reslab mlp -> Hugging Face activation_function written on export.
EXPORT_ACTIVATION = {"gelu": "gelu", "gelu-tanh": "gelu_new", "relu": "relu"}
# Hugging Face activation_function -> reslab mlp on import. gelu_new, gelu_fast and gelu_pytorch_tanh
# are all 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), written three ways.
IMPORT_ACTIVATION = {"gelu": "gelu", "gelu_new": "gelu-tanh", "gelu_pytorch_tanh": "gelu-tanh",
                     "gelu_fast": "gelu-tanh", "relu": "relu"}

# Linear sublayers stored as Conv1D ([in, out]) by Hugging Face GPT-2.
_CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
_BLOCK_PARTS = {"norm1": "ln_1", "attn.c_attn": "attn.c_attn", "attn.c_proj": "attn.c_proj",
                "norm2": "ln_2", "mlp.c_fc": "mlp.c_fc", "mlp.c_proj": "mlp.c_proj"}
# GPT2Config defaults, used for fields a config.json leaves out (as from_pretrained does).
_HF_DEFAULTS = {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
                "n_inner": None, "activation_function": "gelu_new", "resid_pdrop": 0.1, "embd_pdrop": 0.1,
                "attn_pdrop": 0.1, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True,
                "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
                "add_cross_attention": False}
GPT2_VOCAB, GPT2_EOS = 50257, 50256


# ---- what a GPT-2 is ----------------------------------------------------------------------------------
def gpt2_incompatibilities(cfg: ModelConfig) -> list[str]:
    """Fields of a resolved config that Hugging Face GPT-2 cannot express, one line each."""
    from .model.registry import resolve

    cfg = resolve(cfg)
    problems = []
    checked = {"branch_gain", "gain_mode"}  # the fields a rule below reads (the rest: at their defaults)

    def need(field: str, ok: bool, want: str) -> None:
        checked.add(field)
        if not ok:
            problems.append(f"model.{field} is {getattr(cfg, field)!r}; Hugging Face GPT-2 needs {want}")

    need("design", cfg.design == "pre-ln", "'pre-ln'")
    need("pos", cfg.pos == "learned", "'learned' (absolute position embeddings)")
    need("norm", cfg.norm == "layernorm", "'layernorm'")
    need("bias", cfg.bias is True, "true (biases in every Linear and LayerNorm)")
    need("mlp", cfg.mlp in EXPORT_ACTIVATION, "one of " + ", ".join(map(repr, EXPORT_ACTIVATION)))
    need("attn_res", cfg.attn_res is True, "true")
    need("ffn_res", cfg.ffn_res is True, "true")
    need("embed_norm", not cfg.embed_norm, "false")
    need("shaped_attention", not cfg.shaped_attention, "false")
    need("vp_identity", not cfg.vp_identity, "false")
    need("skip_scale", cfg.skip_scale == "none", "'none' (GPT-2 has no learned skip scale)")
    need("branch_scale", cfg.branch_scale == "none", "'none' (GPT-2 has no learned branch scale)")
    need("value_residual", not cfg.value_residual, "false")
    need("residual_attention", not cfg.residual_attention, "false")
    need("layer_designs", not cfg.layer_designs, "empty (every layer pre-ln)")
    if cfg.gain_mode == "runtime" and cfg.branch_gain != 1.0:
        problems.append(f"model.branch_gain is {cfg.branch_gain!r} with gain_mode 'runtime'; Hugging Face "
                        "GPT-2 needs 1 (gain_mode 'init' is baked into the weights and exports)")
    # Every other field must be at its default: a new option is refused until a rule above or _GPT2_FREE
    # names it, so an export never drops weights or a computation GPT-2 does not have.
    default = ModelConfig()
    for f in dataclasses.fields(ModelConfig):
        if f.name in checked or f.name in _GPT2_FREE:
            continue
        if getattr(cfg, f.name) != getattr(default, f.name):
            problems.append(f"model.{f.name} is {getattr(cfg, f.name)!r}; Hugging Face GPT-2 has no such "
                            f"setting (it needs {getattr(default, f.name)!r})")
    return problems


# Fields a Hugging Face GPT-2 expresses at any value (sizes, dropout, head tying, the MLP width, the norm's
# eps), that only shape the weights it receives (init), that act only in training (stochastic depth; ProRes,
# whose alphas _check_gpt2 reads), or that no GPT-2-shaped model reads (RoPE's base without RoPE, the
# initial values of a branch scale, DyT's alphas and a value residual's lambda, each refused above).
_GPT2_FREE = frozenset({
    "vocab_size", "n_layer", "n_head", "n_embd", "block_size", "dropout", "tie_weights", "mlp_ratio",
    "norm_eps", "init", "init_std", "stochastic_depth", "stochastic_depth_rule", "prores", "prores_warmup",
    "rope_base", "branch_scale_init", "dyt_alpha", "dyt_alpha_attn", "dyt_alpha_mlp", "dyt_alpha_final",
    "value_residual_init"})


def _check_gpt2(model: GPT, where: str) -> None:
    problems = gpt2_incompatibilities(model.config)
    if problems:
        raise ReslabError(f"{where}: {problems[0]}")
    alphas = model.prores_alphas()
    if any(a != 1.0 for a in alphas):
        raise ReslabError(f"{where}: model.prores is {model.config.prores!r} and at step {model.prores_step} "
                          f"its alphas are not all 1 (min {min(alphas):g}); Hugging Face GPT-2 has no ProRes "
                          "(a schedule exports once its warmup has finished)")


# ---- the weight mapping ---------------------------------------------------------------------------
def gpt2_state_from_reslab(model: GPT) -> dict[str, torch.Tensor]:
    """Hugging Face GPT2LMHeadModel state dict (detached, contiguous) of a GPT-2-shaped reslab model.

    lm_head.weight is included only when the weights are untied (Hugging Face ties it to wte)."""
    _check_gpt2(model, "model")
    src = {k: v.detach() for k, v in model.state_dict().items()}
    out = {"transformer.wte.weight": src["wte.weight"], "transformer.wpe.weight": src["wpe.weight"]}
    for i in range(model.config.n_layer):
        for ours, theirs in _BLOCK_PARTS.items():
            for p in ("weight", "bias"):
                t = src[f"blocks.{i}.{ours}.{p}"]
                if ours in _CONV1D and p == "weight":
                    t = t.t()
                out[f"transformer.h.{i}.{theirs}.{p}"] = t
    out["transformer.ln_f.weight"] = src["stream.final_norm.weight"]
    out["transformer.ln_f.bias"] = src["stream.final_norm.bias"]
    if not model.config.tie_weights:
        out["lm_head.weight"] = src["lm_head.weight"]
    return {k: v.contiguous().clone() for k, v in out.items()}


def _is_old_mask_buffer(key: str) -> bool:
    """The causal-mask buffers h.{i}.attn.bias / attn.masked_bias that older transformers saved."""
    parts = key.split(".")
    return len(parts) == 4 and parts[0] == "h" and parts[2] == "attn" and parts[3] in ("bias", "masked_bias")


def reslab_state_from_gpt2(state: dict[str, torch.Tensor], cfg: ModelConfig,
                           where: str = "state dict") -> dict[str, torch.Tensor]:
    """reslab state dict (keys of `model_state`, tied head omitted) from a Hugging Face GPT-2 one.

    Keys may carry the 'transformer.' prefix (GPT2LMHeadModel) or not (GPT2Model); old causal-mask
    buffers are ignored, and so is lm_head.weight when the weights are tied. Anything else that is
    missing or unexpected is a ReslabError naming `where`."""
    body, head = {}, None
    for key, value in state.items():
        if key == "lm_head.weight":
            head = value
            continue
        bare = key[len("transformer."):] if key.startswith("transformer.") else key
        if _is_old_mask_buffer(bare):
            continue
        if bare in body:
            raise ReslabError(f"{where}: {bare} appears both with and without the 'transformer.' prefix")
        body[bare] = value

    out, used = {}, set()

    def take(theirs: str, ours: str, transpose: bool = False) -> None:
        if theirs not in body:
            raise ReslabError(f"{where}: weight {theirs!r} is missing (needed for {ours})")
        used.add(theirs)
        t = body[theirs]
        out[ours] = t.t().contiguous() if transpose else t

    take("wte.weight", "wte.weight")
    take("wpe.weight", "wpe.weight")
    for i in range(cfg.n_layer):
        for ours, theirs in _BLOCK_PARTS.items():
            for p in ("weight", "bias"):
                take(f"h.{i}.{theirs}.{p}", f"blocks.{i}.{ours}.{p}",
                     transpose=ours in _CONV1D and p == "weight")
    take("ln_f.weight", "stream.final_norm.weight")
    take("ln_f.bias", "stream.final_norm.bias")
    extra = sorted(set(body) - used)
    if extra:
        raise ReslabError(f"{where}: unexpected weights for a {cfg.n_layer}-layer GPT-2 "
                          f"(e.g. {', '.join(map(repr, extra[:3]))})")
    if not cfg.tie_weights:
        if head is None:
            raise ReslabError(f"{where}: 'lm_head.weight' is missing, and tie_word_embeddings is false")
        out["lm_head.weight"] = head
    return out


# ---- export -------------------------------------------------------------------------------------
def _check_out_folder(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ReslabError(f"{out}: exists and is not a folder")
    if out.is_dir():
        others = sorted(p.name for p in out.iterdir() if p.name not in (HF_CONFIG, HF_WEIGHTS))
        if others:
            raise ReslabError(f"{out}: folder is not empty (holds {others[0]!r}); export hf writes only into "
                              f"an empty folder or over an earlier export ({HF_CONFIG} + {HF_WEIGHTS})")


def hf_config_dict(cfg: ModelConfig) -> dict:
    """config.json of the Hugging Face GPT-2 equivalent of a GPT-2-shaped reslab config."""
    from . import __version__

    hidden = cfg.mlp_hidden
    # Only GPT-2's own vocabulary has a known end-of-text token; elsewhere say "none", because a
    # missing bos/eos would make transformers assume GPT-2's 50256.
    eos = GPT2_EOS if cfg.vocab_size == GPT2_VOCAB else None
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg.vocab_size,
        "n_positions": cfg.block_size,
        "n_embd": cfg.n_embd,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "n_inner": None if hidden == 4 * cfg.n_embd else hidden,
        "activation_function": EXPORT_ACTIVATION[cfg.mlp],
        "resid_pdrop": cfg.dropout,
        "embd_pdrop": cfg.dropout,
        "attn_pdrop": cfg.dropout,
        "layer_norm_epsilon": cfg.norm_eps,
        "initializer_range": cfg.init_std,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": bool(cfg.tie_weights),
        "bos_token_id": eos,
        "eos_token_id": eos,
        "dtype": "float32",
        "reslab_version": __version__,
    }


def export_hf(model_folder: str | Path, out: str | Path) -> Path:
    """Write the reslab model in `model_folder` as a Hugging Face GPT-2 folder `out`; returns `out`."""
    from safetensors.torch import save_file

    from .model.io import META, load_model, read_model_config
    from .model.registry import resolve

    model_folder, out = Path(model_folder), Path(out)
    where = str(model_folder / META)
    cfg, _ = read_model_config(model_folder)  # refuse before reading the weights
    try:
        problems = gpt2_incompatibilities(cfg)
    except ConfigError as e:
        raise ReslabError(f"{where}: {e.errors[0]}") from None
    if problems:
        raise ReslabError(f"{where}: {problems[0]}")
    _check_out_folder(out)
    model = load_model(model_folder)
    _check_gpt2(model, where)
    state = {k: v.to(torch.float32) for k, v in gpt2_state_from_reslab(model).items()}
    with atomic_path(out / HF_WEIGHTS) as tmp:
        save_file(state, str(tmp), metadata={"format": "pt"})
    write_json(out / HF_CONFIG, hf_config_dict(resolve(model.config)))
    return out


# ---- import -------------------------------------------------------------------------------------
def _field(conf: dict, path: Path, name: str, kind: str):
    value = conf.get(name, _HF_DEFAULTS[name])
    if kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        want = "a positive integer"
    elif kind == "int?":
        ok = value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)
        want = "null or a positive integer"
    elif kind == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
        want = "a non-negative number"
    elif kind == "bool":
        ok = isinstance(value, bool)
        want = "true or false"
    else:
        ok, want = isinstance(value, str), "a string"
    if not ok:
        raise ReslabError(f"{path}: {name} must be {want}, got {value!r}")
    return value


def _init_std(conf: dict) -> float:
    """initializer_range, if usable (it only matters for re-initialising, never for the weights)."""
    v = conf.get("initializer_range")
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    return float(v) if ok else ModelConfig.init_std


def hf_config_to_reslab(conf: dict, path: Path | str = HF_CONFIG) -> ModelConfig:
    """A resolved pre-ln ModelConfig from a Hugging Face GPT-2 config.json dict."""
    from .model.registry import resolve

    path = Path(path)
    model_type = conf.get("model_type")
    if model_type != "gpt2":
        raise ReslabError(f"{path}: model_type is {model_type!r}; import hf reads only 'gpt2' models")
    act = _field(conf, path, "activation_function", "str")
    if act not in IMPORT_ACTIVATION:
        raise ReslabError(f"{path}: activation_function {act!r} is not supported; choose one of "
                          f"{', '.join(map(repr, IMPORT_ACTIVATION))}")
    for name, want in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                       ("add_cross_attention", False)):
        if _field(conf, path, name, "bool") != want:
            raise ReslabError(f"{path}: {name} is {not want!r}; a reslab pre-ln model needs {str(want).lower()}")
    n_embd = _field(conf, path, "n_embd", "int")
    n_inner = _field(conf, path, "n_inner", "int?")
    drops = [_field(conf, path, n, "float") for n in ("resid_pdrop", "embd_pdrop", "attn_pdrop")]
    eps = _field(conf, path, "layer_norm_epsilon", "float")
    if eps <= 0:
        raise ReslabError(f"{path}: layer_norm_epsilon must be positive, got {eps!r}")
    cfg = ModelConfig(
        design="pre-ln", vocab_size=_field(conf, path, "vocab_size", "int"),
        n_layer=_field(conf, path, "n_layer", "int"), n_head=_field(conf, path, "n_head", "int"),
        n_embd=n_embd, block_size=_field(conf, path, "n_positions", "int"),
        dropout=float(drops[0]),  # reslab has one dropout rate; it only matters for training
        bias=True, tie_weights=_field(conf, path, "tie_word_embeddings", "bool"), pos="learned",
        mlp=IMPORT_ACTIVATION[act], mlp_ratio=4.0 if n_inner is None else n_inner / n_embd,
        norm="layernorm", norm_eps=float(eps), init="gpt2",
        init_std=_init_std(conf),
    )
    try:
        cfg = resolve(cfg)
    except ConfigError as e:
        raise ReslabError(f"{path}: {e.errors[0]}") from None
    if n_inner is not None and cfg.mlp_hidden != n_inner:  # cannot happen with float64, but be sure
        raise ReslabError(f"{path}: n_inner {n_inner} cannot be expressed as mlp_ratio * n_embd")
    return cfg


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ReslabError(f"{path}: cannot be read as safetensors ({reason})") from None


def read_hf_weights(folder: Path) -> tuple[dict[str, torch.Tensor], str]:
    """Every tensor of a Hugging Face folder's model.safetensors (or its shards); never a pickle."""
    single, index = folder / HF_WEIGHTS, folder / HF_INDEX
    if single.is_file():
        return _load_safetensors(single), str(single)
    if index.is_file():
        weight_map = read_json(index, "Hugging Face shard index").get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ReslabError(f"{index}: weight_map must be a non-empty object of tensor name -> shard file")
        state = {}
        for shard in sorted(set(weight_map.values())):
            if not isinstance(shard, str) or Path(shard).name != shard or not shard.endswith(".safetensors"):
                raise ReslabError(f"{index}: weight_map names {shard!r}; shards must be .safetensors "
                                  "files in the same folder")
            if not (folder / shard).is_file():
                raise ReslabError(f"{folder / shard}: not found (named in {index.name})")
            state.update(_load_safetensors(folder / shard))
        return state, str(index)
    pickles = [name for name in PICKLE_WEIGHTS if (folder / name).exists()]
    if pickles:
        raise ReslabError(f"{folder / pickles[0]}: import hf reads only {HF_WEIGHTS}; {pickles[0]} is not "
                          "read because loading a pickle can run arbitrary code (convert it with "
                          "transformers: from_pretrained(...).save_pretrained(..., safe_serialization=True))")
    raise ReslabError(f"{single}: not found; a Hugging Face GPT-2 folder holds {HF_CONFIG} and {HF_WEIGHTS}")


def import_hf(hf_folder: str | Path) -> GPT:
    """A reslab pre-ln GPT holding the weights of the local Hugging Face GPT-2 folder `hf_folder`."""
    from .model.io import load_weights

    folder = Path(hf_folder)
    if not folder.is_dir():
        raise ReslabError(f"{folder}: not a folder; import hf reads a local folder with {HF_CONFIG} "
                          f"and {HF_WEIGHTS}")
    conf_path = folder / HF_CONFIG
    if not conf_path.is_file():
        raise ReslabError(f"{conf_path}: not found; a Hugging Face GPT-2 folder holds {HF_CONFIG} and {HF_WEIGHTS}")
    cfg = hf_config_to_reslab(read_json(conf_path, "Hugging Face config"), conf_path)
    state, where = read_hf_weights(folder)
    ours = reslab_state_from_gpt2(state, cfg, where)
    bad = sorted(k for k, v in ours.items() if not v.is_floating_point())
    if bad:
        raise ReslabError(f"{where}: {bad[0]} has dtype {ours[bad[0]].dtype}; weights must be floating point")
    model = GPT(cfg)
    load_weights(model, ours, where)  # checks every shape against config.json
    return model
