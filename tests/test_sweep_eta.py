"""The sweep's time left (reslab.sweep.eta): runs weighted by their work, so a sweep whose small runs
finish first does not promise the large ones in the small ones' time; written as a length of time."""

from __future__ import annotations

import dataclasses
import io

import pytest

from reslab.progress import format_duration
from reslab.sweep.eta import TimeLeft, run_work
from reslab.sweep.runner import SweepView
from reslab.train.config import RunConfig


def _config(**model) -> RunConfig:
    cfg = RunConfig.from_dict({"model": {"n_layer": 4, "n_embd": 64, "n_head": 4, "block_size": 64, **model},
                               "train": {"steps": 1000, "batch_size": 16, "eval_interval": 250, "eval_iters": 10}})
    return cfg


@pytest.mark.parametrize("seconds, text", [
    (0, "0 s"), (44.6, "45 s"), (59.4, "59 s"), (59.6, "1 min"), (1315, "22 min"), (3569, "59 min"),
    (3571, "1 h 00 min"), (6000, "1 h 40 min"), (-5, "0 s")])
def test_a_duration_cannot_be_read_as_a_time_of_day(seconds, text):
    # "eta 11:41" at 08:37 read as a clock time; it meant 11 minutes 41 seconds.
    assert format_duration(seconds) == text


def test_a_runs_work_follows_its_depth_width_and_budget():
    base = _config()
    per_token_blocks = 4 * (4 + 2 * 4) * 64 ** 2 + 4 * 2 * 64 * 64
    per_token = per_token_blocks + 64 * base.model.vocab_size
    tokens = 1000 * 16 * 64 + (1000 // 250 + 1) * 10 * 16 * 64 / 3
    assert run_work(base) == pytest.approx(per_token * tokens, rel=1e-12)
    deep = run_work(_config(n_layer=16))
    assert deep / run_work(base) == pytest.approx((4 * per_token_blocks + 64 * base.model.vocab_size) / per_token)
    assert 3.5 < deep / run_work(base) < 4  # the head's share does not grow with depth
    longer = dataclasses.replace(base, train=dataclasses.replace(base.train, steps=2000))
    assert 1.9 < run_work(longer) / run_work(base) < 2.0  # twice the updates, a little less than twice the evaluations


def test_time_left_is_the_finished_runs_rate_times_the_work_left():
    left = TimeLeft({"small-a": 1.0, "small-b": 1.0, "large-a": 4.0, "large-b": 4.0})
    assert left.seconds(jobs=2) is None  # nothing measured yet
    left.finished("small-a", 60.0)
    # 60 s per unit; 9 units left on 2 workers. The mean over runs (60 s) times the 3 runs left over 2
    # workers said 90 s: a sixth of it.
    assert left.seconds(jobs=2) == pytest.approx(60 * 9 / 2)
    left.finished("small-b", 120.0, measured=False)  # a failed or diverged run: done, but not a rate
    assert left.seconds(jobs=2) == pytest.approx(60 * 8 / 2)
    left.finished("large-a", 480.0)
    assert left.seconds(jobs=1) == pytest.approx(540 / 5 * 4)
    left.finished("large-b", 400.0)
    assert left.seconds(jobs=1) == 0


def test_the_sweep_line_says_the_time_left_in_words():
    view = SweepView("s", 3, jobs=1, stream=io.StringIO(), work={"a": 1.0, "b": 2.0, "c": 30.0})
    assert view.line(done=0, running=1, failed=0, diverged=0, queued=2).endswith("time left --")
    view.time_left.finished("a", 40.0)
    assert view.line(done=1, running=1, failed=0, diverged=0, queued=1) == \
        "sweep s: 1/3 done (0 diverged), 1 running, 0 failed, 1 queued, time left about 21 min"
