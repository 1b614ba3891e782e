"""`reslab train` (one run, listed in a results store) and `reslab sample` (text from a run)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..config_sources import load_run_config
from ..errors import ReslabError
from ..train.config import SEED_MAX, config_hash
from .args import add_run_config_args, int_in, positive_finite
from .checks import check_data_cache
from .stores import writable_store

MAX_SAMPLE_TOKENS = 1_000_000


def default_run_folder(cfg) -> Path:
    """runs/<name>-<config hash>; a name that would leave runs/ (absolute, '..') is refused."""
    parts = Path(cfg.name).parts
    if not cfg.name or Path(cfg.name).is_absolute() or ".." in parts:
        raise ReslabError(f"name: {cfg.name!r} cannot name a folder inside runs/; choose a plain name "
                          "or give --out")
    return Path("runs") / f"{cfg.name}-{config_hash(cfg)}"


def cmd_train(args) -> int:
    from ..fileio import check_output_dir
    from ..train.loop import train

    cfg = load_run_config(args.config, args.preset, args.set)
    out = check_output_dir(args.out, "--out") if args.out is not None else \
        check_output_dir(default_run_folder(cfg), "run folder")
    check_data_cache(cfg)
    store = None
    if not args.no_store and os.environ.get("RANK", "0") == "0":  # under torchrun: rank 0 lists the run
        from ..sweep.store import Store

        store = Store(writable_store(args))  # refused before training, if it cannot be written
    import time

    started = time.time()
    result = train(cfg, out, log=lambda msg: print(msg, file=sys.stderr))
    if store is not None:
        from ..spec.expand import run_identity

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


def add_parsers(sub) -> None:
    t = sub.add_parser("train", help="train one run; resumes its run folder if it was interrupted")
    add_run_config_args(t)
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
