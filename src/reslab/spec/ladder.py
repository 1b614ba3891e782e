"""[ladder]: one comparison at several model sizes, so a report can say how an effect changes as
the model grows.

    [ladder]
    over = "width"                      # what grows between rungs, in words
    tokens_per_param = 1.0              # the smallest rung trains on 1.0 x N tokens ...
    exponent = 0.5                      # ... and a rung N times as large on N^0.5 times as many
    evals = 5                           # optional: evaluations per run (eval_interval = ceil(steps / 5))
    scale_rungs = { smoke = ["s16", "s24", "s32"] }   # optional: scale -> the rungs it runs
    [ladder.rungs.w64.model]            # one named override table per rung, smallest first
    n_embd = 64
    [ladder.rungs.w128.model]
    n_embd = 128

A rung is one more grid axis, named "rung", in front of the scale's own axes: every row (variant x
grid point) runs at every rung, [tune] chooses a learning rate per rung (a tuning row includes its
rung), claims name a rung like any grid value (a = { variant = "x", rung = "w128" }) and a trend
claim (kind = "trend") rules on how a - b changes over the rungs (report/trend.py).

N, a rung's size, is its non-embedding weight count as the rung configures the model before any
variant: n_layer x (4 d^2 + 2 d h), d = n_embd, h the MLP's hidden width (3 d h for a gated MLP) -
the weights of a Pre-LN block's attention and MLP, biases and norms left out (Kaplan et al. 2020).
It is the same for every variant at a rung, so every design at a rung gets the same token budget,
and a design that adds a few parameters (hyper-connections' stream weights) is not moved along
the x axis. The budget, in tokens,

    tokens(rung) = tokens_per_param x N_0 x (N / N_0)^exponent,    N_0 = the scale's smallest rung,

becomes train.steps = round(tokens / (batch_size x block_size x grad_accum)), at least 1, set after
the grid point (the base, a rung or a variant cannot also set train.steps; a --set can, for a quick
look, and wins). Its identity is its config's,
as for every run: a rung that resolves to a run a study already trained reuses it.
"""

from __future__ import annotations

import math

from ..errors import ConfigError
from ..train.config import RunConfig, build_run_config
from ..typed import deep_merge
from .grid import check_overrides, scale_base
from .schema import NAME_RE, Ladder, SweepSpec

RUNG_AXIS = "rung"
MAX_TOKENS_PER_PARAM = 1e6


def rungs_at(spec: SweepSpec, scale: str) -> list[str]:
    """The rungs a scale runs, smallest first ([] without a ladder)."""
    ladder = spec.ladder
    if ladder is None:
        return []
    return list(ladder.scale_rungs.get(scale, list(ladder.rungs)))


def effective_grid(spec: SweepSpec, scale: str) -> dict:
    """The grid a scale runs: its own (scale_grid, else grid), after the ladder's rung axis."""
    own = spec.scale_grid.get(scale, spec.grid)
    names = rungs_at(spec, scale)
    if not names:
        return own
    return {RUNG_AXIS: {n: spec.ladder.rungs[n] for n in names}, **own}


def rung_config(spec: SweepSpec, scale: str, rung: str) -> RunConfig:
    """The config of a rung before any variant or grid point: what its size and budget are read from."""
    return build_run_config(deep_merge(scale_base(spec, scale), spec.ladder.rungs[rung]),
                            where=f"ladder.rungs.{rung}" + (f" at scale {scale}" if scale else ""))


def non_embedding_params(cfg: RunConfig) -> int:
    """N: n_layer x (4 d^2 + 2 d h), 3 d h for a gated MLP (see the module docstring)."""
    m = cfg.model
    d, h = m.n_embd, m.mlp_hidden
    return m.n_layer * (4 * d * d + (3 if m.mlp == "swiglu" else 2) * d * h)


def tokens_per_update(cfg: RunConfig) -> int:
    return cfg.train.batch_size * cfg.model.block_size * cfg.train.grad_accum


