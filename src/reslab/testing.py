"""The conformance kit: what reslab's own tests check for every built-in design, for any design.

    from reslab.testing import check_design

    def test_my_design(tmp_path):
        check_design("my-block", tmp_path)          # raises AssertionError naming the first failure

Checks, each on small models (a few ms to build), in this order:
    build        builds at several depths; forward and backward stay finite; every parameter that
                 the loss reaches has a finite gradient
    meta         built on the meta device, materialised and initialised, it equals a direct build
    determinism  the same seed gives the same weights and logits; another seed other weights
    save-load    save_model then load_model gives the same logits, bit for bit
    vmap         two seeds stacked under torch.func.vmap (stacked seeds) need no slow per-seed fallback
    options      every ModelConfig option and every field of the design's own options is either
                 refused with a line naming it, or accepted with a visible effect (other logits,
                 other parameters, or other logits after one update)
    stacked      a short training run of 2 seeds stacked in one process equals the 2 separate runs
    train        the same short run twice gives the same losses (and resumes nothing by accident)
`checks=` picks a subset; the stacked and train checks need a folder for their run files.
"""

from __future__ import annotations

import dataclasses
import json
import random
import typing
import warnings
from pathlib import Path

from .model.config import ModelConfig
from .errors import ConfigError

ALL_CHECKS = ("build", "meta", "determinism", "save-load", "vmap", "options", "stacked", "train")
CPU_ONLY_FALLBACK = {"_scaled_dot_product_flash_attention_for_cpu"}  # CUDA's attention kernels have rules

# Option probes: (label, base overrides, probe overrides). A probe whose base is refused does not apply.
OPTION_PROBES = [
    ("attn_res", {}, {"attn_res": False}),
    ("ffn_res", {}, {"ffn_res": False}),
    ("branch_gain", {}, {"branch_gain": 2.0}),
    ("gain_mode", {"branch_gain": 2.0}, {"gain_mode": "init"}),
    ("prores", {"prores_warmup": 5}, {"prores": "linear"}),
    ("embed_norm", {}, {"embed_norm": True}),
    ("shaped_attention", {}, {"shaped_attention": True}),
    ("vp_identity", {}, {"vp_identity": True}),
    ("skip_scale", {}, {"skip_scale": "scalar"}),
    ("branch_scale", {}, {"branch_scale": "scalar"}),
    ("branch_scale_init", {"branch_scale": "scalar"}, {"branch_scale_init": 0.5}),
    ("dyt_alpha", {"norm": "dyt"}, {"dyt_alpha": 1.0}),
    ("embed_scale", {}, {"embed_scale": "learned"}),
    ("value_residual", {}, {"value_residual": True}),
    ("value_residual_init", {"value_residual": True}, {"value_residual_init": 0.9}),
    ("residual_attention", {}, {"residual_attention": True}),
    ("norm=rmsnorm", {}, {"norm": "rmsnorm"}),
    ("norm=dyt", {}, {"norm": "dyt"}),
    ("norm=none", {}, {"norm": "none"}),
    ("mlp", {}, {"mlp": "relu"}),
    ("init", {}, {"init": "xavier"}),
    ("pos", {}, {"pos": "rope"}),
    ("bias", {}, {"bias": False}),
    ("layer_designs", {}, {"layer_designs": {"1": "post-ln"}}),   # "pre-ln" for post-ln itself
    ("qk_norm", {}, {"qk_norm": True}),
    ("residual_update", {}, {"residual_update": "orthogonal"}),
    ("xsa=full", {}, {"xsa": "full"}),
    ("xsa=gated", {}, {"xsa": "gated"}),
    ("stochastic_depth", {}, {"stochastic_depth": 0.5}),
    ("attn_gate=head", {}, {"attn_gate": "head"}),
    ("attn_gate=elementwise", {}, {"attn_gate": "elementwise"}),
    ("stochastic_depth_rule", {"stochastic_depth": 0.5}, {"stochastic_depth_rule": "uniform"}),
]
# How a design refuses each probe it does not take, named in the kit's failure so that its author can
# act: the register_design flag (and value) whose refusal covers it, or, where no flag does, the
# design's `check` returning a line that names the field. tests/test_plugins.py holds each flag to it.
REFUSED_BY_FLAG = {
    "attn_res": ("partial_residual", False), "ffn_res": ("partial_residual", False),
    "prores": ("prores", False),
    "shaped_attention": ("attention_options", False), "vp_identity": ("attention_options", False),
    "skip_scale": ("learned_scales", False), "branch_scale": ("learned_scales", False),
    "residual_update": ("learned_scales", False), "stochastic_depth": ("learned_scales", False),
    "value_residual": ("attention_carry", False), "residual_attention": ("attention_carry", False),
    "qk_norm": ("qk_norm", False), "xsa=full": ("qk_norm", False), "xsa=gated": ("qk_norm", False),
    "attn_gate=head": ("qk_norm", False), "attn_gate=elementwise": ("qk_norm", False),
    "norm=rmsnorm": ("norms", ("layernorm",)), "norm=dyt": ("norms", ("layernorm",)),
    "norm=none": ("norms", ("layernorm",)),
    "layer_designs": ("layer_base", False),
}


