"""The quantized-kernel rule: which int8 GEMM ``--quantization bridge_int8``
runs on, and the refusal of 4-bit checkpoints where the CPU's kernel library
has no 4-bit GEMM (quantization/kernel_table.py holds the table)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from vllm_bridge import envs
from vllm_bridge.config.audit import Change
from vllm_bridge.errors import BridgeConfigError

if TYPE_CHECKING:
    from vllm.config import VllmConfig

    from vllm_bridge.config.schema import BridgeConfig


def _checkpoint_quant_config(hf_config: Any) -> dict[str, Any] | None:
    for name in ("quantization_config", "compression_config"):
        value = getattr(hf_config, name, None)
        if isinstance(value, dict):
            return value
    return None


def quantization_kernels(vllm_config: VllmConfig, bridge: BridgeConfig) -> list[Change]:
    from vllm_bridge.device.isa import TRAITS, detect
    from vllm_bridge.quantization.int8_online import METHOD_NAME
    from vllm_bridge.quantization.kernel_table import (
        INT8_KERNEL_OPS,
        KERNELS,
        checkpoint_quant_method,
        choose_int8_kernel,
        needs_int4_weight_gemm,
    )

    model = vllm_config.model_config
    if model is None:
        return []
    isa_class = detect().effective
    traits = TRAITS[isa_class]
    checkpoint_method = checkpoint_quant_method(
        _checkpoint_quant_config(model.hf_config)
    )
    if (
        needs_int4_weight_gemm(model.quantization)
        or needs_int4_weight_gemm(checkpoint_method)
    ) and not KERNELS[isa_class].int4_weight_gemm:
        name = model.quantization or checkpoint_method
        raise BridgeConfigError(
            f"The model is a 4-bit checkpoint ({name}), but this CPU is class "
            f"{isa_class} ({traits.description}): vLLM's kernel library for it "
            f"({traits.vllm_kernel_library}) has no 4-bit weight GEMM "
            "(cpu_gemm_wna16), so the model would fail at its first forward "
            "pass. Serve the unquantized checkpoint with --quantization "
            f"{METHOD_NAME} (int8 weights, quantized while loading), or use a "
            "CPU with AVX-512."
        )
    if model.quantization != METHOD_NAME:
        return []
    from vllm_bridge.ops import linear

    request = envs.INT8_KERNEL.get()
    choice = choose_int8_kernel(isa_class, request, model.dtype, linear.available())
    if choice.kernel is None:
        raise BridgeConfigError(
            f"--quantization {METHOD_NAME} cannot run here: {choice.reason}. "
            f"Unset {envs.INT8_KERNEL.name}, or serve without --quantization."
        )
    if request == choice.kernel:
        return []  # chosen by the user, or by this rule in the main process
    os.environ[envs.INT8_KERNEL.name] = choice.kernel
    return [
        Change(
            f"env.{envs.INT8_KERNEL.name}",
            request,
            choice.kernel,
            f"{choice.reason}: {INT8_KERNEL_OPS[choice.kernel]}",
            "quantization_kernels",
        )
    ]
