"""`reslab data prepare`: a run config's corpus as token shards."""

from __future__ import annotations

import json
import sys

from ..config_sources import load_run_config
from .args import Parser, add_run_config_args
from .checks import check_data_cache


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


def add_parsers(sub) -> None:
    dp = sub.add_parser("data", help="prepare token shards")
    dsub = dp.add_subparsers(dest="data_verb", required=True, parser_class=Parser)
    prep = dsub.add_parser("prepare", help="tokenize a corpus into train/val shards (cached)")
    add_run_config_args(prep)
    prep.add_argument("--out", help="output folder (default: the data cache)")
    prep.set_defaults(func=cmd_data_prepare)
