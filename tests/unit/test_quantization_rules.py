"""Rule quantization_kernels on real VllmConfig objects: the int8 kernel of
``--quantization bridge_int8`` per CPU class, and 4-bit checkpoints refused
where the class has no 4-bit GEMM (a GPTQ checkpoint generated from the tiny
model, under the ISA switch as on an AVX2 CPU, and as on this CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config_support import build, build_recording
from vllm_bridge import envs
from vllm_bridge.device.isa import detect
from vllm_bridge.errors import BridgeConfigError
from vllm_bridge.quantization.kernel_table import KERNELS
from vllm_bridge_testmodel.gptq import write_gptq_copy

pytestmark = pytest.mark.usefixtures("restore_environ")
OPTION = f"env.{envs.INT8_KERNEL.name}"


@pytest.fixture(autouse=True)
def auto_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(envs.INT8_KERNEL.name, raising=False)


@pytest.fixture(scope="module")
def tiny_gptq(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gptq_copy(tiny_model, tmp_path_factory.mktemp("tiny-gptq"))


def test_bridge_int8_resolves_the_kernel_of_this_cpu(tiny_model):
    config, changes = build_recording(tiny_model, quantization="bridge_int8")
    # vLLM runs the float32 checkpoint in bf16 on classes with bf16 arithmetic
    expected = {"amx": "amx", "avx2": "bridge"}.get(detect().effective, "onednn")
    assert changes[OPTION].applied == expected
    assert changes[OPTION].rule == "quantization_kernels"
    assert config.model_config.quantization == "bridge_int8"


def test_the_engine_core_pass_finds_nothing_left_to_change(tiny_model):
    build(tiny_model, quantization="bridge_int8")  # resolves the variable
    _, changes = build_recording(tiny_model, quantization="bridge_int8")
    assert OPTION not in changes


def test_avx2_runs_bridge_int8_on_vllm_bridges_kernel(as_isa, tiny_model):
    _, changes = build_recording(tiny_model, quantization="bridge_int8")
    assert changes[OPTION].applied == "bridge"
    assert "avx2" in changes[OPTION].reason


def test_float32_activations_leave_the_amx_kernel(tiny_model):
    _, changes = build_recording(
        tiny_model, quantization="bridge_int8", dtype="float32"
    )
    assert changes[OPTION].applied != "amx"


def test_an_impossible_kernel_request_is_refused(tiny_model, monkeypatch):
    monkeypatch.setenv(envs.INT8_KERNEL.name, "amx")
    with pytest.raises(BridgeConfigError) as error:
        build(tiny_model, quantization="bridge_int8", dtype="float32")
    message = str(error.value)
    assert envs.INT8_KERNEL.name in message and "float32" in message


def test_a_bad_kernel_value_is_refused(tiny_model, monkeypatch):
    monkeypatch.setenv(envs.INT8_KERNEL.name, "fast")
    with pytest.raises(BridgeConfigError, match="VLLM_BRIDGE_INT8_KERNEL='fast'"):
        build(tiny_model, quantization="bridge_int8")


def test_avx2_refuses_a_gptq_checkpoint_before_loading(as_isa, tiny_gptq):
    with pytest.raises(BridgeConfigError) as error:
        build(tiny_gptq)
    message = str(error.value)
    for part in ("gptq", "avx2", "cpu_gemm_wna16", "--quantization bridge_int8"):
        assert part in message


def test_this_cpu_takes_a_gptq_checkpoint_where_its_build_has_the_gemm(tiny_gptq):
    isa_class = detect().effective
    if KERNELS[isa_class].int4_weight_gemm:
        config = build(tiny_gptq)
        assert config.model_config.quantization in ("gptq", "auto_gptq")
    else:
        with pytest.raises(BridgeConfigError, match=isa_class):
            build(tiny_gptq)
