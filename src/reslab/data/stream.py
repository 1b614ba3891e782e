"""Streamed preparation: documents -> train/val token shards on disk, in bounded memory, resumable
after a kill at any moment, giving the same bytes as an uninterrupted run.

Stages (prepare.prepare_documents calls `stream_prepare` and writes meta.json afterwards):
  1. fit     char and bpe tokenizers need a first pass over the documents (char: every character of
             every document, nanoGPT's vocabulary of the whole text; bpe: trained on the train
             documents only, so validation stays unseen); gpt2 and hf need none. tokenizer.json is
             written, then the first progress record.
  2. encode  documents are read one at a time and collected into batches of about `batch_chars`
             characters; each document's ids, followed by the separator (the end-of-text token, as
             nanoGPT's openwebtext/prepare.py appends after every document; "\\n\\n" for char), go to
             the shard of the document's split through a fixed-size ShardAppender buffer. Every
             `commit_docs` documents, at a document boundary, both shards are fsynced and then
             progress.json is replaced atomically: documents consumed, the source position, and
             documents, characters and tokens per split. A record never counts bytes not on disk.
  3. publish the headers get their counts, the record says "finished", and train.bin.partial and
             val.bin.partial are renamed to train.bin and val.bin.

Split: document i (0-based, among the non-empty documents) is validation when its keyed BLAKE2b
hash, read as a fraction of 2**64, is below val_fraction: a pure function of (seed, i), so it does
not depend on batches, buffer size, commit interval or where a run was interrupted.

Resume: a matching record (same cache key) is continued: the partial shards are cut back to the
recorded token counts (a kill may have left more: a buffer written after the last commit, a
commit whose record was never replaced) and reading restarts at the recorded position (local
files: a seek; other sources: the consumed documents are read again and skipped). Everything
after the last commit is redone from the same documents, so the result is byte-identical.

Memory: two token buffers (buffer_bytes / 4 each), one batch of text with its ids (about
buffer_bytes / 2 at most), and the document being read: independent of the corpus size.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

from ..errors import ReslabError
from ..fileio import read_json, write_json
from ..progress import Progress
from .documents import DocumentSource
from .encode import CHUNK_CHARS, DocumentEncoder, chunks
from .shards import ShardAppender, dtype_for, read_header
from .tokenizers import ByteBPETokenizer, CharTokenizer, Tokenizer, build_tokenizer, from_json, to_json

SPLIT_SEED = 2357  # nanoGPT's openwebtext seed (its split is a shuffled train_test_split, not this hash)
SPLIT_SCHEME = f"document-blake2b-{SPLIT_SEED}"  # part of the cache key: another scheme, another folder
_SPLIT_KEY = SPLIT_SEED.to_bytes(8, "little")
RECORD = "progress.json"
RECORD_FORMAT = "reslab-prepare-progress"
RECORD_VERSION = 1
SPLITS = ("train", "val")
LOG_EVERY = 10.0  # seconds between progress lines when the source's size is unknown


@dataclass(frozen=True)
class StreamOptions:
    buffer_bytes: int = 64 << 20  # memory for tokens and text in flight (see the module docstring)
    commit_docs: int = 10_000     # documents between progress records: the most a kill makes us redo
    on_event: Optional[Callable[[str, dict], None]] = None  # sees each stage; tests kill the process there

    def limits(self, itemsize: int) -> tuple[int, int]:
        """(tokens per split buffer, characters per encode batch). Encoding costs up to ~16 bytes per
        character in flight (UTF-32 text and int64 positions for char; Python int lists for BPE)."""
        return max(self.buffer_bytes // 4 // itemsize, 1024), max(self.buffer_bytes // 32, 1024)


def split_threshold(val_fraction: float) -> int:
    return int(val_fraction * 2**64)


def split_of(index: int, threshold: int) -> str:
    """"val" or "train" for document `index`; threshold = split_threshold(val_fraction)."""
    digest = hashlib.blake2b(index.to_bytes(8, "little"), digest_size=8, key=_SPLIT_KEY).digest()
    return "val" if int.from_bytes(digest, "little") < threshold else "train"


def _emit(options: StreamOptions, event: str, **info) -> None:
    if options.on_event is not None:
        options.on_event(event, info)


def stream_prepare(source: DocumentSource, cfg, key: str, folder: Path, options: StreamOptions,
                   max_docs: Optional[int] = None, progress: bool = True, log=print) -> tuple[Tokenizer, dict]:
    """Prepare `folder` from `source` (continuing an interrupted run of the same key); returns the
    tokenizer and the finished progress record (counts per split). The caller writes meta.json."""
    folder.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(folder)
    rec = _resumable(folder, key, log)
    if rec is None:
        _clear(folder)
        tok = _fit(cfg, source, max_docs, progress, log)
        write_json(folder / "tokenizer.json", to_json(tok))
        rec = {"format": RECORD_FORMAT, "version": RECORD_VERSION, "key": key, "state": "encoding", "documents": 0,
               "position": None, **{s: {"documents": 0, "chars": 0, "tokens": 0} for s in SPLITS}}
        write_json(folder / RECORD, rec)
        _emit(options, "fitted")
    # Both a fresh and a resumed run encode with the tokenizer as reloaded from its file.
    tok = from_json(read_json(folder / "tokenizer.json", "prepared data"), where=str(folder / "tokenizer.json"))
    if rec["state"] != "finished":
        rec = _encode(source, tok, rec, folder, cfg.val_fraction, options, max_docs, progress, log)
    for s in SPLITS:
        partial = folder / f"{s}.bin.partial"
        if partial.exists():
            os.replace(partial, folder / f"{s}.bin")
            _emit(options, "renamed", split=s)
    return tok, rec


def finish(folder: Path) -> None:
    """Drop the progress record once meta.json marks the folder complete."""
    (folder / RECORD).unlink(missing_ok=True)


# ---- resuming ---------------------------------------------------------------------------------------
def _resumable(folder: Path, key: str, log) -> Optional[dict]:
    """The folder's progress record when it belongs to this key and its files still agree with it."""
    path = folder / RECORD
    if not path.is_file():
        return None
    try:
        rec = read_json(path, "preparation progress")
        if (rec.get("format"), rec.get("version"), rec.get("key")) != (RECORD_FORMAT, RECORD_VERSION, key):
            log(f"data: starting {folder} over: its unfinished preparation has other settings")
            return None
        tok = from_json(read_json(folder / "tokenizer.json", "prepared data"), where=str(folder / "tokenizer.json"))
        _check_shards(folder, rec, tok.vocab_size)
    except (ReslabError, KeyError, TypeError, ValueError) as e:  # a record or shard we did not write
        log(f"data: starting {folder} over: cannot resume ({e})")
        return None
    log(f"data: resuming {folder} after {rec['documents']:,} documents")
    return rec


