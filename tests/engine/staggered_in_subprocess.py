"""Run LLM(model) in this process with a time-per-output-token objective,
let the first prompt start decoding, then send the other prompts while it
decodes, and print, as JSON: every prompt's greedy tokens, the scheduler's
class, its step counts, fitted cost and the shapes of the steps it measured.

    python -m tests.engine.staggered_in_subprocess MODEL OBJECTIVE_MS

The engine core runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, set
by the caller) so that its scheduler can be read; a fresh process because
an in-process engine initialises torch.distributed, which would outlive the
test module. LLM.generate sends all prompts at once, before any sequence
decodes: the arrivals during decoding that the objective protects need the
engine's own add_request/step.
"""

from __future__ import annotations

import dataclasses
import sys

from vllm import SamplingParams

from tests.conftest import MAX_TOKENS, PROMPTS
from tests.engine.llm_support import print_result, running_llm

# Steps the first prompt runs alone: its prefill, then decode steps, so the
# scheduler has measured both kinds before the others arrive.
STEPS_ALONE = 3

if __name__ == "__main__":
    objective_ms = float(sys.argv[2])
    params = SamplingParams(
        temperature=0.0, max_tokens=MAX_TOKENS, min_tokens=MAX_TOKENS
    )
    with running_llm(
        sys.argv[1],
        dtype="float32",
        enforce_eager=True,
        additional_config={"tpot_objective_ms": objective_ms},
    ) as llm:
        engine = llm.llm_engine
        engine.add_request("0", PROMPTS[0], params)
        tokens: dict[int, list[int]] = {}
        for step in range(10_000):
            if step == STEPS_ALONE:
                for index, prompt in enumerate(PROMPTS[1:], start=1):
                    engine.add_request(str(index), prompt, params)
            for output in engine.step():
                if output.finished:
                    tokens[int(output.request_id)] = list(output.outputs[0].token_ids)
            if len(tokens) == len(PROMPTS):
                break
        scheduler = engine.engine_core.engine_core.scheduler
        cost = scheduler.cost_model.cost()
        result = {
            "tokens": [tokens[index] for index in range(len(PROMPTS))],
            "scheduler": type(scheduler).__qualname__,
            "steps": scheduler.steps,
            "limited_steps": scheduler.limited_steps,
            "cost": dataclasses.asdict(cost) if cost else None,
            "shapes": [
                dataclasses.asdict(shape)
                for shape, _ in scheduler.cost_model.recorded()
            ],
        }
    print_result(result)
