"""Sweep specs: expansion, run identities, and one clear line per mistake in a spec file."""

from __future__ import annotations

import subprocess
import sys

import pytest

from reslab.errors import ConfigError, ReslabError
from reslab.spec.expand import expand, with_seeds
from reslab.spec.load import load_spec, parse_spec
from tests.sweep_helpers import spec_dict, write_spec
from tests.kill_helpers import SAFETY_NET_S


def test_grid_expansion_is_the_cartesian_product_seed_major(tmp_path):
    data = spec_dict(tmp_path, seeds=[3, 1])
    data["grid"] = {"optim.lr": [1e-3, 3e-3], "model.n_layer": [1, 2]}
    data["scales"] = {"small": {"train": {"steps": 10}}, "big": {"train": {"steps": 20}}}
    runs = expand(parse_spec(data))
    assert len(runs) == 2 * 2 * 2 * 2 * 2  # seeds x scales x variants x lr x n_layer
    assert [r.seed for r in runs[:16]] == [3] * 16  # every variant of the first seed comes first
    assert len({r.id for r in runs}) == len(runs)
    lr3 = [r for r in runs if r.grid == {"optim.lr": 3e-3, "model.n_layer": 1} and r.scale == "big"]
    assert {r.config.optim.lr for r in lr3} == {3e-3} and {r.config.train.steps for r in lr3} == {20}
    none = [r for r in runs if r.variant == "none"]
    assert all(not r.config.model.attn_res and not r.config.model.ffn_res for r in none)
    assert runs[0].label == "full-lr=0.001-n_layer=1-small-s3"


def test_identity_follows_the_resolved_config_not_the_spec_text(tmp_path):
    a = {r.label: r.id for r in expand(parse_spec(spec_dict(tmp_path)))}
    renamed = spec_dict(tmp_path, name="other-name")
    b = {r.label: r.id for r in expand(parse_spec(renamed))}
    assert a == b  # the sweep's name is not part of a run's identity
    changed = spec_dict(tmp_path)
    changed["variants"]["none"]["optim"] = {"lr": 1e-3}
    c = {r.label: r.id for r in expand(parse_spec(changed))}
    assert c["full-s1"] == a["full-s1"] and c["none-s1"] != a["none-s1"]
    # an override equal to the default resolves to the same config, hence the same run
    same = spec_dict(tmp_path)
    same["variants"]["full"] = {"model": {"attn_res": True}}
    assert {r.label: r.id for r in expand(parse_spec(same))} == a


def test_preset_base_scale_variant_grid_seed_merge_order(tmp_path):
    data = spec_dict(tmp_path, seeds=[7])
    data["preset"] = "tiny"
    data["scales"] = {"s": {"optim": {"lr": 5e-3, "warmup_steps": 3}}}
    data["variants"] = {"full": {"optim": {"warmup_steps": 0}}}
    data["grid"] = {"optim.lr": [2e-3]}
    (run,) = expand(parse_spec(data))
    cfg = run.config
    assert cfg.optim.warmup_steps == 0        # variant beats scale
    assert cfg.optim.lr == 2e-3               # grid beats scale
    assert cfg.train.seed == 7
    assert cfg.model.n_layer == 2             # base beats preset (tiny has 4)
    assert cfg.train.progress == "off" and cfg.train.threads is None  # fixed by the runner


def test_with_seeds_truncates_and_extends():
    spec = parse_spec({"name": "x", "seeds": [1337, 42, 123], "variants": {"a": {}}})
    assert with_seeds(spec, 2).seeds == [1337, 42]
    assert with_seeds(spec, 5).seeds == [1337, 42, 123, 1, 2]
    with pytest.raises(ReslabError, match="--seeds"):
        with_seeds(spec, 0)


BAD_SPECS = [
    ({"baseline": "nope"}, "baseline: unknown variant 'nope'"),
    ({"seeds": []}, "seeds: must list at least one seed"),
    ({"seeds": [1, 1]}, "repeats a seed"),
    ({"seeds": "1"}, "seeds: expected a list"),
    ({"seeds": [1, "two"]}, "seeds[1]: expected an integer"),
    ({"colour": "red"}, "colour: unknown key"),
    ({"variants": {}}, "variants: declare at least one variant"),
    ({"variants": {"full": {"model": {"n_layers": 3}}}}, "variants.full.model.n_layers: unknown key"),
    ({"variants": {"full": {"optim": {"lr": "fast"}}}}, "variants.full.optim.lr: expected a number"),
    ({"variants": {"full": {"model": {"design": "pre-lm"}}}}, "variant full: model.design"),
    ({"variants": {"a b": {}}}, "variants.a b: the name must be"),
    ({"grid": {"optim.lr": []}}, "grid.optim.lr: give a non-empty list"),
    ({"grid": {"optim.lrr": [1]}}, "optim.lrr: unknown key"),
    ({"preset": "huge"}, "preset: unknown preset 'huge'"),
    ({"report": {"no_skip": "zero"}}, "report.no_skip: unknown variant 'zero'"),
    ({"variants": {"a": {}, "b": {"model": {"attn_res": True}}}}, "variants resolve to identical runs"),
]


@pytest.mark.parametrize("change,message", BAD_SPECS, ids=[m for _, m in BAD_SPECS])
def test_bad_specs_name_the_problem(tmp_path, change, message):
    data = spec_dict(tmp_path)
    data.update(change)
    if "full" not in data["variants"] and "baseline" not in change:
        data.pop("baseline")  # only the error under test
    with pytest.raises(ConfigError) as e:
        parse_spec(data)
    assert any(message in line for line in e.value.errors), e.value.errors


