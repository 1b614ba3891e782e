"""A sweep spec: one TOML file declaring many runs, and its expansion into planned runs.

    name = "partial-residual"
    preset = "tiny"                      # optional: start from a built-in preset
    seeds = [1337, 42]
    baseline = "full"                    # the variant the report compares against

    [base.train]                         # overrides for every run (any RunConfig table)
    steps = 600
    [variants.full]                      # named variants, each a set of overrides ({} = the base)
    [variants.attn-only.model]
    ffn_res = false
    [scales.tiny.train]                  # optional named scales, picked with --scale
    steps = 600
    [grid]                               # optional axes: the cartesian product of their values
    "optim.lr" = [1e-3, 3e-3]            #   a dotted key and its values, or
    [grid.convention.nanogpt]            #   a named axis of named override tables
    model.tie_embeddings = true
    [grid.convention.residualgpt]
    model.tie_embeddings = false

One run = scale x variant x grid point x seed (the spec's seeds, and for the rows a
[[more_seeds]] entry selects, its seeds too: more_seeds.py), but for the rows an [[exclude]]
entry leaves out (exclude.py). Its config is merged in this order (later wins):
preset (or the scale's own, scale_presets), base, scale, variant, grid point, overrides (--set),
then train.seed = seed. Its identity is a hash of that
fully resolved config (its display name left out), so the same run is never trained twice and
two different runs never share a folder.

This module holds the tables as typed records and the few rules of their values that need no
other table; check.py checks them against each other, load.py parses a file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Optional

from ..typed import Typed

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")  # spec, variant and scale names become folder names
SMOKE_SCALE = "smoke"  # reserved for pipeline tests: never a result
NOT_A_RESULT = "smoke: not a result"


def is_result_scale(scale: str | None) -> bool:
    """Whether a report at this scale may state results (tests, p-values, verdicts). The one place
    that rule lives: the smoke scale only checks that the pipeline runs end to end."""
    return scale != SMOKE_SCALE


@dataclass(frozen=True)
class SlurmConfig:
    """[slurm]: how `--executor slurm` asks for resources (one array task per run)."""
    partition: Optional[str] = None
    account: Optional[str] = None
    time_min: int = 240
    gpus_per_run: int = 1              # > 1: the task launches torchrun with this many processes
    cpus_per_task: int = 8
    mem_gb: Optional[int] = None
    max_parallel: Optional[int] = None  # array parallelism (default: --jobs)


@dataclass(frozen=True)
class Published:
    """A published number shown beside ours in the report, labelled with where it comes from."""
    variant: str
    value: float
    source: str
    setup: str
    metric: str = "best val loss"


@dataclass(frozen=True)
class Sensitivity:
    """[report] sensitivity: a learning-rate grid's sensitivity per design (report/tuning.py)."""
    axis: str = "optim.lr"             # the grid axis the sensitivity is taken over
    cap: Optional[float] = None        # nats; a run's loss counts at most this (default: the corpus's unigram entropy)
    cap_reason: str = ""               # why this cap, printed beside it in the report
    metric: Literal["final_val_loss", "best_val_loss"] = "final_val_loss"


@dataclass(frozen=True)
class ReportOptions:
    """[report]: what the report needs to know about this experiment."""
    no_skip: Optional[str] = None      # the variant with no skips: the collapse rule's reference
    collapse_margin: float = 0.1       # nats: a run this close to the no-skip loss / unigram entropy collapsed
    published: list[Published] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    probe: Optional[dict] = None       # init-time probe settings to run beside the sweep (studies)
    sensitivity: Optional[Sensitivity] = None  # learning-rate sensitivity over a grid axis


@dataclass(frozen=True)
class Estimate:
    """What one scale of a built-in study cost when measured: the whole default study, `jobs` workers."""
    runs: int
    jobs: int = 2
    cpu_minutes: Optional[float] = None   # wall minutes on the 2-core CPU this was measured on
    gpu_hours: Optional[float] = None     # a planning figure for GPU scales (says how it was obtained)
    basis: str = ""                       # where the figure comes from (measured on ... / estimated from ...)


@dataclass(frozen=True)
class StudyInfo:
    """[study]: what a built-in study is for (shown by `reslab study list`)."""
    source: str                           # the paper or seed document it reproduces
    designs: list[str] = field(default_factory=list)
    seeds: dict[str, int] = field(default_factory=dict)  # scale -> how many seeds `study run` uses by default
    estimates: dict[str, Estimate] = field(default_factory=dict)  # scale -> cost


@dataclass(frozen=True)
class TuneRow:
    """[[tune.rows]]: the values and/or tuning seeds of the rows that `match` selects (a variant
    and/or grid points, written as a claim's cell is), in place of tune.values / tune.seeds; the
    first entry that matches wins. An entry that leaves one out keeps [tune]'s."""
    match: dict
    values: Optional[list] = None
    seeds: Optional[list[int]] = None   # more tuning seeds where a row trains on some seeds only

    def __post_init__(self):
        if self.values is not None and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                           for v in self.values):
            object.__setattr__(self, "values", sorted(self.values))


