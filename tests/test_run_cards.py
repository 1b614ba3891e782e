"""bench/run_cards.sh: each card's log, card path and wall time are named by the card's label, so two
cards of one design with other settings (pre-ln, pre-ln --set model.norm=derf) keep their own; a card
that fails before writing its folder is named by its argument. `reslab` is a stand-in here (a script
on PATH that makes the card folder the real command would), so the test checks the script's
bookkeeping, not training."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "run_cards.sh"

FAKE = r"""#!/usr/bin/env bash
# stand-in for `reslab assess DESIGN [--set K=V ...] --scale S --store STORE`
shift  # assess
design=$1; shift; label=$design
while [ $# -gt 0 ]; do
  case $1 in
    --set) label="$label+${2#model.}"; label=${label/=/-}; shift 2 ;;
    --scale) scale=$2; shift 2 ;;
    --store) store=$2; shift 2 ;;
    *) shift ;;
  esac
done
if [ "$design" = broken ]; then echo "reslab: error: --design: unknown design 'broken'" >&2; exit 2; fi
echo "sweep assess-$label.tune: 4 runs planned, 2 already finished, 2 to train" >&2
mkdir -p "$store/cards/$label-$scale"
echo "card: $store/cards/$label-$scale/card.md"
echo "$store/cards/$label-$scale"
"""


@pytest.fixture()
def fake_path(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "reslab").write_text(FAKE)
    (bin_dir / "reslab").chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def test_cards_are_named_by_their_label_settings_included(tmp_path, fake_path):
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(SCRIPT), str(out), "pre-ln", "pre-ln --set model.norm=derf", "broken"],
                          env={**os.environ, "PATH": fake_path, "SCALE": "cpu"}, capture_output=True, text=True)
    assert done.returncode == 1, done.stderr  # the broken card is named; the others still ran
    assert done.stderr.strip().endswith('run_cards.sh: 1 of 3 cards failed: "broken" '
                                        f'(their logs: {out}/LABEL.log)')
    walls = [line.split("\t") for line in (out / "walls.tsv").read_text().splitlines()]
    assert [w[0] for w in walls] == ["pre-ln", "pre-ln+norm-derf", "broken"]
    assert [w[3:5] for w in walls] == [["cpu", "shared"], ["cpu", "shared"], ["cpu", "clean"]]
    assert (out / "pre-ln+norm-derf.path").read_text().strip() == str(out / "store" / "cards" / "pre-ln+norm-derf-cpu")
    assert "assess-pre-ln+norm-derf.tune" in (out / "pre-ln+norm-derf.log").read_text()
    assert "assess-pre-ln.tune" in (out / "pre-ln.log").read_text()
    assert "unknown design 'broken'" in (out / "broken.log").read_text()
    assert not list(out.glob("running-*"))  # no leftovers


def test_without_reslab_on_path_it_stops_at_once(tmp_path):
    bare = "/usr/bin:/bin"
    if shutil.which("reslab", path=bare):
        pytest.skip("reslab is installed system-wide here")
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), "pre-ln"], env={**os.environ, "PATH": bare},
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip() == ("run_cards.sh: reslab is not on PATH (activate the virtual environment it was "
                                   "installed into)")
    assert not (tmp_path / "out").exists()


def test_a_good_run_exits_0(tmp_path, fake_path):
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), "pre-ln"],
                          env={**os.environ, "PATH": fake_path}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
