"""`vllm serve --distributed-executor-backend ray --tensor-parallel-size 2` on
a Ray cluster of two Ray nodes on this machine; each node declares one
vllm_cpu_worker slot, so Ray places one worker on each. Queried with the
openai client; the text must be Hugging Face transformers' greedy text on
the same weights.

The head node comes from Ray's own cluster utilities
(`ray.cluster_utils.Cluster`); the second joins with Ray's `ray start`, as a
simulated host of its own where this machine allows it (its own /dev/shm:
tests/simulated_hosts.py), so the TP group spans two shared-memory domains
and must fall back to gloo, as across real machines (the case the
cpu-shm-host-aware-name patch exists for). Two Ray nodes on one machine see
the same cores, so each node is given a core of its own the way a user pins
a host's workers: VLLM_CPU_OMP_THREADS_BIND in the node's environment (its
workers read it before the driver's)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import PROMPTS, VENV_BIN
from tests.engine.server_support import (
    Server,
    assert_greedy_text_is_transformers,
    start_server,
)
from tests.simulated_hosts import as_host, can_simulate_hosts
from vllm_bridge.device import cpu
from vllm_bridge.distributed.ray_cluster import WORKER_RESOURCE, slot_shortfall

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(
        importlib.util.find_spec("ray") is None,
        reason="the ray extra is not installed (pip install 'vllm-bridge[ray]'; "
        "scripts/test.sh installs it)",
    ),
]

WORKER_LINE = re.compile(
    r"vllm-bridge Ray worker (\d+) of (\d+) on Ray node (\w+) bound to CPUs "
    r"(\S+) with (\d+) thread"
)


def node_cores() -> list[int]:
    """One core per Ray node (two nodes; the same one on a 1-core machine)."""
    cores = cpu.physical_cores(cpu.allowed_cpus())
    return [cores[0], cores[-1]]


def node_args(core: int) -> dict:
    return {
        "num_cpus": 1,
        "resources": {WORKER_RESOURCE: 1},
        "env_vars": {"VLLM_CPU_OMP_THREADS_BIND": str(core)},
    }


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from ray.cluster_utils import Cluster

    head_core, other_core = node_cores()
    cluster = Cluster(initialize_head=True, head_node_args=node_args(head_core))
    other = None
    if can_simulate_hosts():
        args = node_args(other_core)
        other = subprocess.Popen(
            [
                *as_host("raynode1"),
                str(VENV_BIN / "ray"),
                "start",
                f"--address={cluster.address}",
                f"--num-cpus={args['num_cpus']}",
                f"--resources={json.dumps(args['resources'])}",
                "--block",
            ],
            env={**os.environ, **args["env_vars"]},
            stdout=(tmp_path_factory.mktemp("raynode1") / "ray.log").open("w"),
            stderr=subprocess.STDOUT,
        )
    else:
        cluster.add_node(**node_args(other_core))
    try:
        cluster.wait_for_nodes()
        wait_for_ray_nodes(cluster.address, 2)
        yield cluster
    finally:
        if other is not None:
            other.terminate()
            other.wait(60)
        cluster.shutdown()


def wait_for_ray_nodes(address: str, count: int, timeout_s: float = 60) -> None:
    import ray

    ray.init(address=address)
    try:
        deadline = time.monotonic() + timeout_s
        while sum(node["Alive"] for node in ray.nodes()) < count:
            assert time.monotonic() < deadline, f"{count} Ray nodes not up"
            time.sleep(0.2)
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def server(
    ray_cluster, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("ray") / "serve.log"
    server = start_server(
        tiny_model,
        log,
        "--distributed-executor-backend",
        "ray",
        "--tensor-parallel-size",
        "2",
        "--enforce-eager",
        "--dtype",
        "float32",
        # Ray prints a line that several actors log alike only once.
        env={"RAY_ADDRESS": ray_cluster.address, "RAY_DEDUP_LOGS": "0"},
    )
    try:
        yield server
    finally:
        server.stop(signal.SIGTERM)


def test_greedy_text_matches_transformers(
    server: Server, tiny_model: Path, hf_greedy: list[list[int]]
):
    assert_greedy_text_is_transformers(server, tiny_model, hf_greedy[:3], PROMPTS[:3])


def test_one_worker_on_each_ray_node_bound_to_its_node_core(server: Server):
    # Each Ray node's log monitor may forward a worker's line once more.
    workers = set(WORKER_LINE.findall(server.log()))
    assert len(workers) == 2, server.log()[-3000:]
    assert len({node for _, _, node, _, _ in workers}) == 2
    assert sorted(int(cpus) for *_, cpus, _ in workers) == sorted(node_cores())
    for local_rank, local_workers, _, _, threads in workers:
        assert (local_rank, local_workers, threads) == ("0", "1", "1")


def test_a_cluster_short_of_worker_slots_is_named_with_the_fix(ray_cluster):
    import ray

    ray.init(address=ray_cluster.address)
    try:
        assert slot_shortfall(2) is None
        message = slot_shortfall(3)
    finally:
        ray.shutdown()
    assert message is not None
    assert f"2 '{WORKER_RESOURCE}' slot(s) for 3 vLLM CPU workers" in message
    assert f"--resources='{{\"{WORKER_RESOURCE}\": 1}}'" in message


@pytest.mark.skipif(
    not can_simulate_hosts(),
    reason="simulating a second host needs unshare -m -u and mount (CAP_SYS_ADMIN)",
)
def test_the_group_across_two_hosts_falls_back_to_gloo(server: Server):
    assert "CPU SHM communicator disabled for group tp:0" in server.log()
