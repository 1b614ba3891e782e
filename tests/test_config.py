"""Config validation: unknown names, impossible shapes and meaningless combinations are refused
with one line per problem that names the field; the CLI exits 2 without a traceback."""

import json
import subprocess
import sys

import pytest

from reslab import ConfigError, ModelConfig, resolve
from reslab.cli import main
from reslab.config_sources import parse_set
from reslab.errors import ReslabError

BAD = [
    ({"design": "pre-lm"}, "model.design: unknown design 'pre-lm'; choose one of pre-ln"),
    ({"n_head": 5}, "model.n_head: 5 heads do not divide n_embd=384"),
    ({"n_layer": 0}, "model.n_layer: must be a positive integer"),
    ({"dropout": 1.5}, "model.dropout: must be in [0, 1)"),
    ({"prores": "cubic"}, "model.prores: unknown schedule 'cubic'; choose one of none, linear"),
    ({"prores_warmup": -1}, "model.prores_warmup: must be >= 0"),
    ({"branch_gain": 0.0}, "model.branch_gain: must be a positive finite number"),
    ({"design": "rezero", "norm": "layernorm"}, "model.norm: rezero allows 'none'"),
    ({"design": "post-ln", "norm": "none"}, "model.norm: post-ln allows 'layernorm', 'rmsnorm'"),
    ({"design": "resi-dual", "prores": "linear"}, "model.prores: ProRes composes with pre-ln"),
    ({"design": "b2t", "attn_res": False}, "model.attn_res: b2t has a fixed skip structure"),
    ({"design": "sas-p", "ffn_res": True}, "model.ffn_res: sas-p has a fixed skip structure"),
    ({"design": "post-ln", "shaped_attention": True}, "model.shaped_attention: only pre-ln, sas and sas-p"),
    ({"design": "pre-ln", "norm_free": True}, "model.norm_free: only sas and sas-p"),
    ({"design": "sas", "gain_mode": "init", "branch_gain": 2.0}, "model.gain_mode: 'init' scales"),
    ({"design": "pre-ln", "init": "identity"}, "model.init: 'identity' makes shaped attention"),
    ({"design": "pre-ln", "init": "t-fixup"}, "model.init: 't-fixup' replaces normalisation"),
    ({"design": "pre-ln", "resi_dual_scale": 0.5}, "model.resi_dual_scale: only resi-dual"),
    ({"design": "mix-ln", "n_layer": 4, "options": {"post_layers": 5}}, "model.options.post_layers: must be in 0..n_layer=4"),
    ({"design": "mix-ln", "options": {"post_layers": -1}}, "model.options.post_layers: must be a whole number >= 0"),
    ({"design": "resi-dual", "options": {"scale": 0.0}}, "model.options.scale: must be positive"),
    ({"design": "pre-ln", "options": {"norm_free": True}}, "model.options: pre-ln has no options of its own"),
    ({"design": "sas", "options": {"scale": 2.0}}, "model.options.scale: unknown key; allowed keys are ff_gain, norm_free"),
    ({"design": "pre-ln", "mix_ln_post_layers": 1}, "model.mix_ln_post_layers: only mix-ln"),
    ({"pos": "rope", "n_embd": 30, "n_head": 10}, "model.pos: rope needs an even head size"),
]


@pytest.mark.parametrize("fields,message", BAD)
def test_bad_configs_are_refused_naming_the_field(fields, message):
    with pytest.raises(ConfigError) as err:
        resolve(ModelConfig.from_dict(fields))
    assert any(line.startswith(message) for line in err.value.errors), err.value.errors


def test_type_errors_and_unknown_keys_are_all_reported_at_once():
    with pytest.raises(ConfigError) as err:
        ModelConfig.from_dict({"n_layer": "six", "n_heads": 4, "bias": 1, "mlp": "tanh"})
    text = "\n".join(err.value.errors)
    assert len(err.value.errors) == 4
    assert "model.n_layer: expected an integer, got 'six'" in text
    assert "model.n_heads: unknown key" in text
    assert "model.bias: expected true or false, got 1" in text
    assert "model.mlp: 'tanh' is not allowed; choose one of 'gelu', 'gelu-tanh', 'relu', 'swiglu'" in text


