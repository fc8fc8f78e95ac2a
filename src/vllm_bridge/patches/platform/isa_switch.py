"""Under ``VLLM_BRIDGE_ISA``, make torch.cpu's ISA queries answer for the
class vllm-bridge runs as, so that vLLM picks that class's kernels."""

from __future__ import annotations

from collections.abc import Callable

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.device.isa import IsaClass, detect
from vllm_bridge.patching.spec import Patch

# torch.cpu query -> the lowest class that answers it as the CPU does.
QUERY_CLASS: dict[str, IsaClass] = {
    "_is_avx2_supported": "avx2",
    "_is_avx512_supported": "avx512",
    "_is_vnni_supported": "avx512",
    "_is_avx512_bf16_supported": "avx512_bf16",
    "_is_amx_tile_supported": "amx",
    "_is_amx_fp16_supported": "amx",
}
_saved: dict[str, Callable[[], bool]] = {}


def _capped(original: Callable[[], bool], lowest: IsaClass) -> Callable[[], bool]:
    def query() -> bool:
        return detect().has(lowest) and original()

    query.__doc__ = original.__doc__
    return query


def install() -> None:
    import torch.cpu

    for name, lowest in QUERY_CLASS.items():
        if name not in _saved:
            _saved[name] = getattr(torch.cpu, name)
            setattr(torch.cpu, name, _capped(_saved[name], lowest))


def uninstall() -> None:
    import torch.cpu

    for name in list(_saved):
        setattr(torch.cpu, name, _saved.pop(name))


PATCH = Patch(
    name="isa-switch",
    target="torch.cpu:(_is_avx512_supported, _is_avx512_bf16_supported, ...)",
    stage="platform",
    kind="hook",
    new=install,
    undo=uninstall,
    active_when=lambda: detect().switched,
    why=(
        "vLLM chooses its kernel library (import_kernels), attention kernel "
        "(AMX or vector), GEMM path and MoE kernels from torch.cpu's ISA "
        "queries, which read the CPU itself; the ISA switch VLLM_BRIDGE_ISA "
        "would otherwise cap ATen, oneDNN and MKL but leave vLLM on the "
        "higher class's kernels."
    ),
    how=(
        "Only when VLLM_BRIDGE_ISA names a lower class than the CPU's: "
        "torch.cpu's _is_avx2/avx512/vnni/avx512_bf16/amx_tile/amx_fp16 "
        "queries answer False for what the class lacks, and as before "
        "otherwise. Applied in every process before vLLM loads its kernels."
    ),
    upstream=(
        "none: a testing switch of vllm-bridge; vLLM has no setting that "
        "caps its own ISA choice"
    ),
    remove_when="vLLM offers a setting that caps the ISA its CPU kernels use",
    vllm_versions=SUPPORTED_VLLM,
)
