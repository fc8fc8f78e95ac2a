"""`vllm-bridge explain` through the installed command, on the tiny model."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import VENV_BIN


def explain(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    for name in (
        "VLLM_CPU_OMP_THREADS_BIND",
        "GOMP_SPINCOUNT",
        "VLLM_CPU_KVCACHE_SPACE",
    ):
        env.pop(name, None)
    return subprocess.run(
        [str(VENV_BIN / "vllm-bridge"), "explain", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_explain_shows_each_change_with_its_rule_and_reason(tiny_model: Path):
    proc = explain(str(tiny_model))
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = proc.stdout[proc.stdout.index("vllm-bridge changes for") :]
    for option, rule in (
        ("parallel_config.worker_cls", "worker_class"),
        ("cache_config.kv_cache_memory_bytes", "kv_cache_budget"),
    ):
        row = next(line for line in table.splitlines() if option in line)
        assert rule in row
    assert "gpu_memory_utilization=0.92" in table


def test_explain_respects_explicit_settings(tiny_model: Path):
    proc = explain(str(tiny_model), "--gpu-memory-utilization", "0.5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = proc.stdout[proc.stdout.index("vllm-bridge changes for") :]
    assert "kv_cache_memory_bytes" not in table
    assert "parallel_config.worker_cls" in table


def test_explain_rejects_a_bad_argument_like_vllm_serve(tiny_model: Path):
    proc = explain(str(tiny_model), "--gpu-memory-utilization", "lots")
    assert proc.returncode == 2
    assert "--gpu-memory-utilization" in proc.stderr
    assert "Traceback" not in proc.stderr
