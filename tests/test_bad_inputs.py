"""A clear line, never a traceback: each bad input (config, flag, data file, checkpoint) is one line on
stderr naming what and where, exit status 2, and nothing already written is lost or half-made.

Every case runs `reslab.cli.main` in-process. The trained run they share is tiny (one layer, two
steps); each test that damages it works on its own copy."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest
import tomli_w
import torch
from safetensors.torch import load_file, save_file

from reslab.cli import main
from reslab.errors import ConfigError, ReslabError
from tests.train_helpers import tiny_run, write_corpus

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"model.n_layer": 1, "model.n_head": 2, "model.n_embd": 16, "model.block_size": 16,
        "model.dropout": 0.0, "train.steps": 2, "train.eval_interval": 1, "train.eval_iters": 1,
        "train.batch_size": 2}


def cli(capsys, *argv) -> tuple[int, list[str]]:
    """(exit status, stderr lines) of one in-process `reslab` call."""
    rc = main([str(a) for a in argv])
    return rc, capsys.readouterr().err.splitlines()


def assert_one_line(rc: int, err: list[str], *words: str, status: int = 2) -> str:
    """Exactly one line on stderr (after the data log lines a run may print first), the given words
    in it, the given status, no traceback."""
    problems = [line for line in err if not line.startswith("data: ")]
    assert rc == status, err
    assert len(problems) == 1, err
    assert "Traceback" not in "\n".join(err) and "internal error" not in problems[0], err
    for w in words:
        assert w in problems[0], (w, problems[0])
    return problems[0]


def write_config(path: Path, cfg: dict) -> Path:
    path.write_text(tomli_w.dumps(cfg))
    return path


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A tiny corpus, its config file and one finished two-step run."""
    root = tmp_path_factory.mktemp("lab")
    corpus = write_corpus(root, n_chars=20_000)
    config = write_config(root / "tiny.toml", tiny_run(corpus, root / "cache", **TINY))
    assert main(["train", str(config), "--out", str(root / "run")]) == 0
    return {"root": root, "corpus": corpus, "config": config, "run": root / "run"}


@pytest.fixture
def run_copy(lab, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(lab["run"], dst)
    return dst


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file of a folder, for 'nothing already written is lost'."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock"}


# ---- reslab sample: flags -------------------------------------------------------------------------
@pytest.mark.parametrize("flag, value", [
    ("--top-k", "0"), ("--top-k", "-5"), ("--top-k", "many"),
    ("--temperature", "nan"), ("--temperature", "0"), ("--temperature", "-1"), ("--temperature", "inf"),
    ("--temperature", "-inf"), ("--temperature", "warm"),
    ("--tokens", "0"), ("--tokens", "-3"), ("--tokens", str(10**20)),
    ("--seed", "-1"), ("--seed", str(2**64)),
])
def test_sample_refuses_a_bad_flag_in_one_line(lab, capsys, flag, value):
    rc, err = cli(capsys, "sample", lab["run"], f"{flag}={value}")  # = : argparse reads -inf as a flag otherwise
    line = assert_one_line(rc, err, f"error: {flag}: ")
    assert value in line or "expected" in line, line


def test_sample_api_refuses_what_the_flags_refuse(lab):
    from reslab.train.sample import sample

    for kw, word in ((dict(temperature=float("nan")), "--temperature"), (dict(top_k=0), "--top-k"),
                     (dict(tokens=0), "--tokens"), (dict(seed=-1), "--seed")):
        with pytest.raises(ConfigError, match=word):
            sample(lab["run"], **kw)
    assert sample(lab["run"], tokens=3, top_k=10**9)  # a k above the vocabulary keeps every token