def rung_sizes(spec: SweepSpec, scale: str) -> dict[str, int]:
    """rung -> N at this scale, smallest rung first."""
    return {r: non_embedding_params(rung_config(spec, scale, r)) for r in rungs_at(spec, scale)}


def rung_tokens(spec: SweepSpec, scale: str, sizes: dict[str, int] | None = None) -> dict[str, float]:
    """rung -> its token budget at this scale."""
    ladder = spec.ladder
    sizes = sizes if sizes is not None else rung_sizes(spec, scale)
    if not sizes:
        return {}
    k = ladder.scale_tokens_per_param.get(scale, ladder.tokens_per_param)
    n0 = next(iter(sizes.values()))
    return {r: k * n0 * (n / n0) ** ladder.exponent for r, n in sizes.items()}


def budget(spec: SweepSpec, scale: str, rung: str, cfg: RunConfig, tokens: float) -> dict:
    """The overrides the ladder sets on one run of `rung`: train.steps from the rung's tokens and
    the run's own tokens per update, and eval_interval when [ladder] evals is given."""
    steps = max(1, round(tokens / tokens_per_update(cfg)))
    train: dict = {"steps": steps}
    if spec.ladder.evals:
        train["eval_interval"] = max(1, math.ceil(steps / spec.ladder.evals))
    return {"train": train}


def check_ladder(spec: SweepSpec, errors: list[str]) -> None:
    """[ladder]'s own rules and its references to the spec's scales and grid."""
    ladder = spec.ladder
    if ladder is None:
        return
    for where, grid in [("grid", spec.grid)] + [(f"scale_grid.{s}", g) for s, g in spec.scale_grid.items()]:
        if RUNG_AXIS in grid:
            errors.append(f"{where}.{RUNG_AXIS}: the ladder's axis is named {RUNG_AXIS!r}; give the grid axis "
                          "another name")
    if spec.tune and spec.tune.axis.startswith("train.steps"):
        errors.append("tune.axis: the ladder sets train.steps from each rung's token budget; tune another key")
    if len(ladder.rungs) < 2:
        errors.append(f"ladder.rungs: a ladder needs at least 2 rungs, got {len(ladder.rungs)}")
    for name, table in ladder.rungs.items():
        if not NAME_RE.match(name):
            errors.append(f"ladder.rungs.{name}: the name must be letters, digits, '_', '.', '+' or '-'")
        if not isinstance(table, dict):
            errors.append(f"ladder.rungs.{name}: expected a table of overrides")
            continue
        check_overrides(table, f"ladder.rungs.{name}", errors)
    for where, table in ([("base", spec.base)]
                         + [(f"variants.{n}", t) for n, t in spec.variants.items()]
                         + [(f"ladder.rungs.{n}", t) for n, t in ladder.rungs.items() if isinstance(t, dict)]):
        if isinstance(table.get("train"), dict) and "steps" in table["train"]:
            errors.append(f"{where}.train.steps: the ladder sets each rung's train.steps from its token budget "
                          "(ladder.tokens_per_param, ladder.exponent); remove it")
    known_scales = ", ".join(sorted(spec.scales)) or "none declared"
    if not 0 < ladder.tokens_per_param <= MAX_TOKENS_PER_PARAM:
        errors.append(f"ladder.tokens_per_param: must be in (0, {MAX_TOKENS_PER_PARAM:g}], got {ladder.tokens_per_param}")
    for s, k in ladder.scale_tokens_per_param.items():
        if s not in spec.scales:
            errors.append(f"ladder.scale_tokens_per_param.{s}: unknown scale; scales are {known_scales}")
        if not 0 < k <= MAX_TOKENS_PER_PARAM:
            errors.append(f"ladder.scale_tokens_per_param.{s}: must be in (0, {MAX_TOKENS_PER_PARAM:g}], got {k}")
    if not 0 <= ladder.exponent <= 2:
        errors.append(f"ladder.exponent: must be in [0, 2] (1: tokens proportional to parameters, 0: the same "
                      f"tokens at every rung), got {ladder.exponent}")
    if ladder.evals is not None and ladder.evals < 1:
        errors.append(f"ladder.evals: must be at least 1, got {ladder.evals}")
    for s, names in ladder.scale_rungs.items():
        if s not in spec.scales:
            errors.append(f"ladder.scale_rungs.{s}: unknown scale; scales are {known_scales}")
        unknown = [n for n in names if n not in ladder.rungs]
        if unknown:
            errors.append(f"ladder.scale_rungs.{s}: unknown rung {unknown[0]!r}; rungs are {', '.join(ladder.rungs)}")
        elif len(names) < 2 or len(set(names)) != len(names):
            errors.append(f"ladder.scale_rungs.{s}: give at least 2 different rungs, got {names}")
    if any(e.startswith(("ladder.", "grid.rung", "scale_grid.")) for e in errors):
        return  # sizes need valid rungs
    for scale in spec.scales or [""]:
        try:
            sizes = rung_sizes(spec, scale)
        except ConfigError as e:
            errors.append(e.errors[0])
            continue
        order = list(sizes.values())
        if any(b <= a for a, b in zip(order, order[1:])):
            listed = ", ".join(f"{r} {n:,}" for r, n in sizes.items())
            errors.append(f"ladder.rungs: at scale {scale or '(none)'} each rung must be larger than the one before "
                          f"(non-embedding weights: {listed}); list them smallest first")


