"""vllm-bridge's AVX2 linear kernels (csrc/linear_avx2.cpp), float32
arithmetic on narrow weights, for CPUs without bf16 arithmetic:

- ``vllm_bridge::bf16_linear``: y = x @ w^T + b with bf16 weights;
- ``vllm_bridge::int8_linear``: y = (x @ q^T) * scale + b with int8 weights
  and a float32 scale per output row (``--quantization bridge_int8``).
"""

from __future__ import annotations

from functools import cache

import torch

from vllm_bridge.ops import native

OP = "vllm_bridge::bf16_linear"
INT8_OP = "vllm_bridge::int8_linear"


@cache
def available() -> bool:
    """Whether the kernels are loaded in this process (built if needed);
    never on CPUs without AVX2 and FMA, whose code they are (native.KERNELS
    needs both)."""
    if not native.load().loaded:
        return False

    # Shapes without running the kernels, for torch.compile's tracing.
    @torch.library.register_fake(OP)
    def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
        return x.new_empty((*x.shape[:-1], weight.shape[0]))

    @torch.library.register_fake(INT8_OP)
    def _int8(
        x: torch.Tensor,
        weight: torch.Tensor,
        scale: torch.Tensor,
        bias: torch.Tensor | None,
    ):
        return x.new_empty((*x.shape[:-1], weight.shape[0]))

    return True


def bf16_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    return torch.ops.vllm_bridge.bf16_linear(x, weight, bias)


def int8_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    return torch.ops.vllm_bridge.int8_linear(x, weight, scale, bias)
