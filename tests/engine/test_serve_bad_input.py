"""Bad vllm-bridge input through the real `vllm serve` command line: one
clear message, exit status 1, no traceback, before any engine starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_venv_command

pytestmark = pytest.mark.engine

# One case per way bad input reaches `vllm serve`: a setting read by the
# config loader (a VLLM_BRIDGE_* variable goes the same way as this key), a
# variable read when the plugin loads, a value vLLM's own config refuses, a
# rule in strict mode. Each message
# itself is checked by the unit tests of the loader and the rules, and
# malformed --additional-config by tests/unit/test_serve_parser.py.
# (extra `vllm serve` arguments, environment, what the message must say)
CASES = [
    (
        ["--additional-config", '{"kv_cache_shar": 0.3}'],
        {},
        "unknown key 'kv_cache_shar'; did you mean 'kv_cache_share'?",
    ),
    ([], {"VLLM_BRIDGE_DISABLE": "maybe"}, "VLLM_BRIDGE_DISABLE='maybe' is invalid"),
    (
        ["--max-model-len", "100000"],
        {},
        "vLLM's ModelConfig refuses the configuration: User-specified "
        "max_model_len (100000) is greater than the derived max_model_len",
    ),
    (
        ["--enable-dbo"],
        {"VLLM_BRIDGE_STRICT": "1"},
        "Strict mode refuses to override 1 option(s) you set: "
        "parallel_config.enable_dbo=True would become False",
    ),
]


def error_lines(stderr: str) -> list[str]:
    """The one-line errors vllm-bridge printed."""
    return [
        line for line in stderr.splitlines() if line.startswith("vllm-bridge: error: ")
    ]


def serve(model: Path, *extra: str, env: dict[str, str]):
    return run_venv_command(
        "vllm", "serve", str(model), "--port", "0", *extra, env=env, timeout=240
    )


@pytest.mark.parametrize(("extra", "env", "message"), CASES)
def test_bad_input_ends_serve_with_one_message(
    tiny_model: Path, extra: list[str], env: dict[str, str], message: str
):
    proc = serve(tiny_model, *extra, env=env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-3000:]
    errors = error_lines(proc.stderr)
    assert len(errors) == 1 and message in errors[0], output[-3000:]
    assert "Traceback" not in output
    assert "EngineCore" not in output  # failed before any engine process


def test_without_the_patch_the_traceback_comes_back(tiny_model: Path):
    extra, env, message = CASES[0]
    proc = serve(
        tiny_model,
        *extra,
        env={**env, "VLLM_BRIDGE_DISABLE_PATCHES": "config-error-exit"},
    )
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr
    assert message in proc.stderr


def test_bad_setting_stops_vllm_bench_with_one_message(tiny_model: Path):
    """`vllm bench` loads the plugins too (a client: it builds no config);
    the settings check at plugin load stops it."""
    proc = run_venv_command(
        "vllm",
        "bench",
        "serve",
        "--base-url",
        "http://127.0.0.1:9",
        "--model",
        str(tiny_model),
        "--num-prompts",
        "1",
        env={"VLLM_BRIDGE_KV_CACHE_SHARE": "abc"},
        timeout=240,
    )
    errors = error_lines(proc.stderr)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert len(errors) == 1 and "VLLM_BRIDGE_KV_CACHE_SHARE='abc'" in errors[0]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_bad_setting_stops_an_llm_script_with_one_message(tiny_model: Path):
    script = (
        "from vllm import LLM\n"
        "if __name__ == '__main__':\n"
        f"    LLM(model={str(tiny_model)!r})\n"
    )
    proc = run_venv_command(
        "python", "-c", script, env={"VLLM_BRIDGE_DRAIN_TIMEOUT": "soon"}, timeout=240
    )
    errors = error_lines(proc.stderr)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert len(errors) == 1 and "VLLM_BRIDGE_DRAIN_TIMEOUT='soon'" in errors[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "EngineCore" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"VLLM_BRIDGE_KV_CACHE_SHARE": "abc"}, "VLLM_BRIDGE_KV_CACHE_SHARE='abc'"),
        # The two the patch registry reads: while vLLM imports its kernels,
        # before any plugin hook (and before the one-line report was in place).
        ({"VLLM_BRIDGE_STRICT": "sometimes"}, "VLLM_BRIDGE_STRICT='sometimes'"),
        (
            {"VLLM_BRIDGE_DISABLE_PATCHES": "no-such-patch"},
            "VLLM_BRIDGE_DISABLE_PATCHES names unknown patch(es) no-such-patch",
        ),
    ],
)
def test_bad_setting_stops_vllm_version_with_one_message(
    env: dict[str, str], message: str
):
    """`vllm --version` builds the whole argument parser before it answers,
    and building the `serve` arguments loads the plugins."""
    proc = run_venv_command("vllm", "--version", env=env, timeout=240)
    errors = error_lines(proc.stderr)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert len(errors) == 1 and message in errors[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
