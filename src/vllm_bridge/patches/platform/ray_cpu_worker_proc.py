"""Let vLLM's Ray executor find out which node each CPU worker runs on."""

from __future__ import annotations

from typing import Any

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.patching.spec import Patch


def cpu_worker_proc(original: type[Any]) -> type[Any]:
    # Imported here: the module imports Ray, which only Ray users have.
    from vllm_bridge.distributed.ray_worker import CpuRayWorkerProc

    return CpuRayWorkerProc


PATCH = Patch(
    name="ray-cpu-worker-proc",
    target="vllm.v1.executor.ray_executor_v2:RayWorkerProc",
    stage="platform",
    kind="wrap",
    new=cpu_worker_proc,
    why=(
        "vLLM's Ray executor asks each worker actor for the ids Ray assigned "
        "to it for the platform's Ray resource "
        "(get_runtime_context().get_accelerator_ids()[key]). Ray assigns ids "
        "only for the accelerators it knows (GPU, TPU, ...): on the CPU the "
        "lookup raises KeyError and `--distributed-executor-backend ray` "
        "cannot start."
    ),
    how=(
        "The executor creates its worker actors from a subclass "
        "(vllm_bridge.distributed.ray_worker.CpuRayWorkerProc) that answers "
        "with the actor's node id and its global rank: ids that tell a "
        "node's workers apart, from which vLLM derives each worker's local "
        "rank and the worker counts each node. Ray unpickles the actor class "
        "by reference, so the actor processes need no patch of their own."
    ),
    upstream=(
        "https://github.com/vllm-project/vllm/issues/21602, "
        "https://github.com/vllm-project/vllm/issues/15266 "
        "(Ray on CPU; no upstream fix)"
    ),
    remove_when="vLLM's Ray executor supports platforms without Ray accelerator ids",
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="20b7925ecffb8d04",
)
