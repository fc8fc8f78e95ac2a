"""Which quantized GEMM runs on which CPU: one table per ISA class.

vLLM 0.32's CPU build ships one kernel library per x86 class
(device/isa.py). What each holds for quantized linear layers, read off the
libraries' operator registrations (``strings vllm/_C*.abi3.so``):

- ``vllm._C`` (AVX-512 with BF16, AMX): oneDNN's int8 GEMM
  (``onednn_scaled_mm``), the AMX int8 GEMM with the per-token activation
  quantization fused in (``int8_scaled_mm_with_quant``), the int4-weight
  GEMM of AWQ/GPTQ checkpoints (``cpu_gemm_wna16``);
- ``vllm._C_AVX512``: oneDNN's int8 GEMM and ``cpu_gemm_wna16``;
- ``vllm._C_AVX2``: oneDNN's int8 GEMM only. An AWQ or GPTQ checkpoint
  loads there and fails at the first forward pass
  (vllm-project/vllm#55613, #22213).

oneDNN's int8 GEMM on AVX2 (no VNNI: signed int8 activations have no fast
path) measured 2.2 ms for a 4864 x 896 layer at one token, about 2 GB/s of
weights, twenty times its AVX-512 time; vllm-bridge's AVX2 kernel
(ops/csrc/linear_avx2.cpp, int8 weights, float32 arithmetic) runs it in
0.1 ms. docs/quantization.md has the measurements.

Pure functions of their inputs, so that the table can be read and tested
without a machine of each class (tests/unit/test_quantization.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch

from vllm_bridge.device.isa import TRAITS, IsaClass

Int8Kernel = Literal["amx", "onednn", "bridge"]

INT8_KERNEL_OPS: dict[Int8Kernel, str] = {
    "amx": "vLLM's AMX int8 GEMM (int8_scaled_mm_with_quant, per-token "
    "quantization fused in)",
    "onednn": "oneDNN's int8 GEMM (onednn_scaled_mm, per-token quantization "
    "by onednn_scaled_int8_quant)",
    "bridge": "vllm-bridge's AVX2 kernel (vllm_bridge::int8_linear: int8 "
    "weights, float32 arithmetic, activations unquantized)",
}

# The AMX kernel's tiles: K in blocks of 32 int8 values, N in tiles of 16
# (vLLM's check_cpu_sgl_kernel); its input must be bf16.
AMX_K_MULTIPLE = 32
AMX_N_MULTIPLE = 16

INT4_WEIGHT_METHODS = frozenset(
    {"awq", "auto_awq", "awq_marlin", "gptq", "auto_gptq", "gptq_marlin", "moe_wna16"}
)
"""vLLM quantization methods whose CPU path is the int4-weight GEMM."""


@dataclass(frozen=True)
class ClassKernels:
    int8: tuple[Int8Kernel, ...]
    """Int8 GEMMs of the class, fastest first (measured: docs/quantization.md);
    ``bridge`` needs vllm-bridge's kernels built."""
    int4_weight_gemm: bool
    """``cpu_gemm_wna16`` is in the class's kernel library."""


KERNELS: dict[IsaClass, ClassKernels] = {
    "amx": ClassKernels(("amx", "onednn"), int4_weight_gemm=True),
    "avx512_bf16": ClassKernels(("onednn",), int4_weight_gemm=True),
    "avx512": ClassKernels(("onednn",), int4_weight_gemm=True),
    "avx2": ClassKernels(("bridge", "onednn"), int4_weight_gemm=False),
    # vLLM's CPU build needs AVX2; on other architectures the oneDNN int8
    # path is unmeasured here, so the method is not offered.
    "x86_64_baseline": ClassKernels((), int4_weight_gemm=False),
    "other": ClassKernels((), int4_weight_gemm=False),
}


@dataclass(frozen=True)
class Int8Choice:
    kernel: Int8Kernel | None
    """None: no int8 GEMM for this request on this CPU."""
    reason: str


