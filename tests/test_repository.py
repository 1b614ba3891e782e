"""The repository itself: what installing the example leaves is ignored by git, and nothing that is
committed points at one particular machine's folders (defaults are relative to the repository)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                                reason="needs a git checkout")


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


@pytest.mark.parametrize("path", ["examples/mix-pre-post/build/lib/mix_pre_post/__init__.py",
                                  "examples/mix-pre-post/src/mix_pre_post.egg-info/PKG-INFO",
                                  "src/reslab.egg-info/PKG-INFO", "results/index.sqlite"])
def test_what_an_install_or_a_run_leaves_is_ignored(path):
    assert _git("check-ignore", "-q", "--no-index", path).returncode == 0, f"{path} is not ignored"


# A folder of this project's workspace or of the fetch tool's mirrors, written as an absolute path.
MACHINE_PATH = re.compile(r"(?<![\w./])/(?:work|root|home/\w+)/[\w.+-]+|\.mirror/")


def test_no_committed_code_names_one_machines_folders():
    files = _git("ls-files", "*.py", "*.sh", "*.toml", ".ci/*").stdout.split()
    found = []
    for name in files:
        if name == "tests/test_repository.py":
            continue
        for number, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1):
            if MACHINE_PATH.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    assert found == []


# History named as structure: "Zoo II", "issue 17", test_zoo3.py. Code, tests and docs name what a
# thing is; the dated story of what came when lives in docs/changelog.md alone.
HISTORY = re.compile(r"\bZoo (?:I|II|III|IV)\b|\bissue #?\d+|zoo[0-9]", re.IGNORECASE)


def test_names_come_from_the_domain_not_from_history():
    files = _git("ls-files", "*.py", "*.sh", "*.toml", "*.md", "*.cfg").stdout.split()
    found = []
    for name in files:
        if name in ("docs/changelog.md", "tests/test_repository.py") or name.startswith("tests/golden/"):
            continue
        if HISTORY.search(name):
            found.append(name)
        for number, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1):
            if HISTORY.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    assert found == []