# ---- data: a split shorter than one batch ---------------------------------------------------------
def test_a_validation_split_shorter_than_a_batch_is_refused_before_training(lab, tmp_path, capsys):
    out = tmp_path / "run"
    rc, err = cli(capsys, "train", lab["config"], "--set", "data.val_fraction=0.00001", "--out", out)
    assert_one_line(rc, err, "val split", "1 token,", "block_size + 1 = 17")
    assert not out.exists()  # refused before the run folder was made


def test_a_small_text_file_with_a_large_block_size_names_the_train_split(lab, tmp_path, capsys):
    small = write_corpus(tmp_path, n_chars=300)
    cfg = tiny_run(small, lab["root"] / "cache", **{**TINY, "model.block_size": 512})
    out = tmp_path / "run"
    rc, err = cli(capsys, "train", write_config(tmp_path / "c.toml", cfg), "--out", out)
    assert_one_line(rc, err, "train split", "270 tokens", "block_size + 1 = 513")
    assert not out.exists()


# ---- output folders and config files ------------------------------------------------------------
@pytest.fixture
def a_file(tmp_path) -> Path:
    f = tmp_path / "file.txt"
    f.write_text("not a folder\n")
    return f


@pytest.mark.parametrize("where, words", [
    ("file", ["--out", "exists and is a file"]),
    ("under-file", ["--out", "is a file, not a folder"]),
    ("proc", ["--out", "cannot write into /proc"]),
])
def test_train_refuses_an_unusable_out_folder(lab, a_file, capsys, where, words):
    out = {"file": a_file, "under-file": a_file / "sub" / "run", "proc": Path("/proc/reslab-run")}[where]
    if where == "proc" and not Path("/proc").is_dir():
        pytest.skip("no /proc on this system")
    rc, err = cli(capsys, "train", lab["config"], "--out", out)
    assert_one_line(rc, err, *words)
    assert a_file.read_text() == "not a folder\n"


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="root writes into read-only folders: chmod cannot make the case")
def test_train_refuses_a_read_only_out_folder(lab, tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        rc, err = cli(capsys, "train", lab["config"], "--out", ro / "run")
    finally:
        ro.chmod(stat.S_IRWXU)
    assert_one_line(rc, err, "--out", "cannot write into")


def test_the_write_check_leaves_nothing_behind(tmp_path):
    from reslab.fileio import check_output_dir

    check_output_dir(tmp_path / "new" / "deeper", "--out")
    check_output_dir(tmp_path, "--out")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ReslabError, match="an empty path"):
        check_output_dir("", "--out")


@pytest.mark.parametrize("verb", [["sweep", "run"], ["study", "run", "partial-residual"]])
def test_a_store_that_is_a_file_is_refused_before_anything_is_written(lab, a_file, tmp_path, capsys, verb):
    base = {k: v for k, v in tiny_run(lab["corpus"], lab["root"] / "cache", **TINY).items() if k != "name"}
    spec = tmp_path / "spec.toml"
    spec.write_text(tomli_w.dumps({"name": "s", "seeds": [1], "variants": {"full": {}}, "base": base}))
    argv = [*verb, spec] if verb[0] == "sweep" else verb
    rc, err = cli(capsys, *argv, "--store", a_file / "store")
    assert_one_line(rc, err, "--store", "is a file, not a folder")
    rc, err = cli(capsys, *argv, "--store", a_file)
    assert_one_line(rc, err, "--store", "exists and is a file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt", "spec.toml"]


@pytest.mark.parametrize("kind, words", [
    ("folder", ["is a folder, not a file"]),
    ("missing", ["no such file"]),
    ("utf8", ["not UTF-8 text", "offset 11"]),
    ("toml", ["not valid TOML"]),
    ("empty-name", ["an empty path"]),
])
def test_a_config_file_that_cannot_be_read_is_one_line(tmp_path, capsys, kind, words):
    path = {"folder": tmp_path, "missing": tmp_path / "missing.toml", "utf8": tmp_path / "latin1.toml",
            "toml": tmp_path / "bad.toml", "empty-name": ""}[kind]
    if kind == "utf8":
        path.write_bytes(b'name = "caf\xe9"\n')
    if kind == "toml":
        path.write_text("[model\nn_layer = 2\n")
    for argv in (["train", path], ["data", "prepare", path], ["model", "--config", path]):
        rc, err = cli(capsys, *argv)
        assert_one_line(rc, err, str(path) if path else "", *words)
    assert not (tmp_path / "runs").exists()


