"""`reslab probe`: init-time probes over designs x depths x seeds -> probe.csv, PNGs, slopes.

reslab.cli.root adds it with `add_parsers(sub)`."""

from __future__ import annotations

import time

from ..config import MAX_SIZES
from ..errors import ConfigError, ReslabError
from ..train.config import MAX_THREADS
from .args import int_in

MAX_SEEDS = 1000  # seeds per design and depth
MAX_SIM_WEIGHTS = 2**30  # the sim mode's weights, 4 GiB of float32: beyond it the probe is only a crash

DEFAULT_DESIGNS = ("pre-ln,post-ln,sandwich-ln,deepnorm,lns,resi-dual,sas,sas-p,"
                   "reordered-ln,layerscale,gated,hyper-connections,ngpt")
MODE_DESIGNS = {  # used when --designs is not given
    "default": DEFAULT_DESIGNS,
    "xiong": "pre-ln,post-ln,resi-dual",
    "rank": "pre-ln,pre-ln-noskip,pre-ln-noskip-shaped,pre-ln-noskip-shaped-vpid,sas",
    "sim": "pre,post",
}


def _int_list(text: str, flag: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ReslabError(f"{flag}: expected a comma list of integers, got {text!r}") from None


def check_models(designs: list[str], depths: list[int], args) -> None:
    """Every probed model's config, resolved before the first probe runs, so a size no model can
    have (--width 30 --heads 4, --depths 100000) is one line naming the flag, not a traceback
    part-way through the probes."""
    from ..model.registry import resolve
    from ..probe.run import check_args
    from ..probe.settings import config_for

    check_args(designs, depths, args.seeds, args.mode)
    if max(depths) > MAX_SIZES["n_layer"]:
        raise ReslabError(f"--depths: every depth must be at most {MAX_SIZES['n_layer']:,}, got {max(depths):,}")
    if args.mode == "sim":  # study 002's Linear + LayerNorm stack: depth width x width weights
        if max(depths) * args.width ** 2 > MAX_SIM_WEIGHTS:
            raise ReslabError(f"--width: {max(depths)} layers of {args.width} x {args.width} weights are more "
                              f"than {MAX_SIM_WEIGHTS:,} numbers; use a smaller --width or --depths")
        return
    if args.width % args.heads:
        raise ReslabError(f"--heads: {args.heads} heads do not divide --width {args.width}")
    flags = {"n_layer": "--depths", "n_embd": "--width", "n_head": "--heads", "block_size": "--seq"}
    for name in designs:
        for depth in depths:
            try:
                resolve(config_for(name, args.mode, depth, args.width, args.heads, args.seq))
            except ConfigError as e:
                field, _, problem = e.errors[0].partition(": ")
                flag = flags.get(field.removeprefix("model."))
                raise ReslabError(f"{flag}: {problem}" if flag else
                                  f"--designs {name} at depth {depth}: {e.errors[0]}") from None


def cmd_probe(args) -> int:
    import torch

    from ..fileio import check_output_dir
    from ..probe.plots import plot_all
    from ..probe.run import format_table, run_probe, slopes_table
    from ..probe.settings import check_mode, config_for, own_inits

    check_mode(args.mode)
    given = args.designs if args.designs is not None else MODE_DESIGNS[args.mode]  # "" is no default
    designs = [d.strip() for d in given.split(",") if d.strip()]
    depths = _int_list(args.depths, "--depths")
    check_models(designs, depths, args)
    out = check_output_dir(args.out, "--out")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    rows = run_probe(designs, depths, args.seeds, args.mode, width=args.width, heads=args.heads,
                     seq=args.seq, batch=args.batch, out_dir=out)
    plot_all(rows, out)
    elapsed = time.perf_counter() - t0
    print(f"mode {args.mode}: {len(designs)} designs x depths {depths} x {args.seeds} seeds, "
          f"width {args.width}, {elapsed:.1f} s")
    print("fitted log-log exponents (seed means):")
    print(format_table(slopes_table(rows)))
    if args.mode == "xiong":  # Xavier stands in for the generic init only (probe/settings.own_init)
        models = {d: config_for(d, "default", depths[0], args.width, args.heads, args.seq) for d in designs}
        kept = [f"{d} ({init})" for d, init in own_inits(models).items()]
        if kept:
            print(f"kept their own init (part of the design) instead of Xavier: {', '.join(kept)}")
    print(out)
    return 0


def add_parsers(sub):
    """Add `reslab probe` to an argparse subparsers object (it carries reslab's parser class).
    Flag types refuse out-of-range numbers while parsing (one line naming the flag)."""
    p = sub.add_parser("probe", help="init-time probes: gradient / activation norms, rank collapse, "
                                     "vs depth and layer (no training)")
    p.add_argument("--designs", default=None,
                   help="comma list (default by mode: default -> " + DEFAULT_DESIGNS +
                        "; xiong -> pre-ln,post-ln,resi-dual; rank -> pre-ln,pre-ln-noskip,"
                        "pre-ln-noskip-shaped,pre-ln-noskip-shaped-vpid,sas; sim -> pre,post)")
    p.add_argument("--depths", default="6,12,24,48", help="comma list of layer counts (default 6,12,24,48)")
    p.add_argument("--seeds", type=int_in("--seeds", 1, MAX_SEEDS), default=3,
                   help="seeds 0..N-1 per design and depth (default 3)")
    p.add_argument("--mode", default="default",
                   help="default | xiong (Xavier, ReLU, W_Q=W_K=0) | rank (attention skip removed) "
                        "| sim (study 002 Linear+LN stack)")
    p.add_argument("--width", type=int_in("--width", 1, MAX_SIZES["n_embd"]), default=128,
                   help="n_embd (default 128)")
    p.add_argument("--heads", type=int_in("--heads", 1, MAX_SIZES["n_head"]), default=4,
                   help="attention heads (default 4)")
    p.add_argument("--seq", type=int_in("--seq", 1, MAX_SIZES["block_size"]), default=32,
                   help="tokens per sequence (default 32)")
    p.add_argument("--batch", type=int_in("--batch", 1, 65_536), default=4,
                   help="sequences in the probe batch (default 4)")
    p.add_argument("--threads", type=int_in("--threads", 1, MAX_THREADS), default=None,
                   help="torch threads (default: torch's choice)")
    p.add_argument("--out", default="probe-out", help="folder for probe.csv and the PNGs (default probe-out)")
    p.set_defaults(func=cmd_probe)
    return p
