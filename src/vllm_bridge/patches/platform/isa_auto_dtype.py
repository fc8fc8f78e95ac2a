"""Pick the dtype of a checkpoint by the CPU's ISA class when the user gave
no ``--dtype`` (config/isa_defaults.py)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.patching.spec import Patch

RULE = "isa_dtype"


def _checkpoint_dtype(model_id: str, config: Any, kwargs: dict[str, Any]) -> Any:
    from vllm.transformers_utils.model_arch_config_convertor import (
        ModelArchConfigConvertorBase,
    )

    return ModelArchConfigConvertorBase.get_torch_dtype(
        config,
        model_id,
        revision=kwargs.get("revision"),
        config_format=kwargs.get("config_format", "hf"),
    )


def decide_auto_dtype(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def get_and_verify_dtype(
        model_id: str, config: Any, dtype: Any, *args: Any, **kwargs: Any
    ) -> Any:
        chosen = original(model_id, config, dtype, *args, **kwargs)
        if not (isinstance(dtype, str) and dtype.lower() == "auto"):
            return chosen  # the user's --dtype
        from vllm_bridge import envs
        from vllm_bridge.config.audit import Change, report
        from vllm_bridge.config.isa_defaults import NO_BF16_ARITHMETIC, auto_dtype
        from vllm_bridge.device.isa import detect

        isa_class = detect().effective
        if isa_class not in NO_BF16_ARITHMETIC:
            return chosen
        if getattr(config, "quantization_config", None) is not None:
            # A pre-quantized checkpoint's method names the activation
            # dtypes its kernels take (GPTQ: fp16/bf16); rule
            # quantization_kernels refuses those the CPU cannot run.
            return chosen
        from vllm_bridge.ops import linear

        decision = auto_dtype(
            isa_class,
            _checkpoint_dtype(model_id, config, kwargs),
            chosen,
            envs.LINEAR_KERNEL.get() != "vllm" and linear.available(),
        )
        if decision is None:
            return chosen
        report(
            [
                Change(
                    "model_config.dtype", chosen, decision.dtype, decision.reason, RULE
                )
            ]
        )
        return decision.dtype

    return get_and_verify_dtype


PATCH = Patch(
    name="isa-auto-dtype",
    target="vllm.config.model:_get_and_verify_dtype",
    stage="platform",
    kind="wrap",
    new=decide_auto_dtype,
    why=(
        "vLLM's CPU platform declares bf16 and fp16 native on every x86 CPU, "
        "so `--dtype auto` runs fp16 checkpoints in fp16 (and bf16 ones in "
        "bf16 even where vllm-bridge's bf16 kernel is unavailable) on CPUs "
        "without bf16 arithmetic, where oneDNN refuses those GEMMs and "
        "PyTorch's fallback GEMM is several times slower than float32. The "
        "platform hook vLLM offers (supported_dtypes) cannot see the "
        "checkpoint's dtype nor record why."
    ),
    how=(
        "When the dtype is 'auto' and the CPU class (VLLM_BRIDGE_ISA "
        "included) has no bf16 arithmetic, the dtype vLLM resolved is "
        "replaced by the table in config/isa_defaults.py and the change is "
        "recorded in the audit (rule isa_dtype). An explicit --dtype, and "
        "the dtype of a pre-quantized checkpoint, are never changed."
    ),
    upstream=(
        "none yet: to be proposed to vLLM (CpuPlatform.supported_dtypes "
        "should list bf16/fp16 only where the ISA computes them)"
    ),
    remove_when="vLLM's CPU platform resolves 'auto' by the ISA's arithmetic",
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="e214b7e6c524cb0c",
)
