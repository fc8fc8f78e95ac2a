"""A KV cache too small for the requests at once: the scheduler preempts
and recomputes, and every request still ends with the greedy tokens of the
independent reference (Hugging Face transformers, float32). Eager, engine
in this process (the fastest start): the scheduler is the same either way.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config_support import build
from tests.conftest import MAX_TOKENS, PROMPTS
from tests.engine.llm_support import generate_in_subprocess
from vllm_bridge.config import rules

pytestmark = pytest.mark.engine

MAX_MODEL_LEN = 64
BLOCK_SIZE = 32  # the smallest vLLM's CPU attention takes
# Three blocks: one sequence of max_model_len (what vLLM requires) and a
# half, while each of the 8 prompts grows into a second block.
KV_TOKENS = 96


@pytest.fixture(scope="module")
def result(tiny_model: Path) -> dict:
    config = build(tiny_model, dtype="float32", max_model_len=MAX_MODEL_LEN)
    per_token = rules._kv_bytes_per_token(config)
    assert per_token is not None
    return generate_in_subprocess(
        tiny_model,
        eager=True,
        llm_kwargs={
            "max_model_len": MAX_MODEL_LEN,
            "block_size": BLOCK_SIZE,
            "kv_cache_memory_bytes": KV_TOKENS * per_token,
        },
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
    )


def test_the_requests_did_not_fit_at_once(result: dict):
    assert len(PROMPTS) * MAX_TOKENS > KV_TOKENS
    assert result["preemptions"] > 0


def test_every_request_ends_with_the_reference_tokens(result: dict, hf_greedy):
    assert result["tokens"] == hf_greedy
