"""LLM(model=tiny, enforce_eager=True): the C++ kernels of the eager path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm import LLM

from tests.engine.llm_support import greedy, kernel_calls, running_llm

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def llm(tiny_model: Path) -> Iterator[LLM]:
    with running_llm(tiny_model, dtype="float32", enforce_eager=True) as engine:
        yield engine


def test_greedy_tokens_match_transformers(llm: LLM, hf_greedy: list[list[int]]):
    assert greedy(llm) == hf_greedy


def test_hot_paths_run_vllm_cpu_kernels(llm: LLM):
    calls = kernel_calls(llm)
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
