"""Defaults whose best value depends on the CPU's instruction-set class: the
compute dtype of a checkpoint and the kernel of bf16 linear layers.

Pure functions of their inputs, so that the table can be read and tested
without a machine of each class (tests/unit/test_isa_defaults.py). The
measurements behind each entry are in docs/benchmarks.md ("Every CPU").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from vllm_bridge.device.isa import IsaClass

LinearKernel = Literal["vllm", "bridge"]
BRIDGE_LINEAR_OP = "vllm_bridge::bf16_linear"

# x86 classes without bf16 arithmetic. On both, vllm-bridge's AVX2 kernel
# runs bf16 weights with float32 arithmetic: oneDNN refuses bf16 on AVX2
# and, on AVX-512 without BF16, runs it at about a third of its float32 rate
# (docs/benchmarks.md, "Every CPU").
NO_BF16_ARITHMETIC: frozenset[IsaClass] = frozenset({"avx2", "avx512"})


@dataclass(frozen=True)
class DtypeDecision:
    dtype: torch.dtype
    reason: str


def linear_kernel(
    isa_class: IsaClass, weight_dtype: torch.dtype, bridge_kernels: bool
) -> LinearKernel:
    """Which kernel runs the dense linear layers of a model whose weights
    are ``weight_dtype``, by default (VLLM_BRIDGE_LINEAR_KERNEL=auto)."""
    if (
        weight_dtype == torch.bfloat16
        and isa_class in NO_BF16_ARITHMETIC
        and bridge_kernels
    ):
        return "bridge"
    return "vllm"


def auto_dtype(
    isa_class: IsaClass,
    checkpoint_dtype: torch.dtype,
    vllm_choice: torch.dtype,
    bridge_kernels: bool,
) -> DtypeDecision | None:
    """The dtype to run a checkpoint in when the user gave no ``--dtype``;
    None keeps vLLM's choice (``vllm_choice``).

    vLLM's CPU platform declares bf16 and fp16 native on every x86 CPU, so
    it picks bf16 for bf16 and fp32 checkpoints and fp16 for fp16 ones.
    Without bf16 arithmetic oneDNN refuses fp16 GEMMs (and bf16 ones on
    AVX2): every layer then falls back to PyTorch's generic GEMM, several
    times slower than float32."""
    if isa_class not in NO_BF16_ARITHMETIC or vllm_choice == torch.float32:
        return None
    if linear_kernel(isa_class, vllm_choice, bridge_kernels) != "vllm":
        return None  # bf16 storage, float32 arithmetic in the linear layers
    if vllm_choice == torch.bfloat16:
        why = (
            "vllm-bridge's kernel for bf16 weights is not available (see the "
            "log or `vllm-bridge doctor`) and oneDNN has no fast bf16 GEMM here"
        )
    else:
        why = (
            f"no {_name(vllm_choice)} arithmetic and no oneDNN "
            f"{_name(vllm_choice)} GEMM; bf16 storage would round the "
            f"checkpoint's {_name(checkpoint_dtype)} weights"
        )
    return DtypeDecision(
        torch.float32,
        f"{isa_class} CPU: {why}; float32 runs on oneDNN "
        "(set --dtype to choose otherwise)",
    )


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
