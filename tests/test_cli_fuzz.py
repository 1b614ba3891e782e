"""Seeded fuzz of every `reslab` verb: thousands of malformed invocations, each with one fault, must
each end with exit status 2 and exactly one line on stderr, with no traceback and no "internal error",
and leave no output behind.

The faults: wrong types, NaN and inf, negative and out-of-range numbers, empty strings, unknown keys,
tables and flags, paths that are folders, files, missing or unwritable, damaged TOML / JSON /
safetensors files; through CLI flags, `--set` and config-file fields, for every field of every config
dataclass (RunConfig's tables, ModelConfig, DataConfig, the sweep spec and its tables) and the
Hugging Face config.json fields `import hf` reads.

Each verb gets a fixed core (every field with its first malformed values, every file fault) and
cases drawn from random.Random(seed): the seed is RESLAB_FUZZ_SEED or a fixed default, and every
failure message names it, so `RESLAB_FUZZ_SEED=<seed> pytest tests/test_cli_fuzz.py` replays it.

No case may start real work: training (after its pre-training checks), sweeps and probes are
replaced by stubs that raise WorkStarted, so a fault that validation let through fails its case at
once (and the valid control invocations prove that the same command without the fault does get that
far). Data preparation is real; each case checks that every path it names (--out, --store, inputs)
exists, or not, exactly as before, with the same bytes (a store's index and its journal files too).

The test prints the case count per verb and how long each verb's cases took (pytest -s)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import random
import shutil
import string
import time
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union

import pytest
import tomli_w
import torch
from safetensors.torch import load_file, save_file

from reslab.cli import main
from tests.train_helpers import write_corpus

DEFAULT_SEED = 20250611
SEED = int(os.environ.get("RESLAB_FUZZ_SEED", DEFAULT_SEED))
MIN_CASES = 300   # per verb
RANDOM_CASES = 200  # per verb, drawn from the seed (on top of the fixed core)
REPLAY = f"seed {SEED} (replay: RESLAB_FUZZ_SEED={SEED} python -m pytest tests/test_cli_fuzz.py)"

pytestmark = pytest.mark.usefixtures("one_thread")


class WorkStarted(Exception):
    """Raised by the stubs that replace training, sweeps and probes."""


# ---- TOML rendering ------------------------------------------------------------------------------
def toml_literal(value) -> str:
    """A TOML value as `--set key=<this>` takes it (inline tables and arrays, nan and inf)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def nested(dotted: str, value) -> dict:
    out = value
    for part in reversed(dotted.split(".")):
        out = {part: out}
    return out


def merged(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) and v else v
    return out


