"""Rule rank_binding and the per-worker KV budget on real VllmConfig
objects: a tensor- or pipeline-parallel engine gets a core plan per worker:
an equal share where this machine has fewer NUMA nodes than workers (vLLM's
automatic binding refuses to start there), a node's cores where it has
enough; under vLLM's simulated NUMA nodes vLLM's own plan is recorded, as
vLLM's planner computes it. The expected plan is computed from this
machine's cores, so the tests hold on any machine; a mocked 2-socket
topology covers the node-per-worker case."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm.config import VllmConfig
from vllm.utils.cpu_resource_utils import LogicalCPUInfo

from tests.config_support import build, build_recording
from vllm_bridge.config import parallel_rules
from vllm_bridge.config.parallel_rules import (
    THREADS_BIND_ENV,
    id_ranges,
    numa_nodes_with_cpus,
    split_cores,
)
from vllm_bridge.device import cpu
from vllm_bridge.errors import BridgeConfigError

pytestmark = pytest.mark.usefixtures("restore_environ")
OPTION = f"env.{THREADS_BIND_ENV}"


@pytest.fixture(autouse=True)
def no_binding_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (THREADS_BIND_ENV, "OMP_NUM_THREADS", "VLLM_CPU_SIM_MULTI_NUMA"):
        monkeypatch.delenv(name, raising=False)


def expected_plan(workers: int) -> str:
    """What the rule must set on this machine: a NUMA node per worker where
    there are enough, else an equal share of the physical cores; a core kept
    for the other processes above RESERVE_FROM_CORES cores."""
    nodes = numa_nodes_with_cpus()
    if len(nodes) >= workers:
        groups = [
            cpu.physical_cores(
                [c for c in cpu.allowed_cpus() if cpu.numa_node_of(c) == n]
            )
            for n in nodes[:workers]
        ]
    else:
        groups = split_cores(cpu.physical_cores(cpu.allowed_cpus()), workers)
    if sum(map(len, groups)) > parallel_rules.RESERVE_FROM_CORES:
        cores = [c for group in groups for c in group][:-1]
        if len(nodes) >= workers:
            groups[-1] = groups[-1][:-1]
        else:
            groups = split_cores(cores, workers)
    return "|".join(id_ranges(group) for group in groups)


@pytest.mark.parametrize(
    "layout", [{"tensor_parallel_size": 2}, {"pipeline_parallel_size": 2}]
)
def test_two_workers_get_cores_of_their_own(tiny_model: Path, layout: dict):
    config, changes = build_recording(tiny_model, **layout)
    plan = expected_plan(2)
    assert changes[OPTION].applied == plan
    assert changes[OPTION].rule == "rank_binding"
    assert "worker 0: " in changes[OPTION].reason
    assert os.environ[THREADS_BIND_ENV] == plan
    assert config.parallel_config.local_world_size == 2


def test_one_worker_is_left_to_thread_binding(tiny_model: Path):
    _, changes = build_recording(tiny_model)
    assert changes.get(OPTION) is None or changes[OPTION].rule == "thread_binding"


def test_the_users_binding_stays(tiny_model: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(THREADS_BIND_ENV, "0|0")
    _, changes = build_recording(tiny_model, tensor_parallel_size=2)
    assert OPTION not in changes
    assert os.environ[THREADS_BIND_ENV] == "0|0"


def test_a_binding_without_a_list_per_worker_is_refused(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
):
    """vLLM would fail in the engine core ("Given number of CPU id list
    ... doesn't match local world size")."""
    monkeypatch.setenv(THREADS_BIND_ENV, "0-1")
    with pytest.raises(BridgeConfigError) as error:
        build(tiny_model, pipeline_parallel_size=2)
    text = str(error.value)
    assert f"{THREADS_BIND_ENV}='0-1' gives 1 CPU list(s) for 2 workers" in text
    assert "one list per worker" in text


def vllms_own_plan(config: VllmConfig) -> tuple[list[list[int]], list[int]]:
    """The per-worker CPUs and reserved CPUs vLLM's executor computes for
    ``config`` (its OMPProcessManager, as built in the engine core, where
    the local data-parallel rank is set)."""
    from vllm.utils.ompmultiprocessing import OMPProcessManager

    config.parallel_config.data_parallel_rank_local = 0
    manager = OMPProcessManager(config)
    return manager.cpu_lists, manager.reserved_cpu_list


def test_simulated_numa_plan_is_recorded_as_vllm_computes_it(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
):
    """vLLM refuses a binding of its own beside VLLM_CPU_SIM_MULTI_NUMA;
    the audit shows its plan and the memory node, and the variable stays."""
    monkeypatch.setenv("VLLM_CPU_SIM_MULTI_NUMA", "1")
    config, changes = build_recording(tiny_model, tensor_parallel_size=2)
    assert OPTION not in changes and THREADS_BIND_ENV not in os.environ
    recorded = changes["workers.binding"]
    assert recorded.rule == "rank_binding" and recorded.requested == "auto"
    groups, reserved = vllms_own_plan(config)
    memory_node = cpu.numa_node_of(min(cpu.allowed_cpus()))
    assert recorded.applied == "; ".join(
        f"worker {rank}: {id_ranges(group)} (memory node {memory_node})"
        for rank, group in enumerate(groups)
    )
    assert "memory is not simulated" in recorded.reason
    if reserved:
        assert f"CPU(s) {id_ranges(reserved)} kept" in recorded.reason
    else:
        assert "no CPU kept" in recorded.reason


def two_socket_machine() -> list[LogicalCPUInfo]:
    """2 NUMA nodes x 6 cores x 2 hyper-threads, numbered as Linux numbers
    them (siblings of core k: CPUs k and k + 12)."""
    return sorted(
        (
            LogicalCPUInfo(
                id=core + 12 * thread, physical_core=core, numa_node=core // 6
            )
            for core in range(12)
            for thread in range(2)
        ),
        key=lambda c: c.id,
    )


@pytest.fixture
def on_two_sockets(monkeypatch: pytest.MonkeyPatch) -> list[LogicalCPUInfo]:
    """vLLM's topology readers answering for a 2-socket machine: a mock,
    because no machine here has two NUMA nodes; vLLM's own planner and
    vllm-bridge's rule both read the topology through them."""
    from vllm.utils import cpu_resource_utils

    machine = two_socket_machine()
    monkeypatch.setattr(cpu_resource_utils, "get_allowed_cpu_list", lambda: machine)
    monkeypatch.setattr(cpu_resource_utils, "get_visible_memory_node", lambda: [0, 1])
    return machine


def test_a_node_per_worker_binds_each_worker_to_its_node(
    tiny_model: Path, on_two_sockets: list[LogicalCPUInfo]
):
    """vLLM's own plan picks the same nodes but leaves every worker process
    on all CPUs, so each allocates its memory on CPU 0's node (vllm#50525):
    the rule gives each worker its node's cores (one CPU per core), which
    BridgeWorker narrows the process to."""
    config, changes = build_recording(tiny_model, tensor_parallel_size=2)
    # 12 cores in all: one (CPU 11) is kept for the engine-core process
    assert changes[OPTION].applied == "0-5|6-10"
    assert "vllm-project/vllm#50525" in changes[OPTION].reason
    assert "worker 1: 6-10 (memory node 1)" in changes[OPTION].reason
    assert os.environ[THREADS_BIND_ENV] == "0-5|6-10"
    vllm_groups, _ = vllms_own_plan(config)
    node_of = {c.id: c.numa_node for c in on_two_sockets}
    assert [{node_of[c] for c in group} for group in vllm_groups] == [{0}, {1}]


def test_simulated_numa_plan_on_two_sockets_is_vllms(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch, on_two_sockets: list
):
    """The simulation on a machine with hyper-threads and more CPUs than
    workers: chunks in NUMA order, the last sibling of each core, a CPU
    per worker kept for the other processes, as vLLM computes it."""
    monkeypatch.setenv("VLLM_CPU_SIM_MULTI_NUMA", "1")
    config, changes = build_recording(tiny_model, pipeline_parallel_size=2)
    groups, reserved = vllms_own_plan(config)
    assert reserved
    assert changes["workers.binding"].applied == "; ".join(
        f"worker {rank}: {id_ranges(group)} (memory node 0)"
        for rank, group in enumerate(groups)
    )
    assert f"CPU(s) {id_ranges(reserved)} kept" in changes["workers.binding"].reason


def test_simulated_numa_nodes_refuse_a_binding_of_the_users(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
):
    """vLLM would stop in the engine core on an assertion without text."""
    monkeypatch.setenv("VLLM_CPU_SIM_MULTI_NUMA", "1")
    monkeypatch.setenv(THREADS_BIND_ENV, "0|1")
    with pytest.raises(BridgeConfigError) as error:
        build(tiny_model, tensor_parallel_size=2)
    text = str(error.value)
    assert "VLLM_CPU_SIM_MULTI_NUMA='1' and VLLM_CPU_OMP_THREADS_BIND='0|1'" in text
    assert "Unset VLLM_CPU_OMP_THREADS_BIND" in text


@pytest.fixture
def one_cpu() -> Iterator[int]:
    """This process narrowed to one CPU (the real affinity mask), restored
    afterwards."""
    before = os.sched_getaffinity(0)
    only = min(before)
    os.sched_setaffinity(0, {only})
    try:
        yield only
    finally:
        os.sched_setaffinity(0, before)


def test_simulated_numa_nodes_need_a_cpu_per_worker(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch, one_cpu: int
):
    monkeypatch.setenv("VLLM_CPU_SIM_MULTI_NUMA", "1")
    with pytest.raises(BridgeConfigError) as error:
        build(tiny_model, tensor_parallel_size=2)
    text = str(error.value)
    assert "VLLM_CPU_SIM_MULTI_NUMA simulates a NUMA node per worker" in text
    assert f"need at least 2 CPUs; this process may use 1 ({one_cpu})" in text


def test_more_workers_than_cores_is_refused(tiny_model: Path, one_cpu: int):
    with pytest.raises(BridgeConfigError) as error:
        build(tiny_model, tensor_parallel_size=2)
    text = str(error.value)
    assert "2 workers (tensor_parallel_size=2 x pipeline_parallel_size=1)" in text
    assert f"may use 1 ({one_cpu})" in text
    assert f"set {THREADS_BIND_ENV} yourself" in text


def test_kv_budget_is_per_worker(tiny_model: Path):
    """kv_cache_memory_bytes is what one worker allocates: two workers on
    this node split the share of its memory. The share is chosen to give
    one worker about 40 MiB, under what the tiny model's sequences could
    use (64 MiB), so that the share decides."""
    share = {"kv_cache_share": 40 * 2**20 / cpu.available_memory_bytes()}
    one = build(tiny_model, additional_config=share).cache_config
    two, changes = build_recording(
        tiny_model, tensor_parallel_size=2, additional_config=share
    )
    assert two.cache_config.kv_cache_memory_bytes == pytest.approx(
        one.kv_cache_memory_bytes / 2, rel=0.1
    )
    reason = changes["cache_config.kv_cache_memory_bytes"].reason
    assert "shared by the 2 workers on this node" in reason


@pytest.mark.parametrize(
    ("cores", "ranks", "groups"),
    [
        ([0, 1], 2, [[0], [1]]),
        ([0, 1, 2, 3, 4], 2, [[0, 1, 2], [3, 4]]),
        ([0, 2, 4, 6], 4, [[0], [2], [4], [6]]),
    ],
)
def test_split_cores(cores: list[int], ranks: int, groups: list[list[int]]):
    assert split_cores(cores, ranks) == groups
