"""The training engine: golden losses, resume, evaluation modes, divergence,
and separation of the random streams."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from reslab.cli import main
from reslab.data.batches import EvalBatches, TrainBatches
from reslab.train.loop import train
from reslab.train.optim import learning_rate, parameter_groups
from tests.kill_helpers import checkpoint_steps
from tests.train_helpers import (
    LogLines,
    curve_rows,
    interrupt_before_update,
    resumed_steps,
    tiny_config,
    tiny_run,
    train_losses,
    val_losses,
    write_corpus,
)

GOLDEN = Path(__file__).parent / "golden" / "tiny_losses.json"


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path)


_losses, _vals = train_losses, val_losses



# ---- golden losses -------------------------------------------------------------------------------
def golden_config(tmp_path):
    corpus = write_corpus(tmp_path, seed=7)
    return tiny_config(corpus, tmp_path / "cache", **{"train.steps": 50, "train.deterministic": True,
                                                      "train.seed": 1})


def test_golden_losses(tmp_path):
    """The first 50 losses of a tiny deterministic run; regenerate with `python -m tests.make_golden`
    only when a change is meant to alter the numbers (and say so in the commit)."""
    result = train(golden_config(tmp_path), tmp_path / "run", log=lambda *_: None)
    losses = _losses(result.path)
    golden = json.loads(GOLDEN.read_text())
    assert len(losses) == 50
    np.testing.assert_allclose([losses[s] for s in range(1, 51)], golden["train_loss"], rtol=0, atol=2e-6)


def test_same_seed_is_bit_identical_and_another_seed_is_not(tmp_path, corpus):
    a = train(tiny_config(corpus, tmp_path / "c"), tmp_path / "a", log=lambda *_: None)
    b = train(tiny_config(corpus, tmp_path / "c"), tmp_path / "b", log=lambda *_: None)
    c = train(tiny_config(corpus, tmp_path / "c", **{"train.seed": 2}), tmp_path / "x", log=lambda *_: None)
    assert _losses(a.path) == _losses(b.path)
    assert _losses(a.path) != _losses(c.path)


# ---- random streams ----------------------------------------------------------------------------
def test_flush_denormal_is_set_for_the_run_and_recorded(tmp_path, corpus):
    """On by default: a subnormal reads as 0 in the run's arithmetic (x86 DAZ), and status.json says
    so; train.flush_denormal = false keeps IEEE subnormals. The losses of a run that never produces
    a subnormal are the same either way (bit for bit)."""
    from reslab.train.runtime import runtime
    tiny = torch.tensor([1 << 20], dtype=torch.int32).view(torch.float32)  # 1.5e-39, subnormal in float32, by its bits
    try:
        off = train(tiny_config(corpus, tmp_path / "c", **{"train.flush_denormal": False}), tmp_path / "off",
                    log=lambda *_: None)
        assert (tiny * 2).item() > 0
        on = train(tiny_config(corpus, tmp_path / "c"), tmp_path / "on", log=lambda *_: None)
        assert (tiny * 2).item() == 0.0
        flags = [json.loads((r.path / "status.json").read_text())["arithmetic"][0]["flush_denormal"]
                 for r in (off, on)]
        assert flags == [False, True]
        assert _losses(off.path) == _losses(on.path)
        runtime(tiny_config(corpus, tmp_path / "c", **{"train.flush_denormal": False}))
        assert (tiny * 2).item() > 0
    finally:
        torch.set_flush_denormal(False)  # the process's default, for the tests after this one


def test_eval_cadence_does_not_change_training(tmp_path, corpus):
    a = train(tiny_config(corpus, tmp_path / "c", **{"train.eval_interval": 10}), tmp_path / "a", log=lambda *_: None)
    b = train(tiny_config(corpus, tmp_path / "c", **{"train.eval_interval": 3, "train.eval_mode": "random"}),
              tmp_path / "b", log=lambda *_: None)
    assert _losses(a.path) == _losses(b.path)


def test_init_data_and_dropout_streams_are_separate(tmp_path, corpus):
    base = _losses(train(tiny_config(corpus, tmp_path / "c", **{"train.init_seed": 5, "train.data_seed": 6,
                                                                "train.dropout_seed": 7}),
                         tmp_path / "base", log=lambda *_: None).path)
    other_init = _losses(train(tiny_config(corpus, tmp_path / "c", **{"train.init_seed": 50, "train.data_seed": 6,
                                                                      "train.dropout_seed": 7}),
                               tmp_path / "i", log=lambda *_: None).path)
    assert base != other_init
    # the batches themselves depend on the data seed alone
    tokens = np.arange(1000) % 17
    assert all(torch.equal(a, b) for a, b in zip(TrainBatches(tokens, 4, 8, 6).get(3, 1),
                                                 TrainBatches(tokens, 4, 8, 6).get(3, 1)))


def test_fixed_eval_batches_are_identical_every_time_and_across_configs():
    tokens = np.random.default_rng(0).integers(0, 65, 5000)
    fixed = EvalBatches(tokens, 3, 4, 16, seed=99991, mode="fixed")
    again = EvalBatches(tokens, 3, 4, 16, seed=99991, mode="fixed")
    for i in range(3):
        for (x1, y1), (x2, y2) in zip(fixed.batches(0), fixed.batches(i)):
            assert torch.equal(x1, x2) and torch.equal(y1, y2)
    for (x1, _), (x2, _) in zip(fixed.batches(0), again.batches(5)):
        assert torch.equal(x1, x2)
    random = EvalBatches(tokens, 3, 4, 16, seed=99991, mode="random")
    assert not torch.equal(random.batches(0)[0][0], random.batches(1)[0][0])
    assert torch.equal(random.batches(1)[0][0], EvalBatches(tokens, 3, 4, 16, mode="random").batches(1)[0][0])


def test_fixed_eval_gives_the_same_val_batches_to_every_design(tmp_path, corpus, monkeypatch):
    seen = []
    import reslab.train.single as single

    real = single.evaluate

    def spy(model, batches, device, autocast):
        seen.append(torch.cat([x for x, _ in batches]))
        return real(model, batches, device, autocast)

    monkeypatch.setattr(single, "evaluate", spy)
    for design, seed in (("pre-ln", 1), ("post-ln", 2), ("sas-p", 3)):
        train(tiny_config(corpus, tmp_path / "c", **{"model.design": design, "train.seed": seed,
                                                     "train.steps": 10}), tmp_path / design, log=lambda *_: None)
    assert len(seen) == 6 and all(torch.equal(seen[0], s) for s in seen)


# ---- resume ----------------------------------------------------------------------------------------
def _write_toml(path: Path, cfg: dict) -> Path:
    import tomli_w

    path.write_bytes(tomli_w.dumps(cfg).encode())
    return path


# Exact resume after SIGKILL at drawn points: tests/test_resume_kills.py


def test_rerunning_a_completed_run_does_nothing(tmp_path, corpus):
    cfg = tiny_config(corpus, tmp_path / "c")
    first = train(cfg, tmp_path / "r", log=lambda *_: None)
    before = (tmp_path / "r" / "metrics.jsonl").read_text()
    second = train(cfg, tmp_path / "r", log=lambda *_: None)
    assert (first.status, first.best_val_loss) == (second.status, second.best_val_loss)
    assert (tmp_path / "r" / "metrics.jsonl").read_text() == before


def test_checkpoint_interval_is_honoured_between_evaluations(tmp_path, corpus):
    """checkpoint_interval 4 with eval_interval 6: checkpoints at 4 and 8 (not evaluation steps) and
    at the end, so a run stopped at step 9 loses one step, not nine."""
    cfg = tiny_config(corpus, tmp_path / "c", **{"train.steps": 12, "train.eval_interval": 6,
                                                 "train.checkpoint_interval": 4, "train.keep_checkpoints": 10})
    train(cfg, tmp_path / "r", log=lambda *_: None)
    assert checkpoint_steps(tmp_path / "r") == [4, 8, 12]


def test_a_folder_holding_another_config_is_refused(tmp_path, corpus, capsys):
    cfg = _write_toml(tmp_path / "a.toml", tiny_run(corpus, tmp_path / "c"))
    assert main(["train", str(cfg), "--out", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    assert main(["train", str(cfg), "--out", str(tmp_path / "r"), "--set", "train.steps=40",
                 "--set", "model.dropout=0.25"]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds a run with a different config (model.dropout: " in err and "0.25 asked" in err
    assert "train.steps: " in err and ", 40 asked)" in err  # what changed, named


def test_checkpoints_keep_last_k_and_best(tmp_path, corpus):
    result = train(tiny_config(corpus, tmp_path / "c", **{"train.steps": 40, "train.checkpoint_interval": 10,
                                                          "train.keep_checkpoints": 2}),
                   tmp_path / "r", log=lambda *_: None)
    ckpt = result.path / "checkpoints"
    assert sorted(p.name for p in ckpt.glob("step_*")) == ["step_00000030", "step_00000040"]
    best = json.loads((ckpt / "best.json").read_text())
    assert best["val_loss"] == result.best_val_loss == min(_vals(result.path).values())
    import reslab

    model = reslab.load_model(ckpt / best["folder"])
    assert model.config.design == "pre-ln"


# ---- divergence -------------------------------------------------------------------------------
def test_divergence_stops_cleanly_with_readable_files(tmp_path, corpus, capsys):
    cfg = _write_toml(tmp_path / "a.toml", tiny_run(corpus, tmp_path / "c", **{"train.nan_at_step": 12}))
    assert main(["train", str(cfg), "--out", str(tmp_path / "r")]) == 3
    status = json.loads((tmp_path / "r" / "status.json").read_text())
    assert status["status"] == "diverged" and status["step"] == 13
    assert max(_losses(tmp_path / "r")) == 12
    json.loads((tmp_path / "r" / "config.json").read_text())
    assert "diverged at step 13" in capsys.readouterr().err


# ---- optimizer and schedules -------------------------------------------------------------------
def test_no_weight_decay_on_norms_biases_and_gains():
    import reslab
    from reslab.train.config import OptimConfig

    model = reslab.build_model("sas", n_layer=2, n_embd=32, n_head=4)
    decay, no_decay = parameter_groups(model, OptimConfig())
    assert all(n.endswith(".weight") and ("c_" in n or n[:3] in ("wte", "wpe")) for n in decay)
    assert {"blocks.0.g_attn", "blocks.0.a_ff", "blocks.0.b_ff", "blocks.0.attn.shape_alpha",
            "blocks.0.norm1.weight", "blocks.0.norm1.bias"} <= set(no_decay)
    decay2, _ = parameter_groups(model, OptimConfig(embedding_decay=False))
    assert "wte.weight" in decay and "wte.weight" not in decay2


def test_learning_rate_schedules():
    from reslab.train.config import OptimConfig

    cos = OptimConfig(lr=1.0, min_lr=0.1, warmup_steps=10, schedule="cosine")
    assert learning_rate(0, cos, 110) == pytest.approx(1 / 11)
    assert learning_rate(10, cos, 110) == pytest.approx(1.0)
    assert learning_rate(60, cos, 110) == pytest.approx(0.55)
    assert learning_rate(110, cos, 110) == pytest.approx(0.1)
    wsd = OptimConfig(lr=1.0, min_lr=0.0, warmup_steps=0, schedule="wsd", wsd_decay_fraction=0.2)
    assert learning_rate(79, wsd, 100) == 1.0 and learning_rate(90, wsd, 100) == pytest.approx(0.5)
    assert learning_rate(5, OptimConfig(lr=0.5, warmup_steps=0, schedule="constant"), 100) == 0.5


# ---- configuration errors ---------------------------------------------------------------------
def test_bad_run_configs_list_every_error_with_its_path(tmp_path, corpus, capsys):
    bad = tiny_run(corpus, tmp_path / "c", **{"train.steps": 0, "optim.lr": -1.0, "model.n_head": 3})
    bad["train"]["stepz"] = 3
    cfg = _write_toml(tmp_path / "bad.toml", bad)
    assert main(["train", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"reslab: error: {cfg}: train.stepz: unknown key; allowed keys are " + err[0].split("allowed keys are ")[1]]
    del bad["train"]["stepz"]
    _write_toml(cfg, bad)
    assert main(["train", str(cfg)]) == 2
    err = capsys.readouterr().err
    for part in ("train.steps: must be a positive integer", "optim.lr: must be positive",
                 "model.n_head: 3 heads do not divide n_embd=32"):
        assert part in err
    assert "Traceback" not in err
    assert main(["train", "--preset", "nope"]) == 2


def test_missing_data_file_is_one_clear_error(tmp_path, capsys):
    cfg = _write_toml(tmp_path / "a.toml", tiny_run(tmp_path / "missing.txt", tmp_path / "c"))
    assert main(["train", str(cfg), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.txt" in err[0]


# ---- sampling ---------------------------------------------------------------------------------------
def test_sample_from_a_run_folder(tmp_path, corpus, capsys):
    result = train(tiny_config(corpus, tmp_path / "c"), tmp_path / "r", log=lambda *_: None)
    assert main(["sample", str(result.path), "--prompt", "The king", "--tokens", "40", "--seed", "3"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("The king") and len(text.rstrip("\n")) >= len("The king") + 30
    assert main(["sample", str(result.path), "--prompt", "The king", "--tokens", "40", "--seed", "3"]) == 0
    assert capsys.readouterr().out == text  # the seed fixes the sample
    assert main(["sample", str(tmp_path / "nothing")]) == 2
    assert main(["sample", str(result.path), "--prompt", "\u00e9\u00e9"]) == 2


def test_prores_alphas_follow_the_step_and_survive_an_interruption(tmp_path, corpus, monkeypatch):
    import reslab.train.loop as loop
    from reslab import prores_alpha

    over = {"model.prores": "linear", "model.prores_warmup": 5, "model.n_layer": 3, "train.steps": 30,
            "train.checkpoint_interval": 10}
    whole = train(tiny_config(corpus, tmp_path / "c", **over), tmp_path / "whole", log=lambda *_: None)

    real_lr = interrupt_before_update(monkeypatch, loop, 23)  # as if killed 3 updates past the checkpoint at 20
    with pytest.raises(KeyboardInterrupt):
        train(tiny_config(corpus, tmp_path / "c", **over), tmp_path / "cut", log=lambda *_: None)
    monkeypatch.setattr(loop, "learning_rate", real_lr)
    log = LogLines()
    train(tiny_config(corpus, tmp_path / "c", **over), tmp_path / "cut", log=log)
    assert resumed_steps(log) == [20], log  # resumed at alpha(l, 20), not retrained from step 0
    # every row in file order, alphas included: no duplicates from the interrupted part
    assert curve_rows(tmp_path / "cut") == curve_rows(whole.path)

    rows = [json.loads(l) for l in (whole.path / "metrics.jsonl").read_text().splitlines() if "train_loss" in l]
    for row in rows:  # a train row's alphas are the ones its update used: alpha(l, step - 1)
        assert row["prores_alpha"] == [prores_alpha("linear", l, row["step"] - 1, 3, 5) for l in (1, 2, 3)]


def test_export_hf_accepts_a_run_folder(tmp_path, corpus):
    pytest.importorskip("transformers")
    from transformers import GPT2LMHeadModel

    import reslab

    result = train(tiny_config(corpus, tmp_path / "c", **{"model.dropout": 0.0}), tmp_path / "r", log=lambda *_: None)
    assert main(["export", "hf", str(result.path), str(tmp_path / "hf")]) == 0
    best = json.loads((result.path / "checkpoints" / "best.json").read_text())["folder"]
    ours = reslab.load_model(result.path / "checkpoints" / best).eval()
    theirs = GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    idx = torch.randint(0, ours.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (theirs(idx).logits - ours(idx)).abs().max() < 1e-5


def test_a_run_folder_is_locked_while_trained_and_cleaned_of_partial_files(tmp_path):
    from reslab.train.run_folder import FolderBusy, RunFolder

    corpus = write_corpus(tmp_path)
    run = tmp_path / "run"
    (run / "checkpoints" / ".tmp-step_00000010-999").mkdir(parents=True)
    (run / ".status.json.abc.tmp").write_text("half")
    holder = RunFolder(run)
    holder.lock()  # another process (here: another open file) holds the run
    assert not (run / ".status.json.abc.tmp").exists()
    assert not (run / "checkpoints" / ".tmp-step_00000010-999").exists()
    with pytest.raises(FolderBusy, match="another process is training this run"):
        train(tiny_config(corpus, tmp_path / "cache"), run, log=lambda *_: None)
    holder.close()  # released: now it trains
    assert train(tiny_config(corpus, tmp_path / "cache", **{"train.steps": 2}), run,
                 log=lambda *_: None).status == "completed"


def test_the_run_records_the_arithmetic_and_a_resume_that_changes_it(tmp_path, corpus, monkeypatch):
    """status.json "arithmetic": torch, CPU capability and threads from the first update; a resume
    computed another way (here: other threads, as a different --jobs would give) adds an entry from
    its first update, because the same config then trains other numbers (the reduction order)."""
    import reslab.train.loop as loop
    import reslab.train.single as single
    from reslab.train.determinism import record_arithmetic

    over = {"train.steps": 20, "train.checkpoint_interval": 10, "train.threads": 1}
    real_save, saves = single.save_checkpoint, []

    def crash_after_first(*args, **kwargs):
        real_save(*args, **kwargs)
        saves.append(args[1])
        raise KeyboardInterrupt  # killed right after the checkpoint at step 10

    monkeypatch.setattr(single, "save_checkpoint", crash_after_first)
    with pytest.raises(KeyboardInterrupt):
        train(tiny_config(corpus, tmp_path / "c", **over), tmp_path / "run", log=lambda *_: None)
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["arithmetic"] == [{"from_step": 0, "torch": torch.__version__, "threads": 1,
                                     "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                                     "flush_denormal": True}]
    monkeypatch.setattr(single, "save_checkpoint", real_save)
    real = loop.arithmetic
    monkeypatch.setattr(loop, "arithmetic", lambda device: dict(real(device), threads=7))
    train(tiny_config(corpus, tmp_path / "c", **over), tmp_path / "run", log=lambda *_: None)
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["status"] == "completed"
    assert [(e["from_step"], e["threads"]) for e in status["arithmetic"]] == [(0, 1), (10, 7)]
    # the rule itself: the same way adds nothing; a resume from an earlier step drops later entries
    same = {"torch": "t", "threads": 1, "cpu_capability": "AVX2"}
    assert record_arithmetic([dict(same, from_step=0)], same, 500) == [dict(same, from_step=0)]
    assert record_arithmetic([dict(same, from_step=0), dict(same, threads=2, from_step=700)], same, 500) == \
        [dict(same, from_step=0)]
    assert record_arithmetic(None, same, 0) == [dict(same, from_step=0)]
