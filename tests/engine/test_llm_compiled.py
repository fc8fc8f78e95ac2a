"""LLM(model=tiny) with defaults only: multiprocess, compiled (float32, at
the serve sizes, so that tests/engine/test_serve.py's server loads this
compiled graph)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm import LLM

from tests.engine.llm_support import (
    SERVE_SCHEDULER_DEFAULTS,
    greedy,
    kernel_calls,
    running_llm,
)
from vllm_bridge.attention.selection import BRIDGE_CPU_BACKEND
from vllm_bridge.config import audit
from vllm_bridge.device.isa import detect

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def started() -> list:
    """The changes the main process recorded while the engine started."""
    return []


@pytest.fixture(scope="module")
def llm(tiny_model: Path, started: list) -> Iterator[LLM]:
    # dtype: vLLM on the CPU runs float32 checkpoints in bfloat16 unless told;
    # the reference is float32.
    with (
        audit.capture() as changes,
        running_llm(tiny_model, dtype="float32", **SERVE_SCHEDULER_DEFAULTS) as engine,
    ):
        started.extend(changes)
        yield engine


def test_greedy_tokens_match_transformers(llm: LLM, hf_greedy: list[list[int]]):
    assert greedy(llm) == hf_greedy


def test_compiled_mode_is_the_cpu_one(llm: LLM):
    from vllm.config import CompilationMode

    compilation = llm.llm_engine.vllm_config.compilation_config
    assert compilation.mode == CompilationMode.DYNAMO_TRACE_ONCE
    assert compilation.backend == "inductor"


def test_the_graph_calls_its_kernels_from_cpp(llm: LLM):
    """Rule inductor_cpp_wrapper: the graph's wrapper in the worker's compile
    cache (keyed by the config, cpp_wrapper included) is C++ code, and no
    Python wrapper (inductor's ``def call(self, args)``) was generated."""
    assert (
        llm.llm_engine.vllm_config.compilation_config.inductor_compile_config[
            "cpp_wrapper"
        ]
        is True
    )
    (report,) = llm.collective_rpc("bridge_report")
    inductor_cache = Path(report["compile_cache_dir"]) / "inductor_cache"
    code = {
        path: path.read_text(errors="replace")
        for pattern in ("*.py", "*.cpp")
        for path in inductor_cache.rglob(pattern)
    }
    assert any("inductor_entry_impl" in text for text in code.values()), sorted(code)
    assert not any("def call(" in text for text in code.values())


def test_the_attention_pass_is_the_one_pass_at_defaults(llm: LLM):
    # The int8 pass measured slower and is off by default (docs/passes.md);
    # what the passes rewrite is checked on real graphs in
    # tests/unit/test_fusion_passes.py, what the attention pass's op runs in
    # test_attention_runs_from_the_graph_without_python below.
    (report,) = llm.collective_rpc("bridge_report")
    assert report["fusion_passes"]["enabled"] == ["attention-direct"]
    assert report["fusion_passes"]["installed"] == ["attention-direct"]


def test_worker_runs_bridge_platform_and_worker(llm: LLM):
    (report,) = llm.collective_rpc("bridge_report")
    assert report["platform"] == "vllm_bridge.platform.BridgePlatform"
    assert report["worker_class"] == "vllm_bridge.worker.BridgeWorker"
    assert report["is_cpu"] is True
    assert report["pin_memory"] is False
    # The kernel grants AMX tile state before the worker's first step, on
    # AMX CPUs; elsewhere nothing is asked.
    assert report["amx_requested"] is detect().has("amx")
    if detect().has("amx"):
        assert report["amx_permitted_at_init"] is True
    # the C++ fallback for the Triton kernel of the first step
    assert (
        "vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel"
        in (report["triton_overrides"])
    )


def test_worker_runs_the_config_the_main_process_reconciled(llm: LLM):
    """The config reaches the worker through the engine-core process, which
    reconciles it a second time: every audited option must arrive as the
    main process left it."""
    from vllm_bridge.config.reconcile import audited_values

    (report,) = llm.collective_rpc("bridge_report")
    main_process = audited_values(llm.llm_engine.vllm_config)
    assert report["audited_config"] == main_process
    assert main_process["compilation_config.mode"] == "DYNAMO_TRACE_ONCE"


def test_kv_cache_takes_memory_only_where_it_is_written(llm: LLM):
    """vLLM allocates the KV cache with torch.zeros, which writes all of it
    at start: without the kv-cache-zero-pages patch every page of the cache
    is resident."""
    greedy(llm)  # writes a few blocks
    (report,) = llm.collective_rpc("bridge_report")
    assert report["patches"]["kv-cache-zero-pages"] == "applied"
    assert report["kv_cache_bytes"] >= 64 * 2**20
    assert 0 < report["kv_cache_resident_bytes"] < report["kv_cache_bytes"] / 4


def test_executor_is_multiprocess(llm: LLM):
    parallel = llm.llm_engine.vllm_config.parallel_config
    assert parallel.distributed_executor_backend == "mp"


def test_main_process_recorded_the_cpu_defaults(llm: LLM, started: list):
    options = {change.option for change in started}
    assert {
        "parallel_config.worker_cls",
        "cache_config.kv_cache_memory_bytes",
    } <= options


@pytest.fixture(scope="module")
def calls(llm: LLM) -> dict[str, int]:
    return kernel_calls(llm)


def test_hot_paths_run_vllm_cpu_kernels(calls: dict[str, int]):
    for kernel in (
        "_C::onednn_mm",  # GEMMs
        "_C::cpu_attention_with_kv_cache",
        "_C::cpu_attn_reshape_and_cache",
        "_C::greedy_argmax",  # the CPU sampler path
        "_C::compute_slot_mapping_kernel_impl",  # Triton fallback
    ):
        assert calls.get(kernel, 0) > 0, kernel
    # norms, rotary and SiLU-and-mul are fused by inductor into the graph
    assert calls.get("## Call CompiledFxGraph None ##", 0) > 0


def test_attention_runs_from_the_graph_without_python(llm: LLM, calls: dict[str, int]):
    # vllm-bridge's attention backend: the KV write inside the attention
    # call, where vLLM's CPU backend makes a second one; and the pass
    # attention-direct: that call is vllm-bridge's C++ op, which calls the
    # two kernels itself, not vLLM's Python op (left to dummy runs).
    (report,) = llm.collective_rpc("bridge_report")
    layers = llm.llm_engine.vllm_config.model_config.get_num_layers(
        llm.llm_engine.vllm_config.parallel_config
    )
    assert report["attention_backends"] == {BRIDGE_CPU_BACKEND: layers}
    assert "vllm::unified_kv_cache_update" not in calls
    assert "vllm::unified_attention_with_output" not in calls
    assert calls["vllm_bridge_attn::attend"] > 0
    assert (
        calls["_C::cpu_attn_reshape_and_cache"]
        == calls["_C::cpu_attention_with_kv_cache"]
        == calls["vllm_bridge_attn::attend"]
    )
    # every layer bound; between steps no metadata stays bound
    assert report["attention_direct"] == {"layers": layers, "with_step": 0}


def test_every_patch_is_settled_in_main_and_worker(llm: LLM):
    from vllm_bridge.patches.catalogue import REGISTRY

    main_process = {name: r.status for name, r in REGISTRY.records().items()}
    (report,) = llm.collective_rpc("bridge_report")
    # A patch whose target module a process never imports stays deferred; a
    # conditional one (isa-switch) is inactive where its condition is false.
    for patch in REGISTRY.patches():
        settled = ("applied", "deferred")
        if patch.active_when is not None:
            settled = ("applied",) if patch.active_when() else ("inactive",)
        if patch.stage != "worker":  # worker patches: in the worker only
            assert main_process.get(patch.name) in settled, patch.name
        assert report["patches"].get(patch.name) in settled, patch.name
    assert "compile-cache-load" not in main_process
    assert main_process["vllm-cpu-metadata-alias"] == "applied"
