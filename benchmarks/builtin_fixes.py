"""The manual fixes vLLM's built-in CPU platform needs to run at all on the
reference machine, applied only to the built-in side of the benchmarks.

The AMX fix needs code in the worker process; a user of the built-in
platform would have to write this class themselves and pass it as
``worker_cls``.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.worker.cpu_worker import CPUWorker

# vLLM's default gpu_memory_utilization=0.92 fails; a fixed KV cache does not.
KV_CACHE_GIB = "4"


class AmxReadyCPUWorker(CPUWorker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if torch.cpu._is_amx_tile_supported():
            torch.cpu._init_amx()
        super().__init__(*args, **kwargs)


WORKER_CLS = f"{__name__}.{AmxReadyCPUWorker.__qualname__}"
