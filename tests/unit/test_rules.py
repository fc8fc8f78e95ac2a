"""The CPU default rules on real VllmConfig objects built by EngineArgs (the
same path `vllm serve` and `LLM` take)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.config_support import build, build_recording
from vllm_bridge.config import audit, rules
from vllm_bridge.config.audit import Change
from vllm_bridge.config.reconcile import reconcile
from vllm_bridge.device import cpu
from vllm_bridge.errors import BridgeConfigError
from vllm_bridge.platform import BridgePlatform

pytestmark = pytest.mark.usefixtures("restore_environ")


@pytest.fixture(autouse=True)
def no_user_cpu_env(monkeypatch: pytest.MonkeyPatch):
    for name in (
        rules.THREADS_BIND_ENV,
        "OMP_NUM_THREADS",
        rules.KVCACHE_SPACE_ENV,
        rules.SPINCOUNT_ENV,
        "OMP_WAIT_POLICY",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def large_model(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model's directory with 200 MB more weight on disk (a sparse
    file: the rules read sizes only, and building a config loads no
    weights), standing for a model large enough to be compute-bound."""
    directory = tmp_path_factory.mktemp("large-model")
    for item in tiny_model.iterdir():
        (directory / item.name).symlink_to(item)
    with (directory / "padding.pt").open("wb") as padding:
        padding.truncate(200 * 2**20)
    return directory


def changes_of(config) -> dict[str, Change]:
    """Run the rules again on a config (vLLM's own reconciliation left out)."""
    return {c.option: c for c in reconcile(config, builtin=lambda _: None)}


def test_defaults_fill_worker_memory_and_threads(large_model: Path):
    config = build(large_model)
    assert config.parallel_config.worker_cls == rules.WORKER_CLASS
    assert config.cache_config.kv_cache_memory_bytes is not None
    cores = cpu.physical_cores(cpu.allowed_cpus())
    if len(cores) <= rules.SMALL_MACHINE_CORES:
        assert os.environ[rules.THREADS_BIND_ENV] == rules.id_ranges(cores)


def test_second_pass_changes_nothing(large_model: Path):
    """The engine-core process re-runs check_and_update_config on the
    updated config: nothing may change nor be reported again."""
    config = build(large_model)
    before = (
        config.parallel_config.worker_cls,
        config.cache_config.kv_cache_memory_bytes,
        os.environ.get(rules.THREADS_BIND_ENV),
    )
    assert changes_of(config) == {}
    with audit.capture() as second_pass:
        BridgePlatform.check_and_update_config(config)
    assert second_pass == []
    after = (
        config.parallel_config.worker_cls,
        config.cache_config.kv_cache_memory_bytes,
        os.environ.get(rules.THREADS_BIND_ENV),
    )
    assert after == before


def test_changes_of_vllms_own_cpu_reconciliation_are_recorded(tiny_model: Path):
    _, changes = build_recording(tiny_model)
    builtin = {o: c for o, c in changes.items() if c.rule == "vllm_cpu_platform"}
    block = builtin["cache_config.block_size"]
    assert (block.requested, block.applied) == (16, 128)
    executor = builtin["parallel_config.distributed_executor_backend"]
    assert executor.applied == "mp"
    assert "OpenMP" in executor.reason


def test_explicit_block_size_is_not_reported_as_changed(tiny_model: Path):
    config, changes = build_recording(tiny_model, block_size=64)
    assert config.cache_config.block_size == 64
    assert "cache_config.block_size" not in changes


def test_worker_class_rule_records_reason(tiny_model: Path):
    config = build(tiny_model)
    config.parallel_config.worker_cls = "auto"
    change = changes_of(config)["parallel_config.worker_cls"]
    assert change.applied == rules.WORKER_CLASS
    assert "AMX" in change.reason


def test_explicit_worker_class_is_kept(tiny_model: Path):
    config = build(tiny_model, worker_cls="vllm.v1.worker.cpu_worker.CPUWorker")
    assert config.parallel_config.worker_cls == "vllm.v1.worker.cpu_worker.CPUWorker"


