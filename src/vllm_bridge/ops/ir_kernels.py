"""vLLM IR implementations of RMSNorm backed by vLLM's C++ CPU kernels.

vLLM registers its C++ RMSNorm as the IR provider ``vllm_c`` but marks it
supported on GPUs only, so on the CPU the priority falls back to native.
Imported by ``BridgePlatform.import_ir_kernels``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor
from vllm import ir

from vllm_bridge.ops.vector_width import KERNEL_WIDTH_MULTIPLE

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.config.kernel import IrOpPriorityConfig

PROVIDER = "bridge_cpu"


def _kernel_handles(
    x: Tensor, weight: Tensor | None, variance_size: int | None = None
) -> bool:
    return (
        variance_size is None
        and weight is not None
        and weight.dtype == x.dtype
        and x.is_contiguous()
        and x.shape[-1] % KERNEL_WIDTH_MULTIPLE == 0
    )


def _rms_supported(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> bool:
    return _kernel_handles(x, weight, variance_size)


def _add_rms_supported(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> bool:
    return _kernel_handles(x, weight, variance_size) and x_residual.is_contiguous()


@ir.ops.rms_norm.register_impl(PROVIDER, supports_args=_rms_supported)
def rms_norm(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    output = torch.empty_like(x)
    torch.ops._C.rms_norm(output, x, weight, epsilon)
    return output


@ir.ops.fused_add_rms_norm.register_impl(
    PROVIDER, supports_args=_add_rms_supported, inplace=True
)
def fused_add_rms_norm(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    torch.ops._C.fused_add_rms_norm(x, x_residual, weight, epsilon)
    return x, x_residual


def default_priority(vllm_config: VllmConfig) -> IrOpPriorityConfig:
    """C++ kernels first in eager mode; native under inductor, which fuses
    the native form into the surrounding generated code."""
    from vllm.config.compilation import CompilationMode
    from vllm.config.kernel import IrOpPriorityConfig

    compilation = vllm_config.compilation_config
    compiled = (
        compilation.backend == "inductor" and compilation.mode != CompilationMode.NONE
    )
    if compiled:
        return IrOpPriorityConfig.with_default(["native"])
    return IrOpPriorityConfig.with_default(
        ["native"],
        rms_norm=[PROVIDER, "native"],
        fused_add_rms_norm=[PROVIDER, "native"],
    )
