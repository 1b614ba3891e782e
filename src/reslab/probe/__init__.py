"""Init-time probes (no training): per-layer gradient / activation norms, adjacent-layer change,
rank collapse and the last layer's W2 gradient, over designs x depths x seeds; see variants.md 7.

    from reslab.probe import run_probe, depth_slopes, plot_all
    rows = run_probe(["pre-ln", "post-ln"], [6, 12, 24, 48], seeds=3, mode="xiong", out_dir="po")
    depth_slopes(rows, "last_w2_grad_norm")      # {'pre-ln': about -0.5, 'post-ln': about 0}
"""

from .measure import probe_model, random_batch, stream_stats
from .plots import plot_all, plot_vs_depth, plot_vs_layer
from .run import (
                  depth_slopes,
                  fit_slope,
                  format_table,
                  layer_means,
                  layer_slopes,
                  model_means,
                  read_csv,
                  run_probe,
                  slopes_table,
                  write_csv,
)
from .settings import MODES, RANK_VARIANTS, build, linear_ln_sim, zero_query_key

__all__ = [
                  "MODES",
                  "RANK_VARIANTS",
                  "build",
                  "depth_slopes",
                  "fit_slope",
                  "format_table",
                  "layer_means",
                  "layer_slopes",
                  "linear_ln_sim",
                  "model_means",
                  "plot_all",
                  "plot_vs_depth",
                  "plot_vs_layer",
                  "probe_model",
                  "random_batch",
                  "read_csv",
                  "run_probe",
                  "slopes_table",
                  "stream_stats",
                  "write_csv",
                  "zero_query_key",
]
