"""The training loop against tests/golden/engine_runs.json, numbers recorded from the two loops
before they became one (tests/make_engine_golden.py): a single run reproduces every logged train
loss, grad norm and val loss bit for bit (plain, dropout, gradient accumulation, ProRes,
diagnostics, a resume after an interruption); stacked seeds match their separate runs within
tests/test_stacked.py's tolerance (batched matmuls round differently)."""

from __future__ import annotations

import errno
import json
import os

import pytest
import tomli_w
import torch
from safetensors import SafetensorError

from reslab.cli import main
from reslab.train import checkpoint, loop, single, stacked
from reslab.train.checkpoint import complete_checkpoints
from reslab.train.run_folder import RunFolder
from tests.make_engine_golden import GOLDEN, INTERRUPT_AFTER, SINGLE, config, curves, run_single, run_stack
from tests.train_helpers import tiny_run, write_corpus

GOLD = json.loads(GOLDEN.read_text())
_KEYS = ("train_loss", "grad_norm", "val_loss")
# Bit for bit holds on the arithmetic that recorded the file (docs/training.md, "What bit-exact
# depends on"); elsewhere the same computation agrees to float32 rounding over 30 steps.
SAME_ARITHMETIC = (GOLD["torch"], GOLD["cpu_capability"]) == (torch.__version__,
                                                             torch.backends.cpu.get_cpu_capability())


def _same(got: float, want: float) -> bool:
    return got == want if SAME_ARITHMETIC else got == pytest.approx(want, rel=1e-4, abs=1e-5)


def _jsonable(c: dict) -> dict:
    """Curves as the golden file holds them (JSON keys are strings)."""
    return {key: {str(step): value for step, value in rows.items()} for key, rows in c.items()}


def _golden_diffs(got: dict, want: dict) -> list:
    """(curve, step, got, want) wherever jsonable curves `got` miss the golden `want`: exact on the
    arithmetic that recorded the file, to float32 rounding on another (_same); a missing or extra step
    counts as a difference."""
    out = []
    for key in _KEYS:
        if list(got[key]) != list(want[key]):
            out.append((key, "steps", list(got[key]), list(want[key])))
            continue
        out += [(key, step, got[key][step], want[key][step]) for step in want[key]
                if not _same(got[key][step], want[key][step])]
    return out


@pytest.mark.parametrize("name", list(SINGLE))
def test_single_run_reproduces_its_golden_numbers_bit_for_bit(tmp_path, name):
    got, want = _jsonable(run_single(tmp_path, name)), GOLD["single"][name]
    assert want["overrides"] == SINGLE[name] and want["interrupt_after"] == INTERRUPT_AFTER.get(name)
    diffs = _golden_diffs(got, want)  # exact: the same arithmetic in the same order
    assert not diffs, (name, diffs[:3])


def test_stacked_seeds_match_their_golden_separate_runs(tmp_path):
    stack = GOLD["stacked"]
    got = run_stack(tmp_path)
    for s in map(str, stack["seeds"]):
        together, separate = _jsonable(got["stacked"][s]), stack["separate"][s]
        # the separate runs are single runs, and the stack computes as it did: both exact
        for mine, want in ((got["separate"][s], separate), (got["stacked"][s], stack["stacked"][s])):
            mine = _jsonable(mine)
            assert all(_same(mine[key][step], want[key][step]) for key in _KEYS for step in want[key]), s
        for key, rel, abs_ in (("train_loss", 1e-4, 1e-4), ("val_loss", 1e-4, 1e-4), ("grad_norm", 1e-3, 1e-4)):
            assert list(together[key]) == list(separate[key]), (s, key)
            for step, value in separate[key].items():
                assert together[key][step] == pytest.approx(value, rel=rel, abs=abs_), (s, key, step)


# ---- the schedule's fixes ---------------------------------------------------------------------------
def _toml(tmp_path, **overrides) -> str:
    path = tmp_path / "run.toml"
    path.write_text(tomli_w.dumps(tiny_run(write_corpus(tmp_path), tmp_path / "cache",
                                           **{"model.dropout": 0.0, **overrides})))
    return str(path)


def _status(run) -> dict:
    return json.loads((run / "status.json").read_text())


