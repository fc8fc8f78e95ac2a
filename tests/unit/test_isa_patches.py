"""The ISA patches against the real vLLM functions they wrap; each test
also shows what vLLM does without the patch."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.config_support import build
from vllm_bridge import envs
from vllm_bridge.device import isa
from vllm_bridge.patches.catalogue import REGISTRY
from vllm_bridge.patches.worker import isa_linear_kernel
from vllm_bridge.patches.worker.compile_cache_bridge_key import bridge_factors

pytestmark = pytest.mark.usefixtures("restore_environ")
NATIVE = isa.classify(isa.platform.machine(), isa.cpu_flags())
AVX2_MACHINE = {"avx2", "fma"} <= isa.cpu_flags()


@pytest.fixture
def worker_stage() -> Iterator[None]:
    """The worker-stage patches, as in a worker process; reverted after."""
    REGISTRY.apply("worker")
    yield
    for patch in REGISTRY.patches("worker"):
        REGISTRY.revert(patch.name)


class Layer(torch.nn.Module):
    def __init__(self, out_features: int, in_features: int) -> None:
        super().__init__()
        torch.manual_seed(out_features)
        self.weight = torch.nn.Parameter(
            torch.randn(out_features, in_features).bfloat16(), requires_grad=False
        )


def dispatch(layer: Layer, remove_weight: bool) -> None:
    from vllm.model_executor.layers import utils

    utils.dispatch_cpu_unquantized_gemm(layer, remove_weight)


@pytest.mark.skipif(not AVX2_MACHINE, reason="the kernel needs x86-64 with AVX2")
def test_bridge_kernel_takes_bf16_layers_when_resolved(worker_stage, monkeypatch):
    monkeypatch.setenv(envs.LINEAR_KERNEL.name, "bridge")
    layer = Layer(48, 64)
    weight = layer.weight.detach().clone()
    before = len(isa_linear_kernel.layers_on_bridge_kernel)
    dispatch(layer, remove_weight=True)
    assert isa_linear_kernel.layers_on_bridge_kernel[before:] == ["48 x 64"]
    assert layer.weight.numel() == 0  # as vLLM does: only the kernel holds it
    x = torch.randn(3, 64).bfloat16()
    torch.testing.assert_close(
        layer.cpu_linear(x, layer.weight, None).float(),
        (x.float() @ weight.float().T).bfloat16().float(),
        rtol=8e-3,
        atol=1e-2,
    )


@pytest.mark.skipif(not AVX2_MACHINE, reason="the kernel needs x86-64 with AVX2")
def test_without_the_patch_vllm_dispatches_the_layer(worker_stage, monkeypatch):
    monkeypatch.setenv(envs.LINEAR_KERNEL.name, "bridge")
    layer = Layer(48, 64)
    before = len(isa_linear_kernel.layers_on_bridge_kernel)
    with REGISTRY.reverted("isa-linear-kernel"):
        dispatch(layer, remove_weight=False)
    assert isa_linear_kernel.layers_on_bridge_kernel[before:] == []
    assert layer.weight.numel() == 48 * 64


@pytest.mark.parametrize("setting", ["vllm", "auto"])
def test_other_settings_leave_the_layer_to_vllm(worker_stage, monkeypatch, setting):
    monkeypatch.setenv(envs.LINEAR_KERNEL.name, setting)
    before = len(isa_linear_kernel.layers_on_bridge_kernel)
    dispatch(Layer(16, 32), remove_weight=False)
    assert isa_linear_kernel.layers_on_bridge_kernel[before:] == []


def test_compile_cache_key_holds_the_isa_class(worker_stage, tiny_model: Path):
    from vllm.compilation import caching

    config = build(tiny_model)
    factors = caching.aot_compile_hash_factors(config)
    assert f"vllm-bridge isa class {isa.detect().effective}" in factors
    with REGISTRY.reverted("compile-cache-bridge-key"):
        unpatched = caching.aot_compile_hash_factors(config)
    assert unpatched == factors[: -len(bridge_factors())]


def test_compile_cache_key_holds_the_attention_backend(
    worker_stage, tiny_model: Path, monkeypatch
):
    # vllm-bridge's backend traces no KV-write op; its graph loaded for
    # vLLM's backend never writes the KV cache (seen: every prompt of the
    # 0.5b preset got the same tokens)
    from vllm.compilation import caching

    config = build(tiny_model)
    keys = {}
    for backend in ("bridge", "vllm"):
        monkeypatch.setenv(envs.ATTENTION.name, backend)
        keys[backend] = caching.aot_compile_hash_factors(config)
    assert keys["bridge"] != keys["vllm"]
    assert "vllm-bridge attention vllm" in keys["vllm"]


QUERIES = (
    "import vllm_bridge, torch.cpu as c; "
    "from vllm_bridge.patches.catalogue import REGISTRY; "
    "REGISTRY.apply('platform'); "
    "print(c._is_avx512_supported(), c._is_avx512_bf16_supported(), "
    "c._is_amx_tile_supported(), REGISTRY.records()['isa-switch'].status)"
)


def torch_isa_queries(**env: str) -> list[str]:
    return subprocess.run(
        [sys.executable, "-c", QUERIES],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()


@pytest.mark.skipif(not AVX2_MACHINE, reason="the ISA switch needs x86-64 with AVX2")
def test_isa_switch_caps_torchs_queries_for_vllm():
    native = torch_isa_queries(VLLM_BRIDGE_ISA="auto")
    assert native[3] == "inactive"  # no switch, nothing to cap
    switched = torch_isa_queries(VLLM_BRIDGE_ISA="avx2")
    assert switched[:3] == ["False", "False", "False"]
    assert switched[3] == ("inactive" if NATIVE == "avx2" else "applied")
    unpatched = torch_isa_queries(
        VLLM_BRIDGE_ISA="avx2", VLLM_BRIDGE_DISABLE_PATCHES="isa-switch"
    )
    # without the patch vLLM would read this CPU's own answers
    assert unpatched[:3] == native[:3]


# A relu on bf16 values whose row length (24) is not a multiple of the
# 512-bit tile (32 bf16 values): code tiled for AVX-512 but compiled for AVX2
# handles 16 of every 32 values.
RELU = (
    "import torch; torch.manual_seed(0); x = torch.randn(5, 24).bfloat16(); "
    "f = torch.compile(lambda t: torch.relu(t * 2), fullgraph=True, dynamic=True); "
    "print((f(x).float() - torch.relu(x * 2).float()).abs().max().item())"
)


def compiled_relu_error(cache: Path, **env: str) -> float:
    """The largest difference between inductor's relu and eager's, in a
    fresh process whose inductor cache is ``cache``."""
    run = subprocess.run(
        [sys.executable, "-c", RELU],
        env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return float(run.stdout.split()[-1])


@pytest.mark.skipif(
    NATIVE not in ("avx512", "avx512_bf16", "amx"),
    reason="needs a CPU with AVX-512 (the switch runs it as the lower avx2 class)",
)
def test_switched_inductor_does_not_load_the_native_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Inductor's cache filled natively, then read under VLLM_BRIDGE_ISA=avx2:
    with the patch the switched run compiles its own code; without it the
    AVX-512-tiled code is loaded and gives wrong values."""
    monkeypatch.delenv("VLLM_BRIDGE_ISA", raising=False)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    assert compiled_relu_error(tmp_path) == 0
    assert compiled_relu_error(tmp_path, VLLM_BRIDGE_ISA="avx2") == 0
    unpatched = compiled_relu_error(
        tmp_path,
        VLLM_BRIDGE_ISA="avx2",
        VLLM_BRIDGE_DISABLE_PATCHES="isa-switch-inductor-key",
    )
    assert unpatched != 0  # wrong values, or NaN from the lanes left unwritten
