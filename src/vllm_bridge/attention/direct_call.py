"""The attention call without Python (csrc/attention_call.cpp): what the
C++ op needs from Python, bound where the model runner runs a forward.

The fusion pass ``attention-direct`` (fusion/attention_direct.py) puts
``vllm_bridge_attn::attend`` in the compiled graph where vLLM calls its
Python attention op. Around each of the model runner's forwards, the
layers of vllm-bridge's CPU backend and the step's metadata are bound for
it; a layer or a forward without a binding (vLLM's dummy runs, another
backend, a quantized KV cache) goes to vLLM's op as before.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import torch

from vllm_bridge.log import get_logger
from vllm_bridge.ops import native

logger = get_logger("attention")

OPS = "vllm_bridge_attn"

bound_runners = 0
"""Model runners in this process whose forwards bind for the op."""


@cache
def available() -> bool:
    """Whether the op is loaded in this process (built if needed)."""
    if not native.load(native.ATTENTION_CALL).loaded:
        return False

    # attend writes into `output` and returns nothing: its fake does nothing.
    @torch.library.register_fake(f"{OPS}::attend")
    def _(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        output: torch.Tensor,
        layer_name: str,
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
        kv_cache_dummy_dep: torch.Tensor | None = None,
    ) -> None:
        return None

    return True


def _layer_binding(name: str, layer: Any) -> tuple[Any, ...] | None:
    """bind_layer's arguments for an attention layer the op can run, None
    for the others."""
    from vllm_bridge.attention.cpu_backend import BridgeCpuAttentionImpl

    impl = getattr(layer, "impl", None)
    if (
        not isinstance(impl, BridgeCpuAttentionImpl)
        # quantized caches: their scales may change after the first steps
        or impl.kv_cache_dtype != "auto"
        or getattr(layer, "calculate_kv_scales", False)
        or not isinstance(getattr(layer, "kv_cache", None), torch.Tensor)
        or layer.kv_cache.dim() != 4
    ):
        return None
    impl.prepare_sinks()
    return (
        name,
        layer.kv_cache,
        impl.scale,
        impl.alibi_slopes,
        impl.sliding_window,
        impl.logits_soft_cap,
        impl.sinks,
        layer._k_scale_float,
        layer._v_scale_float,
        impl.kv_cache_dtype,
        layer.isa,
        impl.kv_sharing_target_layer_name is None,
    )


class StepBinding:
    """The layers bound in this process, and each forward's metadata."""

    def __init__(self) -> None:
        # layer name -> the KV cache tensor it was last looked at with, and
        # whether the op runs it
        self._layers: dict[str, tuple[torch.Tensor, bool]] = {}
        self._ops = getattr(torch.ops, OPS)
        self._failed = False

    def _runs(self, name: str, layer: Any) -> bool:
        kv_cache = getattr(layer, "kv_cache", None)
        seen = self._layers.get(name)
        if seen is not None and seen[0] is kv_cache:
            return seen[1]
        binding = _layer_binding(name, layer)
        if binding is not None:
            self._ops.bind_layer(*binding)
        self._layers[name] = (kv_cache, binding is not None)
        return binding is not None

    def bind(self, forward_context: Any) -> bool:
        """Bind this forward's metadata to the layers that run on the op;
        whether any was bound. Should binding ever fail, this process keeps
        vLLM's op for good (logged): a wrong binding must not stop serving."""
        if self._failed:
            return False
        try:
            return self._bind(forward_context)
        except (RuntimeError, TypeError) as error:
            self._failed = True
            self.unbind()
            logger.warning(
                "vllm-bridge's attention call could not bind this step (%s); "
                "attention runs through vLLM's op from now on.",
                error,
            )
            return False

    def _bind(self, forward_context: Any) -> bool:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionMetadata

        per_layer = forward_context.attn_metadata
        if not isinstance(per_layer, dict):  # None (dummy run) or speculative
            return False
        layers = forward_context.no_compile_layers
        groups: dict[int, tuple[CPUAttentionMetadata, list[str]]] = {}
        for name, metadata in per_layer.items():
            if (
                isinstance(metadata, CPUAttentionMetadata)
                and metadata.scheduler_metadata is not None
                and name in layers
                and self._runs(name, layers[name])
            ):
                groups.setdefault(id(metadata), (metadata, []))[1].append(name)
        for metadata, names in groups.values():
            self._ops.bind_step(
                names,
                metadata.slot_mapping,
                metadata.query_start_loc,
                metadata.seq_lens,
                metadata.block_table,
                metadata.scheduler_metadata,
                metadata.causal,
                metadata.dynamic_causal,
                metadata.num_actual_tokens,
            )
        return bool(groups)

    def unbind(self) -> None:
        self._ops.unbind_step()


def report() -> dict[str, int] | None:
    """For the worker report: the layers bound in this process and those
    holding a step's metadata (0 between forwards); None where no model
    runner binds for the op."""
    if not bound_runners:
        return None
    layers, with_step = getattr(torch.ops, OPS).bound()
    return {"layers": layers, "with_step": with_step}


def bind_around_forward(model_runner: Any) -> None:
    """Bind each of ``model_runner``'s forwards for the op, and unbind after
    it, so that no later call reads a finished step's metadata."""
    from vllm.forward_context import get_forward_context, is_forward_context_available

    forward: Callable[..., Any] = model_runner._model_forward
    binding = StepBinding()

    def bound_forward(*args: Any, **kwargs: Any) -> Any:
        bound = is_forward_context_available() and binding.bind(get_forward_context())
        try:
            return forward(*args, **kwargs)
        finally:
            if bound:
                binding.unbind()

    model_runner._model_forward = bound_forward
    global bound_runners
    bound_runners += 1
