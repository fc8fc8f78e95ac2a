"""LLM(model=tiny, enforce_eager=True) with VLLM_ENABLE_V1_MULTIPROCESSING=0:
the C++ kernels of the eager path, with engine and worker in one process.
One engine for both (the compiled multiprocess path is
tests/engine/test_llm_compiled.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.llm_support import generate_in_subprocess

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def result(tiny_model: Path) -> dict:
    return generate_in_subprocess(
        tiny_model, eager=True, VLLM_ENABLE_V1_MULTIPROCESSING="0"
    )


def test_greedy_tokens_match_transformers(result: dict, hf_greedy):
    assert result["tokens"] == hf_greedy


def test_worker_is_in_this_process_and_bridged(result: dict):
    assert result["executor"] == "uni"
    assert result["report"]["platform"] == "vllm_bridge.platform.BridgePlatform"
    assert result["report"]["worker_class"] == "vllm_bridge.worker.BridgeWorker"


def test_eager_mode_gets_no_fusion_passes(result: dict):
    assert result["report"]["fusion_passes"]["installed"] == []
    assert result["report"]["attention_direct"] is None
    assert result["report"]["fusion_passes"]["rewrites"] == {}


def test_hot_paths_run_vllm_cpu_kernels(result: dict):
    calls = result["calls"]
    for kernel in (
        "_C::onednn_mm",
        "_C::rms_norm",  # through vllm-bridge's IR provider
        "_C::fused_add_rms_norm",
        "_C::rotary_embedding",
        "_C::silu_and_mul",  # through vllm-bridge's out-of-tree SiluAndMul
        "_C::cpu_attention_with_kv_cache",
        "_C::greedy_argmax",
    ):
        assert calls.get(kernel, 0) > 0, kernel
    assert "aten::rsqrt" not in calls  # no native RMSNorm left
    # the KV write runs inside vllm-bridge's attention call (attention/)
    assert "vllm::unified_kv_cache_update" not in calls
    assert (
        calls["_C::cpu_attn_reshape_and_cache"]
        == calls["vllm::unified_attention_with_output"]
    )
