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


def _read_user_text(path: str | os.PathLike, what: str) -> str:
    """The UTF-8 text of a file the user named; a missing file, a folder, an unreadable file or
    bad UTF-8 is one ReslabError naming the path."""
    from .errors import ReslabError

    p = check_path_text(path, what)
    if p.is_dir():
        raise ReslabError(f"{path}: is a folder, not a {what}")
    if not p.is_file():
        raise ReslabError(f"{path}: no such {what}")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ReslabError(f"{path}: not UTF-8 text (invalid byte at offset {e.start})") from None
    except OSError as e:
        raise ReslabError(f"{path}: cannot be read ({e.strerror or e})") from None


def read_toml(path: str | os.PathLike, what: str = "file") -> dict:
    """A TOML table from a user-supplied file; any problem is one ReslabError naming the file."""
    import tomllib

    from .errors import ReslabError

    text = _read_user_text(path, what)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
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
    except RecursionError:  # e.g. [[[[...]]]] thousands deep
        raise ReslabError(f"{path}: not valid JSON (nested too deeply)") from None
    except OSError as e:
        raise ReslabError(f"{path}: cannot be read ({e.strerror or e})") from None
    if not isinstance(obj, dict):
        raise ReslabError(f"{path}: expected a JSON object, got {type(obj).__name__}")
    return obj


# ---- output folders named by the user (--out, --store, ...) ----------------------------------------
def check_path_text(path: str | os.PathLike, what: str) -> Path:
    """A path string the operating system can take: not empty (that would mean the current folder)
    and without NUL characters (which no file name can hold)."""
    from .errors import ReslabError

    text = os.fspath(path)
    if not text:
        raise ReslabError(f"{what}: an empty path")
    if "\0" in text:
        raise ReslabError(f"{what} {text!r}: a path cannot contain a NUL character")
    return Path(text)


def check_output_dir(path: str | os.PathLike, what: str) -> Path:
    """Refuse, before anything is written, an output folder that cannot be used: an existing file,
    a path under a file, a dangling link, or a place this process cannot create files in.
    Nothing is left behind: the test of writability is a temporary file, created and removed in
    the folder itself, or in the nearest existing folder above it when it does not exist yet
    (os.access is no test: it says yes to root, and read-only mounts and /proc refuse root too)."""
    from .errors import ReslabError

    p = check_path_text(path, what)
    if p.is_dir():
        probe_dir = p
    elif os.path.lexists(p):
        kind = "a dangling symbolic link" if p.is_symlink() and not p.exists() else "a file"
        raise ReslabError(f"{what} {path}: exists and is {kind}, not a folder")
    else:
        probe_dir = p.parent
        while not probe_dir.is_dir():
            if os.path.lexists(probe_dir):
                raise ReslabError(f"{what} {path}: cannot be created: {probe_dir} is a file, not a folder")
            probe_dir = probe_dir.parent
    try:
        fd, tmp = tempfile.mkstemp(prefix=".reslab-write-test-", dir=probe_dir)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise ReslabError(f"{what} {path}: cannot write into {probe_dir} ({e.strerror or e})") from None
    return p


def check_not_a_file(path: str | os.PathLike, what: str) -> Path:
    """A folder that is only read (a store to list, plan or report): it may be missing, never a file."""
    from .errors import ReslabError

    p = check_path_text(path, what)
    if os.path.lexists(p) and not p.is_dir():
        raise ReslabError(f"{what} {path}: exists and is not a folder")
    return p


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
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a kill
            if isinstance(row, dict):  # every row reslab writes is an object; anything else is damage
                rows.append(row)
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
