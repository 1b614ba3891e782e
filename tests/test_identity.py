"""Run identities across reslab versions: a field added later at its default resumes old runs; a
changed default makes a new run in a new folder and leaves the old one untouched."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import pytest

from reslab.sweep.runner import run_sweep
from reslab.spec.expand import expand, run_identity
from reslab.spec.load import parse_spec
from reslab.sweep.store import Store
from reslab.train import loop as loop_module
from reslab.train.config import OptimConfig, RunConfig, build_run_config, canonical, config_hash
from reslab.train.identity_defaults import BASELINE, OPTIONS_ADDED
from reslab.train.loop import train
from reslab.train.run_folder import RunFolder
from tests.sweep_helpers import curves, spec_dict
from tests.train_helpers import (LogLines, curve_rows, interrupt_before_update, resumed_steps, tiny_config, tiny_run,
                                 train_curve, write_corpus)


def _leaves(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _change_default(monkeypatch, cls, name: str, value) -> None:
    """What a later reslab that changed `cls.name`'s default looks like to a user: configs that do
    not set the field resolve to `value`, and so do the current defaults (RunConfig())."""
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    defaults = list(cls.__init__.__defaults__)
    defaults[names.index(name) - (len(names) - len(defaults))] = value
    monkeypatch.setattr(cls.__init__, "__defaults__", tuple(defaults))
    monkeypatch.setattr(cls.__dataclass_fields__[name], "default", value)
    assert getattr(cls(), name) == value


def _snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_baseline_lists_every_config_field():
    missing = sorted(set(_leaves(RunConfig().to_dict())) - set(_leaves(BASELINE)))
    assert not missing, (f"add {missing} to src/reslab/train/identity_defaults.py with the default each "
                         "field is introduced with (its docstring says why)")


def test_identities_of_known_configs_never_change():
    """Frozen identities: editing a value in the baseline (or the hashing) would change them and
    orphan every stored run."""
    configs = [{}, {"model": {"design": "post-ln", "n_layer": 12}},
               {"model": {"design": "sas-p"}, "optim": {"lr": 2e-3}, "train": {"seed": 3}}]
    ids = [run_identity(build_run_config(c)) for c in configs]
    assert ids == ["1fa4e669b615", "22720fa0cb71", "f293af1474f9"], ids


def test_an_option_added_to_a_design_later_keeps_its_runs_identities():
    """depth-attention gained options.stride on 2026-12-07: at the default it was added with, its runs
    keep the identities they had without it (frozen here: 12 layers, lr 3e-3); another value is a new run."""
    plain = {"model": {"design": "depth-attention", "n_layer": 12}, "optim": {"lr": 3e-3}}
    ident = lambda options: run_identity(build_run_config(  # noqa: E731
        {**plain, "model": {**plain["model"], **({"options": options} if options is not None else {})}}))
    assert ident(None) == ident({"stride": 1}) == "7c29f9f3414c"  # as before the option existed
    assert len({ident(None), ident({"stride": 2}), ident({"stride": 3})}) == 3
    assert "options" not in canonical(build_run_config(plain).to_dict())["model"]
    assert build_run_config(plain).model.options == {"stride": 1}  # the resolved config holds it


def test_options_added_later_name_real_design_options():
    import dataclasses as dc

    from reslab.model.registry import get_design

    for design, added in OPTIONS_ADDED.items():
        fields = {f.name for f in dc.fields(get_design(design).options)}
        assert set(added) <= fields, (design, set(added) - fields)


def test_a_field_missing_from_the_baseline_falls_back_to_its_current_default():
    cfg = build_run_config({"optim": {"lr": 2e-3}}).to_dict()
    trimmed = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASELINE.items()}
    del trimmed["optim"]["eps"]
    assert canonical(cfg, trimmed) == canonical(cfg)
    cfg["optim"]["eps"] = 1e-6
    assert canonical(cfg, trimmed)["optim"] == {"lr": 2e-3, "eps": 1e-6}


def test_a_changed_default_trains_a_new_run_in_a_new_folder(tmp_path, monkeypatch):
    data = spec_dict(tmp_path, seeds=[1], variants={"full": {}}, steps=6, eval_interval=3)
    assert "weight_decay" not in data["base"]["optim"]  # the run relies on the default
    store = Store(tmp_path / "store")
    first = run_sweep(parse_spec(data), store, jobs=1, stream=io.StringIO(), log=lambda *_: None)
    assert first.count("completed") == 1
    (old,) = (tmp_path / "store" / "runs").iterdir()
    before = _snapshot(old)
    old_id = expand(parse_spec(data))[0].id
    old_config, old_defaults = expand(parse_spec(data))[0].config.to_dict(), RunConfig().to_dict()

    _change_default(monkeypatch, OptimConfig, "weight_decay", 0.05)  # "reslab 0.2"
    spec = parse_spec(data)
    new_id = expand(spec)[0].id
    assert new_id != old_id
    assert expand(spec)[0].config.optim.weight_decay == 0.05
    # the fault this guards against: measured against each version's current defaults, the old
    # and the new run reduce to the same form, so they would share one identity and one folder
    assert canonical(expand(spec)[0].config.to_dict(), baseline={}, defaults=RunConfig().to_dict()) == \
        canonical(old_config, baseline={}, defaults=old_defaults)
    second = run_sweep(spec, store, jobs=1, stream=io.StringIO(), log=lambda *_: None)
    assert second.skipped == 0 and second.count("completed") == 1 and second.count("failed") == 0
    folders = sorted((tmp_path / "store" / "runs").iterdir())
    assert len(folders) == 2
    (new,) = [f for f in folders if f != old]
    assert new.name.endswith(new_id) and old.name.endswith(old_id)
    assert json.loads((new / "config.json").read_text())["config"]["optim"]["weight_decay"] == 0.05
    assert _snapshot(old) == before  # untouched, byte for byte
    assert curves(new) != curves(old)  # it really trained with the new default


def test_a_changed_default_gives_reslab_train_a_new_default_folder(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path)
    cfg = tiny_config(corpus, tmp_path / "cache")
    before = config_hash(cfg)
    _change_default(monkeypatch, OptimConfig, "weight_decay", 0.05)
    assert config_hash(tiny_config(corpus, tmp_path / "cache")) != before


def test_a_field_added_later_at_its_default_resumes_an_old_interrupted_run(tmp_path, monkeypatch):
    """A folder written by a reslab that lacked a field (here: model.value_residual, added later)
    resumes from its checkpoint, and its curve equals an uninterrupted run's."""
    corpus = write_corpus(tmp_path)
    overrides = {"train.steps": 12, "train.checkpoint_interval": 4, "train.eval_interval": 4}
    cfg = tiny_config(corpus, tmp_path / "cache", **overrides)
    reference = train(cfg, tmp_path / "reference", log=lambda *_: None)
    assert reference.status == "completed"

    # the process dies two updates after its second checkpoint (8): rows 9 and 10 are written
    interrupt_before_update(monkeypatch, loop_module, 10)
    old = tmp_path / "old"
    with pytest.raises(KeyboardInterrupt):
        train(cfg, old, log=lambda *_: None)
    monkeypatch.undo()
    assert train_curve(old)[-1][0] == 10
    written = json.loads((old / "config.json").read_text())
    assert written["config"]["model"].pop("value_residual") is False  # as an older reslab wrote it
    (old / "config.json").write_text(json.dumps(written))

    assert RunFolder(old).claim(cfg.to_dict()) is True
    log = LogLines()
    resumed = train(cfg, old, log=log)
    assert resumed.status == "completed"
    assert resumed_steps(log) == [8], log  # it resumed, rather than silently training again from 0
    assert curve_rows(old) == curve_rows(tmp_path / "reference")  # file order: no row twice, none lost
    assert [step for step, _ in train_curve(old)] == list(range(1, 13))
    # and the identity the sweep would give it is the one it had
    assert run_identity(build_run_config(tiny_run(corpus, tmp_path / "cache", **overrides))) == run_identity(cfg)
