"""Token shards: a 64-byte header, then the token ids as little-endian uint16 or uint32.

Header (little-endian): magic b"RSLBTOK\\0" | format version u32 | bytes per token u16 (2 or 4) |
reserved u16 | token count u64 | vocabulary size u64 | zeros up to 64 bytes.
The count lets a reader detect a truncated or padded file; the vocabulary size lets it refuse a
shard made with another tokenizer. Reading maps the file (np.memmap), so shards larger than memory work.
"""

from __future__ import annotations

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
    header = _LAYOUT.pack(MAGIC, VERSION, dtype.itemsize, 0, arr.size, vocab_size).ljust(HEADER_SIZE, b"\0")
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
