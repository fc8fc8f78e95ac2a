"""The per-ISA decision table (config/isa_defaults.py): a pure function of
the ISA class, the checkpoint dtype, vLLM's own choice and whether
vllm-bridge's kernel is available. Every class is checked on any machine."""

from __future__ import annotations

import pytest
import torch

from vllm_bridge.config.isa_defaults import auto_dtype, linear_kernel

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
# vLLM's CPU choice for 'auto': bf16 for bf16 and fp32 checkpoints, fp16 for fp16.
VLLM_AUTO = {BF16: BF16, FP32: BF16, FP16: FP16}


@pytest.mark.parametrize(
    ("isa_class", "checkpoint", "kernel", "expected"),
    [
        # bf16 arithmetic (AMX, AVX-512-BF16): vLLM's choice stands
        ("amx", BF16, True, None),
        ("amx", FP32, True, None),
        ("amx", FP16, True, None),
        ("avx512_bf16", FP16, False, None),
        # no bf16 arithmetic, kernel available: bf16 storage stays
        ("avx2", BF16, True, None),
        ("avx2", FP32, True, None),
        ("avx512", BF16, True, None),
        # ... but fp16 has neither arithmetic nor a oneDNN GEMM: float32
        ("avx2", FP16, True, FP32),
        ("avx512", FP16, True, FP32),
        # kernel unavailable: float32 for everything
        ("avx2", BF16, False, FP32),
        ("avx2", FP32, False, FP32),
        ("avx512", BF16, False, FP32),
        # not x86, or below vLLM's minimum: vLLM's choice stands
        ("other", BF16, False, None),
        ("x86_64_baseline", BF16, False, None),
    ],
)
def test_auto_dtype_table(isa_class, checkpoint, kernel, expected):
    decision = auto_dtype(isa_class, checkpoint, VLLM_AUTO[checkpoint], kernel)
    assert (decision and decision.dtype) == expected
    if decision is not None:
        assert decision.reason.startswith(f"{isa_class} CPU: ")
        assert "--dtype" in decision.reason


def test_auto_dtype_reason_names_what_is_missing():
    fp16 = auto_dtype("avx2", FP16, FP16, True)
    assert fp16 is not None and "no float16 arithmetic" in fp16.reason
    no_kernel = auto_dtype("avx2", BF16, BF16, False)
    assert no_kernel is not None and "kernel for bf16 weights is not" in (
        no_kernel.reason
    )


def test_user_chosen_float32_is_never_changed():
    for isa_class in ("avx2", "avx512", "amx", "other"):
        assert auto_dtype(isa_class, BF16, FP32, False) is None


@pytest.mark.parametrize(
    ("isa_class", "dtype", "kernel", "expected"),
    [
        ("avx2", BF16, True, "bridge"),
        ("avx512", BF16, True, "bridge"),
        ("avx2", BF16, False, "vllm"),
        ("avx2", FP32, True, "vllm"),
        ("avx512_bf16", BF16, True, "vllm"),
        ("amx", BF16, True, "vllm"),
        ("other", BF16, True, "vllm"),
    ],
)
def test_linear_kernel_table(isa_class, dtype, kernel, expected):
    assert linear_kernel(isa_class, dtype, kernel) == expected
