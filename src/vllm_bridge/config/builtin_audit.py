"""What vLLM's own CPU reconciliation (``CpuPlatform.check_and_update_config``)
changes, recorded in the audit so that every change shows, with its reason
and whether the value came from the user."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vllm_bridge.config.audit import Change, show

if TYPE_CHECKING:
    from vllm.config import VllmConfig

RULE = "vllm_cpu_platform"


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


def option_value(vllm_config: VllmConfig, option: str) -> object:
    """``section.field`` of the config, or ``env.NAME`` of the environment."""
    section, field = option.split(".")
    if section == "env":
        return os.environ.get(field)
    value = getattr(getattr(vllm_config, section), field)
    return list(value) if isinstance(value, list) else value


def run_builtin(
    vllm_config: VllmConfig, builtin: Callable[[VllmConfig], None]
) -> list[Change]:
    before = {
        option: option_value(vllm_config, option) for option in BUILTIN_CPU_CHANGES
    }
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
            RULE,
            user_set=user_set[option],
        )
        for option, entry in BUILTIN_CPU_CHANGES.items()
        if (after := option_value(vllm_config, option)) != before[option]
    ]


def check_compile_mode(vllm_config: VllmConfig, changes: list[Change]) -> None:
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
