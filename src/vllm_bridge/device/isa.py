"""The instruction-set class of this CPU, and the switch that runs
vllm-bridge as if on a lower class.

vLLM's CPU build ships one kernel library per x86 class and picks kernels
(attention, GEMM, MoE) from ``torch.cpu._is_*_supported()``; oneDNN, MKL and
ATen (including inductor's generated code) pick their own code paths. The
classes below are the steps at which those choices change.

``VLLM_BRIDGE_ISA=<class>`` caps all of them at a lower class than the CPU
has, so that the AVX2 path can be run and tested on an AVX-512/AMX machine:
the interpreter-start stage (``startup.py``) sets the ATen, oneDNN and MKL
caps before torch loads, and the ``isa-switch`` platform patch makes
``torch.cpu``'s queries answer for the capped class. Speed measured under
the switch is that of the real machine running narrower code, not of a CPU
of the lower class.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from functools import cache
from typing import Literal

from vllm_bridge import envs
from vllm_bridge.errors import BridgeConfigError

IsaClass = Literal["amx", "avx512_bf16", "avx512", "avx2", "x86_64_baseline", "other"]
X86_CLASSES: tuple[IsaClass, ...] = (
    "x86_64_baseline",
    "avx2",
    "avx512",
    "avx512_bf16",
    "amx",
)
"""x86 classes from lowest to highest."""


@dataclass(frozen=True)
class ClassTraits:
    description: str
    vllm_kernel_library: str | None
    """The module vLLM's CPU platform loads for this class (``import_kernels``)."""
    bf16_arithmetic: bool
    """The ISA computes in bf16 (VDPBF16PS or AMX), so oneDNN runs bf16 GEMMs."""


TRAITS: dict[IsaClass, ClassTraits] = {
    "amx": ClassTraits("AVX-512 with BF16 and AMX tiles", "vllm._C", True),
    "avx512_bf16": ClassTraits("AVX-512 with BF16, no AMX", "vllm._C", True),
    "avx512": ClassTraits("AVX-512 without BF16", "vllm._C_AVX512", False),
    "avx2": ClassTraits("AVX2 and FMA, no AVX-512", "vllm._C_AVX2", False),
    "x86_64_baseline": ClassTraits(
        "x86-64 without AVX2 (vLLM's CPU build needs AVX2)", None, False
    ),
    "other": ClassTraits("not x86-64", "vllm._C", False),
}


@dataclass(frozen=True)
class CpuIsa:
    machine: str
    native: IsaClass
    """What the CPU (and the kernel) offer."""
    effective: IsaClass
    """What vllm-bridge and vLLM run as: ``native`` unless VLLM_BRIDGE_ISA caps it."""
    flags: frozenset[str]

    @property
    def switched(self) -> bool:
        return self.effective != self.native

    @property
    def traits(self) -> ClassTraits:
        return TRAITS[self.effective]

    def has(self, isa_class: IsaClass) -> bool:
        """Whether the effective class includes ``isa_class`` (x86 only)."""
        if self.effective not in X86_CLASSES or isa_class not in X86_CLASSES:
            return self.effective == isa_class
        return X86_CLASSES.index(self.effective) >= X86_CLASSES.index(isa_class)

    def describe(self) -> str:
        text = f"{self.machine}, {self.effective} ({self.traits.description})"
        if self.switched:
            text += f", as set by {envs.ISA.name} on a CPU of class {self.native}"
        return text


def cpu_flags() -> frozenset[str]:
    """The CPU flags in /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def _is_x86(machine: str) -> bool:
    return machine.lower() in ("x86_64", "amd64")


def classify(machine: str, flags: frozenset[str]) -> IsaClass:
    """The class of a CPU from its architecture and /proc/cpuinfo flags
    (which list only what the kernel lets processes use)."""
    if not _is_x86(machine):
        return "other"
    if not {"avx2", "fma"} <= flags:
        return "x86_64_baseline"
    if not {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "avx2"
    if "avx512_bf16" not in flags:
        return "avx512"
    if {"amx_tile", "amx_bf16"} <= flags:
        return "amx"
    return "avx512_bf16"


def switch_choices(native: IsaClass) -> tuple[IsaClass, ...]:
    """The classes VLLM_BRIDGE_ISA may name on a CPU of class ``native``."""
    if native not in X86_CLASSES:
        return ()
    top = X86_CLASSES.index(native)
    return tuple(c for c in X86_CLASSES[1:] if X86_CLASSES.index(c) <= top)


def capped(native: IsaClass, request: str) -> IsaClass:
    """The class to run as for a VLLM_BRIDGE_ISA value; BridgeConfigError
    if this CPU cannot run it."""
    if request == "auto":
        return native
    allowed = switch_choices(native)
    for isa_class in allowed:
        if isa_class == request:
            return isa_class
    raise BridgeConfigError(
        f"{envs.ISA.name}={request} cannot run on this CPU (class {native}): the "
        f"switch only lowers the class. Allowed here: "
        f"{', '.join(('auto', *allowed))}. Fix or unset {envs.ISA.name}."
    )


@cache
def detect() -> CpuIsa:
    machine = platform.machine()
    flags = cpu_flags()
    native = classify(machine, flags)
    return CpuIsa(machine, native, capped(native, envs.ISA.get()), flags)
