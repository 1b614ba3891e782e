"""The `reslab` command as a whole: what every verb does before its own work (plugins named by the
user are loaded, and one that cannot be is refused in one line)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _reslab(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`python -m reslab ARGS` in tmp_path, with tmp_path importable (the plugins written there)."""
    full = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT / "src")]), **env)
    full.pop("RESLAB_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "reslab", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=full, timeout=600)


@pytest.mark.parametrize("verb", [["presets"], ["model", "--set", "model.n_layer=1"],
                                  ["train", "--preset", "tiny", "--set", "train.steps=1", "--no-store"]])
def test_a_plugin_in_reslab_plugins_that_cannot_be_imported_stops_every_verb(tmp_path, verb):
    (tmp_path / "broken_module.py").write_text("raise RuntimeError('the plugin is broken')\n")
    out = _reslab(tmp_path, *verb, RESLAB_PLUGINS="broken_module")
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == ["reslab: error: RESLAB_PLUGINS: plugin 'broken_module' cannot be loaded "
                                       "(RuntimeError: the plugin is broken)"]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results").exists()  # nothing was written


def test_a_plugin_in_reslab_plugins_is_loaded_before_the_verb(tmp_path):
    (tmp_path / "noisy_plugin.py").write_text("import sys\nprint('loaded noisy_plugin', file=sys.stderr)\n")
    out = _reslab(tmp_path, "presets", RESLAB_PLUGINS="noisy_plugin")
    assert out.returncode == 0 and out.stderr.splitlines() == ["loaded noisy_plugin"]
    assert "tiny" in out.stdout
