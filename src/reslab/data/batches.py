"""Batches as pure functions of (stream seed, position), so nothing but a step count is state.

Training batch (step, micro) depends only on (data seed, step, micro): resuming at step t needs no
replay, and changing how often we evaluate cannot change which batches we train on. Evaluation
batches come from their own seed (99991 by default, the same for every configuration):
  fixed   one set of batches drawn once and reused at every evaluation (ResidualGPT's choice);
  random  fresh batches at each evaluation, drawn from (eval seed, evaluation index) (nanoGPT's).
"""

from __future__ import annotations

import numpy as np
import torch


def _rng(*keys: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(k) for k in keys]))


def sample_batch(tokens: np.ndarray, batch_size: int, block_size: int, rng: np.random.Generator):
    """(x, y) int64 tensors of shape (batch, block): y is x shifted by one token."""
    if len(tokens) <= block_size:
        raise ValueError(f"a split of {len(tokens)} tokens is too short for block_size {block_size}")
    starts = rng.integers(0, len(tokens) - block_size, size=batch_size)
    idx = starts[:, None] + np.arange(block_size + 1)[None, :]
    window = torch.from_numpy(np.asarray(tokens[idx]).astype(np.int64))
    return window[:, :-1].contiguous(), window[:, 1:].contiguous()


class TrainBatches:
    def __init__(self, tokens: np.ndarray, batch_size: int, block_size: int, seed: int):
        self.tokens, self.batch_size, self.block_size, self.seed = tokens, batch_size, block_size, seed

    def get(self, step: int, micro: int):
        """The micro-batch `micro` (a global index across data-parallel ranks) of update `step`."""
        return sample_batch(self.tokens, self.batch_size, self.block_size, _rng(self.seed, step, micro))


class EvalBatches:
    def __init__(self, tokens: np.ndarray, n_batches: int, batch_size: int, block_size: int,
                 seed: int = 99991, mode: str = "fixed"):
        if mode not in ("fixed", "random"):
            raise ValueError(f"eval mode must be 'fixed' or 'random', got {mode!r}")
        self.tokens, self.n, self.batch_size, self.block_size = tokens, n_batches, batch_size, block_size
        self.seed, self.mode = seed, mode
        self._fixed = self._draw(0) if mode == "fixed" else None

    def _draw(self, index: int) -> list:
        rng = _rng(self.seed, index)
        return [sample_batch(self.tokens, self.batch_size, self.block_size, rng) for _ in range(self.n)]

    def batches(self, eval_index: int) -> list:
        """The batches of the `eval_index`-th evaluation (the same every time in fixed mode)."""
        return self._fixed if self.mode == "fixed" else self._draw(eval_index + 1)