def refusal_advice(label: str) -> str:
    """How to refuse probe `label` (an OPTION_PROBES label) in a design that does not take it."""
    field_name = label.split("=")[0]
    if label in REFUSED_BY_FLAG:
        flag, value = REFUSED_BY_FLAG[label]
        return f"refuse it with register_design(..., {flag}={value!r})"
    return f"refuse it in the design's check (return a line naming model.{field_name})"


def _range_only(cls: type, name: str) -> bool:
    """An options field whose documented effect is on the numeric range only (dataclass field
    metadata {"range_only": True}, as resi-dual's scale: N(s z) = N(z), with N's eps scaled by s^2):
    accepted, it must leave a float32 model's logits unchanged."""
    return bool(next(f for f in dataclasses.fields(cls) if f.name == name).metadata.get("range_only"))


class DesignCheckError(AssertionError):
    """A check of the kit failed; the message names the design, the check and what differed."""


def _fail(name: str, check: str, what: str) -> None:
    raise DesignCheckError(f"{name}: {check}: {what}")


def small_config(name: str, n_layer: int = 2, **overrides) -> ModelConfig:
    base = dict(design=name, vocab_size=65, n_layer=n_layer, n_head=4, n_embd=32, block_size=16, dropout=0.0)
    base.update(overrides)
    return ModelConfig(**base)


def _tokens(B: int = 2, T: int = 16, vocab: int = 65, seed: int = 0):
    import torch

    return torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(seed))


def check_design(name: str, tmp_dir: str | Path | None = None, *, checks=ALL_CHECKS,
                 depths=(1, 2, 4), options: dict | None = None) -> list[str]:
    """Run the kit on design `name` (its [model.options] = `options`); returns the checks passed.
    Raises DesignCheckError (an AssertionError) at the first failure."""
    import torch

    from .model.registry import get_design

    unknown = set(checks) - set(ALL_CHECKS)
    if unknown:
        raise ValueError(f"unknown checks {sorted(unknown)}; choose from {', '.join(ALL_CHECKS)}")
    if ("stacked" in checks or "train" in checks) and tmp_dir is None:
        raise ValueError("the stacked and train checks write run folders: give tmp_dir")
    get_design(name)  # an unknown name is the registry's one line
    opts = dict(options or {})
    passed = []
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads only add contention
    try:
        for check in ALL_CHECKS:
            if check in checks:
                _CHECKS[check](name, opts, depths=depths, tmp_dir=Path(tmp_dir) if tmp_dir else None)
                passed.append(check)
    finally:
        torch.set_num_threads(before)
    return passed


# ---- the checks ------------------------------------------------------------------------------------
def _build(name, opts, *, depths, **_):
    import torch

    from .model.gpt import GPT

    for L in depths:
        model = GPT(small_config(name, L, options=opts), seed=0)
        idx = _tokens()
        logits, loss = model(idx, idx)
        if tuple(logits.shape) != (2, 16, 65):
            _fail(name, "build", f"at {L} layers the logits have shape {tuple(logits.shape)}, not (2, 16, 65)")
        if not torch.isfinite(loss):
            _fail(name, "build", f"at {L} layers the loss is {loss.item()}")
        loss.backward()
        for pname, p in model.named_parameters():
            if p.grad is not None and not torch.isfinite(p.grad).all():
                _fail(name, "build", f"at {L} layers the gradient of {pname} is not finite")
        reached = [p for p in model.parameters() if p.grad is not None]
        if not reached:
            _fail(name, "build", f"at {L} layers no parameter receives a gradient")


