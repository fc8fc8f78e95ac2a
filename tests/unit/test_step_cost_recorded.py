"""The step-cost model on step times recorded by the SLO scheduler on a
real engine (the 0.5b preset, by benchmarks/mix_or_separate.py --record):
the fit predicts steps it has not seen, and the chunk it then allows keeps
a step under the objective. The file holds another machine's times; the
test checks the model, not this machine."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from vllm_bridge.scheduling.chunk_sizing import prefill_token_budget
from vllm_bridge.scheduling.step_cost import StepCostModel, StepShape

RECORDED = Path(__file__).parent / "data" / "steps_0.5b.json"


@pytest.fixture(scope="module")
def steps() -> list[tuple[StepShape, float]]:
    data = json.loads(RECORDED.read_text())["steps"]
    return [
        (
            StepShape(s["prefill_tokens"], s["decode_seqs"], s["kv_tokens"]),
            s["seconds"],
        )
        for s in data
    ]


def test_recording_has_decode_steps_with_and_without_a_prompt(steps):
    with_prompt = [shape for shape, _ in steps if shape.prefill_tokens > 0]
    assert {shape.decode_seqs > 0 for shape, _ in steps} == {True}
    assert 0 < len(with_prompt) < len(steps)
    assert len({shape.prefill_tokens for shape in with_prompt}) > 10


def test_fit_predicts_unseen_steps(steps):
    """Fitted on every other step, the model predicts the rest to within
    15 % (median), and the steps with a prompt to within 25 %."""
    model = StepCostModel()
    for shape, seconds in steps[::2]:
        model.record(shape, seconds)
    cost = model.cost()
    held_out = steps[1::2]
    errors = [abs(cost.predict(shape) / seconds - 1) for shape, seconds in held_out]
    assert statistics.median(errors) < 0.15
    with_prompt = [
        abs(cost.predict(shape) / seconds - 1)
        for shape, seconds in held_out
        if shape.prefill_tokens > 0
    ]
    assert statistics.median(with_prompt) < 0.25


def test_allowed_chunk_keeps_the_step_under_the_objective(steps):
    model = StepCostModel()
    for shape, seconds in steps:
        model.record(shape, seconds)
    cost = model.cost()
    decode_alone = statistics.median(
        seconds for shape, seconds in steps if shape.prefill_tokens == 0
    )
    objective = 2 * decode_alone
    for decode_seqs in (1, 8, 16):
        kv = decode_seqs * 300
        chunk = prefill_token_budget(
            cost, decode_seqs, kv, objective / model.margin(), room=2048
        )
        assert 0 < chunk < 2048
        assert cost.predict(StepShape(chunk, decode_seqs, kv)) * model.margin() <= (
            objective
        )