# ---- reslab probe -------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, words", [
    (["--threads", "-1"], ["--threads", "got -1"]),
    (["--threads", "0"], ["--threads", "got 0"]),
    (["--depths", "0"], ["--depths", ">= 1"]),
    (["--depths", "six,12"], ["--depths", "comma list"]),
    (["--depths", ","], ["--depths", "at least one"]),
    (["--depths", "20000"], ["--depths", "at most 10,000"]),
    (["--seeds", "0"], ["--seeds", "got 0"]),
    (["--width", "30", "--heads", "4"], ["--heads", "do not divide --width 30"]),
    (["--width", "-8"], ["--width"]),
    (["--seq", "0"], ["--seq"]),
    (["--batch", "x"], ["--batch", "expected an integer"]),
    (["--mode", "bogus"], ["--mode", "unknown mode"]),
    (["--designs", "pre-ln,bogus"], ["--designs", "'bogus'"]),
    (["--mode", "sim", "--designs", "pre", "--width", "60000"], ["--width", "numbers"]),
])
def test_probe_refuses_bad_flags_before_probing(tmp_path, capsys, argv, words):
    out = tmp_path / "probe"
    rc, err = cli(capsys, "probe", "--out", out, *(["--depths", "2"] if "--depths" not in argv else []), *argv)
    assert_one_line(rc, err, *words)
    assert not out.exists()


def test_probe_refuses_an_out_path_under_a_file(a_file, capsys):
    rc, err = cli(capsys, "probe", "--depths", "2", "--seeds", "1", "--out", a_file / "probe")
    assert_one_line(rc, err, "--out", "is a file")


# ---- train.compile without a compiler -----------------------------------------------------------
def test_compile_without_a_compiler_is_one_line_before_training(lab, tmp_path, monkeypatch, capsys):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("TORCH_INDUCTOR_INSTALL_GXX", raising=False)
    out = tmp_path / "run"
    monkeypatch.delenv("CXX", raising=False)
    rc, err = cli(capsys, "train", lab["config"], "--set", "train.compile=true", "--out", out)
    assert_one_line(rc, err, "train.compile", "g++ is not on PATH", "train.compile = false")
    monkeypatch.setenv("CXX", str(tmp_path / "nowhere" / "c++"))
    rc, err = cli(capsys, "train", lab["config"], "--set", "train.compile=true", "--out", out)
    assert_one_line(rc, err, "train.compile", "nowhere/c++")
    assert not out.exists()


def test_the_compiler_check_finds_a_compiler_on_path(tmp_path, monkeypatch):
    """The check looks where inductor looks: a g++ on PATH (here a stub) or $CXX satisfies it."""
    from reslab.train.runtime import compiler_problem

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "g++"
    stub.write_text("#!/bin/sh\necho stub\n")
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("TORCH_INDUCTOR_INSTALL_GXX", raising=False)
    assert compiler_problem("cpu") is None
    stub.unlink()
    assert "g++ is not on PATH" in compiler_problem("cpu")
    monkeypatch.setenv("CXX", sys.executable)  # any executable: inductor only asks it for --version
    assert compiler_problem("cpu") is None


# ---- damaged checkpoints ------------------------------------------------------------------------
STEP = Path("checkpoints") / "step_00000002"
BEST = Path("checkpoints") / "best_step_00000002"


def _edit_state(run: Path, edit) -> None:
    path = run / STEP / "state.json"
    state = json.loads(path.read_text())
    edit(state)
    path.write_text(json.dumps(state))


