"""A fast start: help, listings and --version import neither torch nor matplotlib (tested by the
modules imported, never by time); `python -m reslab`, completion, and plotting that leaves a
notebook's matplotlib backend alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "matplotlib")

PROBE = r"""
import json, sys
from reslab.cli.root import _parser, main
from reslab.completion import _tree
table = {}
_tree(_parser(), "", table)
paths = [p.split() for p in table if p] + [[]]
report = {}
for path in sorted(paths):
    for argv in (path + ["--help"],) + ((path,) if path in (["variants"], ["presets"], ["study", "list"]) else ()):
        try:
            main(argv)
        except SystemExit:
            pass
        report[" ".join(argv)] = [m for m in %r if m in sys.modules]
print(json.dumps(report))
"""


def _python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "src"), **env))


def test_every_help_and_the_listings_import_no_torch_or_matplotlib():
    out = _python(PROBE % (HEAVY,))
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.splitlines()[-1])
    assert len(report) >= 25 and "sweep run --help" in report and "study list" in report
    assert {argv: heavy for argv, heavy in report.items() if heavy} == {}


def test_importing_reslab_imports_no_torch_until_a_model_is_needed():
    out = _python("import sys, reslab; a = 'torch' in sys.modules; reslab.GPT; print(a, 'torch' in sys.modules)")
    assert out.stdout.split() == ["False", "True"], out.stderr


def test_python_dash_m_and_version():
    from reslab import __version__

    for argv in (["-m", "reslab", "--version"],):
        out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
        assert out.returncode == 0 and out.stdout.strip() == f"reslab {__version__}"


def test_bash_completion_offers_verbs_and_flags(tmp_path):
    out = subprocess.run([sys.executable, "-m", "reslab", "completion", "bash"], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert out.returncode == 0
    script = tmp_path / "c.sh"
    script.write_text(out.stdout)

    def complete(*words):
        cmd = (f"source {script}; COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}; _reslab; "
               'echo "${COMPREPLY[@]}"')
        return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60).stdout.split()

    assert complete("reslab", "sw") == ["sweep"]
    assert "run" in complete("reslab", "sweep", "r")
    assert set(complete("reslab", "sweep", "run", "--st")) == {"--stack", "--stack-size", "--store"}
    assert "--plugin" in complete("reslab", "--pl")


def test_plotting_leaves_the_matplotlib_backend_alone(tmp_path):
    code = f"""
import matplotlib
matplotlib.use("svg")            # a notebook's or a user's choice
from reslab.probe.plots import plot_vs_depth
from reslab.report import plots  # noqa: F401
rows = [{{"design": "pre-ln", "depth": L, "seed": 0, "kind": "model", "mode": "xiong", "last_w2_grad_norm": 1.0 / L}} for L in (2, 4)]
plot_vs_depth(rows, "last_w2_grad_norm", {str(tmp_path / 'f.png')!r})
print(matplotlib.get_backend())
"""
    out = _python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "svg" and (tmp_path / "f.png").stat().st_size > 1000
