"""Training diagnostics: per-layer gradient / parameter / update norms, hidden-state norms and
growth, adjacent-layer change, rank collapse, attention entropy, gains, and the loss-spike score."""

from .collector import (
    FILE_NAME,
    Diagnostics,
    DiagnosticsFile,
    diagnostic_batch,
    read_rows,
)
from .stats import spike_score

__all__ = ["FILE_NAME", "Diagnostics", "DiagnosticsFile", "diagnostic_batch", "read_rows", "spike_score"]
