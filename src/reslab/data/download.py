"""Bounded, verified downloads: a file is saved only when its SHA-256 is the expected one.

Network failures raise DownloadFailed (the caller may fall back to another corpus); a file with the
wrong content raises ReslabError (something is wrong with the source, never silently used).
"""

from __future__ import annotations

import hashlib
import http.client
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..errors import ReslabError
from ..fileio import atomic_path

TIMEOUT_S = 20.0          # per socket operation (connect, each read)
TOTAL_S = 120.0           # the whole transfer; a trickling server cannot hold a run forever
CHUNK = 1 << 16


class DownloadFailed(Exception):
    """The file could not be fetched (no network, HTTP error, timeout)."""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_verified(url: str, target: str | Path, sha256: str, max_bytes: int,
                   log=print, timeout: float = TIMEOUT_S, total: float = TOTAL_S) -> Path:
    """Download `url` into `target` (atomically) if its SHA-256 is `sha256`; return `target`."""
    target = Path(target)
    log(f"data: downloading {url}")
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + total
    try:
        # Looked up at call time so tests can replace urllib.request.urlopen.
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            while True:
                block = resp.read(CHUNK)
                if not block:
                    break
                size += len(block)
                if size > max_bytes:
                    raise ReslabError(f"{url}: larger than {max_bytes:,} bytes, not the expected file; "
                                      f"nothing saved")
                if time.monotonic() > deadline:
                    raise DownloadFailed(f"{url}: download took longer than {total:.0f} s")
                chunks.append(block)
    except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
        reason = getattr(e, "reason", None) or e
        raise DownloadFailed(f"{url}: {reason}") from None
    data = b"".join(chunks)
    actual = sha256_bytes(data)
    if actual != sha256:
        raise ReslabError(f"{url}: downloaded {len(data):,} bytes with SHA-256 {actual}, expected "
                          f"{sha256}; not saved")
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)
    log(f"data: saved {target} ({len(data):,} bytes, SHA-256 verified)")
    return target
