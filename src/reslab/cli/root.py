"""The `reslab` command: parses arguments, calls one function per verb, prints.

User errors (ReslabError, ConfigError) print one line each on stderr and exit with status 2; a path
the operating system refuses (OSError) is one line naming it. Anything else is a bug in reslab: one
line `reslab: internal error: ...` and exit status 1 (RESLAB_DEBUG=1 shows the traceback instead).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tomllib
from pathlib import Path

from ..errors import ConfigError, ReslabError
from ..typed import INT_MAX, deep_merge, short_int


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + message
        raise ReslabError(f"{self.prog}: {message} (see {self.prog} --help)")


# ---- flag types: a bad value is refused while parsing, before any verb runs ------------------------
# They raise ReslabError (not argparse's ArgumentTypeError), so that the one line names the flag
# whichever parser they are added to (reslab's, or a plain argparse parser in a test).
def int_in(flag: str, lo: int, hi: int):
    """An argparse type: an integer in lo..hi."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ReslabError(f"{flag}: expected an integer, got {text!r}") from None
        if value < lo:
            raise ReslabError(f"{flag}: must be at least {lo}, got {short_int(value)}")
        if value > hi:
            raise ReslabError(f"{flag}: must be at most {hi:,}, got {short_int(value)}")
        return value
    return parse


def positive_finite(flag: str):
    """An argparse type: a number > 0 that is not inf or nan."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ReslabError(f"{flag}: expected a number, got {text!r}") from None
        if not (math.isfinite(value) and value > 0):
            raise ReslabError(f"{flag}: must be a positive finite number, got {text!r}")
        return value
    return parse


SEED_MAX = INT_MAX  # seeds are non-negative 64-bit integers everywhere (numpy refuses negative ones)
MAX_SAMPLE_TOKENS = 1_000_000


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
    from ..fileio import read_toml as read

    return read(path)


def load_model_config(config_path: str | None, sets: list[str]):
    """The resolved ModelConfig from a TOML file's [model] table plus --set model.key=value."""
    from ..config import ModelConfig
    from ..model.registry import resolve

    data = read_toml(config_path) if config_path is not None else {}
    data = deep_merge(data, parse_set(sets))
    unknown = sorted(set(data) - {"model"})
    if unknown:  # one line: a run config given to `reslab model` is one mistake, not one per table
        hint = "; a run config? `reslab train` reads those" if set(unknown) & {"data", "optim", "train"} else ""
        raise ConfigError(f"{', '.join(unknown)}: unknown {'tables' if len(unknown) > 1 else 'table'}; "
                          f"this command reads only [model]{hint}")
    return resolve(ModelConfig.from_dict(data.get("model", {}), prefix="model"))


def load_run_config(config_path: str | None, preset: str | None, sets: list[str]):
    """Preset, then config file, then --set overrides, validated as one RunConfig."""
    from ..sweep.spec import check_preset
    from ..train.config import build_run_config

    data: dict = {}
    where = "config"
    if preset is not None:
        data = read_toml(str(check_preset(preset)))
        where = f"preset {preset}"
    if config_path is not None:
        data = deep_merge(data, read_toml(config_path))
        where = config_path
    if sets:
        where += " with --set"
    return build_run_config(deep_merge(data, parse_set(sets)), where=where)


