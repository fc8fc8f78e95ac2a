"""Back the CPU KV cache with memory the kernel zero-fills on first use,
instead of writing zeros over all of it before the engine can start."""

from __future__ import annotations

import functools
import mmap
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.log import get_logger
from vllm_bridge.patching.spec import Patch

HUGE_PAGE_BYTES = 2 * 1024 * 1024
logger = get_logger("patches")


def zero_page_buffer(nbytes: int) -> torch.Tensor:
    """An int8 CPU tensor of ``nbytes`` that reads as zeros and takes memory
    only where it is written: private anonymous pages are zero-filled by the
    kernel on first touch, whichever allocator the process preloads."""
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    request_huge_pages(region)
    # The tensor holds the mapping; it is unmapped when the tensor is freed.
    return torch.frombuffer(region, dtype=torch.int8)


def request_huge_pages(region: mmap.mmap) -> None:
    """Transparent huge pages: 512 times fewer page faults as the cache
    fills ("madvise" is the common system setting, so the region has to
    ask). Only a request: kernels built without them refuse it (EINVAL),
    and the cache then uses normal pages."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return
    try:
        region.madvise(mmap.MADV_HUGEPAGE)
    except OSError as error:
        logger.debug("KV cache without transparent huge pages: %s", error)


def _is_kv_backing_buffer(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """``torch.zeros(nbytes, dtype=torch.int8, device=<cpu>)``: the one
    backing allocation of vLLM's allocate_kv_cache."""
    if (
        len(args) != 1
        or not isinstance(args[0], int)
        or set(kwargs) - {"dtype", "device"}
    ):
        return False
    device = kwargs.get("device")
    return (
        kwargs.get("dtype") is torch.int8
        and device is not None
        and torch.device(device).type == "cpu"
        and args[0] >= HUGE_PAGE_BYTES
    )


class _ZerosOnZeroPages(TorchFunctionMode):
    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is torch.zeros and _is_kv_backing_buffer(args, kwargs):
            return zero_page_buffer(args[0])
        return func(*args, **kwargs)


def allocate_on_zero_pages(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def allocate_kv_cache(
        kv_cache_config: Any, device: Any, *args: Any, **kwargs: Any
    ) -> Any:
        if torch.device(device).type != "cpu":
            return original(kv_cache_config, device, *args, **kwargs)
        with _ZerosOnZeroPages():
            return original(kv_cache_config, device, *args, **kwargs)

    return allocate_kv_cache


PATCH = Patch(
    name="kv-cache-zero-pages",
    target="vllm.v1.worker.gpu_model_runner:allocate_kv_cache",
    stage="worker",
    kind="wrap",
    new=allocate_on_zero_pages,
    why=(
        "vLLM allocates the whole KV cache with torch.zeros, which writes "
        "every page before the engine starts: on the CPU that commits "
        "gigabytes of RAM nobody has used yet (the CPU shares it with the "
        "page cache and other processes) and costs about 1.4 s per GiB "
        "here, 10 s of a 30 s start for the 7.2 GiB default cache of the "
        "0.5b preset."
    ),
    how=(
        "While allocate_kv_cache runs on the CPU, its torch.zeros of the "
        "int8 backing buffer returns a private anonymous mapping instead "
        "(zero-filled by the kernel page by page on first write, with "
        "transparent huge pages requested). The cache reads as zeros as "
        "before; memory is committed as blocks are first used. vLLM "
        "still checks at start that the cache fits in the memory "
        "available, but the memory is not reserved: what other "
        "processes take after the start is missing when the cache fills "
        "(size it with --kv-cache-memory-bytes on a shared host)."
    ),
    upstream=(
        "none yet: to be proposed to vLLM (a platform hook for the KV "
        "cache allocator, or torch.empty where the allocator guarantees "
        "zero pages)"
    ),
    remove_when="vLLM's CPU worker allocates its KV cache without writing it",
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="b601983f70bf2ee9",
)
