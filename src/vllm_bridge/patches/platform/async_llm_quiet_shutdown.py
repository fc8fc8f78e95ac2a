"""SIGINT/SIGTERM end `vllm serve` without a traceback: on an aborting
shutdown the API server's output handler stops before the engine core; on a
draining one, the handler's report of the engine core's requested exit is
dropped."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.patching.spec import Patch

HANDLER_STOP_TIMEOUT_S = 5.0
# What AsyncLLM's output handler logs when the engine core it reads from
# has exited (vllm/v1/engine/async_llm.py).
HANDLER_FAILED_MESSAGE = "AsyncLLM output_handler failed."
ASYNC_LLM_LOGGER = "vllm.v1.engine.async_llm"


class RequestedExitFilter(logging.Filter):
    """Drops the output handler's failure record while a shutdown that the
    user asked for is in progress: the engine core's exit is then expected,
    and every in-flight request has been delivered (drain) or aborted."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != HANDLER_FAILED_MESSAGE


def _abort_in_flight(engine: Any) -> None:
    """End every in-flight request with an abort output: with the handler
    stopped nothing else would end their streams, and the HTTP server would
    wait for them forever."""
    processor = getattr(engine, "output_processor", None)
    if processor is not None and processor.request_states:
        processor.abort_requests(list(processor.request_states), internal=True)


async def _cancel_and_abort(task: asyncio.Task, engine: Any) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    _abort_in_flight(engine)


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
        _abort_in_flight(engine)
        return
    # The output processor belongs to the loop's thread.
    future = asyncio.run_coroutine_threadsafe(_cancel_and_abort(handler, engine), loop)
    with contextlib.suppress(Exception):
        future.result(timeout=HANDLER_STOP_TIMEOUT_S)


def quiet_shutdown(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def shutdown(self: Any, timeout: float | None = None) -> None:
        if not timeout:  # abort mode: nothing left to deliver
            _stop_output_handler(self)
            original(self, timeout)
            return
        # Drain mode: the handler must keep delivering until the engine core
        # has finished the in-flight requests and exited.
        handler_logger = logging.getLogger(ASYNC_LLM_LOGGER)
        requested_exit = RequestedExitFilter()
        handler_logger.addFilter(requested_exit)
        try:
            original(self, timeout)
            _stop_output_handler(self)
        finally:
            handler_logger.removeFilter(requested_exit)

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
        "an EngineDeadError traceback, although the shutdown was requested "
        "(in drain mode always: the engine core exits once drained)."
    ),
    how=(
        "In abort mode (shutdown timeout 0) the wrapped AsyncLLM.shutdown "
        "cancels the output handler on its event loop and waits for it (at "
        "most 5 s), ends the in-flight requests with an abort output (their "
        "streams close), then calls the original. In drain mode it calls the "
        "original with a filter on vLLM's async_llm logger that drops the "
        "handler's 'output_handler failed' record, then stops the handler."
    ),
    upstream=(
        "none yet: to be reported to vLLM (AsyncLLM.shutdown should cancel "
        "output_handler before engine_core.shutdown in abort mode)"
    ),
    remove_when="vLLM's AsyncLLM.shutdown stops the output handler first",
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="710e7c9297477090",
)
