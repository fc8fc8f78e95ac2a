"""The multi-worker rules: each worker of a tensor- or pipeline-parallel
engine gets cores of its own: a NUMA node's, with its memory there, where
there is a node per worker; an equal share where the machine has fewer
nodes than workers (where vLLM's automatic binding refuses to start); on
Ray its share of its own node's cores. Under vLLM's simulated NUMA nodes
the plan stays vLLM's and is recorded."""

from __future__ import annotations

import multiprocessing
import os
from typing import TYPE_CHECKING

from vllm_bridge.config.audit import Change
from vllm_bridge.device import cpu
from vllm_bridge.errors import BridgeConfigError

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.utils.cpu_resource_utils import LogicalCPUInfo

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


def core_siblings(cpus: list[LogicalCPUInfo]) -> list[list[int]]:
    """The logical CPUs of each physical core among ``cpus``, in order of
    first appearance, each list ascending."""
    siblings: dict[int, list[int]] = {}
    for logical in cpus:
        siblings.setdefault(logical.physical_core, []).append(logical.id)
    return [sorted(ids) for ids in siblings.values()]


def node_core_groups(
    cpus: list[LogicalCPUInfo], nodes: list[int]
) -> tuple[list[list[int]], list[int]]:
    """The physical cores of NUMA node ``nodes[i]`` for worker ``i``, and
    the core kept for the engine-core and API-server processes (the last
    worker's last core, on machines above RESERVE_FROM_CORES cores, where
    that worker has another)."""
    groups = [
        sorted(
            ids[0] for ids in core_siblings([c for c in cpus if c.numa_node == node])
        )
        for node in nodes
    ]
    if sum(len(group) for group in groups) <= RESERVE_FROM_CORES or len(groups[-1]) < 2:
        return groups, []
    return [*groups[:-1], groups[-1][:-1]], groups[-1][-1:]


