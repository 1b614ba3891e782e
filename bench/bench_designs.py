#!/usr/bin/env python
"""Speed and size of every block design at one fixed, CPU-sized configuration.

For each design in reslab.designs() plus a few named variants, this measures

    params / non-emb params     GPT.param_counts() (tied head counted once)
    fwd+bwd ms                  forward + loss + backward of one batch (median)
    step ms (fwd+bwd+opt)       fwd+bwd + AdamW.step + zero_grad (+ set_step for ProRes) (median)
    tokens/s                    batch * context / step time

and each as a ratio to pre-ln measured in the same run.

Fairness:
  * torch.set_num_threads(--threads) (default: every core this process may use);
  * every design sees the same random token batch (one fixed generator);
  * every design takes the same norm / MLP / bias settings (rezero allows no norm, so it keeps
    'none'); SAS and SAS-P therefore use exactly the norm pre-ln uses;
  * measurement is interleaved: --rounds rounds, each timing --steps steps of every design
    (the design order is rotated from round to round), and the median is taken per design over
    all rounds, so machine-load drift hits every design alike. Models and optimizers persist
    across rounds; --warmup untimed steps precede a design's first round only.

Examples:
    python bench/bench_designs.py --quick
    python bench/bench_designs.py --markdown
    python bench/bench_designs.py --both --markdown --json /tmp/bench_designs.json
    python bench/bench_designs.py --mlp relu --norm rmsnorm --no-bias --designs pre-ln,sas-p
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import os
import platform
import statistics
import sys
import time

import torch

import reslab
from reslab.assess.cost import Trainee, time_rounds
from reslab.model.registry import get_design

BASELINE = "pre-ln"

# Extra rows: label -> (design, config overrides).
EXTRAS = {
    "sas (norm_free)": ("sas", {"options": {"norm_free": True}}),
    "sas-p (norm_free)": ("sas-p", {"options": {"norm_free": True}}),
    "pre-ln + prores linear": ("pre-ln", {"prores": "linear"}),
    "pre-ln attn-only": ("pre-ln", {"ffn_res": False}),
    # learned scales, reordered norm, gated residual, hyper-connections, nGPT
    "pre-ln + dyt": ("pre-ln", {"norm": "dyt"}),
    "pre-ln + skip & branch scales": ("pre-ln", {"skip_scale": "channel", "branch_scale": "channel"}),
    "pre-ln + value residual": ("pre-ln", {"value_residual": True}),
    "pre-ln + residual attention": ("pre-ln", {"residual_attention": True}),
    "hyper-connections (dynamic)": ("hyper-connections", {"options": {"dynamic": True}}),
    "hyper-connections (mHC)": ("hyper-connections", {"options": {"mixing": "sinkhorn", "dynamic": True}}),
    # mixing across depth, the parallel block, the speedruns' skips; bench/bench_depth_memory.py measures their memory against depth
    "parallel (shared norm)": ("parallel", {"options": {"shared_norm": True}}),
    "denseformer (dilation 2)": ("denseformer", {"options": {"dilation": 2}}),
    "attn-res (block of 2 layers)": ("attn-res", {"options": {"block_layers": 2}}),
    "speedrun without value embeddings": ("speedrun", {"options": {"value_embeds": False}}),
    "laurel (pa)": ("laurel", {"options": {"pa": True}}),
    "frac-connections (dynamic)": ("frac-connections", {"options": {"dynamic": True}}),
    "pre-ln + qk-norm": ("pre-ln", {"qk_norm": True}),
    "pre-ln + orthogonal residual": ("pre-ln", {"residual_update": "orthogonal"}),
    "pre-ln + xsa gated": ("pre-ln", {"xsa": "gated"}),
    # norms in the norm's place (DyT's successors), the attention output gate
    "pre-ln + derf": ("pre-ln", {"norm": "derf"}),
    "pre-ln + seednorm": ("pre-ln", {"norm": "seednorm"}),
    "pre-ln + rmsnorm-nogain": ("pre-ln", {"norm": "rmsnorm-nogain"}),
    "pre-ln + attn gate (head)": ("pre-ln", {"attn_gate": "head"}),
}

# Study 001's reference setup: RMSNorm, ReLU MLP, no biases.
REFERENCE_SETUP = {"norm": "rmsnorm", "mlp": "relu", "bias": False}


def all_rows() -> dict[str, tuple[str, dict]]:
    rows = {name: (name, {}) for name in reslab.designs()}
    rows.update(EXTRAS)
    return rows


def default_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@dataclasses.dataclass
class Setup:
    name: str
    norm: str
    mlp: str
    bias: bool


@dataclasses.dataclass
class Row:
    label: str
    design: str
    overrides: dict
    trainee: Trainee | None = None  # the model, its optimizer and its timed steps
    params: dict | None = None
    resolved: dict | None = None
    error: str | None = None


def build_row(label: str, design: str, overrides: dict, base: dict, setup: Setup, lr: float) -> Row:
    row = Row(label, design, dict(overrides))
    d = get_design(design)
    norm = setup.norm if setup.norm in d.norms else "none"  # rezero: no norm at all
    kw = {**base, "norm": norm, "mlp": setup.mlp, "bias": setup.bias}
    kw.update({k: d.defaults[k] for k in ("norm", "mlp", "bias") if k in d.defaults})  # ngpt: its own
    kw.update(overrides)
    row.overrides = {k: v for k, v in kw.items() if k not in base}
    try:
        model = reslab.build_model(design, seed=0, **kw)
    except Exception as exc:  # a refused combination becomes an error row, not a crash
        row.error = f"{type(exc).__name__}: {exc}"
        return row
    model.train()
    row.trainee = Trainee.of(model, lr=lr)
    row.params = model.param_counts()
    c = model.config
    row.resolved = {"norm": c.norm, "mlp": c.mlp, "bias": c.bias, "init": c.init, "attn_res": c.attn_res,
                    "ffn_res": c.ffn_res, "shaped_attention": c.shaped_attention,
                    "vp_identity": c.vp_identity, "norm_free": c.options.get("norm_free", False), "prores": c.prores}
    return row


def run_setup(setup: Setup, labels: list[str], args, log) -> dict:
    base = dict(vocab_size=args.vocab, n_layer=args.layers, n_embd=args.width, n_head=args.heads,
                block_size=args.context, dropout=0.0)
    g = torch.Generator().manual_seed(1234)
    data = torch.randint(0, args.vocab, (args.batch, args.context + 1), generator=g)
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()  # the same batch for every design
    table = all_rows()
    rows = [build_row(lab, *table[lab], base, setup, args.lr) for lab in labels]
    live = [r for r in rows if r.error is None]
    for r in rows:
        if r.error:
            log(f"  ! {r.label}: {r.error}")

    t_start = time.perf_counter()
    time_rounds([r.trainee for r in live], x, y, steps=args.steps, rounds=args.rounds, warmup=args.warmup,
                after_round=lambda rnd: log(f"  round {rnd + 1}/{args.rounds} done "
                                            f"({time.perf_counter() - t_start:.0f} s)"))

    tokens = args.batch * args.context
    results = []
    for row in rows:
        res = {"label": row.label, "design": row.design, "overrides": row.overrides, "error": row.error}
        if row.error is None:
            t = row.trainee
            fb = sorted(t.fwd_bwd)
            full = sorted(t.full)
            step_ms = 1e3 * statistics.median(full)
            res.update({
                "resolved": row.resolved,
                "params": row.params["total"],
                "non_embedding_params": row.params["non_embedding"],
                "fwd_bwd_ms": 1e3 * statistics.median(fb),
                "step_ms": step_ms,
                "opt_ms": step_ms - 1e3 * statistics.median(fb),
                "tokens_per_s": tokens / (step_ms / 1e3),
                "step_ms_min": 1e3 * full[0],
                "step_ms_max": 1e3 * full[-1],
                "step_ms_round_medians": t.round_medians,
                # CPU time of all threads: less sensitive than wall time to other processes' load
                "step_cpu_ms": 1e3 * statistics.median(t.cpu),
                "n_samples": len(full),
            })
        results.append(res)
        row.trainee = None
    base_res = next((r for r in results if r["label"] == BASELINE and r["error"] is None), None)
    for r in results:
        if r["error"] is None and base_res is not None:
            r["params_vs_pre_ln"] = r["params"] / base_res["params"]
            r["non_embedding_params_vs_pre_ln"] = r["non_embedding_params"] / base_res["non_embedding_params"]
            r["fwd_bwd_ms_vs_pre_ln"] = r["fwd_bwd_ms"] / base_res["fwd_bwd_ms"]
            r["step_ms_vs_pre_ln"] = r["step_ms"] / base_res["step_ms"]
            r["tokens_per_s_vs_pre_ln"] = r["tokens_per_s"] / base_res["tokens_per_s"]
            r["step_ms_min_vs_pre_ln"] = r["step_ms_min"] / base_res["step_ms_min"]
            r["step_cpu_ms_vs_pre_ln"] = r["step_cpu_ms"] / base_res["step_cpu_ms"]
            # each round's pre-ln step over this design's step in the same round, median over rounds:
            # a slow spell of the machine hits both terms of a round's ratio alike
            pairs = zip(base_res["step_ms_round_medians"], r["step_ms_round_medians"])
            r["tokens_per_s_vs_pre_ln_same_round"] = statistics.median(b / d for b, d in pairs)
    gc.collect()
    return {
        "setup": setup.name,
        "norm": setup.norm, "mlp": setup.mlp, "bias": setup.bias,
        "model": base,
        "batch": args.batch, "tokens_per_step": tokens, "dtype": "float32",
        "optimizer": {"name": "AdamW", "lr": args.lr},
        "timing": {"warmup": args.warmup, "steps_per_round": args.steps, "rounds": args.rounds},
        "wall_s": time.perf_counter() - t_start,
        "rows": results,
    }


COLUMNS = ["design", "params", "non-emb params", "params vs pre-ln", "fwd+bwd ms",
           "step ms (fwd+bwd+opt)", "tokens/s", "tokens/s vs pre-ln", "vs pre-ln, same round"]


def table_cells(r: dict) -> list[str]:
    if r["error"] is not None:
        return [r["label"], "error"] + [""] * (len(COLUMNS) - 2)
    ratio = lambda key: f"{r[key]:.2f}" if key in r else "n/a"  # noqa: E731
    return [r["label"], f"{r['params']:,}", f"{r['non_embedding_params']:,}", ratio("params_vs_pre_ln"),
            f"{r['fwd_bwd_ms']:.1f}", f"{r['step_ms']:.1f}", f"{r['tokens_per_s']:,.0f}",
            ratio("tokens_per_s_vs_pre_ln"), ratio("tokens_per_s_vs_pre_ln_same_round")]


def format_table(result: dict, markdown: bool) -> str:
    body = [table_cells(r) for r in result["rows"]]
    if markdown:
        lines = ["| " + " | ".join(COLUMNS) + " |",
                 "|" + "|".join(["---"] + ["---:"] * (len(COLUMNS) - 1)) + "|"]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        return "\n".join(lines)
    widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(COLUMNS)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                                  for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([fmt(COLUMNS), fmt(["-" * w for w in widths])] + [fmt(b) for b in body])


def robust_note(result: dict) -> str:
    """Load-robust cross-checks of the median: fastest step, and process CPU time, vs pre-ln."""
    ok = [r for r in result["rows"] if r["error"] is None and "step_ms_min_vs_pre_ln" in r]
    if not ok:
        return ""
    cells = ", ".join(f"{r['label']} {r['step_ms_min_vs_pre_ln']:.2f}/{r['step_cpu_ms_vs_pre_ln']:.2f}" for r in ok)
    return ("step time vs pre-ln by fastest step / by median process-CPU time (less sensitive to other "
            "load; < 1 is faster): " + cells)


def header(result: dict, args) -> str:
    m = result["model"]
    norm_note = (f"norm {result['norm']} for every design (rezero: none, it takes no norm; "
                 f"sas/sas-p use the same {result['norm']} as pre-ln, norm_free rows keep only layer 1's)")
    errs = [r for r in result["rows"] if r["error"] is not None]
    spread = [r["step_ms_max"] / r["step_ms_min"] for r in result["rows"] if r["error"] is None]
    lines = [
        f"## setup: {result['setup']}",
        f"torch {torch.__version__}, threads {torch.get_num_threads()} (cpu_count {os.cpu_count()}), "
        f"python {platform.python_version()}, {platform.machine()}",
        f"model: n_layer {m['n_layer']}, n_embd {m['n_embd']}, n_head {m['n_head']}, "
        f"block_size {m['block_size']}, vocab {m['vocab_size']}, dropout {m['dropout']}, float32, "
        f"tied head, learned positions",
        f"{norm_note}; mlp {result['mlp']} (ratio 4); bias {result['bias']}",
        f"batch {result['batch']} x {m['block_size']} = {result['tokens_per_step']} tokens/step; "
        f"AdamW lr {result['optimizer']['lr']}",
        f"timing: warmup {args.warmup} (first round only), {args.steps} steps x {args.rounds} rounds "
        f"interleaved, median of {args.steps * args.rounds}; wall {result['wall_s']:.0f} s; "
        f"max/min step-time spread per design up to {max(spread, default=1.0):.2f}x",
    ]
    if errs:
        lines.append(f"{len(errs)} row(s) failed to build: " + "; ".join(f"{r['label']} ({r['error']})" for r in errs))
    return "\n".join(lines)


def write_json_atomic(path: str, payload: dict) -> None:
    from reslab.fileio import write_json  # temporary file, then rename

    write_json(path, payload)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=192, help="n_embd")
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--context", type=int, default=128, help="block_size = sequence length")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--vocab", type=int, default=65)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--steps", type=int, default=3, help="timed steps per design per round")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps before a design's first round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    p.add_argument("--mlp", default="gelu", choices=["gelu", "gelu-tanh", "relu", "swiglu"])
    p.add_argument("--norm", default="layernorm", choices=["layernorm", "rmsnorm"])
    p.add_argument("--no-bias", action="store_true", help="Linear layers (and LayerNorm) without biases")
    p.add_argument("--both", action="store_true",
                   help="run the setup given by --mlp/--norm/--no-bias AND study 001's reference "
                        "(--mlp relu --norm rmsnorm --no-bias)")
    p.add_argument("--designs", default=None,
                   help="comma list of rows (designs and/or extra labels); pre-ln is always added")
    p.add_argument("--json", metavar="OUT", default=None, help="write results JSON (atomically)")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.add_argument("--quick", action="store_true", help="tiny model, 2 steps: a sanity run in seconds")
    args = p.parse_args(argv)
    if args.quick:
        args.layers, args.width, args.heads, args.context, args.batch = 2, 32, 2, 16, 4
        args.steps, args.warmup, args.rounds = 1, 1, 2
    for name in ("layers", "width", "heads", "context", "batch", "steps", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    if args.warmup < 0:
        p.error("--warmup must be >= 0")
    available = all_rows()
    if args.designs:
        labels = [s.strip() for s in args.designs.split(",") if s.strip()]
        unknown = [s for s in labels if s not in available]
        if unknown:
            p.error(f"unknown design(s) {unknown}; choose from: {', '.join(available)}")
        if BASELINE not in labels:
            labels.insert(0, BASELINE)
        args.labels = list(dict.fromkeys(labels))
    else:
        args.labels = list(available)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    threads = args.threads or default_threads()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731

    setups = [Setup("given" if (args.norm, args.mlp, not args.no_bias) != ("layernorm", "gelu", True)
                    else "default", args.norm, args.mlp, not args.no_bias)]
    ref = Setup("study-001 reference", **REFERENCE_SETUP)
    if args.both and (ref.norm, ref.mlp, ref.bias) != (setups[0].norm, setups[0].mlp, setups[0].bias):
        setups.append(ref)
    elif (ref.norm, ref.mlp, ref.bias) == (setups[0].norm, setups[0].mlp, setups[0].bias):
        setups[0].name = ref.name

    out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
           "python": platform.python_version(), "machine": platform.machine(),
           "started": datetime.datetime.now().isoformat(timespec="seconds"),
           "argv": sys.argv[1:] if argv is None else list(argv), "setups": []}
    for setup in setups:
        log(f"setup {setup.name}: norm {setup.norm}, mlp {setup.mlp}, bias {setup.bias}; "
            f"{len(args.labels)} rows")
        result = run_setup(setup, args.labels, args, log)
        out["setups"].append(result)
        print(header(result, args))
        print()
        print(format_table(result, args.markdown))
        print()
        print(robust_note(result))
        print(flush=True)
        if args.json:
            write_json_atomic(args.json, out)  # partial results survive an interrupted --both
    return 0


if __name__ == "__main__":
    sys.exit(main())
