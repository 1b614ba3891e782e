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
from .typed import deep_merge


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
    from .fileio import read_toml as read

    return read(path)


def load_model_config(config_path: str | None, sets: list[str]):
    """The resolved ModelConfig from a TOML file's [model] table plus --set model.key=value."""
    from .config import ModelConfig
    from .model.registry import resolve

    data = read_toml(config_path) if config_path else {}
    data = deep_merge(data, parse_set(sets))
    unknown = sorted(set(data) - {"model"})
    if unknown:
        raise ConfigError([f"{k}: unknown table; this command reads only [model]" for k in unknown])
    return resolve(ModelConfig.from_dict(data.get("model", {}), prefix="model"))


def load_run_config(config_path: str | None, preset: str | None, sets: list[str]):
    """Preset, then config file, then --set overrides, validated as one RunConfig."""
    from .train.config import build_run_config, preset_path

    data: dict = {}
    where = "config"
    if preset:
        data = read_toml(str(preset_path(preset)))
        where = f"preset {preset}"
    if config_path:
        data = deep_merge(data, read_toml(config_path))
        where = config_path
    if sets:
        where += " with --set"
    return build_run_config(deep_merge(data, parse_set(sets)), where=where)


def config_hash(cfg) -> str:
    import hashlib

    from .train.config import canonical

    text = json.dumps(canonical(cfg.to_dict()), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


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


def cmd_train(args) -> int:
    from .train.loop import train

    cfg = load_run_config(args.config, args.preset, args.set)
    out = Path(args.out) if args.out else Path("runs") / f"{cfg.name}-{config_hash(cfg)}"
    result = train(cfg, out, log=lambda msg: print(msg, file=sys.stderr))
    best = f"{result.best_val_loss:.4f}" if result.best_val_loss is not None else "n/a"
    print(f"{result.status} at step {result.step}; best val loss {best}", file=sys.stderr)
    print(result.path)
    return 0 if result.status == "completed" else 3  # 3: the run diverged


def cmd_sample(args) -> None:
    from .train.sample import sample

    print(sample(args.run, prompt=args.prompt, tokens=args.tokens, temperature=args.temperature,
                 top_k=args.top_k, seed=args.seed, which=args.checkpoint))


def cmd_data_prepare(args) -> None:
    from .data import prepare_dataset

    cfg = load_run_config(args.config, args.preset, args.set)
    prepared = prepare_dataset(cfg.data, out_dir=args.out, progress=True,
                               log=lambda msg: print(msg, file=sys.stderr))
    print(json.dumps(prepared.meta, indent=2))


def cmd_presets(args) -> None:
    from .train.config import preset_names, preset_path

    for name in preset_names():
        first = preset_path(name).read_text().splitlines()[0].lstrip("# ")
        print(f"{name:<22} {first}")


def cmd_export_hf(args) -> None:
    from .hf import export_hf
    from .train.checkpoint import model_folder_of

    model_dir, _ = model_folder_of(Path(args.model), "best")  # a run folder: its best checkpoint
    out = export_hf(model_dir, args.out)
    print(out)


def cmd_import_hf(args) -> None:
    from .hf import import_hf
    from .model.io import save_model

    out = Path(args.out)
    if out.exists() and (not out.is_dir() or set(p.name for p in out.iterdir()) - {"model.json", "model.safetensors"}):
        raise ReslabError(f"{out}: exists and is not a reslab model folder; choose an empty or new folder")
    print(save_model(import_hf(args.hf_folder), out))


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

    def run_config_args(parser):
        parser.add_argument("config", nargs="?", help="TOML file with [model] [data] [optim] [train] tables")
        parser.add_argument("--preset", help="start from a built-in preset (see `reslab presets`)")
        parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                            help="override, e.g. --set train.steps=500 (repeatable)")

    t = sub.add_parser("train", help="train one run; resumes its run folder if it was interrupted")
    run_config_args(t)
    t.add_argument("--out", help="run folder (default: runs/<name>-<config hash>)")
    t.set_defaults(func=cmd_train)

    sp = sub.add_parser("sample", help="generate text from a run folder or model folder")
    sp.add_argument("run", help="run folder (uses its best checkpoint) or model folder")
    sp.add_argument("--prompt", default="\n")
    sp.add_argument("--tokens", type=int, default=300)
    sp.add_argument("--temperature", type=float, default=0.8)
    sp.add_argument("--top-k", type=int, default=200)
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--checkpoint", choices=["best", "last"], default="best")
    sp.set_defaults(func=cmd_sample)

    dp = sub.add_parser("data", help="prepare token shards")
    dsub = dp.add_subparsers(dest="data_verb", required=True, parser_class=_Parser)
    prep = dsub.add_parser("prepare", help="tokenize a corpus into train/val shards (cached)")
    run_config_args(prep)
    prep.add_argument("--out", help="output folder (default: the data cache)")
    prep.set_defaults(func=cmd_data_prepare)

    from .probe.cli import add_probe_parser

    add_probe_parser(sub)

    from .sweep.cli import add_parsers as add_sweep_parsers

    add_sweep_parsers(sub, _Parser)
    from .report.cli import add_parser as add_report_parser

    add_report_parser(sub)
    from .studies.cli import add_parsers as add_study_parsers

    add_study_parsers(sub, _Parser)

    pr = sub.add_parser("presets", help="list the built-in run presets")
    pr.set_defaults(func=cmd_presets)

    e = sub.add_parser("export", help="convert a reslab model to another library's format")
    esub = e.add_subparsers(dest="target", required=True, parser_class=_Parser)
    eh = esub.add_parser("hf", help="write a pre-ln model folder as a Hugging Face GPT-2 folder")
    eh.add_argument("model", help="reslab model folder (model.json + model.safetensors), or a run folder "
                                  "(its best checkpoint)")
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
        status = args.func(args)
    except ReslabError as e:
        for line in e.lines():
            print(f"reslab: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("reslab: interrupted", file=sys.stderr)
        return 130
    return status or 0


if __name__ == "__main__":
    sys.exit(main())
