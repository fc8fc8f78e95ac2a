"""Keep compiled models apart in vLLM's compile cache where vllm-bridge's
settings change the compiled code: the CPU class, the attention backend,
the linear-layer kernels and the fusion passes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.patching.spec import Patch


def bridge_factors() -> list[str]:
    """What the compiled graph depends on beyond vLLM's own key."""
    from vllm_bridge import envs
    from vllm_bridge.attention import selection
    from vllm_bridge.device.isa import detect
    from vllm_bridge.fusion.manager import runnable_passes

    return [
        f"vllm-bridge isa class {detect().effective}",
        f"vllm-bridge attention {selection.requested()}",
        # the ops the traced graph calls for linear layers (resolved from
        # auto by the main process before the workers start)
        f"vllm-bridge linear kernel {envs.LINEAR_KERNEL.get()}",
        f"vllm-bridge int8 kernel {envs.INT8_KERNEL.get()}",
        # vLLM's AOT artifact holds the graph after the fusion passes
        f"vllm-bridge fusion passes {','.join(p.name for p in runnable_passes())}",
    ]


def with_bridge_factors(
    original: Callable[..., list[str]],
) -> Callable[..., list[str]]:
    @functools.wraps(original)
    def aot_compile_hash_factors(vllm_config: Any) -> list[str]:
        return [*original(vllm_config), *bridge_factors()]

    return aot_compile_hash_factors


PATCH = Patch(
    name="compile-cache-bridge-key",
    target="vllm.compilation.caching:aot_compile_hash_factors",
    stage="worker",
    kind="wrap",
    new=with_bridge_factors,
    why=(
        "vLLM's compile-cache key holds the config, the vLLM environment "
        "and the source, but not (1) the instruction set inductor generated "
        "code for: a cache shared by machines of different CPU classes (or "
        "used with and without VLLM_BRIDGE_ISA) loads AVX-512 code where "
        "only AVX2 may run (SIGILL on a real AVX2 machine; under the switch, "
        "an AVX2 test that silently runs AVX-512 code); nor (2) the attention "
        "backend's choice of a separate KV-cache write op: a graph traced "
        "with vllm-bridge's backend (no such op) loaded for vLLM's backend "
        "never writes the KV cache, and every prompt gets the same tokens; nor "
        "(3) the linear layers' kernel ops (VLLM_BRIDGE_LINEAR_KERNEL, "
        "VLLM_BRIDGE_INT8_KERNEL), which a cached graph would keep calling "
        "whatever the setting says; nor (4) vllm-bridge's fusion passes "
        "(VLLM_BRIDGE_ENABLE_PASSES, VLLM_BRIDGE_DISABLE_PASSES), whose "
        "rewrites the cached graph holds."
    ),
    how=(
        "The cache key's factors get the effective ISA class "
        "(device/isa.py), VLLM_BRIDGE_ATTENTION, the two kernel settings and "
        "the fusion passes that run appended, so each combination compiles and "
        "loads its own artifacts."
    ),
    upstream=(
        "none yet: to be reported to vLLM (aot_compile_hash_factors should "
        "include inductor's vector ISA on the CPU, and the platform's "
        "attention backend)"
    ),
    remove_when=(
        "vLLM's compile-cache key includes the CPU's vector ISA and the "
        "attention backend"
    ),
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="6d0f2515393bd700",
)
