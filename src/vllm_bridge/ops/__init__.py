"""vLLM's C++ CPU kernels on the paths where vLLM 0.32 leaves native PyTorch.

In eager mode the native RMSNorm and SiLU-and-mul run as several small aten
calls each; vLLM's CPU build ships one-call C++ kernels for both. Under
torch.compile (inductor) the native forms are fused by the compiler, so
there the native forms stay.
"""

from __future__ import annotations

from functools import cache

# vLLM's C++ CPU kernels process the last dimension in whole SIMD vectors and
# raise ("Expected d % VEC_ELEM_NUM == 0") otherwise; 8 elements on AVX-512
# here. A multiple of 32 covers every vector width vLLM builds for.
KERNEL_WIDTH_MULTIPLE = 32


@cache
def register_custom_ops() -> None:
    """Register the out-of-tree custom ops, once per process, before the
    model is built (CustomOp instantiation looks them up)."""
    from vllm_bridge.ops import activation

    activation.register()
