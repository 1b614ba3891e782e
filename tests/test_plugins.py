"""Plugins: a design registered from outside reslab (register_design, [model.options], entry points,
RESLAB_PLUGINS, --plugin) is seen by every path, and what it gets wrong is one clear line."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import reslab
from reslab import ConfigError, ModelConfig, ReslabError, register_design, resolve
from reslab.model.registry import DESIGNS
from reslab.testing import ALL_CHECKS, OPTION_PROBES, REFUSED_BY_FLAG, check_design, refusal_advice, small_config

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "mix-pre-post"
EXAMPLE_SRC = EXAMPLE / "src"


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(EXAMPLE_SRC), str(ROOT / "src")]))
    env.pop("RESLAB_PLUGINS", None)
    env.update(extra)
    return env


def _reslab(*args, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reslab", *args], capture_output=True, text=True,
                          env=env or _env(), cwd=cwd, timeout=600)


@pytest.fixture
def example():
    """The example plugin imported in this process (an installed copy would load by entry point),
    and removed again afterwards, so that the other tests see reslab's own designs only."""
    sys.path.insert(0, str(EXAMPLE_SRC))
    try:
        import reslab_mix_pre_post  # noqa: F401
        yield "mix-pre-post"
    finally:
        sys.path.remove(str(EXAMPLE_SRC))
        sys.modules.pop("reslab_mix_pre_post", None)
        DESIGNS.pop("mix-pre-post", None)


@pytest.fixture
def scratch_design():
    """Registers designs named test-*, and removes them after the test."""
    yield
    for name in [n for n in DESIGNS if n.startswith("test-")]:
        del DESIGNS[name]


# ---- the registry ------------------------------------------------------------------------------------
def test_built_in_designs_register_through_the_public_api():
    d = DESIGNS["pre-ln"]
    assert d.plugin is None and isinstance(d.block, str)  # imported when a model is built
    assert len(DESIGNS) >= 18 and reslab.designs()[:2] == ["pre-ln", "post-ln"]


def test_a_design_registered_from_outside_trains_with_its_own_options(scratch_design):
    from reslab.model.blocks.pre_norm import PreLNBlock

    @dataclasses.dataclass(frozen=True)
    class Opts:
        width: int = 3
        on: bool = True

    class Block(PreLNBlock):
        def __init__(self, cfg, layer):
            super().__init__(cfg, layer)
            self.width = reslab.design_options(cfg).width

    d = register_design("test-block", Block, formula="x = x + F(N(x))", reference="a test", options=Opts)
    assert d.plugin == __name__ and d.options is Opts
    cfg = resolve(ModelConfig(design="test-block", n_layer=2, n_head=2, n_embd=16, options={"width": 5}))
    assert cfg.options == {"width": 5, "on": True}  # defaults filled: part of the run identity
    model = reslab.build_model(cfg)
    assert model.blocks[0].width == 5


@pytest.mark.parametrize("options,line", [
    ({"widht": 4}, "model.options.widht: unknown key; allowed keys are on, width"),
    ({"width": "four"}, "model.options.width: expected an integer, got 'four'"),
    ({"width": -1}, "model.options.width: must be >= 0"),
])
def test_bad_options_are_one_line_naming_the_key(scratch_design, options, line):
    from reslab.model.blocks.pre_norm import PreLNBlock

    @dataclasses.dataclass(frozen=True)
    class Opts:
        width: int = 3
        on: bool = True

        def __post_init__(self):
            if self.width < 0:
                raise ValueError("width must be >= 0")

    register_design("test-opts", PreLNBlock, formula="f", reference="r", options=Opts)
    with pytest.raises(ConfigError) as err:
        resolve(ModelConfig(design="test-opts", options=options))
    assert err.value.errors == [line]


def test_options_for_a_design_without_any_are_refused():
    with pytest.raises(ConfigError) as err:
        resolve(ModelConfig(design="pre-ln", options={"x": 1}))
    assert err.value.errors == ["model.options: pre-ln has no options of its own; remove x"]


@pytest.mark.parametrize("kwargs,message", [
    (dict(name="Bad Name"), "a design name is 1-64 lower-case letters"),
    (dict(name="pre-ln"), "the name is taken (registered by reslab)"),
    (dict(block=42), "block must be a block class"),
    (dict(stream="triple"), "stream must be one of single, dual, hyper, ngpt"),
    (dict(norms=("batchnorm",)), "norms must be a non-empty subset"),
    (dict(defaults={"n_layers": 2}), "'n_layers' is not a ModelConfig field"),
    (dict(options=dict), "options must be a dataclass"),
])
def test_register_design_refuses_mistakes_in_one_line(scratch_design, kwargs, message):
    from reslab.model.blocks.pre_norm import PreLNBlock

    args = dict(name="test-x", block=PreLNBlock, formula="f", reference="r")
    args.update(kwargs)
    with pytest.raises(ReslabError) as err:
        register_design(args.pop("name"), args.pop("block"), **args)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_refusals_are_built_from_the_flags_and_list_plugins(scratch_design):
    from reslab.model.blocks.pre_norm import PreLNBlock

    register_design("test-prores", PreLNBlock, formula="f", reference="r", prores=True)
    with pytest.raises(ConfigError) as err:
        resolve(ModelConfig(design="resi-dual", prores="linear"))
    assert "test-prores" in err.value.errors[0]  # the plugin's flag puts it in the list of designs allowed


