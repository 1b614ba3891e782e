"""docs/config.md is the configuration reference generated from the dataclasses, kept true here."""

from pathlib import Path

from reslab.config_docs import render

ROOT = Path(__file__).resolve().parent.parent


def test_the_config_reference_is_the_generated_one():
    text = (ROOT / "docs" / "config.md").read_text()
    assert text == render(), "docs/config.md is stale: python -m reslab.config_docs > docs/config.md"


def test_every_field_has_a_meaning():
    for line in render().splitlines():
        if line.startswith("| `"):
            assert not line.rstrip().endswith("|  |"), line  # a field without a comment in its dataclass
