"""``--quantization bridge_int8``: any bf16/fp16/fp32 checkpoint served with
int8 weights, quantized while it loads (no offline step).

Weights: symmetric int8, one float32 scale per output channel. Activations:
int8 with one scale per token, computed at run time. Decoding on a CPU reads
every weight once per step, so halving the bytes of the linear layers is what
speeds it up. The embedding and the output head stay in the model's dtype.

This module stays light (vLLM imports it while building its argument
parser); the layers' code is in int8_linear.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig

from vllm_bridge import envs
from vllm_bridge.quantization.kernel_table import Int8Kernel

if TYPE_CHECKING:
    from vllm.model_executor.layers.quantization.base_config import (
        QuantizeMethodBase,
    )

METHOD_NAME = "bridge_int8"


def resident_bytes(on_disk: int, model_config: Any) -> int:
    """An upper estimate of the weights' bytes once loaded with this
    method, from their size on disk: the embedding (and an untied output
    head) in the model's dtype, everything else a byte per parameter
    (norms, a few kB, are counted as if quantized too)."""
    hf_config = model_config.hf_text_config
    checkpoint_dtype = getattr(hf_config, "dtype", None) or getattr(
        hf_config, "torch_dtype", None
    )
    if isinstance(checkpoint_dtype, str):
        checkpoint_dtype = getattr(torch, checkpoint_dtype, None)
    if not isinstance(checkpoint_dtype, torch.dtype):
        # unknown: 2-byte weights give the most parameters, the safe side
        checkpoint_dtype = torch.bfloat16
    stored = torch.empty(0, dtype=checkpoint_dtype).element_size()
    loaded = torch.empty(0, dtype=model_config.dtype).element_size()
    embeddings = model_config.get_vocab_size() * model_config.get_hidden_size()
    if not getattr(hf_config, "tie_word_embeddings", False):
        embeddings *= 2
    rest = max(on_disk - embeddings * stored, 0) // stored
    return embeddings * loaded + rest


def resolved_kernel() -> Int8Kernel:
    """The kernel the main process chose (rule quantization_kernels,
    inherited by the engine core and workers through VLLM_BRIDGE_INT8_KERNEL)."""
    request = envs.INT8_KERNEL.get()
    return cast(Int8Kernel, "onednn" if request == "auto" else request)


class BridgeInt8Config(QuantizationConfig):
    """Online W8A8 int8 for the linear layers of any checkpoint."""

    @classmethod
    def get_name(cls) -> str:  # type: ignore[override]
        return METHOD_NAME

    @classmethod
    def get_supported_act_dtypes(cls) -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16, torch.float32]

    @classmethod
    def get_min_capability(cls) -> int:
        return -1  # no GPU compute capability: the CPU class decides

    @classmethod
    def get_config_filenames(cls) -> list[str]:
        return []  # online: nothing to read from the checkpoint

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BridgeInt8Config:
        return cls()

    def get_quant_method(
        self, layer: torch.nn.Module, prefix: str
    ) -> QuantizeMethodBase | None:
        from vllm.model_executor.layers.linear import LinearBase

        from vllm_bridge.quantization.int8_linear import BridgeInt8LinearMethod

        if isinstance(layer, LinearBase):
            # Read here, in the worker: vLLM builds this config in the main
            # process before the rules resolve the kernel.
            return BridgeInt8LinearMethod(resolved_kernel())
        return None
