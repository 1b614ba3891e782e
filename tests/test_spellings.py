"""Design hyperparameters that were [model] fields (model.gate_bias, ...) are [model.options] now: the
old spellings still load from a config file, `--set` and a stored run folder, with one notice line
each, keep their run identity, and an interrupted old run resumes as it would have."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from reslab.cli import main
from reslab.train.config import config_hash
from reslab.errors import ConfigError
from reslab.fileio import read_toml
from reslab.model import spellings
from reslab.model.spellings import MOVED, OLD_DEFAULTS
from reslab.spec.expand import run_identity
from reslab.train import checkpoint as checkpoint_module
from reslab.train import single as single_engine
from reslab.train.config import build_run_config
from reslab.train.loop import train
from reslab.train.run_folder import RunFolder
from tests.train_helpers import tiny_run, train_losses, write_corpus

SHAPE = {"n_layer": 4, "n_head": 2, "n_embd": 32, "block_size": 16}
# old field -> (a design that takes it, a value other than the default, fields that value needs)
CASES = {
    "gate_bias": ("gated", 0.5, {}),
    "hyper_streams": ("hyper-connections", 2, {}),
    "hyper_mixing": ("hyper-connections", "sinkhorn", {}),
    "hyper_dynamic": ("hyper-connections", True, {}),
    "sinkhorn_iters": ("hyper-connections", 3, {"hyper_mixing": "sinkhorn"}),
    "ngpt_alpha_init": ("ngpt", 0.2, {}),
    "norm_free": ("sas-p", True, {}),
    "sas_ff_gain": ("sas", 0.5, {}),
    "resi_dual_scale": ("resi-dual", 0.5, {}),
    "mix_ln_post_layers": ("mix-ln", 3, {}),
}


@pytest.fixture(autouse=True)
def _fresh_notices(monkeypatch):
    """Each test sees the notices of its own loads (they are printed once per process)."""
    monkeypatch.setattr(spellings, "_told", set())


def _old(field: str) -> dict:
    design, value, needs = CASES[field]
    return {"design": design, **SHAPE, **needs, field: value}


def _new(model: dict) -> dict:
    """The same [model] table in the new spelling, written out by hand."""
    options = {MOVED[k][1]: v for k, v in model.items() if k in MOVED}
    return {**{k: v for k, v in model.items() if k not in MOVED}, "options": options}


def _notices(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if " is now " in line]


def test_every_moved_field_has_a_case():
    assert set(CASES) == set(MOVED) == set(OLD_DEFAULTS)


@pytest.mark.parametrize("field", CASES)
def test_an_old_config_file_loads_as_the_new_spelling_with_one_notice(field, tmp_path, capsys):
    design, value, needs = CASES[field]
    path = tmp_path / "old.toml"
    lines = [f"{k} = {json.dumps(v)}" for k, v in _old(field).items()]
    path.write_text("[model]\n" + "\n".join(lines) + "\n")
    old = build_run_config(read_toml(str(path)))
    new = build_run_config({"model": _new(_old(field))})
    assert old == new and old.model.options[MOVED[field][1]] == value
    assert (run_identity(old), config_hash(old)) == (run_identity(new), config_hash(new))
    build_run_config(read_toml(str(path)))  # loaded again: the notice is not repeated
    notices = _notices(capsys)
    expected = [f"reslab: model.{k} is now model.options.{MOVED[k][1]}" for k in _old(field) if k in MOVED]
    assert notices == expected


def test_the_new_spelling_prints_no_notice(capsys):
    build_run_config({"model": _new(_old("gate_bias"))})
    assert _notices(capsys) == []


def test_set_with_the_old_spelling_is_read_and_told(capsys):
    assert main(["model", "--set", "model.design=gated", "--set", "model.gate_bias=-1.0", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["config"]["options"] == {"bias": -1.0}
    assert out.err.splitlines() == ["reslab: model.gate_bias is now model.options.bias"]


def test_both_spellings_with_different_values_are_one_line_naming_both():
    proc = subprocess.run([sys.executable, "-m", "reslab", "model", "--set", "model.design=gated",
                           "--set", "model.gate_bias=1.0", "--set", "model.options.bias=3.0"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        "reslab: error: model.gate_bias: 1.0 disagrees with model.options.bias = 3.0; model.gate_bias is "
        "the old spelling of model.options.bias, keep that one only"]


def test_both_spellings_with_one_value_are_fine():
    cfg = build_run_config({"model": {"design": "gated", "gate_bias": 1.5, "options": {"bias": 1.5}}})
    assert cfg.model.options == {"bias": 1.5}


def test_an_old_field_for_a_design_that_does_not_take_it_is_refused():
    with pytest.raises(ConfigError) as err:
        build_run_config({"model": {"design": "pre-ln", "hyper_streams": 2}})
    assert err.value.errors == ["config: model.hyper_streams: only hyper-connections takes it (now "
                                "model.options.streams); not pre-ln"]


def test_a_per_layer_design_takes_its_old_field():
    cfg = build_run_config({"model": {"design": "pre-ln", **SHAPE, "layer_designs": {"2": "gated"},
                                      "gate_bias": 4.0}})
    assert cfg.model.options == {"bias": 4.0}


@pytest.mark.parametrize("design", ["pre-ln", "gated", "mix-ln"])
def test_a_stored_config_of_every_field_loads_and_tells_only_its_own_designs_fields(design, capsys):
    """A run folder of the old layout holds every [model] field, the other designs' at their defaults."""
    stored = {**OLD_DEFAULTS, "design": design, **SHAPE, "options": {}}
    if design == "mix-ln":
        stored["mix_ln_post_layers"] = 1  # as resolved: ceil(4 / 4)
    cfg = build_run_config({"model": stored})
    assert cfg == build_run_config({"model": {"design": design, **SHAPE}})
    own = [k for k, (designs, _) in MOVED.items() if design in designs]
    assert _notices(capsys) == [f"reslab: model.{k} is now model.options.{MOVED[k][1]}" for k in own]


