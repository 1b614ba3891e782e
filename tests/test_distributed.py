"""Data parallelism on CPU: two gloo processes with one micro-batch each equal one process with two,
with DDP and with FSDP2 (whose gathered checkpoints also resume)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
import torch.distributed as dist

import reslab
from tests.test_train import _losses, _vals, _write_toml
from tests.train_helpers import resumed_steps, tiny_run, write_corpus
from tests.kill_helpers import SAFETY_NET_S

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch without gloo")
COMMON = {"train.steps": 12, "train.eval_interval": 6, "model.dropout": 0.0, "train.batch_size": 4}


# Run by torchrun instead of `reslab train`: on each rank, at the first update, it reports how the
# model the loop trains is wrapped and how many of the parameters its optimizer steps are DTensors
# (FSDP2's shards; the module's own may be unsharded between forward and backward), so the tests
# see the parallelism in use inside the run, not only numbers that one process could also give.
_WRAP_PROBE = """
import os, sys
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel
from reslab.train.single import SingleEngine
real_update, reported = SingleEngine.update, []
def observing_update(self, *args, **kwargs):
    model, optimizer = self.model, self.optimizer
    if not reported:
        reported.append(True)
        kind = ("fsdp" if isinstance(model, FSDPModule) else "ddp" if isinstance(model, DistributedDataParallel)
                else type(model).__name__)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        sharded = sum(isinstance(p, DTensor) for p in params)
        os.write(2, f"wrapped: rank {dist.get_rank()} {kind} dtensors {sharded}/{len(params)}\\n".encode())
    return real_update(self, *args, **kwargs)
