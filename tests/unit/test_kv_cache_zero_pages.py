"""The kv-cache-zero-pages patch gives vLLM's KV cache allocation memory
that reads as zeros and is committed only where written (the engine test in
tests/engine/test_llm_compiled.py checks it on a real worker)."""

from __future__ import annotations

import errno

import torch

from vllm_bridge.diagnostics import resident_bytes
from vllm_bridge.patches.worker.kv_cache_zero_pages import (
    allocate_on_zero_pages,
    zero_page_buffer,
)

GiB = 2**30


def process_rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def test_zero_page_buffer_reads_as_zeros_and_commits_only_written_pages():
    before = process_rss()
    buffer = zero_page_buffer(2 * GiB)
    assert buffer.dtype == torch.int8 and buffer.numel() == 2 * GiB
    assert process_rss() - before < 64 * 2**20
    assert int(buffer[:: 2**20].abs().sum()) == 0
    buffer[: 256 * 2**20].fill_(7)
    assert process_rss() - before >= 256 * 2**20
    assert int(buffer[256 * 2**20 - 1]) == 7 and int(buffer[256 * 2**20]) == 0
    # viewed as the KV cache's dtype, as vLLM's layer views are
    assert buffer.view(torch.bfloat16)[-4:].tolist() == [0.0] * 4


def test_only_the_backing_buffer_moves_to_zero_pages():
    seen: dict[str, torch.Tensor] = {}

    def allocate_kv_cache(config: object, device: torch.device) -> None:
        seen["backing"] = torch.zeros(GiB, dtype=torch.int8, device=device)
        seen["small"] = torch.zeros(16, dtype=torch.int8, device=device)
        seen["float"] = torch.zeros(64 * 2**20, dtype=torch.float32, device=device)

    before = process_rss()
    allocate_on_zero_pages(allocate_kv_cache)(None, torch.device("cpu"))
    # torch.zeros writes the float32 buffer (256 MiB), not the backing one
    # (1 GiB)
    assert 256 * 2**20 <= process_rss() - before < 320 * 2**20
    assert seen["backing"].numel() == GiB
    assert int(seen["backing"][::4096].abs().sum()) == 0
    assert seen["small"].tolist() == [0] * 16
    assert seen["float"].dtype == torch.float32


def test_resident_bytes_counts_the_written_pages_of_a_range():
    buffer = zero_page_buffer(64 * 2**20)
    address = buffer.data_ptr()
    assert resident_bytes(address, buffer.numel()) == 0
    buffer[: 8 * 2**20].fill_(1)
    written = resident_bytes(address, buffer.numel())
    # huge pages: the kernel may fault in 2 MiB at a time
    assert 8 * 2**20 <= written <= 10 * 2**20
    zeros = torch.zeros(16 * 2**20, dtype=torch.int8)
    # whole pages: an unaligned range counts the page it starts in
    assert 0 <= resident_bytes(zeros.data_ptr(), zeros.numel()) - 16 * 2**20 <= 4096


def test_without_the_patch_torch_zeros_commits_the_whole_buffer():
    """What the patch removes (the reason the engine test's bound holds)."""
    before = process_rss()
    buffer = torch.zeros(GiB, dtype=torch.int8)
    assert process_rss() - before >= GiB * 0.9
    del buffer


def test_zeros_after_the_allocation_are_plain_again():
    allocate_on_zero_pages(lambda config, device: None)(None, "cpu")
    before = process_rss()
    buffer = torch.zeros(GiB // 4, dtype=torch.int8, device="cpu")
    assert process_rss() - before >= GiB // 4 * 0.9
    del buffer


def test_a_kernel_without_huge_pages_still_gets_its_kv_cache(monkeypatch):
    """Kernels built without transparent huge pages refuse MADV_HUGEPAGE
    with EINVAL; no such kernel here, so mmap's madvise refuses instead
    (mocked), and the allocation must still give a working buffer."""
    import mmap

    asked: list[int] = []

    class RefusingMap(mmap.mmap):
        def madvise(self, option: int, *args: int) -> None:
            asked.append(option)
            raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(mmap, "mmap", RefusingMap)
    buffer = zero_page_buffer(8 * 2**20)
    assert asked == [mmap.MADV_HUGEPAGE]
    buffer[:4096].fill_(3)
    assert int(buffer[4095]) == 3 and int(buffer[4096]) == 0
