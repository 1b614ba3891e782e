"""Data parallelism under torchrun: one process per device, DDP over the model.

Every process draws the global micro-batches (step, m) with m = rank * grad_accum + i, so N
processes with grad_accum a see exactly the batches of one process with grad_accum N * a.
"""

from __future__ import annotations

import gc
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


def teardown(d: Dist, finished: bool) -> None:
    """Leave the process group in order. A rank that finished waits for the others first, so none
    exits while a peer still writes its last checkpoint through it; one that failed leaves at once
    (its peers may be gone, and a barrier would hang). FSDP's modules hold the group in reference
    cycles: collecting them now destroys gloo's work objects while the interpreter is whole, not
    during its shutdown, where freeing them aborts the process ("terminate called without an
    active exception")."""
    if not (d.active and dist.is_initialized()):
        return
    if finished:
        dist.barrier()
    gc.collect()
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


def wrap(model: torch.nn.Module, d: Dist, device: torch.device, parallel: str = "ddp") -> torch.nn.Module:
    """DDP replicates the model; FSDP2 (fully_shard per block, then the root) shards parameters,
    gradients and optimizer state across processes, for models too large to replicate."""
    if not d.active:
        return model
    if parallel == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)


def sharded(d: Dist, parallel: str) -> bool:
    return d.active and parallel == "fsdp"


def gather_full_state(model, optimizer=None) -> tuple[dict, dict | None]:
    """Full (unsharded) model state and optimizer tensors of an FSDP model, on rank 0's CPU.
    Collective: every rank calls it. Optimizer tensors use checkpoint.py's "<param name>/<moment>" keys."""
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_optimizer_state_dict)

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_sd = get_model_state_dict(model, options=options)
    if optimizer is None:
        return model_sd, None
    osd = get_optimizer_state_dict(model, optimizer, options=options)
    # With cpu_offload only rank 0 receives the tensors; the other ranks get empty dicts.
    tensors = {f"{name}/{key}": value for name, moments in osd.get("state", {}).items()
               for key, value in moments.items()}
    return model_sd, tensors


def load_sharded_optimizer(model, optimizer, tensors: dict, groups: list) -> None:
    """Load checkpoint.py-format optimizer tensors into an FSDP model's optimizer (collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    state: dict = {}
    for key, value in tensors.items():
        name, moment = key.split("/", 1)
        state.setdefault(name, {})[moment] = value
    osd = {"state": state, "param_groups": [dict(g, params=list(g["names"])) for g in groups]}
    set_optimizer_state_dict(model, optimizer, osd, options=StateDictOptions(full_state_dict=True))