def _meta(name, opts, **_):
    import torch

    from .model.gpt import GPT

    cfg = small_config(name, 2, options=opts)
    direct = GPT(cfg, seed=5).eval()
    with torch.device("meta"):
        lazy = GPT(cfg, seed=5)
    lazy.to_empty(device="cpu")
    lazy.init_weights(seed=5)
    lazy.eval()
    idx = _tokens()
    if not torch.equal(direct(idx), lazy(idx)):
        _fail(name, "meta", "a meta-device build, materialised and initialised from the same seed, gives "
                            "other logits: some parameter or buffer is not set by init_weights / reset_parameters")


def _params(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _determinism(name, opts, **_):
    import torch

    from .model.gpt import GPT

    cfg = small_config(name, 2, options=opts)
    a, b, c = (GPT(cfg, seed=s).eval() for s in (7, 7, 8))
    pa, pb, pc = _params(a), _params(b), _params(c)
    differing = [k for k in pa if not torch.equal(pa[k], pb[k])]
    if differing:
        _fail(name, "determinism", f"the same seed gives other values of {differing[:3]}")
    if not any(not torch.equal(pa[k], pc[k]) for k in pa if pa[k].numel() > 1):
        _fail(name, "determinism", "seeds 7 and 8 give the same weights: the init ignores its seed")
    idx = _tokens()
    if not torch.equal(a(idx), b(idx)):
        _fail(name, "determinism", "the same weights give other logits on the same input")


def _save_load(name, opts, **_):
    import tempfile

    import torch

    from .model.gpt import GPT
    from .model.io import load_model, save_model

    model = GPT(small_config(name, 2, options=opts, prores="none"), seed=3).eval()
    with tempfile.TemporaryDirectory() as folder:
        save_model(model, folder)
        loaded = load_model(folder).eval()
    idx = _tokens()
    if not torch.equal(model(idx), loaded(idx)):
        _fail(name, "save-load", "the loaded model gives other logits than the saved one")


def slow_vmap_ops(cfg: ModelConfig) -> tuple[set, dict]:
    """Two seeds of `cfg` stacked and run forward and backward under vmap (reslab/train/stacked.py);
    returns the ops that fell back to vmap's slow per-seed loop, and the stacked parameters."""
    import torch

    from .model.gpt import GPT
    from .train.stacked import StackedLoss, member_view, stack_parameters

    models = [GPT(cfg, seed=s) for s in range(2)]
    stacked = stack_parameters(models, torch.device("cpu"))
    views = [member_view(m, stacked, k, torch.device("cpu")) for k, m in enumerate(models)]
    x = torch.randint(0, cfg.vocab_size, (2, 3, cfg.block_size), generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        StackedLoss(views[0], compile=False).train_fn(stacked, x, x).sum().backward()
    slow = {str(w.message).split("aten::")[-1].split(".")[0] for w in caught if "batching rule" in str(w.message)}
    return slow, stacked


def _vmap(name, opts, **_):
    import torch

    slow, stacked = slow_vmap_ops(small_config(name, 2, options=opts, dropout=0.1))
    if slow - CPU_ONLY_FALLBACK:
        _fail(name, "vmap", f"ops without a vmap batching rule loop over the seeds: {sorted(slow - CPU_ONLY_FALLBACK)}")
    if not all(p.grad is not None and torch.isfinite(p.grad).all() for p in stacked.values()):
        _fail(name, "vmap", "a stacked parameter has no finite gradient")


def _refused(cfg: ModelConfig) -> tuple[bool, list[str]]:
    """(refused by resolve, its error lines)."""
    from .model.registry import resolve

    try:
        resolve(cfg)
    except ConfigError as e:
        return True, list(e.errors)
    return False, []


def _effect(base: ModelConfig, probe: ModelConfig) -> bool:
    """Does the probe change the model: its parameters, its logits at init, or after one update?"""
    import torch

    from .model.gpt import GPT

    a, b = GPT(base, seed=11), GPT(probe, seed=11)
    sa, sb = a.state_dict(), b.state_dict()
    if {k: tuple(v.shape) for k, v in sa.items()} != {k: tuple(v.shape) for k, v in sb.items()}:
        return True
    idx = _tokens(seed=1)
    if not torch.equal(a(idx), b(idx)):
        return True
    # Three sign-gradient steps on the same batch (Adam's first steps are about lr * sign(grad)):
    # one is not enough where a branch starts at zero (ReZero's g = 0 passes no gradient to the
    # branch's weights in the first step), and plain SGD moves such a scalar by only ~1e-6.
    for step in range(1, 4):
        for model in (a, b):
            model.zero_grad()
            model(idx, idx)[1].backward()
            with torch.no_grad():
                for p in model.parameters():
                    if p.grad is not None:
                        p -= 0.01 * p.grad.sign()
            model.set_step(step)
            model.after_optimizer_step()
        if not torch.equal(a(idx), b(idx)):
            return True
    return False


def _same_function(name: str, label: str, base: ModelConfig, probe: ModelConfig) -> None:
    import torch

    from .model.gpt import GPT

    idx = _tokens(seed=1)
    a, b = GPT(base, seed=11).eval(), GPT(probe, seed=11).eval()
    if not torch.allclose(a(idx), b(idx), rtol=1e-5, atol=1e-5):
        _fail(name, "options", f"{label} is documented to change only the numeric range, but it changes the logits")


DEEP_PROBE_LAYERS = 4  # an own option with no effect in a 2-layer model is tried again at this depth


def _own_option_probes(name: str, opts: dict) -> list[tuple[str, dict]]:
    """A changed value for each field of the design's options dataclass."""
    from .model.registry import get_design, resolve

    cls = get_design(name).options
    if cls is None:
        return []
    hints = typing.get_type_hints(cls)
    own = {f.name for f in dataclasses.fields(cls)}
    # resolved: a default that depends on the config (mix-ln's post_layers) is a number to change
    current = {k: v for k, v in resolve(small_config(name, 2, options=opts)).options.items() if k in own}
    probes = []
    for f in dataclasses.fields(cls):
        value, tp = current[f.name], hints[f.name]
        if typing.get_origin(tp) is typing.Literal:
            other = [c for c in typing.get_args(tp) if c != value]
            new = other[0] if other else None
        elif isinstance(value, bool):
            new = not value
        elif isinstance(value, int):
            new = value + 1
        elif isinstance(value, float):
            new = value * 0.5 if value else 0.5
        else:
            new = None  # strings, lists, tables: no generic change to try
        if new is not None:
            probes.append((f.name, {**opts, f.name: new}))
    return probes


def _options(name, opts, **_):
    from .model.registry import get_design, resolve

    for label, base_over, probe_over in OPTION_PROBES:
        field_name = label.split("=")[0]
        base = small_config(name, 2, options=opts, **base_over)
        if _refused(base)[0]:
            continue  # the probe's prerequisite is itself refused for this design: nothing to test
        if field_name == "layer_designs" and name == "post-ln":
            probe_over = {"layer_designs": {"1": "pre-ln"}}
        probe = small_config(name, 2, options=opts, **{**base_over, **probe_over})
        refused, lines = _refused(probe)
        if refused:
            if not any(f"model.{field_name}" in line for line in lines):
                _fail(name, "options", f"{label} is refused, but no line names model.{field_name}: {lines}")
            continue
        if resolve(base) == resolve(probe):
            continue  # the probe value is the design's default: nothing changes by construction
        if not _effect(base, probe):
            _fail(name, "options", f"{label} ({probe_over}) is accepted but changes nothing (parameters, "
                                   f"logits, and logits after an update are the same); {refusal_advice(label)}, "
                                   f"or make it act")
    cls = get_design(name).options
    for field_name, new_opts in _own_option_probes(name, opts):
        base, probe = small_config(name, 2, options=opts), small_config(name, 2, options=new_opts)
        refused, lines = _refused(probe)
        if refused:
            if not any("model.options" in line for line in lines):
                _fail(name, "options", f"options.{field_name} is refused without naming it: {lines}")
            continue
        if _range_only(cls, field_name):
            _same_function(name, f"options.{field_name}", base, probe)
            continue
        # an option that picks layers (depth-attention's stride) may act only from the third layer on
        if not _effect(base, probe) and not _effect(small_config(name, DEEP_PROBE_LAYERS, options=opts),
                                                    small_config(name, DEEP_PROBE_LAYERS, options=new_opts)):
            _fail(name, "options", f"options.{field_name} = {new_opts[field_name]!r} changes nothing at 2 or "
                                   f"{DEEP_PROBE_LAYERS} layers; make it act, or drop it from the design's options "
                                   "dataclass")


def _corpus(folder: Path) -> Path:
    rng = random.Random(0)
    words = "the king queen lord night day love sword crown heart good noble friend war peace thou".split()
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 10))) + ".\n" for _ in range(1500)]
    path = folder / "corpus.txt"
    path.write_text("".join(lines))
    return path


