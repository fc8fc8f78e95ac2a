"""vllm-bridge's routes to vLLM's C++ CPU kernels agree with vLLM's native
forms, and fall back where the kernels cannot run."""

from __future__ import annotations

import pytest
import torch
from vllm import ir
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.platforms import current_platform

from vllm_bridge.ops import ir_kernels
from vllm_bridge.ops.activation import BridgeSiluAndMul
from vllm_bridge.ops.vector_width import KERNEL_WIDTH_MULTIPLE

current_platform.import_kernels()

DTYPES = [torch.float32, torch.bfloat16]
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


@pytest.fixture(scope="module")
def silu_and_mul() -> BridgeSiluAndMul:
    with set_current_vllm_config(VllmConfig()):
        return BridgeSiluAndMul()


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul_kernel_matches_native(silu_and_mul, dtype):
    x = torch.randn(5, 2 * 4 * KERNEL_WIDTH_MULTIPLE, dtype=dtype)
    torch.testing.assert_close(
        silu_and_mul.forward_cpu(x),
        silu_and_mul.forward_native(x),
        atol=TOLERANCE[dtype],
        rtol=TOLERANCE[dtype],
    )


def test_silu_and_mul_falls_back_on_widths_the_kernel_rejects(silu_and_mul):
    x = torch.randn(3, 2 * 86)  # 86 % 8 != 0: the C++ kernel would raise
    torch.testing.assert_close(
        silu_and_mul.forward_cpu(x), silu_and_mul.forward_native(x)
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_kernel_matches_native(dtype):
    x = torch.randn(7, 2 * KERNEL_WIDTH_MULTIPLE, dtype=dtype)
    weight = torch.randn(x.shape[-1], dtype=dtype)
    native = ir.ops.rms_norm.impls["native"].impl_fn(x, weight, 1e-6)
    torch.testing.assert_close(
        ir_kernels.rms_norm.impl_fn(x, weight, 1e-6),
        native,
        atol=TOLERANCE[dtype],
        rtol=TOLERANCE[dtype],
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_add_rms_norm_kernel_matches_native(dtype):
    x = torch.randn(7, 2 * KERNEL_WIDTH_MULTIPLE, dtype=dtype)
    residual = torch.randn_like(x)
    weight = torch.randn(x.shape[-1], dtype=dtype)
    expected = ir.ops.fused_add_rms_norm.impls["native"].impl_fn(
        x.clone(), residual.clone(), weight, 1e-6
    )
    actual = ir_kernels.fused_add_rms_norm.impl_fn(
        x.clone(), residual.clone(), weight, 1e-6
    )
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(
            got, want, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype]
        )


def test_rms_norm_provider_declines_what_the_kernel_cannot_run():
    weight = torch.ones(86)
    assert not ir_kernels._rms_supported(torch.randn(3, 86), weight, 1e-6)
    assert not ir_kernels._rms_supported(torch.randn(3, 64), None, 1e-6)
    assert not ir_kernels._rms_supported(torch.randn(3, 64), torch.ones(64), 1e-6, 32)
    assert ir_kernels._rms_supported(torch.randn(3, 64), torch.ones(64), 1e-6)
