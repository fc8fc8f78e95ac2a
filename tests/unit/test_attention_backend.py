"""vllm-bridge's CPU attention backend: which layers get it, and that its one
call (KV write + attention) leaves the same cache and output as vLLM's two
(``do_kv_cache_update`` then ``forward``) on vLLM's real kernels."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from vllm import _custom_ops as ops
from vllm.config import set_current_vllm_config
from vllm.platforms import current_platform
from vllm.v1.attention.backend import AttentionType
from vllm.v1.attention.backends.cpu_attn import (
    CPUAttentionBackendImpl,
    CPUAttentionMetadata,
    _get_attn_isa,
)
from vllm.v1.attention.selector import AttentionSelectorConfig

from tests.config_support import build
from vllm_bridge import envs
from vllm_bridge.attention import selection
from vllm_bridge.device.cpu import request_amx_permission
from vllm_bridge.errors import BridgeConfigError
from vllm_bridge.platform import BridgePlatform

current_platform.import_kernels()

HEADS, KV_HEADS, HEAD_SIZE, BLOCK = 4, 2, 64, 32


@pytest.mark.parametrize(
    ("vllm_choice", "attn_type", "request_", "chosen"),
    [
        (selection.VLLM_CPU_BACKEND, "decoder", "bridge", selection.BRIDGE_CPU_BACKEND),
        (selection.VLLM_CPU_BACKEND, "decoder", "vllm", selection.VLLM_CPU_BACKEND),
        (
            selection.VLLM_CPU_BACKEND,
            "encoder_only",
            "bridge",
            selection.VLLM_CPU_BACKEND,
        ),
        (selection.VLLM_CPU_BACKEND, "encoder", "bridge", selection.VLLM_CPU_BACKEND),
        (
            selection.VLLM_CPU_BACKEND,
            "encoder_decoder",
            "bridge",
            selection.VLLM_CPU_BACKEND,
        ),
        ("vllm.v1.attention.backends.mla.cpu_mla.X", "decoder", "bridge", None),
    ],
)
def test_choose_backend(vllm_choice, attn_type, request_, chosen):
    assert selection.choose_backend(vllm_choice, attn_type, request_) == (
        chosen or vllm_choice
    )


def selector(attn_type: str = AttentionType.DECODER) -> AttentionSelectorConfig:
    return AttentionSelectorConfig(
        head_size=HEAD_SIZE,
        dtype=torch.float32,
        kv_cache_dtype="auto",
        block_size=BLOCK,
        attn_type=attn_type,
    )


def test_platform_gives_decoder_layers_the_bridge_backend(monkeypatch):
    monkeypatch.delenv(envs.ATTENTION.name, raising=False)
    path = BridgePlatform.get_attn_backend_cls(None, selector())
    assert path == selection.BRIDGE_CPU_BACKEND
    encoder = BridgePlatform.get_attn_backend_cls(None, selector("encoder_only"))
    assert encoder == selection.VLLM_CPU_BACKEND


def test_platform_keeps_vllms_backend_when_asked(monkeypatch):
    monkeypatch.setenv(envs.ATTENTION.name, "vllm")
    assert BridgePlatform.get_attn_backend_cls(None, selector()) == (
        selection.VLLM_CPU_BACKEND
    )


def test_a_bad_attention_setting_names_the_variable_and_the_choices(monkeypatch):
    # the platform hook runs in the workers, after vllm-bridge's config check
    # refused the value in the main process (test_schema.py); the hook
    # refuses it with the same message should it ever get there
    monkeypatch.setenv(envs.ATTENTION.name, "flash")
    with pytest.raises(BridgeConfigError, match=r"ATTENTION='flash'.*bridge, vllm"):
        BridgePlatform.get_attn_backend_cls(None, selector())


def metadata(
    seq_lens: list[int], query_lens: list[int], dtype: torch.dtype, isa: str
) -> CPUAttentionMetadata:
    """Metadata for one step: sequence i has ``seq_lens[i]`` tokens in all,
    the last ``query_lens[i]`` new in this step, and owns block i."""
    starts = torch.tensor([0, *query_lens], dtype=torch.int32).cumsum(
        0, dtype=torch.int32
    )
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    slots = [
        i * BLOCK + position
        for i, (total, new) in enumerate(zip(seq_lens, query_lens, strict=True))
        for position in range(total - new, total)
    ]
    return CPUAttentionMetadata(
        num_actual_tokens=sum(query_lens),
        max_query_len=max(query_lens),
        query_start_loc=starts,
        max_seq_len=max(seq_lens),
        seq_lens=lens,
        block_table=torch.arange(len(seq_lens), dtype=torch.int32)[:, None],
        slot_mapping=torch.tensor(slots, dtype=torch.int64),
        scheduler_metadata=ops.cpu_attn_get_scheduler_metadata(
            num_reqs=len(seq_lens),
            num_heads=HEADS,
            num_kv_heads=KV_HEADS,
            head_dim=HEAD_SIZE,
            seq_lens=lens,
            dtype=dtype,
            query_start_loc=starts,
            causal=True,
            sliding_window_size=-1,
            isa=isa,
            enable_kv_split=False,
        ),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_call_leaves_what_vllms_two_calls_leave(tiny_model: Path, dtype):
    from vllm_bridge.attention.cpu_backend import BridgeCpuAttentionImpl

    isa = _get_attn_isa(dtype, BLOCK, HEAD_SIZE, "auto")
    # the AMX kernels (bf16 on AMX CPUs) need the process's tile permission,
    # which the engine's worker requests (SIGILL without it)
    request_amx_permission()
    # The attention layer as the kernels see it: its kernel ISA and KV scales
    # (a real Attention layer needs a model around it).
    layer = SimpleNamespace(isa=isa, _k_scale_float=1.0, _v_scale_float=1.0)
    with set_current_vllm_config(build(tiny_model)):
        impls = [
            cls(HEADS, HEAD_SIZE, HEAD_SIZE**-0.5, KV_HEADS, None, None, "auto")
            for cls in (CPUAttentionBackendImpl, BridgeCpuAttentionImpl)
        ]
    caches = [
        torch.zeros(2, KV_HEADS, BLOCK, 2 * HEAD_SIZE, dtype=dtype) for _ in impls
    ]
    generator = torch.Generator().manual_seed(0)
    # a prefill of 5 and 3 tokens, then a decode step of one token each
    for seq_lens, query_lens in (([5, 3], [5, 3]), ([6, 4], [1, 1])):
        tokens = sum(query_lens)
        q, k, v = (
            torch.randn(tokens, heads, HEAD_SIZE, generator=generator).to(dtype)
            for heads in (HEADS, KV_HEADS, KV_HEADS)
        )
        step = metadata(seq_lens, query_lens, dtype, isa)
        outputs = [torch.zeros(tokens, HEADS, HEAD_SIZE, dtype=dtype) for _ in impls]
        vllm_impl, bridge_impl = impls
        vllm_impl.do_kv_cache_update(layer, k, v, caches[0], step.slot_mapping)
        vllm_impl.forward(layer, q, k, v, caches[0], step, outputs[0])
        bridge_impl.forward(layer, q, k, v, caches[1], step, outputs[1])
        assert torch.equal(caches[0], caches[1])
        assert torch.equal(outputs[0], outputs[1])
        assert outputs[1].abs().sum() > 0


LAYER = "model.layers.0.self_attn.attn"


def attention_layer(impl: object, kv_cache: torch.Tensor, isa: str) -> SimpleNamespace:
    """An attention layer as the forward context holds it: its backend impl,
    KV cache, kernel ISA and KV scales (a real Attention layer needs a model
    around it)."""
    return SimpleNamespace(
        impl=impl, kv_cache=kv_cache, isa=isa, _k_scale_float=1.0, _v_scale_float=1.0
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_cpp_call_leaves_what_vllms_two_calls_leave(tiny_model: Path, dtype):
    """The fusion pass attention-direct's op, bound as the worker binds it,
    against vLLM's backend on the same steps (a prefill, then a decode step
    with two padding tokens after the real ones)."""
    from vllm_bridge.attention import direct_call
    from vllm_bridge.attention.cpu_backend import BridgeCpuAttentionImpl

    assert direct_call.available()
    isa = _get_attn_isa(dtype, BLOCK, HEAD_SIZE, "auto")
    request_amx_permission()
    with set_current_vllm_config(build(tiny_model)):
        vllm_impl, bridge_impl = (
            cls(HEADS, HEAD_SIZE, HEAD_SIZE**-0.5, KV_HEADS, None, None, "auto")
            for cls in (CPUAttentionBackendImpl, BridgeCpuAttentionImpl)
        )
    caches = [torch.zeros(2, KV_HEADS, BLOCK, 2 * HEAD_SIZE, dtype=dtype) for _ in "ab"]
    vllm_layer = attention_layer(vllm_impl, caches[0], isa)
    binding = direct_call.StepBinding()
    context = SimpleNamespace(
        no_compile_layers={LAYER: attention_layer(bridge_impl, caches[1], isa)}
    )
    generator = torch.Generator().manual_seed(0)
    for seq_lens, query_lens, padding in (([5, 3], [5, 3], 0), ([6, 4], [1, 1], 2)):
        tokens = sum(query_lens)
        q, k, v = (
            torch.randn(tokens + padding, heads, HEAD_SIZE, generator=generator).to(
                dtype
            )
            for heads in (HEADS, KV_HEADS, KV_HEADS)
        )
        step = metadata(seq_lens, query_lens, dtype, isa)
        outputs = [
            torch.zeros(tokens + padding, HEADS, HEAD_SIZE, dtype=dtype) for _ in "ab"
        ]
        vllm_impl.do_kv_cache_update(
            vllm_layer, k[:tokens], v[:tokens], caches[0], step.slot_mapping
        )
        vllm_impl.forward(vllm_layer, q, k, v, caches[0], step, outputs[0])
        context.attn_metadata = {LAYER: step}
        assert binding.bind(context)
        torch.ops.vllm_bridge_attn.attend(q, k, v, outputs[1], LAYER)
        binding.unbind()
        assert torch.equal(caches[0], caches[1])
        assert torch.equal(outputs[0], outputs[1])
        assert outputs[1][:tokens].abs().sum() > 0


def test_a_layer_the_cpp_call_cannot_run_is_left_to_vllm(tiny_model: Path):
    from vllm_bridge.attention import direct_call
    from vllm_bridge.attention.cpu_backend import BridgeCpuAttentionImpl

    isa = _get_attn_isa(torch.float32, BLOCK, HEAD_SIZE, "auto")
    cache = torch.zeros(2, KV_HEADS, BLOCK, 2 * HEAD_SIZE)
    with set_current_vllm_config(build(tiny_model)):
        vllm_impl, bridge_impl, fp8_impl = (
            cls(HEADS, HEAD_SIZE, HEAD_SIZE**-0.5, KV_HEADS, None, None, dtype)
            for cls, dtype in (
                (CPUAttentionBackendImpl, "auto"),
                (BridgeCpuAttentionImpl, "auto"),
                (BridgeCpuAttentionImpl, "fp8_e4m3"),
            )
        )
    assert direct_call._layer_binding(LAYER, attention_layer(bridge_impl, cache, isa))
    # vLLM's backend (another layer type), a quantized KV cache (its scales
    # may change after the first steps), no KV cache yet
    assert (
        direct_call._layer_binding(LAYER, attention_layer(vllm_impl, cache, isa))
        is None
    )
    assert (
        direct_call._layer_binding(LAYER, attention_layer(fp8_impl, cache, isa)) is None
    )
    no_cache = attention_layer(bridge_impl, torch.tensor([]), isa)
    assert direct_call._layer_binding(LAYER, no_cache) is None


def test_after_a_forward_every_call_goes_to_vllms_op_again(tiny_model: Path):
    """The worker binds the step around the model runner's forward only: a
    later call with no step bound (vLLM's dummy runs call the model
    directly) must not read the finished step's metadata, and goes to
    vLLM's op, which finds the forward context's metadata (None there)."""
    from vllm.forward_context import set_forward_context

    from vllm_bridge.attention import direct_call
    from vllm_bridge.attention.cpu_backend import BridgeCpuAttentionImpl

    class RecordingImpl(BridgeCpuAttentionImpl):
        """Records the metadata of the calls vLLM's op makes."""

        def forward(self, layer, query, key, value, kv_cache, attn_metadata, **rest):
            self.received.append(attn_metadata)
            return super().forward(
                layer, query, key, value, kv_cache, attn_metadata, **rest
            )

    dtype = torch.float32
    isa = _get_attn_isa(dtype, BLOCK, HEAD_SIZE, "auto")
    config = build(tiny_model, dtype="float32")
    with set_current_vllm_config(config):
        impl = RecordingImpl(
            HEADS, HEAD_SIZE, HEAD_SIZE**-0.5, KV_HEADS, None, None, "auto"
        )
    impl.received = []
    cache = torch.zeros(2, KV_HEADS, BLOCK, 2 * HEAD_SIZE, dtype=dtype)
    config.compilation_config.static_forward_context[LAYER] = attention_layer(
        impl, cache, isa
    )
    generator = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(8, heads, HEAD_SIZE, generator=generator)
        for heads in (HEADS, KV_HEADS, KV_HEADS)
    )
    output = torch.zeros(8, HEADS, HEAD_SIZE)

    def model_forward() -> None:
        torch.ops.vllm_bridge_attn.attend(q, k, v, output, LAYER)

    # Stand-in for vLLM's model runner, whose real one runs in the engine
    # tests (tests/engine/test_llm_compiled.py): only its _model_forward is
    # wrapped.
    runner = SimpleNamespace(_model_forward=model_forward)
    direct_call.bind_around_forward(runner)
    step = metadata([8], [8], dtype, isa)
    with set_forward_context({LAYER: step}, config, slot_mapping={}):
        runner._model_forward()
    assert impl.received == []  # the C++ call ran the kernels itself
    assert output.abs().sum() > 0
    # the layer stays bound (until its KV cache changes), the step not
    assert direct_call.report()["with_step"] == 0

    written = cache.clone()
    output.zero_()
    with set_forward_context(None, config, slot_mapping={}):
        model_forward()
    assert impl.received == [None]
    assert not output.any() and torch.equal(cache, written)


