"""Seeds and random streams. Model init, training batch order, dropout and evaluation each have
their own stream derived from the run's seed, so changing one never shifts another.

And the arithmetic a run's numbers depend on besides its config: a run retrains bit for bit only
with the same torch, the same CPU vector instructions (or GPU), the same number of CPU threads,
which decides the order of every reduction, and the same handling of subnormal floats
(train.flush_denormal). None of these is part of a run's identity (a sweep sets the threads
itself), so the run folder records them (status.json "arithmetic")."""

from __future__ import annotations

import base64
import hashlib
import os

import torch


def derive_seed(seed: int, stream: str) -> int:
    """A 63-bit seed for `stream` ("init", "data", "dropout") that does not collide across seeds."""
    digest = hashlib.sha256(f"reslab:{seed}:{stream}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def set_determinism(deterministic: bool) -> None:
    """Framework switches for bit-exact reruns (CPU runs are deterministic without them)."""
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=False)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


_FLUSHING = {"on": False}   # what set_flush_denormal last set in this process (torch cannot be asked)


def set_flush_denormal(on: bool) -> None:
    """Subnormal floats (below 1.2e-38 in float32) read and written as zero on the CPU (x86 FTZ/DAZ).
    Why on by default: a model that collapses (saturated tanh / erf norms, vanishing gradients) fills
    its gradients and Adam moments with subnormals, which x86 computes on in microcode: measured 9x
    slower for a collapsed Derf model (bench/bench_denormal.py, docs/performance.md). Like the
    threads, it is part of a run's arithmetic, not of its identity: a run that never produces a
    subnormal computes the same numbers either way, and one that does moves a little (depth-mixing,
    2026-12-06: 11 of its 75 runs, comparison runs by at most 0.004 nats). status.json records it.
    Only the CPU: GPUs flush in their own kernels."""
    supported = torch.set_flush_denormal(bool(on))   # False where the CPU has no FTZ/DAZ (not x86 SSE3)
    _FLUSHING["on"] = bool(on) and supported


def rng_state() -> dict:
    """The global torch RNG states (only dropout draws from them), as JSON-ready strings."""
    state = {"torch_cpu": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode()}
    if torch.cuda.is_available():
        state["cuda"] = [base64.b64encode(s.numpy().tobytes()).decode() for s in torch.cuda.get_rng_state_all()]
    return state


def _tensor(b64: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(b64)), dtype=torch.uint8).clone()


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(_tensor(state["torch_cpu"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_tensor(s) for s in state["cuda"]])


def arithmetic(device: torch.device) -> dict:
    """What the floating-point results depend on besides the config: torch's version, the CPU
    kernels' instruction set (torch's CPU capability, e.g. AVX2, AVX512), the intra-op threads and
    whether subnormals are flushed, or the GPU's name."""
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(),
           "cpu_capability": torch.backends.cpu.get_cpu_capability(), "flush_denormal": _FLUSHING["on"]}
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    return out


def record_arithmetic(previous: list | None, current: dict, step: int) -> list:
    """status.json's "arithmetic": one entry per stretch of updates trained the same way, [{"from_step",
    **arithmetic}]; a resume that trains the same way adds nothing, one that does not (other threads,
    another machine) adds an entry from its first step, so a run's numbers can be traced to how they
    were computed."""
    entries = [e for e in previous or [] if isinstance(e, dict) and e.get("from_step", 0) < step]
    if entries and {k: v for k, v in entries[-1].items() if k != "from_step"} == current:
        return entries
    return entries + [{"from_step": step, **current}]
