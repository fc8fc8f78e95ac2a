"""LLM(model=tiny) with VLLM_ENABLE_V1_MULTIPROCESSING=0: engine and worker
in one process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.llm_support import generate_in_subprocess

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def result(tiny_model: Path) -> dict:
    return generate_in_subprocess(tiny_model, VLLM_ENABLE_V1_MULTIPROCESSING="0")


def test_greedy_tokens_match_transformers(result: dict, hf_greedy):
    assert result["tokens"] == hf_greedy


def test_worker_is_in_this_process_and_bridged(result: dict):
    assert result["executor"] == "uni"
    assert result["report"]["platform"] == "vllm_bridge.platform.BridgePlatform"
    assert result["report"]["worker_class"] == "vllm_bridge.worker.BridgeWorker"
