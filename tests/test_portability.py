"""Portability: the lowest torch is checked in one line at import; run folders lock through the
OS on every platform; sweep workers die with the sweep on Linux (the kernel) and elsewhere (they
watch their parent)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from reslab import compat
from reslab.sweep.lifetime import PARENT_ENV, worker_popen_kwargs
from reslab.train.run_folder import FolderBusy, RunFolder

SRC = str(Path(compat.__file__).resolve().parents[1])


# ---- the lowest torch --------------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["2.6.0", "2.11.0+cu128", "2.13.0+cpu", "2.6.0a0+git1234", "3.0"])
def test_torch_versions_that_will_do(version):
    assert compat.problem(version) is None


@pytest.mark.parametrize("version", ["2.5.1", "2.4.0+cpu", "1.13.1", "garbage", None])
def test_torch_versions_that_will_not(version):
    message = compat.problem(version)
    assert message.startswith("reslab needs torch >= 2.6") and "\n" not in message
    assert ("not installed" in message) if version is None else (version in message)


def _fake_old_torch(folder: Path) -> dict:
    """A folder that, put first on the path, makes torch 2.4.0 the installed version."""
    dist = folder / "torch-2.4.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.4.0\n")
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), SRC]))


# `import reslab` and the listings need no torch (a fast start); the first name or verb
# that needs torch checks its version.
@pytest.mark.parametrize("argv", [["-c", "import reslab; reslab.build_model('pre-ln')"], ["-c", "import reslab; reslab.GPT"],
                                  ["-m", "reslab", "train", "--preset", "tiny", "--out", "never-written"]])
def test_an_old_torch_is_one_line_where_torch_is_first_needed(tmp_path, argv):
    proc = subprocess.run([sys.executable, *argv], env=_fake_old_torch(tmp_path), capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode != 0 and not (tmp_path / "never-written").exists()
    assert proc.stderr.strip().splitlines() == [
        "reslab: error: reslab needs torch >= 2.6 (FSDP2's fully_shard), this environment has torch 2.4.0: "
        "pip install 'torch>=2.6'"]


def test_an_old_torch_is_an_import_error_in_python_code():
    with pytest.raises(ImportError, match="needs torch >= 2.6"):
        compat.require_torch("2.5.0")
    sys.excepthook = sys.__excepthook__


# ---- run-folder locks ----------------------------------------------------------------------------------
def test_a_lock_held_by_another_process_refuses_and_is_freed_when_it_is_killed(tmp_path):
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, threading
            from reslab.train.run_folder import RunFolder
            folder = RunFolder({str(run)!r})
            folder.lock()
            print("locked", flush=True)
            threading.Event().wait()
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(FolderBusy, match="another process is training this run"):
            RunFolder(run).lock()
    finally:
        holder.kill()
        holder.wait()
    folder = RunFolder(run)
    folder.lock()  # the OS released the killed holder's lock
    folder.close()


# ---- workers die with the sweep --------------------------------------------------------------------------
def test_linux_workers_get_the_kernel_parent_death_signal_and_others_watch_their_parent():
    linux = worker_popen_kwargs({"A": "1"}, platform="linux")
    assert callable(linux["preexec_fn"]) and linux["env"] == {"A": "1"}
    mac = worker_popen_kwargs({"A": "1"}, platform="darwin")
    assert "preexec_fn" not in mac and mac["env"] == {"A": "1", PARENT_ENV: str(os.getpid())}
    assert "preexec_fn" not in worker_popen_kwargs({}, platform="win32")


def _orphan_exits(platform: str) -> bool:
    """Start a middle process that starts a 'worker' the way the sweep runner does on `platform`;
    SIGKILL the middle; True when the worker then exits (its end closes the shared pipe)."""
    worker = textwrap.dedent("""
        import threading
        from reslab.sweep.lifetime import watch_parent
        watch_parent(poll_s=0.01)
        print("worker up", flush=True)
        threading.Event().wait()   # would wait for ever: only its parent's death may end it
    """)
    middle = textwrap.dedent(f"""
        import os, subprocess, sys, threading
        from reslab.sweep.lifetime import worker_popen_kwargs
        kw = worker_popen_kwargs(dict(os.environ), platform={platform!r})
        child = subprocess.Popen([sys.executable, "-c", {worker!r}], **kw)
        print(child.pid, flush=True)
        threading.Event().wait()
    """)
    proc = subprocess.Popen([sys.executable, "-c", middle], stdout=subprocess.PIPE, text=True)
    lines = sorted(proc.stdout.readline().strip() for _ in range(2))  # the pid, then (or before) "worker up"
    assert lines[1] == "worker up"
    worker_pid = int(lines[0])
    proc.kill()
    proc.wait()
    # the worker holds the pipe's write end: EOF means it has exited
    deadline = time.monotonic() + 120  # a safety net against a hang, not a measurement
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready and proc.stdout.read() == "":
            return True
    os.kill(worker_pid, signal.SIGKILL)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_worker_dies_with_the_sweep_on_linux():
    assert _orphan_exits("linux")


def test_a_worker_dies_with_the_sweep_without_the_linux_call():
    assert _orphan_exits("darwin")  # the fallback path, exercised on this machine
