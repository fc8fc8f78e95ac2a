"""The multi-worker rules: each worker of a tensor- or pipeline-parallel
engine gets cores of its own, also where the machine has fewer NUMA nodes
than workers (where vLLM's automatic binding refuses to start), and on Ray
each worker takes its share of its own node's cores."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from vllm_bridge.config.audit import Change
from vllm_bridge.device import cpu
from vllm_bridge.errors import BridgeConfigError

if TYPE_CHECKING:
    from vllm.config import VllmConfig

    from vllm_bridge.config.schema import BridgeConfig

THREADS_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
SIM_MULTI_NUMA_ENV = "VLLM_CPU_SIM_MULTI_NUMA"
RAY_V2_EXECUTOR_ENV = "VLLM_USE_RAY_V2_EXECUTOR_BACKEND"
RESERVE_FROM_CORES = 8
"""Above this many cores, one is kept for the engine-core and API-server
processes (as vLLM's own binding does); below, a core is too large a share
to leave to processes that need a few percent of one."""


def id_ranges(ids: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``"0-2,5"`` (vLLM's CPU list syntax)."""
    parts: list[str] = []
    start = previous = ids[0]
    for cpu_id in [*ids[1:], None]:
        if cpu_id is not None and cpu_id == previous + 1:
            previous = cpu_id
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if cpu_id is not None:
            start = previous = cpu_id
    return ",".join(parts)


def split_cores(cores: list[int], ranks: int) -> list[list[int]]:
    """``cores`` in ``ranks`` contiguous groups whose sizes differ by at
    most one (the first groups take the remainder)."""
    size, extra = divmod(len(cores), ranks)
    groups, start = [], 0
    for rank in range(ranks):
        end = start + size + (rank < extra)
        groups.append(cores[start:end])
        start = end
    return groups


def worker_core_groups(
    cores: list[int], workers: int
) -> tuple[list[list[int]], list[int]]:
    """One contiguous group of ``cores`` per worker, and the core kept for
    the engine-core and API-server processes (none on small machines)."""
    kept = cores[-1:] if len(cores) > RESERVE_FROM_CORES else []
    return split_cores(cores[: len(cores) - len(kept)], workers), kept


def numa_nodes_with_cpus() -> list[int]:
    from vllm.utils.cpu_resource_utils import (
        get_allowed_cpu_list,
        get_visible_memory_node,
    )

    visible = set(get_visible_memory_node())
    return sorted({c.numa_node for c in get_allowed_cpu_list()} & visible)


def rank_binding(vllm_config: VllmConfig, bridge: BridgeConfig) -> list[Change]:
    parallel = vllm_config.parallel_config
    ranks = parallel.local_world_size
    if ranks <= 1 or parallel.data_parallel_size != 1 or parallel.use_ray:
        # On Ray, where workers run is known only once Ray has placed them:
        # each worker binds itself (ray_worker_cores).
        return []
    layout = (
        f"tensor_parallel_size={parallel.tensor_parallel_size} x "
        f"pipeline_parallel_size={parallel.pipeline_parallel_size}"
    )
    bind = os.environ.get(THREADS_BIND_ENV)
    if bind not in (None, "auto", "nobind") and len(bind.split("|")) != ranks:
        raise BridgeConfigError(
            f"{THREADS_BIND_ENV}={bind!r} gives {len(bind.split('|'))} CPU list(s) "
            f"for {ranks} workers ({layout}): give one list per worker, "
            f"separated by '|' (e.g. '0-3|4-7'), or unset it."
        )
    if any(
        name in os.environ
        for name in (THREADS_BIND_ENV, "OMP_NUM_THREADS", SIM_MULTI_NUMA_ENV)
    ):
        return []  # the user's binding, or vLLM's simulated NUMA plan
    nodes = numa_nodes_with_cpus()
    if len(nodes) >= ranks:
        return []  # vLLM's binding gives each worker a NUMA node of its own
    cores = cpu.physical_cores(cpu.allowed_cpus())
    if len(cores) < ranks:
        raise BridgeConfigError(
            f"{ranks} workers ({layout}) need a physical core each; this process "
            f"may use {len(cores)} ({id_ranges(cores)}). Use fewer workers, give "
            f"the process more cores, or set {THREADS_BIND_ENV} yourself."
        )
    groups, kept = worker_core_groups(cores, ranks)
    value = "|".join(id_ranges(group) for group in groups)
    # Set in this (main) process: the engine core and its workers are
    # spawned from it and inherit the environment.
    os.environ[THREADS_BIND_ENV] = value
    plan = "; ".join(
        f"worker {rank}: {id_ranges(group)}" for rank, group in enumerate(groups)
    )
    reserve = (
        f"; core {kept[0]} stays with the engine-core and API-server processes"
        if kept
        else ""
    )
    return [
        Change(
            f"env.{THREADS_BIND_ENV}",
            "auto",
            value,
            f"{ranks} workers ({layout}) on {len(nodes)} NUMA node(s): vLLM's "
            "automatic binding wants a node per worker and refuses to start; "
            f"each worker gets cores of its own ({plan}) and its memory on "
            f"their NUMA node{reserve}",
            "rank_binding",
        )
    ]


def ray_executor(vllm_config: VllmConfig, bridge: BridgeConfig) -> list[Change]:
    """vLLM's legacy Ray executor cannot run CPU workers (it creates them
    with a resource request Ray refuses and needs GPU channels): refuse it
    by name rather than fail inside Ray."""
    import vllm.envs

    if not vllm_config.parallel_config.use_ray:
        return []
    if not vllm.envs.VLLM_USE_RAY_V2_EXECUTOR_BACKEND:
        raise BridgeConfigError(
            f"{RAY_V2_EXECUTOR_ENV}=0 selects vLLM's legacy Ray executor, which "
            "vllm-bridge does not run on the CPU. Unset it (vLLM's default Ray "
            "executor serves CPU workers)."
        )
    return []


def ray_worker_cores(
    local_rank: int, local_workers: int, node_cpus: float | None = None
) -> list[int] | None:
    """The cores of the worker ``local_rank`` of ``local_workers`` that Ray
    placed on this node, or None for no binding.

    vLLM binds workers where its multiprocessing executor spawns them; Ray
    actors get no binding (and OMP_NUM_THREADS=1 from Ray), and Ray assigns
    no particular cores. So each worker takes its share of the node: the
    user's per-worker lists (``VLLM_CPU_OMP_THREADS_BIND="0-3|4-7"``, by
    local rank; set on each node, or once beside `vllm serve`), else a NUMA
    node of its own where there are enough, else an equal part of the node's
    physical cores; at most its part of ``node_cpus``, the CPUs the Ray node
    declares (Ray counts a container's CPU limit, which a binding to every
    core of the host would exceed)."""
    from vllm.utils.cpu_resource_utils import get_allowed_cpu_list, parse_id_list

    bind = os.environ.get(THREADS_BIND_ENV, "auto")
    if bind == "nobind":
        return None
    if bind != "auto":
        lists = bind.split("|")
        if len(lists) != local_workers:
            raise BridgeConfigError(
                f"{THREADS_BIND_ENV}={bind!r} gives {len(lists)} CPU list(s), but "
                f"Ray placed {local_workers} worker(s) on this node: give one list "
                "per worker a node hosts, separated by '|', or unset it."
            )
        return parse_id_list(lists[local_rank])
    cores = cpu.physical_cores(cpu.allowed_cpus())
    nodes = numa_nodes_with_cpus()
    limit = len(cores) if node_cpus is None else max(1, int(node_cpus) // local_workers)
    if len(nodes) >= local_workers:
        node = nodes[local_rank]
        on_node = {c.id for c in get_allowed_cpu_list() if c.numa_node == node}
        return [core for core in cores if core in on_node][:limit]
    if len(cores) < local_workers:
        raise BridgeConfigError(
            f"Ray placed {local_workers} workers on a node whose worker processes "
            f"may use {len(cores)} physical core(s): declare at most one "
            f"vllm_cpu_worker slot per core on that node, or set {THREADS_BIND_ENV}."
        )
    groups, _ = worker_core_groups(cores, local_workers)
    return groups[local_rank][:limit]