def test_several_problems_give_several_lines():
    with pytest.raises(ConfigError) as err:
        resolve(ModelConfig(design="post-ln", norm="none", prores="linear", options={"norm_free": True}))
    assert len(err.value.errors) == 2  # norm and options; post-ln takes ProRes


def test_design_defaults_are_filled():
    cfg = resolve(ModelConfig(design="sas", n_layer=8))
    assert (cfg.init, cfg.attn_res, cfg.ffn_res, cfg.shaped_attention, cfg.vp_identity) == \
        ("identity", False, True, True, True)
    assert resolve(ModelConfig(design="deepnorm")).init == "deepnorm"
    assert resolve(ModelConfig(design="rezero")).norm == "none"
    assert resolve(ModelConfig(design="peri-ln")).embed_norm is True
    assert resolve(ModelConfig(design="mix-ln", n_layer=10)).options == {"post_layers": 3}  # ceil(L / 4)
    assert resolve(ModelConfig(design="mix-ln", n_layer=10, options={"post_layers": 0})).options == {"post_layers": 0}
    assert resolve(ModelConfig(design="pre-ln", init="xavier")).init == "xavier"


def test_resolved_config_round_trips_through_json():
    cfg = resolve(ModelConfig(design="mix-ln", prores="sqrt"))
    assert resolve(ModelConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))) == cfg


def test_parse_set_reads_toml_values_and_bare_strings():
    assert parse_set(["model.n_layer=12", "model.design=post-ln", "model.bias=false", "model.dropout=0.1"]) == \
        {"model": {"n_layer": 12, "design": "post-ln", "bias": False, "dropout": 0.1}}


@pytest.mark.parametrize("items, message", [
    (["model.norm=derf", "model.norm=dyt"], "--set 'model.norm=dyt': 'model.norm=derf' already sets model.norm"),
    (["model.n_layer=2", "model=1"], "--set 'model=1': 'model.n_layer=2' already sets model.n_layer"),
    (["model=1", "model.n_layer=2"], "--set 'model.n_layer=2': 'model=1' already sets model"),
    ([" model.bias=true", "model.bias =false"], "--set 'model.bias =false': ' model.bias=true' already sets model.bias"),
])
def test_parse_set_refuses_a_setting_given_twice(items, message):
    # Last-wins would drop the earlier value without a word (a pasted command line, a typo'd key).
    with pytest.raises(ReslabError) as err:
        parse_set(items)
    assert str(err.value) == message + "; give each setting once"


def test_parse_set_keeps_neighbours_that_share_a_prefix_of_letters():
    # optim.lr and optim.lr_min share letters, not a table: both are kept.
    assert parse_set(["optim.lr=0.1", "optim.lr_min=0.01", "model.norm=rms"]) == \
        {"optim": {"lr": 0.1, "lr_min": 0.01}, "model": {"norm": "rms"}}