@pytest.mark.parametrize("edit, words", [
    (lambda s: s.pop("step"), ["step: missing"]),
    (lambda s: s.pop("rng"), ["rng: missing"]),
    (lambda s: s.pop("param_groups"), ["param_groups: missing"]),
    (lambda s: s.update(step="2"), ["step: expected a non-negative integer, got '2'"]),
    (lambda s: s.update(step=7), ["step: 7 does not match the folder step_00000002"]),
    (lambda s: s.update(rng={}), ["rng: expected a non-empty list"]),
    (lambda s: s.update(rng=[{"torch_cpu": "AAAA"}]), ["rng[0].torch_cpu: holds 3 bytes"]),
    (lambda s: s.update(rng=[{"torch_cpu": "%%"}]), ["rng[0].torch_cpu: not valid base64"]),
    (lambda s: s.update(param_groups=[{"names": 3}]), ["param_groups: expected a list of objects"]),
    (lambda s: s["param_groups"][0].update(betas=[0.9]), ["param_groups[0].betas"]),
    (lambda s: s["param_groups"][0].pop("eps"), ["param_groups[0].eps: missing"]),
    (lambda s: s["param_groups"][0].update(weight_decay="x"), ["param_groups[0].weight_decay"]),
    (lambda s: s.update(best_val_loss="low"), ["best_val_loss: expected a number or null"]),
    (lambda s: s.update(scaler={"scale": 1.0}), ["scaler: expected null or an object"]),
])
def test_resuming_a_checkpoint_with_a_bad_state_json_is_one_line(lab, run_copy, capsys, edit, words):
    _edit_state(run_copy, edit)
    before = snapshot(run_copy)
    rc, err = cli(capsys, "train", lab["config"], "--out", run_copy)
    assert_one_line(rc, err, str(run_copy / STEP / "state.json"), *words)
    assert snapshot(run_copy) == before  # the refusal wrote nothing into the run