def _short(n: float) -> str:
    for div, unit in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:g}"


def ladder_lines(spec: SweepSpec, scales: list[str], runs_per_rung: dict[tuple[str, str], int]) -> list[str]:
    """What `sweep plan` says of the ladder at each scale: every rung's N, tokens and updates, the
    runs it holds and their compute (6 N T per run, the forward and backward weight FLOPs of
    Kaplan et al.), each rung's share, and the study's measured or estimated cost where it has one.
    runs_per_rung: (scale, rung) -> planned runs there (tuning and comparison, known now)."""
    ladder = spec.ladder
    rule = ("the same tokens at every rung" if ladder.exponent == 0 else "tokens proportional to N"
            if ladder.exponent == 1 else f"tokens proportional to N^{ladder.exponent:g}")
    lines = []
    for scale in scales:
        sizes = rung_sizes(spec, scale)
        if not sizes:
            continue
        tokens = rung_tokens(spec, scale, sizes)
        k = ladder.scale_tokens_per_param.get(scale, ladder.tokens_per_param)
        at = f" at scale {scale}" if scale else ""
        lines.append(f"ladder{at}: {ladder.over or 'rungs'}; N = non-embedding weights; {k:g} tokens per weight "
                     f"at the smallest rung, {rule}")
        flops = {r: 6 * n * tokens[r] * runs_per_rung.get((scale, r), 0) for r, n in sizes.items()}
        total = sum(flops.values()) or 1.0
        for r, n in sizes.items():
            cfg = rung_config(spec, scale, r)
            updates = max(1, round(tokens[r] / tokens_per_update(cfg)))
            lines.append(f"  rung {r:<8} N = {n:>13,}  tokens {_short(tokens[r]):>7}  {updates:>7,} updates  "
                         f"{runs_per_rung.get((scale, r), 0):>3} runs  {_short(flops[r])} FLOPs "
                         f"({100 * flops[r] / total:.0f}% of the ladder's compute)")
        est = spec.study.estimates.get(scale) if spec.study else None
        if est is not None:
            cost = (f"~{est.cpu_minutes:g} CPU min" if est.cpu_minutes is not None else
                    f"~{est.gpu_hours:g} GPU h" if est.gpu_hours is not None else "no figure")
            lines.append(f"  estimate{at}: {cost} for {est.runs} runs ({est.basis})")
    return lines
