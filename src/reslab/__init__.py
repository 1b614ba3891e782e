"""reslab: a laboratory for residual connections and norms in Transformers.

Notebook API:
    import reslab
    reslab.designs()                          # names of every block design
    print(reslab.formula("resi-dual"))        # its formula and reference
    model = reslab.build_model("sas-p", n_layer=6, n_embd=192, n_head=6, seed=0)
    model = reslab.build_model(reslab.ModelConfig(design="post-ln", prores="linear"))
    reslab.save_model(model, "out/m");  model = reslab.load_model("out/m")
"""

from __future__ import annotations

from .compat import require_torch

require_torch()  # one line, before anything imports torch

from .config import ModelConfig  # noqa: E402
from .errors import ConfigError, ReslabError  # noqa: E402
from .model.gpt import GPT  # noqa: E402
from .model.io import load_model, save_model  # noqa: E402
from .model.prores import SCHEDULE_NAMES as PRORES_SCHEDULES  # noqa: E402
from .model.prores import prores_alpha  # noqa: E402
from .model.registry import DESIGNS, get_design, resolve  # noqa: E402

__version__ = "0.1.0"


def designs() -> list[str]:
    """Every block design name, in the order of `reslab variants`."""
    return list(DESIGNS)


def formula(name: str) -> str:
    """'name: formula  [reference]' for one design."""
    d = get_design(name)
    return f"{d.name}: {d.formula}  [{d.reference}]"


def build_model(config: ModelConfig | str = "pre-ln", seed: int = 0, **overrides) -> GPT:
    """A freshly initialised model from a ModelConfig, or from a design name plus field overrides."""
    if isinstance(config, str):
        config = ModelConfig(design=config, **overrides)
    elif overrides:
        config = config.replace(**overrides)
    return GPT(config, seed=seed)


__all__ = ["ModelConfig", "GPT", "ConfigError", "ReslabError", "build_model", "designs", "formula",
           "resolve", "load_model", "save_model", "prores_alpha", "PRORES_SCHEDULES"]
