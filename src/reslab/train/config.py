"""The run configuration: [model], [data], [optim], [train], [diagnostics] tables of one TOML file.

Every field has a default; a preset is a TOML file in reslab/presets; `--set table.key=value`
overrides either. Loading reports every problem in the file at once, each with its path.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

from ..model.config import ModelConfig
from ..data.config import DataConfig
from ..data.config import check as check_data
from ..errors import ConfigError, ReslabError
from ..model.registry import DESIGNS
from ..model.registry import resolve as resolve_model
from ..model.spellings import identity_spelling
from ..typed import INT_MAX, Typed, from_dict
from .identity_defaults import BASELINE, OPTIONS_ADDED

PRESET_DIR = Path(__file__).resolve().parent.parent / "presets"


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-3                   # peak learning rate (after warmup)
    min_lr: float = 1e-4               # floor of the cosine / WSD decay
    schedule: Literal["cosine", "constant", "wsd"] = "cosine" # learning-rate schedule after warmup
    warmup_steps: int = 100            # linear warmup from 0 (0 = none)
    decay_steps: Optional[int] = None  # cosine reaches min_lr here (default: train.steps)
    wsd_decay_fraction: float = 0.2    # WSD: last fraction of the run decays linearly to min_lr
    beta1: float = 0.9                 # AdamW beta1
    beta2: float = 0.99                # AdamW beta2
    eps: float = 1e-8                  # AdamW epsilon
    weight_decay: float = 0.1          # on matrices only: never on norms, biases, gains
    embedding_decay: bool = True       # also decay token / position embeddings (nanoGPT does)
    grad_clip: float = 1.0             # global gradient-norm clip; 0 switches clipping off
    fused: Optional[bool] = None       # fused AdamW (default: on, CPU and CUDA)


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 2000                  # optimizer updates
    batch_size: int = 12               # sequences per micro-batch (per process)
    grad_accum: int = 1                # micro-batches per update (per process)
    eval_interval: int = 250           # updates between evaluations (and checkpoints, by default)
    eval_iters: int = 20               # batches per evaluation
    eval_batch_size: Optional[int] = None  # default: batch_size
    eval_mode: Literal["fixed", "random"] = "fixed" # fixed: the same validation batches at every evaluation; random: fresh ones from eval_seed
    eval_seed: int = 99991             # seed of the validation batches (the same for every run: evaluation is not part of a seed)
    log_interval: int = 1              # train-loss lines in metrics.jsonl every n updates
    checkpoint_interval: Optional[int] = None  # default: eval_interval; 0 = only at the end
    keep_checkpoints: int = 2          # newest k step checkpoints kept (the best is kept apart)
    seed: int = 1337                   # init, data order and dropout streams derive from it
    init_seed: Optional[int] = None    # override one stream's seed
    data_seed: Optional[int] = None    # override the data-order stream's seed
    dropout_seed: Optional[int] = None # override the dropout stream's seed
    device: Literal["auto", "cpu", "cuda"] = "auto" # auto: CUDA when available
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # auto: bf16 on CUDA
    compile: bool = False              # torch.compile the model
    tf32: bool = True                  # TF32 matmuls on CUDA
    deterministic: bool = False        # framework deterministic algorithms (bit-exact reruns)
    threads: Optional[int] = None      # CPU threads for this run
    flush_denormal: bool = True        # CPU: subnormal floats read and written as 0 (a collapsed model's tiny values otherwise run up to 8x slower); false keeps IEEE subnormals
    parallel: Literal["ddp", "fsdp"] = "ddp"  # under torchrun: replicate (ddp) or shard (fsdp, FSDP2)
    progress: Literal["auto", "bar", "lines", "off"] = "auto" # progress display on stderr (auto: a bar on a terminal, lines otherwise)
    tensorboard: bool = False          # also log to TensorBoard (in the run folder)
    wandb: bool = False                # also log to Weights & Biases
    wandb_project: str = "reslab"      # the W&B project
    nan_at_step: Optional[int] = None  # testing aid: make the loss NaN at this update


@dataclass(frozen=True)
class DiagnosticsConfig:
    """[diagnostics]: see reslab/diagnostics (rows in <run>/diagnostics.jsonl). The spike-score
    fields are used at the end of every run, diagnostics on or off (status.json spike_score_*)."""
    enabled: bool = False              # collect diagnostics (per-layer norms, gradients, learned scalars)
    interval: Optional[int] = None     # measure every n updates (default: train.eval_interval), + step 0 and the end
    batch_size: int = 8                # sequences in the fixed diagnostic batch (from the val split)
    seed: int = 4242                   # the diagnostic batch's own seed
    spike_window: int = 1000           # loss-spike score: rolling window of previous steps
    spike_threshold: float = 7.0       # ... and how many standard deviations above their mean


@dataclass(frozen=True)
class RunConfig(Typed):
    TABLE = ""

    name: str = "run"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)  # [diagnostics] table


SEED_MAX = INT_MAX     # numpy's SeedSequence refuses negative seeds; torch's generators take 64 bits
MAX_THREADS = 1024     # far above any CPU's cores; torch crashes on absurd thread counts (10**6)
MAX_TOKENS = 2**31     # tokens held at once in one batch or the fixed evaluation set: beyond int32 indexing


def _semantic_errors(cfg: RunConfig) -> list[str]:
    t, o = cfg.train, cfg.optim
    errors = []
    for name in ("steps", "batch_size", "grad_accum", "eval_interval", "eval_iters", "log_interval"):
        if getattr(t, name) < 1:
            errors.append(f"train.{name}: must be a positive integer, got {getattr(t, name)}")
    if t.eval_batch_size is not None and t.eval_batch_size < 1:
        errors.append(f"train.eval_batch_size: must be positive, got {t.eval_batch_size}")
    errors += _token_budget_errors(cfg)
    if t.checkpoint_interval is not None and t.checkpoint_interval < 0:
        errors.append(f"train.checkpoint_interval: must be >= 0, got {t.checkpoint_interval}")
    if t.keep_checkpoints < 1:
        errors.append(f"train.keep_checkpoints: must be >= 1, got {t.keep_checkpoints}")
    if t.threads is not None and not 1 <= t.threads <= MAX_THREADS:
        errors.append(f"train.threads: must be in 1..{MAX_THREADS}, got {t.threads}")
    for table, name in (("train", "seed"), ("train", "init_seed"), ("train", "data_seed"),
                        ("train", "dropout_seed"), ("train", "eval_seed"), ("diagnostics", "seed")):
        value = getattr(getattr(cfg, table), name)
        if value is not None and not 0 <= value <= SEED_MAX:
            errors.append(f"{table}.{name}: must be in 0..{SEED_MAX}, got {value}")
    if t.nan_at_step is not None and t.nan_at_step < 0:
        errors.append(f"train.nan_at_step: must be >= 0, got {t.nan_at_step}")
    if t.parallel == "fsdp" and cfg.diagnostics.enabled:
        errors.append("diagnostics.enabled: diagnostics read whole parameters and gradients, which FSDP "
                      "shards; use train.parallel = 'ddp' for a run with diagnostics")
    if t.parallel == "fsdp" and not getattr(DESIGNS.get(cfg.model.design), "fsdp", True):  # unknown: said elsewhere
        errors.append(f"train.parallel: {cfg.model.design} re-normalises whole weight rows after every step, "
                      "which FSDP shards; use train.parallel = 'ddp'")
    if not o.lr > 0:
        errors.append(f"optim.lr: must be positive, got {o.lr}")
    if o.lr > 0 and not 0 <= o.min_lr <= o.lr:
        errors.append(f"optim.min_lr: must be in [0, lr={o.lr}], got {o.min_lr}")
    elif o.min_lr < 0:  # with a bad lr (its own line above) min_lr can still be wrong on its own
        errors.append(f"optim.min_lr: must be >= 0, got {o.min_lr}")
    if o.warmup_steps < 0:
        errors.append(f"optim.warmup_steps: must be >= 0, got {o.warmup_steps}")
    if o.decay_steps is not None and o.decay_steps < 1:
        errors.append(f"optim.decay_steps: must be positive, got {o.decay_steps}")
    if not 0 < o.wsd_decay_fraction <= 1:
        errors.append(f"optim.wsd_decay_fraction: must be in (0, 1], got {o.wsd_decay_fraction}")
    for name in ("beta1", "beta2"):
        if not 0 <= getattr(o, name) < 1:
            errors.append(f"optim.{name}: must be in [0, 1), got {getattr(o, name)}")
    for name in ("weight_decay", "grad_clip"):
        if getattr(o, name) < 0:
            errors.append(f"optim.{name}: must be >= 0, got {getattr(o, name)}")
    if not o.eps > 0:
        errors.append(f"optim.eps: must be positive, got {o.eps}")
    # [diagnostics] (added with reslab/diagnostics)
    g = cfg.diagnostics
    if g.interval is not None and g.interval < 1:
        errors.append(f"diagnostics.interval: must be a positive integer, got {g.interval}")
    if g.batch_size < 1:
        errors.append(f"diagnostics.batch_size: must be a positive integer, got {g.batch_size}")
    if g.spike_window < 2:
        errors.append(f"diagnostics.spike_window: must be >= 2, got {g.spike_window}")
    if not g.spike_threshold > 0:
        errors.append(f"diagnostics.spike_threshold: must be positive, got {g.spike_threshold}")
    return errors


def _token_budget_errors(cfg: RunConfig) -> list[str]:
    """Batches too large to index: a typo like batch_size = 10**12 is refused here, not by a failed
    allocation after the run folder exists. (Memory itself is the device's business.)"""
    t, block = cfg.train, max(cfg.model.block_size, 1)
    eval_batch = t.eval_batch_size or t.batch_size
    eval_size = ("train.eval_batch_size", eval_batch, eval_batch * block, "one evaluation batch") \
        if t.eval_batch_size is not None and eval_batch * block > MAX_TOKENS else \
        ("train.eval_iters", t.eval_iters, t.eval_iters * eval_batch * block, "the evaluation batches")
    sizes = (("train.batch_size", t.batch_size, t.batch_size * block, "one micro-batch"), eval_size,
             ("diagnostics.batch_size", cfg.diagnostics.batch_size, cfg.diagnostics.batch_size * block,
              "the diagnostic batch"))
    errors = [f"{path}: {value:,} makes {what} {tokens:,} tokens of block_size {block}; at most 2^31 fit"
              for path, value, tokens, what in sizes if value >= 1 and tokens > MAX_TOKENS]
    if t.eval_batch_size is None and t.batch_size * block > MAX_TOKENS:
        errors = [e for e in errors if not e.startswith("train.eval_iters")]  # batch_size's line says it
    return errors


def build_run_config(data: dict, where: str = "config") -> RunConfig:
    """A validated RunConfig from a nested dict; raises ConfigError listing every problem."""
    errors: list[str] = []
    try:
        cfg = from_dict(RunConfig, data)
    except ConfigError as e:
        raise ConfigError([f"{where}: {line}" for line in e.errors]) from None
    errors += _semantic_errors(cfg) + check_data(cfg.data)
    try:
        model = resolve_model(cfg.model)
    except ConfigError as e:
        errors += e.errors
        model = cfg.model
    if errors:
        raise ConfigError([f"{where}: {line}" for line in errors])
    return cfg.replace(model=model)


def canonical(config: dict, baseline: dict | None = None, defaults: dict | None = None) -> dict:
    """A run config (as a dict) reduced to the fields that differ from the frozen identity baseline
    (train/identity_defaults.py), nested. Run identities and resume checks use this form:
    - a field that a later reslab adds at its default changes neither (it equals its baseline);
    - a default that a later reslab changes makes a new run (the new value differs from the
      frozen one, so it is kept), which trains in a new folder and leaves the old run as it was.
    A field missing from the baseline is compared with its current default (`defaults`).
    Design options that were [model] fields are compared as those fields (model/spellings.py)."""
    if baseline is None:
        baseline = BASELINE
    defaults = RunConfig().to_dict() if defaults is None else defaults
    if isinstance(config.get("model"), dict):
        config = {**config, "model": _without_added_options(identity_spelling(config["model"]))}
    out = {}
    for key, value in config.items():
        reference = baseline[key] if key in baseline else defaults.get(key, _MISSING)
        if isinstance(value, dict) and isinstance(reference, dict) and reference:
            value = canonical(value, reference, defaults.get(key) if isinstance(defaults.get(key), dict) else {})
            if value:
                out[key] = value
        elif value != reference:
            out[key] = value
    return out


_MISSING = object()


def _without_added_options(model: dict) -> dict:
    """[model] without the options its design gained after its first runs, where they hold the
    default they were added with (identity_defaults.OPTIONS_ADDED)."""
    options, added = model.get("options"), OPTIONS_ADDED.get(model.get("design"))
    if not isinstance(options, dict) or not added:
        return model
    kept = {k: v for k, v in options.items() if not (k in added and v == added[k] and type(v) is type(added[k]))}
    return {**model, "options": kept} if len(kept) < len(options) else model


def config_hash(cfg: RunConfig) -> str:
    """10 hex digits of the canonical config: `reslab train` names its default run folder with it."""
    text = json.dumps(canonical(cfg.to_dict()), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def preset_path(name: str) -> Path:
    path = PRESET_DIR / f"{name}.toml"
    if not path.is_file():
        raise ReslabError(f"unknown preset {name!r}; choose one of {', '.join(preset_names())}")
    return path
