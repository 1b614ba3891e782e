"""The `reslab` command: parses arguments, calls one function per verb, prints.

User errors (ReslabError, ConfigError) print one line each on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path

from .errors import ConfigError, ReslabError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + message
        raise ReslabError(f"{self.prog}: {message} (see {self.prog} --help)")


# ---- config loading shared by verbs ----------------------------------------------------------------
def parse_set(items: list[str]) -> dict:
    """--set a.b=value pairs as a nested dict; values are TOML literals, else plain strings."""
    out: dict = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ReslabError(f"--set {item!r}: expected key=value, e.g. --set model.n_layer=12")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ReslabError(f"--set {item!r}: {part} is a value, not a table")
        node[parts[-1]] = value
    return out


def read_toml(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ReslabError(f"{path}: no such file")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ReslabError(f"{path}: not valid TOML ({e})") from None


def merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_model_config(config_path: str | None, sets: list[str]):
    """The resolved ModelConfig from a TOML file's [model] table plus --set model.key=value."""
    from .config import ModelConfig
    from .model.registry import resolve

    data = read_toml(config_path) if config_path else {}
    data = merge(data, parse_set(sets))
    unknown = sorted(set(data) - {"model"})
    if unknown:
        raise ConfigError([f"{k}: unknown table; this command reads only [model]" for k in unknown])
    return resolve(ModelConfig.from_dict(data.get("model", {}), prefix="model"))


# ---- verbs -----------------------------------------------------------------------------------------
def cmd_variants(args) -> None:
    from .model.registry import DESIGNS

    rows = [{"name": d.name, "formula": d.formula, "reference": d.reference,
             "prores": d.prores, "partial_residual": d.partial_residual,
             "norms": list(d.norms)} for d in DESIGNS.values()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        print(f"{r['name']:<{width}}  {r['formula']}")
        print(f"{'':<{width}}  [{r['reference']}]")


def cmd_model(args) -> None:
    from .model.gpt import GPT

    cfg = load_model_config(args.config, args.set)
    counts = GPT(cfg).param_counts()
    if args.json:
        print(json.dumps({"config": cfg.to_dict(), "params": counts}, indent=2))
        return
    for k, v in cfg.to_dict().items():
        print(f"{k:<20} {v}")
    print(f"{'params':<20} total {counts['total']:,}, non-embedding {counts['non_embedding']:,}")


def cmd_export_hf(args) -> None:
    from .hf import export_hf

    out = export_hf(args.model, args.out)
    print(out)


def cmd_import_hf(args) -> None:
    from .hf import import_hf
    from .model.io import save_model

    print(save_model(import_hf(args.hf_folder), args.out))


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="reslab", description="A laboratory for residual connections in Transformers.")
    sub = p.add_subparsers(dest="verb", required=True, parser_class=_Parser)

    v = sub.add_parser("variants", help="list every block design with its formula and reference")
    v.add_argument("--json", action="store_true", help="machine-readable output")
    v.set_defaults(func=cmd_variants)

    m = sub.add_parser("model", help="validate a model config and show it resolved, with parameter counts")
    m.add_argument("--config", help="TOML file with a [model] table")
    m.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override, e.g. --set model.design=post-ln (repeatable)")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=cmd_model)

    e = sub.add_parser("export", help="convert a reslab model to another library's format")
    esub = e.add_subparsers(dest="target", required=True, parser_class=_Parser)
    eh = esub.add_parser("hf", help="write a pre-ln model folder as a Hugging Face GPT-2 folder")
    eh.add_argument("model", help="reslab model folder (model.json + model.safetensors)")
    eh.add_argument("out", help="output folder for config.json + model.safetensors")
    eh.set_defaults(func=cmd_export_hf)

    i = sub.add_parser("import", help="convert another library's model into a reslab model folder")
    isub = i.add_subparsers(dest="source", required=True, parser_class=_Parser)
    ih = isub.add_parser("hf", help="read a local Hugging Face GPT-2 folder as a pre-ln model")
    ih.add_argument("hf_folder", help="folder with config.json and model.safetensors")
    ih.add_argument("out", help="output reslab model folder")
    ih.set_defaults(func=cmd_import_hf)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        args.func(args)
    except ReslabError as e:
        for line in e.lines():
            print(f"reslab: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("reslab: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
