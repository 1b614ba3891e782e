"""bench/study_docs.py: the study sections of the README and the docs, written from report.json files
(synthetic ones here): only the marked region changes, human notes survive, smoke is skipped, a
file without markers is refused with one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reslab.report.claims import evaluate_claims

from .conftest import bench_module

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- studies:begin -->", "<!-- studies:end -->"
PNG = b"\x89PNG\r\n\x1a\nnot really an image, only bytes to copy"


@pytest.fixture(scope="module")
def docs():
    return bench_module("study_docs")


def _row(variant, values, baseline=False, diff=None, p_holm=None, collapsed=0, diverged=0):
    n = len(values)
    mean = sum(values) / n
    std = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    return {"variant": variant, "n": n, "n_planned": 3, "is_baseline": baseline,
            "best": {"n": n, "mean": mean, "std": std, "ci_low": mean - 0.1 if n >= 3 else None,
                     "ci_high": mean + 0.1 if n >= 3 else None, "values": values},
            "diff": diff, "test": None if baseline else {"test": "paired", "p_holm": p_holm},
            "collapsed": collapsed, "diverged": diverged, "failed": 0}


def write_report(store: Path, name: str, scale: str = "tiny", question: str = "Does it work?",
                 claims: list | None = None) -> Path:
    folder = store / "reports" / f"{name}-{scale}"
    folder.mkdir(parents=True)
    (folder / "val_loss.png").write_bytes(PNG)
    report = {
        "title": f"{name} ({scale} scale)", "generated": "2026-12-01 10:00 on testbox (x86_64)",
        "spec": {"name": name, "question": question, "scale": scale, "baseline": "full", "seeds": [1, 2, 3]},
        "reference": {"unigram": 3.35, "bigram": 2.48, "method": "count models"},
        "table": [_row("full", [2.10, 2.12, 2.14], baseline=True),
                  _row("none", [3.35, 3.36], diff=1.2450, p_holm=0.0123, collapsed=2)],
        "claims": claims or [],
        "figures": [{"title": "Validation loss", "file": "val_loss.png"}],
    }
    (folder / "report.json").write_text(json.dumps(report))
    return folder


def target(path: Path, region: str = "\nstale table from an older run\n", before: str = "# Title\r\n\nintro ü\n\n## Studies\n",
           after: str = "\n## After\nkeep me exactly\n") -> tuple[Path, str, str]:
    path.write_bytes((before + BEGIN + region + END + after).encode("utf-8"))
    return path, before + BEGIN, END + after


def run(docs, tmp: Path, *extra) -> int:
    return docs.main([str(tmp / "out"), "--readme", str(tmp / "README.md"), "--docs", str(tmp / "docs" / "studies.md"),
                      "--figures", str(tmp / "docs" / "studies"), *extra])


@pytest.fixture
def out(tmp_path):
    store = tmp_path / "out" / "store"
    cells = [{"variant": "full", "grid": {}, "row": "full",
              "runs": [{"seed": s, "status": "completed", "best_val_loss": v, "final_val_loss": v}
                       for s, v in ((1, 2.10), (2, 2.12), (3, 2.14))]},
             {"variant": "none", "grid": {}, "row": "none",
              "runs": [{"seed": s, "status": "completed", "best_val_loss": v, "final_val_loss": v}
                       for s, v in ((1, 3.35), (2, 3.36), (3, 3.34))]}]
    verdicts = evaluate_claims([{"id": "none-collapses", "statement": "Without skips it collapses",
                                 "source": "seed 000", "kind": "fails", "a": "none"}],
                               cells, {"unigram": 3.35, "bigram": 2.48}, "tiny")
    write_report(store, "alpha", claims=verdicts)
    (tmp_path / "out" / "walls.tsv").write_text("alpha\t600\t2026-11-30T07:00Z\nalpha\t90\t2026-12-01T09:30Z\n")
    (tmp_path / "docs").mkdir()
    return tmp_path


def test_the_region_is_replaced_and_the_rest_is_byte_identical(docs, out):
    readme, head, tail = target(out / "README.md")
    studies, dhead, dtail = target(out / "docs" / "studies.md", before="# Studies\n")
    assert run(docs, out) == 0
    text = readme.read_bytes().decode("utf-8")
    assert text.startswith(head) and text.endswith(tail)
    region = text[len(head):-len(tail)]
    assert "stale table" not in region
    assert "\n### alpha: Does it work?\n" in region  # one level below "## Studies"
    # the last walls.tsv line of a study wins
    assert "Sweep `alpha` at scale tiny (not a built-in study): 1.5 min wall, 2026-12-01T09:30Z" in region
    assert "Reference levels (nats/token, validation split; method in the report): unigram 3.3500, bigram 2.4800." in region
    assert "| full (baseline) | 3/3 | 2.1200 ± 0.0200 | [2.0200, 2.2200] | baseline | 0.360 below | — |" in region
    assert "| none | 2/3 | 3.3550 ± 0.0071 | n<3: none | +1.2450 (p 0.0123) | 0.875 above | 2 collapsed, n = 2 |" in region
    assert "#### Published claims and verdicts" in region
    assert "| none-collapses | Without skips it collapses | seed 000 | 3/3 failed |" in region
    assert "| reproduced |" in region
    # every verdict once more in one table at the top, with the counts
    glance = region[region.index("### Verdicts at a glance"):region.index("### alpha")]
    assert "1 published claim was tested: 1 reproduced." in glance
    assert "| alpha (tiny) | Without skips it collapses | reproduced | 3/3 failed |" in glance
    assert "[Validation loss](docs/studies/alpha-tiny-val_loss.png)" in region
    assert (out / "docs" / "studies" / "alpha-tiny-val_loss.png").read_bytes() == PNG
    # every built-in study is listed; one without a report says so instead of keeping old numbers
    assert "### partial-residual" in region and "Not run: the store these sections were generated from has no report of partial-residual" in region
    dtext = studies.read_bytes().decode("utf-8")
    assert dtext.startswith(dhead) and dtext.endswith(dtail)
    assert "\n## alpha: Does it work?\n" in dtext  # below "# Studies"
    assert "[Validation loss](studies/alpha-tiny-val_loss.png)" in dtext  # relative to docs/


def test_human_notes_survive_regeneration(docs, out):
    region = ("\nold\n<!-- note:alpha -->\nWe think this agrees with the paper.\n  Indented | pipes |\n<!-- /note:alpha -->\n"
              "junk\n<!-- note:alpha/second -->second note<!-- /note:alpha/second -->\n"
              "<!-- note:retired-study -->a study that is gone<!-- /note:retired-study -->\n")
    readme, head, tail = target(out / "README.md", region=region)
    target(out / "docs" / "studies.md")
    assert run(docs, out) == 0
    first = readme.read_text(encoding="utf-8")
    assert "junk" not in first and "\nold\n" not in first
    label = "**Note (human, not generated):**"
    assert f"{label}\n<!-- note:alpha -->\nWe think this agrees with the paper.\n  Indented | pipes |\n<!-- /note:alpha -->" in first
    assert f"{label}\n<!-- note:alpha/second -->second note<!-- /note:alpha/second -->" in first
    # alpha's notes sit in alpha's section, before the next study's heading
    alpha = first.index("### alpha:")
    nxt = first.index("\n### ", alpha + 1)
    assert alpha < first.index("<!-- note:alpha -->") < first.index("<!-- note:alpha/second -->") < nxt
    # a note on a study no longer listed is kept, in a section of its own
    assert "### Notes on studies not listed above (human, not generated)" in first
    assert "<!-- note:retired-study -->a study that is gone<!-- /note:retired-study -->" in first
    assert run(docs, out) == 0
    assert readme.read_text(encoding="utf-8") == first  # regeneration is stable: no label piles up


def test_smoke_reports_are_skipped_with_a_line(docs, out, capsys):
    write_report(out / "out" / "store", "beta", scale="smoke")
    readme, _, _ = target(out / "README.md")
    target(out / "docs" / "studies.md")
    assert run(docs, out) == 0
    err = capsys.readouterr().err
    assert "skipped" in err and "beta-smoke" in err and "not a result" in err
    text = readme.read_text(encoding="utf-8")
    assert "beta" not in text  # not a built-in study and no result: no section at all
    assert not (out / "docs" / "studies" / "beta-smoke-val_loss.png").exists()


def test_builtin_studies_get_their_command_and_smoke_only_ones_say_not_run(docs, out):
    write_report(out / "out" / "store", "ln-placement", scale="smoke")
    write_report(out / "out" / "store", "gain-confound", question="Do gains matter?")
    readme, _, _ = target(out / "README.md")
    target(out / "docs" / "studies.md")
    assert run(docs, out) == 0
    text = readme.read_text(encoding="utf-8")
    assert "has no report of ln-placement" in text
    assert "### gain-confound: Do gains matter?\n\n`reslab study run gain-confound --scale tiny" in text
    assert "wall time not recorded; report generated 2026-12-01 10:00 on testbox (x86_64)" in text
    # built-in studies first, in their order, then other sweeps
    assert text.index("### partial-residual") < text.index("### gain-confound") < text.index("### alpha")


def test_missing_markers_are_refused_and_nothing_is_written(docs, out, capsys):
    readme, _, _ = target(out / "README.md")
    before = readme.read_bytes()
    docs_md = out / "docs" / "studies.md"
    docs_md.write_text("# Studies\n\nno markers here\n")
    assert run(docs, out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "studies.md: the markers <!-- studies:begin --> and <!-- studies:end --> are missing" in err[0]
    assert readme.read_bytes() == before  # the README (which had markers) was not written either
    assert docs_md.read_text() == "# Studies\n\nno markers here\n"
    assert not (out / "docs" / "studies").exists()  # no figure copied


def test_an_unclosed_note_is_refused(docs, out, capsys):
    target(out / "README.md", region="\n<!-- note:alpha -->text that would be lost\n")
    target(out / "docs" / "studies.md")
    assert run(docs, out) == 2
    err = capsys.readouterr().err
    assert "note:alpha is never closed" in err and "README.md:7:" in err


def test_the_script_exits_2_with_one_line_not_a_traceback(out):
    (out / "README.md").write_text("no markers\n")
    target(out / "docs" / "studies.md")
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "study_docs.py"), str(out / "out"),
                           "--readme", str(out / "README.md"), "--docs", str(out / "docs" / "studies.md"),
                           "--figures", str(out / "figs")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "are missing" in proc.stderr
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "study_docs.py"), str(out / "nowhere")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no reports/ or store/reports/ folder" in proc.stderr


def test_the_repository_files_carry_the_markers(docs):
    path = ROOT / "docs" / "studies.md"  # the studies live there; the README is short
    head, region, _ = docs.split_target(path)  # raises if the marker lines are missing or repeated
    docs.read_notes(path, head, region)         # and its notes are well formed
    assert "<!-- studies:begin -->" not in (ROOT / "README.md").read_text()
    assert not (ROOT / "bench" / "study_tables.py").exists()


def test_a_quoted_marker_is_not_a_marker(docs, out):
    readme, head, tail = target(out / "README.md", before="Sections go between `<!-- studies:begin -->` and "
                                                          "`<!-- studies:end -->`.\n\n## Studies\n")
    target(out / "docs" / "studies.md")
    assert run(docs, out) == 0
    text = readme.read_text(encoding="utf-8")
    assert text.startswith(head) and text.endswith(tail) and "### alpha" in text


def test_cpu_rows_short_of_the_margin_are_flagged(docs):
    """A cpu-scale row that trains but ends less than 0.3 nats below bigram is flagged in the table
    (the cpu scale's rule, not met); a row at or above bigram keeps its own flag; smoke is not cpu."""
    def report(scale, means):
        return {"spec": {"name": "s", "scale": scale}, "reference": {"bigram": 2.5},
                "table": [{"variant": f"v{i}", "n": 3, "best": {"mean": m, "std": 0.01},
                           "not_learned_beyond_bigram": m >= 2.5} for i, m in enumerate(means)]}
    lines = docs.main_table(report("cpu", [2.1, 2.3, 2.6])).splitlines()[2:]
    assert "less than 0.3 below bigram" not in lines[0] and "0.400 below" in lines[0]
    assert "less than 0.3 below bigram" in lines[1]
    assert "not beyond bigram" in lines[2] and "less than 0.3" not in lines[2]
    assert "less than 0.3" not in docs.main_table(report("smoke", [2.3]))
    held = report("cpu", [2.1, 3.35])
    held["lr"] = {"tuning": {"rows": [{"name": "v0", "held": True}, {"name": "v1", "held": False}]}}
    lines = docs.main_table(held).splitlines()[2:]
    assert "did not hold" not in lines[0] and "not beyond bigram, tuned lr did not hold" in lines[1]


def test_each_rows_tuned_lr_is_shown_with_the_grids_edges_marked(docs):
    """A report whose rows carry their tuned lr gets an "lr (tuned)" column; a value at either end of
    the tuning grid is marked (the row's best may lie outside the grid). No tuning: no column."""
    rows = [{"variant": f"v{i}", "n": 3, "best": {"mean": 2.0, "std": 0.01}, "extra": {"lr (tuned)": lr}}
            for i, lr in enumerate([1e-3, 3e-3, 1e-2])]
    report = {"spec": {"name": "s", "scale": "cpu"}, "reference": {"bigram": 2.5}, "table": rows,
              "lr": {"tuning": {"values": [1e-3, 3e-3, 1e-2]}}}
    table = docs.main_table(report).splitlines()
    assert "| lr (tuned) |" in table[0]
    cells = [line.split("|")[7].strip() for line in table[2:]]
    assert cells == ["0.001 (bottom of grid)", "0.003", "0.01 (top of grid)"]
    # tune.extend: the row's own edge (as the sweep recorded it) decides, and a value the row added
    # beyond the [tune] grid says so
    report["lr"]["tuning"] = {"grid": [1e-3, 3e-3, 1e-2], "values": [1e-3, 3e-3, 1e-2, 3e-2, 9e-2]}
    for r, (lr, edge) in zip(rows, [(1e-2, None), (3e-2, None), (9e-2, "top")]):
        r["extra"]["lr (tuned)"], r["tuned_edge"] = lr, edge
    cells = [line.split("|")[7].strip() for line in docs.main_table(report).splitlines()[2:]]
    assert cells == ["0.01", "0.03 (beyond the [tune] grid)", "0.09 (top of extended grid)"]
    for r in rows:
        del r["extra"]
    assert "lr (tuned)" not in docs.main_table(report)


def test_a_sensitivity_result_gets_its_table_in_the_section(docs, out):
    """lr-sensitivity's answer is its sensitivity table, not the per-rate rows: a report that carries
    one (lr.sensitivity) gets it in its section, with the cap, the intervals and the loss at each rate."""
    folder = out / "out" / "store" / "reports" / "alpha-tiny"
    report = json.loads((folder / "report.json").read_text())
    report["lr"] = {"sensitivity": {
        "axis": "optim.lr", "cap": 3.35, "cap_reason": "the unigram level", "metric": "final_val_loss",
        "lrs": [0.001, 0.002],
        "designs": [{"design": "pre-ln", "mean": 0.2013, "std": 0.049, "ci_low": 0.0797, "ci_high": 0.3229,
                     "n": 3, "best_lr": 0.002, "best_loss": 2.0323,
                     "mean_loss": [{"lr": 0.001, "mean": 2.1474}, {"lr": 0.002, "mean": 2.0323}]},
                    {"design": "post-ln", "mean": 0.1, "std": None, "n": 2, "best_lr": 0.001,
                     "best_loss": 2.25, "mean_loss": [{"lr": 0.001, "mean": 2.25}]}]}}
    (folder / "report.json").write_text(json.dumps(report))
    target(out / "README.md")
    studies, _, _ = target(out / "docs" / "studies.md", before="# Studies\n")
    assert run(docs, out) == 0
    text = studies.read_text()
    section = text[text.index("## alpha"):]
    assert "### Learning-rate sensitivity (Wortsman et al. 2023)" in section
    assert "Cap: 3.3500 nats, the unigram level." in section
    assert "| pre-ln | 0.2013 ± 0.0490 | [0.0797, 0.3229] | 3 | 0.002 | 2.0323 | 2.1474 | 2.0323 |" in section
    assert "| post-ln | 0.1000 | n<3: no interval | 2 | 0.001 | 2.2500 | 2.2500 | — |" in section
    # without one, no such table
    del report["lr"]
    (folder / "report.json").write_text(json.dumps(report))
    assert run(docs, out) == 0 and "Learning-rate sensitivity" not in studies.read_text()


def test_reports_are_archived_and_a_later_store_without_them_keeps_their_sections(docs, out):
    """Each store report is copied to <figures>/reports with its wall time; regenerating from a store
    that lacks it writes its section from the archive (figures linked, wall kept); a store report of
    the same study and scale replaces the archived one."""
    readme, _, _ = target(out / "README.md")
    target(out / "docs" / "studies.md")
    assert run(docs, out) == 0
    archive = out / "docs" / "studies" / "reports"
    assert json.loads((archive / "alpha-tiny.json").read_text())["spec"]["name"] == "alpha"
    assert (archive / "walls.tsv").read_text() == "alpha\t90\t2026-12-01T09:30Z\ttiny\n"
    first = readme.read_text(encoding="utf-8")
    # a new OUT whose store has another study only: alpha comes from the archive, unchanged
    import shutil
    shutil.rmtree(out / "out")
    write_report(out / "out" / "store", "gain-confound", question="Do gains matter?")
    assert run(docs, out) == 0
    second = readme.read_text(encoding="utf-8")
    alpha = lambda text: text[text.index("### alpha:"):]
    assert alpha(second) == alpha(first)  # its wall time, table, verdicts and figure link as before
    assert "### gain-confound: Do gains matter?" in second and (archive / "gain-confound-tiny.json").is_file()
    assert "1 published claim was tested: 1 reproduced." in second  # alpha's verdict still counted
    # the store's report of a study and scale wins over the archived one
    write_report(out / "out" / "store", "alpha", question="Does it work now?")
    assert run(docs, out) == 0
    assert "### alpha: Does it work now?" in readme.read_text(encoding="utf-8")
    assert json.loads((archive / "alpha-tiny.json").read_text())["spec"]["question"] == "Does it work now?"


def test_a_section_generated_before_the_archive_is_kept_until_its_study_has_a_report(docs, out, capsys):
    """A built-in study with no report anywhere keeps its generated section (and its rows of the
    verdicts table) as it was, with its human note once; a "Not run" section is not kept."""
    old_section = ("### ln-placement: Post-LN or Pre-LN?\n\n`reslab study run ln-placement --scale cpu`: 60 min.\n\n"
                   "| variant | seeds |\n|:---|---:|\n| pre-ln | 3/3 |")
    region = ("\n### Verdicts at a glance\n\n2 published claims were tested: 1 reproduced, 1 inconclusive.\n\n"
              "| study | claim | verdict | estimate | 95% interval | p (Holm) |\n|:---|:---|:---|---:|---:|---:|\n"
              "| ln-placement (cpu) | Post-LN trains worse | reproduced | +0.1838 | [+0.1444, +0.2233] | 0.00372 |\n"
              "| resi-dual (cpu) | ResiDual wins | inconclusive | -0.1 | [-0.3, +0.1] | 0.2 |\n\n"
              + old_section + "\n\n**Note (human, not generated):**\n<!-- note:ln-placement -->why<!-- /note:ln-placement -->\n\n"
              "### resi-dual: Does ResiDual help?\n\nNot run: the store these sections were generated from has no report.\n")
    readme, _, _ = target(out / "README.md", region=region)
    target(out / "docs" / "studies.md")
    assert run(docs, out) == 0
    assert "kept the section of ln-placement as it was" in capsys.readouterr().err
    text = readme.read_text(encoding="utf-8")
    assert old_section + "\n\n**Note (human, not generated):**\n<!-- note:ln-placement -->why<!-- /note:ln-placement -->" in text
    assert text.count("<!-- note:ln-placement -->") == 1
    assert "| ln-placement (cpu) | Post-LN trains worse | reproduced | +0.1838 |" in text
    assert "resi-dual (cpu)" not in text and "has no report of resi-dual" in text
    assert "2 published claims were tested: 2 reproduced." in text  # alpha's and the kept one
    assert run(docs, out) == 0
    assert readme.read_text(encoding="utf-8") == text  # stable


def _cpu_report(name, runs, tuning_rows=None, sensitivity=None):
    """A cpu report with just what the rules table reads: runs (variant, seed loss, collapsed), rows' n."""
    table, by_row = [], {}
    for variant, _, _ in runs:
        by_row[variant] = by_row.get(variant, 0) + 1
    table = [{"variant": v, "n": n} for v, n in by_row.items()]
    lr = {"tuning": {"rows": tuning_rows}} if tuning_rows else None
    if sensitivity:
        lr = {"sensitivity": {"designs": sensitivity}}
    return {"spec": {"name": name, "scale": "cpu"}, "reference": {"bigram": 2.5}, "table": table, "lr": lr,
            "runs": [{"variant": v, "status": "completed" if loss is not None else "failed",
                      "best_val_loss": loss, "collapsed": c} for v, loss, c in runs]}


def test_the_rules_table_checks_each_cpu_report_against_the_scales_rules(docs):
    """Runs are tuning + compared; a row's level is the mean over its seeds that trained (a plateau
    seed is counted apart, a row with none trained is left out); a row less than 0.3 below bigram is
    named; the wall is judged against 15 and 60 minutes, a shared store's not at all; the fewest runs
    the rules allow are 3 seeds a row (+ 3 tuning rates for a tuned row; 6 rates x 3 seeds a design in
    an lr sweep), their wall the measured one scaled by the runs; an lr sweep is judged by each design
    at its best rate; a smoke report is not in the table."""
    quick = _cpu_report("quick", [("a", 2.0, False), ("a", 2.1, False), ("a", 3.34, True),
                                  ("b", 2.3, False), ("b", 2.2, False), ("dead", 3.35, True)],
                        tuning_rows=[{"values": [{"n": 2}, {"n": 2}]}, {"values": [{"n": 1}]}])
    slow = _cpu_report("slow", [("a", 1.9, False)] * 3)
    shared = _cpu_report("shared", [("a", 1.9, False)] * 3)
    sweep = _cpu_report("sweep", [("x-lr=1", 1.8, False), ("x-lr=9", 3.35, True)], sensitivity=[
        {"design": "x", "best_loss": 1.8, "best_lr": 1, "points": [{"lr": 1, "kind": "ok"}, {"lr": 9, "kind": "failed"}]},
        {"design": "y", "best_loss": 2.25, "best_lr": 3, "points": [{"lr": 3, "kind": "ok"}, {"lr": 3, "kind": "failed"}]}])
    smoke = {**slow, "spec": {"name": "smoke", "scale": "smoke"}}
    found = {n: [(None, r)] for n, r in [("quick", quick), ("slow", slow), ("shared", shared), ("sweep", sweep),
                                         ("smoke", smoke)]}
    walls = {("quick", "cpu"): (550.0, "2026-12-03T10:00Z", "clean"), ("slow", None): (3700.0, "2026-12-02T10:00Z"),
             ("shared", "cpu"): (60.0, "2026-12-03T11:00Z", "shared")}
    text = docs.rules_glance(found, ["quick", "slow", "shared", "sweep", "smoke"], walls, 3)
    rows = {line.split(" | ")[0][2:]: line.strip("| ").split(" | ") for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| study")}
    assert set(rows) == {"quick", "slow", "shared", "sweep"}
    # quick: 3 tuned rows x (3 + 3) = 18 runs, 550 s x 18 / 11 = 15.0 min
    assert rows["quick"][1:] == ["11 (5 + 6)", "1-3", "9.2 min (within 15; 2026-12-03)", "18 (about 15.0 min)",
                                 "1 of 2 (short: b 0.25)", "b 0.25", "a: 1, dead: 1"]
    assert rows["slow"][3:6] == ["61.7 min (over 60; 2026-12-02)", "3 (about 61.7 min)", "1 of 1"]
    assert rows["shared"][3:5] == ["1.0 min (in a shared store; 2026-12-03)", "3"]
    assert rows["sweep"][4:] == ["36", "1 of 2 (short: y 0.25)", "y 0.25", "y at its best lr: 1"]
    assert "2 of 4 studies have every row that trains 0.3 nats or more below bigram" in text
    assert "1 of 2 studies timed from a clean store ran within 15 minutes" in text
    assert "at the fewest runs the rules allow, 1 of 2 would" in text
    assert docs.rules_glance({"smoke": [(None, smoke)]}, ["smoke"], {}, 3) is None
    # a scale ladder is held to 90 minutes from a clean store, and not counted against the 15
    ladder = {**slow, "ladder": {"rungs": []}}
    text = docs.rules_glance({"quick": [(None, quick)], "ladder": [(None, ladder)], "late": [(None, ladder)]},
                             ["quick", "ladder", "late"], {**walls, ("ladder", "cpu"): (5268.0, "2026-12-04T17:31Z", "clean"),
                                                           ("late", "cpu"): (5500.0, "2026-12-04T17:31Z", "clean")}, 3)
    rows = {line.split(" | ")[0][2:]: line.strip("| ").split(" | ") for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| study")}
    assert rows["ladder"][3] == "87.8 min (within 90, a ladder's limit; 2026-12-04)"
    assert rows["late"][3] == "91.7 min (over 90, a ladder's limit; 2026-12-04)"
    assert "1 of 1 studies timed from a clean store ran within 15 minutes" in text
    assert "at the fewest runs the rules allow, 1 of 1 would" in text


def test_walls_keep_whether_the_store_was_clean(docs, tmp_path, capsys):
    """run_studies.sh's fifth column is read and archived; anything but clean / shared is ignored
    with a line; a shared store's wall says so in the section's command line."""
    walls = tmp_path / "walls.tsv"
    walls.write_text("a\t60\t2026-12-03T10:00Z\tcpu\tshared\nb\t70\t2026-12-03T10:00Z\tcpu\tdirty\n"
                     "c\t80\t2026-12-03T10:00Z\n")
    read = docs.read_walls(walls)
    assert read == {("a", "cpu"): (60.0, "2026-12-03T10:00Z", "shared"), ("c", None): (80.0, "2026-12-03T10:00Z", None)}
    assert "walls.tsv:2: not 'name<TAB>seconds<TAB>date[<TAB>scale[<TAB>clean|shared]]'" in capsys.readouterr().err
    line = docs.command_line("a", {"spec": {"name": "a", "scale": "cpu"}, "generated": "today"}, False, None,
                             read[("a", "cpu")])
    assert "1.0 min wall, 2026-12-03T10:00Z (in a store that already held other studies' runs)" in line
    store = tmp_path / "store"
    folder = write_report(store, "a", scale="cpu")
    docs.archive_reports({"a": [(folder, json.loads((folder / "report.json").read_text()))]}, read, tmp_path / "arch")
    assert (tmp_path / "arch" / "walls.tsv").read_text() == "a\t60\t2026-12-03T10:00Z\tcpu\tshared\n"


def test_run_studies_records_whether_the_store_was_clean(docs, tmp_path):
    """bench/run_studies.sh writes name, seconds, date, scale and the store's state: "clean" for the
    first study into an empty OUT, "shared" for one that finds runs already there (here the same
    smoke study again, whose runs it reuses); study_docs reads both lines."""
    out = tmp_path / "out"
    for _ in range(2):
        done = subprocess.run(["bash", str(ROOT / "bench" / "run_studies.sh"), str(out), "partial-residual"],
                              cwd=tmp_path, env={**__import__("os").environ, "SCALE": "smoke"},
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    lines = [line.split("\t") for line in (out / "walls.tsv").read_text().splitlines()]
    assert [(l[0], l[3], l[4]) for l in lines] == [("partial-residual", "smoke", "clean"),
                                                    ("partial-residual", "smoke", "shared")]
    assert docs.read_walls(out / "walls.tsv")[("partial-residual", "smoke")][2] == "shared"


def test_run_studies_names_a_failed_study_and_still_runs_the_rest(tmp_path):
    """A study that fails (here an unknown name) is recorded and named in one line, the script exits 1
    after running the others; without `reslab` on PATH it stops at once with exit 2 and writes nothing."""
    import os
    import shutil as sh

    script, out = str(ROOT / "bench" / "run_studies.sh"), tmp_path / "out"
    done = subprocess.run(["bash", script, str(out), "no-such-study", "partial-residual"], cwd=tmp_path,
                          env={**os.environ, "SCALE": "smoke"}, capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert "run_studies.sh: 1 of 2 studies failed: no-such-study" in done.stderr
    assert "unknown study 'no-such-study'" in (out / "no-such-study.log").read_text()
    assert [line.split("\t")[0] for line in (out / "walls.tsv").read_text().splitlines()] == \
        ["no-such-study", "partial-residual"]
    assert (out / "partial-residual.path").read_text().strip()  # the study after the failed one ran
    bare = "/usr/bin:/bin"
    if sh.which("reslab", path=bare):
        pytest.skip("reslab is installed system-wide here")
    done = subprocess.run(["bash", script, str(tmp_path / "none"), "partial-residual"], cwd=tmp_path,
                          env={**os.environ, "PATH": bare}, capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip() == ("run_studies.sh: reslab is not on PATH (activate the virtual environment "
                                   "it was installed into)")
    assert not (tmp_path / "none").exists()


def test_the_committed_studies_page_is_the_one_the_archived_reports_give(docs, tmp_path):
    """docs/studies.md regenerated from docs/studies/reports/*.json alone equals the committed file
    byte for byte, so a hand edit inside the generated region (a verdict count, a table cell) fails
    here. The page and its figures folder are copied side by side, so the figure links come out
    relative exactly as in the repository, and nothing in the repository is written."""
    (tmp_path / "store" / "reports").mkdir(parents=True)  # no new reports: the archive alone
    page, figures = tmp_path / "docs" / "studies.md", tmp_path / "docs" / "studies"
    shutil.copytree(ROOT / "docs" / "studies", figures)
    shutil.copyfile(ROOT / "docs" / "studies.md", page)
    assert docs.main([str(tmp_path / "store"), "--docs", str(page), "--figures", str(figures)]) == 0
    assert page.read_bytes() == (ROOT / "docs" / "studies.md").read_bytes(), \
        "docs/studies.md is not the generated one: mkdir -p /tmp/s/reports && python bench/study_docs.py /tmp/s"
