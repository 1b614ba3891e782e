#!/usr/bin/env python
"""nanoGPT's own train.py against `reslab train --preset nanogpt-cpu`, side by side, on the full
validation split.

For seeds k = first .. first+N-1 this runs, one process at a time and alternating
    nanoGPT seed k, reslab seed k, nanoGPT seed k+1, reslab seed k+1, ...
  nanoGPT  karpathy/nanoGPT's train.py, from a copy in the scratch folder, on data prepared by its own
           data/shakespeare_char/prepare.py from the given input.txt (copied where prepare.py expects
           it, so it downloads nothing), with its CPU configuration:
               config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20
               --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128
               --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0 --always_save_checkpoint=True
           (always_save_checkpoint: ckpt.pt then holds the model after exactly 2000 updates, the one
           its "step 2000" line evaluates, instead of the best of the 250-step evaluations).
           train.py seeds torch with 1337 + seed_offset and has no seed flag (seed_offset is 0 off
           DDP), so a config file in the scratch folder, seed_k.py, shifts torch.manual_seed by k.
  reslab   reslab train --preset nanogpt-cpu --set train.seed=1337+k --set train.threads=T
           --set data.path=INPUT  (data.path: the same file; the prepared tokens are identical).
Both get OMP_NUM_THREADS=MKL_NUM_THREADS=T (default 2) and run from a fresh process; the wall time of
each is the whole process, start to exit (imports, data, 9 evaluations, checkpoints included).

Afterwards every final model (nanoGPT: ckpt.pt at iter 2000; reslab: its step-2000 checkpoint) is
evaluated with the SAME code, bench/full_val_loss.py (nanoGPT's weights put into reslab's pre-ln GPT;
for the first seed also checked against nanoGPT's own model class), on all 111,540 validation
tokens, and on the 20 batches reslab drew for its step-2000 evaluation (the same for every seed:
train.eval_seed does not depend on train.seed).

Printed: per seed the full-val losses, each side's own logged step-2000 val loss (20 random batches),
wall times and their ratio; the means, the difference reslab - nanoGPT with its 95% Welch interval and
p-value, the median wall-time ratio. Saved: <scratch>/nanogpt_gap.json (and --json).

Usage:
    python bench/nanogpt_gap.py --nanogpt PATH/TO/nanoGPT --seeds 5             (~20-30 min on 2 cores)
    python bench/nanogpt_gap.py --nanogpt PATH/TO/nanoGPT --seeds 2 --steps 20  (a smoke test)
A seed whose two runs are both finished in the scratch folder is not rerun (--fresh reruns all);
timings are only ever compared within one pair, taken back to back.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
# The project's data sits beside the checkout (../shared/data), as the corpus lookup expects.
DEFAULT_INPUT = ROOT.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"

NANOGPT_FLAGS = ["--device=cpu", "--compile=False", "--eval_iters=20", "--log_interval=1",
                 "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128",
                 "--lr_decay_iters=2000", "--dropout=0.0", "--always_save_checkpoint=True"]

SEED_CONFIG = """\
# nanoGPT's train.py seeds torch with 1337 + seed_offset (0 off DDP) and has no seed flag:
# this config file (exec'd by its configurator) shifts that seed by {k}.
import torch as _torch
_manual_seed = _torch.manual_seed
_torch.manual_seed = lambda seed: _manual_seed(seed + {k})
"""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- scratch setup -------------------------------------------------------------------------------------
def copy_nanogpt(source: Path, dest: Path) -> str:
    """A work tree of nanoGPT at dest (from a bare git dir, e.g. the fetch tool's mirror, or a
    checkout); returns its commit (or 'unknown')."""
    if dest.is_dir():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    is_bare = (source / "HEAD").is_file() and (source / "objects").is_dir()
    if is_bare:
        archive = subprocess.run(["git", f"--git-dir={source}", "archive", "HEAD"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        commit = subprocess.run(["git", f"--git-dir={source}", "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
    else:
        shutil.copytree(source, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git", "out*"))
        git = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True)
        commit = git.stdout.strip() if git.returncode == 0 else "unknown"
    for name in ("train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py",
                 "data/shakespeare_char/prepare.py"):
        if not (dest / name).is_file():
            raise SystemExit(f"{source}: not a nanoGPT tree (no {name})")
    return commit


def prepare_nanogpt_data(tree: Path, input_txt: Path) -> None:
    """nanoGPT's own prepare.py on the local file (it downloads only when input.txt is missing; its
    `import requests` is satisfied by a stub when the package is absent, as nothing is fetched)."""
    folder = tree / "data" / "shakespeare_char"
    shutil.copyfile(input_txt, folder / "input.txt")
    stub = ("import sys, types, runpy\n"
            "try:\n    import requests\n"
            "except ImportError:\n    sys.modules['requests'] = types.ModuleType('requests')\n"
            "runpy.run_path('prepare.py', run_name='__main__')\n")
    subprocess.run([sys.executable, "-c", stub], cwd=folder, check=True, capture_output=True)
    for name in ("train.bin", "val.bin", "meta.pkl"):
        if not (folder / name).is_file():
            raise SystemExit(f"nanoGPT's prepare.py wrote no {name} in {folder}")


# ---- one run each --------------------------------------------------------------------------------------
def _timed(cmd: list, cwd: Path, env: dict) -> tuple[subprocess.CompletedProcess, float, float]:
    """(the finished process, its wall seconds, its CPU seconds: user + system of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _env(threads: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    return env


def run_nanogpt(tree: Path, scratch: Path, k: int, steps: int, threads: int) -> dict:
    out_dir = scratch / f"nanogpt_seed{k}"
    if out_dir.exists():
        shutil.rmtree(out_dir)
    seed_cfg = scratch / f"seed_{k}.py"
    seed_cfg.write_text(SEED_CONFIG.format(k=k))
    cmd = [sys.executable, "train.py", "config/train_shakespeare_char.py", str(seed_cfg), *NANOGPT_FLAGS,
           f"--max_iters={steps}", f"--out_dir={out_dir}"]
    if steps != 2000:  # a shortened smoke run: the schedule and evaluations follow the steps
        cmd += [f"--lr_decay_iters={steps}", f"--eval_interval={max(steps // 2, 1)}"]
    proc, wall, cpu = _timed(cmd, tree, _env(threads))
    (scratch / f"nanogpt_seed{k}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"nanoGPT seed {k} failed ({proc.returncode}); see {scratch}/nanogpt_seed{k}.log")
    evals = {int(s): float(v) for s, v in re.findall(r"step (\d+): train loss [\d.]+, val loss ([\d.]+)", proc.stdout)}
    return {"wall_s": wall, "cpu_s": cpu, "load_avg_after": os.getloadavg(), "ckpt": str(out_dir / "ckpt.pt"),
            "logged_val": evals.get(steps), "cmd": " ".join(cmd), "seed": 1337 + k}


def run_reslab(scratch: Path, k: int, steps: int, threads: int, input_txt: Path) -> dict:
    out = scratch / f"reslab_seed{k}"
    if out.exists():
        shutil.rmtree(out)
    cmd = [sys.executable, "-m", "reslab.cli", "train", "--preset", "nanogpt-cpu", "--out", str(out),
           "--set", f"train.seed={1337 + k}", "--set", f"train.threads={threads}",
           "--set", f"data.path={input_txt}"]
    if steps != 2000:
        cmd += ["--set", f"train.steps={steps}", "--set", f"train.eval_interval={max(steps // 2, 1)}"]
    proc, wall, cpu = _timed(cmd, ROOT, _env(threads))
    (scratch / f"reslab_seed{k}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"reslab seed {k} failed ({proc.returncode}); see {scratch}/reslab_seed{k}.log")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = {r["step"]: r["val_loss"] for r in rows if "val_loss" in r}
    return {"wall_s": wall, "cpu_s": cpu, "load_avg_after": os.getloadavg(), "run": str(out),
            "logged_val": evals.get(steps), "cmd": " ".join(cmd), "seed": 1337 + k}


# ---- evaluation ----------------------------------------------------------------------------------------
def evaluate_all(pairs: dict, tree: Path, steps: int) -> None:
    """Full-val loss of every final model, one code path (bench/full_val_loss.py)."""
    import torch

    sys.path.insert(0, str(HERE))
    from full_val_loss import full_val_loss, load_any  # noqa: E402

    from reslab.data import DataConfig, prepare_dataset
    from reslab.data.batches import EvalBatches

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    data = prepare_dataset(DataConfig(download=False, fallback=False, path=str(ARGS.input)), progress=False,
                           log=lambda *_: None)
    # the 20 batches behind reslab's logged step-`steps` val loss (train.eval_seed, mode random)
    interval = 250 if steps == 2000 else max(steps // 2, 1)
    reslab_eval = EvalBatches(data.val, 20, 12, 64, seed=99991, mode="random").batches(steps // interval)

    @torch.no_grad()
    def on_batches(model, batches):
        return sum(model(x, y)[1].item() for x, y in batches) / len(batches)

    checked = False
    for k, pair in sorted(pairs.items()):
        for side, where in (("nanogpt", pair["nanogpt"]["ckpt"]), ("reslab", pair["reslab"]["run"])):
            model = load_any(where)
            pair[side]["full_val"] = full_val_loss(model, data.val)
            pair[side]["reslab_eval_batches"] = on_batches(model, reslab_eval)
        if not checked:  # the same weights in nanoGPT's own model class give the same loss
            pair["nanogpt"]["full_val_own_class"] = _nanogpt_own_class(tree, pair["nanogpt"]["ckpt"], data.val,
                                                                       full_val_loss)
            checked = True


def _nanogpt_own_class(tree: Path, ckpt_path: str, val, full_val_loss) -> float:
    import torch

    sys.path.insert(0, str(tree))
    try:
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            from model import GPT as NanoGPT, GPTConfig  # nanoGPT's model.py, from the scratch copy
            ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)
            model = NanoGPT(GPTConfig(**ckpt["model_args"]))
        model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()})
        return full_val_loss(model.eval(), val)
    finally:
        sys.path.remove(str(tree))


# ---- statistics and table ------------------------------------------------------------------------------
def welch(a: list[float], b: list[float], level: float = 0.95) -> dict:
    """mean(b) - mean(a), its Welch interval and two-sided p-value."""
    from scipy import stats

    ma, mb = statistics.fmean(a), statistics.fmean(b)
    va, vb = statistics.variance(a), statistics.variance(b)
    se = math.sqrt(va / len(a) + vb / len(b))
    df = (va / len(a) + vb / len(b)) ** 2 / ((va / len(a)) ** 2 / (len(a) - 1) + (vb / len(b)) ** 2 / (len(b) - 1))
    half = stats.t.ppf(0.5 + level / 2, df) * se
    t = (mb - ma) / se
    return {"diff": mb - ma, "lo": mb - ma - half, "hi": mb - ma + half, "se": se, "df": df, "t": t,
            "p": 2 * stats.t.sf(abs(t), df), "level": level}


def report(pairs: dict) -> dict:
    ks = sorted(pairs)
    col = lambda side, key: [pairs[k][side][key] for k in ks]  # noqa: E731
    ng_full, rs_full = col("nanogpt", "full_val"), col("reslab", "full_val")
    ratios = [pairs[k]["reslab"]["wall_s"] / pairs[k]["nanogpt"]["wall_s"] for k in ks]
    fmt = lambda v: "  n/a " if v is None else f"{v:.4f}"  # noqa: E731
    print("| seed | nanoGPT full val | reslab full val | nanoGPT logged (20 batches) | reslab logged (20 batches) "
          "| nanoGPT wall s | reslab wall s | ratio reslab/nanoGPT |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k, r in zip(ks, ratios):
        n, s = pairs[k]["nanogpt"], pairs[k]["reslab"]
        print(f"| {1337 + k} | {n['full_val']:.4f} | {s['full_val']:.4f} | {fmt(n['logged_val'])} | "
              f"{fmt(s['logged_val'])} | {n['wall_s']:.1f} | {s['wall_s']:.1f} | {r:.3f} |")
    mean = statistics.fmean
    sd = lambda xs: statistics.stdev(xs) if len(xs) > 1 else float("nan")  # noqa: E731
    print(f"| mean +- sd | {mean(ng_full):.4f} +- {sd(ng_full):.4f} | {mean(rs_full):.4f} +- {sd(rs_full):.4f} | "
          f"{mean([v for v in col('nanogpt', 'logged_val') if v is not None] or [float('nan')]):.4f} | "
          f"{mean([v for v in col('reslab', 'logged_val') if v is not None] or [float('nan')]):.4f} | "
          f"{mean(col('nanogpt', 'wall_s')):.1f} | {mean(col('reslab', 'wall_s')):.1f} | "
          f"median {statistics.median(ratios):.3f} |")
    summary = {"seeds": [1337 + k for k in ks], "nanogpt_full_mean": mean(ng_full), "reslab_full_mean": mean(rs_full),
               "nanogpt_full_sd": sd(ng_full), "reslab_full_sd": sd(rs_full),
               "median_wall_ratio": statistics.median(ratios), "wall_ratios": ratios,
               "ratio_of_mean_walls": mean(col("reslab", "wall_s")) / mean(col("nanogpt", "wall_s"))}
    if len(ks) >= 2:
        w = welch(ng_full, rs_full)
        summary["welch_full_val"] = w
        print(f"\nfull validation split: reslab - nanoGPT = {w['diff']:+.4f}, 95% Welch interval "
              f"[{w['lo']:+.4f}, {w['hi']:+.4f}] (t = {w['t']:.2f}, df = {w['df']:.1f}, p = {w['p']:.3f})")
        rb, nb = col("reslab", "reslab_eval_batches"), col("nanogpt", "reslab_eval_batches")
        summary["reslab_eval_batches"] = {"nanogpt_mean": mean(nb), "reslab_mean": mean(rb),
                                          "bias_vs_full_nanogpt": mean(nb) - mean(ng_full),
                                          "bias_vs_full_reslab": mean(rb) - mean(rs_full)}
        print(f"reslab's own step-{ARGS.steps} evaluation batches (the same 20 for every seed) minus the full split: "
              f"nanoGPT's models {mean(nb) - mean(ng_full):+.4f}, reslab's models {mean(rb) - mean(rs_full):+.4f}")
    print(f"wall time reslab / nanoGPT: median {summary['median_wall_ratio']:.3f} "
          f"(per seed {', '.join(f'{r:.3f}' for r in ratios)})")
    cpu_pairs = [k for k in ks if "cpu_s" in pairs[k]["nanogpt"] and "cpu_s" in pairs[k]["reslab"]]
    if cpu_pairs:
        cpu_ratios = [pairs[k]["reslab"]["cpu_s"] / pairs[k]["nanogpt"]["cpu_s"] for k in cpu_pairs]
        summary["cpu_ratios"] = dict(zip([1337 + k for k in cpu_pairs], cpu_ratios))
        print(f"CPU time (user + system) reslab / nanoGPT, seeds {', '.join(str(1337 + k) for k in cpu_pairs)}: "
              f"median {statistics.median(cpu_ratios):.3f} (per seed {', '.join(f'{r:.3f}' for r in cpu_ratios)})")
    own = pairs[ks[0]]["nanogpt"].get("full_val_own_class")
    if own is not None:
        print(f"check: seed {1337 + ks[0]}'s nanoGPT weights in nanoGPT's own model class: {own:.6f} "
              f"(in reslab's: {pairs[ks[0]]['nanogpt']['full_val']:.6f})")
    return summary


# ---- main ----------------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5, help="seeds per side (>= 5 for the comparison)")
    p.add_argument("--first", type=int, default=1, help="first seed offset k (seed = 1337 + k)")
    p.add_argument("--steps", type=int, default=2000, help="updates per run (2000: nanoGPT's CPU run)")
    p.add_argument("--threads", type=int, default=2, help="torch threads of every run")
    p.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()) / "nanogpt_gap",
                   help="scratch folder (default: nanogpt_gap in the system's temporary folder)")
    p.add_argument("--nanogpt", type=Path, required=True,
                   help="nanoGPT: a checkout of karpathy/nanoGPT, or a bare git directory of it")
    p.add_argument("--input", type=Path, default=DEFAULT_INPUT, help="TinyShakespeare input.txt")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("--fresh", action="store_true", help="rerun seeds already finished in the scratch folder")
    return p.parse_args(argv)


def main(argv=None) -> int:
    global ARGS
    ARGS = args = parse_args(argv)
    args.input = args.input.resolve()
    scratch = args.scratch.resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    state_path = scratch / "runs.json"
    state = json.loads(state_path.read_text()) if state_path.is_file() and not args.fresh else {}
    if state.get("steps", args.steps) != args.steps:
        state = {}
    tree = scratch / "nanogpt"
    if not state.get("commit") or not (tree / "data" / "shakespeare_char" / "val.bin").is_file():
        state = {"commit": copy_nanogpt(args.nanogpt, tree), "steps": args.steps, "pairs": {}}
        prepare_nanogpt_data(tree, args.input)
        log(f"nanoGPT {state['commit'][:12]} copied to {tree}; data prepared by its prepare.py")
    pairs = state.setdefault("pairs", {})
    for k in range(args.first, args.first + args.seeds):
        if str(k) in pairs:
            log(f"seed {1337 + k}: both runs already done, kept")
            continue
        log(f"seed {1337 + k}: nanoGPT ...")
        ng = run_nanogpt(tree, scratch, k, args.steps, args.threads)
        log(f"seed {1337 + k}: nanoGPT {ng['wall_s']:.1f} s, logged val {ng['logged_val']}; reslab ...")
        rs = run_reslab(scratch, k, args.steps, args.threads, args.input)
        log(f"seed {1337 + k}: reslab {rs['wall_s']:.1f} s, logged val {rs['logged_val']}")
        pairs[str(k)] = {"nanogpt": ng, "reslab": rs, "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
        state_path.write_text(json.dumps(state, indent=2))
    chosen = {int(k): v for k, v in pairs.items() if args.first <= int(k) < args.first + args.seeds}
    evaluate_all(chosen, tree, args.steps)
    summary = report(chosen)
    result = {"nanogpt_commit": state["commit"], "steps": args.steps, "threads": args.threads,
              "input": str(args.input), "nanogpt_flags": NANOGPT_FLAGS, "pairs": chosen, "summary": summary,
              "torch_threads_env": args.threads, "cpu_count": os.cpu_count(),
              "load_avg_end": os.getloadavg() if hasattr(os, "getloadavg") else None}
    text = json.dumps(result, indent=2)
    (scratch / "nanogpt_gap.json").write_text(text)
    if args.json:
        args.json.write_text(text)
    log(f"results: {scratch / 'nanogpt_gap.json'}")
    return 0


ARGS = None

if __name__ == "__main__":
    sys.exit(main())
