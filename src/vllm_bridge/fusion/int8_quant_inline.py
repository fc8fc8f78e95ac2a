"""The ``int8-quant-inline`` pass (catalogue.py): vLLM's dynamic per-token
int8 quantization op rewritten as aten arithmetic that Inductor fuses into
the kernel before it."""

from __future__ import annotations

from functools import cache

import torch
from torch._higher_order_ops.auto_functionalize import auto_functionalized
from torch._inductor.pattern_matcher import (
    PatternMatcherPass,
    fwd_only,
    register_replacement,
)

INT8_MAX = 127.0


def _quantize_with_op(
    result: torch.Tensor, x: torch.Tensor, scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    quantized = auto_functionalized(
        torch.ops._C.dynamic_scaled_int8_quant.default,
        out=result,
        input=x,
        scale=scale,
        azp=None,
    )
    return quantized[1], quantized[2]


def quantize_per_token(
    result: torch.Tensor, x: torch.Tensor, scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """What the op computes (checked bit for bit in
    tests/unit/test_fusion_passes.py): a float32 scale per row, max|x| / 127,
    and x times its reciprocal rounded half to even; a row of zeros gets
    scale 0 and zeros (vLLM's AVX2 kernel writes -128 there, which its
    scale 0 cancels)."""
    as_float = x.to(torch.float32)
    row_scale = as_float.abs().amax(dim=-1, keepdim=True) / INT8_MAX
    inverse = torch.where(row_scale == 0, 0.0, 1.0 / row_scale)
    quantized = torch.round(as_float * inverse).clamp(-128, 127).to(torch.int8)
    return quantized, row_scale


@cache
def _patterns() -> PatternMatcherPass:
    patterns = PatternMatcherPass(pass_name="vllm_bridge_int8_quant_inline")
    # The pattern holds no dtype: one registration matches bf16, fp16 and
    # fp32 activations, and the replacement is traced again for each match.
    example = [
        torch.empty(4, 16, dtype=torch.int8),
        torch.empty(4, 16, dtype=torch.bfloat16),
        torch.empty(4, 1, dtype=torch.float32),
    ]
    register_replacement(
        _quantize_with_op, quantize_per_token, example, fwd_only, patterns
    )
    return patterns


def rewrite(graph: torch.fx.Graph) -> int:
    """Rewrite every symmetric dynamic quantization in ``graph``; how many."""
    if not hasattr(torch.ops._C, "dynamic_scaled_int8_quant"):
        return 0
    return _patterns().apply(graph)