def _check_shards(folder: Path, rec: dict, vocab_size: int) -> None:
    for s in SPLITS:
        want = int(rec[s]["tokens"])
        partial, final = folder / f"{s}.bin.partial", folder / f"{s}.bin"
        if rec["state"] != "finished":
            ShardAppender.check_resumable(partial, vocab_size, want)
        elif read_header(partial if partial.exists() else final).count != want:  # finished, maybe renamed
            raise ReslabError(f"{folder}: the {s} shard does not hold the {want:,} tokens of the finished preparation")


def _remove_stale_temporaries(folder: Path) -> None:
    """A kill inside write_json leaves its temporary file (fileio.atomic_path names it
    .<name>.<random>.tmp); the caller holds the folder's lock, so no live writer owns one."""
    for name in (RECORD, "tokenizer.json", "meta.json"):
        for tmp in folder.glob(f".{name}.*.tmp"):
            tmp.unlink(missing_ok=True)


def _clear(folder: Path) -> None:
    for s in SPLITS:
        (folder / f"{s}.bin.partial").unlink(missing_ok=True)
    (folder / RECORD).unlink(missing_ok=True)


def _documents(source: DocumentSource, rec: Optional[dict], max_docs: Optional[int]) -> Iterator[str]:
    """The non-empty documents after those `rec` counts as consumed, up to max_docs in all. The
    source is opened now (so its size is known); closing the result closes it (files, streams)."""
    consumed = rec["documents"] if rec else 0
    position = rec.get("position") if rec else None
    seek = consumed > 0 and position is not None
    docs = source.documents(position if seek else None)
    start = 0 if seek else consumed  # a source that cannot seek is read again and skipped
    stop = None if max_docs is None else max_docs - (consumed if seek else 0)
    return _closing(docs, start, stop)