# one case per design, covering every moved field
RESUMED = {
    "gated": {"gate_bias": 0.5},
    "hyper-connections": {"hyper_streams": 2, "hyper_mixing": "sinkhorn", "hyper_dynamic": True, "sinkhorn_iters": 3},
    "ngpt": {"ngpt_alpha_init": 0.2},
    "sas": {"norm_free": True, "sas_ff_gain": 0.5},
    "sas-p": {"sas_ff_gain": 0.25},
    "resi-dual": {"resi_dual_scale": 0.5},
    "mix-ln": {"mix_ln_post_layers": 2},
}


def test_the_resume_cases_cover_every_field():
    assert {k for fields in RESUMED.values() for k in fields} == set(MOVED)


def _as_written_before(config: dict) -> dict:
    """A run's config.json as reslab wrote it before the move: every old field, options spelt as them."""
    model = dict(config["model"])
    options = dict(model.pop("options"))
    designs = {model["design"]}
    old = {k: options.pop(new) for k, (owners, new) in MOVED.items() if designs & set(owners) and new in options}
    return {**config, "model": {**model, **OLD_DEFAULTS, **old, "options": options}}


class Crash(Exception):
    pass


@pytest.mark.parametrize("design", RESUMED)
def test_an_interrupted_run_of_the_old_layout_resumes_to_the_uninterrupted_curve(design, tmp_path, monkeypatch,
                                                                                   capsys):
    corpus = write_corpus(tmp_path)
    overrides = {"train.steps": 8, "train.checkpoint_interval": 4, "train.eval_interval": 4,
                 "model.design": design, "model.dropout": 0.0}
    old_model = tiny_run(corpus, tmp_path / "cache", **overrides)
    old_model["model"].update(RESUMED[design])
    cfg = build_run_config(old_model)  # read through the old spelling
    assert cfg == build_run_config({**old_model, "model": _new(old_model["model"])})
    reference = train(cfg, tmp_path / "reference", log=lambda *_: None)
    assert reference.status == "completed"

    real_save = checkpoint_module.save_checkpoint

    def save_then_crash(ckpt_dir, step, *args, **kw):
        real_save(ckpt_dir, step, *args, **kw)
        if step == 4:
            raise Crash  # the process dies right after its first checkpoint

    monkeypatch.setattr(single_engine, "save_checkpoint", save_then_crash)
    old = tmp_path / "old"
    with pytest.raises(Crash):
        train(cfg, old, log=lambda *_: None)
    monkeypatch.undo()
    monkeypatch.setattr(spellings, "_told", set())
    record = json.loads((old / "config.json").read_text())
    record["config"] = _as_written_before(record["config"])
    assert set(RESUMED[design]) <= set(record["config"]["model"])
    (old / "config.json").write_text(json.dumps(record))
    capsys.readouterr()

    stored = build_run_config(record["config"])  # what `reslab train --out old` and the reports read
    assert stored == cfg and run_identity(stored) == run_identity(cfg)
    assert set(_notices(capsys)) >= {f"reslab: model.{k} is now model.options.{MOVED[k][1]}" for k in RESUMED[design]}
    assert RunFolder(old).claim(cfg.to_dict()) is True  # the same run: resumed, not refused
    resumed = train(stored, old, log=lambda *_: None)
    assert resumed.status == "completed"
    assert train_losses(old) == train_losses(tmp_path / "reference") and sorted(train_losses(old)) == list(range(1, 9))
