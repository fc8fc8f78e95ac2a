"""CPU defaults for a user's VllmConfig: each rule decides one option, says
why, and leaves anything the user set explicitly alone.

Rules run on every call of ``check_and_update_config``: in the main process,
and again in the engine-core process on the already-updated config, where
each rule must find nothing left to change (idempotence). In strict mode a
change of a value the user set is refused instead of made.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vllm_bridge import envs
from vllm_bridge.config import schema
from vllm_bridge.config.audit import Change, report, show
from vllm_bridge.config.schema import BridgeConfig
from vllm_bridge.config.unsupported import reset_unsupported
from vllm_bridge.device import cpu
from vllm_bridge.errors import BridgeConfigError
from vllm_bridge.log import get_logger

if TYPE_CHECKING:
    from vllm.config import VllmConfig

    from vllm_bridge.config.compile_decision import CompileInputs

WORKER_CLASS = "vllm_bridge.worker.BridgeWorker"
THREADS_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
KVCACHE_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"

# vLLM's CacheConfig default; a config still holding it was not tuned for
# the CPU (vLLM's CPU worker reads it as a fraction of the node's total
# memory, which it then fails to find free).
VLLM_DEFAULT_MEMORY_FRACTION = 0.92
# On machines with at most this many cores, reserving one for the
# engine-core process (vLLM's automatic binding) costs the worker a large
# share of its compute while the engine core uses a few percent of a core.
SMALL_MACHINE_CORES = 8
# Below this much weight on disk a model is host-bound: its steps are short
# and the engine-core and API-server processes need a core of their own.
# Measured on 2 cores, compiled, 32 prompts: the tiny preset (1.4 MB) ran at
# 0.94x vLLM's automatic binding when bound to all cores, the 0.5b preset
# (770 MB) at 1.69x.
ALL_CORES_MIN_WEIGHT_BYTES = 100 * (1 << 20)
SPINCOUNT_ENV = "GOMP_SPINCOUNT"
# Busy-wait iterations of an idle OpenMP thread before it sleeps: enough to
# bridge the gaps between the kernels of one forward pass, short enough to
# hand the core back to the engine-core and API-server processes between
# steps (libgomp's default spins for far longer). Measured on 2 cores, tiny
# model, compiled: 5,467 tok/s at the default, 11,060-13,472 at 10,000.
OMP_SPINCOUNT = 10_000
MiB = 1 << 20

logger = get_logger("config")


def _size(n_bytes: float) -> str:
    if abs(n_bytes) < 2**30:
        return f"{n_bytes / MiB:.0f} MiB"
    return f"{n_bytes / 2**30:.2f} GiB"


@dataclass(frozen=True)
class Rule:
    name: str
    apply: Callable[[VllmConfig, BridgeConfig], list[Change]]


def worker_class(vllm_config: VllmConfig, bridge: BridgeConfig) -> list[Change]:
    parallel = vllm_config.parallel_config
    if parallel.worker_cls != "auto":
        return []
    parallel.worker_cls = WORKER_CLASS
    return [
        Change(
            "parallel_config.worker_cls",
            "auto",
            WORKER_CLASS,
            "the vllm-bridge worker requests AMX tile permission and applies "
            "worker-stage patches before the first step",
            "worker_class",
        )
    ]


def compile_inputs(vllm_config: VllmConfig, bridge: BridgeConfig) -> CompileInputs:
    # Imported here: this module loads while vllm.config is still loading.
    from vllm_bridge.config.compile_decision import CompileInputs

    model = vllm_config.model_config
    compilation = vllm_config.compilation_config
    return CompileInputs(
        mode=compilation.mode,
        cudagraph_mode=compilation.cudagraph_mode,
        enforce_eager=model is not None and model.enforce_eager,
        has_lora=vllm_config.lora_config is not None,
        is_encoder_decoder=model is not None and model.is_encoder_decoder,
        request=bridge.compile_mode,
    )


def compile_mode(vllm_config: VllmConfig, bridge: BridgeConfig) -> list[Change]:
    """Runs before vLLM's CPU reconciliation, which turns VLLM_COMPILE into
    DYNAMO_TRACE_ONCE itself (with its inductor options); ``reconcile``
    checks afterwards that it reached the mode decided here."""
    from vllm.config import CompilationMode

    from vllm_bridge.config.compile_decision import decide

    inputs = compile_inputs(vllm_config, bridge)
    decision = decide(inputs)
    compilation = vllm_config.compilation_config
    changes = []
    if decision.mode != inputs.mode:
        if decision.mode == CompilationMode.NONE:
            compilation.mode = decision.mode
        changes.append(
            Change(
                "compilation_config.mode",
                inputs.mode,
                decision.mode,
                decision.reason,
                "compile_mode",
            )
        )
    if decision.cudagraph_mode != inputs.cudagraph_mode:
        compilation.cudagraph_mode = decision.cudagraph_mode
        changes.append(
            Change(
                "compilation_config.cudagraph_mode",
                inputs.cudagraph_mode,
                decision.cudagraph_mode,
                decision.reason,
                "compile_mode",
            )
        )
    return changes


def _kv_bytes_per_token(vllm_config: VllmConfig) -> int | None:
    model = vllm_config.model_config
    if model is None or model.use_mla or model.is_hybrid:
        return None
    import torch

    cache_dtype = vllm_config.cache_config.cache_dtype
    if cache_dtype == "auto":
        element = torch.tensor([], dtype=model.dtype).element_size()
    else:
        element = 1
    layers = model.get_num_layers(vllm_config.parallel_config)
    kv_heads = model.get_num_kv_heads(vllm_config.parallel_config)
    return 2 * layers * kv_heads * model.get_head_size() * element


def _local_weights_bytes(vllm_config: VllmConfig) -> int:
    model = vllm_config.model_config
    if model is None or not Path(model.model).is_dir():
        return 0
    weight_files = [
        path
        for pattern in ("*.safetensors", "*.bin", "*.pt")
        for path in Path(model.model).glob(pattern)
    ]
    return sum(path.stat().st_size for path in weight_files)


def kv_cache_budget(vllm_config: VllmConfig, bridge: BridgeConfig) -> list[Change]:
    # The share (kv_cache_share) leaves the rest of the memory to
    # activations, the compile cache and the other processes.
    cache = vllm_config.cache_config
    if cache.kv_cache_memory_bytes is not None:
        return []  # set by --kv-cache-memory-bytes or VLLM_CPU_KVCACHE_SPACE
    if cache.gpu_memory_utilization != VLLM_DEFAULT_MEMORY_FRACTION:
        return []  # an explicit --gpu-memory-utilization
    available = cpu.available_memory_bytes()
    weights = _local_weights_bytes(vllm_config)
    budget = int(bridge.kv_cache_share * (available - weights))
    per_token = _kv_bytes_per_token(vllm_config)
    model = vllm_config.model_config
    reason = (
        f"kv_cache_share={bridge.kv_cache_share:g} of the memory available now "
        f"({_size(available)}) less the weights ({_size(weights)})"
    )
    needed = MiB
    if per_token is not None and model is not None:
        needed = per_token * model.max_model_len
        full = needed * vllm_config.scheduler_config.max_num_seqs
        if full < budget:
            budget = full
            reason = (
                "enough for max_num_seqs sequences of max_model_len tokens "
                f"({_size(full)}), less than {reason}"
            )
    if budget < needed:
        raise BridgeConfigError(
            "Not enough memory for the KV cache of one sequence of "
            f"max_model_len tokens ({_size(needed)}): the budget is "
            f"{_size(budget)} ({reason}). Lower --max-model-len, "
            "free memory, raise kv_cache_share (at most 0.9), or set "
            "--kv-cache-memory-bytes."
        )
    budget = max(needed, budget // MiB * MiB)
    cache.kv_cache_memory_bytes = budget
    return [
        Change(
            "cache_config.kv_cache_memory_bytes",
            None,
            budget,
            f"vLLM's default gpu_memory_utilization={VLLM_DEFAULT_MEMORY_FRACTION} "
            "asks for more than the CPU has free; KV cache sized to " + reason,
            "kv_cache_budget",
        )
    ]


def _id_ranges(ids: list[int]) -> str:
    parts: list[str] = []
    start = previous = ids[0]
    for cpu_id in [*ids[1:], None]:
        if cpu_id is not None and cpu_id == previous + 1:
            previous = cpu_id
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if cpu_id is not None:
            start = previous = cpu_id
    return ",".join(parts)


def thread_binding(vllm_config: VllmConfig, bridge: BridgeConfig) -> list[Change]:
    if THREADS_BIND_ENV in os.environ or "OMP_NUM_THREADS" in os.environ:
        return []
    parallel = vllm_config.parallel_config
    if parallel.world_size != 1 or parallel.data_parallel_size != 1:
        return []  # several workers: keep vLLM's per-rank NUMA plan
    cores = cpu.physical_cores(cpu.allowed_cpus())
    if len(cores) > SMALL_MACHINE_CORES:
        return []
    weights = _local_weights_bytes(vllm_config)
    if 0 < weights < ALL_CORES_MIN_WEIGHT_BYTES:
        return []  # unknown size (not a local directory) counts as large
    value = _id_ranges(cores)
    # Set in this (main) process: the engine core and its workers are
    # spawned from it and inherit the environment.
    os.environ[THREADS_BIND_ENV] = value
    return [
        Change(
            f"env.{THREADS_BIND_ENV}",
            "auto",
            value,
            f"{len(cores)} usable core(s) and "
            f"{_size(weights) if weights else 'remote'} of weights: vLLM's "
            "automatic binding would reserve a core for the engine-core "
            "process, which needs a few percent of one",
            "thread_binding",
        )
    ]


def omp_spin_wait(vllm_config: VllmConfig, bridge: BridgeConfig) -> list[Change]:
    if SPINCOUNT_ENV in os.environ or "OMP_WAIT_POLICY" in os.environ:
        return []
    bind = os.environ.get(THREADS_BIND_ENV, "auto")
    if bind in ("auto", "nobind") or "|" in bind:
        return []
    from vllm.utils.cpu_resource_utils import parse_id_list

    if set(parse_id_list(bind)) != set(cpu.physical_cores(cpu.allowed_cpus())):
        return []  # some cores are left to the other processes
    os.environ[SPINCOUNT_ENV] = str(OMP_SPINCOUNT)
    return [
        Change(
            f"env.{SPINCOUNT_ENV}",
            None,
            str(OMP_SPINCOUNT),
            "the worker's OpenMP threads share every core with the engine-core "
            "and API-server processes: idle threads must yield their core quickly",
            "omp_spin_wait",
        )
    ]


# Rules that must run before vLLM's built-in CPU defaults (which would fill
# the same options with their own choice).
BEFORE_BUILTIN = (
    Rule("worker_class", worker_class),
    Rule("compile_mode", compile_mode),
    Rule("cpu_unsupported", reset_unsupported),
)
AFTER_BUILTIN = (
    Rule("kv_cache_budget", kv_cache_budget),
    Rule("thread_binding", thread_binding),
    Rule("omp_spin_wait", omp_spin_wait),
)


@dataclass(frozen=True)
class BuiltinOption:
    """An option vLLM's own CPU reconciliation may change, and why."""

    reason: str
    user_set: Callable[[VllmConfig, object], bool]
    """Whether the value before the change (second argument) came from the
    user, judged on the config before the change."""


