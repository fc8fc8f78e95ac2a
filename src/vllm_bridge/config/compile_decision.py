"""The compile/graph mode decision: a pure function of its inputs.

vLLM resolves part of the decision before the platform sees the config
(``--enforce-eager`` has already set the mode to NONE, and the CPU has no
CUDA graphs, so vLLM has set ``cudagraph_mode`` to NONE); vLLM's CPU
platform then turns VLLM_COMPILE into DYNAMO_TRACE_ONCE and runs LoRA models
eagerly. ``decide`` states all of it in one place, with the plugin's
``compile_mode`` key on top, so that the outcome and its reason can be read
off a table (tests/unit/test_compile_decision.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm.config import CompilationMode, CUDAGraphMode

from vllm_bridge.envs import CompileRequest
from vllm_bridge.errors import BridgeConfigError


@dataclass(frozen=True)
class CompileInputs:
    mode: CompilationMode
    """``compilation_config.mode`` as vLLM resolved it (NONE under
    ``--enforce-eager`` or ``-O0``)."""
    cudagraph_mode: CUDAGraphMode
    enforce_eager: bool
    has_lora: bool
    is_encoder_decoder: bool
    request: CompileRequest
    """The plugin's ``compile_mode`` key."""


@dataclass(frozen=True)
class CompileDecision:
    mode: CompilationMode
    cudagraph_mode: CUDAGraphMode
    reason: str


_NO_CUDA_GRAPHS = "; no CUDA graphs on the CPU"


def _conflict(inputs: CompileInputs) -> str | None:
    """What makes ``compile_mode='compiled'`` impossible, if anything."""
    if inputs.enforce_eager:
        return "--enforce-eager"
    if inputs.has_lora:
        return "LoRA (vLLM's CPU platform runs LoRA models eagerly)"
    if inputs.mode == CompilationMode.NONE:
        return "-cc.mode=NONE (or -O0)"
    return None


def _compiled_mode(inputs: CompileInputs) -> tuple[CompilationMode, str]:
    part = (
        " (vLLM compiles the decoder; the encoder runs eagerly)"
        if inputs.is_encoder_decoder
        else ""
    )
    if inputs.mode == CompilationMode.VLLM_COMPILE:
        return (
            CompilationMode.DYNAMO_TRACE_ONCE,
            "the CPU compiles the model once with dynamo and inductor "
            f"(DYNAMO_TRACE_ONCE){part}: VLLM_COMPILE's piecewise graphs exist "
            "for CUDA graph capture",
        )
    return inputs.mode, f"compiled as requested ({inputs.mode.name}){part}"


def decide(inputs: CompileInputs) -> CompileDecision:
    """The mode the CPU runs with, and why. Raises BridgeConfigError when
    ``compile_mode='compiled'`` meets an input that rules compilation out."""
    if inputs.request == "compiled":
        conflict = _conflict(inputs)
        if conflict is not None:
            raise BridgeConfigError(
                f"vllm-bridge compile_mode='compiled' conflicts with {conflict}: "
                "remove one of them, or set compile_mode to 'auto'."
            )
    if inputs.request == "eager":
        mode, reason = CompilationMode.NONE, "compile_mode='eager' (vllm-bridge config)"
    elif inputs.mode == CompilationMode.NONE:
        mode, reason = CompilationMode.NONE, "eager as configured"
    elif inputs.has_lora:
        mode = CompilationMode.NONE
        reason = "vLLM's CPU platform runs models with LoRA adapters eagerly"
    else:
        mode, reason = _compiled_mode(inputs)
    if inputs.cudagraph_mode != CUDAGraphMode.NONE:
        reason += _NO_CUDA_GRAPHS
    return CompileDecision(mode, CUDAGraphMode.NONE, reason)
