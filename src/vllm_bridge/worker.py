"""The worker class vllm-bridge selects: vLLM's CPU worker, with the
process-level setup it lacks done before anything runs."""

from __future__ import annotations

import os
from typing import Any

import torch
from vllm.v1.worker.cpu_worker import CPUWorker

from vllm_bridge import diagnostics
from vllm_bridge.attention.direct_call import bind_around_forward
from vllm_bridge.config.parallel_rules import (
    THREADS_BIND_ENV,
    id_ranges,
    ray_worker_cores,
)
from vllm_bridge.device.cpu import (
    amx_tile_permitted,
    bind_process_to,
    rank_cpus,
    release_free_heap,
    request_amx_permission,
)
from vllm_bridge.distributed.ray_cluster import node_cpu_count
from vllm_bridge.fusion import manager as fusion_manager
from vllm_bridge.fusion.catalogue import ATTENTION_DIRECT
from vllm_bridge.log import get_logger
from vllm_bridge.ops.activation import register as register_custom_ops
from vllm_bridge.patches.catalogue import REGISTRY

logger = get_logger("worker")


def _local_rank_and_config(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[int, Any]:
    # CPUWorker(vllm_config, local_rank, rank, distributed_init_method, ...)
    config = kwargs["vllm_config"] if "vllm_config" in kwargs else args[0]
    local_rank = kwargs["local_rank"] if "local_rank" in kwargs else args[1]
    return local_rank, config


def _allocate_pipeline_receive_buffers(model_runner: Any) -> None:
    """The buffers a later pipeline stage receives activations into.

    vLLM's model runner allocates them in its profiling run, which the CPU
    worker skips in eager mode: there, every stage after the first failed
    its first step (``assert self.intermediate_tensors is not None``)."""
    from vllm.distributed.parallel_state import get_pp_group

    if get_pp_group().is_first_rank or model_runner.intermediate_tensors is not None:
        return
    model_runner.intermediate_tensors = (
        model_runner.model.make_empty_intermediate_tensors(
            batch_size=model_runner.max_num_tokens,
            dtype=model_runner.model_config.dtype,
            device=model_runner.device,
        )
    )


def _bind_ray_worker(local_rank: int, parallel: Any) -> None:
    """Bind a worker that Ray started: its share of its node's cores, and
    as many threads (Ray starts actors with OMP_NUM_THREADS=1)."""
    import ray

    # vLLM's Ray executor gives each worker the ids of its node's workers.
    local_workers = len(parallel.assigned_physical_gpu_ids or ()) or 1
    node_cpus = node_cpu_count()
    cpus = ray_worker_cores(local_rank, local_workers, node_cpus)
    if cpus is not None:
        bind_process_to(cpus)
        threads = len(cpus)
        where = f"bound to CPUs {id_ranges(cpus)}"
    else:  # VLLM_CPU_OMP_THREADS_BIND=nobind: no binding, but not one thread
        threads = max(1, int(node_cpus or 1) // local_workers)
        where = "unbound"
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    logger.info(
        "vllm-bridge Ray worker %d of %d on Ray node %s %s with %d thread(s).",
        local_rank,
        local_workers,
        ray.get_runtime_context().get_node_id(),
        where,
        threads,
    )


class BridgeWorker(CPUWorker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        local_rank, vllm_config = _local_rank_and_config(args, kwargs)
        parallel = vllm_config.parallel_config
        if parallel.data_parallel_size == 1 and parallel.use_ray:
            _bind_ray_worker(local_rank, parallel)
        elif parallel.data_parallel_size == 1:
            cpus = rank_cpus(os.environ.get(THREADS_BIND_ENV, ""), local_rank)
            if cpus:
                # Before vLLM's worker picks the NUMA node for its memory.
                bind_process_to(cpus)
        self.amx_requested = request_amx_permission()
        # What the kernel reports after the request (logged, and read by tests).
        self.amx_permitted_at_init = amx_tile_permitted()
        REGISTRY.apply("worker")
        register_custom_ops()
        super().__init__(*args, **kwargs)
        # Before load_model, where the model's torch.compile reads its options.
        self.fusion_passes = fusion_manager.install(vllm_config.compilation_config)
        logger.info(
            "vllm-bridge worker ready (AMX tile permission: %s).",
            self.amx_permitted_at_init,
        )

    def compile_or_warm_up_model(self) -> Any:
        times = super().compile_or_warm_up_model()
        _allocate_pipeline_receive_buffers(self.model_runner)
        return times

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        # The resident memory the weights added: quantized and unquantized
        # models hold their weights in kernel-owned buffers (oneDNN
        # handlers, packed tensors in closures) that no parameter lists.
        before = diagnostics.resident_set_bytes()
        super().load_model(*args, **kwargs)
        release_free_heap()
        # The model runner (made in init_device) runs each step's forward in
        # _model_forward; vLLM's second-generation runner has none, and
        # there every call keeps vLLM's op.
        if ATTENTION_DIRECT in self.fusion_passes and hasattr(
            self.model_runner, "_model_forward"
        ):
            bind_around_forward(self.model_runner)
        self.model_load_resident_bytes = diagnostics.resident_set_bytes() - before

    # Reachable with LLM.collective_rpc("<name>"), without enabling vLLM's
    # insecure pickle serialisation for callables.
    def bridge_report(self) -> dict[str, Any]:
        return diagnostics.worker_report(self)

    def bridge_start_op_profile(self) -> None:
        diagnostics.start_op_profile()

    def bridge_stop_op_profile(self) -> dict[str, int]:
        return diagnostics.stop_op_profile()
