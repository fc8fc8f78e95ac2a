"""Run LLM(model) in a fresh process and print, as JSON: its greedy tokens,
the worker's report, the executor, the operators the worker ran while
generating, and the changes the main process recorded. ``report`` is the
first worker's report, ``reports`` every worker's.

A fresh process serves several tests: an in-process engine
(VLLM_ENABLE_V1_MULTIPROCESSING=0, set by the caller) initialises
torch.distributed in the process that runs it, which would outlive the test
module; an LLM(...) script's exit is what a user's script does; and the ISA
switch (VLLM_BRIDGE_ISA) acts only from interpreter start.

    python -m tests.engine.generate_in_subprocess \
        MODEL [DTYPE [eager [KWARGS [sigterm-side-thread]]]]

DTYPE defaults to float32 (the reference's); ``auto`` lets vllm-bridge and
vLLM choose. ``eager`` adds ``enforce_eager=True``; KWARGS, a JSON object,
more arguments of LLM(...). The result also counts the scheduler's
preemptions. ``sigterm-side-thread`` stops the engine core with a SIGTERM
to one of its threads other than the main one before the script ends.
"""

from __future__ import annotations

import json
import sys

from tests.engine.llm_support import (
    greedy,
    kernel_calls,
    print_result,
    running_llm,
    sigterm_on_a_side_thread,
)
from vllm_bridge.config import audit

if __name__ == "__main__":
    dtype = sys.argv[2] if len(sys.argv) > 2 else "float32"
    eager = sys.argv[3:4] == ["eager"]
    kwargs = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    side_thread_sigterm = sys.argv[5:6] == ["sigterm-side-thread"]
    with (
        audit.capture() as changes,
        running_llm(
            sys.argv[1],
            dtype=dtype,
            enforce_eager=eager,
            disable_log_stats=False,
            **kwargs,
        ) as llm,
    ):
        tokens = greedy(llm)
        preemptions = sum(
            metric.value
            for metric in llm.get_metrics()
            if metric.name == "vllm:num_preemptions"
        )
        calls = kernel_calls(llm)
        reports = llm.collective_rpc("bridge_report")
        executor = (
            llm.llm_engine.vllm_config.parallel_config.distributed_executor_backend
        )
        stop = sigterm_on_a_side_thread(llm) if side_thread_sigterm else None
    result = {
        "tokens": tokens,
        "report": reports[0],
        "reports": reports,
        "executor": executor,
        "calls": calls,
        "preemptions": preemptions,
        "side_thread_sigterm": stop,
        "changes": {
            c.option: [audit.show(c.requested), audit.show(c.applied)] for c in changes
        },
    }
    print_result(result)
