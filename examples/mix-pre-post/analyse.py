"""Read a mix-pre-post sweep back as data: loss per design, and the mix m each layer learned.

    python examples/mix-pre-post/analyse.py STORE        (the store the sweep ran into)
"""

import sys
from pathlib import Path

import reslab
import reslab_mix_pre_post  # noqa: F401 - registers the design, so its checkpoints can be loaded
from reslab.train.checkpoint import model_folder_of


def main(store: str) -> None:
    runs = reslab.load_runs(store, spec="mix-pre-post", status="completed")
    print(runs.groupby("variant")["best_val_loss"].agg(["mean", "std", "count"]).round(4).to_string())
    for _, run in runs[runs["model.design"] == "mix-pre-post"].iterrows():
        model = reslab.load_model(model_folder_of(Path(run["path"]))[0])
        mixes = [f"{a:.2f}/{m:.2f}" for a, m in (b.mix().tolist() for b in model.blocks)]
        print(f"{run['variant']} seed {run['seed']}: m (attention/MLP) by layer: {' '.join(mixes)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "results")