def test_every_error_in_a_file_is_reported_at_once(tmp_path):
    data = spec_dict(tmp_path)
    data.update(seeds=[], baseline="nope")
    data["variants"]["full"] = {"model": {"n_layers": 3}}
    with pytest.raises(ConfigError) as e:
        load_spec(write_spec(tmp_path, data))
    assert len(e.value.errors) == 3
    assert all(line.startswith(str(tmp_path / "spec.toml")) for line in e.value.errors)


def test_cli_bad_spec_is_one_line_per_problem_exit_2(tmp_path):
    data = spec_dict(tmp_path)
    data["variants"]["none"]["model"]["n_layers"] = 3
    path = write_spec(tmp_path, data)
    bad_toml = tmp_path / "broken.toml"
    bad_toml.write_text("name = [\n")
    for args, message in (([str(path)], "variants.none.model.n_layers: unknown key"),
                          ([str(bad_toml)], "not valid TOML"),
                          ([str(tmp_path / "missing.toml")], "no such spec file")):
        proc = subprocess.run([sys.executable, "-m", "reslab.cli", "sweep", "plan", *args,
                               "--store", str(tmp_path / "store")], capture_output=True, text=True)
        assert proc.returncode == 2
        assert message in proc.stderr and "Traceback" not in proc.stderr
        assert all(line.startswith("reslab: error:") for line in proc.stderr.strip().splitlines())
    assert not (tmp_path / "store").exists()  # a rejected spec writes nothing


def test_unknown_scale_is_refused(tmp_path):
    data = spec_dict(tmp_path)
    data["scales"] = {"tiny": {}}
    spec = parse_spec(data)
    with pytest.raises(ReslabError, match="--scale paper: unknown scale"):
        expand(spec, ["paper"])


def test_named_grid_axis_applies_each_points_overrides(tmp_path):
    data = spec_dict(tmp_path, seeds=[1])
    data["grid"] = {"convention": {"nanogpt": {"model": {"tie_weights": True}, "train": {"eval_mode": "random"}},
                                   "residualgpt": {"model": {"tie_weights": False}}},
                    "optim.lr": [1e-3]}
    runs = {r.label: r for r in expand(parse_spec(data))}
    assert sorted(runs) == ["full-convention=nanogpt-lr=0.001-s1", "full-convention=residualgpt-lr=0.001-s1",
                            "none-convention=nanogpt-lr=0.001-s1", "none-convention=residualgpt-lr=0.001-s1"]
    nano = runs["none-convention=nanogpt-lr=0.001-s1"].config
    assert nano.model.tie_weights and nano.train.eval_mode == "random" and not nano.model.attn_res
    resi = runs["full-convention=residualgpt-lr=0.001-s1"].config
    assert not resi.model.tie_weights and resi.train.eval_mode == "fixed"
    data["grid"]["convention"]["residualgpt"] = {"model": {"tie_weight": False}}
    with pytest.raises(ConfigError, match="grid.convention.residualgpt.model.tie_weight: unknown key"):
        parse_spec(data)


def test_cli_run_options_are_checked_before_anything_is_written(tmp_path):
    path = write_spec(tmp_path, spec_dict(tmp_path))
    store = tmp_path / "store"
    cli = [sys.executable, "-m", "reslab.cli"]
    for args, message in ((["sweep", "run", str(path), "--jobs", "0"], "--jobs: must be at least 1, got 0"),
                          (["sweep", "run", str(path), "--seeds", "0"], "--seeds: must be at least 1, got 0"),
                          (["sweep", "plan", str(path), "--set", "model.n_layerz=3"],
                           "--set model.n_layerz: unknown key"),
                          (["study", "run", "gain-confound", "--jobs", "-1"], "--jobs: must be at least 1")):
        proc = subprocess.run([*cli, *args, "--store", str(store)], capture_output=True, text=True, timeout=SAFETY_NET_S)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not store.exists()


def test_a_field_added_at_its_default_keeps_identities_and_resumes(tmp_path):
    """Identities and the resume check read the config's canonical form (fields that differ from
    the defaults), so a config written before a field existed is the same run, while a changed
    value is a different one."""
    from reslab.spec.expand import run_identity
    from reslab.train.config import build_run_config, canonical
    from reslab.train.run_folder import RunFolder

    cfg = build_run_config({"model": {"design": "post-ln", "n_layer": 3}, "train": {"seed": 7}})
    older = cfg.to_dict()
    del older["model"]["layer_designs"], older["model"]["qk_norm"], older["diagnostics"]["spike_window"]
    assert canonical(older) == canonical(cfg.to_dict())
    assert canonical(cfg.to_dict())["model"]["n_layer"] == 3 and "qk_norm" not in canonical(cfg.to_dict())["model"]
    folder = RunFolder(tmp_path / "run")
    folder.claim(older)                      # written by an older reslab
    assert folder.claim(cfg.to_dict()) is True  # the same run: resumed, not refused
    changed = cfg.replace(model=cfg.model.replace(qk_norm=True))
    with pytest.raises(ReslabError, match="holds a run with a different config"):
        folder.claim(changed.to_dict())
    assert run_identity(changed) != run_identity(cfg)
    assert run_identity(cfg.replace(name="renamed")) == run_identity(cfg)
    # an explicit value equal to the default is the default
    same = build_run_config({"model": {"design": "post-ln", "n_layer": 3, "qk_norm": False},
                             "train": {"seed": 7}})
    assert run_identity(same) == run_identity(cfg)
