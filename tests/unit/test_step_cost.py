"""The SLO scheduler's step-cost model and chunk sizing, as pure functions
(the engine test is tests/engine/test_llm_slo_scheduler.py)."""

from __future__ import annotations

import numpy as np
import pytest

from vllm_bridge.scheduling.chunk_sizing import (
    COLD_PREFILL_CHUNK,
    MIN_PREFILL_CHUNK,
    prefill_token_budget,
)
from vllm_bridge.scheduling.step_cost import (
    StepCost,
    StepCostModel,
    StepShape,
    nonnegative_least_squares,
)

TRUE_COST = StepCost(
    fixed_s=0.012,
    per_prefill_token_s=0.0004,
    per_decode_seq_s=0.0011,
    per_kv_token_s=0.000002,
)


def synthetic_steps(n: int, seed: int = 0) -> list[tuple[StepShape, float]]:
    """Mixed traffic: decode steps of 1-32 sequences, every fifth step with
    a prompt chunk, times from TRUE_COST with 3 % noise."""
    rng = np.random.default_rng(seed)
    steps = []
    for i in range(n):
        decode = int(rng.integers(1, 33))
        shape = StepShape(
            prefill_tokens=int(rng.integers(16, 1024)) if i % 5 == 0 else 0,
            decode_seqs=decode,
            kv_tokens=decode * int(rng.integers(64, 1024)),
        )
        steps.append((shape, TRUE_COST.predict(shape) * rng.normal(1, 0.03)))
    return steps


def test_not_ready_until_a_prefill_and_a_decode_step_are_seen():
    model = StepCostModel()
    model.record(StepShape(500, 0, 0), 0.2)
    assert not model.ready and model.cost() is None
    model.record(StepShape(0, 0, 0), 0.001)  # an empty step teaches nothing
    assert model.cost() is None
    model.record(StepShape(0, 4, 400), 0.02)
    assert model.ready and model.cost() is not None


def test_fit_recovers_the_cost_of_each_part():
    model = StepCostModel()
    for shape, seconds in synthetic_steps(200):
        model.record(shape, seconds)
    cost = model.cost()
    assert cost.per_prefill_token_s == pytest.approx(
        TRUE_COST.per_prefill_token_s, rel=0.05
    )
    assert cost.per_decode_seq_s == pytest.approx(TRUE_COST.per_decode_seq_s, rel=0.2)
    for shape, seconds in synthetic_steps(50, seed=1):
        assert cost.predict(shape) == pytest.approx(seconds, rel=0.15)


def test_fit_follows_a_change_of_speed():
    """The window forgets: after the machine gets twice as slow (another
    process on the cores), the fit predicts the new times."""
    model = StepCostModel(window=100)
    for shape, seconds in synthetic_steps(100):
        model.record(shape, seconds)
    for shape, seconds in synthetic_steps(100, seed=2):
        model.record(shape, 2 * seconds)
    shape = StepShape(256, 16, 8000)
    assert model.cost().predict(shape) == pytest.approx(
        2 * TRUE_COST.predict(shape), rel=0.1
    )


def test_no_coefficient_is_negative():
    # Times that fall as the prompt grows (noise, a warm cache) would give
    # plain least squares a negative cost per token.
    a = np.array([[1.0, 0.0], [1.0, 100.0], [1.0, 200.0]])
    b = np.array([0.05, 0.04, 0.03])
    x = nonnegative_least_squares(a, b)
    assert (x >= 0).all()
    assert x[1] == 0 and x[0] == pytest.approx(0.04)


def test_budget_fills_the_objective():
    decode, kv, objective = 32, 32 * 500, 0.1003
    chunk = prefill_token_budget(TRUE_COST, decode, kv, objective, room=2048)
    step = StepShape(chunk, decode, kv)
    assert TRUE_COST.predict(step) <= objective
    assert TRUE_COST.predict(StepShape(chunk + 1, decode, kv)) > objective


def test_budget_keeps_the_minimum_chunk_when_decodes_fill_the_objective():
    assert (
        prefill_token_budget(TRUE_COST, 64, 64 * 2000, 0.010, room=2048)
        == MIN_PREFILL_CHUNK
    )


FREE_PROMPT_TOKENS = StepCost(
    fixed_s=0.002, per_prefill_token_s=0.0, per_decode_seq_s=0.0001, per_kv_token_s=0.0
)
"""A fit that found no cost per prompt token (seen on the tiny model,
whose prompt tokens cost microseconds, under load)."""


def test_minimum_chunk_when_decodes_fill_the_objective_and_prompt_tokens_look_free():
    assert prefill_token_budget(FREE_PROMPT_TOKENS, 1, 10, 0.001, room=2048) == (
        MIN_PREFILL_CHUNK
    )


def test_budget_is_the_cold_chunk_when_the_fit_finds_no_cost_per_prompt_token():
    assert prefill_token_budget(FREE_PROMPT_TOKENS, 1, 10, 0.100, room=2048) == (
        COLD_PREFILL_CHUNK
    )


def test_budget_is_vllms_when_no_sequence_is_decoding():
    assert prefill_token_budget(TRUE_COST, 0, 0, 0.010, room=2048) == 2048


def test_budget_is_small_before_the_cost_is_known():
    assert prefill_token_budget(None, 8, 800, 0.100, room=2048) == COLD_PREFILL_CHUNK


@pytest.mark.parametrize("room", [0, 5])
def test_budget_never_exceeds_the_room_left(room):
    assert prefill_token_budget(TRUE_COST, 4, 400, 1.0, room=room) == room


def test_margin_covers_the_slow_steps():
    """One step in ten takes 30 % longer than the rest with the same shape:
    the margin plans for it, so that planned steps stay under the objective."""
    model = StepCostModel()
    steps = [
        (shape, TRUE_COST.predict(shape) * (1.3 if index % 10 == 0 else 1.0))
        for index, (shape, _) in enumerate(synthetic_steps(200))
    ]
    for shape, seconds in steps:
        model.record(shape, seconds)
    cost, margin = model.cost(), model.margin()
    over = [seconds > cost.predict(shape) * margin for shape, seconds in steps]
    assert margin > 1.1
    assert sum(over) <= 0.05 * len(steps)


def test_margin_is_one_for_steps_as_predicted():
    model = StepCostModel()
    for shape, _ in synthetic_steps(100):
        model.record(shape, TRUE_COST.predict(shape))
    assert model.margin() == pytest.approx(1.0)


def test_a_long_spell_of_decoding_keeps_the_cost_of_a_prompt_token():
    """Once the window holds only decode steps, a fit could not see the
    cost of a prompt token (and would let the next long prompt through
    whole): the last fit stands."""
    model = StepCostModel(window=50)
    for shape, seconds in synthetic_steps(50):
        model.record(shape, seconds)
    learned = model.cost().per_prefill_token_s
    for _ in range(60):
        model.record(StepShape(0, 16, 8000), TRUE_COST.predict(StepShape(0, 16, 8000)))
    assert model.cost().per_prefill_token_s == learned
