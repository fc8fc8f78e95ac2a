"""Which uncaught errors the config-error-exit hook turns into one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from tests.config_support import build
from vllm_bridge.errors import BridgeConfigError
from vllm_bridge.patches.platform.config_error_exit import one_line


def test_a_value_vllms_config_refuses_is_one_line(tiny_model: Path):
    with pytest.raises(ValidationError) as raised:
        build(tiny_model, max_model_len=100_000)
    message = one_line(raised.value)
    assert message is not None
    assert message.startswith("vLLM's ModelConfig refuses the configuration: ")
    assert "max_model_len (100000) is greater than" in message
    assert "\n" not in message


def test_a_bridge_config_error_is_its_message():
    assert one_line(BridgeConfigError("VLLM_BRIDGE_X is bad")) == "VLLM_BRIDGE_X is bad"


def test_other_errors_keep_their_traceback():
    class NotVllm(BaseModel):
        size: int

    with pytest.raises(ValidationError) as raised:
        NotVllm(size="big")
    assert one_line(raised.value) is None
    assert one_line(RuntimeError("a bug")) is None
