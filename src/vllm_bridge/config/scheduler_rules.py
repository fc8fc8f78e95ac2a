"""The scheduler rule: vllm-bridge's SLO scheduler when a time-per-output-
token objective is given (scheduling/ holds the scheduler), vLLM's own
otherwise."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_bridge import envs
from vllm_bridge.config.audit import Change
from vllm_bridge.errors import BridgeConfigError

if TYPE_CHECKING:
    from vllm.config import VllmConfig

    from vllm_bridge.config.schema import BridgeConfig

SLO_SCHEDULER = "vllm_bridge.scheduling.slo_scheduler.SloScheduler"
OBJECTIVE = f"tpot_objective_ms (or {envs.TPOT_OBJECTIVE_MS.name})"


def scheduler_class(vllm_config: VllmConfig, bridge: BridgeConfig) -> list[Change]:
    scheduler = vllm_config.scheduler_config
    chosen = scheduler.scheduler_cls
    if bridge.tpot_objective_ms is None:
        if chosen == SLO_SCHEDULER:
            raise BridgeConfigError(
                f"--scheduler-cls {SLO_SCHEDULER} needs a time-per-output-token "
                f"objective: set {OBJECTIVE}, e.g. --additional-config "
                "'{\"tpot_objective_ms\": 100}'."
            )
        return []
    if chosen not in (None, SLO_SCHEDULER):
        name = chosen if isinstance(chosen, str) else chosen.__qualname__
        raise BridgeConfigError(
            f"{OBJECTIVE} = {bridge.tpot_objective_ms:g} needs vllm-bridge's SLO "
            f"scheduler, but --scheduler-cls is {name}: drop one of the two."
        )
    if not scheduler.enable_chunked_prefill:
        raise BridgeConfigError(
            f"{OBJECTIVE} = {bridge.tpot_objective_ms:g} needs chunked prefill "
            "(a step takes only part of a long prompt), which is off for this "
            "engine (--no-enable-chunked-prefill, or a model vLLM's CPU "
            f"platform cannot chunk): enable it or unset {OBJECTIVE}."
        )
    if chosen == SLO_SCHEDULER:
        return []
    scheduler.scheduler_cls = SLO_SCHEDULER
    return [
        Change(
            "scheduler_config.scheduler_cls",
            None,
            SLO_SCHEDULER,
            f"{OBJECTIVE} = {bridge.tpot_objective_ms:g}: each step takes only the "
            "prompt tokens that keep its predicted time under the objective "
            "while sequences are decoding (step cost learned from measured "
            "steps)",
            "scheduler_class",
        )
    ]
