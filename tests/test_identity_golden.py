"""Run identities recorded before the designs' own hyperparameters moved into [model.options]
(tests/golden/identities.json, written by tests/make_identity_golden.py) are the identities now."""

from __future__ import annotations

import json

import pytest

from reslab.train.config import config_hash
from reslab.model.spellings import MOVED
from reslab.spec.expand import run_identity
from reslab.train.config import build_run_config, canonical
from tests.make_identity_golden import GOLDEN, planned_ids

RECORDED = json.loads(GOLDEN.read_text())


@pytest.fixture(scope="module")
def planned() -> dict:
    return planned_ids()


def test_every_planned_identity_is_the_recorded_one(planned):
    assert len(RECORDED["ids"]) > 1000
    changed = {k: (v, planned.get(k)) for k, v in RECORDED["ids"].items() if planned.get(k) != v}
    assert not changed, f"{len(changed)} of {len(RECORDED['ids'])} identities moved, e.g. {list(changed.items())[:3]}"


@pytest.mark.parametrize("entry", RECORDED["configs"], ids=lambda e: e["label"])
def test_a_config_with_design_fields_keeps_its_identity(entry):
    cfg = build_run_config(entry["config"])
    assert (run_identity(cfg), config_hash(cfg)) == (entry["id"], entry["hash"])


def _new_spelling(model: dict) -> dict:
    """A [model] table with the old design fields written as [model.options], by hand."""
    out = {k: v for k, v in model.items() if k not in MOVED}
    options = {MOVED[k][1]: v for k, v in model.items() if k in MOVED}
    return {**out, "options": options} if options else out


@pytest.mark.parametrize("entry", RECORDED["configs"], ids=lambda e: e["label"])
def test_the_new_spelling_and_a_stored_old_config_keep_the_identity(entry, capsys):
    data = {**entry["config"], "model": _new_spelling(entry["config"]["model"])}
    assert data["model"] != entry["config"]["model"] or not set(entry["config"]["model"]) & set(MOVED)
    cfg = build_run_config(data)
    assert (run_identity(cfg), config_hash(cfg)) == (entry["id"], entry["hash"])
    assert not set(cfg.model.to_dict()) & set(MOVED)
    # a run folder written before the move holds every old field; it loads as the same run
    stored = build_run_config(entry["stored"])
    assert stored == cfg
    assert canonical(entry["stored"]) == canonical(cfg.to_dict())
