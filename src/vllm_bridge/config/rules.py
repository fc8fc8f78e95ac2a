"""vllm-bridge's CPU defaults for a user's VllmConfig: each rule decides one
option, says why, and leaves anything the user set explicitly alone. Each
must find nothing left to change when run again on its own result (the
engine core reconciles the config a second time; see reconcile.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vllm_bridge import envs
from vllm_bridge.config.audit import Change
from vllm_bridge.config.parallel_rules import (
    THREADS_BIND_ENV,
    id_ranges,
    rank_binding,
    ray_executor,
)
from vllm_bridge.config.quantization_rules import quantization_kernels
from vllm_bridge.config.scheduler_rules import scheduler_class
from vllm_bridge.config.schema import BridgeConfig
from vllm_bridge.config.unsupported import reset_unsupported
from vllm_bridge.device import cpu
from vllm_bridge.errors import BridgeConfigError
from vllm_bridge.log import get_logger

if TYPE_CHECKING:
    from vllm.config import VllmConfig

    from vllm_bridge.config.compile_decision import CompileInputs

WORKER_CLASS = "vllm_bridge.worker.BridgeWorker"
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
CPP_WRAPPER = "cpp_wrapper"
# Measured on 2 cores, 0.5b preset, compiled (docs/benchmarks.md, "Inductor's
# C++ wrapper"); the first start compiles ~15% longer.
CPP_WRAPPER_GAIN = (
    "single stream +4-5% (0.5b preset, 2 cores, run as AVX2; within the noise on AMX)"
)

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
            "the vllm-bridge worker requests AMX tile permission (on CPUs with "
            "AMX) and applies worker-stage patches before the first step",
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


def _resident_weights_bytes(vllm_config: VllmConfig) -> tuple[int, str]:
    """The weights' bytes once loaded, and how the text names them: their
    size on disk, or under --quantization bridge_int8 the estimate of
    quantization/int8_online.py (the layers are quantized as they load)."""
    from vllm_bridge.quantization.int8_online import METHOD_NAME, resident_bytes

    on_disk = _local_weights_bytes(vllm_config)
    model = vllm_config.model_config
    if on_disk == 0 or model is None or model.quantization != METHOD_NAME:
        return on_disk, f"{_size(on_disk)} on disk"
    loaded = resident_bytes(on_disk, model)
    return loaded, f"{_size(loaded)} as int8, {_size(on_disk)} on disk"


def memory_preflight(vllm_config: VllmConfig, bridge: BridgeConfig) -> list[Change]:
    """Refuse, before any weight is loaded, a model whose weights and KV
    cache cannot fit in the memory available: loading it would end in the
    OOM killer's SIGKILL halfway, with no message."""
    model = vllm_config.model_config
    if model is None:
        return []
    available = cpu.available_memory_bytes()
    weights, weights_text = _resident_weights_bytes(vllm_config)
    per_token = _kv_bytes_per_token(vllm_config)
    explicit_kv = vllm_config.cache_config.kv_cache_memory_bytes
    ranks = vllm_config.parallel_config.local_world_size
    if explicit_kv is not None:
        kv = explicit_kv * ranks
        kv_text = f"the KV cache you set ({_size(explicit_kv)} per worker)"
    elif per_token is not None:
        # per_token is one worker's share (its layers, its heads).
        kv = per_token * model.max_model_len * ranks
        kv_text = (
            f"the KV cache of one sequence of max_model_len={model.max_model_len} "
            f"tokens ({_size(kv)})"
        )
    else:
        kv, kv_text = 0, "no KV cache counted"
    if weights + kv <= available:
        return []
    fixes = ["a quantized or smaller model", "more free memory"]
    if explicit_kv is not None:
        fixes.insert(0, "a smaller --kv-cache-memory-bytes / VLLM_CPU_KVCACHE_SPACE")
    elif weights < available:
        fixes.insert(0, "a lower --max-model-len")
    raise BridgeConfigError(
        f"The model does not fit in the memory available now ({_size(available)}): "
        f"its weights ({weights_text}) and {kv_text} need "
        f"{_size(weights + kv)}. Use {', or '.join(fixes)}."
    )


