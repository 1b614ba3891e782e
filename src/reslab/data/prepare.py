"""Tokenize a corpus once into train/val token shards, and reload them.

A prepared folder holds train.bin, val.bin (reslab token shards), tokenizer.json (reslab's
tokenizer format) and meta.json. meta.json is written last: its presence marks the folder complete,
and a folder without it is rebuilt. reference.json (the unigram and bigram reference levels,
reference.py) is added the first time something asks for them (`reslab data prepare`, a report).
The default folder is <cache_dir>/prepared/<corpus>-<tokenizer>-<key>,
where key hashes everything that changes the tokens (corpus text SHA-256, tokenizer settings,
val_fraction), so a changed input gets a new folder and an unchanged one is reused without tokenizing.

Split (nanoGPT's): the first int(n * (1 - val_fraction)) characters of the text are train, the rest
validation, each tokenized separately; TinyShakespeare at char level gives 1,003,854 / 111,540 tokens.

Document corpora (corpus='hf': a Hugging Face dataset, or local .jsonl/.txt files) are never held in
memory: prepare_documents streams them into the shards (stream.py), splitting by document, with the
end-of-text token after every document, resumable after a kill. The folder is the same, plus
progress.json and *.bin.partial while it is being prepared, and a .prepare.lock that keeps two
processes from preparing it at once.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import ConfigError, ReslabError
from ..fileio import read_json, write_json
from ..progress import Progress
from .config import DataConfig, cache_root, check
from .corpus import Corpus, document_source, load_corpus
from .documents import DocumentSource
from .download import sha256_file
from .encode import chunks
from .shards import read_header, read_shard, write_shard
from .stream import SPLIT_SCHEME, StreamOptions, finish, stream_prepare
from .tokenizers import Tokenizer, build_tokenizer, from_json, to_json

FORMAT = "reslab-prepared"
VERSION = 1
BATCH_CHUNKS = 8       # chunks per encode_batch call (Hugging Face tokenizers encode them in parallel)
PUBLISHED_VAL_FRACTION = 0.1


@dataclass
class PreparedData:
    train: np.ndarray       # read-only np.memmap of token ids
    val: np.ndarray
    vocab_size: int
    tokenizer: Tokenizer    # encode / decode
    meta: dict              # contents of meta.json
    folder: Path


def prepare_dataset(cfg: DataConfig, out_dir: Optional[str | Path] = None, progress: bool = True,
                    log=print, stream: Optional[StreamOptions] = None, reference: bool = False) -> PreparedData:
    """The prepared dataset cfg describes: reused from its folder when complete, else built there.
    `stream` tunes the streamed preparation of corpus='hf' (memory bound, commit interval).
    `reference` also counts (or reads) the unigram and bigram reference levels (reference.py),
    caches them in the folder and logs them in one line; off by default, so training, which never
    needs them, pays nothing."""
    data = _prepare(cfg, out_dir, progress, log, stream)
    if reference:
        from .reference import levels_line, reference_levels

        try:
            log(levels_line(reference_levels(data, log=log)))
        except ReslabError as e:  # the data is prepared and usable; only its levels are missing
            log(f"data: reference levels not available: {e}")
    return data


def _prepare(cfg: DataConfig, out_dir, progress: bool, log, stream) -> PreparedData:
    errors = check(cfg)
    if errors:
        raise ConfigError(errors)
    if cfg.corpus == "hf":
        return prepare_documents(document_source(cfg, log), cfg, out_dir, progress, log, stream)
    # Every other corpus is small: read (cheap), identified by its SHA-256, tokenized in memory.
    corpus = load_corpus(cfg, log=log)
    key = _key(cfg, {"name": corpus.name, "sha256": corpus.sha256})
    folder = Path(out_dir) if out_dir is not None else cache_root(cfg) / "prepared" / f"{corpus.name}-{cfg.tokenizer}-{key[:12]}"
    data = _reusable(folder, key, log)
    if data is not None:
        return data
    return _build(cfg, corpus, key, folder, progress, log)


def prepare_documents(source: DocumentSource, cfg: DataConfig, out_dir: Optional[str | Path] = None,
                      progress: bool = True, log=print, options: Optional[StreamOptions] = None) -> PreparedData:
    """The prepared dataset of a document corpus, streamed (stream.py); cached like prepare_dataset.
    From cfg it uses the tokenizer settings, val_fraction, cache_dir, and hf_max_docs for corpus='hf'.
    A Hugging Face dataset is identified by its settings, so a prepared one is reused without streaming
    it again; local files by their SHA-256 (read once, in blocks)."""
    errors = check(cfg)
    if errors:
        raise ConfigError(errors)
    options = options or StreamOptions()
    identity = source.identity()
    max_docs = cfg.hf_max_docs if cfg.corpus == "hf" else None
    key = _key(cfg, {**identity, "max_docs": max_docs, "split": SPLIT_SCHEME})
    name = "hf" if cfg.corpus == "hf" else "documents"
    folder = Path(out_dir) if out_dir is not None else cache_root(cfg) / "prepared" / f"{name}-{cfg.tokenizer}-{key[:12]}"
    data = _reusable(folder, key, log)
    if data is not None:
        return data
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder, log):
        data = _reusable(folder, key, lambda *_: None)  # finished by another process while we waited?
        if data is not None:
            log(f"data: reusing {folder} (prepared by another process)")
            return data
        (folder / "meta.json").unlink(missing_ok=True)  # the folder is incomplete until meta.json is rewritten
        tok, rec = stream_prepare(source, cfg, key, folder, options, max_docs, progress, log)
        train, val = rec["train"], rec["val"]
        meta = {
            "format": FORMAT, "version": VERSION, "key": key,
            "corpus": name, "source": source.description, "comparable": False,
            "comparable_note": "a document corpus, not the canonical TinyShakespeare",
            **({"source_sha256": identity["local"]} if "local" in identity else {}),
            "documents": rec["documents"], "train_documents": train["documents"], "val_documents": val["documents"],
            "text_chars": train["chars"] + val["chars"], "train_chars": train["chars"], "val_chars": val["chars"],
            "val_fraction": cfg.val_fraction,
            "split": f"by document: {SPLIT_SCHEME} (keyed BLAKE2b of the document index < val_fraction)",
            "separator": tok.separator,  # after every document
            "tokenizer": tok.kind, "vocab_size": tok.vocab_size,
            "train_tokens": train["tokens"], "val_tokens": val["tokens"],
            "config": {k: v for k, v in cfg.to_dict().items() if k not in ("download", "fallback", "cache_dir")},
        }
        write_json(folder / "meta.json", meta)  # marks the folder complete...
        finish(folder)                           # ...so the progress record can go
    log(f"data: prepared {folder} ({source.description}, {tok.kind} tokenizer, vocab {tok.vocab_size:,}, "
        f"{train['tokens']:,} train / {val['tokens']:,} val tokens from {rec['documents']:,} documents)")
    return load_prepared(folder)


def _reusable(folder: Path, key: str, log) -> Optional[PreparedData]:
    """The complete prepared folder, when it holds this key's dataset."""
    if not (folder / "meta.json").is_file():
        return None
    try:
        data = load_prepared(folder)
    except ReslabError as e:
        log(f"data: rebuilding {folder}: {e}")
        return None
    if data.meta.get("key") != key:
        log(f"data: rebuilding {folder}: it holds a dataset prepared with other settings")
        return None
    log(f"data: reusing {folder} ({data.meta['corpus']}, {data.meta['tokenizer']} tokenizer, "
        f"{len(data.train):,} train / {len(data.val):,} val tokens)")
    return data


