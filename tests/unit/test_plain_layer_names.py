"""The interpreter-start stage sets VLLM_USE_LAYERNAME=0 (plain layer names,
which inductor's C++ wrapper can pass) in every process of the environment
where vllm-bridge is active, unless the user set it. Each case runs a fresh
interpreter: the setting must be in place before vLLM imports torch_utils."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from vllm_bridge import envs, startup

SHOW = "import os; print(os.environ.get('VLLM_USE_LAYERNAME', 'unset'))"


def layer_name_setting(**env: str) -> str:
    environ = {
        name: value
        for name, value in os.environ.items()
        if name not in ("VLLM_USE_LAYERNAME", "VLLM_BRIDGE_DISABLE")
    }
    run = subprocess.run(
        [sys.executable, "-c", SHOW],
        env={**environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return run.stdout.strip()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "0"),
        ({"VLLM_USE_LAYERNAME": "1"}, "1"),  # the user's choice stays
        ({"VLLM_BRIDGE_DISABLE": "1"}, "unset"),  # vLLM's built-in platform
        ({"VLLM_BRIDGE_DISABLE": "0"}, "0"),
        # unreadable: vllm-bridge stays active to report it (activation.py)
        ({"VLLM_BRIDGE_DISABLE": "maybe"}, "0"),
    ],
)
def test_plain_layer_names_unless_set_or_disabled(env: dict[str, str], expected: str):
    assert layer_name_setting(**env) == expected


def test_the_startup_stage_reads_the_disable_setting_by_its_name():
    assert envs.DISABLE.name == startup.DISABLE_VARIABLE