def kv_cache_budget(vllm_config: VllmConfig, bridge: BridgeConfig) -> list[Change]:
    # The share (kv_cache_share) leaves the rest of the memory to
    # activations, the compile cache and the other processes.
    cache = vllm_config.cache_config
    if cache.kv_cache_memory_bytes is not None:
        return []  # set by --kv-cache-memory-bytes or VLLM_CPU_KVCACHE_SPACE
    if cache.gpu_memory_utilization != VLLM_DEFAULT_MEMORY_FRACTION:
        return []  # an explicit --gpu-memory-utilization
    available = cpu.available_memory_bytes()
    weights, _ = _resident_weights_bytes(vllm_config)
    # kv_cache_memory_bytes is per worker: the workers on this node share
    # its memory.
    ranks = vllm_config.parallel_config.local_world_size
    budget = int(bridge.kv_cache_share * (available - weights)) // ranks
    per_token = _kv_bytes_per_token(vllm_config)
    model = vllm_config.model_config
    reason = (
        f"kv_cache_share={bridge.kv_cache_share:g} of the memory available now "
        f"({_size(available)}) less the weights ({_size(weights)})"
    )
    if ranks > 1 and vllm_config.parallel_config.use_ray:
        reason += (
            f", shared by the {ranks} workers Ray may place on this machine (the "
            "memory of other Ray nodes is not seen from here: for machines "
            "unlike this one, give --kv-cache-memory-bytes per worker)"
        )
    elif ranks > 1:
        reason += f", shared by the {ranks} workers on this node"
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
    value = id_ranges(cores)
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


def shutdown_drain(vllm_config: VllmConfig, bridge: BridgeConfig) -> list[Change]:
    """vLLM's default (0) aborts every in-flight request on SIGTERM; a
    positive --shutdown-timeout is the user's own choice and stays."""
    if vllm_config.shutdown_timeout != 0 or bridge.drain_timeout == 0:
        return []
    vllm_config.shutdown_timeout = bridge.drain_timeout
    return [
        Change(
            "shutdown_timeout",
            0,
            bridge.drain_timeout,
            "SIGTERM (systemd, Kubernetes, docker stop) lets in-flight requests "
            f"finish for up to {bridge.drain_timeout} s instead of aborting them; "
            "the default fits Kubernetes' 30 s grace period",
            "shutdown_drain",
        )
    ]


def startup_env_changes(
    env_set: dict[str, str], reason: str, rule: str
) -> list[Change]:
    """The variables this process's interpreter-start stage set (the user
    had not) and that still hold that value, as changes of ``rule``; a
    process that inherited them (the engine core) records none."""
    return [
        Change(f"env.{name}", None, value, reason, rule)
        for name, value in env_set.items()
        if os.environ.get(name) == value
    ]


def inductor_cpp_wrapper(vllm_config: VllmConfig, bridge: BridgeConfig) -> list[Change]:
    """Compile the model's graph with inductor's C++ wrapper: the Python
    function that otherwise calls the graph's ~10 kernels per layer cost
    the 0.5b single stream about 2 ms per token (run as AVX2). Runs after
    vLLM's CPU defaults, which pick the inductor backend for compiled mode."""
    from vllm.config import CompilationMode
    from vllm.utils import torch_utils

    from vllm_bridge import startup

    compilation = vllm_config.compilation_config
    if (
        compilation.mode != CompilationMode.DYNAMO_TRACE_ONCE
        or compilation.backend != "inductor"
        or CPP_WRAPPER in compilation.inductor_compile_config
        # VLLM_USE_LAYERNAME=1: the wrapper cannot compile the attention op
        or torch_utils.LayerNameType is not str
    ):
        return []
    # What made the wrapper possible, if this process set it (the engine
    # core inherits it): recorded with the change it serves.
    changes = startup_env_changes(
        startup.layer_name_env_set,
        "set at interpreter start: layer names reach vLLM's attention op as "
        "plain strings, which inductor's C++ wrapper can pass (not vLLM's "
        "opaque LayerName); vLLM's CPU path compiles one graph, so constant "
        "names cost no recompilation",
        "inductor_cpp_wrapper",
    )
    compilation.inductor_compile_config[CPP_WRAPPER] = True
    changes.append(
        Change(
            f"compilation_config.inductor_compile_config.{CPP_WRAPPER}",
            None,
            True,
            "the compiled graph calls its kernels from C++ instead of a Python "
            f"function: {CPP_WRAPPER_GAIN}",
            "inductor_cpp_wrapper",
        )
    )
    return changes


