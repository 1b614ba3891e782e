"""Hugging Face GPT-2 export / import: same logits as transformers' GPT2LMHeadModel, clear refusals."""

import json

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (pip install 'reslab[test]'); "
                           "the Hugging Face GPT-2 parity tests need it")
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model  # noqa: E402

import reslab  # noqa: E402
from reslab.cli import main  # noqa: E402
from reslab.errors import ReslabError  # noqa: E402
from reslab.hf import (  # noqa: E402
    export_hf,
    gpt2_state_from_reslab,
    hf_config_dict,
    import_hf,
    reslab_state_from_gpt2,
)
from tests.conftest import tokens  # noqa: E402

TOL = 1e-5


def gpt2_like(seed: int = 0, **kw) -> reslab.GPT:
    base = dict(n_layer=2, n_embd=32, n_head=4, vocab_size=65, block_size=32, dropout=0.0)
    base.update(kw)
    model = reslab.build_model("pre-ln", seed=seed, **base)
    # Non-trivial norms and biases, so a mix-up of any two tensors would show in the logits.
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model.eval()


def hf_twin(model: reslab.GPT, activation: str, attn: str = "sdpa") -> GPT2LMHeadModel:
    """A randomly initialised GPT2LMHeadModel built from a config (no download), given the weights."""
    conf = {k: v for k, v in hf_config_dict(model.config).items()
            if k not in ("model_type", "architectures", "reslab_version", "dtype")}
    conf["activation_function"] = activation
    hf = GPT2LMHeadModel(GPT2Config(**conf, attn_implementation=attn)).eval()
    missing, unexpected = hf.load_state_dict(gpt2_state_from_reslab(model), strict=False)
    assert unexpected == []
    assert missing == (["lm_head.weight"] if model.config.tie_weights else [])
    return hf


def max_diff(model, hf, vocab: int, T: int = 32) -> float:
    idx = tokens(B=3, T=T, vocab=vocab, seed=1)
    with torch.no_grad():
        return (model(idx) - hf(idx).logits).abs().max().item()


# ---- 1. parity of the mapping ---------------------------------------------------------------------
SHAPES = [dict(n_layer=2, n_embd=32, vocab_size=65), dict(n_layer=3, n_embd=64, vocab_size=101)]


@pytest.mark.parametrize("mlp,activation", [("gelu", "gelu"), ("gelu-tanh", "gelu_new"),
                                            ("gelu-tanh", "gelu_pytorch_tanh")])
@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_logits_match_transformers_gpt2(shape, tied, mlp, activation):
    model = gpt2_like(tie_weights=tied, mlp=mlp, **shape)
    hf = hf_twin(model, activation)
    assert (hf.lm_head.weight is hf.transformer.wte.weight) == tied
    assert max_diff(model, hf, shape["vocab_size"]) <= TOL


@pytest.mark.parametrize("tied", [True, False])
def test_logits_match_transformers_eager_attention(tied):
    model = gpt2_like(tie_weights=tied, mlp="gelu-tanh", **SHAPES[1])
    assert max_diff(model, hf_twin(model, "gelu_new", attn="eager"), 101) <= TOL


def test_relu_and_a_non_4x_mlp_export_as_n_inner(tmp_path):
    model = gpt2_like(mlp="relu", mlp_ratio=3.0, tie_weights=False)
    export_hf(reslab.save_model(model, tmp_path / "m"), tmp_path / "hf")
    conf = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert conf["n_inner"] == 96 and conf["activation_function"] == "relu"
    assert max_diff(model, GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval(), 65) <= TOL
    assert import_hf(tmp_path / "hf").config.mlp_hidden == 96


def test_mapping_round_trips_and_accepts_unprefixed_keys():
    model = gpt2_like(tie_weights=False)
    hf_state = gpt2_state_from_reslab(model)
    assert hf_state["transformer.h.0.attn.c_attn.weight"].shape == (32, 96)  # Conv1D: [in, out]
    back = reslab_state_from_gpt2(hf_state, model.config)
    ours = reslab.model.io.model_state(model)
    assert set(back) == set(ours)
    assert all(torch.equal(back[k], ours[k]) for k in ours)
    # GPT2Model (no head, no prefix) with the old causal-mask buffers: tied import works.
    tied = gpt2_like(seed=3)
    bare = {k.removeprefix("transformer."): v for k, v in gpt2_state_from_reslab(tied).items()}
    bare["h.0.attn.bias"] = torch.ones(1, 1, 32, 32)
    back = reslab_state_from_gpt2(bare, tied.config)
    assert "lm_head.weight" not in back and torch.equal(back["wte.weight"], tied.wte.weight)


