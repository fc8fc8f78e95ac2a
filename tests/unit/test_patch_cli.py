"""`vllm-bridge patches` through the installed command."""

from __future__ import annotations

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
