"""DDP on CPU: two gloo processes with one micro-batch each equal one process with two."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch.distributed as dist

from tests.test_train import _losses, _vals, _write_toml
from tests.train_helpers import tiny_run, write_corpus


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="torch without gloo")
def test_ddp_two_processes_match_one_process_with_the_same_global_batch(tmp_path):
    corpus = write_corpus(tmp_path)
    common = {"train.steps": 12, "train.eval_interval": 6, "model.dropout": 0.0, "train.batch_size": 4}
    single = _write_toml(tmp_path / "single.toml",
                         tiny_run(corpus, tmp_path / "cache", **common, **{"train.grad_accum": 2}))
    ddp = _write_toml(tmp_path / "ddp.toml", tiny_run(corpus, tmp_path / "cache", **common))
    one = subprocess.run([sys.executable, "-m", "reslab.cli", "train", str(single), "--out", str(tmp_path / "one")],
                         capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          "-m", "reslab.cli", "train", str(ddp), "--out", str(tmp_path / "two")],
                         capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert sorted(a) == sorted(b) == list(range(1, 13))
    for step in a:
        assert abs(a[step] - b[step]) < 1e-5, (step, a[step], b[step])
    for step, val in _vals(tmp_path / "one").items():
        assert abs(val - _vals(tmp_path / "two")[step]) < 1e-5
    status = json.loads((tmp_path / "two" / "status.json").read_text())
    assert status["status"] == "completed" and status["world_size"] == 2


def _torchrun(cfg_file, out, timeout=300):
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "-m", "reslab.cli", "train", str(cfg_file), "--out", str(out)],
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="torch without gloo")
def test_fsdp_matches_one_process_and_resumes_from_a_gathered_checkpoint(tmp_path):
    import shutil

    corpus = write_corpus(tmp_path)
    common = {"train.steps": 12, "train.eval_interval": 6, "model.dropout": 0.0, "train.batch_size": 4}
    single = _write_toml(tmp_path / "single.toml",
                         tiny_run(corpus, tmp_path / "cache", **common, **{"train.grad_accum": 2}))
    fsdp = _write_toml(tmp_path / "fsdp.toml", tiny_run(corpus, tmp_path / "cache", **common,
                                                        **{"train.parallel": "fsdp"}))
    one = subprocess.run([sys.executable, "-m", "reslab.cli", "train", str(single), "--out", str(tmp_path / "one")],
                         capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr
    run = _torchrun(fsdp, tmp_path / "fsdp")
    assert run.returncode == 0, run.stderr[-3000:]
    a, b = _losses(tmp_path / "one"), _losses(tmp_path / "fsdp")
    assert sorted(b) == list(range(1, 13))
    assert max(abs(a[s] - b[s]) for s in a) < 1e-5

    # the checkpoints hold the full model: loadable alone, equal to the single process's weights
    import reslab

    full = reslab.load_model(tmp_path / "fsdp" / "checkpoints" / "step_00000012")
    ref = reslab.load_model(tmp_path / "one" / "checkpoints" / "step_00000012")
    for (name, p), (_, q) in zip(full.state_dict().items(), ref.state_dict().items()):
        assert (p - q).abs().max() < 1e-4, name

    # resume: drop the last checkpoint (as if killed after step 6's) and train again
    resumed = tmp_path / "resumed"
    shutil.copytree(tmp_path / "fsdp", resumed)
    shutil.rmtree(resumed / "checkpoints" / "step_00000012")
    (resumed / "status.json").write_text(json.dumps({"status": "running"}))
    again = _torchrun(fsdp, resumed)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming" in again.stderr
    c = _losses(resumed)
    assert sorted(c) == list(range(1, 13))
    assert max(abs(b[s] - c[s]) for s in b) < 1e-6