def test_sigterm_drains_in_flight_requests_by_default(tiny_model: Path):
    from vllm_bridge import envs

    config, changes = build_recording(tiny_model)
    assert config.shutdown_timeout == envs.DRAIN_TIMEOUT.default
    change = changes["shutdown_timeout"]
    assert (change.rule, change.requested) == ("shutdown_drain", 0)
    assert "in-flight requests" in change.reason


def test_drain_timeout_key_sets_the_drain(tiny_model: Path):
    assert (
        build(tiny_model, additional_config={"drain_timeout": 7}).shutdown_timeout == 7
    )


def test_drain_timeout_0_keeps_vllms_abort(tiny_model: Path):
    assert (
        build(tiny_model, additional_config={"drain_timeout": 0}).shutdown_timeout == 0
    )


def test_explicit_shutdown_timeout_is_kept(tiny_model: Path):
    assert build(tiny_model, shutdown_timeout=90).shutdown_timeout == 90


def test_kv_budget_reason_names_the_memory(tiny_model: Path):
    config = build(tiny_model)
    config.cache_config.kv_cache_memory_bytes = None
    change = changes_of(config)["cache_config.kv_cache_memory_bytes"]
    assert change.applied == config.cache_config.kv_cache_memory_bytes
    assert "gpu_memory_utilization=0.92" in change.reason
    assert "GiB" in change.reason


def test_kv_budget_is_enough_for_the_configured_sequences(tiny_model: Path):
    config = build(tiny_model)
    per_token = rules._kv_bytes_per_token(config)
    assert per_token is not None
    one_sequence = per_token * config.model_config.max_model_len
    assert config.cache_config.kv_cache_memory_bytes >= one_sequence


def test_explicit_memory_fraction_is_kept(tiny_model: Path):
    config = build(tiny_model, gpu_memory_utilization=0.3)
    assert config.cache_config.gpu_memory_utilization == 0.3
    assert config.cache_config.kv_cache_memory_bytes is None


def test_explicit_kv_cache_bytes_are_kept(tiny_model: Path):
    config = build(tiny_model, kv_cache_memory_bytes=123 * 2**20)
    assert config.cache_config.kv_cache_memory_bytes == 123 * 2**20


def test_vllm_cpu_kvcache_space_is_kept(tiny_model: Path, monkeypatch):
    monkeypatch.setenv(rules.KVCACHE_SPACE_ENV, "1")
    config = build(tiny_model)
    assert config.cache_config.kv_cache_memory_bytes == 2**30


def test_kv_share_too_small_for_one_sequence_names_the_fix(
    tiny_model: Path, monkeypatch
):
    config = build(tiny_model)
    weights = rules._local_weights_bytes(config)
    one_sequence = rules._kv_bytes_per_token(config) * config.model_config.max_model_len
    # Mocked: this machine cannot be made to run out of memory on demand.
    # Weights and one sequence fit, but half of what is left after the
    # weights (kv_cache_share=0.5) holds less than one sequence.
    monkeypatch.setattr(
        cpu, "available_memory_bytes", lambda: weights + one_sequence * 3 // 2
    )
    with pytest.raises(
        BridgeConfigError, match=r"max_model_len.*--kv-cache-memory-bytes"
    ):
        build(tiny_model)


def test_weights_larger_than_memory_are_refused_before_loading(
    large_model: Path, monkeypatch
):
    # Mocked: this machine cannot be made to run out of memory on demand.
    monkeypatch.setattr(cpu, "available_memory_bytes", lambda: 150 * 2**20)
    with pytest.raises(BridgeConfigError) as info:
        build(large_model)
    message = str(info.value)
    assert "does not fit in the memory available now (150 MiB)" in message
    assert "weights (201 MiB on disk)" in message
    assert "a quantized or smaller model" in message


def test_bridge_int8_counts_the_weights_as_they_will_be_held(
    large_model: Path, monkeypatch
):
    # Mocked as above. 201 MiB of float32 on disk hold about 50 MiB as int8:
    # refused unquantized, served quantized.
    monkeypatch.setattr(cpu, "available_memory_bytes", lambda: 150 * 2**20)
    with pytest.raises(BridgeConfigError, match="a quantized or smaller model"):
        build(large_model)
    config = build(large_model, quantization="bridge_int8", max_model_len=256)
    weights, text = rules._resident_weights_bytes(config)
    assert 50 * 2**20 <= weights < 52 * 2**20
    assert text == "50 MiB as int8, 201 MiB on disk"


