import pytest
import torch

from reslab.config import ModelConfig


@pytest.fixture(autouse=True)
def _float32_default():
    torch.set_default_dtype(torch.float32)
    yield


def small(design: str = "pre-ln", **kw) -> ModelConfig:
    base = dict(design=design, vocab_size=65, n_layer=4, n_head=4, n_embd=32, block_size=16, dropout=0.0)
    base.update(kw)
    return ModelConfig(**base)


def tokens(B: int = 2, T: int = 16, vocab: int = 65, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(seed))
