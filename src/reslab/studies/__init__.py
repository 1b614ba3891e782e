"""Built-in studies: one sweep spec per source study (this folder's *.toml), each with a `smoke` scale
(the pipeline in seconds, for tests, never a result), a `cpu` scale calibrated to give answers on a
2-core CPU, and `paper` scales with the published hyperparameters."""

from __future__ import annotations

from pathlib import Path

from ..errors import ReslabError
from ..spec.load import load_spec
from ..spec.schema import SweepSpec

STUDY_DIR = Path(__file__).resolve().parent
ORDER = ("partial-residual", "gain-confound", "simplified-blocks", "ln-placement", "resi-dual", "prores",
         "depth-scaling", "lr-sensitivity", "depth-mixing", "speedrun-skips", "norm-by-init", "norm-free")
# the source studies' order (000 ... 004), then the cross-cutting ones, then the mixing across depth, the speedruns'
# skips, the designs that replace normalisation by initialisation and those that replace it otherwise


def study_names() -> list[str]:
    found = {p.stem for p in STUDY_DIR.glob("*.toml")}
    return [n for n in ORDER if n in found] + sorted(found - set(ORDER))


def study_path(name: str) -> Path:
    path = STUDY_DIR / f"{name}.toml"
    if not path.is_file():
        raise ReslabError(f"unknown study {name!r}; choose one of {', '.join(study_names())} (see `reslab study list`)")
    return path


def load_study(name: str) -> SweepSpec:
    return load_spec(study_path(name))
