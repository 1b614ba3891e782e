"""Section 6 of the card, cost: what a design costs beside its baselines in parameters, activation
memory and training speed, each figure also as a ratio to the baseline's from the same run.

    measure_cost(models, baseline, batch_size=...) -> dict   (JSON-able: the card's cost at one depth)

Its measuring pieces are the ones bench/bench_designs.py and bench/bench_depth_memory.py use, so the
card and the benches measure alike:

    saved_bytes(model, x, y)          bytes autograd keeps for the backward of one forward + loss
    forward_backward(model, x, y)     seconds of forward + loss + backward
    train_step(trainee, x, y)         one timed training step, as the training loop takes it
    round_order(items, r)             round r's order of an interleaved measurement
    same_round_ratios(base, mine)     each round's baseline step over a design's step in that round
    time_rounds(trainees, x, y, ...)  interleaved, rotated timing of several models
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NoReturn

import torch

from ..errors import ConfigError, ReslabError
from ..model.config import ModelConfig
from ..model.gpt import GPT
from ..report.stats import median_interval

LR = 1e-3  # AdamW's rate while timing: a step's cost does not depend on it
RATIOS = ("params", "saved_bytes", "tokens_per_s", "peak_bytes")  # peak_bytes: CUDA only


def saved_bytes(model, x: torch.Tensor, y: torch.Tensor) -> int:
    """Bytes of every distinct storage autograd saves during one forward + loss: the activations,
    and the weights a matmul keeps for its input's gradient. A storage saved by several operations,
    or through several views, is counted once, so the figure follows from the shapes alone: the same
    on any machine and with any allocator."""
    seen: dict[int, int] = {}

    def pack(t):
        if t.device.type != "meta":
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _, loss = model(x, y)
    loss.backward()  # releases the saved tensors; the gradients are not wanted
    model.zero_grad(set_to_none=True)
    return sum(seen.values())


def _sync(x: torch.Tensor) -> None:
    if x.is_cuda:  # CUDA kernels run asynchronously: the clock is read only once they are done
        torch.cuda.synchronize()


def forward_backward(model, x: torch.Tensor, y: torch.Tensor) -> float:
    """Seconds of forward + loss + backward of one batch; the gradients are left to the caller."""
    _sync(x)
    t0 = time.perf_counter()
    _, loss = model(x, y)
    loss.backward()
    _sync(x)
    return time.perf_counter() - t0


@dataclass
class Trainee:
    """A model being timed, its optimizer, and its timed steps so far (seconds)."""

    model: torch.nn.Module
    opt: torch.optim.Optimizer
    step: int = 0                     # optimizer updates done (set_step's t)
    warmed: bool = False
    fwd_bwd: list = field(default_factory=list)
    full: list = field(default_factory=list)
    cpu: list = field(default_factory=list)            # process CPU seconds of each whole step
    round_medians: list = field(default_factory=list)  # ms: each round's median step (drift check)

    @classmethod
    def of(cls, model: torch.nn.Module, lr: float = LR) -> Trainee:
        return cls(model, torch.optim.AdamW(model.parameters(), lr=lr))


def train_step(t: Trainee, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float, float]:
    """One optimizer step as the training loop takes it; returns (forward + backward s, whole step s,
    process CPU s of the whole step)."""
    c0 = time.process_time()
    t0 = time.perf_counter()
    fb = forward_backward(t.model, x, y)
    t.opt.step()
    t.opt.zero_grad(set_to_none=True)
    t.model.after_optimizer_step()  # nGPT: weights back onto the sphere (a no-op for other designs)
    t.step += 1
    t.model.set_step(t.step)  # ProRes alphas and stochastic depth's draws, as the loop sets them
    _sync(x)
    return fb, time.perf_counter() - t0, time.process_time() - c0


def round_order(items: Sequence, r: int) -> list:
    """Round r's order: the items rotated by r, so that none always runs first (cold caches) or last,
    and a change of machine load hits every item alike."""
    k = r % len(items) if items else 0
    return list(items[k:]) + list(items[:k])


def same_round_ratios(base_round_ms: Sequence[float], round_ms: Sequence[float]) -> list[float]:
    """Each round's speed ratio, the baseline's median step over the design's in the same round (> 1:
    the design is faster). Both terms of a round's ratio were timed minutes apart at most, so a slow
    spell of a shared machine scales both alike, where a ratio of medians over all rounds takes one
    term from a slow spell and the other from a fast one."""
    if len(base_round_ms) != len(round_ms):
        _fail(f"{len(base_round_ms)} baseline rounds against {len(round_ms)} of the design")
    return [b / d for b, d in zip(base_round_ms, round_ms)]


def time_rounds(trainees: Sequence[Trainee], x: torch.Tensor, y: torch.Tensor, *, steps: int, rounds: int,
                warmup: int, after_round: Callable[[int], None] | None = None) -> None:
    """`rounds` rounds, each timing `steps` training steps of every trainee in round_order; `warmup`
    untimed steps precede a trainee's first round only. The garbage collector is held off during a
    trainee's steps, so that its pauses fall between them rather than inside one."""
    for r in range(rounds):
        for t in round_order(trainees, r):
            gc.collect()
            gc.disable()
            try:
                if not t.warmed:
                    for _ in range(warmup):
                        train_step(t, x, y)
                    t.warmed = True
                this_round = []
                for _ in range(steps):
                    fb, full, cpu = train_step(t, x, y)
                    t.fwd_bwd.append(fb)
                    t.full.append(full)
                    t.cpu.append(cpu)
                    this_round.append(full)
                t.round_medians.append(1e3 * statistics.median(this_round))
            finally:
                gc.enable()
        if after_round is not None:
            after_round(r)


