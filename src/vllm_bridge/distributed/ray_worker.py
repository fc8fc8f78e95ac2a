"""The Ray actor that hosts one vLLM CPU worker.

Imported only where vLLM's Ray executor is (it imports Ray): by the
``ray-cpu-worker-proc`` patch in the engine core, and by Ray in each actor
process, which unpickles the actor class by reference to this module.
"""

from __future__ import annotations

import ray
from vllm.v1.executor.ray_executor_v2 import RayWorkerProc


class CpuRayWorkerProc(RayWorkerProc):
    def get_node_and_physical_gpu_ids(self) -> tuple[str, list[int]]:
        # vLLM reads the ids Ray assigned to this actor for the platform's
        # Ray resource; Ray assigns ids only for the accelerators it knows
        # (GPU, TPU, ...), so the lookup fails for a CPU worker slot. The
        # executor needs ids that tell a node's workers apart (it derives
        # each worker's local rank and count from them): the global rank.
        node_id = ray.get_runtime_context().get_node_id()
        return node_id, [int(self._init_kwargs["rank"])]
