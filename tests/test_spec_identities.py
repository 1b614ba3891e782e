"""Planned run identities of the built-in studies and the example specs are the recorded ones.

A run's identity names its folder in every store: a change that moves one silently retrains it and
orphans its results. tests/golden/study_identities.json was written before the spec layer moved
(tests/study_identities.py); every spec, scale, tuning run and tuned comparison run must plan the
same identities, labels and order."""

from reslab.fileio import read_json
from tests.study_identities import GOLDEN, identities


def test_planned_identities_are_the_recorded_ones():
    want = read_json(GOLDEN, "golden identities")
    got = identities()
    assert sorted(got) == sorted(want)
    for spec in want:
        assert got[spec] == want[spec], spec
