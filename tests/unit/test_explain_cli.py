"""`vllm-bridge explain` through the installed command, on the tiny model."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tests.conftest import run_venv_command
from tests.snapshots import assert_matches_snapshot


def explain(*args: str):
    return run_venv_command(
        "vllm-bridge",
        "explain",
        *args,
        unset=(
            "VLLM_CPU_OMP_THREADS_BIND",
            "GOMP_SPINCOUNT",
            "VLLM_CPU_KVCACHE_SPACE",
            "VLLM_BRIDGE_STRICT",
            "VLLM_BRIDGE_COMPILE_MODE",
            "LD_PRELOAD",
        ),
    )


def _blocks(stdout: str) -> dict[str, str]:
    """option -> its head line and reason, from the explain report."""
    blocks: dict[str, str] = {}
    for block in re.split(r"\n(?=\S)", stdout.split("\n\n", 1)[1]):
        option = block.split(":", 1)[0]
        blocks[option] = " ".join(block.split())
    return blocks


def _mask(stdout: str, model: Path) -> str:
    """Hide what moves between runs and machines: the model's and the
    venv's paths, the free memory and the KV budget derived from it."""
    text = stdout.replace(str(model), "<MODEL>").replace(sys.prefix, "<VENV>")
    text = re.sub(r"\d+\.\d\d GiB", "<N> GiB", text)
    text = re.sub(r"-> \d+  \[kv_cache_budget\]", "-> <BYTES>  [kv_cache_budget]", text)
    # One line per reason: where a masked value wraps depends on its length.
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("    ") and lines and lines[-1].startswith("    "):
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


def test_explain_output_on_the_tiny_model(tiny_model: Path):
    proc = explain(str(tiny_model), "--enable-dbo")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_matches_snapshot("explain_tiny.txt", _mask(proc.stdout, tiny_model))


def test_explain_shows_each_change_with_its_rule_and_reason(tiny_model: Path):
    proc = explain(str(tiny_model))
    assert proc.returncode == 0, proc.stderr[-3000:]
    blocks = _blocks(proc.stdout)
    for option, rule in (
        ("parallel_config.worker_cls", "worker_class"),
        ("cache_config.kv_cache_memory_bytes", "kv_cache_budget"),
        ("cache_config.block_size", "vllm_cpu_platform"),
        ("compilation_config.mode", "compile_mode"),
    ):
        assert f"[{rule}]" in blocks[option]
    assert "gpu_memory_utilization=0.92" in blocks["cache_config.kv_cache_memory_bytes"]


def test_explain_respects_explicit_settings(tiny_model: Path):
    proc = explain(str(tiny_model), "--gpu-memory-utilization", "0.5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    blocks = _blocks(proc.stdout)
    assert "cache_config.kv_cache_memory_bytes" not in blocks
    assert "parallel_config.worker_cls" in blocks


def test_explain_in_strict_mode_names_the_refused_option(tiny_model: Path):
    proc = explain(
        str(tiny_model), "--enable-dbo", "--additional-config", '{"strict": true}'
    )
    assert proc.returncode == 2
    assert "parallel_config.enable_dbo=True would become False" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_explain_rejects_a_bad_argument_like_vllm_serve(tiny_model: Path):
    proc = explain(str(tiny_model), "--gpu-memory-utilization", "lots")
    assert proc.returncode == 2
    assert "--gpu-memory-utilization" in proc.stderr
    assert "Traceback" not in proc.stderr
