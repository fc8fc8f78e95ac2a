"""Real VllmConfig objects for rule tests, built the way `vllm serve` and
LLM(...) build them (EngineArgs), without an engine."""

from __future__ import annotations

from pathlib import Path

from vllm.config import VllmConfig
from vllm.engine.arg_utils import EngineArgs

from vllm_bridge.config import audit


def build(model: Path, **kwargs: object) -> VllmConfig:
    return EngineArgs(model=str(model), **kwargs).create_engine_config()


def build_recording(model: Path, **kwargs: object) -> tuple[VllmConfig, dict]:
    """``build``, with the changes recorded meanwhile, by option."""
    with audit.capture() as changes:
        config = build(model, **kwargs)
    return config, {change.option: change for change in changes}