def test_mapping_refuses_a_model_gpt2_cannot_express():
    with pytest.raises(ReslabError, match="model.design"):
        gpt2_state_from_reslab(reslab.build_model("post-ln", n_layer=2, n_embd=32, n_head=4))
    with pytest.raises(ReslabError, match="missing"):
        reslab_state_from_gpt2({}, gpt2_like().config)


# ---- 2. CLI round trip ----------------------------------------------------------------------------
@pytest.mark.parametrize("tied,mlp", [(True, "gelu"), (False, "gelu-tanh")])
def test_cli_export_then_from_pretrained_then_import(tmp_path, capsys, tied, mlp):
    model = gpt2_like(tie_weights=tied, mlp=mlp, n_layer=3, n_embd=48, vocab_size=100)
    reslab.save_model(model, tmp_path / "m")
    assert main(["export", "hf", str(tmp_path / "m"), str(tmp_path / "hf")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "hf")
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["config.json", "model.safetensors"]
    conf = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert conf["model_type"] == "gpt2" and conf["tie_word_embeddings"] is tied
    assert conf["activation_function"] == {"gelu": "gelu", "gelu-tanh": "gelu_new"}[mlp]
    assert conf["bos_token_id"] is None and conf["n_positions"] == 32
    assert ("lm_head.weight" in load_file(tmp_path / "hf" / "model.safetensors")) == (not tied)

    hf = GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    assert hf.dtype == torch.float32
    assert max_diff(model, hf, 100) <= TOL

    # exporting again over an earlier export is fine
    assert main(["export", "hf", str(tmp_path / "m"), str(tmp_path / "hf")]) == 0

    assert main(["import", "hf", str(tmp_path / "hf"), str(tmp_path / "back")]) == 0
    back = reslab.load_model(tmp_path / "back").eval()
    assert back.config.design == "pre-ln" and back.config.tie_weights is tied and back.config.mlp == mlp
    idx = tokens(B=3, T=32, vocab=100, seed=2)
    with torch.no_grad():
        assert torch.equal(back(idx), model(idx))


def test_import_of_a_folder_written_by_save_pretrained(tmp_path):
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=65, n_positions=32,
                                    activation_function="gelu_new", n_inner=96,
                                    bos_token_id=None, eos_token_id=None)).eval()
    hf.save_pretrained(tmp_path / "hf")
    model = import_hf(tmp_path / "hf").eval()
    assert model.config.mlp == "gelu-tanh" and model.config.mlp_hidden == 96 and model.config.dropout == 0.1
    assert max_diff(model, hf, 65) <= TOL
    # and GPT2Model's folder (unprefixed keys, no head) imports as a tied model
    GPT2Model(hf.config).save_pretrained(tmp_path / "base")
    assert import_hf(tmp_path / "base").config.tie_weights


def test_import_reads_sharded_safetensors(tmp_path):
    model = gpt2_like(tie_weights=False)
    export_hf(reslab.save_model(model, tmp_path / "m"), tmp_path / "hf")
    state = load_file(tmp_path / "hf" / "model.safetensors")
    (tmp_path / "hf" / "model.safetensors").unlink()
    keys = sorted(state)
    halves = {"a.safetensors": keys[: len(keys) // 2], "b.safetensors": keys[len(keys) // 2:]}
    for shard, names in halves.items():
        save_file({k: state[k] for k in names}, tmp_path / "hf" / shard, metadata={"format": "pt"})
    (tmp_path / "hf" / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {k: s for s, names in halves.items() for k in names}}))
    back = import_hf(tmp_path / "hf").eval()
    idx = tokens(B=2, T=32, vocab=65)
    with torch.no_grad():
        assert torch.equal(back(idx), model(idx))


# ---- 3. errors: one line on stderr, status 2 ----------------------------------------------------------
def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("reslab: error: "), err
    return lines[0]


@pytest.mark.parametrize("overrides,field", [
    (dict(design="post-ln"), "model.design"),
    (dict(design="sas"), "model.design"),
    (dict(pos="rope"), "model.pos"),
    (dict(norm="rmsnorm"), "model.norm"),
    (dict(bias=False), "model.bias"),
    (dict(mlp="swiglu"), "model.mlp"),
    (dict(ffn_res=False), "model.ffn_res"),
    (dict(shaped_attention=True), "model.shaped_attention"),
    (dict(branch_gain=0.5), "model.branch_gain"),
    (dict(prores="linear"), "model.prores"),
    # options added after export was written: refused by the rule that every unlisted field is at its default
    (dict(attn_gate="head"), "model.attn_gate"),
    (dict(attn_gate="elementwise"), "model.attn_gate"),
    (dict(embed_scale="learned"), "model.embed_scale"),
    (dict(qk_norm=True), "model.qk_norm"),
    (dict(xsa="full"), "model.xsa"),
    (dict(residual_update="orthogonal"), "model.residual_update"),
])
def test_export_refuses_what_gpt2_cannot_express(tmp_path, capsys, overrides, field):
    base = dict(n_layer=2, n_embd=32, n_head=4, vocab_size=65, block_size=32)
    reslab.save_model(reslab.build_model(overrides.pop("design", "pre-ln"), **base, **overrides), tmp_path / "m")
    assert main(["export", "hf", str(tmp_path / "m"), str(tmp_path / "hf")]) == 2
    line = one_error_line(capsys)
    assert field in line and "model.json" in line
    assert not (tmp_path / "hf").exists()


