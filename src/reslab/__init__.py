"""reslab: a laboratory for residual connections and norms in Transformers.

Notebook API:
    import reslab
    reslab.designs()                          # names of every block design
    print(reslab.formula("resi-dual"))        # its formula and reference
    model = reslab.build_model("sas-p", n_layer=6, n_embd=192, n_head=6, seed=0)
    model = reslab.build_model(reslab.ModelConfig(design="post-ln", prores="linear"))
    reslab.save_model(model, "out/m");  model = reslab.load_model("out/m")
    reslab.register_design("my-block", MyBlock, formula="...", reference="...")   # a design of your own

Importing reslab imports no torch: the names that need it (GPT, build_model, load_model, save_model,
prores_alpha) load it when first used, so `reslab --help` and the listings start at once.
"""

from __future__ import annotations

from ._version import __version__
from .config import ModelConfig
from .errors import ConfigError, ReslabError
from .model.registry import DESIGNS, design_options, get_design, register_design, resolve
from .plugins import load_plugins

# name -> (module, attribute) of the names that import torch, loaded on first use (PEP 562)
_LAZY = {"GPT": (".model.gpt", "GPT"), "load_model": (".model.io", "load_model"),
         "save_model": (".model.io", "save_model"), "prores_alpha": (".model.prores", "prores_alpha"),
         "PRORES_SCHEDULES": (".model.prores", "SCHEDULE_NAMES"),
         "load_runs": (".results", "load_runs"), "load_curves": (".results", "load_curves")}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        if module in (".model.gpt", ".model.io"):
            from .compat import require_torch

            require_torch()  # one line when torch is missing or too old
        value = getattr(importlib.import_module(module, __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'reslab' has no attribute {name!r}")


def designs() -> list[str]:
    """Every block design name, in the order of `reslab variants` (plugins' designs included)."""
    load_plugins()
    return list(DESIGNS)


def formula(name: str) -> str:
    """'name: formula  [reference]' for one design."""
    d = get_design(name)
    return f"{d.name}: {d.formula}  [{d.reference}]"


def build_model(config: ModelConfig | str = "pre-ln", seed: int = 0, **overrides):
    """A freshly initialised model from a ModelConfig, or from a design name plus field overrides."""
    from .compat import require_torch

    require_torch()
    from .model.gpt import GPT

    if isinstance(config, str):
        config = ModelConfig(design=config, **overrides)
    elif overrides:
        config = config.replace(**overrides)
    return GPT(config, seed=seed)


__all__ = ["ModelConfig", "GPT", "ConfigError", "ReslabError", "build_model", "designs", "formula",
           "register_design", "design_options", "get_design", "load_plugins", "resolve", "load_model",
           "save_model", "prores_alpha", "PRORES_SCHEDULES", "load_runs", "load_curves", "__version__"]
