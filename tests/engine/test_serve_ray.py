"""`vllm serve --distributed-executor-backend ray --tensor-parallel-size 2` on
a Ray cluster of two Ray nodes on this machine, made with Ray's own cluster
utilities; each node declares one vllm_cpu_worker slot, so Ray places one
worker on each. Queried with the openai client; the text must be Hugging
Face transformers' greedy text on the same weights.

Two Ray nodes on one machine see the same cores, so each node is given a
core of its own the way a user pins a host's workers: VLLM_CPU_OMP_THREADS_BIND
in the node's environment (its workers read it before the driver's)."""

from __future__ import annotations

import importlib.util
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import PROMPTS
from tests.engine.server_support import (
    Server,
    assert_greedy_text_is_transformers,
    start_server,
)
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


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator:
    from ray.cluster_utils import Cluster

    head, other = (
        {
            "num_cpus": 1,
            "resources": {WORKER_RESOURCE: 1},
            "env_vars": {"VLLM_CPU_OMP_THREADS_BIND": str(core)},
        }
        for core in node_cores()
    )
    cluster = Cluster(initialize_head=True, head_node_args=head)
    cluster.add_node(**other)
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        cluster.shutdown()


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
    workers = WORKER_LINE.findall(server.log())
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
