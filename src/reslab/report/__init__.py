"""Reports of sweeps: statistics, plots, Markdown and HTML."""
