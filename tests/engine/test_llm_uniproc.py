"""LLM(model=tiny) with VLLM_ENABLE_V1_MULTIPROCESSING=0: engine and worker
in one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def result(tiny_model: Path) -> dict:
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.engine.uniproc_generate", str(tiny_model)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def test_greedy_tokens_match_transformers(result: dict, hf_greedy):
    assert result["tokens"] == hf_greedy


def test_worker_is_in_this_process_and_bridged(result: dict):
    assert result["executor"] == "uni"
    assert result["report"]["platform"] == "vllm_bridge.platform.BridgePlatform"
    assert result["report"]["worker_class"] == "vllm_bridge.worker.BridgeWorker"
