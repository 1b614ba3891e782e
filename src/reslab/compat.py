"""The lowest torch reslab runs on, checked once when reslab is imported.

torch 2.6 is the first release with FSDP2's public `torch.distributed.fsdp.fully_shard`, which
train/distributed.py uses; everything else reslab calls is older. The version is read from the
installed package's metadata, so the check imports no torch.
"""

from __future__ import annotations

import re
import sys

MIN_TORCH = (2, 6)


class TorchTooOld(ImportError):
    """torch is missing or older than MIN_TORCH; the message is the one line to show."""


def torch_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, ...]:
    """'2.13.0+cpu' -> (2, 13, 0); '2.6.0a0+git1234' -> (2, 6, 0); unparsable -> ()."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    return tuple(int(x) for x in match.groups() if x is not None) if match else ()


def problem(version: str | None) -> str | None:
    """The one-line complaint about this torch version, or None when it will do."""
    need = ".".join(map(str, MIN_TORCH))
    if version is None:
        return f"reslab needs torch >= {need}, and torch is not installed: pip install 'torch>={need}'"
    if _release(version)[:2] < MIN_TORCH:
        return (f"reslab needs torch >= {need} (FSDP2's fully_shard), this environment has torch {version}: "
                f"pip install 'torch>={need}'")
    return None


def _one_line_hook(previous):
    def hook(kind, value, tb):
        if issubclass(kind, TorchTooOld):  # the `reslab` command: one line, no traceback
            print(f"reslab: error: {value}", file=sys.stderr)
        else:
            previous(kind, value, tb)
    return hook


def require_torch(version: str | None = None) -> None:
    """Raise TorchTooOld when torch is missing or too old. In a script or the `reslab` command the
    uncaught error prints as its one line (a notebook shows it as an ordinary ImportError)."""
    message = problem(torch_version() if version is None else version)
    if message:
        sys.excepthook = _one_line_hook(sys.excepthook)
        raise TorchTooOld(message)