# Everything a design can allow, allowed: the kit's advice is followed from here, one flag at a time.
_ALLOW_ALL = dict(norms=("layernorm", "rmsnorm", "dyt", "none"), partial_residual=True, prores=True,
                  attention_options=True, per_layer=True, layer_base=True, learned_scales=True,
                  attention_carry=True, qk_norm=True)


@pytest.mark.parametrize("label", [probe[0] for probe in OPTION_PROBES])
def test_the_kits_advice_names_a_way_that_refuses_each_probe(scratch_design, label):
    """Following refusal_advice(label) in a design that allows everything else refuses the probe with a
    line naming it, and leaves the probe's base config accepted: the advice names a way that exists
    (a flag that no probe has, e.g. for branch_gain, would not)."""
    from reslab.model.blocks.pre_norm import PreLNBlock

    _, base_over, probe_over = next(p for p in OPTION_PROBES if p[0] == label)
    field_name = label.split("=")[0]
    kit_config = lambda name, **over: small_config(name, 2, **{**base_over, **over})  # noqa: E731
    register_design("test-allows", PreLNBlock, formula="f", reference="r", **_ALLOW_ALL)
    resolve(kit_config("test-allows", **probe_over))  # allowed: the refusal below is the advice's doing
    advice = refusal_advice(label)
    if label in REFUSED_BY_FLAG:
        flag, value = REFUSED_BY_FLAG[label]
        assert f"register_design(..., {flag}={value!r})" in advice
        register_design("test-refuses", PreLNBlock, formula="f", reference="r", **{**_ALLOW_ALL, flag: value})
    else:
        assert "check" in advice and f"model.{field_name}" in advice
        allowed = getattr(resolve(kit_config("test-allows")), field_name)

        def check(cfg, given):
            return [f"model.{field_name}: not in this design"] if getattr(cfg, field_name) != allowed else []

        register_design("test-refuses", PreLNBlock, formula="f", reference="r", check=check, **_ALLOW_ALL)
    resolve(kit_config("test-refuses"))
    with pytest.raises(ConfigError) as err:
        resolve(kit_config("test-refuses", **probe_over))
    assert any(line.startswith(f"model.{field_name}") for line in err.value.errors), err.value.errors


def test_a_range_only_option_must_leave_the_logits_alone(scratch_design):
    """options fields with metadata range_only (resi-dual's scale) are held to the same function; one
    that changes it fails the kit, naming it."""
    from reslab.model.blocks.gated import GatedBlock

    @dataclasses.dataclass(frozen=True)
    class Opts:
        bias: float = dataclasses.field(default=2.0, metadata={"range_only": True})

    register_design("test-range", GatedBlock, formula="f", reference="r", options=Opts, partial_residual=False)
    with pytest.raises(AssertionError, match="options.bias is documented to change only the numeric range"):
        check_design("test-range", checks=("options",))


def test_an_own_option_may_act_only_in_deeper_models_but_must_act(scratch_design):
    """An option that picks layers acts only from the third layer on (depth-attention's stride): the kit
    tries it again at 4 layers. One that acts at no depth still fails, naming it."""
    from reslab.model.blocks.pre_norm import PreLNBlock

    @dataclasses.dataclass(frozen=True)
    class Opts:
        deep_gain: int = 0   # blocks 3, 4, ... double their input when > 0: nothing to see in 2 layers

    class LateBlock(PreLNBlock):
        def __init__(self, cfg, layer):
            super().__init__(cfg, layer)
            self.late = layer >= 3 and reslab.design_options(cfg, layer).deep_gain > 0

        def forward(self, x):
            return super().forward(2 * x if self.late else x)

    @dataclasses.dataclass(frozen=True)
    class Idle:
        unused: int = 0

    register_design("test-late", LateBlock, formula="f", reference="r", options=Opts)
    check_design("test-late", checks=("options",))
    register_design("test-idle", PreLNBlock, formula="f", reference="r", options=Idle)
    with pytest.raises(AssertionError, match="options.unused = 1 changes nothing at 2 or 4 layers"):
        check_design("test-idle", checks=("options",))


