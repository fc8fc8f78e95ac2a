"""vLLM's CPU attention backend with the KV-cache write inside the attention
call.

vLLM 0.32's CPU backend writes the new keys and values through a custom op
of its own (``vllm::unified_kv_cache_update``) before each attention call:
two trips per layer and step from the compiled graph through the torch
dispatcher into Python, each looking up the forward context and re-slicing
the cache, around C++ kernels of 10-20 µs. Here one call does both, with
the cache's key and value halves sliced once per cache tensor. The kernels
and the metadata are vLLM's own.
"""

from __future__ import annotations

import torch
from vllm.v1.attention.backend import AttentionLayer, AttentionType
from vllm.v1.attention.backends.cpu_attn import (
    CPUAttentionBackend,
    CPUAttentionBackendImpl,
    CPUAttentionMetadata,
)

# The kernel library (vLLM's _C, _C_AVX2 or _C_AVX512) is loaded before any
# backend is chosen; the op handles are looked up once.
_write_kv = torch.ops._C.cpu_attn_reshape_and_cache
_attend = torch.ops._C.cpu_attention_with_kv_cache


class BridgeCpuAttentionBackend(CPUAttentionBackend):
    forward_includes_kv_cache_update: bool = True

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        # Encoder and cross attention keep vLLM's backend (selection.py):
        # their KV cache is written elsewhere or not at all.
        return attn_type == AttentionType.DECODER

    @staticmethod
    def get_impl_cls() -> type[BridgeCpuAttentionImpl]:
        return BridgeCpuAttentionImpl


class BridgeCpuAttentionImpl(CPUAttentionBackendImpl):
    _cache: torch.Tensor | None = None
    _key_cache: torch.Tensor
    _value_cache: torch.Tensor

    def _cache_halves(
        self, kv_cache: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The key and value views of ``kv_cache`` ([blocks, kv heads, block
        size, 2 x head size]), made once per cache tensor."""
        if kv_cache is not self._cache:
            blocks, kv_heads, block_size, _ = kv_cache.size()
            halves = kv_cache.view(blocks, kv_heads, block_size * 2, -1).chunk(2, dim=2)
            self._key_cache, self._value_cache = halves
            self._cache = kv_cache
        return self._key_cache, self._value_cache

    def prepare_sinks(self) -> None:
        """The kernel runs sinks in bf16 or float32 only: others become
        float32, as in vLLM's forward (after the weights are loaded)."""
        if self.sinks is not None and self.sinks.dtype not in (
            torch.bfloat16,
            torch.float32,
        ):
            self.sinks = self.sinks.to(torch.float32)

    def forward(
        self,
        layer: AttentionLayer,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: CPUAttentionMetadata | None,
        output: torch.Tensor,
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if (
            attn_metadata is None
            or output_scale is not None
            or output_block_scale is not None
        ):
            # warm-up (no metadata), or fused output quantization, which
            # vLLM's forward refuses by name
            return super().forward(
                layer,
                query,
                key,
                value,
                kv_cache,
                attn_metadata,
                output,
                output_scale,
                output_block_scale,
            )
        key_cache, value_cache = self._cache_halves(kv_cache)
        tokens = attn_metadata.num_actual_tokens
        k_scale, v_scale = layer._k_scale_float, layer._v_scale_float
        # A layer that shares an earlier layer's cache reads it only; key and
        # value are None where the model computes none.
        if (
            self.kv_sharing_target_layer_name is None
            and key is not None
            and value is not None
        ):
            # [:tokens]: padding tokens have no slot
            _write_kv(
                key[:tokens],
                value[:tokens],
                key_cache,
                value_cache,
                attn_metadata.slot_mapping[:tokens],
                layer.isa,  # type: ignore[attr-defined]
                k_scale,
                v_scale,
                self.kv_cache_dtype,
            )
        self.prepare_sinks()
        _attend(
            query[:tokens],
            key_cache,
            value_cache,
            output[:tokens],
            attn_metadata.query_start_loc,
            attn_metadata.seq_lens,
            self.scale,
            attn_metadata.causal,
            self.alibi_slopes,
            self.sliding_window,
            attn_metadata.block_table,
            self.logits_soft_cap,
            attn_metadata.scheduler_metadata,
            self.sinks,
            attn_metadata.dynamic_causal,
            k_scale,
            v_scale,
            self.kv_cache_dtype,
        )
        return output