SingleEngine.update = observing_update
from reslab.cli import main
sys.argv = ["reslab", "train", sys.argv[1], "--out", sys.argv[2]]
sys.exit(main())
"""
WRAPPED = re.compile(r"wrapped: rank (\d+) (\S+) dtensors (\d+)/(\d+)")


def _torchrun(cfg_file, out):
    probe = cfg_file.parent / "wrap_probe.py"
    probe.write_text(_WRAP_PROBE)
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(probe), str(cfg_file), str(out)],
                          capture_output=True, text=True, timeout=SAFETY_NET_S)


def _wrapping(run) -> list[tuple[str, str, bool]]:
    """(rank, wrapper, every parameter a DTensor) as each rank reported it, sorted by rank."""
    # found anywhere in the shared stderr: another process's output may interleave with a line
    return sorted((rank, kind, int(n) == int(total) > 0) for rank, kind, n, total in WRAPPED.findall(run.stderr))


@pytest.fixture(scope="module")
def single_process_run(tmp_path_factory):
    """One process, grad_accum 2: the reference for two processes with one micro-batch each."""
    tmp = tmp_path_factory.mktemp("dist")
    corpus = write_corpus(tmp)
    cfg = _write_toml(tmp / "single.toml", tiny_run(corpus, tmp / "cache", **COMMON, **{"train.grad_accum": 2}))
    one = subprocess.run([sys.executable, "-m", "reslab.cli", "train", str(cfg), "--out", str(tmp / "one")],
                         capture_output=True, text=True, timeout=SAFETY_NET_S)
    assert one.returncode == 0, one.stderr
    return tmp, corpus


def test_ddp_two_processes_match_one_process_with_the_same_global_batch(single_process_run):
    tmp, corpus = single_process_run
    ddp = _write_toml(tmp / "ddp.toml", tiny_run(corpus, tmp / "cache", **COMMON))
    two = _torchrun(ddp, tmp / "two")
    assert two.returncode == 0, two.stderr[-3000:]
    assert _wrapping(two) == [("0", "ddp", False), ("1", "ddp", False)], two.stderr[-3000:]
    a, b = _losses(tmp / "one"), _losses(tmp / "two")
    assert sorted(a) == sorted(b) == list(range(1, 13))
    for step in a:
        assert abs(a[step] - b[step]) < 1e-5, (step, a[step], b[step])
    for step, val in _vals(tmp / "one").items():
        assert abs(val - _vals(tmp / "two")[step]) < 1e-5
    status = json.loads((tmp / "two" / "status.json").read_text())
    assert status["status"] == "completed" and status["world_size"] == 2


def test_fsdp_matches_one_process_and_resumes_from_a_gathered_checkpoint(single_process_run):
    tmp, corpus = single_process_run
    fsdp = _write_toml(tmp / "fsdp.toml", tiny_run(corpus, tmp / "cache", **COMMON, **{"train.parallel": "fsdp"}))
    run = _torchrun(fsdp, tmp / "fsdp")
    assert run.returncode == 0, run.stderr[-3000:]
    # FSDP2 was in use: each rank trained an FSDPModule whose parameters are all DTensor shards
    assert _wrapping(run) == [("0", "fsdp", True), ("1", "fsdp", True)], run.stderr[-3000:]
    a, b = _losses(tmp / "one"), _losses(tmp / "fsdp")
    assert sorted(b) == list(range(1, 13))
    assert max(abs(a[s] - b[s]) for s in a) < 1e-5

    # the checkpoints hold the full model: loadable alone, equal to the single process's weights
    full = reslab.load_model(tmp / "fsdp" / "checkpoints" / "step_00000012")
    ref = reslab.load_model(tmp / "one" / "checkpoints" / "step_00000012")
    for (name, p), (_, q) in zip(full.state_dict().items(), ref.state_dict().items()):
        assert (p - q).abs().max() < 1e-4, name

    # resume: drop the last checkpoint (as if killed after step 6's) and train again
    resumed = tmp / "resumed"
    shutil.copytree(tmp / "fsdp", resumed)
    shutil.rmtree(resumed / "checkpoints" / "step_00000012")
    (resumed / "status.json").write_text(json.dumps({"status": "running"}))
    again = _torchrun(fsdp, resumed)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _wrapping(again) == [("0", "fsdp", True), ("1", "fsdp", True)], again.stderr[-3000:]
    assert resumed_steps(again.stderr.splitlines()) == [6], again.stderr[-3000:]
    c = _losses(resumed)
    assert sorted(c) == list(range(1, 13))
    assert max(abs(b[s] - c[s]) for s in b) < 1e-6


# Run by torchrun in the test below: records, on each rank, how many FSDP modules are still alive
# when the process group is destroyed. A group destroyed while FSDP still holds it is freed only
# during interpreter shutdown, where gloo's work objects abort the process (a flaky SIGABRT).
_PROBE = """
import gc, os, sys
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
destroy = dist.destroy_process_group
def counting_destroy(*args, **kwargs):
    alive = sum(isinstance(o, FSDPModule) for o in gc.get_objects())
    os.write(2, f"destroy: rank {dist.get_rank()} fsdp modules alive {alive}\\n".encode())  # one write: ranks share the pipe
    destroy(*args, **kwargs)
dist.destroy_process_group = counting_destroy
from reslab.cli import main
sys.argv = ["reslab", "train", sys.argv[1], "--out", sys.argv[2]]
main()
"""


def test_fsdp_ranks_destroy_the_group_after_freeing_the_model_on_every_exit_path(single_process_run):
    tmp, corpus = single_process_run
    probe = tmp / "probe.py"
    probe.write_text(_PROBE)
    cfg = _write_toml(tmp / "fsdp_short.toml", tiny_run(corpus, tmp / "cache", **{**COMMON, "train.steps": 2},
                                                         **{"train.parallel": "fsdp"}))
    # a full run, then the same command on the completed folder (which returns before training)
    for attempt in ("trained", "already complete"):
        run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                              str(probe), str(cfg), str(tmp / "short")], capture_output=True, text=True, timeout=SAFETY_NET_S)
        assert run.returncode == 0, (attempt, run.stderr[-3000:])
        # found anywhere in the shared stderr: another process's output may interleave with a line
        counts = sorted(re.findall(r"destroy: rank (\d+) fsdp modules alive (\d+)", run.stderr))
        assert counts == [("0", "0"), ("1", "0")], \
            (attempt, run.stderr[-3000:])
