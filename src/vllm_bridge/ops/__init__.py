"""vLLM's C++ CPU kernels on the paths where vLLM 0.32 leaves native PyTorch.

In eager mode the native RMSNorm and SiLU-and-mul run as several small aten
calls each; vLLM's CPU build ships one-call C++ kernels for both. Under
torch.compile (inductor) the native forms are fused by the compiler, so
there the native forms stay.
"""

from __future__ import annotations

from functools import cache

from vllm_bridge.ops import activation


@cache
def register_custom_ops() -> None:
    """Register the out-of-tree custom ops, once per process, before the
    model is built (CustomOp instantiation looks them up)."""
    activation.register()
