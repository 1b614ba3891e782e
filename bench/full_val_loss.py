"""Loss of a model on the whole validation split (non-overlapping windows), not a 20-batch sample.

Usage: python bench/full_val_loss.py MODEL_OR_RUN_FOLDER [...]   (a run folder: its last checkpoint)
"""

import sys
from pathlib import Path

import torch

from reslab import load_model
from reslab.data import DataConfig, prepare_dataset
from reslab.train.checkpoint import complete_checkpoints


@torch.no_grad()
def full_val_loss(model, tokens) -> float:
    T = model.config.block_size
    val = torch.from_numpy(tokens.astype("int64"))
    n = (len(val) - 1) // T
    x, y = val[: n * T].view(n, T), val[1: n * T + 1].view(n, T)
    total = 0.0
    for i in range(0, n, 256):
        _, loss = model(x[i: i + 256], y[i: i + 256])
        total += loss.item() * x[i: i + 256].shape[0]
    return total / n


def main() -> None:
    data = prepare_dataset(DataConfig(download=False, fallback=False), progress=False, log=lambda *_: None)
    for arg in sys.argv[1:]:
        folder = Path(arg)
        if (folder / "checkpoints").is_dir():
            folder = complete_checkpoints(folder / "checkpoints")[-1]
        model = load_model(folder).eval()
        print(f"{arg}: full validation loss {full_val_loss(model, data.val):.4f} over {len(data.val):,} tokens")


if __name__ == "__main__":
    main()
