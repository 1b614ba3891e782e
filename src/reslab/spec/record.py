"""A sweep's record in its store (specs/<name>.json), read back as typed values.

A sweep writes the record (sweep/runner.py record_spec): the spec as it ran, where it came from,
its planned runs and, where it tuned, each row's choice. A report, `sweep plan` and the checks read
it here, so each of them sees the same types and a damaged record is one line naming its key:

    {"spec": SweepSpec.to_dict(), "source": "<file or study>",
     "runs": [{"spec", "variant", "scale", "grid", "seed", "id", "label"}, ...],
     "tuned": [TuningChoice.to_dict(), ...]}          # only where [tune] ran
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ConfigError
from ..typed import from_dict
from .schema import SweepSpec
from .tune import TuningChoice


@dataclass(frozen=True)
class RecordedRun:
    """One planned run as the record lists it: where it sits in the spec and its identity."""
    variant: str
    scale: str
    grid: dict
    seed: int
    id: str
    label: str
    spec: str = ""


@dataclass(frozen=True)
class SpecRecord:
    spec: SweepSpec
    runs: list[RecordedRun]
    tuned: list[TuningChoice] = field(default_factory=list)
    source: str = ""

    def runs_at(self, scale: str) -> list[RecordedRun]:
        return [r for r in self.runs if r.scale == scale]

    def tuned_at(self, scale: str) -> list[TuningChoice]:
        return [c for c in self.tuned if c.scale == scale]


def parse_record(data) -> SpecRecord:
    """The record as typed values; ConfigError with the first damaged key as 'spec.grid: ...',
    'runs[3].seed: ...' or 'tuned[0].value: ...'."""
    if not isinstance(data, dict):
        raise ConfigError("expected an object")
    if not isinstance(data.get("spec"), dict):
        raise ConfigError("spec: expected an object")
    if not isinstance(data.get("runs"), list):
        raise ConfigError("runs: expected a list")
    spec = from_dict(SweepSpec, data["spec"], prefix="spec")
    runs = [from_dict(RecordedRun, r, prefix=f"runs[{i}]") for i, r in enumerate(data["runs"])]
    tuned = data.get("tuned", [])
    if not isinstance(tuned, list):
        raise ConfigError("tuned: expected a list")
    choices = [TuningChoice.from_record(c, where=f"tuned[{i}]") for i, c in enumerate(tuned)]
    source = data.get("source", "")
    return SpecRecord(spec=spec, runs=runs, tuned=choices, source=source if isinstance(source, str) else "")
