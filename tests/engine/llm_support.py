"""Starting and stopping a real engine once per test module."""

from __future__ import annotations

import gc
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing import connection
from pathlib import Path
from typing import Any

from vllm import LLM, SamplingParams

from tests.conftest import MAX_TOKENS, PROMPTS, REPO, child_environ, signal_thread

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


def side_thread_unblocking(pid: int, signum: int) -> tuple[int, str]:
    """A thread of process ``pid`` other than its main thread that does not
    block ``signum``: one the kernel may pick for a signal sent to the
    process. (id, name)"""
    bit = 1 << (signum - 1)
    for task in sorted(Path(f"/proc/{pid}/task").iterdir(), key=lambda t: int(t.name)):
        tid = int(task.name)
        status = dict(
            line.split(":\t", 1) for line in (task / "status").read_text().splitlines()
        )
        if tid != pid and not int(status["SigBlk"], 16) & bit:
            return tid, status["Name"].strip()
    raise AssertionError(f"no thread of {pid} other than its main one takes {signum}")


def sigterm_on_a_side_thread(llm: LLM, wait_s: float = 60.0) -> dict[str, Any]:
    """Send SIGTERM to one of the engine core's threads other than its main
    thread, as the kernel may do with its client's SIGTERM (the C-level
    handler then runs there, the Python one waits for the main thread),
    and wait for the engine core to end. Its thread's name, and seconds to
    the end or None if it was still running after ``wait_s``."""
    process = llm.llm_engine.engine_core.resources.engine_manager.processes[0]
    tid, name = side_thread_unblocking(process.pid, signal.SIGTERM)
    signal_thread(process.pid, tid, signal.SIGTERM)
    started = time.monotonic()
    ended = connection.wait([process.sentinel], timeout=wait_s)
    seconds = round(time.monotonic() - started, 1) if ended else None
    return {"thread": name, "stopped_after_s": seconds}


def print_result(result: dict[str, Any]) -> None:
    """A child script's result line for its parent, in one write: print()
    writes the text and its newline separately, and vLLM's shutdown, logging
    to stdout from another thread, once landed between the two (a PP=2
    script's RESULT line ended in "... engine manager stopped")."""
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


def generate_in_subprocess(
    model: Path,
    dtype: str = "float32",
    eager: bool = False,
    llm_kwargs: dict[str, Any] | None = None,
    unset: tuple[str, ...] = (),
    sigterm_side_thread: bool = False,
    **env: str,
) -> dict[str, Any]:
    """tests/engine/generate_in_subprocess.py's result, with ``env`` added,
    the variables ``unset`` removed, and ``llm_kwargs`` given to LLM(...).
    ``sigterm_side_thread``: before the script ends, its engine core gets a
    SIGTERM on a thread other than its main one (result
    ``side_thread_sigterm``, see sigterm_on_a_side_thread)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.engine.generate_in_subprocess",
            str(model),
            dtype,
            "eager" if eager else "compiled",
            json.dumps(llm_kwargs or {}),
            *(["sigterm-side-thread"] if sigterm_side_thread else []),
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
        if "shutdown]" in line or "force kill" in line or "Parent process" in line
    )
    return result
