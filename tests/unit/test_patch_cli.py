"""`vllm-bridge patches` (and the settings check every subcommand but
`doctor` makes first) through the installed command."""

from __future__ import annotations

import pytest

from tests.conftest import REPO, run_venv_command
from vllm_bridge.patches.catalogue import REGISTRY
from vllm_bridge.tools import patch_docs as docs


def run_cli(*args: str, env: dict[str, str] | None = None):
    return run_venv_command("vllm-bridge", "patches", *args, env=env)


def test_committed_patch_docs_are_current():
    committed = (REPO / "docs" / "patches.md").read_text()
    assert committed == docs.render(REGISTRY), (
        "docs/patches.md is stale: run `vllm-bridge patches --docs docs/patches.md`"
    )


def test_every_patch_declares_why_how_upstream_and_removal():
    for patch in REGISTRY.patches():
        for field in ("why", "how", "upstream", "remove_when"):
            assert len(getattr(patch, field)) > 20, (patch.name, field)
        # code it replaces or wraps is fingerprinted; hooks replace no code
        assert (patch.fingerprint is None) == (patch.kind == "hook"), patch.name


def test_check_passes_on_the_pinned_vllm():
    proc = run_cli("--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for patch in REGISTRY.patches():
        assert patch.name in proc.stdout


def test_unknown_patch_name_is_one_clear_error():
    proc = run_cli(env={"VLLM_BRIDGE_DISABLE_PATCHES": "no-such-patch"})
    assert proc.returncode == 2
    assert "VLLM_BRIDGE_DISABLE_PATCHES names unknown patch(es) no-such-patch" in (
        proc.stderr
    )
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("subcommand", [["patches"], ["settings"], ["explain", "m"]])
def test_bad_setting_stops_every_subcommand_but_doctor_with_one_line(
    subcommand: list[str],
):
    proc = run_venv_command(
        "vllm-bridge", *subcommand, env={"VLLM_BRIDGE_KV_CACHE_SHARE": "abc"}
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: VLLM_BRIDGE_KV_CACHE_SHARE='abc' is invalid: expected a number. "
        "Fix or unset VLLM_BRIDGE_KV_CACHE_SHARE (allowed: a number in (0, 0.9])."
    ]
