"""Run bf16 linear layers on vllm-bridge's AVX2 kernel where the CPU has no
bf16 arithmetic (config/isa_defaults.py)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.patching.spec import Patch

layers_on_bridge_kernel: list[str] = []
"""``"N x K"`` of each layer this process gave to the bridge kernel."""


def bf16_to_bridge_kernel(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def dispatch(layer: Any, remove_weight: bool) -> None:
        import torch

        from vllm_bridge import envs
        from vllm_bridge.ops import linear

        weight = layer.weight
        # The main process resolved VLLM_BRIDGE_LINEAR_KERNEL=auto (rule
        # linear_kernel); this process inherited the result.
        if (
            envs.LINEAR_KERNEL.get() != "bridge"
            or weight.is_meta
            or weight.ndim != 2
            or weight.dtype != torch.bfloat16
            or not linear.available()
        ):
            original(layer, remove_weight)
            return
        kept = weight.detach().contiguous()
        layer.cpu_linear = lambda x, _weight, bias: linear.bf16_linear(x, kept, bias)
        if remove_weight:
            layer.weight = torch.nn.Parameter(
                torch.empty(0, dtype=weight.dtype), requires_grad=False
            )
        layers_on_bridge_kernel.append(f"{kept.shape[0]} x {kept.shape[1]}")

    return dispatch


PATCH = Patch(
    name="isa-linear-kernel",
    target="vllm.model_executor.layers.utils:dispatch_cpu_unquantized_gemm",
    stage="worker",
    kind="wrap",
    new=bf16_to_bridge_kernel,
    why=(
        "On CPUs without bf16 arithmetic (AVX2; AVX-512 without BF16) vLLM "
        "gives bf16 linear layers to oneDNN, which refuses them on AVX2 "
        "('Failed to create oneDNN linear, fallback to torch linear') and "
        "runs them at about a third of its float32 rate on AVX-512. On AVX2, "
        "on the 0.5b preset's layers at 32 rows, PyTorch's fallback GEMM "
        "reaches 26 GFLOP/s where float32 runs at 87 (docs/benchmarks.md)."
    ),
    how=(
        "When VLLM_BRIDGE_LINEAR_KERNEL resolves to 'bridge' (by default on "
        "such a CPU; the main process decides, see rule linear_kernel), the "
        "cpu_linear of each layer with 2-D bf16 weights becomes "
        "vllm_bridge::bf16_linear (ops/csrc/linear_avx2.cpp: the bf16 "
        "weights read once per call, float32 FMA arithmetic, bf16 output), "
        "holding the weight as loaded; every other layer goes to vLLM's "
        "dispatch unchanged."
    ),
    upstream=(
        "none yet: vLLM has no bf16 GEMM for CPUs without bf16 arithmetic; "
        "to be proposed with the kernel"
    ),
    remove_when="vLLM's CPU build runs bf16 weights at float32 speed on AVX2",
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="ec79d3cea7cf1256",
)
