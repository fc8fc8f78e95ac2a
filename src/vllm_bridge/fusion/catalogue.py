"""Every fusion pass, declared as data: what it rewrites, why, and what it
measured. Standard library only: the settings check (envs.py) reads the
names before torch is imported."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FusionPass:
    name: str
    rewrite: str
    """``module:function`` taking a ``torch.fx.Graph`` (post-grad, before
    Inductor lowers it) and returning how many places it rewrote."""
    applies_to: str
    why: str
    how: str
    effect: str
    """The measured effect and where it was measured (docs/benchmarks.md)."""
    on_by_default: bool
    """Only a pass that measurably helps is on by default; the others run
    where VLLM_BRIDGE_ENABLE_PASSES names them."""
    requires: str | None = None
    """``module:function`` returning whether the pass can run in this
    process (e.g. a C++ op it puts in the graph is loaded); None: always."""


ATTENTION_DIRECT = "attention-direct"
"""Named apart: the worker binds each forward for it where it runs."""

PASSES: tuple[FusionPass, ...] = (
    FusionPass(
        name="int8-quant-inline",
        rewrite="vllm_bridge.fusion.int8_quant_inline:rewrite",
        applies_to=(
            "dynamic per-token int8 quantization (vLLM's "
            "_C::dynamic_scaled_int8_quant, symmetric) before oneDNN's int8 "
            "GEMM: --quantization bridge_int8 on AVX-512 CPUs without AMX, "
            "and W8A8 checkpoints on vLLM's oneDNN path"
        ),
        why=(
            "The quantization is an opaque custom op: Inductor writes the "
            "RMSNorm (or SiLU-and-mul) output to memory, the op reads it back "
            "to find each token's largest magnitude and writes the int8 "
            "copy, and every call goes through the compiled graph's Python "
            "wrapper (4 per decoder layer and step)."
        ),
        how=(
            "Each call is replaced by the same arithmetic in aten ops "
            "(scale = max|x| / 127 per token; q = round(x * (1 / scale)), "
            "0 where the scale is 0), the op's results bit for bit on the "
            "same input (but for rows of scale 0, which dequantize to 0: "
            "vLLM's AVX2 kernel writes -128 there), which Inductor then "
            "fuses into the kernel that "
            "produces x (there it quantizes x's float32 value before any "
            "bf16 rounding: at most one int8 step apart)."
        ),
        effect=(
            "slower, so off by default: 0.5b preset, bridge_int8, compiled, "
            "as an AVX-512-BF16 CPU (VLLM_BRIDGE_ISA=avx512_bf16 on a 2-core "
            "AMX Xeon), 3 alternating rounds: 0.92x single stream, 0.96x "
            "with 32 concurrent requests (docs/benchmarks.md, 'Fusion "
            "passes'). The op it removes costs 2.7 us a call (0.9% of a "
            "decode step); the fused kernels cost 3.3 ms a step more, and "
            "lose to the op from 32 rows up (44 vs 39 us; 194 vs 159 us at "
            "512 rows)."
        ),
        on_by_default=False,
    ),
    FusionPass(
        name=ATTENTION_DIRECT,
        rewrite="vllm_bridge.fusion.attention_direct:rewrite",
        applies_to=(
            "every decoder attention layer on vllm-bridge's CPU backend "
            "(vLLM's vllm::unified_attention_with_output), with an "
            "unquantized KV cache"
        ),
        why=(
            "vLLM calls attention through a Python custom op: per layer "
            "and step the compiled graph goes through the dispatcher into "
            "Python, which looks up the forward context, the layer and its "
            "metadata, slices the inputs and calls two C++ kernels. In a "
            "decode step the weights stream through the caches between two "
            "such calls, so that Python runs cold: 80-100 us per layer "
            "around kernels of a few us."
        ),
        how=(
            "The call goes to vllm_bridge_attn::attend (C++, same "
            "arguments), which calls vLLM's two kernels for the layer with "
            "what the worker bound in Python: each layer's cache views and "
            "constants once per KV cache, the step's metadata once per "
            "forward (cleared after it). Calls without a binding (vLLM's "
            "dummy runs, layers of another backend, quantized KV caches) go "
            "to vLLM's op unchanged."
        ),
        effect=(
            "0.5b preset, compiled, 3 alternating rounds on a 2-core AMX "
            "Xeon: 1.08x single stream and 1.02x with 32 concurrent "
            "requests natively, 1.08x and 1.05x run as AVX2, same tokens "
            "(docs/benchmarks.md, 'Attention without Python'); under the "
            "profiler the attention call's own time per decode step fell "
            "from 2.8 ms to 0.2 ms."
        ),
        on_by_default=True,
        requires="vllm_bridge.attention.direct_call:available",
    ),
)

NAMES: tuple[str, ...] = tuple(fusion_pass.name for fusion_pass in PASSES)


def enabled(
    requested: tuple[str, ...], disabled: tuple[str, ...]
) -> tuple[FusionPass, ...]:
    """The passes on by default or named in ``requested``, less those named
    in ``disabled`` (``all`` names every pass)."""

    def named(names: tuple[str, ...], fusion_pass: FusionPass) -> bool:
        return "all" in names or fusion_pass.name in names

    return tuple(
        p
        for p in PASSES
        if (p.on_by_default or named(requested, p)) and not named(disabled, p)
    )