def test_cli_setting_given_twice_is_one_line_and_exit_2(capsys):
    assert main(["model", "--set", "model.norm=derf", "--set", "model.norm=dyt"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["reslab: error: --set 'model.norm=dyt': 'model.norm=derf' already sets model.norm; "
                   "give each setting once"]


def test_cli_bad_config_prints_one_line_and_exits_2(capsys):
    assert main(["model", "--set", "model.n_head=5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["reslab: error: model.n_head: 5 heads do not divide n_embd=384; choose a divisor of 384"]


def test_cli_bad_toml_file(tmp_path, capsys):
    f = tmp_path / "c.toml"
    f.write_text("[model\nn_layer = 3\n")
    assert main(["model", "--config", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"reslab: error: {f}: not valid TOML")
    assert main(["model", "--config", str(tmp_path / "missing.toml")]) == 2
    f.write_text("[model]\nn_layer = 3\n[train]\nsteps = 3\n")
    assert main(["model", "--config", str(f)]) == 2


def test_cli_model_shows_resolved_config(tmp_path, capsys):
    f = tmp_path / "c.toml"
    f.write_text('[model]\ndesign = "sas-p"\nn_layer = 3\nn_embd = 64\nn_head = 4\n')
    assert main(["model", "--config", str(f), "--set", "model.options.norm_free=true", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["options"] == {"norm_free": True, "ff_gain": 0.1} and out["config"]["init"] == "identity"
    assert out["params"]["total"] > out["params"]["non_embedding"] > 0


def test_real_process_exit_status_and_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "reslab.cli", "model", "--set", "model.design=nope"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_variants_lists_every_design(capsys):
    import reslab

    assert main(["variants", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == reslab.designs()
    assert all(r["formula"] and r["reference"] for r in rows)
    assert main(["variants"]) == 0
    text = capsys.readouterr().out
    assert "x = N(a*x + F(x)), a = (2L)^(1/4)" in text


def test_variants_says_what_each_design_takes_as_resolve_decides(capsys):
    """The listing asks resolve, so a design's own refusal shows: HybridNorm's built-in QKV-norm refuses
    qk_norm and shaped attention (sas) refuses XSA, which the designs' capability flags allowed."""
    import reslab
    from reslab.model.catalogue import check_tables

    assert check_tables() == []
    assert main(["variants", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["hybridnorm"]["qk_norm"] is False and rows["pre-ln"]["qk_norm"] is True
    assert rows["sas"]["xsa"] is False and rows["sas"]["attn_gate"] is True
    assert rows["ngpt"]["embed_scale"] is False and rows["pre-ln"]["dyt_alpha_recipe"] is True
    assert rows["keel"]["defaults"]["norm"] == "rmsnorm" and rows["fixup"]["defaults"]["bias"] is False
    assert "t-fixup" in rows["pre-ln"]["inits"] and "identity" not in rows["keel"]["inits"]
    assert rows["gpas"]["norms"] == ["layernorm", "rmsnorm", "dyt", "none", "derf", "seednorm", "rmsnorm-nogain"]
    for name, row in rows.items():  # what the listing says, a config does (one design each way)
        for key, settings in (("qk_norm", {"qk_norm": True}), ("attn_gate", {"attn_gate": "head"})):
            try:
                reslab.build_model(name, n_layer=2, n_embd=32, n_head=4, vocab_size=65, block_size=16, **settings)
                built = True
            except reslab.ConfigError:
                built = False
            assert built is row[key], (name, key)

    assert main(["variants", "--settings", "--json"]) == 0
    settings = json.loads(capsys.readouterr().out)
    assert sorted(settings) == ["inits", "model_options", "norms"]
    by_setting = {r["setting"]: r for part in settings.values() for r in part}
    assert "erf(alpha x + s)" in by_setting['norm = "derf"']["formula"]
    assert by_setting['init = "t-fixup"']["needs"] == {"norm": "none"}
    assert "hybridnorm" not in by_setting["qk_norm = true"]["designs"]
    assert main(["variants"]) == 0
    text = capsys.readouterr().out
    assert 'norm = "seednorm": y = (tanh(x . beta) * alpha + gamma)' in text
    assert 'init = "ds-init"' in text and "designs (with norm = 'none'):" in text


def test_a_refused_norm_is_one_line_not_a_cascade():
    """speedrun-lambdas normalises its embedding by default; refusing norm = 'none' is the one problem
    (a second line about embed_norm, a field the user never set, followed before)."""
    with pytest.raises(ConfigError) as e:
        resolve(ModelConfig(design="speedrun-lambdas", norm="none"))
    assert len(e.value.errors) == 1 and e.value.errors[0].startswith("model.norm: speedrun-lambdas allows")
    with pytest.raises(ConfigError) as e:  # where the norm is allowed, the embedding norm's own line stays
        resolve(ModelConfig(design="pre-ln", norm="none", embed_norm=True))
    assert e.value.errors == ["model.embed_norm: there is no norm to apply (norm = 'none')"]
