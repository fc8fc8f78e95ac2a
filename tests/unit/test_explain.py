"""`vllm-bridge explain` on the tiny model: one run of the installed command
(snapshot, as an AVX2 CPU so that it reads the same on every x86 machine),
the rest through the command's own function in this process."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import run_venv_command
from tests.snapshots import assert_matches_snapshot
from vllm_bridge.device import isa
from vllm_bridge.startup import ISA_CAP_ENV
from vllm_bridge.tools.cli import app
from vllm_bridge.tools.explain import build_serve_config

# Settings of the caller's environment that the rules would read.
UNSET = (
    "VLLM_CPU_OMP_THREADS_BIND",
    "GOMP_SPINCOUNT",
    "VLLM_CPU_KVCACHE_SPACE",
    "VLLM_BRIDGE_STRICT",
    "VLLM_BRIDGE_COMPILE_MODE",
    "VLLM_BRIDGE_LINEAR_KERNEL",
    "LD_PRELOAD",
    *ISA_CAP_ENV["avx2"],  # set by the ISA switch where this process runs under it
    "VLLM_USE_LAYERNAME",  # set at this process's start: the command sets its own
)
pytestmark = pytest.mark.usefixtures("restore_environ")


@pytest.fixture(autouse=True)
def no_user_settings(monkeypatch: pytest.MonkeyPatch):
    for name in UNSET:
        monkeypatch.delenv(name, raising=False)


def _mask(stdout: str, model: Path) -> str:
    """Hide what moves between runs and machines: the model's and the
    venv's paths, the free memory and the KV budget derived from it, the
    CPU class under the switch."""
    text = stdout.replace(str(model), "<MODEL>").replace(sys.prefix, "<VENV>")
    text = re.sub(r"\d+\.\d\d GiB", "<N> GiB", text)
    text = re.sub(r"-> \d+  \[kv_cache_budget\]", "-> <BYTES>  [kv_cache_budget]", text)
    text = re.sub(r"\(this one is \w+\)", "(this one is <NATIVE>)", text)
    # One line per reason: where a masked value wraps depends on its length.
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("    ") and lines and lines[-1].startswith("    "):
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.mark.skipif(
    {"avx2", "fma"} - isa.cpu_flags(), reason="the ISA switch needs x86-64 with AVX2"
)
def test_explain_command_as_an_avx2_cpu(tiny_model: Path):
    proc = run_venv_command(
        "vllm-bridge",
        "explain",
        str(tiny_model),
        "--enable-dbo",
        env={"VLLM_BRIDGE_ISA": "avx2"},
        unset=UNSET,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_matches_snapshot("explain_tiny_avx2.txt", _mask(proc.stdout, tiny_model))


def test_every_change_has_its_rule_and_reason(tiny_model: Path):
    _, changes = build_serve_config([str(tiny_model)])
    rules = {change.option: change.rule for change in changes}
    for option, rule in (
        ("parallel_config.worker_cls", "worker_class"),
        ("cache_config.kv_cache_memory_bytes", "kv_cache_budget"),
        ("cache_config.block_size", "vllm_cpu_platform"),
        ("compilation_config.mode", "compile_mode"),
    ):
        assert rules[option] == rule
    assert all(change.reason for change in changes)


def test_explicit_settings_are_kept(tiny_model: Path):
    config, changes = build_serve_config(
        [str(tiny_model), "--gpu-memory-utilization", "0.5"]
    )
    options = {change.option for change in changes}
    assert "cache_config.kv_cache_memory_bytes" not in options
    assert config.cache_config.gpu_memory_utilization == 0.5
    assert "parallel_config.worker_cls" in options


def test_strict_mode_names_the_refused_option(tiny_model: Path):
    result = CliRunner().invoke(
        app,
        [
            "explain",
            str(tiny_model),
            "--enable-dbo",
            "--additional-config",
            '{"strict": true}',
        ],
    )
    assert result.exit_code == 2
    assert "parallel_config.enable_dbo=True would become False" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_bad_argument_is_refused_like_vllm_serve(tiny_model: Path):
    result = CliRunner().invoke(
        app, ["explain", str(tiny_model), "--gpu-memory-utilization", "lots"]
    )
    assert result.exit_code == 2
    assert "--gpu-memory-utilization" in result.output
