"""Where and how a run computes (process group, device, precision), and what the machine and the
data must offer before anything is written: preflight, the compiler for train.compile, the splits."""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass

import torch

from ..data import prepare_dataset
from ..errors import ReslabError
from . import distributed
from .config import RunConfig
from .determinism import set_determinism, set_flush_denormal


def _device(cfg: RunConfig) -> torch.device:
    want = cfg.train.device
    if want == "cuda" or (want == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ReslabError("train.device: 'cuda' was asked for but no CUDA device is available")
        return torch.device("cuda")
    return torch.device("cpu")


def _dtype(cfg: RunConfig, device: torch.device) -> str:
    if cfg.train.dtype != "auto":
        if cfg.train.dtype != "float32" and device.type == "cpu":
            raise ReslabError(f"train.dtype: {cfg.train.dtype} autocast is for CUDA; use float32 on CPU")
        return cfg.train.dtype
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return "bfloat16"
    return "float32"


@dataclass
class Runtime:
    """Where and how the run computes: process group, device, precision."""
    dist: distributed.Dist
    device: torch.device
    dtype: str                 # float32 / bfloat16 / float16
    amp_dtype: torch.dtype | None

    def autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    @property
    def device_name(self) -> str:
        """The name MFU looks the peak FLOP/s up by."""
        return torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"


def runtime(cfg: RunConfig) -> Runtime:
    t_cfg = cfg.train
    device = _device(cfg)
    d = distributed.setup(device.type)
    if device.type == "cuda":
        device = torch.device("cuda", d.local_rank)
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = t_cfg.tf32
        torch.backends.cudnn.allow_tf32 = t_cfg.tf32
    if t_cfg.threads:
        torch.set_num_threads(t_cfg.threads)
    set_determinism(t_cfg.deterministic)
    set_flush_denormal(t_cfg.flush_denormal)
    dtype = _dtype(cfg, device)
    return Runtime(d, device, dtype, {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype))


def preflight(cfg: RunConfig) -> None:
    """What this machine must offer the run, checked before anything is written (also by sweeps
    before they start workers): the device, its precision, a compiler for train.compile."""
    device = _device(cfg)
    _dtype(cfg, device)
    problem = compiler_problem(device.type) if cfg.train.compile else None
    if problem:
        raise ReslabError(f"train.compile: {problem}; install one, or set train.compile = false")


def compiler_problem(device_type: str) -> str | None:
    """Why torch.compile could not build kernels here, or None. Looked for as inductor does, so the
    run is refused before training instead of failing at its first step: CPU kernels are C++, built
    by $CXX, else g++ (torch/_inductor/config.py cpp.cxx, which it can also install from conda when
    TORCH_INDUCTOR_INSTALL_GXX is set); CUDA kernels are Triton's, whose launcher is built by $CC,
    else gcc or clang (triton/runtime/build.py)."""
    if device_type == "cuda":
        found = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
        return None if found and shutil.which(found) else \
            "torch.compile needs a C compiler for Triton on CUDA and found none ($CC, gcc, clang)"
    if os.environ.get("TORCH_INDUCTOR_INSTALL_GXX"):
        return None
    cxx = os.environ.get("CXX") or "g++"
    if shutil.which(cxx):
        return None
    where = f"$CXX={cxx!r} is not an executable" if os.environ.get("CXX") else \
        "$CXX is unset and g++ is not on PATH"
    return f"torch.compile needs a C++ compiler for CPU kernels and found none ({where})"


def prepare_data(cfg: RunConfig, d: distributed.Dist, log):
    if not d.main:
        distributed.barrier(d)  # rank 0 prepares (or finds) the shards first; the others reuse them
    data = prepare_dataset(cfg.data, progress=d.main, log=log if d.main else (lambda *_: None))
    if d.main:
        distributed.barrier(d)
    return data


def check_splits(cfg: RunConfig, data) -> None:
    """A batch is block_size + 1 consecutive tokens (inputs and shifted targets), so each split must
    hold that many; otherwise the first batch would fail with the run folder already written."""
    need = cfg.model.block_size + 1
    for split, tokens in (("train", data.train), ("val", data.val)):
        if len(tokens) < need:
            count = f"{len(tokens):,} token{'s' * (len(tokens) != 1)}"
            raise ReslabError(f"data: the {split} split has {count}, fewer than model.block_size + 1 = {need:,} "
                              f"({data.folder}); use a longer corpus, another data.val_fraction or a smaller "
                              "model.block_size")
