"""SloScheduler: vLLM's v1 scheduler, with each step's token budget sized
so that the step's predicted time stays under the time-per-output-token
objective while sequences are decoding.

vLLM's scheduler fills a step up to ``max_num_batched_tokens`` with prompt
chunks beside the decoding sequences, so one long prompt stalls every
running stream's next token (on 2 cores, a 1,000-token prompt of the 0.5b
preset adds several hundred ms to a step that otherwise takes ~50 ms). Here
the budget of a step is the decoding sequences plus the prefill tokens
chunk_sizing.py allows; everything else (order, preemption, KV allocation,
chunked prefill) is vLLM's own.
"""

from __future__ import annotations

import os
import time
from typing import Any

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.outputs import ModelRunnerOutput

from vllm_bridge.config import schema
from vllm_bridge.config.scheduler_rules import SLO_SCHEDULER
from vllm_bridge.errors import BridgeConfigError
from vllm_bridge.log import get_logger
from vllm_bridge.scheduling.chunk_sizing import prefill_token_budget
from vllm_bridge.scheduling.step_cost import StepCostModel, StepShape

logger = get_logger("scheduler")

LOG_INTERVAL_S = 60.0
"""How often a busy engine logs the fitted step cost."""


class SloScheduler(Scheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Scheduler(vllm_config, kv_cache_config, ...): the objective is
        # checked before vLLM's scheduler allocates anything.
        vllm_config = kwargs["vllm_config"] if "vllm_config" in kwargs else args[0]
        bridge = schema.load(vllm_config.additional_config, os.environ)
        if bridge.tpot_objective_ms is None:
            # Reached only when vllm-bridge's rules did not run (the plugin
            # turned off, the class named with --scheduler-cls).
            raise BridgeConfigError(
                f"{SLO_SCHEDULER} needs a time-per-output-token objective: set "
                "--additional-config '{\"tpot_objective_ms\": N}' or "
                "VLLM_BRIDGE_TPOT_OBJECTIVE_MS."
            )
        super().__init__(*args, **kwargs)
        self.objective_s = bridge.tpot_objective_ms / 1000.0
        self.configured_token_budget = self.max_num_scheduled_tokens
        self.cost_model = StepCostModel()
        self.steps = 0
        self.limited_steps = 0
        """Steps whose token budget the objective made smaller than vLLM's."""
        self._stepping: tuple[SchedulerOutput, StepShape, float] | None = None
        """The step scheduled last, its shape and start, until its output."""
        self._measuring: tuple[StepShape, float] | None = None
        """A finished step whose period ends when the next step starts."""
        self._last_log = time.monotonic()
        logger.info(
            "SLO scheduler: time-per-output-token objective %.1f ms, "
            "at most %d tokens per step",
            bridge.tpot_objective_ms,
            self.configured_token_budget,
        )

    def _token_budget(self) -> int:
        decode_seqs = 0
        kv_tokens = 0
        prompt_waits = len(self.waiting) > 0
        for request in self.running:
            remaining = (
                request.num_tokens_with_spec
                + request.num_output_placeholders
                - request.num_computed_tokens
            )
            if remaining > 1:
                prompt_waits = True
            elif remaining == 1:
                decode_seqs += 1
                kv_tokens += request.num_computed_tokens
        if not prompt_waits:
            return self.configured_token_budget
        prefill = prefill_token_budget(
            self.cost_model.cost(),
            decode_seqs,
            kv_tokens,
            self.objective_s / self.cost_model.margin(),
            room=self.configured_token_budget - decode_seqs,
        )
        return min(self.configured_token_budget, decode_seqs + prefill)

    def _shape(self, output: SchedulerOutput) -> StepShape:
        """What the step computes (read after vLLM's schedule() advanced
        each request's computed tokens by its scheduled tokens)."""
        prefill_tokens = decode_seqs = kv_tokens = 0
        for request_id, tokens in output.num_scheduled_tokens.items():
            request = self.requests[request_id]
            computed_before = request.num_computed_tokens - tokens
            kv_tokens += computed_before
            if tokens == 1 and computed_before >= request.num_prompt_tokens:
                decode_seqs += 1
            else:
                prefill_tokens += tokens
        return StepShape(prefill_tokens, decode_seqs, kv_tokens)

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        started = time.perf_counter()
        if self._measuring is not None:
            # A stream's inter-token gap is the time from one step's start
            # to the next one's (model run, output handling, new requests
            # taken in): that is what the objective bounds.
            shape, previous_start = self._measuring
            self.cost_model.record(shape, started - previous_start)
            self._measuring = None
            self._log_cost()
        budget = self._token_budget()
        self.max_num_scheduled_tokens = budget
        try:
            output = super().schedule(*args, **kwargs)
        finally:
            self.max_num_scheduled_tokens = self.configured_token_budget
        if output.total_num_scheduled_tokens > 0:
            self.steps += 1
            self.limited_steps += budget < self.configured_token_budget
            self._stepping = (output, self._shape(output), started)
        return output

    def update_from_output(
        self,
        scheduler_output: SchedulerOutput,
        model_runner_output: ModelRunnerOutput,
    ) -> Any:
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        # vLLM's CPU engine core steps synchronously, and goes straight on to
        # the next step while requests remain; after an idle wait the period
        # would measure the wait, not the step.
        if self._stepping is not None and self._stepping[0] is scheduler_output:
            _, shape, started = self._stepping
            busy = self.get_num_unfinished_requests() > 0
            self._measuring = (shape, started) if busy else None
            self._stepping = None
        return outputs

    def _log_cost(self) -> None:
        now = time.monotonic()
        if now - self._last_log >= LOG_INTERVAL_S:
            self._last_log = now
            self.log_summary()

    def log_summary(self) -> None:
        cost = self.cost_model.cost()
        if cost is None:
            return
        logger.info(
            "SLO scheduler: step cost %.1f ms + %.3f ms per prompt token + "
            "%.2f ms per decoding sequence + %.5f ms per KV token, steps up "
            "to %.2fx the prediction; %d of %d steps limited by the %.1f ms "
            "objective",
            cost.fixed_s * 1e3,
            cost.per_prefill_token_s * 1e3,
            cost.per_decode_seq_s * 1e3,
            cost.per_kv_token_s * 1e3,
            self.cost_model.margin(),
            self.limited_steps,
            self.steps,
            self.objective_s * 1e3,
        )

    def shutdown(self) -> None:
        self.log_summary()
        super().shutdown()