def config_hash(cfg) -> str:
    import hashlib

    from ..train.config import canonical

    text = json.dumps(canonical(cfg.to_dict()), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


# ---- verbs -----------------------------------------------------------------------------------------
def cmd_variants(args) -> None:
    from ..model.design import MODEL_OPTIONS
    from ..model.registry import DESIGNS
    from ..plugins import load_plugins

    load_plugins()  # designs of installed plugins and RESLAB_PLUGINS are listed too
    rows = [d.summary() for d in DESIGNS.values()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        print(f"{r['name']:<{width}}  {r['formula']}")
        version = f" {r['plugin_version']}" if r["plugin_version"] else ""
        origin = f"  (plugin {r['plugin']}{version})" if r["plugin"] else ""
        options = f"  options: {', '.join(f'{k} = {v!r}' for k, v in r['options'].items())}" if r["options"] else ""
        print(f"{'':<{width}}  [{r['reference']}]{origin}{options}")
    print("\noptions that are [model] fields (each design's flags in --json say which it takes):")
    for setting, formula, flag in MODEL_OPTIONS:
        takers = [d.name for d in DESIGNS.values() if getattr(d, flag)]
        print(f"  {setting}: {formula}\n      designs: {', '.join(takers)}")


def cmd_model(args) -> None:
    import torch

    from ..model.gpt import GPT

    cfg = load_model_config(args.config, args.set)
    with torch.device("meta"):  # counting needs shapes only: a large config allocates nothing
        counts = GPT(cfg).param_counts()
    if args.json:
        print(json.dumps({"config": cfg.to_dict(), "params": counts}, indent=2))
        return
    for k, v in cfg.to_dict().items():
        print(f"{k:<20} {v}")
    print(f"{'params':<20} total {counts['total']:,}, non-embedding {counts['non_embedding']:,}")


def default_run_folder(cfg) -> Path:
    """runs/<name>-<config hash>; a name that would leave runs/ (absolute, '..') is refused."""
    parts = Path(cfg.name).parts
    if not cfg.name or Path(cfg.name).is_absolute() or ".." in parts:
        raise ReslabError(f"name: {cfg.name!r} cannot name a folder inside runs/; choose a plain name "
                          "or give --out")
    return Path("runs") / f"{cfg.name}-{config_hash(cfg)}"


def check_data_cache(cfg) -> None:
    """The data cache is written before the run folder: refuse an unusable one first."""
    from ..data.config import cache_root
    from ..fileio import check_output_dir

    check_output_dir(cache_root(cfg.data), "data.cache_dir" if cfg.data.cache_dir else "data cache")


def cmd_train(args) -> int:
    from ..fileio import check_output_dir
    from ..train.loop import train

    cfg = load_run_config(args.config, args.preset, args.set)
    out = check_output_dir(args.out, "--out") if args.out is not None else \
        check_output_dir(default_run_folder(cfg), "run folder")
    check_data_cache(cfg)
    store = None
    if not args.no_store and os.environ.get("RANK", "0") == "0":  # under torchrun: rank 0 lists the run
        from .sweep import writable_store
        from ..sweep.store import Store

        store = Store(writable_store(args))  # refused before training, if it cannot be written
    import time

    started = time.time()
    result = train(cfg, out, log=lambda msg: print(msg, file=sys.stderr))
    if store is not None:
        from ..sweep.spec import run_identity

        store.register_single(Path(out), cfg.to_dict(), run_identity(cfg), started_at=started,
                              finished_at=time.time(), wall_s=time.time() - started)
        store.close()
    best = f"{result.best_val_loss:.4f}" if result.best_val_loss is not None else "n/a"
    print(f"{result.status} at step {result.step}; best val loss {best}", file=sys.stderr)
    print(result.path)
    return 0 if result.status == "completed" else 3  # 3: the run diverged


def cmd_sample(args) -> None:
    from ..train.sample import sample  # the flags' ranges are checked by their argparse types

    print(sample(args.run, prompt=args.prompt, tokens=args.tokens, temperature=args.temperature,
                 top_k=args.top_k, seed=args.seed, which=args.checkpoint))


def cmd_data_prepare(args) -> None:
    from ..data import prepare_dataset
    from ..fileio import check_output_dir

    cfg = load_run_config(args.config, args.preset, args.set)
    if args.out is not None:
        check_output_dir(args.out, "--out")
    if args.out is None or cfg.data.cache_dir is not None:  # downloads go to the cache even with --out
        check_data_cache(cfg)
    prepared = prepare_dataset(cfg.data, out_dir=args.out, progress=True, reference=True,
                               log=lambda msg: print(msg, file=sys.stderr))
    print(json.dumps(prepared.meta, indent=2))


def cmd_presets(args) -> None:
    from ..train.config import preset_names, preset_path

    for name in preset_names():
        first = preset_path(name).read_text().splitlines()[0].lstrip("# ")
        print(f"{name:<22} {first}")


def cmd_export_hf(args) -> None:
    from ..fileio import check_output_dir, check_path_text
    from ..hf import export_hf
    from ..train.checkpoint import model_folder_of

    model_dir, _ = model_folder_of(check_path_text(args.model, "MODEL_OR_RUN_DIR"), "best")  # a run: its best
    check_output_dir(args.out, "OUT")
    out = export_hf(model_dir, args.out)
    print(out)


def check_hf_numbers(hf_folder: Path) -> None:
    """Numbers in a Hugging Face config.json that reslab.hf's field checks let through: an integer
    too large for a float (math.isfinite(10**400) raises) and dropout rates of 1 or more.
    (These checks belong in hf.py's _field; they are here until its owner moves them.)"""
    from ..fileio import read_json
    from ..typed import INT_MAX, INT_MIN

    path = hf_folder / "config.json"
    if not path.is_file():
        return  # import_hf says what is missing
    conf = read_json(path, "Hugging Face config")
    for key, value in conf.items():
        if isinstance(value, int) and not isinstance(value, bool) and not INT_MIN <= value <= INT_MAX:
            raise ReslabError(f"{path}: {key}: {short_int(value)} is out of range")
    for key in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
        value = conf.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not 0 <= value < 1:
            raise ReslabError(f"{path}: {key} must be in [0, 1), got {value!r}")


def cmd_import_hf(args) -> None:
    from ..fileio import check_output_dir, check_path_text
    from ..hf import import_hf
    from ..model.io import save_model

    check_hf_numbers(check_path_text(args.hf_folder, "HF_DIR"))
    out = check_output_dir(args.out, "OUT")
    if out.exists() and (not out.is_dir() or set(p.name for p in out.iterdir()) - {"model.json", "model.safetensors"}):
        raise ReslabError(f"{out}: exists and is not a reslab model folder; choose an empty or new folder")
    print(save_model(import_hf(args.hf_folder), out))


def cmd_completion(args) -> None:
    from ..completion import script

    print(script(_parser(), args.shell))


def build_parser() -> argparse.ArgumentParser:
    from .._version import __version__

    p = _Parser(prog="reslab", description="A laboratory for residual connections in Transformers.",
                epilog="Designs of your own: --plugin MODULE (before or after the verb, repeatable), "
                       "RESLAB_PLUGINS=mod1,mod2, or an installed 'reslab.designs' entry point.")
    p.add_argument("--version", action="version", version=f"reslab {__version__}")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import MODULE first: it registers designs with reslab.register_design")
    sub = p.add_subparsers(dest="verb", required=True, parser_class=_Parser)

    v = sub.add_parser("variants", help="list every block design with its formula and reference")
    v.add_argument("--json", action="store_true", help="machine-readable output")
    v.set_defaults(func=cmd_variants, needs_torch=False)

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
    t.add_argument("--store", help="results store that lists the run (default: $RESLAB_STORE or ./results)")
    t.add_argument("--no-store", action="store_true", help="do not list the run in a results store")
    t.set_defaults(func=cmd_train)

    sp = sub.add_parser("sample", help="generate text from a run folder or model folder")
    sp.add_argument("run", help="run folder (uses its best checkpoint) or model folder")
    sp.add_argument("--prompt", default="\n")
    sp.add_argument("--tokens", type=int_in("--tokens", 1, MAX_SAMPLE_TOKENS), default=300)
    sp.add_argument("--temperature", type=positive_finite("--temperature"), default=0.8)
    sp.add_argument("--top-k", type=int_in("--top-k", 1, 2**31 - 1), default=200,
                    help="sample from the k likeliest tokens (a k above the vocabulary keeps them all)")
    sp.add_argument("--seed", type=int_in("--seed", 0, SEED_MAX), default=0)
    sp.add_argument("--checkpoint", choices=["best", "last"], default="best")
    sp.set_defaults(func=cmd_sample)

    dp = sub.add_parser("data", help="prepare token shards")
    dsub = dp.add_subparsers(dest="data_verb", required=True, parser_class=_Parser)
    prep = dsub.add_parser("prepare", help="tokenize a corpus into train/val shards (cached)")
    run_config_args(prep)
    prep.add_argument("--out", help="output folder (default: the data cache)")
    prep.set_defaults(func=cmd_data_prepare)

    from .probe import add_probe_parser

    add_probe_parser(sub)

    from .sweep import add_parsers as add_sweep_parsers

    add_sweep_parsers(sub, _Parser)
    from .report import add_parser as add_report_parser

    add_report_parser(sub)
    from .study import add_parsers as add_study_parsers

    add_study_parsers(sub, _Parser)

    pr = sub.add_parser("presets", help="list the built-in run presets")
    pr.set_defaults(func=cmd_presets, needs_torch=False)

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

    c = sub.add_parser("completion", help="print a shell completion script: eval \"$(reslab completion bash)\"")
    c.add_argument("shell", choices=["bash", "zsh"])
    c.set_defaults(func=cmd_completion, needs_torch=False)
    return p


_PARSER: argparse.ArgumentParser | None = None


def _parser() -> argparse.ArgumentParser:
    """The parser, built once per process (building it costs more than most verbs' checks)."""
    global _PARSER
    if _PARSER is None:
        _PARSER = build_parser()
    return _PARSER


def _say(text: str) -> None:
    """One line on stderr, whatever the text holds (newlines, characters stderr cannot encode)."""
    line = " ".join(text.splitlines()) or "(no message)"
    encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
    print(line.encode(encoding, "backslashreplace").decode(encoding), file=sys.stderr)


def _first_line(e: BaseException) -> str:
    return next((line.strip() for line in str(e).splitlines() if line.strip()), "")


def _is_out_of_memory(e: BaseException) -> bool:
    return isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError" or \
        (isinstance(e, RuntimeError) and "can't allocate memory" in str(e))


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (captured in a test)
        pass


def main(argv: list[str] | None = None) -> int:
    debug = os.environ.get("RESLAB_DEBUG", "") not in ("", "0")
    try:
        from ..plugins import add_to_environment, env_modules, load_plugins, take_plugin_flags

        argv, modules = take_plugin_flags(list(sys.argv[1:] if argv is None else argv))
        if modules or env_modules():  # named by the user: one that cannot be imported stops every verb
            load_plugins(modules)
            add_to_environment(modules)  # sweep workers, started in fresh processes, load them too
        args = _parser().parse_args(argv)
        if getattr(args, "needs_torch", True):  # the listings and completion run without it
            from ..compat import TorchTooOld, require_torch

            try:
                require_torch()
            except TorchTooOld as e:
                raise ReslabError(str(e)) from None
        status = args.func(args)
    except ReslabError as e:
        for line in e.lines():
            _say(f"reslab: error: {line}")
        return 2
    except KeyboardInterrupt:
        _say("reslab: interrupted")
        return 130
    except BrokenPipeError:  # the reader of stdout left (`reslab runs | head`): stop quietly, as Unix tools do
        _silence_stdout()
        return 141  # 128 + SIGPIPE
    except Exception as e:
        if debug:
            raise
        if isinstance(e, OSError) and e.filename is not None:  # a path the system refused
            _say(f"reslab: error: {e.filename}: {e.strerror or _first_line(e)}")
            return 2
        if _is_out_of_memory(e):
            _say(f"reslab: error: out of memory ({_first_line(e)[:200]}); use a smaller model or batch")
            return 1
        what = f"{type(e).__name__}: {_first_line(e)}" if _first_line(e) else type(e).__name__
        _say(f"reslab: internal error: {what} (set RESLAB_DEBUG=1 for the traceback; please report it)")
        return 1
    return status or 0
