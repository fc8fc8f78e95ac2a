"""The fusion pass manager and its passes, on real Inductor compiles of the
ops vLLM's int8 layers call (vllm._custom_ops), with the inductor options
vLLM's CPU platform sets; and the manager's place in a real VllmConfig."""

from __future__ import annotations

import operator
from pathlib import Path

import pytest
import torch
from vllm import _custom_ops as ops

from tests import config_support
from vllm_bridge import envs
from vllm_bridge.errors import BridgeConfigError
from vllm_bridge.fusion import manager
from vllm_bridge.fusion.catalogue import NAMES, PASSES
from vllm_bridge.fusion.int8_quant_inline import quantize_per_token
from vllm_bridge.patches.worker.compile_cache_bridge_key import bridge_factors
from vllm_bridge.tools import pass_docs

REPO = Path(__file__).resolve().parents[2]
QUANT_OP = "_C::dynamic_scaled_int8_quant"
HIDDEN = 896


def norm_then_quantize(
    x: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """An RMSNorm (as vLLM's native rms_norm computes it) feeding the
    per-token int8 quantization of vLLM's oneDNN int8 layers."""
    as_float = x.float()
    variance = as_float.pow(2).mean(-1, keepdim=True)
    normed = (as_float * torch.rsqrt(variance + 1e-6)).to(x.dtype) * weight
    quantized, scales, _ = ops.onednn_scaled_int8_quant(normed, None, None, True)
    return quantized, scales


ZERO_ROW = 5


def inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(33, HIDDEN, generator=generator) * 3
    x[ZERO_ROW] = 0  # a row of zeros: scale 0
    weight = torch.rand(HIDDEN, generator=generator) + 0.5
    return x.to(dtype), weight.to(dtype)


def with_zero_scale_rows_cleared(
    quantized: torch.Tensor, scales: torch.Tensor
) -> torch.Tensor:
    """The int8 values with every row of scale 0 set to 0: such a row
    dequantizes to 0 whatever it holds, and vLLM's kernels differ there
    (its AVX-512 build writes 0, its AVX2 build -128, from 0 times 1/0)."""
    return torch.where(scales == 0, 0, quantized).to(torch.int8)


def compile_and_run(
    passes: tuple, x: torch.Tensor, weight: torch.Tensor
) -> tuple[tuple[torch.Tensor, torch.Tensor], set[str]]:
    """Outputs of ``norm_then_quantize`` compiled by Inductor with ``passes``
    (no graph cache: every call compiles), and the operators it ran."""
    torch._dynamo.reset()
    compiled = torch.compile(
        norm_then_quantize,
        backend="inductor",
        dynamic=True,
        options={
            # as vLLM's CPU config sets it
            "enable_auto_functionalized_v2": False,
            "fx_graph_cache": False,
            manager.INDUCTOR_OPTION: manager.BridgePassManager(passes),
        },
    )
    compiled(x, weight)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
        outputs = compiled(x, weight)
    return outputs, {event.key for event in p.key_averages()}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_replacement_computes_what_the_op_computes(dtype):
    x, _ = inputs(dtype)
    expected, expected_scales, _ = ops.onednn_scaled_int8_quant(x, None, None, True)
    quantized, scales = quantize_per_token(torch.empty(0), x, torch.empty(0))
    assert torch.equal(scales, expected_scales)
    assert scales[ZERO_ROW] == 0 and not quantized[ZERO_ROW].any()
    assert torch.equal(quantized, with_zero_scale_rows_cleared(expected, scales))


def test_the_quantization_op_leaves_the_compiled_graph():
    x, weight = inputs(torch.float32)
    before = manager.rewrites.get("int8-quant-inline", 0)
    (quantized, scales), ran = compile_and_run(PASSES, x, weight)
    assert QUANT_OP not in ran
    assert manager.rewrites["int8-quant-inline"] == before + 1
    (unfused, unfused_scales), ran_unfused = compile_and_run((), x, weight)
    assert QUANT_OP in ran_unfused
    # float32 activations: the same bits either way
    assert torch.equal(scales, unfused_scales)
    assert torch.equal(quantized, with_zero_scale_rows_cleared(unfused, scales))


def test_with_bf16_activations_it_quantizes_the_unrounded_norm():
    # Fused, Inductor keeps the norm's output in float32 instead of storing
    # it as bf16 for the op to read: at most one int8 step apart, where the
    # bf16 rounding crossed a rounding boundary, and closer to the exact
    # value on average.
    x, weight = inputs(torch.bfloat16)
    (quantized, scales), ran = compile_and_run(PASSES, x, weight)
    (unfused, unfused_scales), _ = compile_and_run((), x, weight)
    assert QUANT_OP not in ran
    unfused_cleared = with_zero_scale_rows_cleared(unfused, unfused_scales)
    assert (quantized.int() - unfused_cleared.int()).abs().max() <= 1
    exact_x = x.double()
    exact = (
        exact_x * torch.rsqrt(exact_x.pow(2).mean(-1, keepdim=True) + 1e-6)
    ) * weight.double()

    def error(q: torch.Tensor, s: torch.Tensor) -> float:
        return float((q.double() * s.double() - exact).abs().mean())

    assert error(quantized, scales) <= error(unfused, unfused_scales)


def test_only_passes_that_help_run_by_default(monkeypatch):
    monkeypatch.delenv(envs.ENABLE_PASSES.name, raising=False)
    monkeypatch.delenv(envs.DISABLE_PASSES.name, raising=False)
    assert manager.enabled_passes() == tuple(p for p in PASSES if p.on_by_default)
    assert [p.name for p in manager.enabled_passes()] == ["attention-direct"]
    monkeypatch.setenv(envs.ENABLE_PASSES.name, "int8-quant-inline")
    assert [p.name for p in manager.enabled_passes()] == list(NAMES)
    monkeypatch.setenv(envs.ENABLE_PASSES.name, "all")
    assert manager.enabled_passes() == PASSES


def test_disable_wins_and_leaves_the_op_in_the_graph(monkeypatch):
    monkeypatch.setenv(envs.ENABLE_PASSES.name, "all")
    monkeypatch.setenv(envs.DISABLE_PASSES.name, "int8-quant-inline")
    assert [p.name for p in manager.enabled_passes()] == ["attention-direct"]
    _, ran = compile_and_run(manager.enabled_passes(), *inputs(torch.float32))
    assert QUANT_OP in ran


def test_an_unknown_pass_name_is_refused_with_the_known_ones(monkeypatch):
    monkeypatch.setenv(envs.ENABLE_PASSES.name, "int8-quant-inlne")
    with pytest.raises(BridgeConfigError) as error:
        manager.enabled_passes()
    message = str(error.value)
    assert "VLLM_BRIDGE_ENABLE_PASSES='int8-quant-inlne'" in message
    assert "unknown fusion pass(es) int8-quant-inlne" in message
    assert "int8-quant-inline" in message.split("known passes:")[1]


def test_the_cache_key_changes_with_the_passes():
    assert manager.BridgePassManager(PASSES).uuid() != (
        manager.BridgePassManager(()).uuid()
    )
    assert manager.BridgePassManager(PASSES).uuid() == (
        manager.BridgePassManager(PASSES).uuid()
    )


def test_the_compile_cache_key_names_the_passes_that_run(monkeypatch):
    monkeypatch.delenv(envs.ENABLE_PASSES.name, raising=False)
    default = bridge_factors()
    monkeypatch.setenv(envs.ENABLE_PASSES.name, "int8-quant-inline")
    assert (
        "vllm-bridge fusion passes int8-quant-inline,attention-direct"
        in bridge_factors()
    )
    assert bridge_factors() != default


def test_installed_where_the_worker_compiles_with_inductor(
    tiny_model: Path, monkeypatch
):
    monkeypatch.setenv(envs.ENABLE_PASSES.name, "int8-quant-inline")
    compiled = config_support.build(tiny_model, dtype="float32")
    assert manager.install(compiled.compilation_config)
    options = compiled.compilation_config.inductor_compile_config
    assert isinstance(options[manager.INDUCTOR_OPTION], manager.BridgePassManager)
    assert [p.name for p in options[manager.INDUCTOR_OPTION].passes] == list(NAMES)

    eager = config_support.build(tiny_model, dtype="float32", enforce_eager=True)
    assert not manager.install(eager.compilation_config)
    assert (
        manager.INDUCTOR_OPTION not in eager.compilation_config.inductor_compile_config
    )


def test_not_installed_when_no_pass_runs(tiny_model: Path, monkeypatch):
    monkeypatch.setenv(envs.DISABLE_PASSES.name, "all")
    compiled = config_support.build(tiny_model, dtype="float32")
    assert not manager.install(compiled.compilation_config)
    options = compiled.compilation_config.inductor_compile_config
    assert manager.INDUCTOR_OPTION not in options


LAYER = "model.layers.0.self_attn.attn"


def attention_call(
    layer_name: object = LAYER, fused_output_quantization: bool = False
) -> tuple[torch.fx.Graph, torch.fx.Node]:
    """A post-grad graph's attention call, as Inductor hands it to the pass
    (vLLM's op, functionalized: it writes into ``output``)."""
    # registers vLLM's attention op, as loading a model does
    import vllm.model_executor.layers.attention.attention  # noqa: F401
    from torch._higher_order_ops.auto_functionalize import auto_functionalized

    graph = torch.fx.Graph()
    query, key, value, output, scale = (
        graph.placeholder(name) for name in ("query", "key", "value", "output", "scale")
    )
    layer = graph.placeholder("layer") if layer_name is None else layer_name
    call = graph.call_function(
        auto_functionalized,
        (torch.ops.vllm.unified_attention_with_output.default,),
        {
            "query": query,
            "key": key,
            "value": value,
            "output": output,
            "layer_name": layer,
            "output_scale": scale if fused_output_quantization else None,
            "output_block_scale": None,
            "kv_cache_dummy_dep": None,
        },
    )
    graph.output(graph.call_function(operator.getitem, (call, 1)))
    return graph, call


def test_attention_direct_points_the_call_at_the_cpp_op():
    from vllm_bridge.attention import direct_call
    from vllm_bridge.fusion import attention_direct

    assert direct_call.available(), "the C++ op builds on every CPU with g++"
    graph, call = attention_call()
    arguments = dict(call.kwargs)
    assert attention_direct.rewrite(graph) == 1
    assert call.args == (torch.ops.vllm_bridge_attn.attend.default,)
    # same arguments, same mutated output read by the same getitem
    assert call.kwargs == arguments
    graph.lint()
    assert str(torch.ops.vllm_bridge_attn.attend.default._schema).split("(", 1)[1] == (
        str(torch.ops.vllm.unified_attention_with_output.default._schema)
        .split("(", 1)[1]
        .replace("a3!", "a!")
        .replace("a6!", "b!")
    )


@pytest.mark.parametrize(
    ("layer_name", "fused_output_quantization"),
    [
        # VLLM_USE_LAYERNAME=1: vLLM's opaque LayerName, lifted as a graph
        # input; the C++ op takes a str
        (None, False),
        # an output quantized in the attention call: vLLM's op refuses it
        # by name on the CPU, and so it stays
        (LAYER, True),
    ],
)
def test_attention_direct_leaves_calls_the_cpp_op_does_not_take(
    layer_name, fused_output_quantization
):
    from vllm_bridge.fusion import attention_direct

    graph, call = attention_call(layer_name, fused_output_quantization)
    assert attention_direct.rewrite(graph) == 0
    assert call.args == (torch.ops.vllm.unified_attention_with_output.default,)


def test_a_pass_that_cannot_run_here_is_neither_installed_nor_in_the_key(
    tiny_model: Path, monkeypatch
):
    from vllm_bridge.attention import direct_call

    monkeypatch.delenv(envs.ENABLE_PASSES.name, raising=False)
    monkeypatch.delenv(envs.DISABLE_PASSES.name, raising=False)
    assert "vllm-bridge fusion passes attention-direct" in bridge_factors()
    # Mocked: the C++ op builds here; a machine without a compiler cannot be
    # made in the test.
    monkeypatch.setattr(direct_call, "available", lambda: False)
    assert "vllm-bridge fusion passes " in bridge_factors()
    compiled = config_support.build(tiny_model, dtype="float32")
    assert manager.install(compiled.compilation_config) == ()
    options = compiled.compilation_config.inductor_compile_config
    assert manager.INDUCTOR_OPTION not in options


def test_the_docs_are_current():
    assert (REPO / "docs" / "passes.md").read_text() == pass_docs.render(PASSES)
