"""vllm-bridge's CPU attention backend: which layers get it, and that its one
call (KV write + attention) leaves the same cache and output as vLLM's two
(``do_kv_cache_update`` then ``forward``) on vLLM's real kernels."""

from __future__ import annotations

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