@contextmanager
def _locked(folder: Path, log):
    """One process at a time prepares a folder (two would append to the same partial shards)."""
    try:
        from filelock import FileLock, Timeout
    except ImportError:
        raise ReslabError("preparing a document corpus needs the filelock package: pip install filelock") from None
    lock = FileLock(str(folder / ".prepare.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log(f"data: waiting for another process that is preparing {folder}")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _key(cfg: DataConfig, corpus_id: dict) -> str:
    tok: dict = {"kind": cfg.tokenizer}
    if cfg.tokenizer == "bpe":
        tok["vocab_size"] = cfg.bpe_vocab_size
    if cfg.tokenizer == "hf":
        p = Path(cfg.tokenizer_path).expanduser()
        if not p.is_file():
            raise ReslabError(f"data.tokenizer_path: {cfg.tokenizer_path}: no such file")
        tok["sha256"] = sha256_file(p)
    blob = json.dumps({"format": VERSION, "corpus": corpus_id, "tokenizer": tok,
                       "val_fraction": cfg.val_fraction}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _encode(tok: Tokenizer, pieces: list[str], bar: Progress, done: int) -> tuple[np.ndarray, int]:
    parts: list[list[int]] = []
    for i in range(0, len(pieces), BATCH_CHUNKS):
        batch = pieces[i:i + BATCH_CHUNKS]
        parts += tok.encode_batch(batch)
        done += sum(len(p) for p in batch)
        bar.update(done)
    count = sum(len(p) for p in parts)
    return np.fromiter(itertools.chain.from_iterable(parts), dtype=np.uint32, count=count), done


def _comparable(cfg: DataConfig, corpus: Corpus) -> tuple[bool, str]:
    if not corpus.comparable:
        return False, f"corpus {corpus.name!r} is not the canonical TinyShakespeare"
    if cfg.tokenizer not in ("char", "gpt2"):
        return False, f"published TinyShakespeare numbers use the char or gpt2 tokenizer, not {cfg.tokenizer!r}"
    if cfg.val_fraction != PUBLISHED_VAL_FRACTION:
        return False, f"published numbers use val_fraction={PUBLISHED_VAL_FRACTION}, not {cfg.val_fraction}"
    return True, "canonical TinyShakespeare with nanoGPT's split"


def _build(cfg: DataConfig, corpus: Corpus, key: str, folder: Path, progress: bool, log) -> PreparedData:
    text = corpus.text
    split = int(len(text) * (1 - cfg.val_fraction))
    train_text, val_text = text[:split], text[split:]
    if not train_text or not val_text:
        raise ReslabError(f"data: the corpus ({len(text):,} characters) is too short to split with "
                          f"val_fraction={cfg.val_fraction}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "meta.json").unlink(missing_ok=True)  # the folder is incomplete until meta.json is rewritten

    if cfg.tokenizer == "char":
        tok = build_tokenizer(cfg, [text], log=log)  # nanoGPT: the vocabulary of the whole text
    else:  # bpe learns from the training text only, so validation stays unseen
        tok = build_tokenizer(cfg, chunks(train_text, True), log=log)
    train_pieces, val_pieces = chunks(train_text, tok.chunk_safe), chunks(val_text, tok.chunk_safe)

    bar = Progress(len(text), "data: tokenizing (characters)", mode="auto" if progress else "off")
    bar.update(0)  # the rate and ETA count from here
    train_ids, done = _encode(tok, train_pieces, bar, 0)
    val_ids, _ = _encode(tok, val_pieces, bar, done)
    bar.close()
    if not len(train_ids) or not len(val_ids):
        raise ReslabError("data: tokenizing gave an empty train or validation split; use a longer corpus")

    write_shard(folder / "train.bin", train_ids, tok.vocab_size)
    write_shard(folder / "val.bin", val_ids, tok.vocab_size)
    write_json(folder / "tokenizer.json", to_json(tok))
    comparable, note = _comparable(cfg, corpus)
    meta = {
        "format": FORMAT, "version": VERSION, "key": key,
        "corpus": corpus.name, "source": corpus.source, "comparable": comparable, "comparable_note": note,
        "text_sha256": corpus.sha256, "text_chars": len(text),
        "train_chars": len(train_text), "val_chars": len(val_text), "val_fraction": cfg.val_fraction,
        "tokenizer": tok.kind, "vocab_size": tok.vocab_size,
        "train_tokens": int(len(train_ids)), "val_tokens": int(len(val_ids)),
        "config": {k: v for k, v in cfg.to_dict().items() if k not in ("download", "fallback", "cache_dir")},
    }
    write_json(folder / "meta.json", meta)  # last: marks the folder complete
    log(f"data: prepared {folder} ({corpus.name}, {tok.kind} tokenizer, vocab {tok.vocab_size:,}, "
        f"{len(train_ids):,} train / {len(val_ids):,} val tokens)")
    return load_prepared(folder)


def load_prepared(folder: str | Path) -> PreparedData:
    """A prepared folder, checked: every file present and consistent with meta.json."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ReslabError(f"{folder}: no such prepared dataset folder")
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        raise ReslabError(f"{folder}: incomplete prepared dataset (no meta.json); prepare it again")
    meta = read_json(meta_path, "prepared data")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ReslabError(f"{meta_path}: not a reslab prepared-dataset meta.json")
    if meta.get("version") != VERSION:
        raise ReslabError(f"{meta_path}: prepared-dataset version {meta.get('version')!r}; this reslab "
                          f"reads {VERSION}; prepare it again")
    tok = from_json(read_json(folder / "tokenizer.json", "prepared data"), where=str(folder / "tokenizer.json"))
    vocab = meta.get("vocab_size")
    if tok.vocab_size != vocab:
        raise ReslabError(f"{folder}: tokenizer.json has {tok.vocab_size:,} tokens, meta.json says {vocab!r}")
    arrays = {}
    for split in ("train", "val"):
        path = folder / f"{split}.bin"
        header = read_header(path)
        if header.vocab_size != vocab or header.count != meta.get(f"{split}_tokens"):
            raise ReslabError(f"{path}: holds {header.count:,} tokens of a {header.vocab_size:,}-token vocabulary; "
                              f"meta.json says {meta.get(f'{split}_tokens')!r} tokens of {vocab!r}")
        arrays[split] = read_shard(path)
    return PreparedData(arrays["train"], arrays["val"], int(vocab), tok, meta, folder)
