"""`reslab probe`: init-time probes over designs x depths x seeds -> probe.csv, PNGs, slopes.

Wired into reslab.cli with `add_probe_parser(sub)`."""

from __future__ import annotations

import time
from pathlib import Path

from ..errors import ReslabError

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


def cmd_probe(args) -> int:
    import torch

    from .plots import plot_all
    from .run import format_table, run_probe, slopes_table
    from .settings import check_mode

    check_mode(args.mode)
    designs = [d.strip() for d in (args.designs or MODE_DESIGNS[args.mode]).split(",") if d.strip()]
    depths = _int_list(args.depths, "--depths")
    for flag, v in (("--width", args.width), ("--heads", args.heads), ("--seq", args.seq),
                    ("--batch", args.batch)):
        if v < 1:
            raise ReslabError(f"{flag}: must be >= 1, got {v}")
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    t0 = time.perf_counter()
    rows = run_probe(designs, depths, args.seeds, args.mode, width=args.width, heads=args.heads,
                     seq=args.seq, batch=args.batch, out_dir=out)
    plot_all(rows, out)
    elapsed = time.perf_counter() - t0
    print(f"mode {args.mode}: {len(designs)} designs x depths {depths} x {args.seeds} seeds, "
          f"width {args.width}, {elapsed:.1f} s")
    print("fitted log-log exponents (seed means):")
    print(format_table(slopes_table(rows)))
    print(out)
    return 0


def add_probe_parser(sub):
    """Add `reslab probe` to an argparse subparsers object (it carries reslab's parser class)."""
    p = sub.add_parser("probe", help="init-time probes: gradient / activation norms, rank collapse, "
                                     "vs depth and layer (no training)")
    p.add_argument("--designs", default=None,
                   help="comma list (default by mode: default -> " + DEFAULT_DESIGNS +
                        "; xiong -> pre-ln,post-ln,resi-dual; rank -> pre-ln,pre-ln-noskip,"
                        "pre-ln-noskip-shaped,pre-ln-noskip-shaped-vpid,sas; sim -> pre,post)")
    p.add_argument("--depths", default="6,12,24,48", help="comma list of layer counts (default 6,12,24,48)")
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per design and depth (default 3)")
    p.add_argument("--mode", default="default",
                   help="default | xiong (Xavier, ReLU, W_Q=W_K=0) | rank (attention skip removed) "
                        "| sim (study 002 Linear+LN stack)")
    p.add_argument("--width", type=int, default=128, help="n_embd (default 128)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    p.add_argument("--seq", type=int, default=32, help="tokens per sequence (default 32)")
    p.add_argument("--batch", type=int, default=4, help="sequences in the probe batch (default 4)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    p.add_argument("--out", default="probe-out", help="folder for probe.csv and the PNGs (default probe-out)")
    p.set_defaults(func=cmd_probe)
    return p
