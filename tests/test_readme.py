"""The README is the project's face: the two set-up commands first, short, and a status line that
bench/study_docs.py writes from the archived reports (so a hand edit of its counts fails here)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from .conftest import bench_module

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def test_the_readme_opens_with_the_two_commands_and_stays_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert lines[:4] == ["```bash",
                         "pip install torch==2.13.0 -e . && reslab study run partial-residual",
                         "pip install torch==2.13.0 -e '.[test]' && python -m pytest -q -n auto",
                         "```"]
    assert len(lines) <= 140


def test_the_status_line_is_the_one_the_archived_reports_give(tmp_path):
    docs = bench_module("study_docs")
    (tmp_path / "store" / "reports").mkdir(parents=True)  # no new reports: the archive alone
    readme, studies = tmp_path / "README.md", tmp_path / "docs" / "studies.md"
    studies.parent.mkdir()
    shutil.copyfile(README, readme)
    shutil.copyfile(ROOT / "docs" / "studies.md", studies)
    assert docs.main([str(tmp_path / "store"), "--docs", str(studies), "--status", str(readme),
                      "--figures", str(ROOT / "docs" / "studies")]) == 0
    assert readme.read_text(encoding="utf-8") == README.read_text(encoding="utf-8")
    line = re.search(r"<!-- status:begin -->\n(.*)\n<!-- status:end -->", readme.read_text(encoding="utf-8")).group(1)
    assert "published claims: " in line and "(docs/studies.md#verdicts-at-a-glance)" in line


def test_a_hand_edited_count_in_the_status_line_is_rewritten(tmp_path):
    docs = bench_module("study_docs")
    (tmp_path / "store" / "reports").mkdir(parents=True)
    readme = tmp_path / "README.md"
    text = README.read_text(encoding="utf-8")
    edited = re.sub(r"(\d+) reproduced", lambda m: f"{int(m.group(1)) + 1} reproduced", text, count=1)
    assert edited != text
    readme.write_text(edited, encoding="utf-8")
    studies = tmp_path / "studies.md"
    shutil.copyfile(ROOT / "docs" / "studies.md", studies)
    assert docs.main([str(tmp_path / "store"), "--docs", str(studies), "--status", str(readme),
                      "--figures", str(ROOT / "docs" / "studies")]) == 0
    assert readme.read_text(encoding="utf-8").replace("(studies.md#", "(docs/studies.md#") == text


def test_a_readme_without_the_status_markers_is_refused_and_nothing_is_written(tmp_path, capsys):
    docs = bench_module("study_docs")
    (tmp_path / "store" / "reports").mkdir(parents=True)
    readme, studies = tmp_path / "README.md", tmp_path / "studies.md"
    readme.write_text("# no markers\n", encoding="utf-8")
    shutil.copyfile(ROOT / "docs" / "studies.md", studies)
    before = studies.read_bytes()
    assert docs.main([str(tmp_path / "store"), "--docs", str(studies), "--status", str(readme),
                      "--figures", str(ROOT / "docs" / "studies")]) == 2
    assert "<!-- status:begin -->" in capsys.readouterr().err
    assert readme.read_text(encoding="utf-8") == "# no markers\n" and studies.read_bytes() == before
