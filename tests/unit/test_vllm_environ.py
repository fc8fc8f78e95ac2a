"""BridgePlatform.validate_environ: vLLM's check of VLLM_* variables, which
vLLM runs on every EngineArgs.create_engine_config, without vllm-bridge's
own variables."""

from __future__ import annotations

import os

import pytest
from vllm.engine.arg_utils import EngineArgs
from vllm.platforms.cpu import CpuPlatform

from vllm_bridge.config.vllm_environ import (
    READ_OUTSIDE_VLLM_ENVS,
    unknown_vllm_variables,
)
from vllm_bridge.platform import BridgePlatform


@pytest.fixture(autouse=True)
def no_vllm_bridge_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the variables each test sets: an engine started earlier in this
    process leaves the ones vllm-bridge's rules set for its workers (e.g.
    VLLM_BRIDGE_INT8_KERNEL), which vLLM's check would name first."""
    for name in [name for name in os.environ if name.startswith("VLLM_BRIDGE_")]:
        monkeypatch.delenv(name)


def test_vllm_bridge_variables_are_not_vllms_unknowns(monkeypatch):
    monkeypatch.setenv("VLLM_BRIDGE_STRICT", "0")
    # vLLM's own check refuses it (what every start warned about)
    with pytest.raises(ValueError, match="VLLM_BRIDGE_STRICT"):
        CpuPlatform.validate_environ(hard_fail=True)
    BridgePlatform.validate_environ(hard_fail=True)


def test_other_unknown_vllm_variables_are_still_refused(monkeypatch):
    monkeypatch.setenv("VLLM_BRIDGE_STRICT", "0")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPAEC", "4")
    assert unknown_vllm_variables(
        {"VLLM_CPU_KVCACHE_SPAEC": "4", "VLLM_BRIDGE_STRICT": "0"}
    ) == ["VLLM_CPU_KVCACHE_SPAEC"]
    with pytest.raises(
        ValueError,
        match="Unknown vLLM environment variable detected: VLLM_CPU_KVCACHE_SPAEC",
    ):
        BridgePlatform.validate_environ(hard_fail=True)


def test_known_vllm_variables_pass(monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    assert unknown_vllm_variables({"VLLM_CPU_KVCACHE_SPACE": "4"}) == []


@pytest.mark.parametrize("name", sorted(READ_OUTSIDE_VLLM_ENVS))
def test_variables_vllm_reads_outside_its_envs_pass(monkeypatch, name):
    """vLLM's own check calls them unknown (VLLM_CPU_SIM_MULTI_NUMA=1, the
    documented way to simulate NUMA nodes, warned at every start)."""
    monkeypatch.setenv(name, "1")
    with pytest.raises(ValueError, match=name):
        CpuPlatform.validate_environ(hard_fail=True)
    BridgePlatform.validate_environ(hard_fail=True)


def test_engine_args_reach_the_platform_check(monkeypatch, tiny_model):
    """vLLM calls the current platform's check while it builds a config:
    with --fail-on-environ-validation a vllm-bridge variable passes, a
    misspelt vLLM variable stops the build."""
    monkeypatch.setenv("VLLM_BRIDGE_STRICT", "0")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPAEC", "4")
    args = EngineArgs(model=str(tiny_model), fail_on_environ_validation=True)
    with pytest.raises(ValueError, match="VLLM_CPU_KVCACHE_SPAEC"):
        args.create_engine_config()