def test_long_max_model_len_that_does_not_fit_names_the_fix(
    tiny_model: Path, monkeypatch
):
    monkeypatch.setattr(cpu, "available_memory_bytes", lambda: 2 * 2**20)
    with pytest.raises(BridgeConfigError) as info:
        build(tiny_model)
    message = str(info.value)
    assert "one sequence of max_model_len=2048 tokens" in message
    assert "a lower --max-model-len" in message
    build(tiny_model, max_model_len=256)


def test_kv_cache_larger_than_memory_is_refused(tiny_model: Path):
    available = cpu.available_memory_bytes()
    with pytest.raises(BridgeConfigError) as info:
        build(tiny_model, kv_cache_memory_bytes=available + 2**30)
    assert "the KV cache you set" in str(info.value)
    assert "a smaller --kv-cache-memory-bytes" in str(info.value)


def test_small_model_keeps_vllms_binding(tiny_model: Path):
    build(tiny_model)
    assert rules.THREADS_BIND_ENV not in os.environ
    assert rules.SPINCOUNT_ENV not in os.environ


def test_explicit_thread_binding_is_kept(large_model: Path, monkeypatch):
    monkeypatch.setenv(rules.THREADS_BIND_ENV, "0")
    build(large_model)
    assert os.environ[rules.THREADS_BIND_ENV] == "0"


