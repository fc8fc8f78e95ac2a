"""The platform-stage patch that puts the file behind vLLM's
torch.distributed FileStore in the process tree's runtime directory. The
engine-level check (a killed worker or engine core leaves nothing in the
temporary directory) is tests/engine/test_faults.py."""

from __future__ import annotations

import tempfile
from pathlib import Path

from vllm.v1.executor import multiproc_executor

from vllm_bridge.patches.catalogue import REGISTRY
from vllm_bridge.patches.platform.dist_store_directory import PATCH


def test_the_store_file_goes_to_the_runtime_directory(monkeypatch, tmp_path: Path):
    REGISTRY.apply("platform")
    assert REGISTRY.records()[PATCH.name].status == "applied"
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", str(tmp_path))
    method = multiproc_executor.get_file_store_init_method()
    assert method.startswith(f"file://{tmp_path}/vllm_dist_")
    assert method != multiproc_executor.get_file_store_init_method()


def test_without_a_runtime_directory_it_stays_in_the_temporary_directory(
    monkeypatch,
):
    REGISTRY.apply("platform")
    monkeypatch.delenv("VLLM_RPC_BASE_PATH", raising=False)
    method = multiproc_executor.get_file_store_init_method()
    assert method.startswith(f"file://{tempfile.gettempdir()}/vllm_dist_")


def test_without_the_patch_vllm_uses_the_temporary_directory(
    monkeypatch, tmp_path: Path
):
    REGISTRY.apply("platform")
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", str(tmp_path))
    with REGISTRY.reverted(PATCH.name):
        method = multiproc_executor.get_file_store_init_method()
    assert method.startswith(f"file://{tempfile.gettempdir()}/vllm_dist_")
