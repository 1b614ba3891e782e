"""Exact resume after SIGKILL at drawn points of one run: after a step, right after a checkpoint,
and while a checkpoint is being written. Every kill is triggered by what the run folder shows and
checked to have landed where it was meant to; every relaunch says it resumed from the newest
complete checkpoint (a silent restart from step 0 would give the same curve), and the final
metrics.jsonl is, row by row in file order, bit-identical to an uninterrupted run's."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import tomli_w

from tests.kill_helpers import (checkpoint_steps, checkpoint_writes, kill_seed, last_step, status, wait_until,
                                writing_checkpoint)
from tests.train_helpers import curve_rows, resumed_steps, tiny_run, train_curve, write_corpus

STEPS = 96
MARGIN = 16              # steps left after a kill point, so a starved test process still kills in time
INTERVAL = 4
KILL_POINTS = 6           # at least one of them during a checkpoint write
WRITE_ATTEMPTS = 8        # tries to catch a write in progress before the test gives up


def _train_cmd(cfg_file: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "reslab.cli", "train", str(cfg_file), "--out", str(out)]


def _launch(cfg_file: Path, run: Path, log: Path) -> subprocess.Popen:
    """Start a trainer whose stderr (where the engine logs "resuming ... from step N") goes to `log`,
    unbuffered, so a line written before the SIGKILL is in the file."""
    with log.open("w") as err:
        return subprocess.Popen(_train_cmd(cfg_file, run), stdout=subprocess.DEVNULL, stderr=err,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _check_resumed(log: Path, resume_from: int, context: str) -> None:
    """The launch resumed from `resume_from` (the newest complete checkpoint before it started), or
    said nothing of resuming when there was none."""
    said = resumed_steps(log.read_text().splitlines())
    assert said == ([resume_from] if resume_from else []), f"{context}: resume lines {said}, newest checkpoint {resume_from}"


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
    landed, launches = [], 0
    for kind in _plan(rng):
        for attempt in range(WRITE_ATTEMPTS if kind == "write" else 1):
            resume_from = max(checkpoint_steps(run), default=0)
            assert resume_from + 2 * INTERVAL + MARGIN <= STEPS, f"ran out of steps at {landed} (RESLAB_TEST_SEED={seed})"
            stale = checkpoint_writes(run)  # a killed write's leftovers: not the new process's write
            launches += 1
            log = tmp_path / f"launch{launches}.err"
            proc = _launch(cfg_file, run, log)
            if kind == "step":  # somewhere between two checkpoints, past the rows a killed process left
                # (the relaunch truncates those, but until it has, they would trigger the kill at once)
                base = max(resume_from, last_step(run))
                at = rng.choice([s for s in range(base + 1, base + INTERVAL + 1) if s % INTERVAL])
                wait_until(lambda: last_step(run) >= at or proc.poll() is not None, f"step {at}", seed)
            elif kind == "checkpoint":  # right after the k-th new checkpoint is complete
                at = resume_from + INTERVAL * rng.randint(1, 2)
                wait_until(lambda: max(checkpoint_steps(run), default=0) >= at or proc.poll() is not None,
                           f"checkpoint {at}", seed)
            else:  # while a checkpoint's temporary folder exists
                at = None
                wait_until(lambda: writing_checkpoint(run, stale) or proc.poll() is not None, "a checkpoint write",
                           seed, poll_s=0.0002)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert proc.returncode == -signal.SIGKILL, f"the run ended before its {kind} kill (RESLAB_TEST_SEED={seed})"
            assert status(run) == "running" and last_step(run) < STEPS
            # every kill lands after the run has read its checkpoint: it trained, or is writing one
            _check_resumed(log, resume_from, f"launch {launches}, {kind} kill (RESLAB_TEST_SEED={seed})")
            if kind == "write" and not writing_checkpoint(run, stale):
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

    resume_from = max(checkpoint_steps(run))
    done = subprocess.run(_train_cmd(cfg_file, run), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    context = f"kills {landed} (RESLAB_TEST_SEED={seed})"
    assert resume_from > 0 and resumed_steps(done.stderr.splitlines()) == [resume_from], (context, done.stderr)
    # file order, duplicates visible: a resume that appended without truncating would show here
    assert curve_rows(run) == curve_rows(reference), context          # bit-identical, every row
    assert [step for step, _ in train_curve(run)] == list(range(1, STEPS + 1)), context  # each step once
    assert json.loads((run / "status.json").read_text())["status"] == "completed"
    assert not list(run.rglob(".tmp*")) and not list(run.rglob("*.tmp")), context