def _run_config(name, opts, folder: Path, seed: int, steps: int = 8):
    from .train.config import build_run_config

    corpus = folder / "corpus.txt"
    if not corpus.exists():
        _corpus(folder)
    return build_run_config({
        "name": f"check-{name}",
        "model": {"design": name, "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "dropout": 0.0,
                  "options": opts},
        "data": {"corpus": "text", "path": str(corpus), "tokenizer": "char", "cache_dir": str(folder / "cache")},
        "optim": {"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 2},
        "train": {"steps": steps, "batch_size": 4, "eval_interval": 4, "eval_iters": 2, "threads": 1,
                  "log_interval": 1, "progress": "off", "device": "cpu", "seed": seed},
    })


def _losses(run: Path) -> dict:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {(r["step"], k): r[k] for r in rows for k in ("train_loss", "val_loss") if k in r}


def _stacked(name, opts, *, tmp_dir: Path, **_):
    from .train.loop import train, train_stacked

    folder = tmp_dir / f"kit-stacked-{name}"
    folder.mkdir(parents=True, exist_ok=True)
    cfgs = [_run_config(name, opts, folder, s) for s in (1, 2)]
    quiet = dict(log=lambda *_: None)
    with warnings.catch_warnings():  # CPU flash attention's per-seed loop (the vmap check reports it)
        warnings.filterwarnings("ignore", message=".*batching rule.*")
        train_stacked(cfgs, [folder / f"stacked{s}" for s in (1, 2)], **quiet)
    for cfg, s in zip(cfgs, (1, 2)):
        train(cfg, folder / f"separate{s}", **quiet)
        a, b = _losses(folder / f"stacked{s}"), _losses(folder / f"separate{s}")
        if sorted(a) != sorted(b):
            _fail(name, "stacked", f"seed {s}: the stacked run logged other steps than the separate run")
        for key in a:
            if abs(a[key] - b[key]) > 1e-4 * max(1.0, abs(b[key])):
                _fail(name, "stacked", f"seed {s}: {key[1]} at step {key[0]} is {a[key]:.6f} stacked and "
                                       f"{b[key]:.6f} separately")


def _train(name, opts, *, tmp_dir: Path, **_):
    from .train.loop import train

    folder = tmp_dir / f"kit-train-{name}"
    folder.mkdir(parents=True, exist_ok=True)
    cfg = _run_config(name, opts, folder, 5)
    quiet = dict(log=lambda *_: None)
    results = [train(cfg, folder / f"run{i}", **quiet) for i in (1, 2)]
    if any(r.status != "completed" for r in results):
        _fail(name, "train", f"a short run ended {[r.status for r in results]}")
    if _losses(folder / "run1") != _losses(folder / "run2"):
        _fail(name, "train", "the same config and seed gave other losses in a second run")


_CHECKS = {"build": _build, "meta": _meta, "determinism": _determinism, "save-load": _save_load,
           "vmap": _vmap, "options": _options, "stacked": _stacked, "train": _train}
