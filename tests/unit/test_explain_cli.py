"""`vllm-bridge explain` through the installed command, on the tiny model."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_venv_command


def explain(*args: str):
    return run_venv_command(
        "vllm-bridge",
        "explain",
        *args,
        env={"COLUMNS": "200"},
        unset=("VLLM_CPU_OMP_THREADS_BIND", "GOMP_SPINCOUNT", "VLLM_CPU_KVCACHE_SPACE"),
    )


def test_explain_shows_each_change_with_its_rule_and_reason(tiny_model: Path):
    proc = explain(str(tiny_model))
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = proc.stdout[proc.stdout.index("vllm-bridge changes for") :]
    for option, rule in (
        ("parallel_config.worker_cls", "worker_class"),
        ("cache_config.kv_cache_memory_bytes", "kv_cache_budget"),
        ("cache_config.block_size", "vllm_cpu_platform"),
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
