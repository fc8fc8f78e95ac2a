"""Which platform vLLM resolves, decided by the real entry-point machinery in
a fresh interpreter each time."""

from __future__ import annotations

import os
import subprocess
import sys

RESOLVE = (
    "from vllm.platforms import current_platform as p; "
    "print('PLATFORM', type(p).__module__ + '.' + type(p).__qualname__)"
)


def resolve(env: dict[str, str] | None = None, prelude: str = "") -> tuple[str, str]:
    proc = subprocess.run(
        [sys.executable, "-c", prelude + RESOLVE],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("PLATFORM ")]
    return line.removeprefix("PLATFORM "), proc.stderr


def test_active_by_default():
    platform, _ = resolve()
    assert platform == "vllm_bridge.platform.BridgePlatform"


def test_disable_gives_builtin_cpu_platform():
    # Any spelling of true (tests/unit/test_envs.py); one fresh interpreter.
    platform, _ = resolve({"VLLM_BRIDGE_DISABLE": "YES"})
    assert platform == "vllm.platforms.cpu.CpuPlatform"


def test_bad_disable_value_keeps_the_plugin_to_report_it():
    """Falling back to the built-in platform would hide the mistake; the
    config step refuses the value (tests/unit/test_schema.py and
    tests/engine/test_serve_bad_input.py)."""
    platform, _ = resolve({"VLLM_BRIDGE_DISABLE": "maybe"})
    assert platform == "vllm_bridge.platform.BridgePlatform"


def test_platform_import_failure_is_reported_loudly():
    # A real failed import of the platform module (as a broken install
    # would give), not a mocked one.
    platform, stderr = resolve(
        prelude="import sys; sys.modules['vllm_bridge.platform'] = None; "
    )
    assert platform == "vllm.platforms.cpu.CpuPlatform"
    assert "vllm-bridge could not activate: ModuleNotFoundError" in stderr
    assert "vllm_bridge.platform" in stderr
