"""Data parallelism under torchrun: one process per device, DDP over the model.

Every process draws the global micro-batches (step, m) with m = rank * grad_accum + i, so N
processes with grad_accum a see exactly the batches of one process with grad_accum N * a.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1


def setup(device_type: str) -> Dist:
    """Join the process group when launched by torchrun; a single process otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Dist()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
    return Dist(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=int(os.environ.get("LOCAL_RANK", "0")))


def teardown(d: Dist) -> None:
    if d.active and dist.is_initialized():
        dist.destroy_process_group()


def barrier(d: Dist) -> None:
    if d.active:
        dist.barrier()


def mean_across(d: Dist, value: torch.Tensor) -> torch.Tensor:
    if d.active:
        value = value.clone()
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        value /= d.world
    return value


def gather_objects(d: Dist, obj):
    if not d.active:
        return [obj]
    out = [None] * d.world
    dist.all_gather_object(out, obj)
    return out


def wrap(model: torch.nn.Module, d: Dist, device: torch.device) -> torch.nn.Module:
    if not d.active:
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
