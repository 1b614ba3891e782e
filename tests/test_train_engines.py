"""The training loop against tests/golden/engine_runs.json, numbers recorded from the two loops
before they became one (tests/make_engine_golden.py): a single run reproduces every logged train
loss, grad norm and val loss bit for bit (plain, dropout, gradient accumulation, ProRes,
diagnostics, a resume after an interruption); stacked seeds match their separate runs within
tests/test_stacked.py's tolerance (batched matmuls round differently)."""

from __future__ import annotations

import json

import pytest

from tests.make_engine_golden import GOLDEN, INTERRUPT_AFTER, SINGLE, run_single, run_stack


GOLD = json.loads(GOLDEN.read_text())


def _jsonable(c: dict) -> dict:
    """Curves as the golden file holds them (JSON keys are strings)."""
    return {key: {str(step): value for step, value in rows.items()} for key, rows in c.items()}


@pytest.mark.parametrize("name", list(SINGLE))
def test_single_run_reproduces_its_golden_numbers_bit_for_bit(tmp_path, name):
    got, want = _jsonable(run_single(tmp_path, name)), GOLD["single"][name]
    assert want["overrides"] == SINGLE[name] and want["interrupt_after"] == INTERRUPT_AFTER.get(name)
    for key in ("train_loss", "grad_norm", "val_loss"):
        assert list(got[key]) == list(want[key]), (name, key)
        diffs = [(step, got[key][step], want[key][step]) for step in want[key]
                 if got[key][step] != want[key][step]]  # exact: the same arithmetic in the same order
        assert not diffs, (name, key, diffs[:3])


def test_stacked_seeds_match_their_golden_separate_runs(tmp_path):
    stack = GOLD["stacked"]
    got = run_stack(tmp_path)
    for s in map(str, stack["seeds"]):
        stacked, separate = _jsonable(got["stacked"][s]), stack["separate"][s]
        # the separate runs are single runs: exact
        assert _jsonable(got["separate"][s]) == separate, s
        for key, rel, abs_ in (("train_loss", 1e-4, 1e-4), ("val_loss", 1e-4, 1e-4), ("grad_norm", 1e-3, 1e-4)):
            assert list(stacked[key]) == list(separate[key]), (s, key)
            for step, value in separate[key].items():
                assert stacked[key][step] == pytest.approx(value, rel=rel, abs=abs_), (s, key, step)
