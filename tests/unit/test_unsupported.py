"""GPU-only options, set through EngineArgs the way `vllm serve` flags set
them, are put back to their default and recorded as overrides of a user
setting (refused in strict mode)."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm.engine.arg_utils import EngineArgs

from vllm_bridge.config import audit, unsupported
from vllm_bridge.errors import BridgeConfigError

pytestmark = pytest.mark.usefixtures("restore_environ")

# How a user sets each option (the EngineArgs field behind its flag).
USER_SETTINGS = {
    "attention_config.use_trtllm_attention": {
        "attention_config": {"use_trtllm_attention": True}
    },
    "attention_config.flash_attn_version": {
        "attention_config": {"flash_attn_version": 3}
    },
    "attention_config.disable_flashinfer_q_quantization": {
        "attention_config": {"disable_flashinfer_q_quantization": True}
    },
    "observability_config.enable_layerwise_nvtx_tracing": {
        "enable_layerwise_nvtx_tracing": True
    },
    "observability_config.cudagraph_metrics": {"cudagraph_metrics": True},
    "compilation_config.cudagraph_mm_encoder": {
        "compilation_config": {"cudagraph_mm_encoder": True}
    },
    "model_config.sleep_mode_offload_cudagraph": {"sleep_mode_offload_cudagraph": True},
}
ENTRIES = {entry.option: entry for entry in unsupported.UNSUPPORTED_OPTIONS}


def _option(config, option: str) -> object:
    section, field = option.split(".")
    return getattr(getattr(config, section), field)


def test_every_unsupported_option_has_a_user_setting():
    assert set(USER_SETTINGS) == set(ENTRIES)


def _all_user_settings() -> dict[str, object]:
    """Every GPU-only option set at once, as one `vllm serve` command line
    could (settings of one config section merged)."""
    merged: dict[str, object] = {}
    for setting in USER_SETTINGS.values():
        for field, value in setting.items():
            if isinstance(value, dict):
                merged[field] = {**merged.get(field, {}), **value}  # type: ignore[dict-item]
            else:
                merged[field] = value
    return merged


def test_every_gpu_only_option_is_reset_and_recorded(tiny_model: Path):
    with audit.capture() as changes:
        config = EngineArgs(
            model=str(tiny_model), **_all_user_settings()
        ).create_engine_config()
    recorded = {c.option: c for c in changes if c.rule == unsupported.RULE}
    assert set(recorded) == set(USER_SETTINGS)
    for option, change in recorded.items():
        assert _option(config, option) == ENTRIES[option].default
        assert change.user_set
        assert change.applied == ENTRIES[option].default
        assert change.requested != ENTRIES[option].default
        assert change.reason.startswith("not honoured on the CPU: ")


@pytest.mark.parametrize(
    "option",
    ["attention_config.use_trtllm_attention", "observability_config.cudagraph_metrics"],
)
def test_strict_mode_refuses_a_gpu_only_option(
    tiny_model: Path, option: str, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("VLLM_BRIDGE_STRICT", "1")
    args = EngineArgs(model=str(tiny_model), **USER_SETTINGS[option])
    with pytest.raises(BridgeConfigError, match=f"Strict mode refuses.*{option}="):
        args.create_engine_config()


def test_defaults_record_no_gpu_only_change(tiny_model: Path):
    with audit.capture() as changes:
        EngineArgs(model=str(tiny_model)).create_engine_config()
    assert unsupported.RULE not in {c.rule for c in changes}
