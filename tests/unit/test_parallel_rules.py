"""Rule rank_binding and the per-worker KV budget on real VllmConfig
objects: a tensor- or pipeline-parallel engine gets a core plan per worker
where this machine has fewer NUMA nodes than workers (vLLM's automatic
binding refuses to start there), and keeps vLLM's plan where it has enough.
The expected plan is computed from this machine's cores, so the tests hold
on any machine."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

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


def expected_plan(workers: int) -> str | None:
    """What the rule must set on this machine: None where each worker can
    have a NUMA node of its own (vLLM's plan stays)."""
    if len(numa_nodes_with_cpus()) >= workers:
        return None
    cores = cpu.physical_cores(cpu.allowed_cpus())
    if len(cores) > parallel_rules.RESERVE_FROM_CORES:
        cores = cores[:-1]
    return "|".join(id_ranges(group) for group in split_cores(cores, workers))


@pytest.mark.parametrize(
    "layout", [{"tensor_parallel_size": 2}, {"pipeline_parallel_size": 2}]
)
def test_two_workers_get_cores_of_their_own(tiny_model: Path, layout: dict):
    config, changes = build_recording(tiny_model, **layout)
    plan = expected_plan(2)
    if plan is None:
        assert OPTION not in changes
        return
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


def test_simulated_numa_nodes_keep_vllms_plan(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("VLLM_CPU_SIM_MULTI_NUMA", "1")
    _, changes = build_recording(tiny_model, tensor_parallel_size=2)
    assert OPTION not in changes


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
