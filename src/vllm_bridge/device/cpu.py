"""Cores and memory of the machine this process runs on, and the
process-level setup that kernels need (AMX tile permission). The ISA class
is in ``isa.py``."""

from __future__ import annotations

import ctypes
import os
import platform
import sys

import torch

from vllm_bridge.device import isa


def allowed_cpus() -> list[int]:
    """The logical CPUs this process may run on (its affinity mask)."""
    return sorted(os.sched_getaffinity(0))


def physical_cores(cpus: list[int]) -> list[int]:
    """One logical CPU per physical core among ``cpus`` (the first sibling)."""
    chosen: dict[tuple[str, str], int] = {}
    for cpu in cpus:
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{topology}/physical_package_id") as package_file:
                package = package_file.read().strip()
            with open(f"{topology}/core_id") as core_file:
                core = core_file.read().strip()
        except OSError:
            package, core = "?", str(cpu)
        chosen.setdefault((package, core), cpu)
    return sorted(chosen.values())


def rank_cpus(threads_bind: str, local_rank: int) -> list[int] | None:
    """The CPUs of worker ``local_rank`` in a per-worker binding
    (``VLLM_CPU_OMP_THREADS_BIND="0-3|4-7"``), or None for a binding that
    is not per worker ("auto", "nobind", one list)."""
    from vllm.utils.cpu_resource_utils import parse_id_list

    groups = threads_bind.split("|")
    if len(groups) < 2 or local_rank >= len(groups):
        return None
    return parse_id_list(groups[local_rank])


def bind_process_to(cpus: list[int]) -> None:
    """Run this process on ``cpus`` only. vLLM's CPU worker places its
    memory on the NUMA node of the first CPU the process may use, which
    without this is CPU 0's node for every worker (vllm-project/vllm#50525)."""
    os.sched_setaffinity(0, cpus)


def numa_node_of(cpu_id: int) -> int:
    """The NUMA node of ``cpu_id`` (0 where the kernel shows none)."""
    for entry in os.listdir(f"/sys/devices/system/cpu/cpu{cpu_id}"):
        if entry.startswith("node") and entry[4:].isdigit():
            return int(entry[4:])
    return 0


def available_memory_bytes() -> int:
    """Memory available to the worker now: the smallest of the memory
    nodes it may use (vLLM's CPU worker checks against that) and the
    system's available memory."""
    import psutil
    from vllm.utils.cpu_resource_utils import (
        get_memory_node_info,
        get_visible_memory_node,
    )

    system = psutil.virtual_memory().available
    nodes = [
        get_memory_node_info(node).available_memory
        for node in get_visible_memory_node()
    ]
    return min([system, *nodes])


def request_amx_permission() -> bool:
    """Ask the kernel for AMX tile state permission for this process.

    Linux requires ``arch_prctl(ARCH_REQ_XCOMP_PERM)`` before a process may
    execute AMX instructions. Nothing guarantees that a library has asked
    before vLLM's AMX attention kernel (``cpu_attention_with_kv_cache``)
    first runs; when it has not, the worker dies with SIGILL (7 of 10 default
    starts on this project's reference machine, 0 of 9 after asking). Asking
    once, before the first step, is harmless where AMX is absent (returns
    False). Returns whether AMX may now be used.
    """
    if not isa.detect().has("amx"):
        return False
    return bool(torch.cpu._init_amx())


_SYS_ARCH_PRCTL_X86_64 = 158
_ARCH_GET_XCOMP_PERM = 0x1022
_XFEATURE_XTILEDATA = 18


def amx_tile_permitted() -> bool | None:
    """Whether the kernel lets this process execute AMX instructions now
    (``arch_prctl(ARCH_GET_XCOMP_PERM)``); None where that cannot be asked
    (not x86-64 Linux)."""
    if not (sys.platform.startswith("linux") and platform.machine() == "x86_64"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    features = ctypes.c_uint64(0)
    if libc.syscall(
        _SYS_ARCH_PRCTL_X86_64, _ARCH_GET_XCOMP_PERM, ctypes.byref(features)
    ):
        return None
    return bool(features.value & (1 << _XFEATURE_XTILEDATA))


def release_free_heap() -> bool:
    """Hand the heap's free pages back to the kernel (glibc's malloc_trim).

    Loading leaves freed staging buffers in the heap: glibc raises its mmap
    threshold after the first large free, so later buffers of a few MB come
    from the heap and stay resident once freed. With online quantization
    those are the full-precision copies of each layer. False where the C
    library has no malloc_trim (musl, macOS)."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is None:
        return False
    trim(ctypes.c_size_t(0))
    return True
