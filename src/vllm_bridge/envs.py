"""Every ``VLLM_BRIDGE_*`` environment variable: name, type, default, doc.

Standard library only: the interpreter-start stage reads this module too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar, get_args

from vllm_bridge.errors import BridgeConfigError

T = TypeVar("T")
CompileRequest = Literal["auto", "eager", "compiled"]
IsaRequest = Literal["auto", "avx2", "avx512", "avx512_bf16", "amx"]
LinearKernelRequest = Literal["auto", "vllm", "bridge"]
Int8KernelRequest = Literal["auto", "amx", "onednn", "bridge"]
AttentionRequest = Literal["bridge", "vllm"]

PREFIX = "VLLM_BRIDGE_"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    allowed = "/".join(_TRUE + _FALSE)
    raise ValueError(f"expected a boolean ({allowed})")


def parse_name_list(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def parse_float_in(low: float, high: float) -> Callable[[str], float]:
    """A number in (low, high]."""

    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise ValueError("expected a number") from None
        if not low < value <= high:
            raise ValueError(f"expected a number in ({low:g}, {high:g}]")
        return value

    return parse


def parse_int_in(low: int, high: int) -> Callable[[str], int]:
    """A whole number in [low, high]."""

    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError("expected a whole number") from None
        if not low <= value <= high:
            raise ValueError(f"expected a whole number in [{low}, {high}]")
        return value

    return parse


def parse_choice(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return value

    return parse


@dataclass(frozen=True)
class EnvVar(Generic[T]):
    name: str
    parse: Callable[[str], T]
    default: T
    doc: str
    key: str | None = None
    """The ``--additional-config`` key that overrides the variable per engine."""
    allowed: str = ""
    """The values allowed, as a user writes them."""

    def is_set(self, environ: Mapping[str, str] | None = None) -> bool:
        return (os.environ if environ is None else environ).get(
            self.name, ""
        ).strip() != ""

    def get(self, environ: Mapping[str, str] | None = None) -> T:
        raw = (os.environ if environ is None else environ).get(self.name, "")
        if raw.strip() == "":
            return self.default
        try:
            return self.parse(raw)
        except ValueError as exc:
            raise BridgeConfigError(
                f"{self.name}={raw!r} is invalid: {exc}. "
                f"Fix or unset {self.name} (allowed: {self.allowed})."
            ) from None


DISABLE = EnvVar(
    "VLLM_BRIDGE_DISABLE",
    parse_bool,
    False,
    "true turns the plugin off: vLLM uses its built-in CPU platform",
    allowed="true / false",
)
DISABLE_PATCHES = EnvVar(
    "VLLM_BRIDGE_DISABLE_PATCHES",
    parse_name_list,
    (),
    "patches to leave unapplied (`vllm-bridge patches` lists them)",
    allowed="comma-separated patch names, or all",
)


def parse_fusion_pass_names(raw: str) -> tuple[str, ...]:
    from vllm_bridge.fusion.catalogue import NAMES

    names = parse_name_list(raw)
    unknown = sorted(set(names) - {*NAMES, "all"})
    if unknown:
        raise ValueError(
            f"unknown fusion pass(es) {', '.join(unknown)}; known passes: "
            f"{', '.join(NAMES)}, or all"
        )
    return names


ENABLE_PASSES = EnvVar(
    "VLLM_BRIDGE_ENABLE_PASSES",
    parse_fusion_pass_names,
    (),
    "fusion passes to run in compiled graphs besides those on by default "
    "(docs/passes.md lists them, with what each measured)",
    allowed="comma-separated fusion pass names, or all",
)
DISABLE_PASSES = EnvVar(
    "VLLM_BRIDGE_DISABLE_PASSES",
    parse_fusion_pass_names,
    (),
    "fusion passes to leave out of compiled graphs, also those on by default "
    "(wins over VLLM_BRIDGE_ENABLE_PASSES)",
    allowed="comma-separated fusion pass names, or all",
)
STRICT = EnvVar(
    "VLLM_BRIDGE_STRICT",
    parse_bool,
    False,
    "true refuses to start when a rule would override an option you set, or "
    "a patch no longer matches the installed vLLM (the key covers the rules "
    "only: patches are checked before any config exists)",
    key="strict",
    allowed="true / false",
)
COMPILE_MODE = EnvVar(
    "VLLM_BRIDGE_COMPILE_MODE",
    parse_choice(*get_args(CompileRequest)),
    "auto",
    "auto keeps vLLM's choice (compiled unless eager is configured or LoRA is "
    "on); eager never compiles; compiled refuses to start when the model "
    "would run eagerly",
    key="compile_mode",
    allowed="auto, eager, compiled",
)
KV_CACHE_SHARE_RANGE = (0.0, 0.9)
"""(exclusive low, inclusive high)"""
KV_CACHE_SHARE = EnvVar(
    "VLLM_BRIDGE_KV_CACHE_SHARE",
    parse_float_in(*KV_CACHE_SHARE_RANGE),
    0.5,
    "share of the memory left after the weights that the KV cache may take "
    "when you give no KV size",
    key="kv_cache_share",
    allowed="a number in (0, 0.9]",
)
DRAIN_TIMEOUT_RANGE = (0, 3600)
"""(inclusive low, inclusive high), seconds"""
DRAIN_TIMEOUT = EnvVar(
    "VLLM_BRIDGE_DRAIN_TIMEOUT",
    parse_int_in(*DRAIN_TIMEOUT_RANGE),
    25,
    "seconds that SIGTERM/SIGINT lets in-flight requests finish before "
    "`vllm serve` stops (vLLM's --shutdown-timeout, when you give none); "
    "0 aborts them at once, as vLLM does by default",
    key="drain_timeout",
    allowed="a whole number of seconds in [0, 3600]",
)
ISA = EnvVar(
    "VLLM_BRIDGE_ISA",
    parse_choice(*get_args(IsaRequest)),
    "auto",
    "auto runs on what the CPU has; a lower x86 class makes vLLM, oneDNN, "
    "MKL and ATen run as on a CPU of that class, for testing (set it before "
    "Python starts; docs/design.md, 'Every CPU')",
    allowed="auto, avx2, avx512, avx512_bf16, amx",
)
LINEAR_KERNEL = EnvVar(
    "VLLM_BRIDGE_LINEAR_KERNEL",
    parse_choice(*get_args(LinearKernelRequest)),
    "auto",
    "which kernel runs bf16 linear layers: auto picks by the CPU's ISA class "
    "(vllm-bridge's AVX2 kernel where the CPU has no bf16 arithmetic); vllm "
    "keeps vLLM's dispatch; bridge uses vllm-bridge's kernel on any x86 CPU",
    allowed="auto, vllm, bridge",
)
INT8_KERNEL = EnvVar(
    "VLLM_BRIDGE_INT8_KERNEL",
    parse_choice(*get_args(Int8KernelRequest)),
    "auto",
    "which kernel runs the linear layers of --quantization bridge_int8: auto "
    "picks by the CPU's ISA class (docs/quantization.md); amx asks for "
    "vLLM's AMX int8 GEMM (layers it cannot take stay on oneDNN); onednn "
    "uses oneDNN's int8 GEMM; bridge uses vllm-bridge's AVX2 kernel (int8 "
    "weights, float32 arithmetic) on any x86 CPU",
    allowed="auto, amx, onednn, bridge",
)
ATTENTION = EnvVar(
    "VLLM_BRIDGE_ATTENTION",
    parse_choice(*get_args(AttentionRequest)),
    "bridge",
    "which backend runs decoder attention: bridge is vLLM's CPU kernels with "
    "the KV-cache write inside the attention call (one custom op per layer "
    "and step instead of two); vllm keeps vLLM's CPU_ATTN backend unchanged",
    allowed="bridge, vllm",
)

TPOT_OBJECTIVE_MS_RANGE = (0.0, 60_000.0)
"""(exclusive low, inclusive high), milliseconds"""
TPOT_OBJECTIVE_MS: EnvVar[float | None] = EnvVar(
    "VLLM_BRIDGE_TPOT_OBJECTIVE_MS",
    parse_float_in(*TPOT_OBJECTIVE_MS_RANGE),
    None,
    "a time-per-output-token objective in milliseconds: vllm-bridge's SLO "
    "scheduler learns what a step costs and gives each step only the prompt "
    "tokens that keep it under the objective while sequences are decoding "
    "(docs/scheduling.md); unset keeps vLLM's scheduler",
    key="tpot_objective_ms",
    allowed="a number of milliseconds in (0, 60000]",
)

ALL: tuple[EnvVar[object], ...] = (  # type: ignore[assignment]
    DISABLE,
    DISABLE_PATCHES,
    ENABLE_PASSES,
    DISABLE_PASSES,
    STRICT,
    COMPILE_MODE,
    KV_CACHE_SHARE,
    DRAIN_TIMEOUT,
    ISA,
    LINEAR_KERNEL,
    INT8_KERNEL,
    ATTENTION,
    TPOT_OBJECTIVE_MS,
)
