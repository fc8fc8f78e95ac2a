"""Stop the API server's output handler before the engine core on an
aborting shutdown, so SIGINT/SIGTERM end `vllm serve` without a traceback."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.patching.spec import Patch

HANDLER_STOP_TIMEOUT_S = 5.0


async def _cancel_and_wait(task: asyncio.Task) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


def _stop_output_handler(engine: Any) -> None:
    handler: asyncio.Task | None = getattr(engine, "output_handler", None)
    if handler is None or handler.done():
        return
    loop = handler.get_loop()
    on_loop_thread = loop.is_running() and getattr(loop, "_thread_id", None) == (
        threading.get_ident()
    )
    if on_loop_thread or not loop.is_running():
        # The handler cannot run again before this synchronous shutdown
        # returns, so cancelling is enough.
        handler.cancel()
        return
    future = asyncio.run_coroutine_threadsafe(_cancel_and_wait(handler), loop)
    with contextlib.suppress(Exception):
        future.result(timeout=HANDLER_STOP_TIMEOUT_S)


def quiet_shutdown(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def shutdown(self: Any, timeout: float | None = None) -> None:
        if not timeout:  # abort mode: nothing left to deliver
            _stop_output_handler(self)
        original(self, timeout)

    return shutdown


PATCH = Patch(
    name="async-llm-quiet-shutdown",
    target="vllm.v1.engine.async_llm:AsyncLLM.shutdown",
    stage="platform",
    kind="wrap",
    new=quiet_shutdown,
    why=(
        "On SIGINT/SIGTERM the API server stops the engine core first and "
        "cancels its output handler last; when the handler sees the engine "
        "core die in between, it logs 'AsyncLLM output_handler failed' with "
        "an EngineDeadError traceback, although the shutdown was requested."
    ),
    how=(
        "In abort mode (shutdown timeout 0, the default) the wrapped "
        "AsyncLLM.shutdown cancels the output handler on its event loop and "
        "waits for it (at most 5 s) before calling the original."
    ),
    upstream=(
        "none yet: to be reported to vLLM (AsyncLLM.shutdown should cancel "
        "output_handler before engine_core.shutdown in abort mode)"
    ),
    remove_when="vLLM's AsyncLLM.shutdown stops the output handler first",
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="710e7c9297477090",
)
