"""Token shards: a 64-byte header, then the token ids as little-endian uint16 or uint32.

Header (little-endian): magic b"RSLBTOK\\0" | format version u32 | bytes per token u16 (2 or 4) |
reserved u16 | token count u64 | vocabulary size u64 | zeros up to 64 bytes.
The count lets a reader detect a truncated or padded file; the vocabulary size lets it refuse a
shard made with another tokenizer. Reading maps the file (np.memmap), so shards larger than memory work.

`write_shard` writes an array at once; `ShardAppender` grows a shard on disk through a fixed-size
buffer (streamed preparation), can reopen it at a recorded token count after a kill, and fills in
the header's count only when it finishes, so an unfinished file never reads as a valid shard.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ReslabError
from ..fileio import atomic_path

MAGIC = b"RSLBTOK\0"
VERSION = 1
HEADER_SIZE = 64
_LAYOUT = struct.Struct("<8sIHHQQ")
DTYPES = {2: np.dtype("<u2"), 4: np.dtype("<u4")}
_WRITE_CHUNK = 1 << 24  # tokens per write, so converting dtype never doubles a large array in memory


@dataclass(frozen=True)
class ShardHeader:
    version: int
    itemsize: int
    count: int
    vocab_size: int

    @property
    def dtype(self) -> np.dtype:
        return DTYPES[self.itemsize]


def dtype_for(vocab_size: int) -> np.dtype:
    """uint16 while every id fits (vocab <= 65536), else uint32."""
    if vocab_size <= 1 << 16:
        return DTYPES[2]
    if vocab_size <= 1 << 32:
        return DTYPES[4]
    raise ReslabError(f"vocabulary of {vocab_size:,} tokens does not fit a uint32 token shard")


def pack_header(itemsize: int, count: int, vocab_size: int) -> bytes:
    return _LAYOUT.pack(MAGIC, VERSION, itemsize, 0, count, vocab_size).ljust(HEADER_SIZE, b"\0")


def write_shard(path: str | Path, tokens, vocab_size: int) -> Path:
    """Write 1-D integer `tokens` (all in [0, vocab_size)) to `path` atomically."""
    path = Path(path)
    arr = np.asarray(tokens)
    if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise ReslabError(f"{path}: tokens must be a 1-D integer array, got shape {arr.shape} {arr.dtype}")
    dtype = dtype_for(vocab_size)
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= vocab_size:
            raise ReslabError(f"{path}: token ids span {lo}..{hi}, outside the vocabulary 0..{vocab_size - 1}")
    header = pack_header(dtype.itemsize, arr.size, vocab_size)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(header)
            for i in range(0, arr.size, _WRITE_CHUNK):
                f.write(arr[i:i + _WRITE_CHUNK].astype(dtype, copy=False).tobytes())
    return path


def read_header(path: str | Path) -> ShardHeader:
    """The validated header; also checks that the file holds exactly `count` tokens."""
    path = Path(path)
    if not path.is_file():
        raise ReslabError(f"{path}: no such token shard")
    size = path.stat().st_size
    with open(path, "rb") as f:
        raw = f.read(HEADER_SIZE)
    if len(raw) < len(MAGIC) or raw[:len(MAGIC)] != MAGIC:
        raise ReslabError(f"{path}: not a reslab token shard (bad magic)")
    if len(raw) < HEADER_SIZE:
        raise ReslabError(f"{path}: truncated shard: {size} bytes, shorter than the {HEADER_SIZE}-byte header")
    _, version, itemsize, _, count, vocab_size = _LAYOUT.unpack(raw[:_LAYOUT.size])
    if version != VERSION:
        raise ReslabError(f"{path}: token shard format version {version}; this reslab reads version {VERSION}")
    if itemsize not in DTYPES:
        raise ReslabError(f"{path}: corrupt shard: unknown token size {itemsize} bytes (expected 2 or 4)")
    held, rest = divmod(size - HEADER_SIZE, itemsize)
    if held < count:
        raise ReslabError(f"{path}: truncated shard: header says {count:,} tokens, file holds {held:,}")
    if held > count or rest:
        raise ReslabError(f"{path}: corrupt shard: header says {count:,} tokens, file holds "
                          f"{size - HEADER_SIZE:,} bytes of tokens ({held:,} tokens + {rest} bytes)")
    return ShardHeader(version, itemsize, count, vocab_size)


def read_shard(path: str | Path) -> np.ndarray:
    """The tokens as a read-only np.memmap (an empty read-only array for an empty shard)."""
    header = read_header(path)
    if header.count == 0:  # mmap cannot map zero bytes
        empty = np.zeros(0, dtype=header.dtype)
        empty.flags.writeable = False
        return empty
    return np.memmap(path, dtype=header.dtype, mode="r", offset=HEADER_SIZE, shape=(header.count,))


class ShardAppender:
    """Append tokens to the shard file `path` through a buffer of `capacity` tokens.

    The file exists from the start with a header whose count is 0; tokens go to disk each time the
    buffer fills (`flushes` counts those writes) or on `sync`. `start` > 0 reopens a file left by an
    interrupted run: it must hold at least `start` tokens after a header for the same vocabulary, and
    is cut back to exactly `start` tokens (whatever a kill left after them was never committed).
    `finish` writes the real count into the header, so the finished file is byte-for-byte what
    `write_shard` writes for the same tokens."""

    def __init__(self, path: str | Path, vocab_size: int, capacity: int, start: int = 0):
        self.path = Path(path)
        self.vocab_size = vocab_size
        self.dtype = dtype_for(vocab_size)
        self.buf = np.empty(max(int(capacity), 1), dtype=self.dtype)
        self.fill = 0           # tokens in the buffer
        self.written = start    # tokens in the file after the header
        self.flushes = 0
        if start == 0:
            self.file = open(self.path, "wb")
            self.file.write(pack_header(self.dtype.itemsize, 0, vocab_size))
        else:
            self.file = self._reopen(start)

    @staticmethod
    def check_resumable(path: Path, vocab_size: int, start: int) -> None:
        """Raise ReslabError unless `path` can be reopened at `start` tokens."""
        itemsize = dtype_for(vocab_size).itemsize
        if start == 0:
            return  # nothing to keep: the file is recreated
        if not path.is_file() or path.stat().st_size < HEADER_SIZE + start * itemsize:
            raise ReslabError(f"{path}: shorter than the {start:,} tokens its progress record counts")
        with open(path, "rb") as f:
            raw = f.read(HEADER_SIZE)
        # The count field is not compared: 0 while appending, the final count if the kill came after finish.
        magic, version, size, _, _, vocab = _LAYOUT.unpack(raw[:_LAYOUT.size])
        if (magic, version, size, vocab) != (MAGIC, VERSION, itemsize, vocab_size):
            raise ReslabError(f"{path}: its header does not match the shard being resumed")

    def _reopen(self, start: int):
        self.check_resumable(self.path, self.vocab_size, start)
        need = HEADER_SIZE + start * self.dtype.itemsize
        f = open(self.path, "r+b")
        f.truncate(need)
        f.seek(need)
        return f

    @property
    def count(self) -> int:
        return self.written + self.fill

    def append(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids)
        signed = ids.dtype.kind != "u"
        pos = 0
        while pos < len(ids):
            take = min(len(ids) - pos, len(self.buf) - self.fill)
            part = ids[pos:pos + take]
            # Checked before the copy, which would wrap an id too large for uint16 silently.
            if take and (int(part.max()) >= self.vocab_size or (signed and int(part.min()) < 0)):
                raise ReslabError(f"{self.path}: token ids span {int(part.min())}..{int(part.max())}, "
                                  f"outside the vocabulary 0..{self.vocab_size - 1}")
            self.buf[self.fill:self.fill + take] = part
            self.fill += take
            pos += take
            if self.fill == len(self.buf):
                self._write()

    def _write(self) -> None:
        if self.fill:
            self.file.write(memoryview(self.buf[:self.fill]))  # the buffer itself: no copy
            self.written += self.fill
            self.fill = 0
            self.flushes += 1

    def sync(self) -> None:
        """Everything appended so far on disk (a progress record may then count it)."""
        self._write()
        self.file.flush()
        os.fsync(self.file.fileno())

    def finish(self) -> int:
        """Write the final count into the header and close; returns the count."""
        self.sync()
        self.file.seek(0)
        self.file.write(pack_header(self.dtype.itemsize, self.written, self.vocab_size))
        self.file.flush()
        os.fsync(self.file.fileno())
        self.close()
        return self.written

    def close(self) -> None:
        if not self.file.closed:
            self.file.close()
