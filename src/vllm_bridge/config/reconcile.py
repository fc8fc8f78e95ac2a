"""The reconciliation of a user's VllmConfig with the CPU: vllm-bridge's
rules around vLLM's own CPU reconciliation, strict mode, and the audit.

Runs on every call of ``check_and_update_config``: in the main process,
and again in the engine-core process on the already-updated config, where
each rule must find nothing left to change (idempotence). In strict mode a
change of a value the user set is refused instead of made.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from vllm_bridge import envs
from vllm_bridge.config import schema
from vllm_bridge.config.audit import Change, report, show
from vllm_bridge.config.builtin_audit import (
    BUILTIN_CPU_CHANGES,
    check_compile_mode,
    option_value,
    run_builtin,
)
from vllm_bridge.config.rules import (
    AFTER_BUILTIN,
    BEFORE_BUILTIN,
    SPINCOUNT_ENV,
    THREADS_BIND_ENV,
    Rule,
)
from vllm_bridge.config.schema import BridgeConfig
from vllm_bridge.errors import BridgeConfigError
from vllm_bridge.log import get_logger

if TYPE_CHECKING:
    from vllm.config import VllmConfig

logger = get_logger("config")


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
        f"env.{envs.LINEAR_KERNEL.name}",
        "model_config.dtype",
    ]
    return {option: show(option_value(vllm_config, option)) for option in options}


def reconcile(
    vllm_config: VllmConfig, builtin: Callable[[VllmConfig], None]
) -> list[Change]:
    """Run the rules around vLLM's built-in CPU reconciliation ``builtin``.

    The plugin config is read first, so that bad input fails before any
    option changes. In strict mode, changes of options the user set are
    refused: the error ends start-up before the engine is built."""
    bridge = schema.load(vllm_config.additional_config, os.environ)
    changes = _run(BEFORE_BUILTIN, vllm_config, bridge)
    changes += run_builtin(vllm_config, builtin)
    check_compile_mode(vllm_config, changes)
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