def simulated_numa_groups(
    cpus: list[LogicalCPUInfo], workers: int, reserve: int, every_sibling: bool
) -> tuple[list[list[int]], list[int]]:
    """vLLM's plan under VLLM_CPU_SIM_MULTI_NUMA (its
    ``OMPProcessManager``), as docs/distributed.md states it: ``cpus`` in
    NUMA order cut into one equal chunk per worker; in each chunk every
    logical CPU of a core (``every_sibling``: Arm, RISC-V) or its last
    sibling (x86); then ``reserve`` CPUs given to the engine-core and
    API-server processes, taken from the last workers first, unless the
    workers would keep none. Returns the workers' CPUs and the reserved ones."""
    ordered = sorted(cpus, key=lambda c: c.numa_node)
    size = len(ordered) // workers
    groups = [
        sorted(
            cpu_id
            for ids in core_siblings(ordered[rank * size : (rank + 1) * size])
            for cpu_id in (ids if every_sibling else ids[-1:])
        )
        for rank in range(workers)
    ]
    if sum(len(group) for group in groups) <= reserve:
        return groups, []
    counts = [reserve // workers] * workers
    for rank in range(workers - reserve % workers, workers):
        counts[rank] += 1
    reserved = [
        c for group, n in zip(groups, counts, strict=True) if n for c in group[-n:]
    ]
    return [
        group[: len(group) - n] for group, n in zip(groups, counts, strict=True)
    ], reserved


def _plan_text(groups: list[list[int]], memory_nodes: list[int]) -> str:
    return "; ".join(
        f"worker {rank}: {id_ranges(group) if group else 'no CPU'} (memory node {node})"
        for rank, (group, node) in enumerate(zip(groups, memory_nodes, strict=True))
    )


def _reserved_text(reserved: list[int]) -> str:
    if not reserved:
        return "no CPU kept for the engine-core and API-server processes"
    return (
        f"CPU(s) {id_ranges(reserved)} kept for the engine-core and API-server "
        "processes"
    )


def simulated_numa_plan(vllm_config: VllmConfig, layout: str) -> list[Change]:
    """Record the plan vLLM's simulated NUMA binding carries out.

    vLLM refuses a binding of its own beside the simulation, so this rule
    sets nothing: the audit shows what vLLM will do, computed from the same
    inputs (checked against vLLM's own planner in test_parallel_rules)."""
    import vllm.envs
    from vllm.platforms import CpuArchEnum, current_platform
    from vllm.utils.cpu_resource_utils import get_allowed_cpu_list

    parallel = vllm_config.parallel_config
    workers = parallel.local_world_size
    bind = os.environ.get(THREADS_BIND_ENV, "auto")
    if bind != "auto":
        raise BridgeConfigError(
            f"{SIM_MULTI_NUMA_ENV}={os.environ[SIM_MULTI_NUMA_ENV]!r} and "
            f"{THREADS_BIND_ENV}={bind!r} cannot go together: vLLM's simulated "
            f"NUMA nodes make their own binding. Unset {THREADS_BIND_ENV} (or "
            f"set it to 'auto'), or unset {SIM_MULTI_NUMA_ENV}."
        )
    cpus = get_allowed_cpu_list()
    if len(cpus) < workers:
        raise BridgeConfigError(
            f"{SIM_MULTI_NUMA_ENV} simulates a NUMA node per worker: {workers} "
            f"workers ({layout}) need at least {workers} CPUs; this process may "
            f"use {len(cpus)} ({id_ranges(sorted(c.id for c in cpus))}). Use "
            f"fewer workers or unset {SIM_MULTI_NUMA_ENV}."
        )
    if multiprocessing.parent_process() is not None:
        # An engine-core or API-server process re-reading the config the
        # main process reconciled: the plan is recorded there.
        return []
    arch = current_platform.get_cpu_architecture()
    if arch in (CpuArchEnum.ARM, CpuArchEnum.RISCV):
        every_sibling = True
    elif arch in (CpuArchEnum.X86, CpuArchEnum.S390X):
        every_sibling = False
    else:
        return []  # vLLM has a selector of its own there; not read here
    reserve = workers
    if vllm_config.kv_transfer_config:
        reserve += workers
    if vllm.envs.VLLM_CPU_NUM_OF_RESERVED_CPU is not None:
        reserve = vllm.envs.VLLM_CPU_NUM_OF_RESERVED_CPU
    groups, reserved = simulated_numa_groups(cpus, workers, reserve, every_sibling)
    # The worker processes are not narrowed to their CPUs: each allocates on
    # the node of the first CPU the process may use.
    memory_node = cpus[0].numa_node
    siblings = "every sibling of a core" if every_sibling else "one CPU per core"
    return [
        Change(
            "workers.binding",
            "auto",
            _plan_text(groups, [memory_node] * workers),
            f"{SIM_MULTI_NUMA_ENV} is set: vLLM's automatic binding simulates a "
            f"NUMA node per worker ({layout}), cutting the {len(cpus)} CPUs this "
            f"process may use into equal chunks in NUMA order ({siblings}), "
            f"{_reserved_text(reserved)}; memory is not simulated: every worker "
            f"allocates on node {memory_node}. vLLM carries this plan out",
            "rank_binding",
        )
    ]


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
    if os.environ.get(SIM_MULTI_NUMA_ENV, "0") != "0":
        return simulated_numa_plan(vllm_config, layout)
    bind = os.environ.get(THREADS_BIND_ENV)
    if bind not in (None, "auto", "nobind") and len(bind.split("|")) != ranks:
        raise BridgeConfigError(
            f"{THREADS_BIND_ENV}={bind!r} gives {len(bind.split('|'))} CPU list(s) "
            f"for {ranks} workers ({layout}): give one list per worker, "
            f"separated by '|' (e.g. '0-3|4-7'), or unset it."
        )
    if any(name in os.environ for name in (THREADS_BIND_ENV, "OMP_NUM_THREADS")):
        return []  # the user's binding
    nodes = numa_nodes_with_cpus()
    if len(nodes) >= ranks:
        from vllm.utils.cpu_resource_utils import get_allowed_cpu_list

        groups, kept = node_core_groups(get_allowed_cpu_list(), nodes[:ranks])
        why = (
            f"{ranks} workers ({layout}) on {len(nodes)} NUMA nodes: each worker "
            "gets the cores of a node of its own and its memory on that node "
            f"({_plan_text(groups, nodes[:ranks])}); vLLM's automatic binding "
            "picks the same nodes but leaves every worker process on all CPUs, "
            "so each would allocate its memory on CPU 0's node "
            "(vllm-project/vllm#50525)"
        )
    else:
        cores = cpu.physical_cores(cpu.allowed_cpus())
        if len(cores) < ranks:
            raise BridgeConfigError(
                f"{ranks} workers ({layout}) need a physical core each; this "
                f"process may use {len(cores)} ({id_ranges(cores)}). Use fewer "
                f"workers, give the process more cores, or set {THREADS_BIND_ENV} "
                "yourself."
            )
        groups, kept = worker_core_groups(cores, ranks)
        plan = "; ".join(
            f"worker {rank}: {id_ranges(group)}" for rank, group in enumerate(groups)
        )
        why = (
            f"{ranks} workers ({layout}) on {len(nodes)} NUMA node(s): vLLM's "
            "automatic binding wants a node per worker and refuses to start; "
            f"each worker gets cores of its own ({plan}) and its memory on "
            "their NUMA node"
        )
    value = "|".join(id_ranges(group) for group in groups)
    # Set in this (main) process: the engine core and its workers are
    # spawned from it and inherit the environment.
    os.environ[THREADS_BIND_ENV] = value
    reserve = (
        f"; core {kept[0]} stays with the engine-core and API-server processes"
        if kept
        else ""
    )
    return [
        Change(f"env.{THREADS_BIND_ENV}", "auto", value, why + reserve, "rank_binding")
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