def _closing(docs: Iterator[str], start: int, stop: Optional[int]) -> Iterator[str]:
    try:
        yield from itertools.islice((d for d in docs if d), start, stop)
    finally:
        close = getattr(docs, "close", None)
        if close is not None:
            close()


# ---- stage 1: fitting the tokenizer ---------------------------------------------------------------
def _fit(cfg, source: DocumentSource, max_docs: Optional[int], progress: bool, log) -> Tokenizer:
    if cfg.tokenizer == "char":
        chars = set(CharTokenizer.separator)
        docs = _documents(source, None, max_docs)
        display = _Display(source, "data: reading the characters", progress, log)  # after: total known
        n = 0
        with contextlib.closing(docs):
            for n, doc in enumerate(docs, 1):
                chars.update(doc)
                if n % 256 == 0:
                    display.update(n)
        display.close(n)
        return CharTokenizer(sorted(chars))
    if cfg.tokenizer == "bpe":
        threshold = split_threshold(cfg.val_fraction)
        docs = _documents(source, None, max_docs)
        train_text = (piece for i, doc in enumerate(docs) if split_of(i, threshold) == "train"
                      for piece in chunks(doc, True))
        with contextlib.closing(docs):
            return ByteBPETokenizer.train(train_text, cfg.bpe_vocab_size, log=log)
    return build_tokenizer(cfg, [], log=log)  # gpt2, hf: nothing to learn


# ---- stage 2: encoding --------------------------------------------------------------------------------
def _encode(source: DocumentSource, tok: Tokenizer, rec: dict, folder: Path, val_fraction: float,
            options: StreamOptions, max_docs: Optional[int], progress: bool, log) -> dict:
    enc = DocumentEncoder(tok)
    capacity, batch_chars = options.limits(dtype_for(tok.vocab_size).itemsize)
    threshold = split_threshold(val_fraction)
    every = max(int(options.commit_docs), 1)
    writers: dict[str, ShardAppender] = {}
    docs = None
    try:
        for s in SPLITS:
            writers[s] = ShardAppender(folder / f"{s}.bin.partial", tok.vocab_size, capacity,
                                       start=int(rec[s]["tokens"]))
        docs = _documents(source, rec, max_docs)
        display = _Display(source, "data: tokenizing", progress, log)  # after: the source knows its size
        batch: list[str] = []
        chars = 0
        for doc in docs:
            batch.append(doc)
            chars += len(doc)
            boundary = (rec["documents"] + len(batch)) % every == 0
            if chars >= batch_chars or boundary:
                _encode_batch(batch, rec, enc, writers, threshold, batch_chars, options)
                batch, chars = [], 0
                if boundary:
                    _commit(rec, writers, source, folder, options)
                display.update(rec["documents"], tokens=sum(w.count for w in writers.values()))
        if batch:
            _encode_batch(batch, rec, enc, writers, threshold, batch_chars, options)
        for s in SPLITS:
            rec[s]["tokens"] = writers[s].finish()
        _emit(options, "sealed", documents=rec["documents"])  # final headers; the record not yet "finished"
        display.close(rec["documents"], tokens=sum(rec[s]["tokens"] for s in SPLITS))
    finally:
        if docs is not None:
            docs.close()
        for w in writers.values():
            w.close()
    if not rec["train"]["tokens"] or not rec["val"]["tokens"]:
        _clear(folder)
        raise ReslabError(f"data: {source.description}: {rec['documents']:,} documents gave "
                          f"{rec['train']['documents']:,} train and {rec['val']['documents']:,} validation "
                          f"documents with val_fraction={val_fraction}; both splits need one; use more "
                          f"documents or a larger val_fraction")
    rec["state"], rec["position"] = "finished", source.position()
    write_json(folder / RECORD, rec)
    _emit(options, "finished", documents=rec["documents"])
    return rec


