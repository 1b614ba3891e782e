"""Init-time probes (no training): per-layer gradient / activation norms, adjacent-layer change,
rank collapse and the last layer's W2 gradient, over designs x depths x seeds; see variants.md 7.

    from reslab.probe import run_probe, depth_slopes, plot_all
    rows = run_probe(["pre-ln", "post-ln"], [6, 12, 24, 48], seeds=3, mode="xiong", out_dir="po")
    depth_slopes(rows, "last_w2_grad_norm")      # {'pre-ln': about -0.5, 'post-ln': about 0}
"""

from .._lazy import lazy_getattr

# name -> submodule; imported on first use (PEP 562), so that `reslab probe --help` imports no torch
_WHERE = {"probe_model": "measure", "random_batch": "measure", "stream_stats": "measure",
          "plot_all": "plots", "plot_vs_depth": "plots", "plot_vs_layer": "plots",
          "depth_slopes": "run", "fit_slope": "run", "format_table": "run", "layer_means": "run",
          "layer_slopes": "run", "model_means": "run", "read_csv": "run", "run_probe": "run",
          "slopes_table": "run", "write_csv": "run",
          "MODES": "settings", "RANK_VARIANTS": "settings", "build": "settings",
          "linear_ln_sim": "settings", "zero_query_key": "settings"}


__getattr__ = lazy_getattr(__name__, _WHERE)


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