def test_export_accepts_baked_gain_finished_prores_and_training_only_options(tmp_path):
    base = dict(n_layer=2, n_embd=32, n_head=4, vocab_size=65, block_size=32)
    baked = reslab.build_model("pre-ln", **base, branch_gain=0.5, gain_mode="init")
    export_hf(reslab.save_model(baked, tmp_path / "a"), tmp_path / "hf_a")
    warmed = reslab.build_model("pre-ln", **base, prores="linear", prores_warmup=10)
    warmed.set_step(20)
    export_hf(reslab.save_model(warmed, tmp_path / "b"), tmp_path / "hf_b")
    dropped = reslab.build_model("pre-ln", **base, stochastic_depth=0.2, init="xavier")  # train-time / init only
    export_hf(reslab.save_model(dropped, tmp_path / "c"), tmp_path / "hf_c")
    for model, out in ((baked, "hf_a"), (warmed, "hf_b"), (dropped, "hf_c")):
        hf = GPT2LMHeadModel.from_pretrained(tmp_path / out).eval()
        assert max_diff(model.eval(), hf, 65) <= TOL


def test_export_refuses_a_folder_with_other_files(tmp_path, capsys):
    reslab.save_model(gpt2_like(), tmp_path / "m")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "notes.txt").write_text("keep me")
    assert main(["export", "hf", str(tmp_path / "m"), str(tmp_path / "hf")]) == 2
    assert "notes.txt" in one_error_line(capsys)
    assert main(["export", "hf", str(tmp_path / "m"), str(tmp_path / "m")]) == 2
    one_error_line(capsys)


def exported(tmp_path):
    reslab.save_model(gpt2_like(), tmp_path / "m")
    return export_hf(tmp_path / "m", tmp_path / "hf")


def test_import_refuses_pickle_weights(tmp_path, capsys):
    hf = exported(tmp_path)
    (hf / "model.safetensors").rename(hf / "pytorch_model.bin")
    assert main(["import", "hf", str(hf), str(tmp_path / "out")]) == 2
    line = one_error_line(capsys)
    assert "pytorch_model.bin" in line and "safetensors" in line and "pickle" in line
    assert not (tmp_path / "out").exists()


def test_import_refuses_another_model_type(tmp_path, capsys):
    hf = exported(tmp_path)
    conf = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**conf, "model_type": "llama"}))
    assert main(["import", "hf", str(hf), str(tmp_path / "out")]) == 2
    line = one_error_line(capsys)
    assert "config.json" in line and "model_type" in line and "llama" in line


@pytest.mark.parametrize("change,field", [
    ({"activation_function": "silu"}, "activation_function"),
    ({"n_head": 5}, "n_head"),
    ({"n_layer": "two"}, "n_layer"),
    ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
    ({"n_layer": 3}, "model.safetensors"),        # config and weights disagree
    ({"n_positions": 64}, "model.safetensors"),
])
def test_import_refuses_a_config_it_cannot_read(tmp_path, capsys, change, field):
    hf = exported(tmp_path)
    conf = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**conf, **change}))
    assert main(["import", "hf", str(hf), str(tmp_path / "out")]) == 2
    assert field in one_error_line(capsys)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_import_refuses_corrupt_safetensors(tmp_path, capsys, damage):
    hf = exported(tmp_path)
    weights = hf / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes({"truncate": data[: len(data) // 2], "garbage": b"\x07" * 4096, "empty": b""}[damage])
    assert main(["import", "hf", str(hf), str(tmp_path / "out")]) == 2
    line = one_error_line(capsys)
    assert "model.safetensors" in line and "safetensors" in line


def test_import_refuses_missing_or_broken_config(tmp_path, capsys):
    hf = exported(tmp_path)
    (hf / "config.json").write_text("{not json")
    assert main(["import", "hf", str(hf), str(tmp_path / "out")]) == 2
    assert "config.json" in one_error_line(capsys)
    (hf / "config.json").unlink()
    assert main(["import", "hf", str(hf), str(tmp_path / "out")]) == 2
    assert "config.json" in one_error_line(capsys)
    assert main(["import", "hf", str(tmp_path / "nowhere"), str(tmp_path / "out")]) == 2
    one_error_line(capsys)