# ---- the example plugin, every verb ----------------------------------------------------------------
def test_the_example_runs_its_own_test_suite():
    """examples/mix-pre-post/tests, as the plugin's author runs them (a process of their own)."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE / "tests")],
                         capture_output=True, text=True, env=_env(), cwd=EXAMPLE, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "3 passed" in out.stdout


@pytest.mark.parametrize("name", [n for n in DESIGNS if DESIGNS[n].plugin is None])
def test_every_built_in_design_passes_the_conformance_kit(name, tmp_path):
    """reslab's own designs go through the kit a plugin's author calls: one code path."""
    assert check_design(name, tmp_path) == list(ALL_CHECKS)


def test_variants_lists_the_example_through_reslab_plugins():
    out = _reslab("variants", "--json", env=_env(RESLAB_PLUGINS="reslab_mix_pre_post"))
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["mix-pre-post"]["plugin"] == "reslab_mix_pre_post"
    assert rows["mix-pre-post"]["options"] == {"mix_init": 0.5, "learn_mix": True}
    without = _reslab("variants", "--json")
    assert "mix-pre-post" not in {r["name"] for r in json.loads(without.stdout)}


def test_an_entry_point_loads_the_plugin_without_any_flag(tmp_path):
    """An installed package's `reslab.designs` entry point (a dist-info on the path, as pip writes it)."""
    dist = tmp_path / "site" / "reslab_mix_pre_post-0.1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: reslab-mix-pre-post\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[reslab.designs]\nmix-pre-post = reslab_mix_pre_post\n")
    env = _env(PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(EXAMPLE_SRC), str(ROOT / "src")]))
    out = _reslab("model", "--set", "model.design=mix-pre-post", "--set", "model.n_layer=2", "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["config"]["options"] == {"mix_init": 0.5, "learn_mix": True}
    # the card names the installed design too (the example's README: `reslab assess mix-pre-post`)
    plan = _reslab("assess", "mix-pre-post", "--scale", "smoke", "--plan", "--store", str(tmp_path / "s"), env=env)
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.startswith("assess mix-pre-post against pre-ln, scale smoke")


def test_plugin_flag_on_a_verb_and_a_missing_plugin(tmp_path):
    ok = _reslab("model", "--plugin", "reslab_mix_pre_post", "--set", "model.design=mix-pre-post")
    assert ok.returncode == 0, ok.stderr
    bad = _reslab("variants", "--plugin", "no_such_plugin_module")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "--plugin: plugin 'no_such_plugin_module' cannot be loaded (ModuleNotFoundError" in bad.stderr
    unknown = _reslab("model", "--set", "model.design=mix-pre-post")
    assert unknown.returncode == 2 and "--plugin MODULE" in unknown.stderr and "Traceback" not in unknown.stderr


def test_submitit_workers_see_the_plugin_too(tmp_path):
    """submitit's workers (as on Slurm) are processes of their own: RESLAB_PLUGINS reaches them."""
    pytest.importorskip("submitit", reason="submitit is in the [test] extra")
    run = _reslab("--plugin", "reslab_mix_pre_post", "sweep", "run", str(EXAMPLE / "compare.toml"),
                  "--scale", "smoke", "--seeds", "1", "--store", str(tmp_path / "store"),
                  "--executor", "submitit-local", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    statuses = {r["variant"]: r["status"] for r in json.loads(
        _reslab("runs", "--store", str(tmp_path / "store"), "--json").stdout)}
    assert statuses == {"pre-ln": "completed", "post-ln": "completed", "mix-pre-post": "completed",
                        "mix-pre-post-fixed": "completed"}


def test_a_smoke_sweep_with_the_plugin_completes_and_reports(tmp_path):
    """Sweep workers are fresh processes: --plugin reaches them through RESLAB_PLUGINS."""
    run = _reslab("--plugin", "reslab_mix_pre_post", "sweep", "run", str(EXAMPLE / "compare.toml"),
                  "--scale", "smoke", "--seeds", "2", "--store", str(tmp_path / "store"), "--jobs", "2",
                  cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    report = _reslab("--plugin", "reslab_mix_pre_post", "report", str(tmp_path / "store"), "--format", "json")
    assert report.returncode == 0, report.stderr
    rows = {r["variant"] for r in json.loads(report.stdout)["table"]}
    assert rows == {"pre-ln", "post-ln", "mix-pre-post", "mix-pre-post-fixed"}
    analysis = subprocess.run([sys.executable, str(EXAMPLE / "analyse.py"), str(tmp_path / "store")],
                              capture_output=True, text=True, env=_env(), timeout=300)
    assert analysis.returncode == 0, analysis.stderr
    assert "mix-pre-post" in analysis.stdout


def test_a_saved_model_names_its_plugin_and_loads_only_with_it(example, tmp_path):
    model = reslab.build_model(example, n_layer=2, n_head=2, n_embd=16, block_size=8)
    reslab.save_model(model, tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    assert meta["plugin"] == {"module": "reslab_mix_pre_post", "version": "0.1.0"}
    code = textwrap.dedent(f"""
        import reslab
        try:
            reslab.load_model({str(tmp_path / 'm')!r})
        except reslab.ReslabError as e:
            print(e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_env(PYTHONPATH=str(ROOT / "src")), timeout=300)
    assert "design 'mix-pre-post' comes from the plugin reslab_mix_pre_post 0.1.0, which is not loaded" in out.stdout
    assert "--plugin reslab_mix_pre_post" in out.stdout
