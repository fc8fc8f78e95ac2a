"""Rule scheduler_class on real VllmConfig objects: the SLO scheduler when
a time-per-output-token objective is given, vLLM's scheduler otherwise, and
one clear error for every objective or combination that cannot work."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm.v1.core.sched.scheduler import Scheduler

from tests.config_support import build, build_recording
from vllm_bridge import envs
from vllm_bridge.config.scheduler_rules import SLO_SCHEDULER
from vllm_bridge.errors import BridgeConfigError
from vllm_bridge.scheduling.slo_scheduler import SloScheduler

pytestmark = pytest.mark.usefixtures("restore_environ")
OPTION = "scheduler_config.scheduler_cls"


@pytest.fixture(autouse=True)
def no_objective_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(envs.TPOT_OBJECTIVE_MS.name, raising=False)


def test_no_objective_keeps_vllms_scheduler(tiny_model: Path):
    config, changes = build_recording(tiny_model)
    assert OPTION not in changes
    assert config.scheduler_config.get_scheduler_cls() is Scheduler


def test_objective_key_selects_the_slo_scheduler(tiny_model: Path):
    config, changes = build_recording(
        tiny_model, additional_config={"tpot_objective_ms": 80}
    )
    assert changes[OPTION].applied == SLO_SCHEDULER
    assert changes[OPTION].rule == "scheduler_class"
    assert "tpot_objective_ms (or VLLM_BRIDGE_TPOT_OBJECTIVE_MS) = 80" in (
        changes[OPTION].reason
    )
    assert config.scheduler_config.get_scheduler_cls() is SloScheduler


def test_objective_variable_selects_the_slo_scheduler(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv(envs.TPOT_OBJECTIVE_MS.name, "120.5")
    config = build(tiny_model)
    assert config.scheduler_config.scheduler_cls == SLO_SCHEDULER


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-5, "greater than 0"),
        (0, "greater than 0"),
        ("100", "valid number"),
        (True, "valid number"),
        (90_000, "less than or equal to 60000"),
    ],
)
def test_bad_objective_is_refused(tiny_model: Path, value: object, message: str):
    with pytest.raises(BridgeConfigError) as error:
        build(tiny_model, additional_config={"tpot_objective_ms": value})
    text = str(error.value)
    assert "--additional-config key 'tpot_objective_ms'" in text
    assert message in text
    assert "a number of milliseconds in (0, 60000]" in text


@pytest.mark.parametrize("raw", ["fast", "-1", "0", "inf"])
def test_bad_objective_variable_is_refused(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch, raw: str
):
    monkeypatch.setenv(envs.TPOT_OBJECTIVE_MS.name, raw)
    with pytest.raises(
        BridgeConfigError, match=f"VLLM_BRIDGE_TPOT_OBJECTIVE_MS='{raw}'"
    ):
        build(tiny_model)


def test_misspelt_objective_key_is_refused(tiny_model: Path):
    with pytest.raises(BridgeConfigError, match="did you mean 'tpot_objective_ms'"):
        build(tiny_model, additional_config={"tpot_objective": 80})


def test_another_scheduler_class_conflicts_with_the_objective(tiny_model: Path):
    with pytest.raises(BridgeConfigError, match=r"--scheduler-cls is .*drop one"):
        build(
            tiny_model,
            scheduler_cls="vllm.v1.core.sched.scheduler.Scheduler",
            additional_config={"tpot_objective_ms": 80},
        )


def test_slo_scheduler_without_objective_is_refused(tiny_model: Path):
    with pytest.raises(BridgeConfigError, match="needs a time-per-output-token"):
        build(tiny_model, scheduler_cls=SLO_SCHEDULER)


def test_objective_without_chunked_prefill_is_refused(tiny_model: Path):
    with pytest.raises(BridgeConfigError, match="needs chunked prefill"):
        build(
            tiny_model,
            enable_chunked_prefill=False,
            additional_config={"tpot_objective_ms": 80},
        )


def test_slo_scheduler_built_without_objective_names_the_fix(tiny_model: Path):
    """With vllm-bridge's rules not run (the plugin turned off, the class
    given with --scheduler-cls), the scheduler itself refuses, before
    vLLM's scheduler allocates anything."""
    config = build(tiny_model)
    with pytest.raises(BridgeConfigError, match="tpot_objective_ms"):
        SloScheduler(vllm_config=config, kv_cache_config=None)
