"""Document sources for streamed preparation: a corpus read one document at a time, never whole.

A source yields the non-empty documents of a corpus as strings, in a fixed order. Besides the
documents it tells the preparation:
  identity()   what the prepared-data cache key hashes (content for local files, settings for a hub dataset);
  total, unit  the size of the work for a progress bar (None when unknown), and done() the part read;
  position()   where the document after the last one yielded starts, as a small JSON-able dict, so a
               resumed preparation can seek there (None: not seekable; the resumed run re-reads and
               skips the documents already consumed).

LocalDocuments reads local files with no extra library:
  .jsonl  one JSON object per line, the document in its `text_field` (blank lines are skipped);
  .txt    the whole file is one document (OpenWebText's original layout: a folder of .txt files);
  a folder of such files, read in sorted order of their relative paths (hidden files ignored).
Every problem is one ReslabError naming the file (and the line for .jsonl).
HFDocuments (a Hugging Face dataset streamed with `datasets`) lives in corpus.py.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

from ..errors import ReslabError

LOCAL_SUFFIXES = (".jsonl", ".txt")
_HASH_BLOCK = 1 << 20  # bytes read at a time when hashing a file


class DocumentSource:
    description = "documents"
    total: Optional[int] = None
    unit = "documents"

    def identity(self) -> dict:
        raise NotImplementedError

    def documents(self, start: Optional[dict] = None) -> Iterator[str]:
        raise NotImplementedError

    def position(self) -> Optional[dict]:
        return None

    def done(self) -> int:
        return 0


class IterableDocuments(DocumentSource):
    """Documents from `make()`, called once per pass (a list, or a function returning a generator).
    `identity` must change whenever the documents do: it is the corpus part of the cache key."""

    def __init__(self, make: Callable[[], Iterable[str]], identity: dict, description: str = "documents"):
        self._make, self._identity, self.description = make, dict(identity), description

    def identity(self) -> dict:
        return {"documents": self._identity}

    def documents(self, start: Optional[dict] = None) -> Iterator[str]:
        for doc in self._make():
            if not isinstance(doc, str):
                raise ReslabError(f"{self.description}: a document is {type(doc).__name__}, not text")
            yield doc


def files_sha256(root: Path, files: list[Path], sizes: Optional[list[int]] = None) -> str:
    """One SHA-256 over every file's name relative to `root`, its size and its bytes (read in
    blocks): the content identity of a local corpus, whichever reader reads it."""
    h = hashlib.sha256()
    block = bytearray(_HASH_BLOCK)  # one buffer, refilled: f.read would allocate one per call
    view = memoryview(block)
    for i, p in enumerate(files):
        size = sizes[i] if sizes is not None else p.stat().st_size
        name = p.relative_to(root).as_posix() if p != root else p.name
        h.update(f"{name}\0{size}\0".encode())
        with _opened(p) as f:
            while n := f.readinto(block):
                h.update(view[:n])
    return h.hexdigest()


def all_files(path: Path) -> list[Path]:
    """Every file at `path` (the file itself, or a folder's files, hidden ones left out), in sorted
    order of their relative paths."""
    if path.is_file():
        return [path]
    try:
        return sorted((p for p in path.rglob("*") if p.is_file()
                       and not any(part.startswith(".") for part in p.relative_to(path).parts)),
                      key=lambda p: p.relative_to(path).as_posix())
    except OSError as e:
        raise ReslabError(f"{path}: cannot be listed ({e.strerror or e})") from None


def local_files(path: Path) -> Optional[list[Path]]:
    """The files of a local document corpus at `path`, or None when `path` is not one (a folder
    holding other formats is left to `datasets`, which reads parquet, csv, arrow...)."""
    if path.is_file():
        return [path] if path.suffix in LOCAL_SUFFIXES else None
    if not path.is_dir():
        return None
    files = all_files(path)
    if not files:
        raise ReslabError(f"{path}: the folder holds no document files")
    if any(p.suffix not in LOCAL_SUFFIXES for p in files):
        return None
    return files


class LocalDocuments(DocumentSource):
    unit = "bytes"

    def __init__(self, root: Path, files: list[Path], text_field: str = "text"):
        self.root, self.files, self.text_field = root, files, text_field
        self.description = f"{root} ({len(files):,} file{'s' * (len(files) != 1)})"
        try:
            self.sizes = [p.stat().st_size for p in files]
        except OSError as e:
            raise ReslabError(f"{e.filename}: cannot be read ({e.strerror or e})") from None
        self.total = sum(self.sizes)
        self._pos = {"file": 0, "offset": 0, "line": 0}
        self._done = 0
        self._sha256: Optional[str] = None

    def identity(self) -> dict:
        """The SHA-256 of every file's relative name, size and bytes, read in blocks."""
        if self._sha256 is None:
            self._sha256 = files_sha256(self.root, self.files, self.sizes)
        # "text_field": the same files read through another field are another corpus.
        return {"local": self._sha256, "text_field": self.text_field if self._has_jsonl() else None}

    def _has_jsonl(self) -> bool:
        return any(p.suffix == ".jsonl" for p in self.files)

    def position(self) -> dict:
        return dict(self._pos)

    def done(self) -> int:
        return self._done

    def documents(self, start: Optional[dict] = None) -> Iterator[str]:
        start = start or {"file": 0, "offset": 0, "line": 0}
        first = int(start["file"])
        self._done = sum(self.sizes[:first]) + int(start["offset"])
        for i in range(first, len(self.files)):
            offset, line = (int(start["offset"]), int(start["line"])) if i == first else (0, 0)
            self._pos = {"file": i, "offset": offset, "line": line}
            p = self.files[i]
            if p.suffix == ".txt":
                docs = self._text_file(p, i)
            else:
                docs = self._jsonl_file(p, i, offset, line)
            yield from docs

    def _text_file(self, p: Path, i: int) -> Iterator[str]:
        with _opened(p) as f:
            data = f.read()
        self._pos = {"file": i + 1, "offset": 0, "line": 0}
        self._done += len(data)
        try:
            doc = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ReslabError(f"{p}: not UTF-8 text (invalid byte at offset {e.start})") from None
        del data
        if doc:
            yield doc

    def _jsonl_file(self, p: Path, i: int, offset: int, line: int) -> Iterator[str]:
        field = self.text_field
        with _opened(p) as f:
            f.seek(offset)
            for raw in f:
                line += 1
                offset += len(raw)
                self._done += len(raw)
                # Where the next document starts: valid while this one is being consumed.
                self._pos = {"file": i, "offset": offset, "line": line}
                if not raw.strip():
                    continue
                try:
                    row = json.loads(raw)
                except UnicodeDecodeError as e:
                    raise ReslabError(f"{p}:{line}: not UTF-8 (invalid byte at column {e.start + 1})") from None
                except json.JSONDecodeError as e:
                    raise ReslabError(f"{p}:{line}: not valid JSON ({e.msg} at column {e.colno})") from None
                if not isinstance(row, dict):
                    raise ReslabError(f"{p}:{line}: expected a JSON object with a {field!r} field, "
                                      f"got a {type(row).__name__}")
                if field not in row:
                    raise ReslabError(f"{p}:{line}: no {field!r} field (data.hf_text_field); the fields "
                                      f"are {', '.join(sorted(row)) or 'none'}")
                doc = row[field]
                if not isinstance(doc, str):
                    raise ReslabError(f"{p}:{line}: field {field!r} holds {type(doc).__name__}, not text")
                if doc:
                    yield doc
        self._pos = {"file": i + 1, "offset": 0, "line": 0}


class _opened:
    """open(path, "rb") whose OSError (unreadable, vanished) is one ReslabError naming the file;
    errors raised while the file is being read are reported the same way."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        try:
            self.f = open(self.path, "rb")
        except OSError as e:
            raise ReslabError(f"{self.path}: cannot be read ({e.strerror or e})") from None
        return self.f

    def __exit__(self, kind, err, tb):
        self.f.close()
        if isinstance(err, OSError):
            raise ReslabError(f"{self.path}: cannot be read ({err.strerror or err})") from None
        return False
