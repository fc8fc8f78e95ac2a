"""Run LLM(model) in a fresh process and print its greedy tokens, the
worker's report and the executor as JSON.

A fresh process serves two tests: an in-process engine
(VLLM_ENABLE_V1_MULTIPROCESSING=0, set by the caller) initialises
torch.distributed in the process that runs it, which would outlive the test
module; and a real second start of a compiled model keeps nothing compiled
in memory from the first.
"""

from __future__ import annotations

import json
import sys

from tests.engine.llm_support import greedy, running_llm

if __name__ == "__main__":
    with running_llm(sys.argv[1], dtype="float32") as llm:
        tokens = greedy(llm)
        (report,) = llm.collective_rpc("bridge_report")
        executor = (
            llm.llm_engine.vllm_config.parallel_config.distributed_executor_backend
        )
    print(
        "RESULT "
        + json.dumps({"tokens": tokens, "report": report, "executor": executor})
    )