# ---- the fields and their malformed values -------------------------------------------------------
def unwrap(tp):
    """Optional[T] -> T (TOML cannot write null, so None is never a fuzz value)."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        arms = [a for a in typing.get_args(tp) if a is not type(None)]
        return arms[0] if len(arms) == 1 else tp
    return tp


def fields_of(cls, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, type) of every field of a config dataclass, nested dataclass tables included."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = unwrap(hints[f.name])
        path = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(tp):
            out += fields_of(tp, path + ".")
        else:
            out.append((path, tp))
    return out


def type_bad(tp) -> list:
    """Values no field of type tp can take: wrong types, nan / inf, integers beyond 64 bits."""
    origin = typing.get_origin(tp)
    if tp is bool:
        return [1, 0, "true", 1.0, [True], {"k": True}]
    if tp is int:
        return ["7", 1.5, True, 2**63, -(2**63) - 1, float("nan"), [1], {"k": 1}]
    if tp is float:
        return [float("nan"), float("inf"), float("-inf"), "0.5", True, 10**400, [0.5], {"k": 0.5}]
    if tp is str:
        return [1, True, 2.5, ["a"], {"k": "v"}]
    if origin is Literal:
        first = typing.get_args(tp)[0]
        return ["bogus", "", str(first).upper() + "!", 1, True, [first]]
    if origin is list or tp is list:
        item = typing.get_args(tp)[0] if typing.get_args(tp) else str
        return ["x", 5, {"k": 1}] + ([[type_bad(item)[0]]] if not dataclasses.is_dataclass(item) else [[5]])
    if origin is dict or tp is dict:
        args = typing.get_args(tp)
        inner = [{"k": type_bad(args[1])[0]}] if args and not dataclasses.is_dataclass(args[1]) else \
            [{"k": 5}] if args else []
        return ["x", 5, [1]] + inner
    if dataclasses.is_dataclass(tp):
        return ["x", 5, [1], {"zz_unknown": 1}]
    raise TypeError(tp)


# Design hyperparameters by their old [model] spelling (now [model.options], model/spellings.py):
# on the fuzz's pre-ln base, a value other than the old default is refused, and so is any wrong type.
OLD_SPELLINGS: list[tuple[str, object]] = [
    ("norm_free", True), ("sas_ff_gain", 0.5), ("resi_dual_scale", 2.0), ("mix_ln_post_layers", 1),
    ("hyper_streams", 2), ("hyper_mixing", "sinkhorn"), ("hyper_dynamic", True), ("sinkhorn_iters", 5),
    ("gate_bias", 1.0), ("ngpt_alpha_init", 0.1), ("gate_bias", "x"), ("hyper_streams", [1]),
]


# Values of the right type that a field must still refuse, given the fuzz's base configs (a tiny
# pre-ln model, a local text corpus, char tokenizer, CPU).
RUN_RANGE_BAD: dict[str, list] = {
    "name": [],
    "model.design": ["bogus", "", "PRE-LN", "pre_ln"],
    "model.vocab_size": [0, -1, 2**32 + 1],
    "model.n_layer": [0, -1, 10_001],
    "model.n_head": [0, -3, 3, 65_537],
    "model.n_embd": [0, -16, 17, 65_537],
    "model.block_size": [0, -8, 2**20 + 1],
    "model.dropout": [-0.1, 1.0, 7.5],
    "model.rope_base": [0.0, -1.0],
    "model.mlp_ratio": [0.0, -4.0, 2000.0, 0.001],
    "model.norm_eps": [0.0, -1e-5],
    "model.init_std": [0.0, -0.02],
    "model.branch_gain": [0.0, -1.0],
    "model.prores": ["bogus", "", "Linear"],
    "model.prores_warmup": [-1],
    "model.init": ["identity", "t-fixup"],
    "model.dyt_alpha": [0.0, -0.5, 0.7],
    "model.value_residual_init": [0.3],
    "model.branch_scale_init": [0.5],
    "model.layer_designs": [{"0": "post-ln"}, {"2": "post-ln"}, {"1": "bogus"}, {"x": "post-ln"},
                            {"²": "post-ln"}, {"1-": "post-ln"}],
    "data.path": ["", "\0x", "@missing", "@folder", "@binary", "@empty"],
    "data.hf_dataset": ["x"],
    "data.hf_config": ["x"],
    "data.hf_max_docs": [0, 5],
    "data.hf_text_field": [""],
    "data.tokenizer": ["hf"],
    "data.tokenizer_path": ["x.json", ""],
    "data.bpe_vocab_size": [0, 256, 2**32],
    "data.val_fraction": [0.0, 1.0, -0.1, 1.5],
    "data.cache_dir": ["", "\0x", "@file", "@under-file"],
    "optim.lr": [0.0, -1e-3],
    "optim.min_lr": [-1e-4, 1.0],
    "optim.warmup_steps": [-1],
    "optim.decay_steps": [0, -5],
    "optim.wsd_decay_fraction": [0.0, -0.5, 1.5],
    "optim.beta1": [1.0, -0.1, 1.5],
    "optim.beta2": [1.0, -0.1],
    "optim.eps": [0.0, -1e-8],
    "optim.weight_decay": [-0.1],
    "optim.grad_clip": [-1.0],
    "train.steps": [0, -1],
    "train.batch_size": [0, -2, 2**40],
    "train.grad_accum": [0, -1],
    "train.eval_interval": [0, -1],
    "train.eval_iters": [0, 2**40],
    "train.eval_batch_size": [0, -1, 2**40],
    "train.eval_seed": [-1],
    "train.log_interval": [0],
    "train.checkpoint_interval": [-1],
    "train.keep_checkpoints": [0, -1],
    "train.seed": [-1, -(2**63)],
    "train.init_seed": [-1],
    "train.data_seed": [-1],
    "train.dropout_seed": [-1],
    "train.dtype": ["bfloat16", "float16"],   # autocast dtypes are for CUDA; the base runs on the CPU
    "train.threads": [0, -1, 1025],
    "train.nan_at_step": [-1],
    "diagnostics.interval": [0, -1],
    "diagnostics.batch_size": [0, 2**40],
    "diagnostics.seed": [-1],
    "diagnostics.spike_window": [0, 1],
    "diagnostics.spike_threshold": [0.0, -1.0],
}
if not torch.cuda.is_available():
    RUN_RANGE_BAD["train.device"] = ["cuda"]
# what only training refuses (the machine's device and precision): valid for data prepare and plans
TRAIN_ONLY = {"train.device", "train.dtype"}
# fields where every value of the right type is valid for the base config (a malformed value is a
# wrong type only): flags, free strings, and choices that all train
FREE_RUN_FIELDS = {"name", "data.hf_split", "data.download", "data.fallback", "train.wandb_project",
                   "train.tensorboard", "train.wandb", "train.compile", "train.tf32", "train.deterministic"}

SPEC_RANGE_BAD: dict[str, list] = {
    "name": ["", "a b", "../x", "x/y", "-lead"],
    "seeds": [[], [-1], [1, 1], [1.5]],
    "variants": [{}, {"a b": {}}, {"v": 5}, {"v": {"zz_table": {"k": 1}}}, {"v": {"model": {"n_layer": 0}}},
                 {"v": {"name": "x"}}, {"v": {"model": {"design": "bogus"}}}],
    "preset": ["bogus", "", "../studies/prores"],
    "scale_presets": [{"nope": "tiny"}],
    "base": [{"zz_table": {"k": 1}}, {"model": {"design": "bogus"}}, {"name": "x"}, {"train": {"steps": 0}}],
    "baseline": ["nope", ""],
    "scales": [{"a b": {}}, {"t": {"zz_table": {"k": 1}}}, {"t": {"optim": {"lr": -1.0}}}],
    "default_scales": [["nope"]],
    "scale_variants": [{"nope": ["full"]}],
    "grid": [{"optim.lr": []}, {"optim.lr": 5}, {"optim.lr": ["x"]}, {"zz.key": [1]}, {"axis": {"a b": {}}},
             {"axis": {"p": 5}}, {"optim.lr": [-1.0]},
             {"optim.lr": [1e-3] * 10, "optim.min_lr": [0.0] * 100, "train.eval_seed": list(range(200))},
             {"train.seed": [1, 2, 3]}],
    "slurm.time_min": [0, -1],
    "slurm.gpus_per_run": [-1],
    "slurm.cpus_per_task": [0],
    "slurm.mem_gb": [0],
    "slurm.max_parallel": [0],
    "report.no_skip": ["nope"],
    "report.collapse_margin": [-0.1],
    "report.published": [[{"variant": "nope", "value": 1.0, "source": "s", "setup": "x"}],
                         [{"variant": "full", "source": "s", "setup": "x"}]],
    "overrides": [{"zz_table": {"k": 1}}, {"model": {"n_layer": -1}}],
    "study.source": [],
    "study.seeds": [{"t": 0}, {"t": 1001}],
    "study.estimates": [{"t": {"runs": 0}}, {"t": {}}, {"t": {"runs": 1, "jobs": 0}},
                        {"t": {"runs": 1, "cpu_minutes": -1.0}}],
}
FREE_SPEC_FIELDS = {"description", "question", "report.notes", "report.probe", "slurm.partition",
                    "slurm.account", "study.designs"}

ALPHABET = string.ascii_letters + string.digits + " _-./:=\\\"'é中😀\t#[]{}"


def random_text(rng: random.Random, lo: int = 1, hi: int = 12) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(lo, hi)))


def random_bad(tp, rng: random.Random):
    """One random value no field of type tp can take."""
    origin = typing.get_origin(tp)
    if tp is int:
        return rng.choice([2**63 + rng.randrange(2**40), -(2**63) - 1 - rng.randrange(2**40),
                           10 ** rng.randint(20, 400), rng.uniform(-1e6, 1e6) + 0.5, random_text(rng),
                           rng.choice([True, False]), [rng.randint(0, 9)], float("nan")])
    if tp is float:
        return rng.choice([float("nan"), float("inf"), float("-inf"), 10 ** rng.randint(309, 500),
                           random_text(rng), rng.choice([True, False]), [rng.random()]])
    if tp is bool:
        return rng.choice([rng.randint(-9, 9), rng.random(), random_text(rng), [True]])
    if tp is str:
        return rng.choice([rng.randint(-9, 9), rng.random(), rng.choice([True, False]), [random_text(rng)]])
    if origin is Literal:
        allowed = typing.get_args(tp)
        value = random_text(rng, 0)
        return value if value not in allowed else value + "!"
    return rng.choice(type_bad(tp))


def random_range_bad(path: str, rng: random.Random, table: dict):
    """A random value of the right type that `path` must refuse (perturbing its table's values)."""
    value = rng.choice(table[path])
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        return -rng.randint(1, 10**12)
    if isinstance(value, float) and value < 0:
        return -rng.uniform(1e-9, 1e300)
    return value


def bad_values(path: str, tp, table: dict, free: set) -> list:
    """The fixed malformed values of one field: its type's, then its table's."""
    return type_bad(tp) + ([] if path in free else table.get(path, []))


def malformed(path: str, tp, rng: random.Random, table: dict, free: set):
    """A random malformed value for one field: of its type, or (sometimes) from its table."""
    if table.get(path) and path not in free and rng.random() < 0.4:
        return random_range_bad(path, rng, table)
    return random_bad(tp, rng)


# ---- the world the cases run in --------------------------------------------------------------------
TINY_RUN = {
    "name": "fz",
    "model": {"design": "pre-ln", "n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8, "dropout": 0.0},
    "data": {"corpus": "text", "tokenizer": "char"},
    "optim": {"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 0},
    "train": {"steps": 1, "batch_size": 2, "eval_interval": 1, "eval_iters": 1, "threads": 1,
              "progress": "off", "device": "cpu"},
}
HF_FIELDS = {"vocab_size": "int", "n_positions": "int", "n_embd": "int", "n_layer": "int", "n_head": "int",
             "n_inner": "int", "activation_function": "act", "resid_pdrop": "drop", "embd_pdrop": "drop",
             "attn_pdrop": "drop", "layer_norm_epsilon": "eps", "tie_word_embeddings": "bool",
             "scale_attn_weights": "true", "scale_attn_by_inverse_layer_idx": "false",
             "add_cross_attention": "false", "model_type": "type"}


class World:
    """Files shared by the cases, built once: a corpus, configs, a trained run, an HF export, a
    store, and a stock of damaged files."""

    def __init__(self, root: Path):
        self.root = root
        self.n = 0
        self.corpus = write_corpus(root, n_chars=3000)
        self.cache = root / "cache"
        self.run_cfg = merged(TINY_RUN, {"data": {"path": str(self.corpus), "cache_dir": str(self.cache)}})
        self.config = self.toml_file(self.run_cfg, "base.toml")
        self.model_config = self.toml_file({"model": TINY_RUN["model"]}, "model.toml")
        self.folder = root / "a-folder"
        self.folder.mkdir()
        (self.folder / "x.txt").write_text("x")
        self.file = root / "a-file.txt"
        self.file.write_text("a file, not a folder\n")
        self.binary = root / "binary.txt"
        self.binary.write_bytes(b"\xff\xfe\x00garbage")
        self.empty = root / "empty.txt"
        self.empty.write_text("")
        self.bad_toml = self.write("bad.toml", "[model\nn_layer = 2\n")
        self.bad_utf8 = root / "latin1.toml"
        self.bad_utf8.write_bytes(b'name = "caf\xe9"\n')
        self.spec = {"name": "fz", "seeds": [1], "variants": {"full": {}},
                     "base": {k: v for k, v in self.run_cfg.items() if k != "name"}}
        self.spec_file = self.toml_file(self.spec, "spec.toml")

    # -- helpers
    def fresh(self, name: str = "out") -> Path:
        """A path no case has used: outputs that must not appear."""
        self.n += 1
        return self.root / "fresh" / f"{name}-{self.n}"

    def write(self, name: str, text: str) -> Path:
        path = self.root / "files" / f"{self.n}-{name}"
        self.n += 1
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def toml_file(self, data: dict, name: str = "c.toml") -> Path:
        return self.write(name, tomli_w.dumps(data))

    def bad_path(self, kind: str) -> str:
        """A path of a given fault, for fields and flags that name files or folders."""
        return {"@missing": str(self.root / "missing.txt"), "@folder": str(self.folder),
                "@file": str(self.file), "@under-file": str(self.file / "sub"),
                "@binary": str(self.binary), "@empty": str(self.empty)}.get(kind, kind)

    def out_faults(self) -> list[tuple[str, str]]:
        """(path, note) of output folders that cannot be written."""
        faults = [(str(self.file), "out is a file"), (str(self.file / "sub"), "out under a file"), ("", "empty out")]
        if Path("/proc").is_dir():
            faults.append(("/proc/reslab-fuzz", "out in /proc"))
        return faults

    def config_file_faults(self) -> list[tuple[str, str]]:
        return [(str(self.folder), "config is a folder"), (str(self.root / "missing.toml"), "missing config"),
                (str(self.bad_toml), "bad TOML"), (str(self.bad_utf8), "bad UTF-8"), ("", "empty config path")]


def build_artifacts(w: World) -> None:
    """The trained run, its HF export, a post-ln model and a results store."""
    from reslab.config import ModelConfig
    from reslab.hf import export_hf
    from reslab.model.gpt import GPT
    from reslab.model.io import save_model
    from reslab.sweep.runner import record_spec
    from reslab.spec.expand import expand
    from reslab.spec.load import parse_spec
    from reslab.sweep.store import Store

    w.run = w.root / "run"
    assert main(["train", str(w.config), "--out", str(w.run), "--no-store"]) == 0  # copied into a store below
    w.best = w.run / "checkpoints" / json.loads((w.run / "checkpoints" / "best.json").read_text())["folder"]
    w.hf = export_hf(w.best, w.root / "hf")
    w.model = w.root / "model"  # a model folder that `sample` can read: the best checkpoint and the tokenizer
    shutil.copytree(w.best, w.model)
    shutil.copy(w.run / "tokenizer.json", w.model / "tokenizer.json")
    w.post_ln = save_model(GPT(ModelConfig(design="post-ln", n_layer=1, n_head=2, n_embd=16, block_size=8)),
                           w.root / "post-ln")
    shutil.copy(w.run / "tokenizer.json", w.post_ln / "tokenizer.json")
    # a store with one finished run of the spec, indexed
    w.store = w.root / "store"
    store = Store(w.store)
    spec = parse_spec(w.spec)
    runs = expand(spec)
    record_spec(store, spec, runs, str(w.spec_file))
    run = runs[0]
    folder = store.folder_for(run.id, run.label)
    shutil.copytree(w.run, folder)
    store.write_membership(folder, run.id, run.config.to_dict(), run.membership())
    store.close()
    store.reindex()


def damaged_copy(w: World, src: Path, note: str, edit) -> tuple[str, str]:
    """A copy of src (a run, model, HF or store folder) with edit(copy) applied: the originals stay
    intact for the other cases (real copies, not links, so no edit can write through)."""
    dst = w.fresh("damaged")
    shutil.copytree(src, dst)
    edit(dst)
    return str(dst), note


def _rewrite(path: Path, text: str | bytes) -> None:
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)


def _edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    _rewrite(path, json.dumps(data))


def _edit_tensors(path: Path, change) -> None:
    tensors = load_file(str(path))
    change(tensors)
    save_file(tensors, str(path))


def model_folder_faults(w: World, rng: random.Random) -> list[tuple[str, str]]:
    """(path, note) of damaged model folders (model.json, model.safetensors), for `sample` and
    `export hf`: every ModelConfig field of model.json with malformed values."""
    from reslab.config import ModelConfig

    faults = [(str(w.root / "missing-model"), "missing model folder"), (str(w.file), "model is a file"),
              (str(w.folder), "folder without a model"), ("", "empty model path")]
    for path, tp in fields_of(ModelConfig):
        values = bad_values("model." + path, tp, RUN_RANGE_BAD, set())
        for v in values[:3] + [random_bad(tp, rng)]:
            if isinstance(v, str) and v.startswith("@"):
                continue
            faults.append(damaged_copy(w, w.model, f"model.json config.{path}={v!r}",
                                       lambda d, p=path, v=v: _edit_json(d / "model.json",
                                                                         lambda m: m["config"].__setitem__(p, v))))
    for key, v in OLD_SPELLINGS:
        faults.append(damaged_copy(w, w.model, f"model.json config.{key}={v!r} (old spelling)",
                                   lambda d, k=key, v=v: _edit_json(d / "model.json",
                                                                    lambda m: m["config"].__setitem__(k, v))))
    for note, change in (("format", lambda m: m.update(format="other")), ("version", lambda m: m.update(version=2)),
                         ("prores_step -1", lambda m: m.update(prores_step=-1)),
                         ("prores_step str", lambda m: m.update(prores_step="3")),
                         ("config missing", lambda m: m.pop("config")), ("config list", lambda m: m.update(config=[])),
                         ("config unknown key", lambda m: m["config"].update(zz_unknown=1))):
        faults.append(damaged_copy(w, w.model, f"model.json {note}",
                                   lambda d, c=change: _edit_json(d / "model.json", c)))
    for note, text in (("not JSON", "{"), ("a list", "[1]"), ("bad UTF-8", b"\xff\xff")):
        faults.append(damaged_copy(w, w.model, f"model.json {note}", lambda d, t=text: _rewrite(d / "model.json", t)))
    weight = "blocks.0.attn.c_attn.weight"
    for note, change in (("shape", lambda t: t.__setitem__(weight, torch.zeros(3))),
                         ("dtype int", lambda t: t.__setitem__(weight, t[weight].to(torch.int64))),
                         ("dtype bool", lambda t: t.__setitem__(weight, t[weight] > 0)),
                         ("missing tensor", lambda t: t.pop(weight)),
                         ("extra tensor", lambda t: t.__setitem__("zz.extra", torch.zeros(1)))):
        faults.append(damaged_copy(w, w.model, f"weights {note}",
                                   lambda d, c=change: _edit_tensors(d / "model.safetensors", c)))
    for note, text in (("garbage", b"\x00" * 20), ("truncated", (w.model / "model.safetensors").read_bytes()[:100]),
                       ("empty", b"")):
        faults.append(damaged_copy(w, w.model, f"weights {note}",
                                   lambda d, t=text: _rewrite(d / "model.safetensors", t)))
    faults.append(damaged_copy(w, w.model, "weights missing", lambda d: (d / "model.safetensors").unlink()))
    return faults


def run_folder_faults(w: World) -> list[tuple[str, str]]:
    """Damaged run folders: best.json, tokenizer.json, no checkpoint."""
    faults = []
    best = w.run / "checkpoints" / "best.json"
    for note, text in (("best.json no folder", '{"step": 1}'), ("best.json traversal", '{"step": 1, "folder": "../.."}'),
                       ("best.json list", "[1]"), ("best.json not JSON", "{"),
                       ("best.json folder int", '{"step": 1, "folder": 5}')):
        faults.append(damaged_copy(w, w.run, note, lambda d, t=text: _rewrite(d / best.relative_to(w.run), t)))
    for note, text in (("tokenizer not JSON", "{"), ("tokenizer list", "[]"), ("tokenizer kind", '{"format": "x"}')):
        faults.append(damaged_copy(w, w.run, note, lambda d, t=text: _rewrite(d / "tokenizer.json", t)))
    chars = json.loads((w.run / "tokenizer.json").read_text())["chars"]
    for note, value in (("tokenizer chars a number", 5), ("tokenizer chars not strings", ["\n"] + [7] * (len(chars) - 1)),
                        ("tokenizer of another model", chars * 3)):
        faults.append(damaged_copy(w, w.run, note, lambda d, v=value: _edit_json(d / "tokenizer.json",
                                                                               lambda m: m.update(chars=v))))
    faults.append(damaged_copy(w, w.run, "no tokenizer", lambda d: (d / "tokenizer.json").unlink()))
    faults.append(damaged_copy(w, w.run, "no checkpoints", lambda d: shutil.rmtree(d / "checkpoints")))
    return faults


# ---- running a case -------------------------------------------------------------------------------
@dataclass
class Case:
    verb: str
    argv: list
    note: str
    status: int = 2
    absent: tuple = ()     # paths that must not exist afterwards (nothing written)
    unchanged: tuple = ()  # (path, bytes) of files that must be as they were (nothing lost)
    names: str = ""        # what the line must name (the field, flag or file at fault)

    def describe(self) -> str:
        return f"[{self.verb}] {self.note}: reslab {' '.join(repr(str(a)) for a in self.argv)}"


def run(argv: list) -> tuple[int | str, str]:
    """(exit status, or the exception that escaped main; stderr) of one in-process call."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = main([str(a) for a in argv])
        except BaseException as e:  # noqa: BLE001 - the point is that nothing escapes main
            rc = f"{type(e).__name__} escaped main: {e}"
    return rc, err.getvalue()


def named_paths(argv: list, root: Path) -> list[Path]:
    """The absolute paths a case names, as arguments or `--flag=value`: stores, outputs, inputs."""
    out = []
    for arg in map(str, argv):
        value = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg
        if value.startswith("/"):
            out.append(Path(value))
    return out


def path_state(path: Path, root: Path):
    """What a refused command must leave as it found: whether the path exists and what it is, and
    under the fuzz's own folder, every file's bytes and every entry's name below it (a store's
    index or its journal files appearing count as a change). Outside that folder (/proc, /etc),
    existence and kind only."""
    if not os.path.lexists(path):
        return None
    if path.is_symlink():
        return ("link", os.readlink(path))
    inside = path == root or root in path.parents
    if path.is_file():
        return ("file", path.read_bytes() if inside else None)
    if not inside:
        return ("folder",)
    return ("folder", {str(p.relative_to(path)): p.read_bytes() if p.is_file() and not p.is_symlink() else None
                       for p in sorted(path.rglob("*"))})


def state_change(path: Path, before, after) -> str:
    """`path` and, for a folder, which entries below it appeared, vanished or changed."""
    if not (before and after and before[0] == after[0] == "folder" and len(before) == len(after) == 2):
        return f"{path} ({before and before[0]} -> {after and after[0]})"
    old, new = before[1], after[1]
    diff = sorted(set(old) ^ set(new)) + sorted(k for k in set(old) & set(new) if old[k] != new[k])
    return f"{path} ({', '.join(diff)})"


def failure(case: Case, root: Path) -> str | None:
    """The problem with one case, or None. Besides the one line and status 2, a refused command
    leaves every path it names (its store, its output, its inputs) exactly as it was."""
    named = named_paths(case.argv, root)
    before = [path_state(p, root) for p in named]
    rc, err = run(case.argv)
    lines = err.splitlines()
    problem = None
    if rc != case.status:
        problem = f"exit {rc!r}, expected {case.status}"
    elif len(lines) != 1:
        problem = f"{len(lines)} stderr lines, expected 1"
    elif "Traceback" in err or "internal error" in err:
        problem = "a traceback or internal error"
    elif case.names not in err:
        problem = f"the line does not name {case.names!r}"
    else:
        left = [str(p) for p in case.absent if os.path.lexists(p)]
        changed = [str(p) for p, before in case.unchanged if p.read_bytes() != before]
        changed += [state_change(p, state, path_state(p, root)) for p, state in zip(named, before)
                    if path_state(p, root) != state]
        problem = f"wrote {left}" if left else f"changed {changed}" if changed else None
    return None if problem is None else f"{case.describe()}\n    -> {problem}; stderr: {err.strip()[:500]!r}"


# ---- argparse-level faults, shared by every verb --------------------------------------------------
def argparse_faults(verb: str, argv: list, flags: list[str], rng: random.Random, n: int,
                    positional: bool = True) -> list[Case]:
    """Unknown flags, flags without their value, extra positionals: each refused by argparse.
    Unknown flags start with --zz so that no prefix of a real flag is drawn (argparse takes those)."""
    cases = [Case(verb, argv + ["--zz-unknown"], "unknown flag"), Case(verb, argv + ["-Z"], "unknown short flag"),
             Case(verb, argv + ["--zz=1"], "unknown flag with a value")]
    if positional:
        cases.append(Case(verb, argv + ["extra-positional"], "extra positional"))
    cases += [Case(verb, argv + [f], f"{f} without its value") for f in flags]
    for _ in range(n):
        kind = rng.randrange(3 if positional else 2)
        if kind == 0:
            bad = "--zz" + "".join(rng.choice(string.ascii_lowercase + "-_") for _ in range(rng.randint(1, 10)))
            extra = [bad] + ([random_text(rng)] if rng.random() < 0.3 else [])
        elif kind == 1 and flags:
            extra = [rng.choice(flags)]  # last, without a value
        else:
            extra = ["zz" + random_text(rng).replace("-", "_")]
        cases.append(Case(verb, argv + extra, f"argparse fault {extra!r}"))
    return cases


# ---- per-verb cases --------------------------------------------------------------------------------
def run_config_cases(w: World, verb: list[str], rng: random.Random, free: set) -> list[Case]:
    """train / data prepare: every RunConfig field through --set and the config file, plus unknown
    keys, presets, config-file faults and --out faults. `free`: fields this verb takes any value of."""
    from reslab.train.config import RunConfig

    name = " ".join(verb)
    cases = []

    def case(extra, note, config=None, names=""):
        out = w.fresh()
        argv = [*verb, config or w.config, *extra, "--out", out]
        return Case(name, argv, note, absent=(out,), names=names)

    def field_case(path, v, channel, note):
        """A field at fault: through --set or the config file; its line names the field (its last
        part: 'n_embd' when n_head=2 does not divide n_embd=17) or, for a path, the path itself."""
        v = w.bad_path(v) if isinstance(v, str) else v
        names = v if isinstance(v, str) and v.startswith(str(w.root)) else path.rsplit(".", 1)[-1]
        if channel == "set":
            return case(["--set", f"{path}={toml_literal(v)}"], f"{note} --set {path}={v!r}", names=names)
        return case([], f"{note} config {path}={v!r}", w.toml_file(merged(w.run_cfg, nested(path, v))), names=names)

    fields = fields_of(RunConfig)
    for path, tp in fields:
        for i, v in enumerate(bad_values(path, tp, RUN_RANGE_BAD, free)):
            cases.append(field_case(path, v, "set", "core"))
            if i < 2:  # the config-file channel: each field's first malformed values
                cases.append(field_case(path, v, "config", "core"))
    for key, note in (("model.zz_unknown=1", "unknown model key"), ("zz_table.key=1", "unknown table"),
                      ("train=5", "a table given a value"), ("model.n_layer.deeper=1", "a value given a table"),
                      ("=1", "empty key"), ("model", "no '='"), ("optim.lr.x.y=2", "too deep")):
        cases.append(case(["--set", key], note))
    for preset in ("bogus", "", "../studies/prores", "tiny.toml"):
        cases.append(case(["--preset", preset], f"--preset {preset!r}"))
    for cfg, note in w.config_file_faults():
        out = w.fresh()
        cases.append(Case(name, [*verb, cfg, "--out", out], note, absent=(out,)))
    cases.append(case([], "top-level model = 5", w.toml_file(merged(w.run_cfg, {"model": {"n_layer": 1}}) | {"model": 5})))
    for out, note in w.out_faults():
        cases.append(Case(name, [*verb, w.config, "--out", out], note))
    cases += argparse_faults(name, [*verb, w.config], ["--set", "--preset", "--out"], rng, 20)
    # seeded draws: a random field, a random malformed value, a random channel
    for _ in range(RANDOM_CASES):
        path, tp = rng.choice(fields)
        v = malformed(path, tp, rng, RUN_RANGE_BAD, free)
        cases.append(field_case(path, v, "set" if rng.random() < 0.7 else "config", "random"))
    for _ in range(20):  # random unknown keys
        key = rng.choice(["model", "data", "optim", "train", "diagnostics", "zz"]) + ".zz" + \
            "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 8)))
        cases.append(case(["--set", f"{key}={rng.randint(0, 9)}"], f"random unknown key {key}"))
    return cases


def cases_model(w: World, rng: random.Random) -> list[Case]:
    from reslab.config import ModelConfig

    cases = []
    fields = fields_of(ModelConfig)
    for path, tp in fields:
        for i, v in enumerate(bad_values("model." + path, tp, RUN_RANGE_BAD, set())):
            cases.append(Case("model", ["model", "--config", w.model_config, "--set", f"model.{path}={toml_literal(v)}"],
                              f"--set model.{path}={v!r}", names=path))
            if i < 2:
                cfg = w.toml_file({"model": {**TINY_RUN["model"], path: v}})
                cases.append(Case("model", ["model", "--config", cfg], f"config model.{path}={v!r}", names=path))
    for key in ("train.steps=1", "model.zz=1", "model=5", "zz.k=1"):
        cases.append(Case("model", ["model", "--set", key], f"--set {key}"))
    for key, v in OLD_SPELLINGS:
        cases.append(Case("model", ["model", "--config", w.model_config, "--set", f"model.{key}={toml_literal(v)}"],
                          f"--set model.{key}={v!r} (old spelling)", names=key))
    for cfg, note in w.config_file_faults() + [(str(w.config), "a run config (with [data] [train])")]:
        cases.append(Case("model", ["model", "--config", cfg], note))
    cases += argparse_faults("model", ["model"], ["--config", "--set"], rng, 30)
    for _ in range(RANDOM_CASES):
        path, tp = rng.choice(fields)
        v = malformed("model." + path, tp, rng, RUN_RANGE_BAD, set())
        cases.append(Case("model", ["model", "--config", w.model_config, "--set", f"model.{path}={toml_literal(v)}"],
                          f"random model.{path}={v!r}", names=path))
    return cases


SAMPLE_FLAGS = {
    "--tokens": ["0", "-1", "1000001", str(2**70), "x", "1.5", ""],
    "--temperature": ["0", "-1", "nan", "inf", "-inf", "x", ""],
    "--top-k": ["0", "-1", "x", "2.5", str(2**31), ""],
    "--seed": ["-1", str(2**63), "x", "1e3", ""],
    "--checkpoint": ["middle", "", "BEST"],
    "--prompt": ["", "0123", "#$%&"],   # empty, and characters the tiny corpus never has
}


def cases_sample(w: World, rng: random.Random) -> list[Case]:
    cases = []
    for flag, values in SAMPLE_FLAGS.items():
        for v in values:
            cases.append(Case("sample", ["sample", w.run, f"{flag}={v}", "--tokens=2"] if flag != "--tokens"
                              else ["sample", w.run, f"{flag}={v}"], f"{flag} {v!r}",
                              names=flag if flag != "--prompt" else ""))
    for path, note in model_folder_faults(w, rng):
        cases.append(Case("sample", ["sample", path, "--tokens", "2"], note, names=path))
    for path, note in run_folder_faults(w):
        cases.append(Case("sample", ["sample", path, "--tokens", "2"], note, names=path))
    cases += argparse_faults("sample", ["sample", w.run], list(SAMPLE_FLAGS), rng, 20)
    cases.append(Case("sample", ["sample"], "no run"))
    for _ in range(RANDOM_CASES // 2):
        flag = rng.choice(list(SAMPLE_FLAGS)[:4])
        if flag == "--temperature":  # any positive finite number is a temperature
            v = rng.choice([str(-rng.uniform(1e-9, 1e9)), "zz" + random_text(rng), "nan", "inf", "-inf"])
        else:  # integers: negative, not a number, or beyond the flag's range
            v = rng.choice([str(-rng.randint(1, 10**9)), "zz" + random_text(rng), str(2**64 + rng.randrange(10**9))])
        cases.append(Case("sample", ["sample", w.run, f"{flag}={v}", "--tokens=2"], f"random {flag} {v!r}", names=flag))
    return cases


PROBE_BASE = {"--depths": "2", "--seeds": "1", "--designs": "pre-ln", "--width": "8", "--heads": "2",
              "--seq": "4", "--batch": "1"}  # the cheapest probe, were a fault let through


def probe_argv(**flags) -> list[str]:
    """`reslab probe` with PROBE_BASE's flags, some replaced (as --flag=value: '-2' stays a value)."""
    given = dict(PROBE_BASE, **{f"--{k.replace('_', '-')}": v for k, v in flags.items()})
    return ["probe"] + [f"{k}={v}" for k, v in given.items()]


PROBE_FLAGS = {
    "--depths": ["0", "-2", "x", "", ",", "2,,x", "1.5", "20000", "2;3"],
    "--seeds": ["0", "-1", "x", "1001", "1.0"],
    "--width": ["0", "-8", "x", "65537", "7"],   # 7: 2 heads do not divide it
    "--heads": ["0", "-2", "x", "3", "65537"],
    "--seq": ["0", "-4", "x", str(2**20 + 1)],
    "--batch": ["0", "-1", "x", "70000"],
    "--threads": ["0", "-1", "x", "1025"],
    "--mode": ["bogus", "", "SIM"],
    "--designs": ["bogus", "", ",", "pre-ln,bogus", "pre", "PRE-LN"],
}


def cases_probe(w: World, rng: random.Random) -> list[Case]:
    cases = []

    def case(flag, value, note, **more):
        out = w.fresh()
        argv = probe_argv(**{flag.removeprefix("--"): value}, **more) + ["--out", out]
        return Case("probe", argv, note, absent=(out,), names=flag if not more else "")

    for flag, values in PROBE_FLAGS.items():
        for v in values:
            cases.append(case(flag, v, f"{flag} {v!r}"))
    for mode, designs in (("sim", "pre-ln"), ("rank", "post-ln"), ("sim", "pre,bogus")):
        cases.append(case("--mode", mode, f"mode {mode} with {designs}", designs=designs))
    cases.append(case("--width", "65536", "sim weights too large", mode="sim", designs="pre", heads="1"))
    for out, note in w.out_faults():
        cases.append(Case("probe", probe_argv() + ["--out", out], note))
    cases += argparse_faults("probe", probe_argv(), list(PROBE_FLAGS) + ["--out"], rng, 50)
    for _ in range(RANDOM_CASES):
        flag = rng.choice(list(PROBE_FLAGS))
        if flag in ("--mode", "--designs"):
            v = "zz" + random_text(rng)
        elif flag == "--depths":
            v = ",".join(rng.choice([str(rng.randint(-99, 0)), random_text(rng, 1, 3).replace(",", "x") + "q",
                                     str(rng.randint(10_001, 10**9))]) for _ in range(rng.randint(1, 3)))
        else:
            v = rng.choice([str(-rng.randint(0, 10**9)), "zz" + random_text(rng), str(2**70 + rng.randrange(99))])
        cases.append(case(flag, v, f"random {flag} {v!r}"))
    return cases


def cases_export_hf(w: World, rng: random.Random) -> list[Case]:
    cases = []
    damaged_best = damaged_copy(w, w.run, "run with a damaged best.json",
                                lambda d: _rewrite(d / "checkpoints" / "best.json", "[1]"))
    for path, note in model_folder_faults(w, rng) + [(str(w.post_ln), "a post-ln model"), damaged_best]:
        out = w.fresh()
        cases.append(Case("export hf", ["export", "hf", path, out], note, absent=(out,), names=path))
    for out, note in w.out_faults() + [(str(w.folder), "out not empty")]:
        cases.append(Case("export hf", ["export", "hf", w.run, out], note))
    cases += argparse_faults("export hf", ["export", "hf", w.run, w.fresh()], [], rng, 100)
    cases.append(Case("export hf", ["export", "hf", w.run], "no out"))
    cases.append(Case("export hf", ["export", "zz", w.run, w.fresh()], "unknown target"))
    return cases


def hf_bad_values(kind: str) -> list:
    """Malformed values of one kind of Hugging Face config.json field (HF_FIELDS)."""
    return {"int": [0, -1, "12", 1.5, True, 2**70],
            "act": ["bogus", "", 5],
            "drop": [-0.1, 1.5, "x", float("nan"), True],
            "eps": [0, -1e-5, "x"],
            "bool": ["yes", 1],
            "true": [False, "x"],
            "false": [True, "x"],
            "type": ["llama", "", 5]}[kind]


def cases_import_hf(w: World, rng: random.Random) -> list[Case]:
    cases = []

    def hf_copy(note, edit, names=""):
        path, note = damaged_copy(w, w.hf, note, edit)
        out = w.fresh()
        return Case("import hf", ["import", "hf", path, out], note, absent=(out,), names=names or path)

    for field_name, kind in HF_FIELDS.items():
        for v in hf_bad_values(kind) + [random_bad({"int": int, "drop": float, "eps": float}.get(kind, bool), rng)]:
            cases.append(hf_copy(f"config.json {field_name}={v!r}",
                                 lambda d, f=field_name, v=v: _edit_json(d / "config.json", lambda c: c.__setitem__(f, v)),
                                 names=field_name))
    for note, text in (("config.json not JSON", "{"), ("config.json a list", "[]"), ("config.json bad UTF-8", b"\xff")):
        cases.append(hf_copy(note, lambda d, t=text: _rewrite(d / "config.json", t)))
    cases.append(hf_copy("no config.json", lambda d: (d / "config.json").unlink()))
    cases.append(hf_copy("no weights", lambda d: (d / "model.safetensors").unlink()))
    cases.append(hf_copy("pickle weights only", lambda d: ((d / "model.safetensors").unlink(),
                                                           (d / "pytorch_model.bin").write_bytes(b"x"))))
    for note, text in (("weights garbage", b"\x01" * 50), ("weights empty", b""),
                       ("weights truncated", (w.hf / "model.safetensors").read_bytes()[:200])):
        cases.append(hf_copy(note, lambda d, t=text: _rewrite(d / "model.safetensors", t)))
    for note, change in (("weights shape", lambda t: t.__setitem__("transformer.wte.weight", torch.zeros(2, 2))),
                         ("weights int", lambda t: t.__setitem__("transformer.wte.weight",
                                                                 t["transformer.wte.weight"].long())),
                         ("weights missing", lambda t: t.pop("transformer.wte.weight")),
                         ("weights extra", lambda t: t.__setitem__("transformer.h.9.attn.c_attn.weight", torch.zeros(1)))):
        cases.append(hf_copy(note, lambda d, c=change: _edit_tensors(d / "model.safetensors", c)))
    for idx, note in (('{"weight_map": {}}', "index empty"), ('{"weight_map": {"a": "../x.safetensors"}}', "index traversal"),
                      ('{"weight_map": {"a": "missing.safetensors"}}', "index names a missing shard"), ("[1]", "index list")):
        cases.append(hf_copy(note, lambda d, t=idx: ((d / "model.safetensors").unlink(),
                                                     (d / "model.safetensors.index.json").write_text(t))))
    for path, note in ((str(w.root / "missing-hf"), "missing hf folder"), (str(w.file), "hf is a file"),
                       (str(w.folder), "folder without config.json"), ("", "empty hf path")):
        out = w.fresh()
        cases.append(Case("import hf", ["import", "hf", path, out], note, absent=(out,)))
    for out, note in w.out_faults() + [(str(w.folder), "out holds other files")]:
        cases.append(Case("import hf", ["import", "hf", w.hf, out], note))
    cases += argparse_faults("import hf", ["import", "hf", w.hf, w.fresh()], [], rng, 30)
    for _ in range(RANDOM_CASES // 2 + 60):
        field_name, kind = rng.choice(list(HF_FIELDS.items()))
        v = rng.choice([random_text(rng), -rng.randint(1, 10**9), [1], {"k": 1}] if kind in ("int", "eps", "drop")
                       else [random_text(rng, 1) + "zz", rng.randint(2, 99), [True]])
        cases.append(hf_copy(f"random config.json {field_name}={v!r}",
                             lambda d, f=field_name, v=v: _edit_json(d / "config.json", lambda c: c.__setitem__(f, v)),
                             names=field_name))
    return cases


def spec_with(w: World, path: str, value) -> dict:
    """The base spec with one field set; a [study] field other than source comes with a source, and
    a [tune] or [ladder] field inside an otherwise valid table (its other keys are required), so that
    each case is one fault."""
    base = merged(w.spec, {"study": {"source": "s"}}) if path.startswith("study.") and path != "study.source" else w.spec
    if path.startswith("tune."):
        base = merged(base, {"tune": {"axis": "optim.lr", "values": [1e-3, 2e-3], "seeds": [9001]}})
    if path.startswith("ladder."):  # inside a valid ladder, which sets train.steps itself
        base = dict(base, base=dict(base["base"], train={k: v for k, v in base["base"]["train"].items()
                                                         if k != "steps"}))
        base = merged(base, {"ladder": {"tokens_per_param": 1.0, "rungs": {"w16": {"model": {"n_embd": 16}},
                                                                           "w32": {"model": {"n_embd": 32}}}}})
    return merged(base, nested(path, value))


def spec_faults(w: World, rng: random.Random) -> list[tuple[Path | str, str]]:
    """(spec file, note) of malformed sweep specs: every SweepSpec field, every RunConfig field of
    its base table, missing keys, file faults."""
    from reslab.spec.schema import SweepSpec
    from reslab.train.config import RunConfig

    out = list(w.config_file_faults()) + [(w.toml_file({}, "empty.toml"), "empty spec"),
                                          (w.toml_file(dict(w.spec, zz_unknown=1)), "unknown top-level key")]
    for missing in ("name", "seeds", "variants"):
        out.append((w.toml_file({k: v for k, v in w.spec.items() if k != missing}), f"no {missing}"))
    for path, tp in fields_of(SweepSpec):
        for v in bad_values(path, tp, SPEC_RANGE_BAD, FREE_SPEC_FIELDS):
            out.append((w.toml_file(spec_with(w, path, v)), f"spec {path}={v!r}"))
    run_fields = [(p, tp) for p, tp in fields_of(RunConfig) if p not in ("name", "data.path", "data.cache_dir")]
    for path, tp in run_fields:  # the base table: every run field, its first malformed value
        v = bad_values(path, tp, RUN_RANGE_BAD, FREE_RUN_FIELDS)[0]
        out.append((w.toml_file(merged(w.spec, {"base": nested(path, v)})), f"spec base.{path}={v!r}"))
    for _ in range(RANDOM_CASES // 2):
        path, tp = rng.choice(run_fields)
        where = rng.choice(["base", "variants.full", "overrides"])
        v = random_bad(tp, rng)
        out.append((w.toml_file(merged(w.spec, nested(f"{where}.{path}", v))), f"random spec {where}.{path}={v!r}"))
    return out


def set_faults(rng: random.Random, n: int, free: set) -> list[tuple[str, str]]:
    """(--set item, note): a RunConfig field and a malformed value, for sweeps and studies (whose
    data paths and files are checked when the data is prepared, after planning: left out here)."""
    from reslab.train.config import RunConfig

    fields = [(p, tp) for p, tp in fields_of(RunConfig) if p not in ("name", "data.path", "data.cache_dir")]
    items = [(f"{p}={toml_literal(type_bad(tp)[0])}", f"--set {p} type") for p, tp in fields]
    for _ in range(n):
        path, tp = rng.choice(fields)
        v = malformed(path, tp, rng, RUN_RANGE_BAD, free)
        items.append((f"{path}={toml_literal(v)}", f"random --set {path}={v!r}"))
    return items + [("zz.k=1", "--set unknown table"), ("name=x", "--set name"), ("=1", "--set empty key"),
                    ("train.seed=5", "--set train.seed (the sweep sets it)")]


def sweep_flag_faults(run_verb: bool) -> list[tuple[list[str], str]]:
    faults = [(["--seeds=0"], "--seeds 0"), (["--seeds=-1"], "--seeds -1"), (["--seeds=x"], "--seeds x"),
              (["--seeds=1001"], "--seeds 1001"), (["--scale", "nope"], "--scale on a spec without scales"),
              (["--scale="], "--scale empty")]
    if run_verb:
        faults += [(["--jobs=0"], "--jobs 0"), (["--jobs=-2"], "--jobs -2"), (["--jobs=x"], "--jobs x"),
                   (["--stack", "bogus"], "--stack bogus"), (["--stack-size=0"], "--stack-size 0"),
                   (["--stack-size=x"], "--stack-size x"), (["--executor", "bogus"], "--executor bogus")]
    return faults


def cases_sweep(w: World, rng: random.Random, verb: str) -> list[Case]:
    name = f"sweep {verb}"
    cases = []

    def case(spec, extra, note):
        store = w.fresh("store")
        return Case(name, ["sweep", verb, spec, *extra, "--store", store], note, absent=(store,))

    for spec, note in spec_faults(w, rng):
        cases.append(case(spec, [], note))
    for extra, note in sweep_flag_faults(verb == "run"):
        cases.append(case(w.spec_file, extra, note))
    if verb == "run":  # a store whose run folders the sweep would read, damaged
        for store, note in damaged_stores(w, rng):
            cases.append(Case(name, ["sweep", verb, w.spec_file, "--store", store], f"store with {note}"))
    if verb == "run":  # the data a sweep prepares before its workers start
        for path in ("@missing", "@folder"):
            cases.append(case(w.toml_file(merged(w.spec, {"base": {"data": {"path": w.bad_path(path)}}})), [],
                              f"base data.path {path}"))
        for cache in ("@file", "@under-file"):
            cases.append(case(w.toml_file(merged(w.spec, {"base": {"data": {"cache_dir": w.bad_path(cache)}}})),
                              [], f"base data.cache_dir {cache}"))
    free = FREE_RUN_FIELDS | (TRAIN_ONLY if verb == "plan" else set())
    for item, note in set_faults(rng, RANDOM_CASES // 2, free):
        cases.append(case(w.spec_file, ["--set", item], note))
    stores = [(str(w.file), "store is a file")] + ([(str(w.file / "s"), "store under a file"),
                                                    ("/proc/reslab-store", "store in /proc"), ("", "empty store")]
                                                   if verb == "run" else [])
    for store, note in stores:
        cases.append(Case(name, ["sweep", verb, w.spec_file, "--store", store], note))
    cases += argparse_faults(name, ["sweep", verb, w.spec_file, "--store", w.fresh("store")],
                             ["--scale", "--seeds", "--set", "--store"] + (["--jobs", "--executor", "--stack", "--stack-size"]
                                                                          if verb == "run" else []), rng, 20)
    return cases


def store_faults(w: World) -> list[tuple[str, str]]:
    """(store, note) of stores a `runs` verb cannot read."""
    no_index = w.fresh("store")
    no_index.mkdir(parents=True)
    bad_index = w.fresh("store")
    bad_index.mkdir(parents=True)
    (bad_index / "index.sqlite").write_bytes(b"not a database, just bytes" * 10)
    dir_index = w.fresh("store")
    (dir_index / "index.sqlite").mkdir(parents=True)
    return [(str(w.root / "missing-store"), "missing store"), (str(w.file), "store is a file"),
            (str(w.file / "s"), "store under a file"), (str(no_index), "store without an index"),
            (str(bad_index), "index is not SQLite"), (str(dir_index), "index is a folder"), ("", "empty store")]


def cases_runs(w: World, rng: random.Random) -> list[Case]:
    cases = [Case("runs", ["runs", "--store", s], note) for s, note in store_faults(w)]
    for status in ("bogus", "", "COMPLETED", "done"):
        cases.append(Case("runs", ["runs", "--store", w.store, "--status", status], f"--status {status!r}"))
    for spec in ("nope", "", "../fz"):
        cases.append(Case("runs", ["runs", "--store", w.store, "--spec", spec], f"--spec {spec!r}"))
    cases += argparse_faults("runs", ["runs", "--store", w.store], ["--store", "--spec", "--variant", "--status"],
                             rng, 200, positional=False)
    for _ in range(RANDOM_CASES // 2):
        flag = rng.choice(["--status", "--spec"])
        v = "zz" + random_text(rng)
        cases.append(Case("runs", ["runs", "--store", w.store, f"{flag}={v}"], f"random {flag} {v!r}"))
    return cases


def damaged_stores(w: World, rng: random.Random) -> list[tuple[str, str]]:
    """Copies of the store with one damaged run folder each: sweep.json, status.json, metrics.jsonl."""
    run_dir = next((w.store / "runs").iterdir()).relative_to(w.store)
    out = []

    def damaged(note, edit):
        return damaged_copy(w, w.store, note, lambda d: edit(d / run_dir))

    edits = [("sweep.json not JSON", lambda d: _rewrite(d / "sweep.json", "{")),
             ("sweep.json a list", lambda d: _rewrite(d / "sweep.json", "[]")),
             ("sweep.json bad UTF-8", lambda d: _rewrite(d / "sweep.json", b"\xff")),
             ("status.json a list", lambda d: _rewrite(d / "status.json", "[1]")),
             ("status.json a number", lambda d: _rewrite(d / "status.json", "3"))]
    for key in ("id", "members", "config"):
        edits.append((f"sweep.json without {key}" if key == "id" else f"sweep.json {key} a number",
                      lambda d, k=key: _edit_json(d / "sweep.json", (lambda m: m.pop(k)) if k == "id"
                                                  else (lambda m: m.__setitem__(k, 5)))))
    for key in ("spec", "variant", "scale", "grid", "seed"):
        for v in (None, 5 if key != "seed" else "1", [1]):
            edits.append((f"members[0].{key}={v!r}",
                          lambda d, k=key, v=v: _edit_json(d / "sweep.json",
                                                           lambda m: m["members"][0].__setitem__(k, v))))
    edits.append(("members[0] a string", lambda d: _edit_json(d / "sweep.json", lambda m: m.update(members=["x"]))))
    for note, edit in edits:
        out.append(damaged(note, edit))
    return out


def cases_runs_reindex(w: World, rng: random.Random) -> list[Case]:
    cases = []
    for store, note in store_faults(w)[:3] + [("", "empty store")]:
        cases.append(Case("runs reindex", ["runs", "reindex", "--store", store], note))
    stores = damaged_stores(w, rng)
    for store, note in stores:
        index = Path(store) / "index.sqlite"  # a refused reindex keeps the old index
        cases.append(Case("runs reindex", ["runs", "reindex", "--store", store], note,
                          unchanged=((index, index.read_bytes()),)))
    cases += argparse_faults("runs reindex", ["runs", "reindex", "--store", w.store], ["--store"], rng, 200,
                             positional=True)
    for _ in range(RANDOM_CASES // 2):  # a damaged store with a random extra (valid) flag order
        store, note = rng.choice(stores)
        cases.append(Case("runs reindex", ["runs", "reindex", "--store", store], f"random {note}"))
    return cases


def cases_runs_export(w: World, rng: random.Random) -> list[Case]:
    cases = []
    for out, note in w.out_faults():
        cases.append(Case("runs export", ["runs", "export", out, "--store", w.store], note))
    for store, note in store_faults(w):
        out = w.fresh()
        cases.append(Case("runs export", ["runs", "export", out, "--store", store], note, absent=(out,)))
    for extra, note in ((["--format", "xlsx"], "--format xlsx"), (["--format", ""], "--format empty"),
                        (["--status", "bogus"], "--status bogus"), (["--spec", "nope"], "--spec nope")):
        out = w.fresh()
        cases.append(Case("runs export", ["runs", "export", out, "--store", w.store, *extra], note, absent=(out,)))
    cases.append(Case("runs export", ["runs", "export", "--store", w.store], "no OUT_DIR"))
    cases += argparse_faults("runs export", ["runs", "export", w.fresh(), "--store", w.store],
                             ["--store", "--format", "--spec", "--variant", "--status"], rng, 200)
    for _ in range(RANDOM_CASES // 2):
        out = w.fresh()
        flag = rng.choice(["--status", "--spec", "--format"])
        v = "zz" + random_text(rng)
        cases.append(Case("runs export", ["runs", "export", out, "--store", w.store, f"{flag}={v}"],
                          f"random {flag} {v!r}", absent=(out,)))
    return cases


def damaged_records(w: World) -> list[tuple[str, str]]:
    """Copies of the store whose specs/fz.json (the sweep record) is damaged."""
    path = Path("specs") / "fz.json"
    edits = [("record not JSON", lambda d: _rewrite(d / path, "{")),
             ("record a list", lambda d: _rewrite(d / path, "[]")),
             ("record spec missing", lambda d: _edit_json(d / path, lambda r: r.pop("spec"))),
             ("record runs missing", lambda d: _edit_json(d / path, lambda r: r.pop("runs"))),
             ("record runs a dict", lambda d: _edit_json(d / path, lambda r: r.update(runs={}))),
             ("record spec seeds", lambda d: _edit_json(d / path, lambda r: r["spec"].update(seeds="x"))),
             ("record spec report", lambda d: _edit_json(d / path, lambda r: r["spec"].update(report=5))),
             ("record tuned a dict", lambda d: _edit_json(d / path, lambda r: r.update(tuned={}))),
             ("record tuned[0] partial", lambda d: _edit_json(d / path, lambda r: r.update(
                 tuned=[{"scale": "", "variant": "a", "value": "high"}])))]
    for key in ("variant", "scale", "grid", "seed", "id", "label"):
        edits.append((f"record runs[0].{key} missing",
                      lambda d, k=key: _edit_json(d / path, lambda r: r["runs"][0].pop(k))))
    return [damaged_copy(w, w.store, note, edit) for note, edit in edits]


def cases_report(w: World, rng: random.Random) -> list[Case]:
    cases = []
    for spec, note in spec_faults(w, rng):
        out = w.fresh()
        cases.append(Case("report", ["report", spec, "--store", w.store, "--out", out], note, absent=(out,)))
    for store, note in damaged_records(w):
        out = w.fresh()
        cases.append(Case("report", ["report", store, "--out", out], note, absent=(out,)))
    for target, note in ((str(w.root / "missing"), "missing target"), ("", "empty target"),
                         (str(w.folder), "folder without specs")):
        cases.append(Case("report", ["report", target], note))
    for extra, note in ((["--spec", "nope"], "--spec nope"), (["--spec", "../x"], "--spec path"),
                        (["--spec", ""], "--spec empty"), (["--scale", "nope"], "--scale nope"),
                        (["--format", "pdf"], "--format pdf")):
        out = w.fresh()
        cases.append(Case("report", ["report", w.store, *extra, "--out", out], note, absent=(out,)))
    for out, note in w.out_faults():
        cases.append(Case("report", ["report", w.store, "--out", out], note))
    cases.append(Case("report", ["report", w.spec_file, "--store", w.file], "spec's store is a file"))
    cases += argparse_faults("report", ["report", w.store, "--out", w.fresh()],
                             ["--spec", "--store", "--scale", "--out", "--format"], rng, 20)
    return cases


def cases_study_spec(w: World, rng: random.Random) -> list[Case]:
    cases = [Case("study spec", ["study", "spec", n], f"name {n!r}")
             for n in ("bogus", "", "../presets/tiny", "PARTIAL-RESIDUAL", "partial-residual.toml", "/etc/passwd")]
    cases.append(Case("study spec", ["study", "spec"], "no name"))
    cases += argparse_faults("study spec", ["study", "spec", "prores"], [], rng, 100)
    for _ in range(RANDOM_CASES):
        n = "zz" + random_text(rng)
        cases.append(Case("study spec", ["study", "spec", n], f"random name {n!r}"))
    return cases


STUDY = "simplified-blocks"  # the cheapest built-in study to plan


def cases_study_run(w: World, rng: random.Random) -> list[Case]:
    cases = []

    def case(extra, note, name=STUDY):
        store = w.fresh("store")
        return Case("study run", ["study", "run", name, *extra, "--store", store], note, absent=(store,))

    for n in ("bogus", "", "../presets/tiny"):
        cases.append(case([], f"name {n!r}", n))
    for extra, note in sweep_flag_faults(True)[:4] + sweep_flag_faults(True)[6:] + [
            (["--scale", "nope"], "--scale nope"), (["--scale", ""], "--scale empty")]:
        if "--executor" not in extra[0]:
            cases.append(case(extra, note))
    for item, note in set_faults(rng, RANDOM_CASES // 2 + 50, FREE_RUN_FIELDS):
        cases.append(case(["--set", item], note))
    for store, note in ((str(w.file), "store is a file"), (str(w.file / "s"), "store under a file"),
                        ("", "empty store")):
        cases.append(Case("study run", ["study", "run", STUDY, "--store", store], note))
    cases += argparse_faults("study run", ["study", "run", STUDY, "--store", w.fresh("store")],
                             ["--scale", "--seeds", "--set", "--jobs", "--stack", "--stack-size", "--store"], rng, 40)
    return cases


def cases_assess(w: World, rng: random.Random) -> list[Case]:
    """`reslab assess`: the design, the baselines, the scale, the design's --set, the store."""
    cases = []

    def case(extra, note, design="sas"):
        store = w.fresh("store")
        return Case("assess", ["assess", design, "--scale", "smoke", *extra, "--store", store], note,
                    absent=(store,))

    for n in ("bogus", "", "../presets/tiny", "pre ln"):
        cases.append(case([], f"design {n!r}", n))
    for value in ("bogus", "", ",", "pre-ln,", "pre-ln,pre-ln", "sas", "pre-ln,nope", " , "):
        cases.append(case(["--against", value], f"--against {value!r}"))
    for extra, note in sweep_flag_faults(True)[:4] + sweep_flag_faults(True)[6:] + [
            (["--scale", "nope"], "--scale nope"), (["--scale", ""], "--scale empty"),
            (["--scale", "paper-124m"], "--scale paper-124m (not a card scale)")]:
        if "--executor" not in extra[0]:
            cases.append(case(extra, note))
    cases.append(case(["--set", "model.design=post-ln"], "--set model.design"))
    cases.append(case(["--set", "model.options.bogus=1"], "--set an option the design does not have"))
    for item, note in set_faults(rng, RANDOM_CASES // 2 + 50, FREE_RUN_FIELDS):
        cases.append(case(["--set", item], note))
    for store, note in ((str(w.file), "store is a file"), (str(w.file / "s"), "store under a file"),
                        ("", "empty store")):
        cases.append(Case("assess", ["assess", "sas", "--scale", "smoke", "--store", store], note))
    cases += argparse_faults("assess", ["assess", "sas", "--scale", "smoke", "--store", w.fresh("store")],
                             ["--scale", "--seeds", "--set", "--against", "--jobs", "--stack", "--stack-size",
                              "--store"], rng, 40)
    return cases


def simple_cases(verb: list[str], rng: random.Random, flags: list[str]) -> list[Case]:
    return argparse_faults(" ".join(verb), verb, flags, rng, MIN_CASES)


# ---- the test --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = World(tmp_path_factory.mktemp("fuzz"))
    build_artifacts(w)
    return w


@pytest.fixture
def stubbed(monkeypatch):
    """No case may start work: training, data preparation, sweeps and probes raise WorkStarted."""
    import reslab.probe.run
    import reslab.sweep.runner
    import reslab.train.loop

    def stub(what):
        def raiser(*args, **kwargs):
            raise WorkStarted(what)
        return raiser

    # train() keeps its pre-training checks (device, compiler, data, split lengths): only the
    # training itself, after them, is stubbed. Data preparation is real: its faults are refused
    # before it writes, and every case checks that its --out was not written.
    monkeypatch.setattr(reslab.train.loop, "_train", stub("train"))
    monkeypatch.setattr(reslab.sweep.runner, "run_sweep", stub("sweep"))
    monkeypatch.setattr(reslab.probe.run, "run_probe", stub("probe"))
    for var in ("RESLAB_DEBUG", "RESLAB_STORE", "CXX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def all_cases(w: World) -> dict[str, list[Case]]:
    rng = random.Random(SEED)
    return {
        "variants": simple_cases(["variants"], rng, []),
        "presets": simple_cases(["presets"], rng, []),
        "study list": simple_cases(["study", "list"], rng, []),
        "model": cases_model(w, rng),
        "train": run_config_cases(w, ["train"], rng, FREE_RUN_FIELDS),
        "data prepare": run_config_cases(w, ["data", "prepare"], rng, FREE_RUN_FIELDS | TRAIN_ONLY),
        "sample": cases_sample(w, rng),
        "probe": cases_probe(w, rng),
        "export hf": cases_export_hf(w, rng),
        "import hf": cases_import_hf(w, rng),
        "sweep run": cases_sweep(w, rng, "run"),
        "sweep plan": cases_sweep(w, rng, "plan"),
        "runs": cases_runs(w, rng),
        "runs reindex": cases_runs_reindex(w, rng),
        "runs export": cases_runs_export(w, rng),
        "report": cases_report(w, rng),
        "study spec": cases_study_spec(w, rng),
        "study run": cases_study_run(w, rng),
        "assess": cases_assess(w, rng),
    }


CONTROLS = {  # the fuzz's base invocations, without a fault: each must get as far as the work
    "train": lambda w: (["train", w.config, "--out", w.fresh()], "train"),
    "probe": lambda w: (probe_argv() + ["--out", w.fresh()], "probe"),
    "sweep run": lambda w: (["sweep", "run", w.spec_file, "--store", w.fresh("store")], "sweep"),
    "study run": lambda w: (["study", "run", STUDY, "--store", w.fresh("store")], "sweep"),
    "assess": lambda w: (["assess", "sas", "--scale", "smoke", "--store", w.fresh("store")], "sweep"),
}


def test_the_fuzz_base_invocations_are_valid(world, stubbed, monkeypatch):
    """Without its fault each family's command gets to the stubbed work (exit 1, WorkStarted), or
    succeeds: so what the fuzz sees refused is the fault, not a broken base."""
    monkeypatch.chdir(world.root)
    for verb, make in CONTROLS.items():
        argv, what = make(world)
        rc, err = run(argv)
        assert rc == 1 and f"WorkStarted: {what}" in err, (verb, rc, err)
    for argv in (["variants"], ["presets"], ["study", "list"], ["model", "--config", world.model_config],
                 ["data", "prepare", world.config, "--out", world.fresh()],
                 ["sample", world.run, "--tokens", "2"], ["sample", world.model, "--tokens", "2"],
                 ["export", "hf", world.model, world.fresh()], ["sweep", "plan", world.spec_file, "--store", world.store],
                 ["runs", "--store", world.store], ["runs", "export", world.fresh(), "--store", world.store],
                 ["export", "hf", world.run, world.fresh()], ["import", "hf", world.hf, world.fresh()],
                 ["study", "spec", STUDY]):
        rc, err = run(argv)
        assert rc == 0, (argv, err)


def snapshot(*folders: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for f in folders for p in sorted(f.rglob("*")) if p.is_file()}


def test_every_malformed_invocation_is_one_line_and_status_2(world, stubbed, monkeypatch):
    monkeypatch.chdir(world.root)  # default outputs (runs/, results/, probe-out/) would land here
    shared = snapshot(world.run, world.model, world.hf, world.post_ln)  # what every case reads: never to be changed
    cases = all_cases(world)
    counts = {verb: len(c) for verb, c in cases.items()}
    short = {verb: n for verb, n in counts.items() if n < MIN_CASES}
    assert not short, f"fewer than {MIN_CASES} cases for {short}; {REPLAY}"
    failures, seconds = [], {}
    for verb, verb_cases in cases.items():
        t0 = time.perf_counter()
        failures += [problem for case in verb_cases if (problem := failure(case, world.root))]
        seconds[verb] = time.perf_counter() - t0
    for default in ("runs", "results", "probe-out"):
        assert not (world.root / default).exists(), f"a case wrote ./{default}; {REPLAY}"
    assert snapshot(world.run, world.model, world.hf, world.post_ln) == shared, f"the shared run, HF or model folder changed; {REPLAY}"
    total = sum(counts.values())
    print(f"\nfuzz {REPLAY}: {total} cases; " + ", ".join(f"{v} {n} ({seconds[v]:.1f} s)" for v, n in counts.items()))
    assert not failures, (f"{len(failures)} of {total} malformed invocations misbehaved ({REPLAY}):\n"
                          + "\n".join(failures[:40]))