def peak_step_bytes(t: Trainee, x: torch.Tensor, y: torch.Tensor) -> int:
    """CUDA only: the most memory one training step allocates above what was allocated before it.
    Every model of the run stays resident with its optimizer state; taking them out makes the
    figure the step's own (activations, gradients, the optimizer's temporaries)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    train_step(t, x, y)
    return torch.cuda.max_memory_allocated() - before


def _fail(message: str) -> NoReturn:
    raise ReslabError(f"measure_cost: {message}")


def _check_arguments(models, baseline, counts: dict, threads, device: str) -> None:
    if not models:
        _fail("no models to measure")
    if baseline not in models:
        _fail(f"baseline {baseline!r} is not one of the models ({', '.join(map(repr, models))})")
    for name, (value, least) in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            _fail(f"{name} must be a whole number >= {least}, got {value!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        _fail(f"threads must be a whole number >= 1 or None, got {threads!r}")
    if device != "cpu" and not device.startswith("cuda"):
        _fail(f"device must be 'cpu' or 'cuda[:n]', got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        _fail(f"device {device!r}, but CUDA is not available here")


def _config(label: str, value) -> ModelConfig:
    if isinstance(value, ModelConfig):
        return value
    if not isinstance(value, Mapping):
        _fail(f"models[{label!r}] must be a model config (a dict or a ModelConfig), got {type(value).__name__}")
    return ModelConfig.from_dict(dict(value), prefix=f"models[{label!r}]")


def _shared_shape(configs: dict[str, ModelConfig]) -> tuple[int, int]:
    """(block_size, vocab_size): one batch is timed on every model, so they must agree."""
    shapes = {label: (c.block_size, c.vocab_size) for label, c in configs.items()}
    if len(set(shapes.values())) > 1:
        _fail("the models must share block_size and vocab_size (one batch for all), got "
              + ", ".join(f"{label} {b}/{v}" for label, (b, v) in shapes.items()))
    return next(iter(shapes.values()))


def _build(label: str, cfg: ModelConfig, seed: int, device: str) -> torch.nn.Module:
    try:
        model = GPT(cfg, seed=seed)
    except ConfigError as exc:  # name the model the refused field belongs to, as _config does
        where = f"models[{label!r}]"
        raise ConfigError([where + line[len("model"):] if line.startswith("model.") else f"{where}: {line}"
                           for line in exc.lines()]) from None
    return model.to(device).train()


METHOD = (
    "Parameters: GPT.param_counts() (a tied head counted once; non-embedding leaves out the token and "
    "position embeddings). Activation memory: the bytes of every distinct storage autograd saves for "
    "the backward pass during one forward + loss of the batch on the freshly initialised model "
    "(torch.autograd.graph.saved_tensors_hooks, each storage counted once, the weights a matmul keeps "
    "included): it follows from the shapes alone, the same on any machine. Speed: a training step is "
    "forward + loss + backward + AdamW step + zero_grad, then the design's after-step projection and "
    "set_step, as the training loop takes it, float32 on {device} with {threads} thread(s); the models "
    "are timed interleaved, {rounds} round(s) of {steps} step(s) each with the order rotated every round, "
    "after {warmup} untimed warm-up step(s), all on one fixed random batch of {batch} x {block} tokens; "
    "step ms is the median of the {timed} timed steps and tokens/s is {tokens} tokens over it.{peak} "
    "Each ratio is the design's figure over {baseline}'s from the same run, except the speed ratio: "
    "it is taken round by round ({baseline}'s median step over the design's in the same round), and the "
    "card gives the median over the rounds with, in brackets, a distribution-free 95% interval for it "
    "(order statistics of the rounds' ratios; none with fewer than 6 rounds), so a slow spell of a "
    "shared machine that falls on one round cannot decide it. Parameter and memory ratios are exact; "
    "a speed ratio whose interval spans 1 does not say which is faster."
)
PEAK = (" Peak: torch.cuda.max_memory_allocated over one more training step, less what was allocated "
        "before it (every model and optimizer state of the run stays resident).")


def measure_cost(models: Mapping[str, Mapping | ModelConfig], baseline: str, *, batch_size: int,
                 steps: int = 3, rounds: int = 3, warmup: int = 1, threads: int | None = None,
                 seed: int = 0, device: str = "cpu") -> dict:
    """Parameters, saved activation bytes and training-step speed of every model (label -> a model
    config, as a dict or a ModelConfig), each also as a ratio to `baseline`'s, all measured in this
    process. `threads` sets torch's threads for the measurement (None: as they are); `seed` draws the
    models' initial weights and the batch."""
    counts = {"batch_size": (batch_size, 1), "steps": (steps, 1), "rounds": (rounds, 1), "warmup": (warmup, 0),
              "seed": (seed, 0)}
    _check_arguments(models, baseline, counts, threads, device)
    configs = {label: _config(label, value) for label, value in models.items()}
    block, vocab = _shared_shape(configs)
    threads_before = torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        data = torch.randint(0, vocab, (batch_size, block + 1), generator=torch.Generator().manual_seed(seed))
        x, y = data[:, :-1].contiguous().to(device), data[:, 1:].contiguous().to(device)
        trainees = {label: Trainee.of(_build(label, cfg, seed, device)) for label, cfg in configs.items()}
        rows = {}
        for label, t in trainees.items():
            counted = t.model.param_counts()
            rows[label] = {"params": counted["total"], "params_non_emb": counted["non_embedding"],
                           "saved_bytes": saved_bytes(t.model, x, y)}
        time_rounds(list(trainees.values()), x, y, steps=steps, rounds=rounds, warmup=warmup)
        for label, t in trainees.items():
            step_s = statistics.median(t.full)
            rows[label].update(step_ms=1e3 * step_s, tokens_per_s=batch_size * block / step_s)
            if device.startswith("cuda"):
                rows[label]["peak_bytes"] = peak_step_bytes(t, x, y)
        for label, t in trainees.items():
            rows[label]["tokens_per_s_by_round"] = same_round_ratios(trainees[baseline].round_medians, t.round_medians)
        used_threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads_before)
    base = rows[baseline]
    for row in rows.values():
        row["ratios"] = {k: row[k] / base[k] for k in RATIOS if k in row}
        row["ratios"]["tokens_per_s_same_round"] = statistics.median(row["tokens_per_s_by_round"])
        interval = median_interval(row["tokens_per_s_by_round"])
        row["tokens_per_s_interval"] = list(interval) if interval else None
    method = METHOD.format(device=device, threads=used_threads, rounds=rounds, steps=steps, warmup=warmup,
                           batch=batch_size, block=block, timed=rounds * steps, tokens=batch_size * block,
                           peak=PEAK if device.startswith("cuda") else "", baseline=baseline)
    return {"baseline": baseline, "threads": used_threads, "device": device, "batch_size": batch_size,
            "block_size": block, "steps": steps, "rounds": rounds, "warmup": warmup, "seed": seed,
            "rows": rows, "method": method}
