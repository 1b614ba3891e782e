"""The README's study tables, from the reports `bench/run_studies.sh OUT` wrote.

    python bench/study_tables.py OUT            (Markdown on stdout, one section per study)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _loss(x) -> str:
    return "—" if x is None else f"{x:.4f}"


def table(report: dict, extras=("params", "tokens/s")) -> str:
    shown = [e for e in extras if any(e in (t.get("extra") or {}) for t in report["table"])]
    lines = ["| variant | seeds | best val loss | vs baseline | collapsed / diverged |" + "".join(f" {e} |" for e in shown),
             "|---|---:|---:|---:|---:|" + "---:|" * len(shown)]
    for t in report["table"]:
        best = t["best"]
        value = _loss(best["mean"]) + (f" ± {best['std']:.4f}" if best.get("std") is not None else "")
        diff = "baseline" if t["is_baseline"] else ("—" if t["diff"] is None else f"{t['diff']:+.4f}")
        p = (t.get("test") or {}).get("p_holm")
        if p is not None:
            diff += f" (p {p:.2g})"
        cells = "".join(f" {(t.get('extra') or {}).get(e, '—'):,.0f} |" for e in shown)
        lines.append(f"| {t['variant']} | {t['n']} | {value} | {diff} | {t['collapsed']} / {t['diverged']} |" + cells)
    return "\n".join(lines)


def main() -> None:
    """Prints each study's table, with params and tokens/s columns when its report has them."""
    out = Path(sys.argv[1])
    walls = {}
    if (out / "walls.tsv").is_file():
        for line in (out / "walls.tsv").read_text().splitlines():
            name, seconds, when = line.split("\t")
            walls[name] = (int(seconds), when)  # the last run of a study wins
    for report_dir in sorted(p for p in (out / "store" / "reports").iterdir() if (p / "report.json").is_file()):
        report = json.loads((report_dir / "report.json").read_text())
        name = report["spec"]["name"]
        seconds, when = walls.get(name, (None, "?"))
        wall = f"{seconds / 60:.1f} min" if seconds else "?"
        print(f"### {name}: {report['spec']['question']}\n")
        print(f"`reslab study run {name} --scale tiny`: {wall} wall on 2 cores, {when}.\n")
        print(table(report) + "\n")


if __name__ == "__main__":
    main()
