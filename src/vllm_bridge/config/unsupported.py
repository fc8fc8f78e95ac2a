"""Options of vLLM 0.32's VllmConfig that only a GPU can honour.

vLLM's CPU path ignores them silently; vllm-bridge puts them back to their
default so the audit says the user's setting is not honoured (and strict
mode refuses it). Each entry was checked against vLLM 0.32.0's config
classes; tests/unit/test_unsupported.py sets every one through EngineArgs.
Not listed: partial prefills (vLLM 0.32 has no ``max_num_partial_prefills``);
cascade attention (removed from vLLM: ``--disable-cascade-attn`` is a
deprecated no-op that vLLM warns about itself); Nsight profiling of Ray
workers (vLLM refuses it without Ray); dual-batch overlap (``enable_dbo``) and
CUDA-graph capture sizes are reset by vLLM's own CPU platform and recorded
as its changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vllm_bridge.config.audit import Change

if TYPE_CHECKING:
    from vllm.config import VllmConfig

    from vllm_bridge.config.schema import BridgeConfig

RULE = "cpu_unsupported"


@dataclass(frozen=True)
class UnsupportedOption:
    option: str
    """``section.field`` of VllmConfig."""
    default: object
    """vLLM's default, which the CPU path behaves as."""
    reason: str


_NO_CUDA_GRAPHS = "there are no CUDA graphs on the CPU"
UNSUPPORTED_OPTIONS = (
    UnsupportedOption(
        "attention_config.use_trtllm_attention",
        None,
        "TensorRT-LLM attention kernels run on NVIDIA GPUs only",
    ),
    UnsupportedOption(
        "attention_config.flash_attn_version",
        None,
        "FlashAttention is a GPU kernel; the CPU uses vLLM's CPU attention backend",
    ),
    UnsupportedOption(
        "attention_config.disable_flashinfer_q_quantization",
        False,
        "FlashInfer is a GPU kernel library, not used on the CPU",
    ),
    UnsupportedOption(
        "observability_config.enable_layerwise_nvtx_tracing",
        False,
        "NVTX ranges are read by NVIDIA's GPU profilers only",
    ),
    UnsupportedOption(
        "observability_config.cudagraph_metrics",
        False,
        _NO_CUDA_GRAPHS,
    ),
    UnsupportedOption(
        "compilation_config.cudagraph_mm_encoder",
        False,
        _NO_CUDA_GRAPHS,
    ),
    UnsupportedOption(
        "model_config.sleep_mode_offload_cudagraph",
        False,
        _NO_CUDA_GRAPHS,
    ),
)


def reset_unsupported(vllm_config: VllmConfig, bridge: BridgeConfig) -> list[Change]:
    changes = []
    for entry in UNSUPPORTED_OPTIONS:
        section_name, field = entry.option.split(".")
        section = getattr(vllm_config, section_name)
        if section is None:
            continue
        value = getattr(section, field)
        if value == entry.default:
            continue
        setattr(section, field, entry.default)
        changes.append(
            Change(
                entry.option,
                value,
                entry.default,
                f"not honoured on the CPU: {entry.reason}",
                RULE,
                user_set=True,
            )
        )
    return changes
