"""The ISA-dependent defaults on real VllmConfig objects: the auto dtype
(isa-auto-dtype patch) and the linear kernel (rule linear_kernel), as on
an AVX2 CPU through the ISA switch and as on this CPU."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from tests.config_support import build, build_recording
from vllm_bridge import envs
from vllm_bridge.device import isa
from vllm_bridge.errors import BridgeConfigError
from vllm_bridge.patches.catalogue import REGISTRY

pytestmark = pytest.mark.usefixtures("restore_environ")


@pytest.fixture(scope="module")
def tiny_bf16(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _with_config_dtype(tiny_model, "bfloat16", tmp_path_factory)


@pytest.fixture(scope="module")
def tiny_fp16(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _with_config_dtype(tiny_model, "float16", tmp_path_factory)


def _with_config_dtype(model: Path, dtype: str, factory) -> Path:
    """The tiny model declaring another checkpoint dtype (what vLLM's 'auto'
    reads); building a config loads no weights."""
    directory = factory.mktemp(f"tiny-{dtype}")
    for item in model.iterdir():
        if item.name != "config.json":
            (directory / item.name).symlink_to(item)
    config = json.loads((model / "config.json").read_text())
    config["torch_dtype"] = config["dtype"] = dtype
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_avx2_keeps_bf16_storage_and_picks_the_bridge_kernel(as_isa, tiny_bf16):
    config, changes = build_recording(tiny_bf16)
    assert config.model_config.dtype == torch.bfloat16
    assert "model_config.dtype" not in changes
    change = changes[f"env.{envs.LINEAR_KERNEL.name}"]
    assert (change.requested, change.applied) == ("auto", "bridge")
    assert "vllm_bridge::bf16_linear" in change.reason
    assert os.environ[envs.LINEAR_KERNEL.name] == "bridge"


def test_avx2_runs_fp16_checkpoints_in_float32(as_isa, tiny_fp16):
    config, changes = build_recording(tiny_fp16)
    assert config.model_config.dtype == torch.float32
    change = changes["model_config.dtype"]
    assert (change.requested, change.applied, change.rule) == (
        torch.float16,
        torch.float32,
        "isa_dtype",
    )
    assert "no float16 arithmetic" in change.reason
    assert envs.LINEAR_KERNEL.name not in os.environ  # float32: vLLM's oneDNN


def test_without_the_patch_avx2_would_run_fp16(as_isa, tiny_fp16):
    with REGISTRY.reverted("isa-auto-dtype"):
        config = build(tiny_fp16)
    assert config.model_config.dtype == torch.float16


def test_avx2_without_the_bridge_kernel_runs_bf16_in_float32(
    as_isa, tiny_bf16, monkeypatch
):
    monkeypatch.setenv(envs.LINEAR_KERNEL.name, "vllm")
    config, changes = build_recording(tiny_bf16)
    assert config.model_config.dtype == torch.float32
    assert "oneDNN has no fast bf16 GEMM here" in changes["model_config.dtype"].reason


def test_an_explicit_dtype_is_never_changed(as_isa, tiny_fp16):
    config, changes = build_recording(tiny_fp16, dtype="float16")
    assert config.model_config.dtype == torch.float16
    assert "model_config.dtype" not in changes


def test_second_pass_keeps_the_resolved_kernel(as_isa, tiny_bf16):
    """The engine core reconciles the config again: the kernel resolved in
    the main process arrives through the environment, nothing changes."""
    from vllm_bridge.config.reconcile import reconcile

    config = build(tiny_bf16)
    assert reconcile(config, builtin=lambda _: None) == []


def test_on_this_cpu_the_table_decides(tiny_bf16):
    """Without the switch: the bridge kernel only where the CPU has no bf16
    arithmetic."""
    _, changes = build_recording(tiny_bf16)
    kernel = changes.get(f"env.{envs.LINEAR_KERNEL.name}")
    if isa.detect().effective in ("avx2", "avx512"):
        assert kernel is not None and kernel.applied == "bridge"
    else:
        assert kernel is None


def test_bridge_kernel_request_without_a_kernel_names_the_fix(tiny_bf16, monkeypatch):
    from vllm_bridge.ops import linear

    # Mocked: the kernel builds on this machine; a machine without a compiler
    # cannot be made here.
    monkeypatch.setattr(linear, "available", lambda: False)
    monkeypatch.setenv(envs.LINEAR_KERNEL.name, "bridge")
    with pytest.raises(BridgeConfigError, match="could not be built or loaded"):
        build(tiny_bf16)


def test_fp32_checkpoint_under_the_switch_stays_as_vllm_chooses(as_isa, tiny_model):
    config, changes = build_recording(tiny_model)
    assert config.model_config.dtype == torch.bfloat16  # vLLM's CPU default
    assert changes[f"env.{envs.LINEAR_KERNEL.name}"].applied == "bridge"
