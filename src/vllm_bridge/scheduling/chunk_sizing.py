"""How many prefill tokens a step may take under a time-per-output-token
objective: as many as the predicted step time leaves room for, never
fewer than ``MIN_PREFILL_CHUNK`` (so a waiting prompt always advances)."""

from __future__ import annotations

from vllm_bridge.scheduling.step_cost import StepCost, StepShape

MIN_PREFILL_CHUNK = 16
"""Prompt tokens every step may take, even when the decoding sequences
alone fill the objective: a prompt of P tokens then starts decoding
within ceil(P / 16) steps, however loaded the engine is."""

COLD_PREFILL_CHUNK = 64
"""Prompt tokens a step beside decoding sequences may take before the cost
model has seen a prefill and a decode step: small enough not to stall the
decoders, large enough to measure the cost of a prompt token."""


def prefill_token_budget(
    cost: StepCost | None,
    decode_seqs: int,
    kv_tokens: int,
    objective_s: float,
    room: int,
) -> int:
    """Prefill tokens for a step that decodes ``decode_seqs`` sequences
    reading ``kv_tokens`` of context, at most ``room`` (what vLLM's own
    token budget leaves after the decodes)."""
    if room <= 0:
        return 0
    if decode_seqs == 0:
        # No sequence is generating: no token's latency to protect.
        return room
    if cost is None:
        return min(room, COLD_PREFILL_CHUNK)
    spare_s = objective_s - cost.predict(StepShape(0, decode_seqs, kv_tokens))
    if spare_s <= 0:
        return min(room, MIN_PREFILL_CHUNK)
    if cost.per_prefill_token_s <= 0:
        # The fit found no cost per prompt token (on a tiny model a token
        # costs microseconds, lost in the noise): it cannot size a chunk,
        # and a whole prompt at once could still overrun the objective.
        return min(room, COLD_PREFILL_CHUNK)
    chunk = int(spare_s / cost.per_prefill_token_s)
    return min(room, max(MIN_PREFILL_CHUNK, chunk))
