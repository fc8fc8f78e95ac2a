"""The platform patch that gives EngineDeadError a message a client can act
on (the engine test is tests/engine/test_faults.py: a real worker killed
mid-stream)."""

from __future__ import annotations

from vllm.v1.engine.exceptions import EngineDeadError

from vllm_bridge.patches.catalogue import REGISTRY
from vllm_bridge.patches.platform.engine_dead_message import (
    ENGINE_DEAD_MESSAGE,
    PATCH,
)


def test_the_message_says_what_stopped_and_what_to_do():
    REGISTRY.apply("platform")
    assert REGISTRY.records()[PATCH.name].status == "applied"
    error = EngineDeadError(suppress_context=True)
    assert str(error) == ENGINE_DEAD_MESSAGE
    assert error.__suppress_context__ is True


def test_without_the_patch_vllm_points_at_a_stack_trace():
    REGISTRY.apply("platform")
    with REGISTRY.reverted(PATCH.name):
        assert "See stack trace (above)" in str(EngineDeadError())
    assert str(EngineDeadError()) == ENGINE_DEAD_MESSAGE
