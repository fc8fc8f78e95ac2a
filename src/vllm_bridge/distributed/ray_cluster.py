"""The Ray cluster a CPU engine's workers run on: the resource that stands
for a worker slot, and joining (or starting) the cluster with it declared.

Ray is imported inside the functions: this module is read by processes that
never use Ray (the platform class names the resource)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vllm_bridge.device import cpu
from vllm_bridge.log import get_logger

if TYPE_CHECKING:
    from vllm.config import ParallelConfig

WORKER_RESOURCE = "vllm_cpu_worker"
"""The Ray resource one vLLM CPU worker takes (one placement-group bundle of
it per worker). Ray knows no CPU "device" to count workers by, and refuses
its own ``CPU`` resource where vLLM asks for a device resource, so each Ray
node declares how many workers it can host:
``ray start ... --resources='{"vllm_cpu_worker": 1}'`` (one per NUMA node is
the usual choice)."""

logger = get_logger("ray")


def node_resource_flag(slots: int) -> str:
    return f"--resources='{{\"{WORKER_RESOURCE}\": {slots}}}'"


def local_worker_slots() -> int:
    """Slots of a Ray node started on this machine by vLLM itself: a
    worker needs a physical core of its own."""
    return len(cpu.physical_cores(cpu.allowed_cpus()))


def join_or_start(parallel_config: ParallelConfig, address: str | None) -> None:
    """Join the Ray cluster at ``address``, else the running one (RAY_ADDRESS,
    or the one started on this machine), as vLLM would; where there is
    none, start a one-node cluster that declares this machine's worker
    slots, which vLLM's own ``ray.init()`` would leave out."""
    import ray

    if ray.is_initialized():
        return
    if os.environ.get("RAY_USAGE_STATS_ENABLED", "0") != "1":
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    runtime_env = parallel_config.ray_runtime_env
    if address is not None:
        ray.init(address=address, runtime_env=runtime_env)
        return
    try:
        ray.init(address="auto", runtime_env=runtime_env)
        return
    except ConnectionError:
        pass
    slots = local_worker_slots()
    logger.info(
        "No Ray cluster is running: starting one on this machine with %d "
        "%s slot(s) (one per physical core).",
        slots,
        WORKER_RESOURCE,
    )
    ray.init(runtime_env=runtime_env, resources={WORKER_RESOURCE: slots})


def slot_shortfall(world_size: int) -> str | None:
    """Why the cluster cannot place ``world_size`` workers now, or None."""
    import ray

    slots = int(ray.cluster_resources().get(WORKER_RESOURCE, 0))
    if slots >= world_size:
        return None
    return (
        f"The Ray cluster offers {slots} {WORKER_RESOURCE!r} slot(s) for "
        f"{world_size} vLLM CPU workers: vLLM waits until Ray nodes with "
        f"enough slots join. Start each node with `ray start ... "
        f"{node_resource_flag(1)}` (one slot per worker it should host), or "
        "use fewer workers."
    )


def with_worker_slots(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def initialize_ray_cluster(
        parallel_config: ParallelConfig,
        ray_address: str | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        import ray

        join_or_start(parallel_config, ray_address)
        own_group = parallel_config.placement_group is None and (
            ray.util.get_current_placement_group() is None
        )
        if own_group:
            shortfall = slot_shortfall(parallel_config.world_size)
            if shortfall is not None:
                # A warning, not an error: as for GPUs, an autoscaler may
                # still add the nodes vLLM waits for.
                logger.warning(shortfall)
        return original(parallel_config, ray_address, *args, **kwargs)

    return initialize_ray_cluster


def node_cpu_count() -> float | None:
    """The CPUs the Ray node of this (actor) process declares."""
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node["NodeID"] == node_id:
            return node["Resources"].get("CPU")
    return None
