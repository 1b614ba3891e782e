"""Seeds and random streams. Model init, training batch order, dropout and evaluation each have
their own stream derived from the run's seed, so changing one never shifts another."""

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