def _encode_batch(batch: list[str], rec: dict, enc: DocumentEncoder, writers: dict, threshold: int,
                  batch_chars: int, options: StreamOptions) -> None:
    """Append the documents of `batch` (the next ones after rec["documents"]) to their shards."""
    pieces: list[tuple[str, str, bool]] = []  # (text, split, ends a document)
    for j, doc in enumerate(batch):
        split = split_of(rec["documents"] + j, threshold)
        rec[split]["documents"] += 1
        rec[split]["chars"] += len(doc)
        parts = chunks(doc, enc.tok.chunk_safe) if len(doc) > CHUNK_CHARS else [doc]
        pieces += [(p, split, k == len(parts) - 1) for k, p in enumerate(parts)]
    rec["documents"] += len(batch)
    group: list[tuple[str, str, bool]] = []
    size = 0
    for piece in pieces:  # one very long document is encoded in several calls too
        group.append(piece)
        size += len(piece[0])
        if size >= batch_chars:
            _encode_group(group, enc, writers, options)
            group, size = [], 0
    if group:
        _encode_group(group, enc, writers, options)


def _encode_group(group: list, enc: DocumentEncoder, writers: dict, options: StreamOptions) -> None:
    for (_, split, last), ids in zip(group, enc.encode([p for p, _, _ in group])):
        w = writers[split]
        flushes = w.flushes
        w.append(ids)
        if last:
            w.append(enc.separator)
        if w.flushes != flushes:
            _emit(options, "flush", split=split, written=w.written)


def _commit(rec: dict, writers: dict, source: DocumentSource, folder: Path, options: StreamOptions) -> None:
    """Shards to disk first, then the record that counts them: a kill between the two leaves the
    previous record, whose counts are a prefix of what is on disk."""
    for w in writers.values():
        w.sync()
    _emit(options, "synced", documents=rec["documents"])
    for s in SPLITS:
        rec[s]["tokens"] = writers[s].count
    rec["position"] = source.position()
    write_json(folder / RECORD, rec)
    _emit(options, "commit", documents=rec["documents"], **{f"{s}_tokens": rec[s]["tokens"] for s in SPLITS})


class _Display:
    """A Progress bar over the source's size when it is known, else a log line every LOG_EVERY s."""

    def __init__(self, source: DocumentSource, desc: str, progress: bool, log):
        self.source, self.desc, self.log = source, desc, log if progress else None
        total = source.total
        self.bar = (Progress(total, f"{desc} ({source.unit})", mode="auto" if progress else "off")
                    if total else None)
        self.last = time.monotonic()

    def update(self, documents: int, tokens: Optional[int] = None) -> None:
        if self.bar is not None:
            done = self.source.done()
            if done < self.bar.total:  # the final line is close()'s, with the final counts
                self.bar.update(done, docs=documents, tokens=tokens)
        elif self.log is not None and time.monotonic() - self.last >= LOG_EVERY:
            self.log(f"{self.desc}: {documents:,} documents" + (f", {tokens:,} tokens" if tokens else ""))
            self.last = time.monotonic()

    def close(self, documents: int, tokens: Optional[int] = None) -> None:
        if self.bar is not None:
            self.bar.update(self.bar.total, docs=documents, tokens=tokens)  # the final line
            self.bar.close()
