"""Starting and stopping a real engine once per test module."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from vllm import LLM, SamplingParams

from tests.conftest import MAX_TOKENS, PROMPTS, REPO, child_environ

# `vllm serve`'s scheduler defaults (LLM's are 4096 and 256): they size the
# compiled graph, so a server started after an LLM with these sizes (same
# model, dtype and quantization) loads the graph the LLM compiled from vLLM's
# cache instead of compiling its own (about 20 s of the suite each).
SERVE_SCHEDULER_DEFAULTS = {"max_num_batched_tokens": 2048, "max_num_seqs": 128}
AOT_CACHE_HIT = "Directly load AOT compilation"


def greedy(llm: LLM) -> list[list[int]]:
    # min_tokens mirrors min_new_tokens on the Hugging Face side: both keep
    # EOS from ending a sequence early, so all 8 x 32 tokens are compared.
    params = SamplingParams(
        temperature=0.0, max_tokens=MAX_TOKENS, min_tokens=MAX_TOKENS
    )
    outputs = llm.generate(PROMPTS, params, use_tqdm=False)
    return [list(output.outputs[0].token_ids) for output in outputs]


@contextmanager
def running_llm(model: Path, **kwargs: Any) -> Iterator[LLM]:
    llm = LLM(model=str(model), **kwargs)
    try:
        yield llm
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()


def kernel_calls(llm: LLM) -> dict[str, int]:
    """Operators the (first) worker ran while generating (names -> call
    counts)."""
    llm.collective_rpc("bridge_start_op_profile")
    greedy(llm)
    # The first worker's (all workers run the same operators).
    return llm.collective_rpc("bridge_stop_op_profile")[0]


def generate_in_subprocess(
    model: Path,
    dtype: str = "float32",
    eager: bool = False,
    llm_kwargs: dict[str, Any] | None = None,
    unset: tuple[str, ...] = (),
    **env: str,
) -> dict[str, Any]:
    """tests/engine/generate_in_subprocess.py's result, with ``env`` added,
    the variables ``unset`` removed, and ``llm_kwargs`` given to LLM(...)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.engine.generate_in_subprocess",
            str(model),
            dtype,
            "eager" if eager else "compiled",
            json.dumps(llm_kwargs or {}),
        ],
        cwd=REPO,
        env=child_environ(env, unset),
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    result["force_killed"] = "force killing" in proc.stdout + proc.stderr
    # how its engine stopped
    result["log_tail"] = "\n".join(
        line
        for line in (proc.stdout + proc.stderr).splitlines()
        if "shutdown]" in line or "force" in line or "Parent process" in line
    )
    return result
