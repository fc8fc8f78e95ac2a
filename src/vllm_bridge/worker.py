"""The worker class vllm-bridge selects: vLLM's CPU worker, with the
process-level setup it lacks done before anything runs."""

from __future__ import annotations

from typing import Any

from vllm.v1.worker.cpu_worker import CPUWorker

from vllm_bridge import diagnostics
from vllm_bridge.device.cpu import (
    amx_tile_permitted,
    release_free_heap,
    request_amx_permission,
)
from vllm_bridge.log import get_logger
from vllm_bridge.ops.activation import register as register_custom_ops
from vllm_bridge.patches.catalogue import REGISTRY

logger = get_logger("worker")


class BridgeWorker(CPUWorker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.amx_requested = request_amx_permission()
        # What the kernel reports after the request (logged, and read by tests).
        self.amx_permitted_at_init = amx_tile_permitted()
        REGISTRY.apply("worker")
        register_custom_ops()
        super().__init__(*args, **kwargs)
        logger.info(
            "vllm-bridge worker ready (AMX tile permission: %s).",
            self.amx_permitted_at_init,
        )

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        # The resident memory the weights added: quantized and unquantized
        # models hold their weights in kernel-owned buffers (oneDNN
        # handlers, packed tensors in closures) that no parameter lists.
        before = diagnostics.resident_set_bytes()
        super().load_model(*args, **kwargs)
        release_free_heap()
        self.model_load_resident_bytes = diagnostics.resident_set_bytes() - before

    # Reachable with LLM.collective_rpc("<name>"), without enabling vLLM's
    # insecure pickle serialisation for callables.
    def bridge_report(self) -> dict[str, Any]:
        return diagnostics.worker_report(self)

    def bridge_start_op_profile(self) -> None:
        diagnostics.start_op_profile()

    def bridge_stop_op_profile(self) -> dict[str, int]:
        return diagnostics.stop_op_profile()
