"""The worker patch that names the CPU shared-memory segment after the
host's shared-memory domain.

Two hosts are simulated by two mount namespaces, each with its own /dev/shm
(what separates hosts for POSIX shared memory), on one network: each rank is
a real process building vLLM's CpuCommunicator over a real gloo group.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.server_support import free_port
from tests.simulated_hosts import as_host, can_simulate_hosts
from vllm_bridge.patches.worker.shm_group_host_name import shared_memory_domain

RANK_SCRIPT = Path(__file__).with_name("shm_rank.py")
RANK_TIMEOUT_S = 120


needs_namespaces = pytest.mark.skipif(
    not can_simulate_hosts(),
    reason="simulating two hosts needs unshare -m -u and mount (CAP_SYS_ADMIN)",
)


def run_ranks(
    own_shm_per_rank: bool, patch_disabled: bool = False
) -> list[subprocess.CompletedProcess[str]]:
    port = str(free_port())
    env = dict(os.environ)
    env.pop("VLLM_BRIDGE_DISABLE_PATCHES", None)
    if patch_disabled:
        env["VLLM_BRIDGE_DISABLE_PATCHES"] = "cpu-shm-host-aware-name"
    commands = []
    for rank in ("0", "1"):
        command = [sys.executable, str(RANK_SCRIPT), rank, port]
        if own_shm_per_rank:
            command = [*as_host(f"host{rank}"), *command]
        commands.append(command)
    ranks = [
        subprocess.Popen(
            command, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for command in commands
    ]
    done = []
    for rank in ranks:
        stdout, stderr = rank.communicate(timeout=RANK_TIMEOUT_S)
        done.append(
            subprocess.CompletedProcess(rank.args, rank.returncode, stdout, stderr)
        )
    return done


def results(ranks: list[subprocess.CompletedProcess[str]]) -> list[dict[str, object]]:
    for rank in ranks:
        assert rank.returncode == 0, rank.stderr[-2000:]
    return [json.loads(rank.stdout.strip().splitlines()[-1]) for rank in ranks]


DOMAIN_OF_A_CHILD = (
    "from vllm_bridge.patches.worker.shm_group_host_name import "
    "shared_memory_domain; print(shared_memory_domain())"
)


def test_a_process_sharing_dev_shm_shares_the_domain():
    child = subprocess.run(
        [sys.executable, "-c", DOMAIN_OF_A_CHILD],
        capture_output=True,
        text=True,
        check=True,
    )
    assert child.stdout.strip() == shared_memory_domain()


@needs_namespaces
def test_a_process_with_its_own_dev_shm_has_another_domain():
    child = subprocess.run(
        [*as_host("other"), sys.executable, "-c", DOMAIN_OF_A_CHILD],
        capture_output=True,
        text=True,
        check=True,
    )
    assert child.stdout.strip() not in ("", shared_memory_domain())


def test_ranks_on_one_host_keep_shared_memory():
    """Where the kernel library has the shared-memory collectives (not in
    the AVX2 build), a group on one host uses them."""
    for result in results(run_ranks(own_shm_per_rank=False)):
        assert result["sum"] == [3.0] * 4
        assert result["shared_memory"] is result["shared_memory_kernels"]


@needs_namespaces
def test_ranks_on_two_hosts_fall_back_to_gloo():
    for result in results(run_ranks(own_shm_per_rank=True)):
        assert result["sum"] == [3.0] * 4
        assert result["shared_memory"] is False


@needs_namespaces
def test_without_the_patch_ranks_on_two_hosts_fail_in_shared_memory():
    """Both ranks agree on one segment name, each opens it in its own
    /dev/shm, and the peer's never appears. A kernel library without the
    shared-memory collectives (vLLM's AVX2 build) never takes that path."""
    import torch
    import vllm._custom_ops  # noqa: F401  (loads torch.ops._C)

    ranks = run_ranks(own_shm_per_rank=True, patch_disabled=True)
    if not hasattr(torch.ops._C, "init_shm_manager"):
        for result in results(ranks):
            assert result["shared_memory"] is False
        return
    for rank in ranks:
        assert rank.returncode != 0
        assert "open shm in SHMManager failed" in rank.stderr, rank.stderr[-2000:]
