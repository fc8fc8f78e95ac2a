"""`vllm serve` across two nodes with vLLM's multiprocessing executor
(`--nnodes 2 --node-rank N --master-addr`), tensor parallel over both.

The two nodes are two simulated hosts on this machine: each node process
runs in a mount and UTS namespace of its own (`unshare -m -u`: its own
/dev/shm and host name) on the one network, with a core of its own. Node 0
runs the API server, the engine core and rank 0; node 1 (`--headless`)
rank 1. Their TP group cannot share memory, so it must fall back to gloo.

In the default suite; TEST_PARALLEL_LAYOUTS without "nodes2" leaves it out.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import (
    PARALLEL_LAYOUTS,
    PROMPTS,
    VENV_BIN,
    child_environ,
    short_temporary_directory,
)
from tests.engine.server_support import (
    Server,
    assert_greedy_text_is_transformers,
    free_port,
    start_server,
)
from tests.simulated_hosts import as_host, can_simulate_hosts

RPC_BASE_PATH = "VLLM_RPC_BASE_PATH"
# Probes (3 x 1 s) plus the workers' stop, with room for a busy machine.
LEADER_LOSS_BOUND_S = 30

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(
        "nodes2" not in PARALLEL_LAYOUTS,
        reason="TEST_PARALLEL_LAYOUTS leaves out nodes2",
    ),
    pytest.mark.skipif(
        not can_simulate_hosts(),
        reason="simulating two hosts needs unshare -m -u and mount (CAP_SYS_ADMIN)",
    ),
]


@pytest.fixture(scope="module")
def nodes(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    logs = tmp_path_factory.mktemp("nodes")
    # A temporary directory of the nodes' own (short: socket paths hold 107
    # bytes): the leader is killed below, so its runtime directory (patch
    # ipc-socket-directory) is not removed by it.
    temporary = short_temporary_directory()
    common = [
        "--nnodes",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        "--tensor-parallel-size",
        "2",
        "--enforce-eager",
        "--dtype",
        "float32",
    ]
    # A host's worker has its host's cores: here one core each.
    headless = subprocess.Popen(
        [
            *as_host("node1"),
            str(VENV_BIN / "vllm"),
            "serve",
            str(tiny_model),
            *common,
            "--node-rank",
            "1",
            "--headless",
        ],
        stdout=(logs / "node1.log").open("w"),
        stderr=subprocess.STDOUT,
        env=child_environ(
            {"VLLM_CPU_OMP_THREADS_BIND": "1", "TMPDIR": str(temporary)},
            unset=(RPC_BASE_PATH,),
        ),
    )
    server = start_server(
        tiny_model,
        logs / "node0.log",
        *common,
        "--node-rank",
        "0",
        env={"VLLM_CPU_OMP_THREADS_BIND": "0", "TMPDIR": str(temporary)},
        unset=(RPC_BASE_PATH,),
        launcher=as_host("node0"),
    )
    try:
        yield server, headless, logs
    finally:
        server.stop(signal.SIGTERM)
        headless.send_signal(signal.SIGTERM)
        try:
            headless.wait(60)
        except subprocess.TimeoutExpired:
            headless.kill()
        shutil.rmtree(temporary, ignore_errors=True)


Nodes = tuple[Server, subprocess.Popen, Path]


def test_greedy_text_matches_transformers(
    nodes: Nodes, tiny_model: Path, hf_greedy: list[list[int]]
):
    server, _, _ = nodes
    assert_greedy_text_is_transformers(server, tiny_model, hf_greedy[:3], PROMPTS[:3])


def test_the_group_across_hosts_falls_back_to_gloo(nodes: Nodes):
    _, _, logs = nodes
    for node in ("node0", "node1"):
        log = (logs / f"{node}.log").read_text()
        assert "CPU SHM communicator disabled for group tp:0" in log


def test_when_the_leader_dies_the_headless_node_stops_with_status_1(nodes: Nodes):
    """The engine core's node killed outright (SIGKILL to its every
    process): the headless node notices within seconds (patch
    headless-leader-watch; without it, it waited forever), names the lost
    address, and stops as on SIGTERM: its worker leaves by itself (patch
    remote-reader-shutdown; without it, vLLM killed the worker with SIGKILL
    9 s after the stop began), and it exits 1 for its supervisor."""
    server, headless, logs = nodes
    leader = psutil.Process(server.process.pid)
    for process in [leader, *leader.children(recursive=True)]:
        process.kill()
    killed_at = time.monotonic()
    status = headless.wait(60)
    stopped_s = time.monotonic() - killed_at
    log = (logs / "node1.log").read_text()
    assert status == 1, log[-3000:]
    assert "lost the engine core's node" in log, log[-3000:]
    assert "all workers exited gracefully" in log, log[-3000:]
    assert "sending SIGKILL" not in log
    assert stopped_s < LEADER_LOSS_BOUND_S, log[-3000:]