@pytest.mark.parametrize("damage", ["model.safetensors", "optimizer.safetensors", "state.json"])
def test_a_damaged_checkpoint_names_the_older_one_to_resume_from(lab, run_copy, tmp_path, capsys, damage):
    """Checkpoints are renamed into place whole, so damage came from outside: the line says which older
    checkpoint a resume could start from (or that there is none), and moving the damaged one away does
    resume from it."""
    ckpts = run_copy / "checkpoints"
    older = ckpts / "step_00000001"
    assert older.is_dir()  # the shared run keeps its two checkpoints
    target = run_copy / STEP / damage
    target.write_bytes(target.read_bytes()[: len(target.read_bytes()) // 2])
    shutil.move(str(older), str(tmp_path / "older"))
    rc, err = cli(capsys, "train", lab["config"], "--out", run_copy)
    line = assert_one_line(rc, err, str(target), "the checkpoint is damaged")
    assert line.endswith(f"(move step_00000002 out of {ckpts} to start the run afresh)")
    shutil.move(str(tmp_path / "older"), str(older))
    rc, err = cli(capsys, "train", lab["config"], "--out", run_copy)
    line = assert_one_line(rc, err, str(target), "the checkpoint is damaged")
    assert line.endswith(f"(move step_00000002 out of {ckpts} to resume from step_00000001)")
    shutil.move(str(run_copy / STEP), str(tmp_path / "damaged"))
    rc, err = cli(capsys, "train", lab["config"], "--out", run_copy)
    assert rc == 0 and any("from step 1" in e for e in err), err


def _edit_tensors(path: Path, key: str, change) -> None:
    tensors = load_file(str(path))
    tensors[key] = change(tensors[key])
    save_file(tensors, str(path))


WEIGHT = "blocks.0.attn.c_attn.weight"


@pytest.mark.parametrize("change, words", [
    (lambda t: torch.zeros(3), ["has shape (3,), config needs (48, 16)"]),
    (lambda t: t.to(torch.int32), ["has dtype int32, the model holds float32"]),
    (lambda t: t > 0, ["has dtype bool"]),
])
def test_model_weights_of_the_wrong_shape_or_dtype_are_one_line_for_every_verb(lab, run_copy, tmp_path, capsys,
                                                                             change, words):
    for folder in (STEP, BEST):
        _edit_tensors(run_copy / folder / "model.safetensors", WEIGHT, change)
    before = snapshot(run_copy)
    rc, err = cli(capsys, "train", lab["config"], "--out", run_copy)
    assert_one_line(rc, err, str(run_copy / STEP / "model.safetensors"), WEIGHT, *words)
    best_weights = str(run_copy / BEST / "model.safetensors")
    for argv in (["sample", run_copy, "--tokens", "3"], ["export", "hf", run_copy, tmp_path / "hf"]):
        rc, err = cli(capsys, *argv)
        assert_one_line(rc, err, best_weights, WEIGHT, *words)
    assert snapshot(run_copy) == before
    assert not (tmp_path / "hf").exists()


def test_optimizer_moments_of_the_wrong_shape_are_one_line(lab, run_copy, capsys):
    _edit_tensors(run_copy / STEP / "optimizer.safetensors", f"{WEIGHT}/exp_avg", lambda t: torch.zeros(2))
    rc, err = cli(capsys, "train", lab["config"], "--out", run_copy)
    assert_one_line(rc, err, "optimizer.safetensors", f"{WEIGHT}/exp_avg", "shape (48, 16)")


@pytest.mark.parametrize("best, words", [
    ({"step": 2}, ["folder: expected a name like"]),
    ({"step": 2, "folder": "../../elsewhere"}, ["'../../elsewhere'"]),
    ([1, 2], ["expected a JSON object"]),
    ("{not json", ["not valid JSON"]),
])
def test_a_damaged_best_json_is_named_by_sample_and_export(run_copy, tmp_path, capsys, best, words):
    path = run_copy / "checkpoints" / "best.json"
    path.write_text(best if isinstance(best, str) else json.dumps(best))
    for argv in (["sample", run_copy, "--tokens", "3"], ["export", "hf", run_copy, tmp_path / "hf"]):
        rc, err = cli(capsys, *argv)
        assert_one_line(rc, err, str(path), *words)
    rc, _ = cli(capsys, "sample", run_copy, "--tokens", "3", "--checkpoint", "last")
    assert rc == 0  # the last checkpoint does not need best.json


@pytest.mark.parametrize("edit, words", [
    (lambda m: m["config"].update(n_head=5), ["config.n_head", "do not divide"]),
    (lambda m: m["config"].update(n_layer="one"), ["config.n_layer: expected an integer"]),
    (lambda m: m.update(prores_step=-1), ["prores_step"]),
])
def test_a_damaged_model_json_is_one_line(run_copy, capsys, edit, words):
    path = run_copy / BEST / "model.json"
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))
    rc, err = cli(capsys, "sample", run_copy, "--tokens", "3")
    assert_one_line(rc, err, str(path), *words)


# ---- the last resort ----------------------------------------------------------------------------
def _raise(exc):
    def verb(args):
        raise exc
    return verb


