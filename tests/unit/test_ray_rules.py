"""The Ray executor on real VllmConfig objects, and the core share of a
worker Ray placed: with Ray, where workers run is known only once Ray has
placed them, so the main process plans no binding and each worker takes its
share of its own node. Expected shares are computed from this machine's
cores, so the tests hold on any machine."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from tests.config_support import build, build_recording
from vllm_bridge.config.parallel_rules import (
    RAY_V2_EXECUTOR_ENV,
    THREADS_BIND_ENV,
    numa_nodes_with_cpus,
    ray_worker_cores,
)
from vllm_bridge.device import cpu
from vllm_bridge.errors import BridgeConfigError

pytestmark = pytest.mark.usefixtures("restore_environ")
needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="the ray extra is not installed (pip install 'vllm-bridge[ray]'; "
    "scripts/test.sh installs it)",
)


@pytest.fixture(autouse=True)
def no_binding_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (THREADS_BIND_ENV, "OMP_NUM_THREADS", RAY_V2_EXECUTOR_ENV):
        monkeypatch.delenv(name, raising=False)


@needs_ray
def test_the_main_process_plans_no_binding_for_ray_workers(tiny_model: Path):
    config, changes = build_recording(
        tiny_model, tensor_parallel_size=2, distributed_executor_backend="ray"
    )
    assert config.parallel_config.use_ray
    assert f"env.{THREADS_BIND_ENV}" not in changes
    assert THREADS_BIND_ENV not in os.environ


@needs_ray
def test_the_kv_budget_says_it_sees_this_machine_only(tiny_model: Path):
    _, changes = build_recording(
        tiny_model, tensor_parallel_size=2, distributed_executor_backend="ray"
    )
    reason = changes["cache_config.kv_cache_memory_bytes"].reason
    assert "shared by the 2 workers Ray may place on this machine" in reason
    assert "give --kv-cache-memory-bytes per worker" in reason


@needs_ray
def test_vllms_legacy_ray_executor_is_refused_by_name(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv(RAY_V2_EXECUTOR_ENV, "0")
    with pytest.raises(BridgeConfigError) as error:
        build(tiny_model, tensor_parallel_size=2, distributed_executor_backend="ray")
    text = str(error.value)
    assert f"{RAY_V2_EXECUTOR_ENV}=0 selects vLLM's legacy Ray executor" in text
    assert "Unset it" in text


def test_nobind_leaves_the_worker_unbound(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(THREADS_BIND_ENV, "nobind")
    assert ray_worker_cores(0, 2) is None


def test_the_users_lists_are_taken_by_local_rank(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(THREADS_BIND_ENV, "0-1|2,5")
    assert ray_worker_cores(0, 2) == [0, 1]
    assert ray_worker_cores(1, 2) == [2, 5]


def test_lists_for_another_worker_count_are_refused(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(THREADS_BIND_ENV, "0-1")
    with pytest.raises(BridgeConfigError) as error:
        ray_worker_cores(0, 2)
    text = str(error.value)
    assert f"{THREADS_BIND_ENV}='0-1' gives 1 CPU list(s)" in text
    assert "Ray placed 2 worker(s) on this node" in text


def test_a_worker_alone_takes_its_numa_node_cores():
    cores = cpu.physical_cores(cpu.allowed_cpus())
    first_node = numa_nodes_with_cpus()[0]
    expected = [core for core in cores if cpu.numa_node_of(core) == first_node]
    assert ray_worker_cores(0, 1) == expected


def test_the_ray_nodes_cpu_count_caps_the_share():
    """A Ray node started with fewer CPUs than the host has (a container's
    CPU limit, or --num-cpus) gets no more threads than that."""
    assert ray_worker_cores(0, 1, node_cpus=1.0) == ray_worker_cores(0, 1)[:1]


def test_more_workers_than_cores_on_a_node_is_refused():
    cores = cpu.physical_cores(cpu.allowed_cpus())
    workers = len(cores) + 1  # more than NUMA nodes too: each has a core
    with pytest.raises(BridgeConfigError) as error:
        ray_worker_cores(0, workers)
    text = str(error.value)
    assert f"Ray placed {workers} workers on a node" in text
    assert "at most one vllm_cpu_worker slot per core" in text
