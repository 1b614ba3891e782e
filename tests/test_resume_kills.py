"""Exact resume after SIGKILL at drawn points of one run: after a step, right after a checkpoint,
and while a checkpoint is being written. Every kill is triggered by what the run folder shows and
checked to have landed where it was meant to; the final curve is bit-identical to an
uninterrupted run's."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from pathlib import Path

import tomli_w

from tests.kill_helpers import checkpoint_steps, kill_seed, last_step, status, wait_until, writing_checkpoint
from tests.train_helpers import tiny_run, train_losses, val_losses, write_corpus

STEPS = 96
MARGIN = 16              # steps left after a kill point, so a starved test process still kills in time
INTERVAL = 4
KILL_POINTS = 6           # at least one of them during a checkpoint write
WRITE_ATTEMPTS = 8        # tries to catch a write in progress before the test gives up


def _train_cmd(cfg_file: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "reslab.cli", "train", str(cfg_file), "--out", str(out)]


def _plan(rng: random.Random) -> list[str]:
    kinds = ["write"] + [rng.choice(["step", "checkpoint", "write"]) for _ in range(KILL_POINTS - 1)]
    rng.shuffle(kinds)
    return kinds


def test_sigkill_at_drawn_points_then_resume_exactly(tmp_path):
    corpus = write_corpus(tmp_path)
    # wide enough that a checkpoint (model + AdamW moments, ~20 MB) takes a while to write, so a
    # write in progress can be seen; dropout on, so the RNG states must resume too
    cfg = tiny_run(corpus, tmp_path / "cache", **{"train.steps": STEPS, "train.checkpoint_interval": INTERVAL,
                                                  "train.eval_interval": 8, "model.dropout": 0.2,
                                                  "model.n_embd": 256, "model.n_head": 4})
    cfg_file = tmp_path / "run.toml"
    cfg_file.write_text(tomli_w.dumps(cfg))
    reference = tmp_path / "reference"
    assert subprocess.run(_train_cmd(cfg_file, reference), capture_output=True).returncode == 0

    seed = kill_seed()
    rng = random.Random(seed)
    run = tmp_path / "interrupted"
    landed = []
    for kind in _plan(rng):
        for attempt in range(WRITE_ATTEMPTS if kind == "write" else 1):
            resume_from = max(checkpoint_steps(run), default=0)
            assert resume_from + 2 * INTERVAL + MARGIN <= STEPS, f"ran out of steps at {landed} (RESLAB_TEST_SEED={seed})"
            proc = subprocess.Popen(_train_cmd(cfg_file, run), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if kind == "step":  # somewhere between two checkpoints
                at = rng.randint(resume_from + 1, resume_from + INTERVAL - 1)
                wait_until(lambda: last_step(run) >= at or proc.poll() is not None, f"step {at}", seed)
            elif kind == "checkpoint":  # right after the k-th new checkpoint is complete
                at = resume_from + INTERVAL * rng.randint(1, 2)
                wait_until(lambda: max(checkpoint_steps(run), default=0) >= at or proc.poll() is not None,
                           f"checkpoint {at}", seed)
            else:  # while a checkpoint's temporary folder exists
                at = None
                wait_until(lambda: writing_checkpoint(run) or proc.poll() is not None, "a checkpoint write",
                           seed, poll_s=0.0002)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert proc.returncode == -signal.SIGKILL, f"the run ended before its {kind} kill (RESLAB_TEST_SEED={seed})"
            assert status(run) == "running" and last_step(run) < STEPS
            if kind == "write" and not writing_checkpoint(run):
                continue  # the write finished between seeing it and the kill: try the next checkpoint
            if kind == "step":
                assert at <= last_step(run)
            if kind == "checkpoint":
                assert max(checkpoint_steps(run)) >= at
            landed.append((kind, at if at is not None else last_step(run)))
            break
        else:
            raise AssertionError(f"no kill landed during a checkpoint write in {WRITE_ATTEMPTS} tries "
                                 f"(RESLAB_TEST_SEED={seed})")
    assert len(landed) == KILL_POINTS and any(kind == "write" for kind, _ in landed)
    print(f"kills landed: {landed} (RESLAB_TEST_SEED={seed})")

    done = subprocess.run(_train_cmd(cfg_file, run), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    context = f"kills {landed} (RESLAB_TEST_SEED={seed})"
    assert train_losses(run) == train_losses(reference), context      # bit-identical, every step
    assert val_losses(run) == val_losses(reference), context
    assert sorted(train_losses(run)) == list(range(1, STEPS + 1)), context  # each step once
    assert json.loads((run / "status.json").read_text())["status"] == "completed"
    assert not list(run.rglob(".tmp*")) and not list(run.rglob("*.tmp")), context
