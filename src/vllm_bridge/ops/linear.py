"""``vllm_bridge::bf16_linear``: y = x @ w^T + b with bf16 weights and float32
arithmetic (csrc/bf16_linear_avx2.cpp), for CPUs without bf16 arithmetic."""

from __future__ import annotations

from functools import cache

import torch

from vllm_bridge.device.isa import detect
from vllm_bridge.ops import native

OP = "vllm_bridge::bf16_linear"


@cache
def available() -> bool:
    """Whether the kernel is loaded in this process (built if needed); never
    on CPUs without AVX2 and FMA, whose code it is."""
    if not {"avx2", "fma"} <= detect().flags or not native.load().loaded:
        return False

    # Shapes without running the kernel, for torch.compile's tracing.
    @torch.library.register_fake(OP)
    def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
        return x.new_empty((*x.shape[:-1], weight.shape[0]))

    return True


def bf16_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    return torch.ops.vllm_bridge.bf16_linear(x, weight, bias)
