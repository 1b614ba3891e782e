"""The training engine: optimizer, schedules, checkpoints, determinism, the loop, run folders."""