def _unless(default: object) -> Callable[[VllmConfig, object], bool]:
    return lambda _config, value: value != default


def _unknowable(_config: VllmConfig, _value: object) -> bool:
    # vLLM resolves the option's default (None) before the platform sees the
    # config, to the value a user could also have chosen.
    return False


# What CpuPlatform.check_and_update_config may change; recorded so that the
# audit shows every change. Its compile-mode change is decided (and
# recorded) by the compile_mode rule.
BUILTIN_CPU_CHANGES = {
    "cache_config.block_size": BuiltinOption(
        "vLLM's CPU attention kernels want a block size that is a multiple of "
        "32 (128 by default; 16 or 256 for MLA models)",
        lambda config, _value: config.cache_config.user_specified_block_size,
    ),
    "cache_config.kv_cache_memory_bytes": BuiltinOption(
        "vLLM's CPU platform reads VLLM_CPU_KVCACHE_SPACE (GiB)", _unless(None)
    ),
    "cache_config.mamba_ssm_cache_dtype": BuiltinOption(
        "vLLM's accelerated CPU GDN backend keeps its state in float32",
        _unless("auto"),
    ),
    "scheduler_config.async_scheduling": BuiltinOption(
        "vLLM's CPU platform does not use asynchronous scheduling", _unknowable
    ),
    "parallel_config.distributed_executor_backend": BuiltinOption(
        "OpenMP thread binding needs the multiprocess executor", _unknowable
    ),
    "parallel_config.enable_dbo": BuiltinOption(
        "dual-batch overlap is not supported on the CPU", _unless(False)
    ),
    "compilation_config.cudagraph_capture_sizes": BuiltinOption(
        "no CUDA graphs on the CPU", _unless(None)
    ),
    "profiler_config.torch_profiler_dump_cuda_time_total": BuiltinOption(
        "the torch profiler has no CUDA time to dump on the CPU", _unless(True)
    ),
    # Set in this process for the spawned engine core and workers.
    "env.LD_PRELOAD": BuiltinOption(
        "vLLM's CPU platform preloads PyTorch's libgomp when no OpenMP runtime "
        "is preloaded (otherwise thread binding leaves one core in use), and "
        "tcmalloc where its wheel bundles one",
        _unless(None),
    ),
}