def choose_int8_kernel(
    isa_class: IsaClass,
    request: str,
    activation_dtype: torch.dtype,
    bridge_kernels: bool,
) -> Int8Choice:
    """The int8 GEMM of ``--quantization bridge_int8`` for a CPU class, a
    VLLM_BRIDGE_INT8_KERNEL value, the model's activation dtype and whether
    vllm-bridge's kernels are loaded."""
    available = KERNELS[isa_class].int8
    dtype = str(activation_dtype).removeprefix("torch.")
    if not available:
        return Int8Choice(
            None,
            f"no int8 GEMM of vLLM's CPU build is known to run on class "
            f"{isa_class} ({TRAITS[isa_class].description})",
        )
    if request == "onednn":
        return Int8Choice("onednn", "VLLM_BRIDGE_INT8_KERNEL=onednn")
    if request == "bridge":
        if bridge_kernels:
            return Int8Choice("bridge", "VLLM_BRIDGE_INT8_KERNEL=bridge")
        return Int8Choice(
            None,
            "VLLM_BRIDGE_INT8_KERNEL=bridge, but vllm-bridge's kernels are not "
            "loaded (see the log or `vllm-bridge doctor`)",
        )
    if request == "amx":
        if "amx" in available and activation_dtype == torch.bfloat16:
            return Int8Choice("amx", "VLLM_BRIDGE_INT8_KERNEL=amx")
        return Int8Choice(
            None,
            "VLLM_BRIDGE_INT8_KERNEL=amx needs AMX and bf16 activations; this "
            f"CPU is class {isa_class} and the model runs in {dtype}",
        )
    if "amx" in available and activation_dtype == torch.bfloat16:
        return Int8Choice(
            "amx",
            f"{isa_class} CPU with bf16 activations: AMX int8 tiles, and the "
            "per-token quantization runs inside the GEMM",
        )
    if "bridge" in available:
        if bridge_kernels:
            return Int8Choice(
                "bridge",
                f"{isa_class} CPU: oneDNN's int8 GEMM has no fast path without "
                "VNNI (a tenth of the bf16 speed); vllm-bridge's kernel reads "
                "the int8 weights and computes in float32",
            )
        return Int8Choice(
            "onednn",
            f"{isa_class} CPU, and vllm-bridge's kernels are not loaded: "
            "oneDNN's int8 GEMM, which runs at a tenth of the bf16 speed here "
            "(build the kernels: `python -m vllm_bridge.ops.native`)",
        )
    return Int8Choice(
        "onednn",
        f"{isa_class} CPU with {dtype} activations: oneDNN's int8 GEMM is the "
        "fastest int8 kernel here",
    )


def layer_int8_kernel(chosen: Int8Kernel, n: int, k: int) -> Int8Kernel:
    """The kernel of one ``n x k`` layer: a shape the AMX tiles cannot
    take stays on oneDNN."""
    if chosen == "amx" and (k % AMX_K_MULTIPLE or n % AMX_N_MULTIPLE):
        return "onednn"
    return chosen


def checkpoint_quant_method(hf_quant_config: Mapping[str, Any] | None) -> str | None:
    """The quantization family of a checkpoint's ``quantization_config``:
    the vLLM method name, or ``"int4"`` for a compressed-tensors checkpoint
    with 4-bit weights (run by the same int4-weight GEMM)."""
    if not hf_quant_config:
        return None
    method = str(hf_quant_config.get("quant_method", "")).lower()
    if method == "compressed-tensors":
        groups = hf_quant_config.get("config_groups") or {}
        for group in groups.values():
            weights = (group or {}).get("weights") or {}
            if weights.get("num_bits") == 4:
                return "int4"
    return method or None


def needs_int4_weight_gemm(method: str | None) -> bool:
    return method == "int4" or method in INT4_WEIGHT_METHODS
