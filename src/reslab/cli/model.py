"""`reslab variants` (every design, its formula and reference) and `reslab model` (a model config
resolved, with its parameter counts)."""

from __future__ import annotations

import json

from ..config_sources import load_model_config


def cmd_variants(args) -> None:
    from ..model.catalogue import design_row, settings_rows
    from ..model.registry import DESIGNS
    from ..plugins import load_plugins

    load_plugins()  # designs of installed plugins and RESLAB_PLUGINS are listed too
    names = list(DESIGNS)
    if args.settings:
        settings = settings_rows(names)
        if args.json:
            print(json.dumps(settings, indent=2))
        else:
            _print_settings(settings)
        return
    if args.json:
        print(json.dumps([design_row(d.summary()) for d in DESIGNS.values()], indent=2))
        return
    rows = [d.summary() for d in DESIGNS.values()]
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        print(f"{r['name']:<{width}}  {r['formula']}")
        version = f" {r['plugin_version']}" if r["plugin_version"] else ""
        origin = f"  (plugin {r['plugin']}{version})" if r["plugin"] else ""
        options = f"  options: {', '.join(f'{k} = {v!r}' for k, v in r['options'].items())}" if r["options"] else ""
        print(f"{'':<{width}}  [{r['reference']}]{origin}{options}")
    print()
    _print_settings(settings_rows(names))


def _print_settings(settings: dict) -> None:
    heads = {"model_options": "options that are [model] fields",
             "norms": "norms (model.norm)",
             "inits": "initialisations (model.init)"}
    print("[model] settings that compose with many designs, each with the designs a config may give it "
          "(--json: each design's row says which it takes; --settings --json: these lists)")
    for part, rows in settings.items():
        print(f"\n{heads[part]}:")
        for r in rows:
            needs = (" (with " + ", ".join(f"{k} = {v!r}" for k, v in r["needs"].items()) + ")") if r["needs"] else ""
            print(f"  {r['setting']}: {r['formula']}\n      designs{needs}: {', '.join(r['designs']) or 'none'}")


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


def add_parsers(sub) -> None:
    v = sub.add_parser("variants", help="list every block design with its formula and reference")
    v.add_argument("--json", action="store_true",
                   help="machine-readable: one row per design, with the options, norms and inits it takes")
    v.add_argument("--settings", action="store_true",
                   help="only the [model] settings that compose with many designs (options, norms, inits), "
                        "each with its formula and the designs that take it")
    v.set_defaults(func=cmd_variants, needs_torch=False)

    m = sub.add_parser("model", help="validate a model config and show it resolved, with parameter counts")
    m.add_argument("--config", help="TOML file with a [model] table")
    m.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override, e.g. --set model.design=post-ln (repeatable)")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=cmd_model)