def test_omp_num_threads_leaves_binding_to_vllm(large_model: Path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    build(large_model)
    assert rules.THREADS_BIND_ENV not in os.environ


def test_thread_binding_change_names_the_cores(large_model: Path):
    config = build(large_model)
    del os.environ[rules.THREADS_BIND_ENV]
    change = changes_of(config).get(f"env.{rules.THREADS_BIND_ENV}")
    cores = cpu.physical_cores(cpu.allowed_cpus())
    if len(cores) > rules.SMALL_MACHINE_CORES:
        assert change is None
    else:
        assert change is not None and change.applied == rules.id_ranges(cores)
        assert "engine-core" in change.reason


def _binds_all_cores() -> bool:
    return len(cpu.physical_cores(cpu.allowed_cpus())) <= rules.SMALL_MACHINE_CORES


def test_all_core_binding_makes_idle_threads_yield(large_model: Path):
    build(large_model)
    if _binds_all_cores():
        assert os.environ[rules.SPINCOUNT_ENV] == str(rules.OMP_SPINCOUNT)
    else:
        assert rules.SPINCOUNT_ENV not in os.environ


def test_spin_wait_change_records_reason(tiny_model: Path, monkeypatch):
    cores = cpu.physical_cores(cpu.allowed_cpus())
    monkeypatch.setenv(rules.THREADS_BIND_ENV, rules.id_ranges(cores))
    config = build(tiny_model)
    del os.environ[rules.SPINCOUNT_ENV]
    change = changes_of(config)[f"env.{rules.SPINCOUNT_ENV}"]
    assert change.applied == str(rules.OMP_SPINCOUNT)
    assert "yield" in change.reason


@pytest.mark.parametrize(
    "env", [{rules.SPINCOUNT_ENV: "5"}, {"OMP_WAIT_POLICY": "ACTIVE"}]
)
def test_explicit_openmp_wait_settings_are_kept(large_model: Path, monkeypatch, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    build(large_model)
    assert os.environ.get(rules.SPINCOUNT_ENV) == env.get(rules.SPINCOUNT_ENV)


def test_partial_binding_leaves_spin_wait_alone(tiny_model: Path, monkeypatch):
    # Mocked where this machine has one core: binding to part of the cores
    # needs at least two.
    cores = cpu.physical_cores(cpu.allowed_cpus())
    if len(cores) < 2:
        cores = [0, 1]
        monkeypatch.setattr(cpu, "physical_cores", lambda _cpus: cores)
    monkeypatch.setenv(rules.THREADS_BIND_ENV, str(cores[0]))
    build(tiny_model)
    assert rules.SPINCOUNT_ENV not in os.environ


@pytest.mark.parametrize(
    ("ids", "text"),
    [
        ([0], "0"),
        ([0, 1], "0-1"),
        ([0, 2, 3, 4, 7], "0,2-4,7"),
        ([5, 6, 9, 10], "5-6,9-10"),
    ],
)
def test_core_id_ranges(ids: list[int], text: str):
    assert rules.id_ranges(ids) == text


def test_compiled_by_default_as_vllm_cpu_compiles(tiny_model: Path):
    from vllm.config import CompilationMode

    config, changes = build_recording(tiny_model)
    mode = changes["compilation_config.mode"]
    assert (mode.requested, mode.applied, mode.rule) == (
        CompilationMode.VLLM_COMPILE,
        CompilationMode.DYNAMO_TRACE_ONCE,
        "compile_mode",
    )
    assert config.compilation_config.mode == CompilationMode.DYNAMO_TRACE_ONCE
    # vLLM's CPU platform carried out the rest of the decision.
    assert config.compilation_config.backend == "inductor"


def test_enforce_eager_records_no_compile_change(tiny_model: Path):
    from vllm.config import CompilationMode

    config, changes = build_recording(tiny_model, enforce_eager=True)
    assert config.compilation_config.mode == CompilationMode.NONE
    assert "compilation_config.mode" not in changes


def test_compile_mode_eager_key_runs_eagerly(tiny_model: Path):
    from vllm.config import CompilationMode

    config, changes = build_recording(
        tiny_model, additional_config={"compile_mode": "eager"}
    )
    assert config.compilation_config.mode == CompilationMode.NONE
    change = changes["compilation_config.mode"]
    assert change.applied == CompilationMode.NONE
    assert "compile_mode='eager'" in change.reason


def test_lora_runs_eagerly_with_its_reason(tiny_model: Path):
    from vllm.config import CompilationMode

    config, changes = build_recording(tiny_model, enable_lora=True)
    assert config.compilation_config.mode == CompilationMode.NONE
    assert "LoRA" in changes["compilation_config.mode"].reason


CPP_WRAPPER_OPTION = "compilation_config.inductor_compile_config.cpp_wrapper"


def test_compiled_graph_gets_the_cpp_wrapper_with_its_reason(tiny_model: Path):
    config, changes = build_recording(tiny_model)
    assert config.compilation_config.inductor_compile_config["cpp_wrapper"] is True
    change = changes[CPP_WRAPPER_OPTION]
    assert (change.requested, change.applied, change.rule) == (
        None,
        True,
        "inductor_cpp_wrapper",
    )
    assert "single stream +4-5%" in change.reason


@pytest.mark.parametrize("set_here", [True, False])
def test_plain_layer_names_are_recorded_where_this_process_set_them(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch, set_here: bool
):
    """The interpreter-start stage of whichever process started first set
    VLLM_USE_LAYERNAME (tests/unit/test_plain_layer_names.py); a process
    that inherited it (an engine core, a pytest-xdist worker) records
    nothing for it."""
    from vllm.utils import torch_utils

    from vllm_bridge import startup

    assert os.environ["VLLM_USE_LAYERNAME"] == "0"
    assert torch_utils.LayerNameType is str
    monkeypatch.setattr(
        startup,
        "layer_name_env_set",
        {"VLLM_USE_LAYERNAME": "0"} if set_here else {},
    )
    _, changes = build_recording(tiny_model)
    assert CPP_WRAPPER_OPTION in changes
    if set_here:
        change = changes["env.VLLM_USE_LAYERNAME"]
        assert (change.applied, change.rule) == ("0", "inductor_cpp_wrapper")
        assert "C++ wrapper" in change.reason
    else:
        assert "env.VLLM_USE_LAYERNAME" not in changes


def test_eager_runs_have_no_cpp_wrapper(tiny_model: Path):
    config, changes = build_recording(tiny_model, enforce_eager=True)
    assert "cpp_wrapper" not in config.compilation_config.inductor_compile_config
    assert CPP_WRAPPER_OPTION not in changes


def test_explicit_cpp_wrapper_setting_is_kept(tiny_model: Path):
    config, changes = build_recording(
        tiny_model,
        compilation_config={"inductor_compile_config": {"cpp_wrapper": False}},
    )
    assert config.compilation_config.inductor_compile_config["cpp_wrapper"] is False
    assert CPP_WRAPPER_OPTION not in changes


def test_opaque_layer_names_keep_the_python_wrapper(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
):
    """VLLM_USE_LAYERNAME=1 takes effect when vLLM imports torch_utils, once
    per process; the attribute is set here to what that import sets (a
    fresh interpreter for this one check would cost an import of vLLM)."""
    from vllm.utils import torch_utils

    monkeypatch.setattr(torch_utils, "LayerNameType", torch_utils.LayerName)
    config, changes = build_recording(tiny_model)
    assert "cpp_wrapper" not in config.compilation_config.inductor_compile_config
    assert CPP_WRAPPER_OPTION not in changes


def test_compiled_request_conflicting_with_enforce_eager_is_refused(
    tiny_model: Path, monkeypatch
):
    monkeypatch.setenv("VLLM_BRIDGE_COMPILE_MODE", "compiled")
    with pytest.raises(BridgeConfigError, match="conflicts with --enforce-eager"):
        build(tiny_model, enforce_eager=True)


def test_a_vllm_that_stops_carrying_out_the_compile_decision_is_caught(
    tiny_model: Path,
):
    from vllm.config import CompilationMode

    config = build(tiny_model)
    config.compilation_config.mode = CompilationMode.VLLM_COMPILE
    with pytest.raises(RuntimeError, match="left VLLM_COMPILE"):
        reconcile(config, builtin=lambda _: None)


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"enable_dbo": True}, "parallel_config.enable_dbo"),
        (
            {"compilation_config": {"cudagraph_capture_sizes": [1, 2]}},
            "compilation_config.cudagraph_capture_sizes",
        ),
    ],
)
def test_override_of_a_user_setting_is_marked(tiny_model: Path, kwargs, option):
    _, changes = build_recording(tiny_model, **kwargs)
    assert changes[option].user_set