def test_an_unexpected_exception_is_one_internal_error_line(monkeypatch, capsys):
    import reslab.cli.presets as presets_verb
    import reslab.cli.root as root

    monkeypatch.setattr(presets_verb, "cmd_presets", _raise(ZeroDivisionError("boom\nsecond line")))
    monkeypatch.setattr(root, "_PARSER", None)  # rebuilt with the patched verb
    monkeypatch.delenv("RESLAB_DEBUG", raising=False)
    rc, err = cli(capsys, "presets")
    assert rc == 1 and err == ["reslab: internal error: ZeroDivisionError: boom (set RESLAB_DEBUG=1 for the "
                               "traceback; please report it)"]
    monkeypatch.setenv("RESLAB_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        main(["presets"])


def test_an_os_error_on_a_path_is_one_line_naming_it(monkeypatch, capsys):
    import reslab.cli.presets as presets_verb
    import reslab.cli.root as root

    monkeypatch.setattr(presets_verb, "cmd_presets", _raise(PermissionError(13, "Permission denied", "/x/y")))
    monkeypatch.setattr(root, "_PARSER", None)
    monkeypatch.delenv("RESLAB_DEBUG", raising=False)
    rc, err = cli(capsys, "presets")
    assert rc == 2 and err == ["reslab: error: /x/y: Permission denied"]


# ---- found by the fuzz (tests/test_cli_fuzz.py), pinned here ------------------------------------
def test_reslab_model_counts_a_huge_config_without_allocating_it(capsys):
    """Counting runs on the meta device: 2 layers of width 65,536 over a 2^20 vocabulary (about
    2.7e11 parameters, a terabyte of float32) is counted, not allocated."""
    rc = main(["model", "--set", "model.n_embd=65536", "--set", "model.n_head=64", "--set", "model.n_layer=2",
               "--set", "model.vocab_size=1048576", "--json"])
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["params"]["total"] > 10**11


@pytest.mark.parametrize("value, words", [
    ("1" + "0" * 30, ["model.n_layer", "out of range", "31 digits"]),
    ("nan", ["model.dropout", "finite"]),
])
def test_numbers_beyond_64_bits_and_nan_are_refused_by_type(capsys, value, words):
    field = "n_layer" if value[0] == "1" else "dropout"
    rc, err = cli(capsys, "model", "--set", f"model.{field}={value}")
    assert_one_line(rc, err, *words)


def _spec_file(lab, tmp_path, **extra) -> Path:
    base = {k: v for k, v in tiny_run(lab["corpus"], lab["root"] / "cache", **TINY).items() if k != "name"}
    return write_config(tmp_path / "spec.toml", {"name": "s", "seeds": [1], "variants": {"full": {}},
                                                 "base": base, **extra})


def test_a_sweep_refuses_a_train_seed_it_would_overwrite(lab, tmp_path, capsys):
    spec = _spec_file(lab, tmp_path)
    rc, err = cli(capsys, "sweep", "plan", spec, "--set", "train.seed=5", "--store", tmp_path / "store")
    assert_one_line(rc, err, "train.seed", "comes from the spec's seeds")
    rc, err = cli(capsys, "sweep", "plan", _spec_file(lab, tmp_path, grid={"train.seed": [1, 2, 3]}))
    assert_one_line(rc, err, "grid['train.seed']", "(all 3 values)")


def test_a_run_field_wrong_in_every_run_is_one_line_with_a_count(lab, tmp_path, capsys):
    spec = _spec_file(lab, tmp_path, seeds=[1, 2, 3], variants={"a": {}, "b": {"model": {"n_layer": 2}}})
    rc, err = cli(capsys, "sweep", "plan", spec, "--set", "model.gate_bias=1.0")
    assert_one_line(rc, err, "model.gate_bias", "(and 5 more runs)")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_sweep_run_refuses_cuda_runs_on_a_cpu_machine_before_creating_the_store(lab, tmp_path, capsys):
    store = tmp_path / "store"
    rc, err = cli(capsys, "sweep", "run", _spec_file(lab, tmp_path), "--set", "train.device=cuda", "--store", store)
    assert_one_line(rc, err, "train.device", "no CUDA device")
    assert not store.exists()


def test_runs_refuses_a_status_no_run_can_have(tmp_path, capsys):
    rc, err = cli(capsys, "runs", "--store", tmp_path, "--status", "done")
    assert_one_line(rc, err, "--status 'done'", "completed")


def test_reindex_refuses_a_damaged_sweep_json_and_keeps_the_old_index(lab, tmp_path, capsys):
    from reslab.sweep.store import Store

    store = Store(tmp_path / "store")
    run_dir = store.runs_dir / "r-0"
    shutil.copytree(lab["run"], run_dir)
    store.write_membership(run_dir, "abc", {}, {"spec": "s", "variant": "v", "scale": "", "grid": {}, "seed": 1})
    assert store.reindex() == 1
    index = store.db_path.read_bytes()
    (run_dir / "sweep.json").write_text(json.dumps({"id": "abc", "members": [{"spec": "s"}]}))
    rc, err = cli(capsys, "runs", "reindex", "--store", store.root)
    assert_one_line(rc, err, "sweep.json", "members[0].variant")
    assert store.db_path.read_bytes() == index


@pytest.mark.parametrize("key, value, words", [
    ("attn_pdrop", 1.5, ["attn_pdrop must be in [0, 1)"]),
    ("layer_norm_epsilon", 10**400, ["layer_norm_epsilon", "out of range"]),
])
def test_import_hf_refuses_numbers_its_field_checks_let_through(lab, tmp_path, capsys, key, value, words):
    from reslab.hf import export_hf

    hf = export_hf(lab["run"] / BEST, tmp_path / "hf")
    conf = json.loads((hf / "config.json").read_text())
    conf[key] = value
    (hf / "config.json").write_text(json.dumps(conf))
    rc, err = cli(capsys, "import", "hf", hf, tmp_path / "out")
    assert_one_line(rc, err, "config.json", *words)
    assert not (tmp_path / "out").exists()


def test_a_closed_stdout_pipe_ends_quietly(monkeypatch, capsys):
    """`reslab runs | head`: the reader leaving is no error of reslab's; nothing on stderr, 141."""
    import reslab.cli.presets as presets_verb
    import reslab.cli.root as root

    monkeypatch.setattr(presets_verb, "cmd_presets", _raise(BrokenPipeError(32, "Broken pipe")))
    monkeypatch.setattr(root, "_PARSER", None)
    rc, err = cli(capsys, "presets")
    assert rc == 141 and err == []


def test_a_damaged_tokens_per_s_in_metrics_is_skipped_when_indexing(tmp_path):
    """reindex reads metrics.jsonl rows a user (or a crash) may have damaged: a rate that is not a
    positive number is left out of the median instead of raising."""
    import json

    from reslab.sweep.store import run_row_from_folder

    run = tmp_path / "runs" / "r-abc"
    run.mkdir(parents=True)
    (run / "sweep.json").write_text(json.dumps({"id": "abc", "config": {"model": {"design": "pre-ln"}}}))
    rows = [{"step": 1, "tokens_per_s": "fast"}, {"step": 2, "tokens_per_s": 100.0},
            {"step": 3, "tokens_per_s": None}, {"step": 4, "tokens_per_s": True}, {"step": 5, "tokens_per_s": 300.0},
            {"step": 6, "tokens_per_s": float("nan")}, {"step": 7, "tokens_per_s": 200.0}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    row = run_row_from_folder(run)
    assert row["id"] == "abc" and row["tokens_per_s"] == 200.0


@pytest.mark.parametrize("argv,flag", [
    (["train", "--preset", "tiny", "--preset", "nanogpt-cpu", "--out", "{tmp}/run"], "--preset"),
    (["assess", "pre-ln", "--scale", "smoke", "--scale", "cpu", "--plan"], "--scale"),
    (["sample", "{tmp}/run", "--tokens", "5", "--tokens", "9"], "--tokens"),
])
def test_a_one_value_flag_given_twice_is_refused(tmp_path, capsys, argv, flag):
    """argparse keeps the last of two silently: `--preset tiny --preset nanogpt-cpu` trained the second."""
    rc, err = cli(capsys, *[a.format(tmp=tmp_path) for a in argv])
    assert_one_line(rc, err, f"{flag} given twice")
    assert not (tmp_path / "run").exists()
