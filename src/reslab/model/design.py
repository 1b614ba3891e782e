"""What the registry knows about one block design: its formula, its block, and what it allows.

A Design is plain data and imports no torch: `reslab variants` lists the zoo without building a
model. Its block is a class (or any callable (resolved config, layer counted from 1) -> block), or
"module:attribute" text that is imported the first time a model is built.

The capability flags are what the registry's refusals are built from: a combination is refused
because a flag says so, and the message lists the designs whose flags allow it.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

NORMED = ("layernorm", "rmsnorm", "dyt")
ALL_NORMS = ("layernorm", "rmsnorm", "dyt", "none", "derf", "seednorm", "rmsnorm-nogain")
STREAM_KINDS = ("single", "dual", "hyper", "ngpt", "depth", "speedrun", "altup")


@dataclass(frozen=True)
class Design:
    name: str
    formula: str
    reference: str
    block: Any                                    # class / callable (cfg, layer) -> block, or "module:attr"
    stream: str = "single"                        # how the blocks' stream is entered and left (STREAM_KINDS)
    final_norm: bool = True                       # a norm between the last block and the head
    norms: tuple = NORMED                         # allowed values of `norm`
    defaults: dict = field(default_factory=dict)  # defaults for fields left as None (a value, or cfg -> value)
    partial_residual: bool = True                 # attn_res / ffn_res may be switched off
    prores: bool = False                          # composes with a ProRes schedule
    attention_options: bool = False               # shaped_attention / vp_identity may be set
    per_layer: bool = False                       # may be chosen for single layers (layer_designs)
    layer_base: bool = True                       # may be the base design of layer_designs
    learned_scales: bool = False                  # skip_scale / branch_scale apply at its residual points
    attention_carry: bool = False                 # value_residual / residual_attention apply
    fsdp: bool = True                             # may be trained sharded (train.parallel = "fsdp")
    qk_norm: bool = True                          # its attention is reslab's, so qk_norm and xsa reach it
    check: Callable | None = None                 # (resolved cfg, given cfg) -> error lines of its own rules
    options: type | None = None                   # dataclass of the design's own hyperparameters ([model.options])
    plugin: str | None = None                     # the module that registered it (None: built into reslab)
    plugin_version: str | None = None

    def block_factory(self) -> Callable:
        """The block class (or factory), importing "module:attr" text on first use."""
        if not isinstance(self.block, str):
            return self.block
        module, _, attr = self.block.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            from ..errors import ReslabError

            raise ReslabError(f"design {self.name}: its block {self.block!r} cannot be imported ({e})") from None

    def summary(self) -> dict:
        """The design's own data; `reslab variants --json` adds what it takes (model/catalogue.py)."""
        return {"name": self.name, "formula": self.formula, "reference": self.reference,
                "stream": self.stream, "norms": list(self.norms), "prores": self.prores,
                "partial_residual": self.partial_residual, "per_layer": self.per_layer,
                "learned_scales": self.learned_scales, "attention_carry": self.attention_carry,
                "options": {f.name: _default_text(f) for f in dataclasses.fields(self.options)}
                if self.options else {},
                "plugin": self.plugin, "plugin_version": self.plugin_version}


def _default_text(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None  # required
