"""SiLU-and-mul through vLLM's C++ CPU kernel.

vLLM's ``SiluAndMul.forward_cpu`` returns the native form on x86; this
out-of-tree replacement calls ``torch.ops._C.silu_and_mul`` there instead.
``CustomOp.register_oot`` names the op after the class, so custom_ops
switches for it are spelled ``+SiluAndMul`` / ``-SiluAndMul``.
"""

from __future__ import annotations

import torch
from vllm.model_executor.custom_op import CustomOp, op_registry_oot
from vllm.model_executor.layers.activation import SiluAndMul

from vllm_bridge.ops.vector_width import KERNEL_WIDTH_MULTIPLE

OP_NAME = "SiluAndMul"


class BridgeSiluAndMul(SiluAndMul):
    def forward_cpu(self, x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        if not x.is_contiguous() or half % KERNEL_WIDTH_MULTIPLE:
            return self.forward_native(x)
        out = torch.empty((*x.shape[:-1], half), dtype=x.dtype, device=x.device)
        torch.ops._C.silu_and_mul(out, x)
        return out


def register() -> None:
    """Register the out-of-tree op, once per process, before the model is
    built (CustomOp instantiation looks it up)."""
    if op_registry_oot.get(OP_NAME) is not BridgeSiluAndMul:
        CustomOp.register_oot(BridgeSiluAndMul, name=OP_NAME)