class Recorded(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_binding_that_fails_leaves_attention_to_vllms_op(tiny_model: Path):
    from vllm_bridge.attention import direct_call
    from vllm_bridge.attention.cpu_backend import BridgeCpuAttentionImpl

    isa = _get_attn_isa(torch.float32, BLOCK, HEAD_SIZE, "auto")
    with set_current_vllm_config(build(tiny_model)):
        impl = BridgeCpuAttentionImpl(
            HEADS, HEAD_SIZE, HEAD_SIZE**-0.5, KV_HEADS, None, None, "auto"
        )
    # a layer without a kernel ISA name: bind_layer refuses it
    layer = attention_layer(impl, torch.zeros(2, KV_HEADS, BLOCK, 2 * HEAD_SIZE), None)
    context = SimpleNamespace(
        attn_metadata={LAYER: metadata([8], [8], torch.float32, isa)},
        no_compile_layers={LAYER: layer},
    )
    recorded = Recorded()
    direct_call.logger.addHandler(recorded)
    try:
        binding = direct_call.StepBinding()
        assert not binding.bind(context)
        layer.isa = isa
        assert not binding.bind(context)  # for the rest of the process
    finally:
        direct_call.logger.removeHandler(recorded)
    assert len(recorded.messages) == 1
    assert "attention runs through vLLM's op from now on" in recorded.messages[0]
