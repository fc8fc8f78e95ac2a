"""Keep compiled models of different CPU classes apart in vLLM's compile
cache."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.patching.spec import Patch


def with_isa_class(original: Callable[..., list[str]]) -> Callable[..., list[str]]:
    @functools.wraps(original)
    def aot_compile_hash_factors(vllm_config: Any) -> list[str]:
        from vllm_bridge.device.isa import detect

        return [*original(vllm_config), f"vllm-bridge isa class {detect().effective}"]

    return aot_compile_hash_factors


PATCH = Patch(
    name="compile-cache-isa-key",
    target="vllm.compilation.caching:aot_compile_hash_factors",
    stage="worker",
    kind="wrap",
    new=with_isa_class,
    why=(
        "vLLM's compile-cache key holds the config, the vLLM environment "
        "and the source, but not the instruction set inductor generated "
        "code for: a cache shared by machines of different CPU classes (or "
        "used with and without VLLM_BRIDGE_ISA) loads AVX-512 code where "
        "only AVX2 may run (SIGILL on a real AVX2 machine; under the switch, "
        "an AVX2 test that silently runs AVX-512 code)."
    ),
    how=(
        "The cache key's factors get the effective ISA class "
        "(device/isa.py) appended, so each class compiles and loads its own "
        "artifacts."
    ),
    upstream=(
        "none yet: to be reported to vLLM (aot_compile_hash_factors should "
        "include inductor's vector ISA on the CPU)"
    ),
    remove_when="vLLM's compile-cache key includes the CPU's vector ISA",
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="6d0f2515393bd700",
)