@pytest.mark.parametrize(
    "strict_by",
    [
        {"env": {"VLLM_BRIDGE_STRICT": "1"}},
        {"additional_config": {"strict": True}},
    ],
)
def test_strict_mode_refuses_to_override_a_user_setting(
    tiny_model: Path, monkeypatch, strict_by
):
    for name, value in strict_by.get("env", {}).items():
        monkeypatch.setenv(name, value)
    kwargs = {"additional_config": strict_by.get("additional_config", {})}
    with pytest.raises(BridgeConfigError) as info:
        build(tiny_model, enable_dbo=True, **kwargs)
    message = str(info.value)
    assert "parallel_config.enable_dbo=True would become False" in message
    assert "dual-batch overlap is not supported" in message
    assert "strict mode off" in message


def test_strict_mode_still_fills_defaults(tiny_model: Path, monkeypatch):
    monkeypatch.setenv("VLLM_BRIDGE_STRICT", "1")
    config = build(tiny_model, block_size=64)
    assert config.parallel_config.worker_cls == rules.WORKER_CLASS
    assert config.cache_config.kv_cache_memory_bytes is not None
    assert config.cache_config.block_size == 64


def test_strict_key_false_wins_over_the_variable(tiny_model: Path, monkeypatch):
    monkeypatch.setenv("VLLM_BRIDGE_STRICT", "1")
    config = build(tiny_model, enable_dbo=True, additional_config={"strict": False})
    assert config.parallel_config.enable_dbo is False


def test_vllms_openmp_preload_is_recorded(tiny_model: Path, monkeypatch):
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    _, changes = build_recording(tiny_model)
    change = changes["env.LD_PRELOAD"]
    assert change.requested is None
    assert "libgomp" in change.applied
    assert change.rule == "vllm_cpu_platform"
    assert not change.user_set