def isa_switch(vllm_config: VllmConfig, bridge: BridgeConfig) -> list[Change]:
    """Record the ATen/oneDNN/MKL caps the interpreter-start stage set for
    VLLM_BRIDGE_ISA (in the engine core they are inherited, not set)."""
    from vllm_bridge import startup
    from vllm_bridge.device.isa import detect

    cpu_isa = detect()
    if not cpu_isa.switched:
        return []
    return startup_env_changes(
        startup.isa_cap_env_set,
        f"{envs.ISA.name}={cpu_isa.effective}: runs as on a CPU of class "
        f"{cpu_isa.effective} (this one is {cpu_isa.native}); vLLM loads "
        f"{cpu_isa.traits.vllm_kernel_library} and its kernels for that class",
        "isa_switch",
    )


def linear_kernel(vllm_config: VllmConfig, bridge: BridgeConfig) -> list[Change]:
    """Resolve VLLM_BRIDGE_LINEAR_KERNEL=auto for the model's dtype; the
    engine core and workers inherit the resolved value."""
    from vllm_bridge.config.isa_defaults import BRIDGE_LINEAR_OP
    from vllm_bridge.config.isa_defaults import linear_kernel as default_kernel
    from vllm_bridge.device.isa import detect
    from vllm_bridge.ops import linear

    model = vllm_config.model_config
    request = envs.LINEAR_KERNEL.get()
    if request == "bridge" and not linear.available():
        raise BridgeConfigError(
            f"{envs.LINEAR_KERNEL.name}=bridge, but vllm-bridge's kernel could "
            "not be built or loaded (see the warning above, or run `vllm-bridge "
            f"doctor`). Unset {envs.LINEAR_KERNEL.name} or set it to 'vllm'."
        )
    if request != "auto" or model is None:
        return []
    cpu_isa = detect()
    chosen = default_kernel(cpu_isa.effective, model.dtype, linear.available())
    if chosen == "vllm":
        return []
    os.environ[envs.LINEAR_KERNEL.name] = chosen
    return [
        Change(
            f"env.{envs.LINEAR_KERNEL.name}",
            "auto",
            chosen,
            f"{cpu_isa.effective} CPU without bf16 arithmetic: the bf16 linear "
            f"layers run on {BRIDGE_LINEAR_OP} (bf16 weights, float32 "
            "arithmetic) instead of vLLM's oneDNN dispatch, which has no fast "
            "bf16 GEMM here",
            "linear_kernel",
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
    Rule("isa_switch", isa_switch),
    Rule("inductor_cpp_wrapper", inductor_cpp_wrapper),
    Rule("linear_kernel", linear_kernel),
    Rule("quantization_kernels", quantization_kernels),
    Rule("memory_preflight", memory_preflight),
    Rule("kv_cache_budget", kv_cache_budget),
    Rule("thread_binding", thread_binding),
    Rule("rank_binding", rank_binding),
    Rule("ray_executor", ray_executor),
    Rule("omp_spin_wait", omp_spin_wait),
    Rule("shutdown_drain", shutdown_drain),
    Rule("scheduler_class", scheduler_class),
)