def _option(vllm_config: VllmConfig, option: str) -> object:
    section, field = option.split(".")
    if section == "env":
        return os.environ.get(field)
    value = getattr(getattr(vllm_config, section), field)
    return list(value) if isinstance(value, list) else value


def _run_builtin(
    vllm_config: VllmConfig, builtin: Callable[[VllmConfig], None]
) -> list[Change]:
    before = {option: _option(vllm_config, option) for option in BUILTIN_CPU_CHANGES}
    user_set = {
        option: entry.user_set(vllm_config, before[option])
        for option, entry in BUILTIN_CPU_CHANGES.items()
    }
    builtin(vllm_config)
    return [
        Change(
            option,
            before[option],
            after,
            entry.reason,
            "vllm_cpu_platform",
            user_set=user_set[option],
        )
        for option, entry in BUILTIN_CPU_CHANGES.items()
        if (after := _option(vllm_config, option)) != before[option]
    ]


def _check_compile_mode(vllm_config: VllmConfig, changes: list[Change]) -> None:
    """vLLM's CPU reconciliation carries out part of the compile decision;
    a vLLM that no longer does must not start in a mode nobody decided."""
    decided = [c.applied for c in changes if c.option == "compilation_config.mode"]
    actual = vllm_config.compilation_config.mode
    if decided and decided[-1] != actual:
        raise RuntimeError(
            f"vllm-bridge decided compilation mode {show(decided[-1])}, but "
            f"vLLM's CPU platform left {show(actual)}: the installed vLLM "
            "changed its CPU compile defaults (run `vllm-bridge doctor`)."
        )


