"""Regenerate tests/golden/tiny_losses.json: `python -m tests.make_golden`.

Only when a change is meant to move the numbers; say so in the commit message."""

import json
import tempfile
from pathlib import Path

from reslab.fileio import write_json
from reslab.train.loop import train
from tests.test_train import GOLDEN, golden_config


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        result = train(golden_config(Path(tmp)), Path(tmp) / "run", log=lambda *_: None)
        rows = [json.loads(l) for l in (result.path / "metrics.jsonl").read_text().splitlines()]
        losses = [r["train_loss"] for r in rows if "train_loss" in r]
    import torch

    write_json(GOLDEN, {"what": "train loss of steps 1..50, tests.test_train.golden_config",
                        "torch": torch.__version__, "train_loss": losses})
    print(f"wrote {GOLDEN} ({len(losses)} losses)")


if __name__ == "__main__":
    main()
