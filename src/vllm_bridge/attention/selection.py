"""Which attention backend a layer gets: vllm-bridge's CPU backend where
vLLM would pick its own CPU_ATTN for a decoder layer, vLLM's choice
otherwise. A pure function of vLLM's choice, the layer's attention type and
VLLM_BRIDGE_ATTENTION."""

from __future__ import annotations

from vllm_bridge import envs

VLLM_CPU_BACKEND = "vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend"
BRIDGE_CPU_BACKEND = "vllm_bridge.attention.cpu_backend.BridgeCpuAttentionBackend"
DECODER = "decoder"


def choose_backend(vllm_choice: str, attn_type: str, request: str) -> str:
    """The backend class path for one layer. ``request`` is
    VLLM_BRIDGE_ATTENTION's value: ``bridge`` or ``vllm``."""
    if request == "bridge" and vllm_choice == VLLM_CPU_BACKEND and attn_type == DECODER:
        return BRIDGE_CPU_BACKEND
    return vllm_choice


def requested() -> str:
    return envs.ATTENTION.get()