def test_ctrl_c_leaves_status_at_the_last_checkpoint_and_the_resume_starts_there(tmp_path, monkeypatch, capsys):
    """Ctrl-C after update 25 of 30 (checkpoints every 10): exit 130, and status.json names step 20,
    the checkpoint the resume starts from, not the step the run started at."""
    cfg, out = _toml(tmp_path, **{"train.checkpoint_interval": 10}), tmp_path / "run"
    real = loop.learning_rate

    def ctrl_c_before_update_26(step, *args):
        if step == 25:
            raise KeyboardInterrupt
        return real(step, *args)

    monkeypatch.setattr(loop, "learning_rate", ctrl_c_before_update_26)
    assert main(["train", cfg, "--out", str(out)]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "reslab: interrupted"
    status = _status(out)
    newest = complete_checkpoints(out / "checkpoints")[-1]
    assert status["status"] == "running" and status["step"] == 20 and newest.name == "step_00000020"
    monkeypatch.setattr(loop, "learning_rate", real)
    assert main(["train", cfg, "--out", str(out)]) == 0
    assert f"resuming {out} from step 20" in capsys.readouterr().err
    assert _status(out)["status"] == "completed" and _status(out)["step"] == 30


@pytest.mark.parametrize("full", [
    OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
    SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, "
                    "message: \"No space left on device\" })"),
], ids=["OSError", "SafetensorError"])
def test_a_full_disk_at_a_checkpoint_is_one_line_and_the_run_resumes(tmp_path, monkeypatch, capsys, full):
    """The disk fills while step 20's checkpoint is written: one line naming the checkpoint and the
    cause, exit 2, nothing half written left behind; freed, the same command resumes from step 10
    and ends with the numbers of a run that was never stopped."""
    cfg = _toml(tmp_path, **{"train.checkpoint_interval": 10})
    assert main(["train", cfg, "--out", str(tmp_path / "whole")]) == 0
    real = checkpoint.save_file

    def disk_fills_at_step_20(tensors, path):
        if "step_00000020" in path:
            raise full
        return real(tensors, path)

    real_status = RunFolder.write_status

    def status_cannot_be_written_either(self, **fields):
        if fields.get("status") == "failed":  # the disk is still full when the failure is recorded
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.status_path))
        return real_status(self, **fields)

    monkeypatch.setattr(checkpoint, "save_file", disk_fills_at_step_20)
    monkeypatch.setattr(RunFolder, "write_status", status_cannot_be_written_either)
    out = tmp_path / "run"
    capsys.readouterr()
    assert main(["train", cfg, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("reslab:")] == [f"reslab: error: {out / 'checkpoints' / 'step_00000020'}: cannot save the checkpoint of "
                   "step 20: No space left on device; free some space, then run the same command again: it "
                   "resumes from the last complete checkpoint"]
    assert [p.name for p in (out / "checkpoints").iterdir() if p.name.startswith(".tmp-")] == []
    monkeypatch.setattr(checkpoint, "save_file", real)
    monkeypatch.setattr(RunFolder, "write_status", real_status)
    assert main(["train", cfg, "--out", str(out)]) == 0
    assert f"resuming {out} from step 10" in capsys.readouterr().err
    assert _status(out)["status"] == "completed"
    assert curves(out) == curves(tmp_path / "whole")


def test_checkpoints_follow_checkpoint_interval_not_the_evaluations(tmp_path, monkeypatch):
    """checkpoint_interval 7 with evaluations every 10: checkpoints at 7, 14, 21, 28 and the end, for a
    single run and for every seed of a stack, and the numbers are those of the golden runs."""
    saved = {"single": [], "stacked": []}
    for module, key in ((single, "single"), (stacked, "stacked")):
        real = module.save_checkpoint
        monkeypatch.setattr(module, "save_checkpoint",
                            lambda *a, real=real, key=key, **k: (saved[key].append(a[1]), real(*a, **k))[1])
    plain = {**SINGLE["plain"], "train.checkpoint_interval": 7}
    cfgs = [config(tmp_path, plain), config(tmp_path, {**plain, "train.seed": 2})]
    loop.train(cfgs[0], tmp_path / "single", log=lambda *_: None)
    loop.train_stacked(cfgs, [tmp_path / "s1", tmp_path / "s2"], log=lambda *_: None)
    assert saved["single"] == [7, 14, 21, 28, 30]
    assert saved["stacked"] == [s for s in (7, 14, 21, 28, 30) for _ in range(2)]
    # the golden numbers, exactly where the file was recorded on this arithmetic (an AVX-512 CPU rounds
    # some float32 sums otherwise than an AVX2 one: the 7th digit of a loss moves)
    assert not _golden_diffs(_jsonable(curves(tmp_path / "single")), GOLD["single"]["plain"])
