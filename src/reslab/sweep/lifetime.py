"""A sweep's workers die with the sweep, on every OS.

A worker killed together with its orchestrator is harmless (its run folder resumes from the last
checkpoint); a worker left running after the orchestrator died is not: it keeps the run folder's
lock, so the restarted sweep finds the run busy. Two mechanisms, one per platform:

    Linux      prctl(PR_SET_PDEATHSIG, SIGKILL) in the child before exec: the kernel kills it the
               moment its parent dies (`worker_popen_kwargs` returns it as the preexec_fn)
    elsewhere  the worker watches its parent itself (`watch_parent`): a daemon thread that exits the
               process once its parent id changes (an orphan is re-parented)

Only `_set_pdeathsig` makes the Linux-only call.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

PARENT_ENV = "RESLAB_PARENT_PID"   # set for a worker that must watch its parent itself
_PR_SET_PDEATHSIG = 1


def _set_pdeathsig() -> None:  # runs in the child between fork and exec (Linux only)
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def worker_popen_kwargs(env: dict, platform: str | None = None) -> dict:
    """subprocess.Popen keyword arguments that tie a worker's life to this process: the kernel's
    parent-death signal on Linux; elsewhere the worker is told (through `env`) to watch its parent."""
    platform = sys.platform if platform is None else platform
    if platform.startswith("linux"):
        return {"env": env, "preexec_fn": _set_pdeathsig}
    return {"env": {**env, PARENT_ENV: str(os.getpid())}}


def watch_parent(poll_s: float = 0.5) -> threading.Thread | None:
    """In a worker started without the parent-death signal: exit (status 137, as SIGKILL would) once
    the parent named in $RESLAB_PARENT_PID is gone. Returns the watching thread, or None when the
    variable is unset (Linux: the kernel does it)."""
    expected = os.environ.get(PARENT_ENV)
    if not expected:
        return None
    parent = int(expected)

    def watch() -> None:
        stop = threading.Event()
        while os.getppid() == parent:
            stop.wait(poll_s)
        os._exit(137)

    thread = threading.Thread(target=watch, name="reslab-watch-parent", daemon=True)
    thread.start()
    return thread
