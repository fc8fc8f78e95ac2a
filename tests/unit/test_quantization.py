"""``--quantization bridge_int8`` without an engine: the per-ISA kernel
table, the per-channel quantizer, each int8 GEMM this CPU has against a
float reference, and the method's place in vLLM's registry and help."""

from __future__ import annotations

import pytest
import torch
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.model_executor.layers.quantization import (
    QUANTIZATION_METHODS,
    get_quantization_config,
)
from vllm.utils.argparse_utils import FlexibleArgumentParser

from tests.conftest import run_venv_command
from vllm_bridge.device.isa import X86_CLASSES, detect
from vllm_bridge.quantization import HELP_ADDITION
from vllm_bridge.quantization.int8_online import METHOD_NAME, BridgeInt8Config
from vllm_bridge.quantization.kernel_table import (
    KERNELS,
    checkpoint_quant_method,
    choose_int8_kernel,
    layer_int8_kernel,
    needs_int4_weight_gemm,
)

BF16, FP32 = torch.bfloat16, torch.float32


@pytest.mark.parametrize(
    ("isa_class", "request_", "dtype", "built", "kernel"),
    [
        ("amx", "auto", BF16, True, "amx"),
        ("amx", "auto", FP32, True, "onednn"),  # the AMX kernel takes bf16 only
        ("amx", "onednn", BF16, True, "onednn"),
        ("amx", "bridge", BF16, True, "bridge"),
        ("amx", "amx", BF16, True, "amx"),
        ("avx512_bf16", "auto", BF16, True, "onednn"),
        ("avx512", "auto", FP32, True, "onednn"),
        ("avx2", "auto", BF16, True, "bridge"),
        ("avx2", "auto", FP32, True, "bridge"),
        ("avx2", "auto", BF16, False, "onednn"),  # the slow one, said so
        ("avx2", "onednn", BF16, True, "onednn"),
        ("avx2", "bridge", BF16, False, None),
        ("avx2", "amx", BF16, True, None),
        ("amx", "amx", FP32, True, None),
        ("other", "auto", BF16, True, None),
        ("x86_64_baseline", "auto", FP32, False, None),
    ],
)
def test_the_int8_kernel_per_isa_class(isa_class, request_, dtype, built, kernel):
    choice = choose_int8_kernel(isa_class, request_, dtype, built)
    assert choice.kernel == kernel
    if kernel is None and request_ == "auto":
        assert isa_class in choice.reason
    elif kernel is None:
        assert f"VLLM_BRIDGE_INT8_KERNEL={request_}" in choice.reason
    if isa_class == "avx2" and kernel == "onednn" and request_ == "auto":
        assert "a tenth of the bf16 speed" in choice.reason


def test_only_the_avx2_build_lacks_the_4bit_gemm():
    without = {c for c in X86_CLASSES if not KERNELS[c].int4_weight_gemm}
    assert without == {"x86_64_baseline", "avx2"}


@pytest.mark.parametrize(
    ("n", "k", "kernel"),
    [(4864, 896, "amx"), (100, 896, "onednn"), (4864, 900, "onednn")],
)
def test_shapes_the_amx_tiles_cannot_take_stay_on_onednn(n, k, kernel):
    assert layer_int8_kernel("amx", n, k) == kernel
    assert layer_int8_kernel("onednn", n, k) == "onednn"


@pytest.mark.parametrize(
    ("config", "method", "int4"),
    [
        ({"quant_method": "gptq", "bits": 4}, "gptq", True),
        ({"quant_method": "awq"}, "awq", True),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 4}}},
            },
            "int4",
            True,
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 8}}},
            },
            "compressed-tensors",
            False,
        ),
        (None, None, False),
    ],
)
def test_checkpoint_families(config, method, int4):
    assert checkpoint_quant_method(config) == method
    assert needs_int4_weight_gemm(method) is int4


def test_per_channel_quantization_maps_each_rows_peak_to_127():
    from vllm_bridge.quantization.int8_linear import quantize_per_channel

    weight = torch.randn(64, 256, generator=torch.Generator().manual_seed(0))
    weight[3] = 0.0
    quantized, scale = quantize_per_channel(weight)
    assert quantized.dtype == torch.int8 and scale.shape == (64, 1)
    assert quantized.abs().amax(dim=1)[torch.arange(64) != 3].eq(127).all()
    assert quantized[3].eq(0).all() and scale[3].item() == 1.0
    error = (quantized.float() * scale - weight).abs()
    assert (error <= scale / 2 + 1e-6).all()  # round to nearest


def _kernels_here() -> list[str]:
    """The int8 kernels of this CPU's class, and vllm-bridge's AVX2 kernel
    wherever it can run (any x86 CPU with AVX2, by request)."""
    kernels = set(KERNELS[detect().effective].int8)
    if {"avx2", "fma"} <= detect().flags:
        kernels.add("bridge")
    return sorted(kernels)


@pytest.mark.parametrize("kernel", _kernels_here() or ["none on this CPU"])
@pytest.mark.parametrize("dtype", [BF16, FP32])
@pytest.mark.parametrize("rows", [5, 40])
def test_each_int8_gemm_of_this_cpu_matches_a_float_reference(kernel, dtype, rows):
    """Per capability: the kernels of this CPU's class (AMX machines run
    both, the others oneDNN's); a decode-sized and a batch-sized input (the
    bridge kernel's direct and blocked paths)."""
    if kernel == "none on this CPU":
        pytest.skip(f"no int8 GEMM on class {detect().effective}")
    from vllm.platforms import current_platform

    from vllm_bridge.ops import linear
    from vllm_bridge.quantization.int8_linear import Int8Gemm, quantize_per_channel

    current_platform.import_kernels()
    assert kernel != "bridge" or linear.available()
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(896, 4864, generator=generator) / 70
    x = torch.randn(rows, 4864, generator=generator).to(dtype)
    bias = torch.randn(896, generator=generator).to(dtype)
    gemm = Int8Gemm(weight, kernel, dtype, bias)  # type: ignore[arg-type]
    assert gemm.kernel == kernel  # per layer only the shape counts
    quantized, scale = quantize_per_channel(weight)
    reference = x.float() @ (quantized.float() * scale).t() + bias.float()
    if kernel == "amx" and dtype == FP32:
        with pytest.raises(RuntimeError, match="bfloat16 or half"):
            gemm(x, bias)
        return
    out = gemm(x, bias)
    assert out.dtype == dtype and out.shape == (rows, 896)
    relative = (out.float() - reference).norm() / reference.norm()
    # per-token int8 activations: about 0.5-1% relative error
    assert relative < 0.02, relative
    # a byte per weight and a float32 scale per row (AMX: an int32 more)
    assert gemm.nbytes == 896 * 4864 + 896 * (8 if kernel == "amx" else 4)


def test_the_method_is_registered():
    # Building `vllm serve`'s parser loads the general plugins first, as
    # vLLM does before it parses a command line.
    make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    assert METHOD_NAME in QUANTIZATION_METHODS
    assert get_quantization_config(METHOD_NAME) is BridgeInt8Config


def test_vllm_serve_help_names_the_method():
    # vLLM fills help texts only when "--help" is on the real command line.
    result = run_venv_command("vllm", "serve", "--help=quantization")
    assert result.returncode == 0, result.stderr[-2000:]
    help_text = " ".join(result.stdout.split())
    assert " ".join(HELP_ADDITION.split()) in help_text