def _refuse_user_overrides(changes: list[Change]) -> None:
    refused = [change for change in changes if change.user_set]
    if not refused:
        return
    lines = "; ".join(
        f"{c.option}={show(c.requested)} would become {show(c.applied)} ({c.reason})"
        for c in refused
    )
    raise BridgeConfigError(
        f"Strict mode refuses to override {len(refused)} option(s) you set: "
        f"{lines}. Change or drop these options, or turn strict mode off "
        f"({schema.ADDITIONAL_CONFIG} key 'strict', {envs.STRICT.name})."
    )


def _run(
    rules: tuple[Rule, ...], vllm_config: VllmConfig, bridge: BridgeConfig
) -> list[Change]:
    return [change for rule in rules for change in rule.apply(vllm_config, bridge)]


def audited_values(vllm_config: VllmConfig) -> dict[str, str]:
    """Every option a rule may change, as this process sees it: equal in
    the main, engine-core and worker processes when the config survived
    the trip between them."""
    from vllm_bridge.config.unsupported import UNSUPPORTED_OPTIONS

    options = [
        "parallel_config.worker_cls",
        "compilation_config.mode",
        "compilation_config.cudagraph_mode",
        "compilation_config.backend",
        *BUILTIN_CPU_CHANGES,  # kv_cache_memory_bytes and LD_PRELOAD among them
        *(entry.option for entry in UNSUPPORTED_OPTIONS),
        f"env.{THREADS_BIND_ENV}",
        f"env.{SPINCOUNT_ENV}",
    ]
    return {option: show(_option(vllm_config, option)) for option in options}


def reconcile(
    vllm_config: VllmConfig, builtin: Callable[[VllmConfig], None]
) -> list[Change]:
    """Run the rules around vLLM's built-in CPU reconciliation ``builtin``.

    The plugin config is read first, so that bad input fails before any
    option changes. In strict mode, changes of options the user set are
    refused: the error ends start-up before the engine is built."""
    bridge = schema.load(vllm_config.additional_config, os.environ)
    changes = _run(BEFORE_BUILTIN, vllm_config, bridge)
    changes += _run_builtin(vllm_config, builtin)
    _check_compile_mode(vllm_config, changes)
    changes += _run(AFTER_BUILTIN, vllm_config, bridge)
    if bridge.strict:
        _refuse_user_overrides(changes)
    logger.info(
        "vllm-bridge reconciled the config in process %d: %d change(s).",
        os.getpid(),
        len(changes),
    )
    report(changes)
    return changes
