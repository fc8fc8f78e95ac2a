"""What a process looks like from the inside, for tests and the CLI.

``BridgeWorker`` exposes the worker-side ones as methods, so tests and
tools reach them with ``LLM.collective_rpc("bridge_report")``.
"""

from __future__ import annotations

import ctypes
import os
from collections import Counter
from typing import Any

import torch

from vllm_bridge.attention import direct_call
from vllm_bridge.config.reconcile import audited_values
from vllm_bridge.device.cpu import numa_node_of
from vllm_bridge.device.isa import detect
from vllm_bridge.fusion import manager as fusion_manager
from vllm_bridge.patches.catalogue import REGISTRY
from vllm_bridge.patches.worker import isa_linear_kernel

_op_profile: list[torch.profiler.profile] = []
_libc = ctypes.CDLL(None, use_errno=True)


def process_report() -> dict[str, Any]:
    """The platform of this process and the patches applied in it."""
    from vllm.platforms import current_platform

    platform_class = type(current_platform)
    return {
        "pid": os.getpid(),
        "platform": f"{platform_class.__module__}.{platform_class.__qualname__}",
        "is_cpu": current_platform.is_cpu(),
        "pin_memory": current_platform.is_pin_memory_available(),
        "patches": {name: r.status for name, r in REGISTRY.records().items()},
    }


def worker_report(worker: Any) -> dict[str, Any]:
    from vllm.compilation.counter import compilation_counter
    from vllm.platforms import current_platform
    from vllm.triton_utils import dispatcher

    current_platform.manual_seed_all(0)
    current_platform.set_device(torch.device("cpu"))
    klass = type(worker)
    return {
        **process_report(),
        "worker_class": f"{klass.__module__}.{klass.__qualname__}",
        "amx_requested": getattr(worker, "amx_requested", None),
        "amx_permitted_at_init": getattr(worker, "amx_permitted_at_init", None),
        "omp_threads": torch.get_num_threads(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "triton_overrides": sorted(dispatcher._registry),
        "threads_bind_env": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
        "audited_config": audited_values(worker.vllm_config),
        "aot_artifacts_loaded": compilation_counter.num_aot_artifacts_loaded,
        # vLLM's compile cache of this model (None when eager): inductor's
        # output code there shows how the graph was compiled
        "compile_cache_dir": worker.vllm_config.compilation_config.local_cache_dir,
        "isa_class": detect().effective,
        "aten_capability": torch.backends.cpu.get_cpu_capability(),
        "vllm_kernel_libraries": mapped_vllm_kernel_libraries(),
        "model_dtype": str(worker.vllm_config.model_config.dtype),
        "bridge_kernel_layers": list(isa_linear_kernel.layers_on_bridge_kernel),
        "model_load_resident_bytes": getattr(worker, "model_load_resident_bytes", None),
        "attention_backends": attention_backends(worker),
        "fusion_passes": fusion_manager.report(),
        "attention_direct": direct_call.report(),
        **_int8_layers(worker),
        **_kv_cache_memory(worker),
        **_parallel(worker),
    }


def _parallel(worker: Any) -> dict[str, Any]:
    """This worker's place in a tensor/pipeline-parallel engine: its ranks,
    the NUMA node of its first CPU, and what carries its tensor-parallel
    collectives."""
    from vllm.distributed import parallel_state

    tp_group = parallel_state.get_tp_group()
    communicator = getattr(tp_group.device_communicator, "dist_module", None)
    return {
        "rank": worker.rank,
        "local_rank": worker.local_rank,
        "tp_rank": tp_group.rank_in_group,
        "pp_rank": parallel_state.get_pp_group().rank_in_group,
        "memory_node": numa_node_of(min(os.sched_getaffinity(0))),
        # vLLM's CPU communicator uses its shared-memory collectives where
        # the kernel library registers them (not the AVX2 one).
        "shm_collectives_available": hasattr(torch.ops._C, "init_shm_manager"),
        "tp_communicator": (
            "none (one worker)"
            if tp_group.world_size == 1
            else "shared memory"
            if type(communicator).__name__ == "_CPUSHMDistributed"
            else "torch.distributed (gloo)"
        ),
    }


def attention_backends(worker: Any) -> dict[str, int]:
    """The attention backend classes of the model's layers, with the number
    of layers on each."""
    from vllm.model_executor.layers.attention import Attention

    model = worker.model_runner.get_model()
    return dict(
        Counter(
            f"{layer.attn_backend.__module__}.{layer.attn_backend.__qualname__}"
            for layer in model.modules()
            if isinstance(layer, Attention)
        )
    )


def resident_set_bytes() -> int:
    """This process's resident set size (/proc/self/statm)."""
    with open("/proc/self/statm") as statm:
        resident_pages = int(statm.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def _int8_layers(worker: Any) -> dict[str, Any]:
    """The layers of ``--quantization bridge_int8`` by kernel, and the bytes
    of their int8 weights."""
    from vllm_bridge.quantization import int8_linear

    model = worker.model_runner.get_model()
    return {
        "int8_layers_by_kernel": dict(int8_linear.layers_by_kernel),
        "int8_weight_bytes": int8_linear.int8_weight_bytes(model),
    }


def mapped_vllm_kernel_libraries() -> list[str]:
    """vLLM's kernel libraries (``_C``, ``_C_AVX2``, ``_C_AVX512``) mapped into
    this process, by file name (``/proc/self/maps``)."""
    names = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.rstrip("\n").partition("/")[2]
            name = path.rpartition("/")[2]
            if "/vllm/" in f"/{path}" and name.startswith("_C") and ".so" in name:
                names.add(name.partition(".")[0])
    return sorted(names)


def _kv_cache_memory(worker: Any) -> dict[str, int]:
    """Bytes of the KV cache's backing allocations (layers share them) and
    how many of them are resident in RAM."""
    storages = {
        kv.untyped_storage().data_ptr(): kv.untyped_storage().nbytes()
        for kv in worker.model_runner.kv_caches
    }
    return {
        "kv_cache_bytes": sum(storages.values()),
        "kv_cache_resident_bytes": sum(
            resident_bytes(address, size) for address, size in storages.items()
        ),
    }


def resident_bytes(address: int, size: int) -> int:
    """Bytes of the pages of ``[address, address + size)`` in RAM (mincore)."""
    page = os.sysconf("SC_PAGE_SIZE")
    start = address - address % page
    pages = (address + size - start + page - 1) // page
    residency = (ctypes.c_ubyte * pages)()
    if _libc.mincore(ctypes.c_void_p(start), ctypes.c_size_t(pages * page), residency):
        error = ctypes.get_errno()
        raise OSError(error, f"mincore: {os.strerror(error)}")
    # the low bit of each byte is the page's residency; the others are reserved
    return sum(byte & 1 for byte in bytes(residency)) * page


def start_op_profile() -> None:
    """Start counting the operators this process runs (torch profiler)."""
    profile = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    profile.__enter__()
    _op_profile.append(profile)


def stop_op_profile() -> dict[str, int]:
    """Stop counting; return operator name -> number of calls."""
    profile = _op_profile.pop()
    profile.__exit__(None, None, None)
    counts: Counter[str] = Counter()
    for event in profile.key_averages():
        counts[event.key] += event.count
    return dict(counts)
