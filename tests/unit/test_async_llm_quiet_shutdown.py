"""The platform-stage patch that stops AsyncLLM's output handler before the
engine core on an aborting shutdown, and drops its failure report on a
draining one.

The race it removes (the handler seeing the engine core die) shows only
sometimes with a real server (tests/engine/test_serve.py covers the real
SIGINT/SIGTERM path); this test makes the ordering deterministic with a
real AsyncLLM.shutdown, a real output-handler task on its own event loop,
and a stand-in engine core that records what it saw: a real engine core
cannot be told to die at a chosen instant.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator

import pytest
from vllm.v1.engine.async_llm import AsyncLLM

from vllm_bridge.patches.catalogue import REGISTRY
from vllm_bridge.patches.platform.async_llm_quiet_shutdown import (
    ASYNC_LLM_LOGGER,
    HANDLER_FAILED_MESSAGE,
    PATCH,
)


class RecordingEngineCore:
    def __init__(self, handler: asyncio.Task) -> None:
        self.handler = handler
        self.handler_done_at_shutdown: bool | None = None

    def shutdown(self, timeout: float | None = None) -> None:
        # Only the first call counts: AsyncLLM.__del__ shuts down again.
        if self.handler_done_at_shutdown is None:
            self.handler_done_at_shutdown = self.handler.done()


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)
    loop.close()


def shutdown_with_handler(loop: asyncio.AbstractEventLoop) -> RecordingEngineCore:
    async def start_handler() -> asyncio.Task:
        return asyncio.create_task(asyncio.sleep(3600))

    handler = asyncio.run_coroutine_threadsafe(start_handler(), loop).result(5)
    engine = object.__new__(AsyncLLM)
    engine.output_handler = handler
    engine.engine_core = RecordingEngineCore(handler)
    AsyncLLM.shutdown(engine, timeout=0)
    return engine.engine_core


def test_handler_is_stopped_before_the_engine_core(loop):
    REGISTRY.apply("platform")
    assert REGISTRY.records()[PATCH.name].status == "applied"
    assert shutdown_with_handler(loop).handler_done_at_shutdown is True


def test_without_the_patch_the_engine_core_stops_first(loop):
    REGISTRY.apply("platform")
    with REGISTRY.reverted(PATCH.name):
        assert shutdown_with_handler(loop).handler_done_at_shutdown is False


class ExitingEngineCore:
    """Stands for an engine core that drains and exits when shut down: the
    output handler then fails as vLLM's does, with its message on vLLM's
    async_llm logger (the real handler needs a live engine-core socket)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.exited = asyncio.Event()

    def shutdown(self, timeout: float | None = None) -> None:
        async def exit_and_let_the_handler_see_it() -> None:
            self.exited.set()
            await asyncio.sleep(0.1)

        asyncio.run_coroutine_threadsafe(
            exit_and_let_the_handler_see_it(), self.loop
        ).result(5)


def drain_with_failing_handler(loop: asyncio.AbstractEventLoop) -> list[str]:
    engine = object.__new__(AsyncLLM)
    engine_core = ExitingEngineCore(loop)
    handler_logger = logging.getLogger(ASYNC_LLM_LOGGER)

    async def output_handler() -> None:
        await engine_core.exited.wait()
        handler_logger.error(HANDLER_FAILED_MESSAGE)

    async def start_handler() -> asyncio.Task:
        return asyncio.create_task(output_handler())

    engine.output_handler = asyncio.run_coroutine_threadsafe(
        start_handler(), loop
    ).result(5)
    engine.engine_core = engine_core
    seen: list[str] = []
    recorder = logging.Handler()
    recorder.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    handler_logger.addHandler(recorder)
    try:
        AsyncLLM.shutdown(engine, timeout=25)
    finally:
        handler_logger.removeHandler(recorder)
    return seen


def test_drain_mode_drops_the_handlers_report_of_the_requested_exit(loop):
    REGISTRY.apply("platform")
    assert drain_with_failing_handler(loop) == []


def test_without_the_patch_a_drain_logs_the_handler_failure(loop):
    REGISTRY.apply("platform")
    with REGISTRY.reverted(PATCH.name):
        assert drain_with_failing_handler(loop) == [HANDLER_FAILED_MESSAGE]
