"""MFU: the FLOP count against a count by hand, and MFU only against the right peak."""

from __future__ import annotations

import pytest
import torch

from reslab.config import ModelConfig
from reslab.model.gpt import GPT
from reslab.train.throughput import flops_per_token, matmul_params, mfu, peak_flops


def _meta_gpt(**kw) -> GPT:
    with torch.device("meta"):  # shapes only: a 124M model costs nothing to build
        return GPT(ModelConfig(**kw))


def test_gpt2_small_flops_by_hand():
    """GPT-2 small (12 layers, width 768, vocab 50257, context 1024), counted by hand:
    per layer the matmul weights are qkv 768x2304, attention out 768x768, MLP 768x3072 and 3072x768,
    i.e. 12 * 768^2 = 7,077,888; the tied head 50257 x 768 is a matmul too (the embedding lookup is
    not). N = 12 * 7,077,888 + 38,597,376 = 123,532,032. FLOPs per token = 6 N + 12 L T C
    = 741,192,192 + 113,246,208 = 854,438,400."""
    model = _meta_gpt(design="pre-ln", n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50257)
    assert matmul_params(model) == 123_532_032
    assert flops_per_token(model, 1024) == 854_438_400
    # at a shorter sequence only the attention term changes: 12 * 12 * 256 * 768
    assert flops_per_token(model, 256) == 741_192_192 + 28_311_552


def test_mfu_against_the_h200_bf16_peak():
    model = _meta_gpt(design="pre-ln", n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50257)
    # 400,000 tokens/s * 854,438,400 FLOP/token = 3.4178e14 FLOP/s; / 989e12 = 0.34558...
    assert mfu(400_000, model, 1024, "NVIDIA H200", "bfloat16") == pytest.approx(341.77536e12 / 989e12, rel=1e-12)
    assert mfu(400_000, model, 1024, "NVIDIA H200", "bfloat16", n_devices=2) == \
        pytest.approx(341.77536e12 / (2 * 989e12), rel=1e-12)


def test_simplified_block_counts_only_the_matrices_it_has():
    """SAS-P has no value and output projections (identity), so per layer: W_QK 64x128 and the MLP
    64x256 + 256x64 = 8,192 + 32,768; untied head 100 x 64 = 6,400."""
    model = _meta_gpt(design="sas-p", n_layer=2, n_head=4, n_embd=64, block_size=32, vocab_size=100,
                      tie_weights=False)
    linear_shapes = sorted(tuple(m.weight.shape) for m in model.modules() if isinstance(m, torch.nn.Linear))
    per_layer = 64 * 128 + 2 * 64 * 256
    assert matmul_params(model) == sum(a * b for a, b in linear_shapes)
    extra = matmul_params(model) - (2 * per_layer + 100 * 64)
    # SAS-P's first layer may keep a zero-initialised value matrix (identity+linear): 64 x 64 at most
    assert extra in (0, 64 * 64), linear_shapes
    assert flops_per_token(model, 32) == 6 * matmul_params(model) + 12 * 2 * 32 * 64


@pytest.mark.parametrize("device, dtype", [("NVIDIA H200", "float32"), ("cpu", "bfloat16"),
                                           ("cpu", "float32"), ("Some Future GPU", "bfloat16")])
def test_no_mfu_against_an_unknown_or_wrong_peak(device, dtype):
    model = _meta_gpt(design="pre-ln", n_layer=1, n_head=1, n_embd=8, block_size=8, vocab_size=16)
    assert mfu(1e6, model, 8, device, dtype) is None


def test_peak_table():
    assert peak_flops("NVIDIA H200", "bfloat16") == 989e12
    assert peak_flops("NVIDIA H100 80GB HBM3", "float16") == 989e12
    assert peak_flops("NVIDIA H100 PCIe", "bfloat16") == 756e12
    assert peak_flops("NVIDIA A100-SXM4-80GB", "bfloat16") == 312e12
