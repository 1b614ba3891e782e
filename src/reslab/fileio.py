"""Atomic writes: every file reslab writes goes to a temporary name in the same folder, is flushed
to disk, then renamed over the target, so a crash never leaves a half-written file behind."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `target`; rename it over `target` if the block succeeds."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(target: str | os.PathLike, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(target: str | os.PathLike, obj) -> None:
    write_text(target, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def read_toml(path: str | os.PathLike, what: str = "file") -> dict:
    """A TOML table from a user-supplied file; any problem is one ReslabError naming the file."""
    import tomllib

    from .errors import ReslabError

    p = Path(path)
    if not p.is_file():
        raise ReslabError(f"{path}: no such {what}")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ReslabError(f"{path}: not valid TOML ({e})") from None


def read_json(path: str | os.PathLike, what: str = "file") -> dict:
    """A JSON object from a user-supplied file; any problem is one ReslabError naming the file."""
    from .errors import ReslabError

    path = Path(path)
    if not path.is_file():
        raise ReslabError(f"{path}: not found ({what})")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ReslabError(f"{path}: not valid JSON ({e})") from None
    except OSError as e:
        raise ReslabError(f"{path}: cannot be read ({e.strerror or e})") from None
    if not isinstance(obj, dict):
        raise ReslabError(f"{path}: expected a JSON object, got {type(obj).__name__}")
    return obj


class JsonlLog:
    """A JSON-lines log, appended and flushed row by row. A kill can cut the last line short: readers
    skip such a line, and `keep_only` rewrites the file atomically (used when a run resumes)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._file = None

    def read(self) -> list[dict]:
        if not self.path.is_file():
            return []
        rows = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut short by a kill
        return rows

    def keep_only(self, keep) -> None:
        """Rewrite the log with the rows for which keep(row) is true."""
        if self.path.is_file():
            write_text(self.path, "".join(json.dumps(r) + "\n" for r in self.read() if keep(r)))

    def log(self, row: dict) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