@dataclass(frozen=True)
class TuneOptions:
    """[tune]: before a scale's comparison runs, each row (variant x grid point) trains at every
    value of `axis` on the tuning seeds; each row's comparison runs then use its best value
    (tune.py, tune_plan.py; the choice from the store: sweep/tune.py). Values are kept sorted
    ascending (the tie rule prefers the smaller)."""
    axis: str
    values: list
    seeds: list[int]
    metric: Literal["best_val_loss", "final_val_loss"] = "best_val_loss"
    scales: Optional[list[str]] = None  # the scales that tune (default: every scale)
    extend: int = 0  # a row whose best value is an end of its grid tries up to this many values beyond it
    rows: list[TuneRow] = field(default_factory=list)  # [[tune.rows]]: some rows' own values or seeds

    def __post_init__(self):
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.values):
            object.__setattr__(self, "values", sorted(self.values))  # non-numbers: check_tune reports them

    def tunes(self, scale: str) -> bool:
        return self.scales is None or scale in self.scales


@dataclass(frozen=True)
class MoreSeeds:
    """One [[more_seeds]] entry: the rows `match` selects also train on `seeds`."""
    match: dict
    seeds: list[int]
    scales: Optional[list[str]] = None  # the scales it applies to (default: every scale)



@dataclass(frozen=True)
class Exclude:
    """One [[exclude]] entry: the rows `match` selects are not run (exclude.py)."""
    match: dict
    scales: Optional[list[str]] = None  # the scales it applies to (default: every scale)


@dataclass(frozen=True)
class Ladder:
    """[ladder]: the same comparison at several model sizes (rungs), to see how an effect changes as
    the model grows (ladder.py). Each rung is a named override table (the size: width, depth, heads,
    context as the study chooses), one more grid axis named "rung"; its token budget is
    tokens_per_param x N at the scale's smallest rung, times (N / N_smallest)^exponent (1: tokens
    proportional to parameters; 0: the same tokens at every rung), N the rung's non-embedding
    weights; the ladder sets train.steps from it."""
    rungs: dict[str, dict]                 # rung name -> overrides, smallest first
    tokens_per_param: float
    exponent: float = 1.0
    scale_rungs: dict[str, list[str]] = field(default_factory=dict)  # scale -> the rungs it runs (default: all)
    scale_tokens_per_param: dict[str, float] = field(default_factory=dict)  # scale -> its own tokens_per_param
    evals: Optional[int] = None            # evaluations per run: eval_interval = ceil(steps / evals)
    over: str = ""                         # what grows between rungs, in words (plans, figures)


@dataclass(frozen=True)
class SweepSpec(Typed):
    name: str
    seeds: list[int]
    variants: dict[str, dict]
    description: str = ""
    question: str = ""
    preset: Optional[str] = None
    scale_presets: dict[str, str] = field(default_factory=dict)  # scale -> preset it starts from instead
    base: dict = field(default_factory=dict)
    baseline: Optional[str] = None
    scales: dict[str, dict] = field(default_factory=dict)
    default_scales: Optional[list[str]] = None  # the scales run when --scale is not given (default: all)
    scale_variants: dict[str, list[str]] = field(default_factory=dict)  # scale -> the only variants it runs
    scale_grid: dict[str, dict] = field(default_factory=dict)  # scale -> the grid it runs instead of `grid`
    grid: dict = field(default_factory=dict)   # axis -> list of values, or {point name: overrides}
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    report: ReportOptions = field(default_factory=ReportOptions)
    study: Optional[StudyInfo] = None
    tune: Optional[TuneOptions] = None  # [tune]: each design's own learning rate first (tune.py, tune_plan.py)
    # [[claims]]: published claims the report rules on, as written (claims.py reads each into a Claim)
    claims: list[dict] = field(default_factory=list)
    more_seeds: list[MoreSeeds] = field(default_factory=list)  # [[more_seeds]]: some rows' extra seeds (more_seeds.py)
    exclude: list[Exclude] = field(default_factory=list)  # [[exclude]]: rows of the grid left out (exclude.py)
    ladder: Optional[Ladder] = None  # [ladder]: the comparison at several model sizes (ladder.py)
    overrides: dict = field(default_factory=dict)  # applied to every run last (`--set` on the command line)


def check_seed_list(seeds: list[int], where: str, example: str, errors: list[str]) -> None:
    """A list of seeds (the spec's, or [tune]'s): at least one, non-negative, none repeated."""
    if not seeds:
        errors.append(f"{where}: must list at least one seed, e.g. {where.rsplit('.', 1)[-1]} = {example}")
    if any(s < 0 for s in seeds):
        errors.append(f"{where}: must be non-negative integers, got {seeds}")
    if len(set(seeds)) != len(seeds):
        errors.append(f"{where}: {seeds} repeats a seed; each seed is one run")

