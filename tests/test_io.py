"""Model folders: exact round trip, atomic files, and one clear error for every broken input."""

import json

import pytest
import torch

from reslab import ReslabError, load_model, save_model
from reslab.model.gpt import GPT
from tests.conftest import small, tokens


@pytest.mark.parametrize("design,tied", [("pre-ln", True), ("resi-dual", False), ("sas-p", True)])
def test_round_trip_is_exact(tmp_path, design, tied):
    model = GPT(small(design, tie_weights=tied), seed=9).eval()
    loaded = load_model(save_model(model, tmp_path / "m")).eval()
    assert loaded.config == model.config
    assert torch.equal(loaded(tokens()), model(tokens()))
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["model.json", "model.safetensors"]


def test_saved_files_are_readable_by_others(tmp_path):
    save_model(GPT(small()), tmp_path / "m")
    assert (tmp_path / "m" / "model.json").stat().st_mode & 0o044 == 0o044


def test_broken_inputs_each_give_one_clear_error(tmp_path):
    folder = save_model(GPT(small()), tmp_path / "m")
    weights, meta = folder / "model.safetensors", folder / "model.json"
    good_meta = meta.read_text()

    with pytest.raises(ReslabError, match="model.json: not found"):
        load_model(tmp_path / "nothing")
    meta.write_text("{not json")
    with pytest.raises(ReslabError, match="not valid JSON"):
        load_model(folder)
    meta.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ReslabError, match="not a reslab model file"):
        load_model(folder)
    bad = json.loads(good_meta)
    bad["config"]["n_head"] = "four"
    meta.write_text(json.dumps(bad))
    with pytest.raises(ReslabError, match="config.n_head: expected an integer"):
        load_model(folder)
    bad = json.loads(good_meta)
    bad["config"]["n_layer"] = 5
    meta.write_text(json.dumps(bad))
    with pytest.raises(ReslabError, match="weights do not match the config"):
        load_model(folder)
    bad["config"]["n_layer"] = 4
    bad["config"]["n_embd"] = 64
    meta.write_text(json.dumps(bad))
    with pytest.raises(ReslabError, match="has shape"):
        load_model(folder)
    meta.write_text(good_meta)
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ReslabError, match="cannot be read as safetensors"):
        load_model(folder)


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    folder = save_model(GPT(small(), seed=1), tmp_path / "m")
    before = (folder / "model.safetensors").read_bytes()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("reslab.model.io.save_file", boom)
    with pytest.raises(OSError):
        save_model(GPT(small(), seed=2), folder)
    assert (folder / "model.safetensors").read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["model.json", "model.safetensors"]
