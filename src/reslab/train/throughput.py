"""Tokens per second and model FLOPs utilisation (MFU).

FLOPs per trained token = 6 * N + 12 * L * T * C (Kaplan et al.; PaLM appendix B), where N counts
the weights used in matrix multiplies (every Linear in the blocks, plus the head; embedding lookups
are not multiplies), T is the actual sequence length and C the width. MFU is reported only against
the peak of the precision actually used: bf16/fp16 tensor-core peaks below; float32 runs and CPUs
get tokens/s only, never an MFU against the wrong peak.
"""

from __future__ import annotations

from torch import nn

# Dense (no sparsity) bf16/fp16 tensor-core peaks, FLOP/s, matched against the CUDA device name
# in this order (the PCIe H100 has a lower clock and fewer SMs than the SXM one).
PEAK_BF16 = (("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12), ("A100", 312e12))


def matmul_params(model: nn.Module) -> int:
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))


def flops_per_token(model: nn.Module, seq_len: int) -> float:
    cfg = model.config
    return 6.0 * matmul_params(model) + 12.0 * cfg.n_layer * seq_len * cfg.n_embd


def peak_flops(device_name: str, dtype: str) -> float | None:
    if dtype not in ("bfloat16", "float16"):
        return None
    for key, peak in PEAK_BF16:
        if key in device_name:
            return peak
    return None


def mfu(tokens_per_s: float, model: nn.Module, seq_len: int, device_name: str, dtype: str,
        n_devices: int = 1) -> float | None:
    peak = peak_flops(device_name, dtype)
    if peak is None:
        return None
    return tokens_per_s * flops_per_token(model, seq_len) / (peak * n_devices)
